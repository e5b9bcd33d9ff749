"""Python functions as tools: ``@tool`` reads the signature, pydantic does the rest.

A parameter typed :class:`~voxpipe.agent.call_context.CallContext` is not an argument:
the model never sees it, and each call fills it with who is calling (``call_context.py``).

The function's other parameters become a pydantic model (``extra="forbid"``: an argument the
model made up is an error, not silently dropped); its JSON schema is what the LLM sees, and
the same model validates and coerces every call's arguments, so the schema shown and the
check applied cannot drift apart. The docstring is the description; a parameter's own
description comes from ``Annotated[T, Field(description=...)]``.

A ``def`` (not ``async def``) tool runs on a small thread pool of its own, never on the
event loop. Python cannot stop a thread, so a sync tool that times out keeps running to its
end in the background; its result is dropped.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Unpack, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import PydanticSerializationError, to_jsonable_python

from voxpipe.agent import schema
from voxpipe.agent.call_context import CallContext
from voxpipe.agent.tools import (
    DEFAULT_PHRASE,
    DEFAULT_TIMEOUT_PHRASE,
    DEFAULT_TIMEOUT_S,
    InvalidArguments,
    PolicyOptions,
    Tool,
    ToolDefinitionError,
    ToolEffect,
    ToolFailed,
    ToolOutput,
    ToolPolicy,
    tool_spec,
)
from voxpipe.engines.base import ToolSpec

SYNC_TOOL_THREADS = 4
"""Sync tools run at most this many at once (they wait on I/O, not on the CPU)."""

_executor: ThreadPoolExecutor | None = None


def _sync_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(SYNC_TOOL_THREADS, thread_name_prefix="voxpipe-tool")
    return _executor


class PythonTool(Tool):
    """A Python function offered as a tool; calling the object calls the function."""

    kind = "python"

    def __init__(
        self,
        fn: Callable[..., Any],
        spec: ToolSpec,
        policy: ToolPolicy,
        model: type[BaseModel],
        context_parameter: str | None = None,
    ) -> None:
        super().__init__(spec, policy)
        self.fn = fn
        self.model = model
        self.context_parameter = context_parameter
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            parsed = self.model.model_validate(dict(arguments))
        except ValidationError as exc:
            raise InvalidArguments(self.name, _problems(exc)) from None
        # The fields as parsed (a nested model stays a model), not dumped back to dicts.
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def invoke(self, arguments: dict[str, Any], context: CallContext) -> ToolOutput:
        if self.context_parameter is not None:
            arguments = {**arguments, self.context_parameter: context}
        if self.is_async:
            value = await self.fn(**arguments)
        else:
            loop = asyncio.get_running_loop()
            call = functools.partial(self.fn, **arguments)
            value = await loop.run_in_executor(_sync_executor(), call)
        try:
            return to_jsonable_python(value)
        except PydanticSerializationError as exc:
            raise ToolFailed(f"{self.name} returned a value JSON cannot carry: {exc}") from None


def arguments_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """A pydantic model of ``fn``'s parameters; ToolDefinitionError if one has no type."""
    name = getattr(fn, "__name__", "tool")
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # an annotation that names something undefined
        raise ToolDefinitionError(f"tool {name}: its type hints do not resolve: {exc}") from exc
    fields: dict[str, Any] = {}
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.name == context_parameter(fn):
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {name}: *args and **kwargs cannot be described")
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"tool {name}: {parameter.name} is positional-only")
        if parameter.name not in hints:
            raise ToolDefinitionError(f"tool {name}: parameter {parameter.name} has no type hint")
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (hints[parameter.name], default)
    try:
        return create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except Exception as exc:  # a type pydantic cannot validate
        raise ToolDefinitionError(_untypable(name, fields, exc)) from exc


def context_parameter(fn: Callable[..., Any]) -> str | None:
    """The parameter of ``fn`` typed :class:`CallContext`, if it has one (two are an
    error: which would the toolbox fill?)."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return None  # arguments_model reports it
    named = [name for name, hint in hints.items() if hint is CallContext and name != "return"]
    if len(named) > 1:
        name = getattr(fn, "__name__", "tool")
        raise ToolDefinitionError(f"tool {name}: two parameters are typed CallContext")
    return named[0] if named else None


def python_tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ToolPolicy | None = None,
) -> PythonTool:
    """``fn`` as a tool, its schema derived from its signature and docstring."""
    model = arguments_model(fn)
    try:
        parameters = schema.compact(model.model_json_schema())
    except Exception as exc:  # a type with no JSON schema (a bare class, a callable)
        fields = {n: (f.annotation, ...) for n, f in model.model_fields.items()}
        raise ToolDefinitionError(_untypable(fn.__name__, fields, exc)) from exc
    about = description or inspect.getdoc(fn) or ""
    spec = tool_spec(name or fn.__name__, about.strip(), parameters)
    return PythonTool(fn, spec, policy or ToolPolicy(), model, context_parameter(fn))


@overload
def tool(fn: Callable[..., Awaitable[Any]] | Callable[..., Any], /) -> PythonTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    phrase: str = DEFAULT_PHRASE,
    timeout_phrase: str = DEFAULT_TIMEOUT_PHRASE,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    effect: ToolEffect | str = ToolEffect.MUTATING,
    idempotent: bool = False,
    says: str = "",
    confirm: bool | str | Callable[[dict[str, Any]], str] = False,
) -> Callable[[Callable[..., Any]], PythonTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effect: ToolEffect | str = ToolEffect.MUTATING,
    **options: Unpack[PolicyOptions],
) -> PythonTool | Callable[[Callable[..., Any]], PythonTool]:
    """Make a function a tool: ``@tool`` or ``@tool(effect="read_only", phrase="...")``.

    Mutating and not idempotent unless it says otherwise (``tools.py`` explains why).
    """
    policy = ToolPolicy(effect=ToolEffect(effect), **options)

    def decorate(function: Callable[..., Any]) -> PythonTool:
        return python_tool(function, name=name, description=description, policy=policy)

    return decorate if fn is None else decorate(fn)


def _untypable(tool: str, fields: Mapping[str, tuple[Any, Any]], error: Exception) -> str:
    """One line that names the parameter whose type has no JSON schema: pydantic's own
    message is a paragraph about its internals that names neither the tool nor the
    parameter."""
    for parameter, (hint, _) in fields.items():
        try:
            TypeAdapter(hint).json_schema()
        except Exception:
            shown = getattr(hint, "__name__", None) or repr(hint)
            return (
                f"tool {tool}: parameter {parameter}: its type {shown} has no JSON schema "
                "(use str, int, float, bool, a Literal, an enum, a list or a pydantic model)"
            )
    return f"tool {tool}: {str(error).splitlines()[0]}"


def _problems(error: ValidationError) -> list[str]:
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in item["loc"])
        problems.append(f"{where}: {item['msg']}" if where else item["msg"])
    return problems
