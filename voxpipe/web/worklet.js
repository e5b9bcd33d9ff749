// The audio-thread half of the page: two AudioWorklet processors.
//
// "capture" cuts the microphone into 20 ms PCM16 frames at the AudioContext rate (the server
// resamples any rate 8000..48000 Hz itself, with a better filter than a browser loop could).
// "playback" plays reply frames back to back from a bounded queue, drops it all at once on
// clear (barge-in), and reports each frame's seq as its last sample is played, so the page
// can tell the server exactly what the caller heard; and when each turn's first sample is
// rendered (its context time), so the page can time what the caller waited.

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const frameMs = options.processorOptions?.frameMs ?? 20;
    this.frame = new Int16Array(Math.round((sampleRate * frameMs) / 1000));
    this.filled = 0;
    this.running = true;
    this.port.onmessage = (event) => {
      if (event.data === "stop") this.running = false;
    };
  }

  process(inputs) {
    const channels = inputs[0];
    if (!channels || channels.length === 0) return this.running;
    const n = channels[0].length;
    for (let i = 0; i < n; i++) {
      let s = 0;
      for (const channel of channels) s += channel[i];
      s = Math.max(-1, Math.min(1, s / channels.length)); // mono downmix, clipped
      this.frame[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === this.frame.length) {
        const length = this.frame.length; // read before the transfer empties the array
        this.port.postMessage(this.frame.buffer, [this.frame.buffer]); // moved, not copied
        this.frame = new Int16Array(length);
        this.filled = 0;
      }
    }
    return this.running;
  }
}

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const maxMs = options.processorOptions?.maxBufferMs ?? 5000;
    // Bound: the server paces replies ~400 ms ahead, so a queue this long means the audio
    // thread fell behind; policy: drop the oldest frames (counted in "dropped").
    this.maxSamples = Math.round((sampleRate * maxMs) / 1000);
    this.queue = []; // {seq, turnId, samples: Float32Array, offset}
    this.queued = 0;
    this.stats = { played: 0, lastSeq: 0, underruns: 0, dropped: 0, cleared: 0 };
    this.starved = false; // the queue ran dry in the middle of a reply
    this.lastTurn = 0;
    this.startedTurn = 0; // the last turn whose first sample was rendered
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  onMessage(message) {
    if (message.type === "frame") {
      if (this.starved && message.turnId === this.lastTurn) this.stats.underruns++;
      this.starved = false;
      this.lastTurn = message.turnId;
      this.queue.push({ seq: message.seq, turnId: message.turnId, samples: message.samples, offset: 0 });
      this.queued += message.samples.length;
      while (this.queued > this.maxSamples && this.queue.length > 1) {
        const old = this.queue.shift();
        this.queued -= old.samples.length - old.offset;
        this.stats.dropped++;
      }
    } else if (message.type === "clear") {
      this.stats.cleared += this.queue.length;
      this.queue = [];
      this.queued = 0;
      this.starved = false;
      this.report(true);
    } else if (message.type === "report") {
      this.report(this.queue.length === 0);
    }
  }

  report(idle) {
    const queuedMs = (this.queued * 1000) / sampleRate;
    this.port.postMessage({ type: "played", idle, queuedMs, ...this.stats });
  }

  process(_inputs, outputs) {
    const out = outputs[0];
    const mono = out[0];
    let i = 0;
    let finished = false;
    while (i < mono.length && this.queue.length > 0) {
      const frame = this.queue[0];
      if (frame.offset === 0 && frame.turnId !== this.startedTurn) {
        this.startedTurn = frame.turnId;
        const at = currentTime + i / sampleRate;
        this.port.postMessage({ type: "started", turnId: frame.turnId, seq: frame.seq, at });
      }
      const n = Math.min(mono.length - i, frame.samples.length - frame.offset);
      mono.set(frame.samples.subarray(frame.offset, frame.offset + n), i);
      i += n;
      frame.offset += n;
      this.queued -= n;
      if (frame.offset === frame.samples.length) {
        this.queue.shift();
        this.stats.played++;
        this.stats.lastSeq = frame.seq;
        finished = true;
      }
    }
    mono.fill(0, i);
    for (let c = 1; c < out.length; c++) out[c].set(mono);
    const idle = this.queue.length === 0;
    if (finished && idle) this.starved = true;
    if (finished) this.report(idle);
    return true;
  }
}

registerProcessor("voxpipe-capture", CaptureProcessor);
registerProcessor("voxpipe-playback", PlaybackProcessor);
