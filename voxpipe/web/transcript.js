// Live transcripts of both sides, one row per turn: what the caller said (STT), and what
// the agent said as it streams, replaced at the end by what the caller actually heard, and
// the tools it called in between (tool.started, tool.finished: name, status, duration).

const MAX_TURNS = 200; // older turns leave the page (the server keeps the history)

export class TranscriptView {
  constructor(element) {
    this.element = element;
    this.turns = new Map(); // turn_id -> {caller, agent}
  }

  turn(turnId) {
    let turn = this.turns.get(turnId);
    if (turn) return turn;
    const row = document.createElement("div");
    row.className = "turn";
    row.dataset.turn = String(turnId);
    const caller = document.createElement("p");
    caller.className = "caller";
    const tools = document.createElement("ul");
    tools.className = "tools";
    const agent = document.createElement("p");
    agent.className = "agent";
    row.append(caller, tools, agent);
    this.element.append(row);
    turn = { row, caller, tools, agent, calls: new Map() };
    this.turns.set(turnId, turn);
    while (this.turns.size > MAX_TURNS) {
      const [oldest, old] = this.turns.entries().next().value;
      old.row.remove();
      this.turns.delete(oldest);
    }
    return turn;
  }

  caller(turnId, text) {
    this.turn(turnId).caller.textContent = text;
    this.scroll();
  }

  agentDelta(turnId, delta) {
    const { agent } = this.turn(turnId);
    agent.classList.add("streaming");
    agent.textContent += delta;
    this.scroll();
  }

  /** tool.started: the agent called a tool (shown until its tool.finished). */
  toolStarted(turnId, callId, name, args) {
    const turn = this.turn(turnId);
    const item = document.createElement("li");
    item.className = "tool";
    item.dataset.status = "running";
    item.dataset.name = name;
    item.textContent = `${name}(${JSON.stringify(args ?? {})}) …`;
    turn.tools.append(item);
    turn.calls.set(callId, item);
    this.scroll();
  }

  /** tool.finished: its status and how long it ran. */
  toolFinished(turnId, callId, name, status, durationMs) {
    const turn = this.turn(turnId);
    let item = turn.calls.get(callId);
    if (!item) {
      this.toolStarted(turnId, callId, name, {});
      item = turn.calls.get(callId);
    }
    item.dataset.status = status;
    item.textContent = item.textContent.replace(/ …$/, "") + ` → ${status}, ${Math.round(durationMs)} ms`;
    this.scroll();
  }

  /** response.done: `text` is what was heard; an interrupted reply says so. */
  agentDone(turnId, status, text) {
    const turn = this.turns.get(turnId);
    if (status === "empty" && turn && !turn.caller.textContent) {
      turn.row.remove();
      this.turns.delete(turnId);
      return;
    }
    const { agent } = this.turn(turnId);
    agent.classList.remove("streaming");
    agent.textContent = text;
    agent.dataset.status = status;
    this.scroll();
  }

  scroll() {
    this.element.scrollTop = this.element.scrollHeight;
  }
}
