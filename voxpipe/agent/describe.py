"""``voxpipe agent``: what a running agent offers, as text for a person."""

from __future__ import annotations

import json
import textwrap

from voxpipe.agent.runtime import RunningAgent

SUMMARY_CHARS = 160


def describe(running: RunningAgent) -> list[str]:
    """The agent's instructions (the start), greeting, every tool with its policy and
    schema, and each MCP server with its tools or why it could not be reached."""
    agent = running.agent
    instructions = " ".join(agent.instructions.split())
    lines = [
        f"agent: {agent.name}",
        f"instructions ({len(agent.instructions)} characters): "
        + textwrap.shorten(instructions, SUMMARY_CHARS, placeholder=" …"),
        f"greeting: {agent.greeting if agent.greeting is not None else '(none)'}",
        f"tools: {len(running.toolbox)}",
    ]
    for tool in running.toolbox:
        policy = tool.policy
        lines += [
            f"  {tool.name}  [{tool.kind}]  effect={policy.effect.value}  "
            f"idempotent={'yes' if policy.idempotent else 'no'}  "
            f"timeout={policy.timeout_s:g} s  phrase={policy.phrase!r}",
            f"    {tool.spec.description.splitlines()[0] if tool.spec.description else ''}",
            f"    parameters: {json.dumps(tool.spec.parameters, separators=(',', ':'))}",
        ]
    if running.connections:
        lines.append("mcp servers:")
    for connection in running.connections:
        where = connection.config.command or connection.config.url
        if connection.name in running.unavailable:
            state = f"UNAVAILABLE: {running.unavailable[connection.name]}"
        else:
            names = [
                t.name for t in running.toolbox if getattr(t, "connection", None) is connection
            ]
            state = f"{len(names)} tools: {', '.join(names) or '-'}"
        lines.append(f"  {connection.name} ({connection.config.transport}, {where}): {state}")
    return lines
