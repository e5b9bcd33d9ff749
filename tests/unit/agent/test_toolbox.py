"""The toolbox answers every call with a result: nothing a tool does escapes."""

from __future__ import annotations

import asyncio

import pytest

from voxpipe.agent import (
    AgentHooks,
    Toolbox,
    ToolCall,
    ToolDefinitionError,
    ToolResult,
    ToolStatus,
    tool,
)


@tool(timeout_s=0.2, effect="read_only")
async def sleepy(seconds: float) -> str:
    """Sleeps."""
    await asyncio.sleep(seconds)
    return "awake"


@tool
async def explode() -> None:
    """Raises."""
    raise RuntimeError("boom")


@tool
async def own_timeout() -> None:
    """Raises its own TimeoutError (an HTTP read, say)."""
    raise TimeoutError("upstream read timed out")


@tool
async def not_json() -> object:
    """Returns something JSON cannot carry."""
    return {"a": object()}


async def test_a_tool_past_its_timeout_gives_a_timeout_result() -> None:
    result = await Toolbox([sleepy]).run(ToolCall("c1", "sleepy", {"seconds": 5}))
    assert result.status is ToolStatus.TIMEOUT
    assert result.output == {"error": "sleepy did not finish within 0.2 s"}
    assert 0.2 <= result.duration_s < 1.0


async def test_a_tool_in_time_is_ok() -> None:
    result = await Toolbox([sleepy]).run(ToolCall("c1", "sleepy", {"seconds": 0}))
    assert result == ToolResult("c1", "sleepy", ToolStatus.OK, "awake", result.duration_s)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (ToolCall("c1", "explode", {}), "RuntimeError: boom"),
        (ToolCall("c1", "own_timeout", {}), "TimeoutError: upstream read timed out"),
        (ToolCall("c1", "nowhere", {}), "there is no tool named 'nowhere'"),
        (ToolCall("c1", "sleepy", {"seconds": "soon"}), "invalid arguments for sleepy: seconds"),
        (ToolCall("c1", "sleepy", ["x"]), "invalid arguments for sleepy: the arguments"),  # type: ignore[arg-type]
        (ToolCall("c1", "not_json", {}), "not_json returned a value JSON cannot carry"),
    ],
)
async def test_failures_are_error_results(call: ToolCall, error: str) -> None:
    result = await Toolbox([sleepy, explode, own_timeout, not_json]).run(call)
    assert result.status is ToolStatus.ERROR
    assert isinstance(result.output, dict)
    assert str(result.output["error"]).startswith(error), result.output


async def test_a_cancelled_call_reraises_and_the_hook_hears_of_it() -> None:
    ended: list[ToolResult] = []

    async def on_tool_end(call: ToolCall, result: ToolResult) -> None:
        ended.append(result)

    toolbox = Toolbox([sleepy], AgentHooks(on_tool_end=on_tool_end))
    task = asyncio.create_task(toolbox.run(ToolCall("c1", "sleepy", {"seconds": 0.15})))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [r.status for r in ended] == [ToolStatus.CANCELLED]


async def test_hooks_see_each_call_and_their_failures_do_not_escape() -> None:
    started: list[str] = []

    async def on_tool_start(call: ToolCall) -> None:
        started.append(call.call_id)
        raise ValueError("a broken audit hook")

    toolbox = Toolbox([sleepy], AgentHooks(on_tool_start=on_tool_start))
    result = await toolbox.run(ToolCall("c9", "sleepy", {"seconds": 0}))
    assert result.ok and started == ["c9"]


def test_two_tools_with_one_name_are_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="two tools are named sleepy"):
        Toolbox([sleepy, sleepy])


def test_results_and_calls_round_trip_for_the_store() -> None:
    call = ToolCall("c1", "book", {"party": 2})
    assert ToolCall.from_dict(call.to_dict()) == call
    for result in (
        ToolResult("c1", "book", ToolStatus.OK, {"id": 7}, 0.25),
        ToolResult.cancelled(call, 0.1),
        ToolResult.unknown_outcome(call),
    ):
        assert ToolResult.from_dict(result.to_dict()) == result
    assert ToolResult.unknown_outcome(call).status is ToolStatus.UNKNOWN_OUTCOME


def test_the_toolbox_lists_openai_tools() -> None:
    toolbox = Toolbox([sleepy, explode])
    assert [t["function"]["name"] for t in toolbox.openai_tools()] == ["sleepy", "explode"]
    assert "sleepy" in toolbox and len(toolbox) == 2
