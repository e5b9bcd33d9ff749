"""A tool's hold on the call itself: ending it, or moving it to another number.

A tool is told who the call is for (:meth:`CallControl.call_context`), and through it may end
or transfer the call. Neither happens at once: the reply in progress says its goodbye (or
"putting you through") first, and the transport is told (``CallEnded``, ``CallTransfer``)
once the caller has heard it out. A caller who talks over that reply keeps the call.
A transport whose wire cannot move a call (:data:`CANNOT_TRANSFER`) offers no transfer, so
the tool fails as it says, rather than promising "putting you through" to a call that stays.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from voxpipe.agent.call_context import CallContext
from voxpipe.conversation.events import CallEnded, CallTransfer, ClientOutbox
from voxpipe.conversation.inbound import Inbound
from voxpipe.conversation.reply import Reply
from voxpipe.conversation.reply_audio import Pacer
from voxpipe.conversation.reply_status import ReplyStatus
from voxpipe.conversation.services import CallRecord

CANNOT_TRANSFER = frozenset({"realtime"})
"""Transports with no way to move a call: the OpenAI Realtime API has no event for it."""


class CallControl:
    """The session's ``control``: a tool's end of the call or transfer, carried out once the
    caller has heard the reply in progress."""

    def __init__(
        self,
        record: CallRecord,
        caller: str | None,
        inbound: Inbound,
        pacer: Pacer,
        outbox: ClientOutbox,
        counts: Counter[str],
    ) -> None:
        """``inbound`` names the transport, once the call is attached to one; ``pacer``
        says when the caller will have heard the reply out; ``outbox`` tells the transport,
        and says when the call is over."""
        self._record, self._caller, self._inbound = record, caller, inbound
        self._pacer, self._outbox, self._counts = pacer, outbox, counts
        self._ending: CallEnded | CallTransfer | None = None  # a tool's, after this reply
        self._end_task: asyncio.Task[None] | None = None

    def call_context(self) -> CallContext:
        """Who this call is for, as its tools are told (``agent/call_context.py``)."""
        record = self._record
        return CallContext(
            record.owner,
            record.call_id,
            record.session_id,
            self._inbound.transport,
            self._caller,
            lambda reason: self._after_reply(CallEnded(reason)),
            None
            if self._inbound.transport in CANNOT_TRANSFER
            else lambda target: self._after_reply(CallTransfer(target)),
        )

    def _after_reply(self, event: CallEnded | CallTransfer) -> bool:
        """A tool ended or transferred the call: the transport is told once the reply in
        progress has been heard (:meth:`reply_finished`). False if the call is over."""
        if self._outbox.closed:
            return False
        self._ending = event
        return True

    def reply_finished(self, reply: Reply) -> None:
        """A reply is done: if a tool ended or moved the call meanwhile, the caller hears the
        reply out first; if the caller talked over it, the call is not over yet."""
        if self._ending is None or self._end_task is not None:
            return
        if reply.status is ReplyStatus.INTERRUPTED:
            self._ending = None  # the caller talked over the goodbye: not over yet
        else:
            self._end_task = asyncio.create_task(
                self._end_after_playback(self._ending), name=f"end-{self._record.session_id}"
            )

    async def _end_after_playback(self, event: CallEnded | CallTransfer) -> None:
        """The last reply is done; the caller hears it out, then the call ends or moves."""
        await asyncio.sleep(max(0.0, self._pacer.ends_at_ns - time.monotonic_ns()) / 1e9)
        if not self._outbox.closed:
            self._counts["ended_by_agent" if isinstance(event, CallEnded) else "transfers"] += 1
            await self._outbox.send(event)

    async def close(self) -> None:
        """The call is closing (its outbox is closed: no tool ends or moves it any more):
        the end waiting for the caller to hear the last reply out is called off."""
        task = self._end_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
