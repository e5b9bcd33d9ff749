// The page's wiring: a Start button opens one call (audio context, native connection,
// microphone, player) and routes each server event to the view that shows it. Each job
// lives in its own module, so another transport can replace resume.js's ResumingConnection
// (same open / sendAudio / ack / close surface as protocol.js's VoiceConnection) without
// touching the rest. The connection survives a dropped line (resume.js) and says, in plain
// words, what happens to the call; the page only shows it.

import { openAudio } from "./audio.js";
import { startMic } from "./mic.js";
import { Player } from "./player.js";
import { ResumingConnection, whyNotStarted } from "./resume.js";
import { playedAt, TurnTiming } from "./timing.js";
import { TranscriptView } from "./transcript.js";
import { Waterfall } from "./waterfall.js";

const $ = (id) => document.getElementById(id);
const ui = {
  button: $("start"),
  status: $("status"),
  listening: $("listening"),
  notice: $("notice"),
  transcript: new TranscriptView($("transcript")),
  waterfall: new Waterfall($("charts"), $("v2v")),
  counters: $("counters"),
};

function setStatus(text, state) {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
}

/** The last typed error the server sent: most pass (a failed turn), the call goes on. */
function setNotice(text, code) {
  ui.notice.textContent = text;
  ui.notice.dataset.code = code;
  ui.notice.hidden = !text;
}

class Call {
  constructor() {
    this.context = null;
    this.connection = null;
    this.mic = null;
    this.player = null;
    this.timer = null;
    this.timing = null;
    this.ended = false;
  }

  async start() {
    setStatus("connecting…", "connecting");
    setNotice("", "");
    const context = await openAudio();
    this.context = context;
    if (this.ended) {
      context.close(); // hung up while audio started: teardown came before it
      return;
    }
    const rate = context.sampleRate;
    this.timing = new TurnTiming(rate, (report) => this.connection.report(report));
    this.connection = new ResumingConnection(location.href, {
      onEvent: (event) => this.onEvent(event),
      onAudio: (frame) => {
        this.timing.received(frame.turnId);
        this.player.push(frame);
      },
      onState: (state, text) => this.onState(state, text),
    });
    this.player = new Player(
      this.context,
      (seq) => this.connection.ack(seq),
      (turnId, at) => this.heard(turnId, at),
    );
    await this.connection.open({ input_sample_rate: rate, output_sample_rate: rate });
    if (this.ended) return; // hung up while it connected
    // The microphone opens only now: not a sample of speech is spoken before the session.
    const mic = await startMic(this.context, (frame) => {
      const end = this.connection.sendAudio(frame);
      if (end !== null) this.timing.sent(end);
    });
    this.mic = mic;
    if (this.ended) {
      mic.stop();
      return;
    }
    this.timer = setInterval(() => this.showCounters(), 250);
  }

  /** A turn's first reply sample was rendered: time the caller's wait, show it, report it. */
  heard(turnId, contextTime) {
    const ms = this.timing.played(turnId, playedAt(this.context, contextTime));
    if (ms !== null) ui.waterfall.heard(turnId, ms);
  }

  /** The connection's state, in its own plain words; a call that is over lets go of all. */
  onState(state, text) {
    setStatus(text, state);
    if (state === "reconnecting") ui.listening.hidden = true;
    if (state === "ended" || state === "error") this.teardown();
  }

  onEvent(event) {
    switch (event.type) {
      case "vad.speech_started":
        ui.listening.hidden = false;
        break;
      case "vad.speech_stopped":
        ui.listening.hidden = true;
        this.timing.speechStopped(event.turn_id, event.audio_ms);
        break;
      case "transcript":
        ui.transcript.caller(event.turn_id, event.text);
        break;
      case "response.text.delta":
        ui.transcript.agentDelta(event.turn_id, event.delta);
        break;
      case "playback.clear":
        this.player.clear();
        break;
      case "tool.started":
        ui.transcript.toolStarted(event.turn_id, event.call_id, event.name, event.arguments);
        break;
      case "tool.finished":
        ui.transcript.toolFinished(event.turn_id, event.call_id, event.name, event.status, event.duration_ms);
        break;
      case "response.done":
        ui.transcript.agentDone(event.turn_id, event.status, event.text);
        break;
      case "turn.metrics":
        ui.waterfall.add(event);
        break;
      case "error":
        setNotice(event.message, event.code);
        break;
    }
  }

  showCounters() {
    const counts = { ...this.connection.counts, ...this.player.stats };
    for (const [key, value] of Object.entries(counts)) {
      if (typeof value === "number") ui.counters.dataset[key] = String(Math.round(value));
    }
    ui.counters.textContent =
      `sent ${counts.framesSent} frames · received ${counts.framesReceived} · ` +
      `played ${counts.played} · acks ${counts.acksSent} · buffered ${Math.round(counts.queuedMs)} ms · ` +
      `underruns ${counts.underruns}` +
      (counts.reconnects ? ` · reconnects ${counts.reconnects} · resent ${counts.resentFrames}` : "");
  }

  stop() {
    this.teardown();
  }

  /** Release everything, whichever way the call ended (hang-up, server close, failed start). */
  teardown() {
    if (this.ended) return;
    this.ended = true;
    clearInterval(this.timer);
    this.connection?.close();
    if (this.connection && this.player) this.showCounters();
    this.mic?.stop();
    this.player?.close();
    this.context?.close();
    ui.listening.hidden = true;
    ui.button.textContent = "Start";
    call = null;
  }
}

let call = null;

ui.button.addEventListener("click", async () => {
  if (call) {
    call.stop();
    return;
  }
  const starting = (call = new Call());
  ui.button.textContent = "Hang up";
  try {
    await starting.start();
  } catch (error) {
    if (starting.ended) return; // hung up while it started: nothing to explain
    // Asked before letting go, so the button does not offer Start while the answer is out.
    const why = await whyNotStarted(error, location.href);
    starting.teardown();
    setStatus(why, "error");
  }
});
