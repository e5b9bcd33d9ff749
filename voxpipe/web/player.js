// Reply playback: frames go to the "voxpipe-playback" worklet, which plays them gap-free
// and says which have finished (acks tell the server what the caller has heard) and when
// each turn's first sample was rendered (the page times the caller's wait with it).

// docs/protocol.md: "send one every 100–200 ms while a reply plays".
const ACK_INTERVAL_MS = 150;

export class Player {
  /**
   * @param {AudioContext} context
   * @param {(seq: number) => void} ack sends playback.ack for every frame up to seq
   * @param {(turnId: number, contextTime: number) => void} [started] a turn's first sample
   *   was rendered at contextTime (s, the AudioContext's clock)
   */
  constructor(context, ack, started = null) {
    this.ack = ack;
    this.started = started;
    this.node = new AudioWorkletNode(context, "voxpipe-playback", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { maxBufferMs: 5000 },
    });
    this.node.connect(context.destination);
    this.stats = { played: 0, lastSeq: 0, underruns: 0, dropped: 0, cleared: 0, queuedMs: 0 };
    this.acked = 0;
    this.lastAckAt = 0;
    this.node.port.onmessage = (event) => this.onPlayed(event.data);
  }

  /** One decoded reply frame ({seq, turnId, pcm: Int16Array}). */
  push(frame) {
    const samples = new Float32Array(frame.pcm.length);
    for (let i = 0; i < samples.length; i++) samples[i] = frame.pcm[i] / 0x8000;
    this.node.port.postMessage(
      { type: "frame", seq: frame.seq, turnId: frame.turnId, samples },
      [samples.buffer],
    );
  }

  /** Barge-in: drop everything not yet played, now. */
  clear() {
    this.node.port.postMessage({ type: "clear" });
  }

  /** Ask for the counters now. Messages reach the worklet in order, so the answer also says
   * that every frame pushed before it has arrived. */
  report() {
    this.node.port.postMessage({ type: "report" });
  }

  onPlayed(report) {
    if (report.type === "started") {
      this.started?.(report.turnId, report.at);
      return;
    }
    this.stats = report;
    const now = performance.now();
    const due = report.idle || now - this.lastAckAt >= ACK_INTERVAL_MS;
    if (report.lastSeq > this.acked && due) {
      this.acked = report.lastSeq;
      this.lastAckAt = now;
      this.ack(report.lastSeq);
    }
  }

  close() {
    this.node.disconnect();
  }
}
