// The latency waterfall: each turn's stages (turn.metrics stages_ms, offsets from the
// caller's last sample of speech) as horizontal SVG bars on one time axis, and a running
// p50/p99 of voice-to-voice over the turns of this page.

const SVG = "http://www.w3.org/2000/svg";
const MAX_TURNS = 8; // charts kept on the page
const MAX_SAMPLES = 1000; // voice-to-voice values kept for the percentiles

// [label, css class, from stage, to stage]: the causal chain of a turn, and the end of turn
// apart from it (a preempted turn starts STT before the end of turn is decided).
const SEGMENTS = [
  ["end of turn", "eot", "speech_end", "eot"],
  ["stt", "stt", null, "stt_done"], // starts where its queue wait and compute began
  ["llm request", "llm", "stt_done", "llm_request"],
  ["llm first token", "llm", "llm_request", "llm_first_token"],
  ["first clause", "llm", "llm_first_token", "first_clause"],
  ["tts first chunk", "tts", "first_clause", "tts_first_chunk"],
  ["first audio sent", "send", "tts_first_chunk", "first_audio_sent"],
  ["reply plays", "reply", "first_audio_sent", "response_done"],
];

/** The bars of one turn: [label, kind, start ms, end ms], for the stages it reached. */
export function segments(metrics) {
  const stages = metrics.stages_ms || {};
  const bars = [];
  for (const [label, kind, from, to] of SEGMENTS) {
    if (!(to in stages)) continue;
    let start = stages[from];
    if (from === null) {
      // STT's own time, measured on its thread; without it, from the end of turn.
      const spent = (metrics.compute_ms?.stt ?? NaN) + (metrics.queue_ms?.stt ?? 0);
      start = Number.isFinite(spent) ? Math.max(0, stages[to] - spent) : stages.eot;
    }
    if (start === undefined) continue;
    bars.push([label, kind, Math.min(start, stages[to]), Math.max(start, stages[to])]);
  }
  return bars;
}

const WIDTH = 640;
const LABEL = 120; // px of labels left of the bars
const ROW = 14;
const AXIS = 18;

/** Nearest-rank percentile of `values` (p in 0..100); null when there are none. */
export function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

function el(name, attributes, text) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

const ms = (value) => `${Math.round(value)} ms`;

/** One turn's chart. The axis ends a little after the first audio: the part a caller waits
 * through; the bar of the reply playing runs off its end, labelled with its length. */
export function turnChart(metrics) {
  const stages = metrics.stages_ms || {};
  const rows = segments(metrics);
  const v2v = metrics.voice_to_voice_ms;
  const waited = Math.max(v2v ?? 0, ...rows.filter((r) => r[1] !== "reply").map((r) => r[3]));
  const span = Math.max(250, waited * 1.2);
  const plot = WIDTH - LABEL - 10;
  const x = (t) => LABEL + (Math.min(Math.max(t, 0), span) / span) * plot;
  const height = AXIS + rows.length * ROW + 4;
  const svg = el("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height });
  svg.dataset.turn = String(metrics.turn_id);

  const title = `turn ${metrics.turn_id} · ${metrics.status || ""} · voice-to-voice ${v2v == null ? "–" : ms(v2v)}`;
  svg.append(el("text", { x: 0, y: 11, class: "chart-title" }, title));
  rows.forEach(([label, kind, start, end], i) => {
    const y = AXIS + i * ROW;
    const width = Math.max(1, x(end) - x(start)); // a 0.2 ms stage still shows
    svg.append(el("text", { x: LABEL - 6, y: y + 10, class: "label" }, label));
    const bar = el("rect", { x: x(start), y: y + 2, width, height: ROW - 4, class: `bar ${kind}` });
    bar.append(el("title", {}, `${label}: ${ms(end - start)} (${ms(start)} → ${ms(end)})`));
    svg.append(bar);
    const clipped = end > span;
    const note = clipped ? `${ms(end - start)} →` : ms(end - start);
    const tx = clipped ? WIDTH - 4 : Math.min(x(start) + width + 4, WIDTH - 4);
    svg.append(el("text", { x: tx, y: y + 10, class: clipped ? "value end" : "value" }, note));
  });
  if (v2v != null) {
    const at = x(v2v);
    const line = el("line", { x1: at, x2: at, y1: AXIS - 4, y2: height, class: "v2v" });
    line.append(el("title", {}, `voice-to-voice: ${ms(v2v)}`));
    svg.append(line);
  }
  if ("filler_sent" in stages) {
    const at = x(stages.filler_sent);
    const line = el("line", { x1: at, x2: at, y1: AXIS - 4, y2: height, class: "filler" });
    line.append(el("title", {}, `filler sent: ${ms(stages.filler_sent)}`));
    svg.append(line);
  }
  return svg;
}

export class Waterfall {
  constructor(chartsElement, statsElement) {
    this.charts = chartsElement;
    this.statsElement = statsElement;
    this.samples = [];
  }

  add(metrics) {
    this.charts.prepend(turnChart(metrics));
    while (this.charts.children.length > MAX_TURNS) this.charts.lastElementChild.remove();
    if (typeof metrics.voice_to_voice_ms === "number") {
      this.samples.push(metrics.voice_to_voice_ms);
      if (this.samples.length > MAX_SAMPLES) this.samples.shift();
    }
    const p50 = percentile(this.samples, 50);
    const p99 = percentile(this.samples, 99);
    this.statsElement.textContent =
      p50 == null
        ? "voice-to-voice: no reply yet"
        : `voice-to-voice p50 ${ms(p50)} · p99 ${ms(p99)} · ${this.samples.length} turns`;
    this.statsElement.dataset.p50 = p50 == null ? "" : String(p50);
    this.statsElement.dataset.p99 = p99 == null ? "" : String(p99);
  }
}
