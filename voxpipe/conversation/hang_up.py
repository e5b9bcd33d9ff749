"""The end of a session, however its transport ends it: its work cancelled, the time that
took observed (``voxpipe_hangup_cleanup_seconds``: a hang-up must stop every job at once)."""

from __future__ import annotations

import time

from voxpipe.conversation.session import Session


async def hang_up(session: Session) -> None:
    started = time.monotonic()
    await session.close()
    session.services.metrics.hangup_cleanup.observe(time.monotonic() - started)
