// What the caller experienced of each turn, measured on this page's own clock and reported to
// the server as client.turn (docs/protocol.md): from sending the frame that holds the end of
// speech the server's VAD heard (vad.speech_stopped's audio_ms) to the turn's first reply
// frame received, and to its first sample played. The server never compares its clock with
// ours: it takes these two durations and splits the wait into transport, inference,
// application and playback (docs/observability.md).

export const CLIENT = "voxpipe-web/0.1.0";

// Bounds: caller frames remembered with their send time (30 s of 20 ms frames), turns timed
// at once. Policy: forget the oldest.
const MAX_SENDS = 1500;
const MAX_TURNS = 16;

export class TurnTiming {
  /**
   * @param {number} inputRate the call's input_sample_rate
   * @param {(report: object) => void} report sends one client.turn
   * @param {() => number} now ms on one monotonic clock (performance.now)
   */
  constructor(inputRate, report, now = () => performance.now()) {
    this.rate = inputRate;
    this.report = report;
    this.now = now;
    this.sends = []; // {end, at}: a caller frame's end in the call's inbound stream, and when it left
    this.turns = new Map(); // turn id -> {speechEnd, received, played}
  }

  /** A frame of caller audio that ends at sample `end` of the inbound stream left now. */
  sent(end) {
    this.sends.push({ end, at: this.now() });
    if (this.sends.length > MAX_SENDS) this.sends.shift();
  }

  /** vad.speech_stopped: the turn's speech ended at `audioMs` of the inbound audio; the frame
   * holding the last sample before it is the one whose arrival the server timed. */
  speechStopped(turnId, audioMs) {
    if (!turnId) return; // 0: a backchannel, not a turn
    const sample = Math.round((audioMs * this.rate) / 1000);
    const frame = this.sends.find((s) => s.end >= sample);
    if (!frame) return;
    this.turns.set(turnId, { speechEnd: frame.at, received: null });
    while (this.turns.size > MAX_TURNS) this.turns.delete(this.turns.keys().next().value);
  }

  /** A reply frame of `turnId` arrived now. */
  received(turnId) {
    const turn = this.turns.get(turnId);
    if (turn && turn.received === null) turn.received = this.now();
  }

  /** The first sample of `turnId` began to play at `playedAt` (same clock): report the turn
   * once. Returns the caller's voice-to-voice in ms, or null when the turn was not timed. */
  played(turnId, playedAt) {
    const turn = this.turns.get(turnId);
    if (!turn || turn.received === null) return null;
    this.turns.delete(turnId);
    const received = turn.received - turn.speechEnd;
    const played = Math.max(received, playedAt - turn.speechEnd);
    const ms = (value) => Math.round(value * 10) / 10;
    this.report({
      type: "client.turn",
      turn_id: turnId,
      first_audio_received_ms: ms(received),
      first_audio_played_ms: ms(played),
      client: CLIENT,
    });
    return ms(played);
  }
}

/** When a sample the audio thread rendered at context time `contextTime` (s) reaches the
 * speaker, in performance.now() ms: the browser's own output timestamp when it has one, else
 * now plus the latencies it states. */
export function playedAt(context, contextTime) {
  const stamp = context.getOutputTimestamp?.();
  if (stamp && stamp.performanceTime > 0) {
    return stamp.performanceTime + (contextTime - stamp.contextTime) * 1000;
  }
  return performance.now() + ((context.baseLatency || 0) + (context.outputLatency || 0)) * 1000;
}
