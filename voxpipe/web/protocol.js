// The native voice protocol (docs/protocol.md) over one WebSocket: encode and decode only.
//
// Text messages are JSON events; binary messages are PCM16 caller audio out, and
// [seq uint32 LE | turn_id uint32 LE | PCM16 LE] reply audio in.

export const AUDIO_HEADER_BYTES = 8;
// Bound on audio waiting in the socket: past this the network is not keeping up, and
// older speech is worth more than newer to the turn in progress. Policy: drop new frames.
const MAX_BUFFERED_BYTES = 1 << 20;

/** The /v1/voice URL next to this page, carrying the page's own ?token= on, and the
 * session id when given: a load balancer routes every connection of a call on it. */
export function voiceUrl(pageUrl, sessionId) {
  const page = new URL(pageUrl);
  const url = new URL("v1/voice", page);
  url.protocol = page.protocol === "https:" ? "wss:" : "ws:";
  url.search = "";
  const token = page.searchParams.get("token");
  if (token) url.searchParams.set("token", token);
  if (sessionId) url.searchParams.set("session_id", sessionId);
  return url.toString();
}

/** Why a connection did not start a session: the typed `error` the server sent first, or
 * the close code when it closed (or could not be reached: 1006) without one. */
export class OpenFailed extends Error {
  constructor(message, closeCode, error) {
    super(message);
    this.name = "OpenFailed";
    this.closeCode = closeCode; // 0 when an error event came first
    this.error = error; // {code, message} or null
  }
}

/** One reply frame: its sequence number, the turn it answers and its samples. */
export function decodeAudioFrame(buffer) {
  if (buffer.byteLength < AUDIO_HEADER_BYTES || buffer.byteLength % 2) {
    throw new Error(`bad reply frame of ${buffer.byteLength} bytes`);
  }
  const header = new DataView(buffer, 0, AUDIO_HEADER_BYTES);
  return {
    seq: header.getUint32(0, true),
    turnId: header.getUint32(4, true),
    pcm: new Int16Array(buffer, AUDIO_HEADER_BYTES),
  };
}

export class VoiceConnection {
  /**
   * @param {string} url ws(s)://…/v1/voice
   * @param {{onEvent: (e: object) => void, onAudio: (f: object) => void,
   *          onClose: (code: number, reason: string) => void}} handlers
   */
  constructor(url, handlers, counts = null) {
    this.url = url;
    this.handlers = handlers;
    this.ws = null;
    // Shared by the connections of one call when given, so the page counts the whole call.
    this.counts = counts ?? {
      framesSent: 0,
      framesDropped: 0,
      framesReceived: 0,
      badFrames: 0,
      acksSent: 0,
    };
  }

  /** Connect and start the session; resolves with session.started, rejects with
   * OpenFailed on an error before it, a close, or no answer within `timeoutMs`. */
  open(start, timeoutMs = 15000) {
    return new Promise((resolve, reject) => {
      let started = false;
      const fail = (failure) => {
        clearTimeout(timer);
        if (!started) reject(failure);
        started = true; // settled: later events go to the handlers only
      };
      const timer = setTimeout(() => {
        fail(new OpenFailed(`no answer from the server in ${timeoutMs} ms`, 0, null));
        this.abandon();
      }, timeoutMs);
      const ws = new WebSocket(this.url);
      ws.binaryType = "arraybuffer";
      this.ws = ws;
      ws.onopen = () => ws.send(JSON.stringify({ type: "session.start", ...start }));
      ws.onmessage = (message) => {
        if (typeof message.data !== "string") {
          let frame;
          try {
            frame = decodeAudioFrame(message.data);
          } catch {
            this.counts.badFrames++; // skipped: one bad frame must not end the call
            return;
          }
          this.counts.framesReceived++;
          this.handlers.onAudio(frame);
          return;
        }
        const event = JSON.parse(message.data);
        if (!started && event.type === "session.started") {
          clearTimeout(timer);
          started = true;
          resolve(event);
        } else if (!started && event.type === "error") {
          fail(new OpenFailed(`${event.code}: ${event.message}`, 0, event));
        }
        this.handlers.onEvent(event);
      };
      ws.onclose = (close) => {
        const why = close.reason ? `: ${close.reason}` : "";
        fail(new OpenFailed(`connection closed (${close.code})${why}`, close.code, null));
        this.handlers.onClose(close.code, close.reason);
      };
    });
  }

  /** Give a connection up without waiting for it: its handlers go quiet at once, and the
   * close carries no code, which the server takes as a dropped line, not a hang-up. A dead
   * path would otherwise hold the browser's closing handshake for a minute. */
  abandon() {
    this.handlers = { onEvent() {}, onAudio() {}, onClose() {} };
    this.ws?.close();
  }

  get isOpen() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }

  send(event) {
    if (this.isOpen) this.ws.send(JSON.stringify(event));
  }

  /** One frame of caller audio (an ArrayBuffer of PCM16 at the declared input rate):
   * "sent", "dropped" (the socket is over its bound; with `bounded` false, as for a resend
   * whose size the caller bounds, it is sent anyway) or "closed". */
  sendAudio(buffer, bounded = true) {
    if (!this.isOpen) return "closed";
    if (bounded && this.ws.bufferedAmount > MAX_BUFFERED_BYTES) {
      this.counts.framesDropped++;
      return "dropped";
    }
    this.ws.send(buffer);
    this.counts.framesSent++;
    return "sent";
  }

  ack(seq) {
    this.send({ type: "playback.ack", seq });
    this.counts.acksSent++;
  }

  /** Hang up: the server cancels any reply in flight and closes with 1000. */
  close() {
    if (this.isOpen) this.send({ type: "session.end" });
    else if (this.ws) this.ws.close();
  }
}
