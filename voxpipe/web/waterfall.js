// The latency waterfall: each turn's stages (turn.metrics stages_ms, offsets from the
// caller's last sample of speech) as horizontal SVG bars on one time axis, the first reply
// sample heard as this page measured it (timing.js) beside the server's first audio sent, and
// a running p50/p99 of both over the turns of this page. A turn's tool calls (turn.metrics
// tools) are bars of their own, named with their status.

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
  for (const call of metrics.tools || []) {
    const start = call.started_ms ?? 0;
    const label = `tool ${call.name} (${call.status})`;
    bars.push([label, `tool ${call.status}`, start, start + (call.duration_ms ?? 0)]);
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
 * through; the bar of the reply playing runs off its end, labelled with its length.
 * `heardMs` is the page's own figure: its end of speech to the first reply sample played. */
export function turnChart(metrics, heardMs = null) {
  const stages = metrics.stages_ms || {};
  const rows = segments(metrics);
  const v2v = metrics.voice_to_voice_ms;
  const bars = rows.filter((r) => r[1] !== "reply").map((r) => r[3]);
  const waited = Math.max(v2v ?? 0, heardMs ?? 0, ...bars);
  const span = Math.max(250, waited * 1.2);
  const plot = WIDTH - LABEL - 10;
  const x = (t) => LABEL + (Math.min(Math.max(t, 0), span) / span) * plot;
  const height = AXIS + rows.length * ROW + 4;
  const svg = el("svg", { class: "chart", viewBox: `0 0 ${WIDTH} ${height}`, width: WIDTH, height });
  svg.dataset.turn = String(metrics.turn_id);

  const heard = heardMs == null ? "" : ` · heard ${ms(heardMs)} (this page)`;
  const title = `turn ${metrics.turn_id} · ${metrics.status || ""} · voice-to-voice ${v2v == null ? "–" : ms(v2v)}${heard}`;
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
  if (heardMs != null) {
    const at = x(heardMs);
    const line = el("line", { x1: at, x2: at, y1: AXIS - 4, y2: height, class: "heard" });
    line.append(el("title", {}, `first reply sample played, measured by this page: ${ms(heardMs)}`));
    svg.append(line);
    svg.dataset.heardMs = String(heardMs);
  }
  for (const [stage, kind, what] of [
    ["filler_sent", "filler", "filler sent"],
    ["tool_phrase_sent", "filler", "tool phrase sent"],
  ]) {
    if (!(stage in stages)) continue;
    const at = x(stages[stage]);
    const line = el("line", { x1: at, x2: at, y1: AXIS - 4, y2: height, class: kind });
    line.append(el("title", {}, `${what}: ${ms(stages[stage])}`));
    svg.append(line);
  }
  svg.dataset.tools = String((metrics.tools || []).length);
  return svg;
}

export class Waterfall {
  constructor(chartsElement, statsElement) {
    this.charts = chartsElement;
    this.statsElement = statsElement;
    this.samples = [];
    this.heardSamples = [];
    this.shown = new Map(); // turn id -> {metrics, heardMs, svg}: the charts on the page
  }

  /** A turn's turn.metrics: its chart, with the page's own figure if it came first. */
  add(metrics) {
    const earlier = this.shown.get(metrics.turn_id);
    const turn = { metrics, heardMs: earlier?.heardMs ?? null, svg: null };
    this.shown.set(metrics.turn_id, turn);
    this.draw(turn);
    while (this.charts.children.length > MAX_TURNS) this.charts.lastElementChild.remove();
    for (const [id, shown] of this.shown) {
      if (shown.svg && !shown.svg.isConnected) this.shown.delete(id);
    }
    if (typeof metrics.voice_to_voice_ms === "number") {
      this.samples.push(metrics.voice_to_voice_ms);
      if (this.samples.length > MAX_SAMPLES) this.samples.shift();
    }
    this.showStats();
  }

  /** The page measured turn `turnId`'s wait (its end of speech to the first sample played);
   * it may come before that turn's turn.metrics or after. */
  heard(turnId, heardMs) {
    const turn = this.shown.get(turnId) ?? { metrics: null, heardMs: null, svg: null };
    turn.heardMs = heardMs;
    this.shown.set(turnId, turn);
    while (this.shown.size > 2 * MAX_TURNS) this.shown.delete(this.shown.keys().next().value);
    if (turn.metrics) this.draw(turn);
    this.heardSamples.push(heardMs);
    if (this.heardSamples.length > MAX_SAMPLES) this.heardSamples.shift();
    this.showStats();
  }

  draw(turn) {
    const svg = turnChart(turn.metrics, turn.heardMs);
    if (turn.svg?.isConnected) turn.svg.replaceWith(svg);
    else this.charts.prepend(svg);
    turn.svg = svg;
  }

  showStats() {
    const p50 = percentile(this.samples, 50);
    const p99 = percentile(this.samples, 99);
    const h50 = percentile(this.heardSamples, 50);
    const h99 = percentile(this.heardSamples, 99);
    const heard = h50 == null ? "" : ` · heard here p50 ${ms(h50)} · p99 ${ms(h99)}`;
    this.statsElement.textContent =
      p50 == null
        ? "voice-to-voice: no reply yet"
        : `voice-to-voice p50 ${ms(p50)} · p99 ${ms(p99)} · ${this.samples.length} turns${heard}`;
    this.statsElement.dataset.p50 = p50 == null ? "" : String(p50);
    this.statsElement.dataset.p99 = p99 == null ? "" : String(p99);
    this.statsElement.dataset.heardP50 = h50 == null ? "" : String(h50);
    this.statsElement.dataset.heardP99 = h99 == null ? "" : String(h99);
  }
}
