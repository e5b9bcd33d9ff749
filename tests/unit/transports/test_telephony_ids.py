"""Every telephony provider's ids and caller number as they reach logs, ``voxpipe calls`` and
a tool's call context (issue 29, finding 7 and "tools know who is calling"): a start whose
stream or call id is not a printable token is refused (closed 1008, ``invalid_event``, no
session); Vonage, whose start names its call only in an NCCO header, gives such a call an
id of its own; a caller number that is not printable reaches no tool."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.transports.test_telephony_providers import IDS, SPECS, Spec, Wire
from voxpipe.transports.telephony.vonage import Vonage

HOSTILE = "\x1b[2J\x1b[Hcall\u202e1"  # clear the screen, then a right-to-left override


@pytest.mark.parametrize("which", ["stream_sid", "call_sid"])
@pytest.mark.parametrize("spec", SPECS, ids=IDS)
async def test_a_start_with_an_id_that_is_not_printable_opens_no_session(
    spec: Spec, which: str
) -> None:
    made = Wire(spec)
    try:
        setattr(made.line, which, HOSTILE)
        if spec.provider is Vonage:  # its one id is the NCCO's call_uuid header
            made.line.stream_sid = made.line.call_sid = HOSTILE
        for message in made.line.opening():
            made.send(message)
        if spec.provider is Vonage:
            await made.stream.until(lambda: made.conn.session is not None)
            session = made.conn.session
            assert session is not None and session.id.isprintable(), session
            assert HOSTILE not in session.id and len(session.id) == 32
            return
        await asyncio.wait_for(made.stream.task, 5)
        assert made.stream.ws.close_code == 1008 and made.conn.session is None, which
        assert made.stream.errors("invalid_event") == 1, which
    finally:
        await made.stream.close()


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
async def test_a_caller_number_that_is_not_printable_reaches_no_tool(spec: Spec) -> None:
    made = Wire(spec)
    try:
        made.line.custom_parameters["From"] = "+1555\x1b[2J0100"
        await made.start()
        session = made.conn.session
        assert session is not None
        assert session.control.call_context().caller is None
        assert session.control.call_context().identity == session.owner
    finally:
        await made.stream.close()
