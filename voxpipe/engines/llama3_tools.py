"""Tool calls of the Llama 3.x family (3.1, 3.2, 3.3 Instruct), as its chat template writes them.

Meta's template lists the tools (``tools``) in the first user message, asks for calls as
``{"name": function name, "parameters": dictionary of argument name and its value}``, and
writes the assistant's past calls that way (one per turn) and results as ``ipython``
turns. The model opens a call with that JSON, or with ``<|python_tag|>`` (its built-in
tools' marker, which 3.2 also puts before custom calls): both count as a call's start.
Everything else, the decision on the first token and the grammar, is the engine's.
"""

from __future__ import annotations

from voxpipe.engines.tool_family import ToolFamily, native_chat

PYTHON_TAG = "<|python_tag|>"

LLAMA3 = ToolFamily(
    name="llama3",
    arguments_key="parameters",
    markup=(PYTHON_TAG,),
    starts=(PYTHON_TAG,),
    chat=native_chat,
)


def matches(source: str, architecture: str) -> bool:
    """Meta's header tokens and its JSON call format (``"parameters"``) in the template."""
    return "<|start_header_id|>" in source and '"parameters"' in source
