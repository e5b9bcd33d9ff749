"""Whether a session's instructions and tools leave the model room for the conversation.

Every prompt begins with the instructions and every tool offered (the server's and a
client's), and the LLM drops old turns to fit the rest; when that head alone fills the
context, every turn fails. A Realtime client may declare 128 tools, so the size of what it
asks for is checked at ``session.update``, where it can be refused, not found out by each
turn that follows.

The count is an estimate, not the engine's tokenizer: the remote engine has none to ask, and
tokenizing a client's 200 KB of tools would hold the event loop. It counts
:data:`BYTES_PER_TOKEN` bytes of UTF-8 a token. A common BPE tokenizer takes 2.6-2.7 bytes
a token for JSON schemas and about 4 for English prose, so the estimate is a little short
for tools and long for instructions; the quarter of the context kept for the conversation
(:data:`CONVERSATION_SHARE`) absorbs the difference, and a head the estimate accepts still
leaves some 700 tokens of a 4,096 context. Text written to defeat it (a run of digits is a
token a byte) can pass; then the turn fails with its own typed error
(``context_length_exceeded``), and the call goes on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from voxpipe.engines.base import ToolSpec

BYTES_PER_TOKEN = 3.0
TOOLS_FRAME_TOKENS = 100  # the prompt's words around the tools (a template's header)
CONVERSATION_SHARE = 4  # a quarter of the context is kept for the turns and results


def estimate_tokens(text: str) -> int:
    return round(len(text.encode()) / BYTES_PER_TOKEN)


def tool_tokens(tools: Sequence[ToolSpec]) -> int:
    """The tools as a prompt lists them: each one's JSON."""
    if not tools:
        return 0
    listed = "\n".join(json.dumps(t.openai(), ensure_ascii=False) for t in tools)
    return TOOLS_FRAME_TOKENS + estimate_tokens(listed)


@dataclass(frozen=True)
class PromptBudget:
    """The tokens of a context the prompt's fixed head may take: ``n_ctx`` less the reply
    (``max_tokens``) and the share kept for the conversation."""

    n_ctx: int
    max_tokens: int

    @property
    def head_tokens(self) -> int:
        return self.n_ctx - self.max_tokens - self.n_ctx // CONVERSATION_SHARE

    def overflow(
        self, instructions: str, server_tools: Sequence[ToolSpec], client_tools: Sequence[ToolSpec]
    ) -> str | None:
        """Why this head leaves too little room, for the client; None if it fits."""
        own = estimate_tokens(instructions) + tool_tokens([*server_tools, *client_tools])
        if own <= self.head_tokens:
            return None
        theirs = tool_tokens(client_tools)
        return (
            f"the instructions and tools come to about {own} tokens (the client's tools about "
            f"{theirs}); the model's context is {self.n_ctx} tokens, and at most "
            f"{self.head_tokens} may go to instructions and tools, so that the conversation "
            "and the reply fit: declare fewer or shorter tools"
        )
