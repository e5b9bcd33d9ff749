"""A session's tool calls and their results: which tools are offered, what ran, what came back.

Every call is written into the history (the assistant message that carries it) and into
the store, with the session's state, *before* it runs; its result (a ``tool`` message) is
written the same way before the answer that uses it is spoken. So whatever becomes of the
worker, the saved state tells a finished call (its result is there: it never runs again)
from one that may have been running when the worker died (no result: an idempotent tool
runs once more, any other is reported to the model as ``unknown_outcome``).

A tool runs in a task the ledger owns, for the session, not in the reply that asked for
it: a barge-in that ends the reply cancels a ``READ_ONLY`` tool (its cancellation is the
result the model sees) and leaves a ``MUTATING`` one running to its end, whose result joins
the history when it comes. Closing the session waits for those up to their timeout, then
records ``unknown_outcome``. Only the ledger writes a result, and only once per call.

A client with tools of its own (Realtime) must not reach the server's: a client tool may not
take a server tool's name (the model's call would run the server's, and the client never see
it), and a record the client writes, a call or a result, may not name a server tool (the
model would take a forged ``cancel_booking`` for a done deed, and act on it). Those are
refused with :class:`ToolRefused`, before anything changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from voxpipe.agent import Tool, Toolbox, ToolCall, ToolEffect, ToolResult, ToolStatus
from voxpipe.agent.call_context import NO_CALL, CallContext
from voxpipe.conversation.confirmation import Confirmation
from voxpipe.conversation.events import ClientOutbox, ToolFinished
from voxpipe.conversation.history import CallRecorder, History
from voxpipe.engines.base import ChatMessage, ToolCallRequest, ToolSpec
from voxpipe.observability.metrics import Metrics

log = logging.getLogger("voxpipe.tools")

RESTARTED = (
    "the outcome of this call is unknown: the server restarted while it ran; do not assume "
    "it succeeded — check before retrying"
)
# What the caller hears when every call left running by a dead worker has an unknown
# outcome: said as it is, not by the model (a small model may read the error out, markup
# and all). The model sees the result and these words on the next turn.
UNKNOWN_SAID = (
    "I'm sorry, we were cut off while I was doing that, and I can't tell whether it went "
    "through. I can check it for you."
)
CLOSE_GRACE_S = 1.0  # past a running tool's own timeout, before its outcome is unknown
RUNNING = '{"status":"running","note":"still running: its result follows when it is done"}'
MAX_RESULT_CHARS = 4000
"""A result longer than this reaches the model cut, with a note: a 200 KB record fills the
context, and a model shown one may recite its tool list instead of answering."""


class ToolRefused(ValueError):
    """A client's tools or tool record that would reach the server's own tools.
    ``where``: the part at fault, relative to what the client gave (``"2.name"``: the third
    tool's name; ``"call_id"``)."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.where = where


@dataclass(eq=False)
class ToolRun:
    """One execution of one call, in a task of the ledger."""

    turn_id: int
    request: ToolCallRequest
    tool: Tool | None  # None: no such tool (the toolbox answers with an error)
    started_ns: int = field(default_factory=time.monotonic_ns)
    result: ToolResult | None = None
    detached: bool = False  # its reply ended first: the ledger tells the client of the end
    task: asyncio.Task[None] = field(init=False, repr=False)

    @property
    def call(self) -> ToolCall:
        return ToolCall(self.request.call_id, self.request.name, dict(self.request.arguments))

    @property
    def cancellable(self) -> bool:
        """A barge-in may stop it: it changes nothing (an unknown tool runs nothing)."""
        return self.tool is None or self.tool.policy.effect is ToolEffect.READ_ONLY

    def finished(self) -> ToolFinished:
        assert self.result is not None
        result = self.result
        duration_ms = round(result.duration_s * 1000, 1)
        return ToolFinished(
            self.turn_id, result.call_id, result.name, result.status, duration_ms, result.content()
        )


class Caller(Protocol):
    """Who is calling, as the server knows it (the session's ``CallControl``)."""

    def call_context(self) -> CallContext:
        """The call's context, as its tools are told (``agent/call_context.py``)."""


class _Nobody:
    def call_context(self) -> CallContext:
        return NO_CALL


NOBODY: Caller = _Nobody()  # a ledger with no call behind it (tests)


class ToolLedger:
    """The tools of one session (its agent's, and a client's own) and every call's fate.

    ``persist`` saves the session's state (``SavedCall.persist``); ``outbox`` tells the
    client of a call that ended after its reply (nothing once the call is over). A call that
    asks the caller first waits in :attr:`confirmation` (``confirmation.py``), not here."""

    def __init__(
        self,
        toolbox: Toolbox,
        history: History,
        recorder: CallRecorder,
        persist: Callable[[], None],
        metrics: Metrics,
        outbox: ClientOutbox,
        caller: Caller = NOBODY,
    ) -> None:
        """``caller`` says who is calling, as the server knows it (``call_context.py``):
        every server tool call gets it; the model never writes it."""
        self.toolbox = toolbox
        self._agent_tools = tuple(toolbox.specs())  # a toolbox is fixed once built
        self._caller = caller
        self.confirmation = Confirmation(history)  # what a call that asks first awaits
        self._history = history
        self._recorder = recorder
        self._persist = persist
        self._metrics = metrics
        self._outbox = outbox
        self._client_tools: dict[str, ToolSpec] = {}
        self.tool_choice = "auto"
        self._runs: dict[str, ToolRun] = {}  # running now, by call id
        self._answered: set[str] = set()  # call ids whose result is in the history
        self._reruns: set[str] = set()  # restored calls run again: never a third time
        self.unknown_after_restore: list[str] = []  # calls the restore found dead mid-run
        self._made: dict[tuple[str, str], int] = {}  # (tool, arguments) -> the last turn
        self._ok: set[str] = set()  # call ids whose server tool ended ok

    # -- what the model is offered ------------------------------------------------

    def set_client_tools(self, specs: Sequence[ToolSpec], tool_choice: str = "auto") -> None:
        """A client's own tools (Realtime ``session.tools``): the model may call them too,
        and the client runs them. One named as a server tool is refused (ToolRefused), and
        the tools stay as they were."""
        for i, spec in enumerate(specs):
            if spec.name in self.toolbox:
                raise ToolRefused(
                    f"'{spec.name}' is the name of one of the server's own tools; "
                    "name the client's tool otherwise",
                    f"{i}.name",
                )
        self._client_tools = {s.name: s for s in specs}
        self.tool_choice = tool_choice

    def offered(self) -> list[ToolSpec] | None:
        """The tools in every prompt of this session (None: none, and the plain path);
        which the model may call is :attr:`tool_choice`, so the prompt stays the same."""
        return [*self._agent_tools, *self._client_tools.values()] or None

    def runs_on_client(self, name: str) -> bool:
        return name in self._client_tools

    def tool(self, name: str) -> Tool | None:
        return self.toolbox.get(name)

    # -- calls --------------------------------------------------------------------------

    def record_calls(
        self, turn_id: int, calls: Sequence[ToolCallRequest], text: str = ""
    ) -> ChatMessage:
        """The assistant called ``calls`` (after saying ``text``): into the history, the
        store and the saved state, before anything runs."""
        message = self._history.append(ChatMessage("assistant", text, tuple(calls)))
        for call in calls:
            self._made[_key(call)] = turn_id
            self._recorder.message(turn_id, "tool_call", json.dumps(call.to_dict()))
        self._persist()
        return message

    def add_client_call(self, turn_id: int, call_id: str, name: str, arguments_json: str) -> bool:
        """A call the client wrote into the conversation itself; False if the id is taken,
        ToolRefused if it names a server tool (only the model calls those)."""
        if name in self.toolbox:
            raise ToolRefused(
                f"'{name}' is one of the server's own tools: only the model calls it",
                "name",
            )
        if call_id in self._answered or self._find_call(call_id) is not None:
            return False
        try:
            arguments = json.loads(arguments_json or "{}")
        except (ValueError, RecursionError):  # a client's text: anything, nested any depth
            arguments = None
        error = "" if isinstance(arguments, dict) else "the arguments are not a JSON object"
        request = ToolCallRequest(call_id, name, arguments or {}, arguments_json, error)
        self.record_calls(turn_id, [request])
        return True

    def add_output(self, turn_id: int, call_id: str, output: str) -> bool:
        """The client's result of its own call; False if no such call waits for one,
        ToolRefused if the call is a server tool's (the server writes that result)."""
        request = self._find_call(call_id)
        if request is not None and request.name in self.toolbox:
            raise ToolRefused(
                f"call '{call_id[:64]}' is of the server's own tool '{request.name}': "
                "its result is the server's to write",
                "call_id",
            )
        if request is None or call_id in self._answered or call_id in self._runs:
            return False
        self._write_result(turn_id, request.name, call_id, output, ToolStatus.OK.value)
        self._persist()
        return True

    def answered(self, call_id: str) -> bool:
        return call_id in self._answered

    def answered_ok(self, call_id: str) -> bool:
        return call_id in self._ok

    def made_before(self, turn_id: int, call: ToolCallRequest) -> bool:
        """Turn ``turn_id`` already made this call (the same tool, the same arguments)."""
        return self._made.get(_key(call)) == turn_id

    def start(self, turn_id: int, request: ToolCallRequest) -> ToolRun:
        """Run ``request`` in a task of the ledger; a call that already has a result is
        never run again (its run is finished at once, with that result)."""
        run = ToolRun(turn_id, request, self.toolbox.get(request.name))
        if request.call_id in self._answered or request.call_id in self._runs:
            log.warning("tool call %s already ran: not run again", request.call_id)
            run.result = ToolResult.failed(run.call, ToolStatus.ERROR, "this call already ran")
            run.task = asyncio.create_task(asyncio.sleep(0))
            return run
        self._runs[request.call_id] = run
        run.task = asyncio.create_task(self._execute(run), name=f"tool-{request.call_id}")
        return run

    async def _execute(self, run: ToolRun) -> None:
        try:
            if run.request.error:  # arguments that are no JSON object, or cut off
                result = ToolResult.failed(run.call, ToolStatus.ERROR, run.request.error)
            else:
                result = await self.toolbox.run(run.call, self._caller.call_context())
        except asyncio.CancelledError:
            self.settle(run, ToolResult.cancelled(run.call, _since(run.started_ns)))
            raise
        self.settle(run, result)
        if run.detached:
            with contextlib.suppress(Exception):  # the connection may be gone
                await self._outbox.send(run.finished())

    def stop(self, run: ToolRun) -> None:
        """The reply that waited for ``run`` ended (a barge-in, a hang-up): a read-only
        tool is cancelled now, with its cancellation recorded; any other runs on, and its
        result joins the history when it comes."""
        if run.task.done():
            return
        if run.cancellable:
            self.settle(run, ToolResult.cancelled(run.call, _since(run.started_ns)))
            run.task.cancel()
        else:
            run.detached = True

    def settle(self, run: ToolRun, result: ToolResult) -> None:
        """The one place a server tool's result is written; the first result wins."""
        if run.result is not None:
            return
        self._runs.pop(run.request.call_id, None)
        run.result = result
        if result.ok:
            self._ok.add(result.call_id)
        name = (
            result.name
            if result.name in self.toolbox or self.runs_on_client(result.name)
            else "unknown"
        )
        self._metrics.observe_tool(name, result.status, result.duration_s)
        self._write_result(
            run.turn_id, result.name, result.call_id, result.content(), result.status
        )
        self._persist()

    def _write_result(
        self, turn_id: int, name: str, call_id: str, content: str, status: str
    ) -> None:
        self._answered.add(call_id)
        content = bounded(content)
        message = ChatMessage("tool", content, tool_call_id=call_id)
        anchor = self._result_anchor(call_id)
        if anchor is None or not self._history.insert_after(anchor, message):
            log.info(
                "tool call %s: its call left the history; the result is only recorded", call_id
            )
        self._recorder.message(turn_id, "tool", content, status)

    def _result_anchor(self, call_id: str) -> ChatMessage | None:
        """Where a result goes: after its call's message and the results already there."""
        turns = self._history.turns
        for i, message in enumerate(turns):
            if any(c.call_id == call_id for c in message.tool_calls):
                while i + 1 < len(turns) and turns[i + 1].role == "tool":
                    i += 1
                return turns[i]
        return None

    def _find_call(self, call_id: str) -> ToolCallRequest | None:
        calls = (c for m in self._history.turns for c in m.tool_calls)
        return next((c for c in calls if c.call_id == call_id), None)

    def prompt(self, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` as the model is shown them: a call still running (a mutating tool
        the caller barged in on) reads as running, so the model does not call it again."""
        if not self._runs:
            return messages
        shown: list[ChatMessage] = []
        waiting: list[str] = []
        for message in messages:
            if waiting and message.role != "tool":
                shown += [ChatMessage("tool", RUNNING, tool_call_id=c) for c in waiting]
                waiting = []
            shown.append(message)
            waiting += [c.call_id for c in message.tool_calls if c.call_id in self._runs]
        shown += [ChatMessage("tool", RUNNING, tool_call_id=c) for c in waiting]
        return shown

    # -- a restore on another worker, and the end of the call -----------------------------

    def saved(self) -> dict[str, Any]:
        return {"tool_reruns": sorted(self._reruns)}

    def restore(self, state: dict[str, Any], turn_id: int) -> list[ToolRun]:
        """Take up the calls of a restored history: those with a result are done; a server
        tool's call with none was running when its worker died. An idempotent tool runs it
        once more (never twice); for any other the model reads that its outcome is unknown.
        A client tool's call waits for the client. Returns the runs started again."""
        self._reruns = set(state.get("tool_reruns") or ())
        self._answered = {m.tool_call_id for m in self._history.turns if m.role == "tool"}
        self.unknown_after_restore = []
        started: list[ToolRun] = []
        for request in _calls(self._history.turns):
            tool = self.toolbox.get(request.name)
            if request.call_id in self._answered or tool is None:
                continue
            again = tool.policy.idempotent and request.call_id not in self._reruns
            log.info(
                "tool call %s (%s) was running when its worker died: %s",
                request.call_id,
                request.name,
                "run again" if again else "its outcome is unknown",
            )
            if again:
                self._reruns.add(request.call_id)
                started.append(self.start(turn_id, request))
            else:
                run = ToolRun(turn_id, request, tool)
                self.settle(run, ToolResult.failed(run.call, ToolStatus.UNKNOWN_OUTCOME, RESTARTED))
                self.unknown_after_restore.append(request.call_id)
        return started

    @property
    def running(self) -> list[ToolRun]:
        return list(self._runs.values())

    async def close(self) -> None:
        """The call is over: read-only tools are cancelled; the others get until their
        timeout (and a little more) to finish, then their outcome is unknown."""
        runs = self.running
        for run in runs:
            if run.cancellable:
                self.stop(run)
        waiting = [run for run in runs if not run.task.done()]
        if waiting:
            timeout = max(_left_s(run) for run in waiting) + CLOSE_GRACE_S
            await asyncio.wait([run.task for run in waiting], timeout=timeout)
        for run in waiting:
            if not run.task.done():
                log.warning("tool call %s still ran at the end of the call", run.request.call_id)
                self.settle(run, ToolResult.unknown_outcome(run.call))
                run.task.cancel()
        await asyncio.gather(*(run.task for run in runs), return_exceptions=True)


def bounded(content: str) -> str:
    """A result as the model is shown it: cut at :data:`MAX_RESULT_CHARS`, saying so."""
    if len(content) <= MAX_RESULT_CHARS:
        return content
    note = {
        "note": f"the result was {len(content)} characters; only its start is shown. "
        "Answer from it, or ask the caller to narrow the request",
        "start": content[:MAX_RESULT_CHARS],
    }
    return json.dumps(note, ensure_ascii=False, separators=(",", ":"))


def _key(call: ToolCallRequest) -> tuple[str, str]:
    return call.name, json.dumps(dict(call.arguments), sort_keys=True, default=str)


def _calls(messages: Iterable[ChatMessage]) -> Iterable[ToolCallRequest]:
    return (call for message in messages for call in message.tool_calls)


def _since(started_ns: int) -> float:
    return (time.monotonic_ns() - started_ns) / 1e9


def _left_s(run: ToolRun) -> float:
    timeout = run.tool.policy.timeout_s if run.tool is not None else 0.0
    return max(0.0, timeout - _since(run.started_ns))
