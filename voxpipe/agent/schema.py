"""JSON schemas for tools: checked once at start, applied to every call's arguments.

A Python tool's schema comes from pydantic, which writes titles on every property and puts
enums and nested models under ``$defs``. Both cost a small model prompt tokens and some LLM
servers and grammar converters do not follow ``$ref``, so :func:`compact` drops the titles
and inlines the definitions. HTTP and MCP tools bring a schema of their own, which
:func:`checked` verifies and :func:`validate_arguments` applies with ``jsonschema``.

A schema may come from a client (a Realtime ``session.tools``), so :func:`checked` measures
its nesting without recursion first: ``jsonschema`` (and the prompt and grammar built from a
schema later) recurse once per level, and 400 nested objects exhausted the interpreter's
stack. :data:`MAX_DEPTH` is far beyond any real tool's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators

from voxpipe.agent.tools import InvalidArguments, ToolDefinitionError

MAX_DEPTH = 32  # nested JSON objects and arrays in one parameters schema
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_KEYS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def compact(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` without titles and with its ``$defs`` inlined (kept when recursive)."""
    definitions = dict(schema.get("$defs", {}))
    try:
        body = _compact({k: v for k, v in schema.items() if k != "$defs"}, definitions, ())
    except _Recursive:
        return dict(schema)
    return body


class _Recursive(Exception):
    pass


def _compact(node: Any, definitions: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in seen or name not in definitions:
            raise _Recursive(name)
        out.update(_compact(definitions[name], definitions, (*seen, name)))
    for key, value in node.items():
        if key in ("title", "$ref"):
            continue
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _compact(sub, definitions, seen) for name, sub in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [_compact(sub, definitions, seen) for sub in value]
        elif key in _SUBSCHEMA_KEYS:
            out[key] = _compact(value, definitions, seen)
        else:
            out[key] = value
    return out


def checked(tool: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` if it is a valid JSON schema for an object; else a ToolDefinitionError."""
    if schema.get("type") != "object":
        raise ToolDefinitionError(f"tool {tool}: its parameters must be a JSON object schema")
    if depth(schema) > MAX_DEPTH:
        raise ToolDefinitionError(
            f"tool {tool}: its parameters schema nests deeper than {MAX_DEPTH} levels"
        )
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ToolDefinitionError(f"tool {tool}: invalid parameters schema: {exc.message}") from exc
    return dict(schema)


def depth(value: Any) -> int:
    """How many JSON objects and arrays ``value`` nests (0 for a scalar), measured with a
    stack of its own, so that no nesting overflows the interpreter's."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def validate_arguments(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any]
) -> dict[str, Any]:
    """``arguments`` if ``schema`` accepts them, else :class:`InvalidArguments`."""
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
    if errors:
        raise InvalidArguments(tool, [_where(e) + e.message for e in errors[:5]])
    return dict(arguments)


def _where(error: jsonschema.exceptions.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path)
    return f"{path}: " if path else ""
