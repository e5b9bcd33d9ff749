"""Phone calls over providers' media-stream WebSockets: one base (``base.py``: what a provider
implements), one media stream (``media_stream.py``: the session, the audio, marks and clear,
keys, errors) and one small module per provider that only translates its wire protocol.
:data:`PROVIDERS` is the one list of them: the server opens a route ``/v1/<name>`` for each,
and ``POST /v1/calls`` dials through those that place calls."""

from __future__ import annotations

from voxpipe.transports.telephony.base import Provider
from voxpipe.transports.telephony.exotel import Exotel
from voxpipe.transports.telephony.media_stream import TelephonyTransport
from voxpipe.transports.telephony.plivo import Plivo
from voxpipe.transports.telephony.telnyx import Telnyx
from voxpipe.transports.telephony.twilio import Twilio
from voxpipe.transports.telephony.vonage import Vonage

PROVIDERS: tuple[type[Provider], ...] = (Twilio, Telnyx, Plivo, Vonage, Exotel)


def transports() -> list[TelephonyTransport]:
    """A transport (a route) for each provider."""
    return [TelephonyTransport(provider) for provider in PROVIDERS]
