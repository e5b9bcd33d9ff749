"""An agent whose tools go wrong, for ``test_tool_bad_input.py``: ``weather`` raises,
``stock_check`` runs past its timeout, ``opening_hours`` works, and both of its MCP servers
are down (``crm``: nothing listens at ``BAD_TOOLS_MCP_URL``; ``ledger``: a stdio command
that exits at once). Served with ``VOXPIPE_AGENT=tests/e2e/bad_tools_agent.py:agent``.

The prompt follows ``restaurant_agent.py``: worked examples, one per tool, are what make the
embedded 0.5B model call the tool a request names.
"""

from __future__ import annotations

import asyncio
import os
import sys

from voxpipe.agent import Agent, McpServerConfig, tool

STOCK_TIMEOUT_S = 2.0
STOCK_TIMEOUT_PHRASE = "Sorry, the stock room is not answering."
WEATHER_FAILURE = "the weather service is down"


@tool(effect="read_only", phrase="Let me look outside.")
async def weather(city: str) -> str:
    """The weather today in a city."""
    raise RuntimeError(WEATHER_FAILURE)


@tool(
    effect="read_only",
    phrase="Let me check the stock.",
    timeout_s=STOCK_TIMEOUT_S,
    timeout_phrase=STOCK_TIMEOUT_PHRASE,
)
async def stock_check(item: str) -> str:
    """Whether the shop has an item in stock."""
    await asyncio.sleep(60)
    return f"{item}: in stock"


@tool(effect="read_only")
def opening_hours(day: str) -> str:
    """The shop's opening hours on a day of the week."""
    return "We are closed." if day.lower() == "sunday" else "We are open from nine to six."


INSTRUCTIONS = (
    "You are the phone assistant of the shop Voxpipe Supplies. Use a tool whenever the caller "
    "asks about the weather, about whether an item is in stock, or about opening hours; "
    "otherwise answer in one short spoken sentence. If a tool fails, say sorry in one short "
    "sentence.\n\n"
    "Examples:\n"
    "Caller: What is the weather like in Rome today?\n"
    '<tool_call>\n{"name": "weather", "arguments": {"city": "Rome"}}\n</tool_call>\n'
    "Caller: Do you have any candles in stock?\n"
    '<tool_call>\n{"name": "stock_check", "arguments": {"item": "candles"}}\n</tool_call>\n'
    "Caller: Are you open on Friday?\n"
    '<tool_call>\n{"name": "opening_hours", "arguments": {"day": "friday"}}\n</tool_call>\n'
    "Caller: Thanks, that's all.\n"
    "You're welcome, goodbye!"
)

agent = Agent(
    instructions=INSTRUCTIONS,
    tools=[weather, stock_check, opening_hours],
    mcp_servers=[
        McpServerConfig(
            name="crm",
            url=os.environ.get("BAD_TOOLS_MCP_URL", "http://127.0.0.1:9/mcp"),
            connect_timeout_s=10,
        ),
        McpServerConfig(
            name="ledger",
            command=sys.executable,
            args=["-c", "raise SystemExit(3)"],
            connect_timeout_s=10,
        ),
    ],
    name="voxpipe-supplies",
)
