"""A small real MCP server for the tests: run as a script it serves stdio; ``build()`` gives
the same server for streamable HTTP."""

from __future__ import annotations

import asyncio
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field


def build() -> MCPServer:
    server = MCPServer("voxpipe-test", log_level="ERROR")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def opening_hours(day: Annotated[str, Field(description="a weekday")]) -> str:
        """When the restaurant is open on a day."""
        return f"{day}: 12:00-22:00"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    def cancel_booking(booking_id: int) -> dict[str, object]:
        """Cancel a booking (cancelling twice is the same as once)."""
        return {"cancelled": booking_id}

    @server.tool()
    def book(name: str, party: int) -> str:
        """Book a table."""
        return f"booked {party} for {name}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def whoami(ctx: Context) -> dict[str, object]:
        """Who the server says is calling (the request's _meta)."""
        meta = ctx.request_context.meta or {}
        return dict(meta.get("voxpipe/call") or {})

    @server.tool()
    def broken() -> str:
        """Always fails."""
        raise ToolError("the kitchen is on fire")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Takes its time."""
        await asyncio.sleep(seconds)
        return "done"

    return server


if __name__ == "__main__":
    build().run("stdio")
