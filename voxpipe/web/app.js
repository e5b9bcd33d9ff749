// The page's wiring: a Start button opens one call (audio context, native connection,
// microphone, player) and routes each server event to the view that shows it. Each job
// lives in its own module, so another transport can replace protocol.js's VoiceConnection
// (same open / sendAudio / ack / close surface) without touching the rest.

import { openAudio } from "./audio.js";
import { startMic } from "./mic.js";
import { Player } from "./player.js";
import { VoiceConnection, voiceUrl } from "./protocol.js";
import { TranscriptView } from "./transcript.js";
import { Waterfall } from "./waterfall.js";

const $ = (id) => document.getElementById(id);
const ui = {
  button: $("start"),
  status: $("status"),
  listening: $("listening"),
  transcript: new TranscriptView($("transcript")),
  waterfall: new Waterfall($("charts"), $("v2v")),
  counters: $("counters"),
};

function setStatus(text, state) {
  ui.status.textContent = text;
  ui.status.dataset.state = state;
}

class Call {
  constructor() {
    this.context = null;
    this.connection = null;
    this.mic = null;
    this.player = null;
    this.timer = null;
    this.ended = false;
  }

  async start() {
    setStatus("connecting…", "connecting");
    this.context = await openAudio();
    const rate = this.context.sampleRate;
    this.connection = new VoiceConnection(voiceUrl(location.href), {
      onEvent: (event) => this.onEvent(event),
      onAudio: (frame) => this.player.push(frame),
      onClose: (code, reason) => this.onClose(code, reason),
    });
    this.player = new Player(this.context, (seq) => this.connection.ack(seq));
    const started = await this.connection.open({ input_sample_rate: rate, output_sample_rate: rate });
    // The microphone opens only now: not a sample of speech is spoken before the session.
    this.mic = await startMic(this.context, (frame) => this.connection.sendAudio(frame));
    setStatus(`live · ${started.session_id.slice(0, 8)} · ${rate} Hz`, "live");
    this.timer = setInterval(() => this.showCounters(), 250);
  }

  onEvent(event) {
    switch (event.type) {
      case "vad.speech_started":
        ui.listening.hidden = false;
        break;
      case "vad.speech_stopped":
        ui.listening.hidden = true;
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
      case "response.done":
        ui.transcript.agentDone(event.turn_id, event.status, event.text);
        break;
      case "turn.metrics":
        ui.waterfall.add(event);
        break;
      case "error":
        setStatus(`error ${event.code}: ${event.message}`, "error");
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
      `underruns ${counts.underruns}`;
  }

  onClose(code, reason) {
    if (ui.status.dataset.state !== "error") setStatus(`ended (${code}) ${reason}`, "ended");
    this.teardown();
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
  call = new Call();
  ui.button.textContent = "Hang up";
  try {
    await call.start();
  } catch (error) {
    setStatus(`could not start: ${error.message}`, "error");
    call?.teardown();
  }
});
