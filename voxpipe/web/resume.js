// A call that outlives its connection (docs/protocol.md, "Reconnecting").
//
// A dropped connection is not a hang-up: the server keeps the session resume_grace_s (30 s
// by default) for a session.start with the same id and a resume position. So on a drop this
// module reconnects with backoff, resumes from the last event and reply frame the page got
// (the server replays the rest, nothing twice), and resends the caller audio the server says
// it lacks (session.started.input_samples): words said while the line was down are still
// heard and answered. It has VoiceConnection's surface (open / sendAudio / ack / close), and
// tells the page every change of state in plain words through one callback; what it cannot
// recover from (a refused token, a call the server no longer has, no server within the
// window) ends the call with a plain reason, never a retry loop.

import { OpenFailed, VoiceConnection, voiceUrl } from "./protocol.js";

// Reconnect attempts: the first at once, then doubling from firstMs up to maxMs apart, with
// ±25% jitter so pages dropped together do not return together; none starts after windowMs
// (past the server's default resume_grace_s of 30 s a resume cannot succeed).
export const RECONNECT = { firstMs: 250, maxMs: 4000, windowMs: 40000, openTimeoutMs: 10000 };
// Caller audio kept for a resend: what was in flight when the line dropped and what was said
// while it was down. Bound: 30 s (the server's default resume window); policy: drop the
// oldest, counted in audioLostMs.
export const RESEND_MS = 30000;
// A half-open path (no FIN, no RST) looks open to the browser for minutes: the page pings
// every PING_MS while live, and a ping unanswered for DEAD_MS (nothing at all received)
// means the line is dead.
const PING_MS = 5000;
const DEAD_MS = 15000;

// Closes that mean the line dropped (no close frame, an error, a restart, a proxy's bad
// gateway): the session may be waiting. Any other code is the server ending the call.
const DROPPED_CLOSES = new Set([1005, 1006, 1011, 1012, 1014]);
// Refusals that pass: a restarting server, one at capacity or draining; worth another try.
const RETRY_LATER = new Set(["server_not_ready", "at_capacity", "server_shutdown"]);

/** The delay before reconnect attempt `attempt` (1 = the first after a drop), in ms. */
export function backoffMs(attempt, random = Math.random) {
  if (attempt <= 1) return 0;
  const base = Math.min(RECONNECT.maxMs, RECONNECT.firstMs * 2 ** (attempt - 2));
  return Math.round(base * (0.75 + 0.5 * random()));
}

/** Plain words for a server that ended a live call with `code` (docs/protocol.md, close
 * codes); `error` is the typed error it sent just before, if any. */
export function closeMessage(code, error) {
  const said = error ? ` (${error.message})` : "";
  switch (code) {
    case 1000:
      return `The server ended the call${said}.`;
    case 1001:
      return "The server shut down and ended the call: press Start to call again.";
    case 1008:
      return "Not authorized any more: reload the page to call again.";
    case 1009:
      return "A message was too large for the server: the call ended.";
    case 1013:
      return "The server is busy: try again in a moment.";
    case 4000:
      return "The call ended after a long silence: press Start to call again.";
    case 4001:
      return "The call reached its maximum length and ended.";
    case 4002:
      return "The connection could not keep up with the audio: the call ended.";
    case 4003:
      return "This call continued in another tab or window.";
    default:
      return `The call ended (close ${code}${error ? `: ${error.message}` : ""}).`;
  }
}

/** A final reason, in plain words, for a failed reconnect attempt (an OpenFailed); null
 * to try again. */
export function reconnectVerdict(failure) {
  const error = failure.error;
  if (error?.code === "unauthorized" || failure.closeCode === 1008) {
    // The page's token expired, or was good for one connection only: the page cannot mint
    // another (it holds no key); whoever served the page can.
    return "Session expired: reload the page to call again.";
  }
  if (!error || RETRY_LATER.has(error.code)) return null; // unreachable, restarting, busy
  if (error.code === "resume_failed" || error.code === "session_not_found") {
    return "The call ended while the connection was down: press Start for a new call.";
  }
  return `The call could not be resumed (${error.message}): press Start for a new call.`;
}

/** Plain words for a server that refused to start a call with a typed `error`. */
export function refusalMessage(error) {
  switch (error.code) {
    case "unauthorized":
      return `Not authorized (${error.message}): open the page with a valid ?token= link.`;
    case "at_capacity":
      return "The server is at capacity: try again in a moment.";
    case "server_not_ready":
      return "The server is still loading its models: try again in a moment.";
    case "server_shutdown":
      return "The server is shutting down: try again later.";
    default:
      return `The server refused the call: ${error.message}`;
  }
}

/** Why the server at `pageUrl` cannot take a call, in plain words; null when /readyz says it
 * is ready. Answers "server unreachable" when nothing answers at all. */
export async function serverProblem(pageUrl) {
  let response;
  try {
    response = await fetch(new URL("readyz", pageUrl), { cache: "no-store" });
  } catch {
    const host = new URL(pageUrl).host;
    return `Server unreachable: nothing answers at ${host}. Check that voxpipe is running, then press Start again.`;
  }
  if (response.ok) return null;
  const body = await response.json().catch(() => ({}));
  switch (body.status) {
    case "loading":
      return "The server is still loading its models: try again in a moment.";
    case "draining":
      return "The server is shutting down: try again later.";
    case "failed":
      return `The server could not load its models (${body.error}).`;
    default:
      return `The server is not ready (HTTP ${response.status}): try again in a moment.`;
  }
}

/** Plain words for a Start that failed at any step (audio, connection, microphone). */
export async function whyNotStarted(failure, pageUrl) {
  if (failure instanceof OpenFailed && failure.error) return refusalMessage(failure.error);
  if (failure?.name === "NotAllowedError") {
    return "Microphone blocked: allow the microphone for this page, then press Start again.";
  }
  // A worklet that would not load, a socket that would not open: ask the server itself.
  const problem = await serverProblem(pageUrl);
  if (problem) return problem;
  if (failure instanceof OpenFailed) return `Could not connect to the server: ${failure.message}`;
  return `Could not start: ${failure?.message ?? failure}`;
}

/**
 * Caller audio the server may still need: the last `maxSamples` captured, each frame at its
 * offset in the call's inbound stream, which is how many samples the server has counted
 * once it has everything before that frame.
 */
export class ResendLog {
  constructor(maxSamples) {
    this.maxSamples = maxSamples;
    this.frames = []; // {offset, buffer: ArrayBuffer of PCM16}
    this.kept = 0;
    this.end = 0; // offset of the next frame
    this.lostSamples = 0; // said while the line was down, but older than the bound
  }

  add(buffer) {
    const samples = buffer.byteLength >> 1;
    this.frames.push({ offset: this.end, buffer });
    this.end += samples;
    this.kept += samples;
    while (this.kept > this.maxSamples && this.frames.length > 1) {
      this.kept -= this.frames.shift().buffer.byteLength >> 1;
    }
  }

  /** The frames to send again to a server that has `have` samples, in order; a frame the
   * server has in part comes cut. When the server lacks audio older than the log, that
   * audio is gone: it is counted, and the offsets move back so they match the server's. */
  since(have) {
    const first = this.frames.length ? this.frames[0].offset : this.end;
    if (have < first) {
      const gap = first - have;
      this.lostSamples += gap;
      for (const frame of this.frames) frame.offset -= gap;
      this.end -= gap;
    } else if (have > this.end) {
      // The server has more than was sent (it cannot): start the count again from its own.
      this.frames = [];
      this.kept = 0;
      this.end = have;
    }
    const out = [];
    for (const { offset, buffer } of this.frames) {
      const samples = buffer.byteLength >> 1;
      if (offset + samples <= have) continue;
      const skip = Math.max(0, have - offset);
      out.push(skip ? buffer.slice(skip * 2) : buffer);
    }
    return out;
  }
}

function randomId() {
  // 128 random bits: a session id nobody can guess, chosen here so the first connection
  // already carries it (a load balancer routes every connection of the call on it).
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

export class ResumingConnection {
  /**
   * @param {string} pageUrl the page's own URL: its ?token= goes on to every connection, and
   *   its ?session_id=, when a backend chose one (a token bound to a session), is the call's
   * @param {{onEvent: (e: object) => void, onAudio: (f: object) => void,
   *          onState: (state: string, text: string) => void}} handlers
   *   state: "live", "reconnecting", "ended" (hung up, or ended by the server) or "error"
   */
  constructor(pageUrl, handlers) {
    this.pageUrl = pageUrl;
    this.handlers = handlers;
    this.sessionId = new URL(pageUrl).searchParams.get("session_id") || randomId();
    this.state = "idle";
    this.connection = null;
    this.live = false; // the current connection's session has started
    this.start = null;
    this.resend = null;
    this.lastEventId = 0;
    this.lastAudioSeq = 0;
    this.lastError = null; // the error event just before a close says why
    this.pendingAck = 0; // played while the line was down: acked after the resume
    this.pinger = null;
    this.awaiting = 0; // when the oldest unanswered ping was sent; 0: none
    this.wake = null;
    this.sleeper = null;
    this.counts = {
      framesSent: 0,
      framesDropped: 0,
      framesReceived: 0,
      badFrames: 0,
      acksSent: 0,
      duplicates: 0,
      reconnects: 0,
      resentFrames: 0,
      audioLostMs: 0,
    };
    this.onOnline = () => this.wake?.(); // the network is back: do not wait out the backoff
    window.addEventListener("online", this.onOnline);
  }

  /** Start the call; resolves with session.started, rejects with OpenFailed. */
  async open(start) {
    this.start = start;
    this.resend = new ResendLog(Math.round((start.input_sample_rate * RESEND_MS) / 1000));
    const started = await this.connect({ ...start, session_id: this.sessionId });
    this.sessionId = started.session_id;
    this.goLive(started, false);
    return started;
  }

  /** One frame of caller audio: sent at once while live, kept for a resend either way.
   * Returns where it ends in the call's inbound stream (samples), or null when it is not
   * part of it. */
  sendAudio(buffer) {
    if (this.state === "ended" || this.state === "error" || !this.resend) return null;
    // "dropped" (the socket is over its bound) leaves the frame out of the stream for good;
    // "closed" (the line is down) keeps it, to be sent again once the call is resumed.
    if (this.live && this.connection.sendAudio(buffer) === "dropped") return null;
    this.resend.add(buffer);
    return this.resend.end;
  }

  ack(seq) {
    if (this.live) this.connection.ack(seq);
    else this.pendingAck = Math.max(this.pendingAck, seq);
  }

  /** A measurement for the server (client.turn): sent while live, else let go. */
  report(event) {
    if (this.live) this.connection.send(event);
  }

  /** Hang up: the server cancels any reply in flight and closes with 1000. */
  close() {
    if (this.state === "ended" || this.state === "error") return;
    const told = this.state !== "idle";
    this.stopLine();
    this.connection?.close();
    this.state = "ended";
    this.wake?.(); // a reconnect waiting out its backoff stops now
    window.removeEventListener("online", this.onOnline);
    if (told) this.handlers.onState("ended", "Call ended.");
  }

  // -- one connection ---------------------------------------------------------------------

  connect(start) {
    const connection = new VoiceConnection(
      voiceUrl(this.pageUrl, this.sessionId),
      {
        onEvent: (event) => this.onEvent(connection, event),
        onAudio: (frame) => this.onAudio(connection, frame),
        onClose: (code) => this.onClose(connection, code),
      },
      this.counts,
    );
    this.connection = connection;
    this.live = false;
    return connection.open(start, RECONNECT.openTimeoutMs).catch((failure) => {
      connection.abandon(); // a refusal may leave the socket open (resume_failed)
      throw failure;
    });
  }

  goLive(started, resumed) {
    this.live = true;
    this.awaiting = 0;
    clearInterval(this.pinger);
    this.pinger = setInterval(() => this.checkLine(), PING_MS);
    const id = started.session_id.slice(0, 8);
    const text = `live · ${id} · ${this.start.input_sample_rate} Hz`;
    this.state = "live";
    this.handlers.onState("live", resumed ? `Reconnected · ${text}` : text);
  }

  onEvent(connection, event) {
    if (connection !== this.connection) return;
    this.awaiting = 0;
    if (event.event_id) {
      if (event.event_id <= this.lastEventId) {
        this.counts.duplicates++;
        return;
      }
      this.lastEventId = event.event_id;
    }
    if (event.type === "session.started" || event.type === "pong") return;
    if (event.type === "error" && !this.live) return; // a refusal: open() rejects with it
    this.lastError = event.type === "error" ? event : null;
    this.handlers.onEvent(event);
  }

  onAudio(connection, frame) {
    if (connection !== this.connection) return;
    this.awaiting = 0;
    if (frame.seq <= this.lastAudioSeq) {
      this.counts.duplicates++;
      return;
    }
    this.lastAudioSeq = frame.seq;
    this.handlers.onAudio(frame);
  }

  onClose(connection, code) {
    // A connection that never went live reports through open(); an old one is history.
    if (connection !== this.connection || !this.live) return;
    this.stopLine();
    if (this.state !== "live") return;
    if (DROPPED_CLOSES.has(code)) {
      this.reconnect();
    } else {
      const normal = [1000, 1001, 4000, 4001].includes(code); // the call ran its course
      this.finish(normal ? "ended" : "error", closeMessage(code, this.lastError));
    }
  }

  /** While live: ping, and give up a line that has not answered one for DEAD_MS. */
  checkLine() {
    if (!this.live) return;
    const now = performance.now();
    if (this.awaiting && now - this.awaiting > DEAD_MS) {
      const dead = this.connection;
      this.stopLine();
      dead.abandon();
      this.reconnect();
      return;
    }
    if (!this.awaiting) this.awaiting = now;
    this.connection.send({ type: "ping" });
  }

  stopLine() {
    this.live = false;
    clearInterval(this.pinger);
    this.pinger = null;
  }

  // -- reconnecting ------------------------------------------------------------------------

  async reconnect() {
    this.state = "reconnecting";
    this.counts.reconnects++;
    this.handlers.onState("reconnecting", "Connection lost, reconnecting…");
    const began = performance.now();
    for (let attempt = 1; ; attempt++) {
      await this.pause(backoffMs(attempt));
      if (this.state !== "reconnecting") return; // hung up meanwhile
      const resume = { last_event_id: this.lastEventId, last_audio_seq: this.lastAudioSeq };
      let started;
      try {
        started = await this.connect({ ...this.start, session_id: this.sessionId, resume });
      } catch (failure) {
        if (this.state !== "reconnecting") return;
        const final = reconnectVerdict(failure);
        if (final) return this.finish("error", final);
        if (performance.now() - began >= RECONNECT.windowMs) {
          const problem = await serverProblem(this.pageUrl);
          const why = problem ?? "the server did not take the call back in time.";
          return this.finish("error", `Connection lost and not restored: ${why}`);
        }
        this.handlers.onState(
          "reconnecting",
          `Connection lost, reconnecting… (attempt ${attempt + 1})`,
        );
        continue;
      }
      if (this.state !== "reconnecting") {
        this.connection.close(); // hung up while it connected
        return;
      }
      this.resumed(started);
      return;
    }
  }

  /** Back on the line: send the audio the server lacks, then what was played meanwhile. */
  resumed(started) {
    const again = this.resend.since(started.input_samples ?? 0);
    // Unbounded on purpose: the resend log bounds it, and any frame left out would shift
    // every later offset against the server's count.
    for (const buffer of again) this.connection.sendAudio(buffer, false);
    this.counts.resentFrames += again.length;
    this.counts.audioLostMs = (this.resend.lostSamples * 1000) / this.start.input_sample_rate;
    if (this.pendingAck) this.connection.ack(this.pendingAck);
    this.pendingAck = 0;
    this.goLive(started, true);
  }

  pause(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(this.sleeper);
        this.wake = null;
        resolve();
      };
      this.wake = done;
      this.sleeper = setTimeout(done, ms);
    });
  }

  finish(state, text) {
    this.stopLine();
    this.connection?.abandon();
    this.state = state;
    window.removeEventListener("online", this.onOnline);
    this.handlers.onState(state, text);
  }
}
