"""SDP offer and answer for one audio stream (RFC 4566, RFC 3264), as a phone call needs.

An offer is read for its first audio ``m=`` line: where to send RTP (the media's ``c=``, else
the session's), the payload types it offers, their ``rtpmap`` names, and
``telephone-event/8000`` (RFC 4733 keypad digits). The answer takes the first of our codecs
(``sip.codecs``: PCMU, PCMA; both 8 kHz and RFC 3551's static types 0 and 8) that the offer
has, plus telephone-event when offered, at ``ptime:20``. Any other ``m=`` line is answered
with port 0 (declined), as RFC 3264 asks.

A call we place turns it around: :func:`offer` lists our codecs (and telephone-event, as
:data:`OFFERED_DTMF`), and :func:`accept_answer` takes the callee's answer: the first of its
payload types that we offered.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass

from voxpipe.transports.sip.message import SipError
from voxpipe.transports.telephony.codec import AudioFormat, Encoding

STATIC = {0: "PCMU", 8: "PCMA"}  # RFC 3551's static payload types we speak
ENCODINGS = {"PCMU": Encoding.MULAW, "PCMA": Encoding.ALAW}
RATE = 8000
FRAME_MS = 20
TELEPHONE_EVENT = "telephone-event"
MAX_SDP_BYTES = 8192
OFFERED_DTMF = 101  # the dynamic payload type our offer gives telephone-event


@dataclass(frozen=True)
class MediaOffer:
    """The caller's audio stream as its offer describes it."""

    address: str
    port: int
    payload_types: tuple[int, ...]
    names: dict[int, str]  # payload type -> upper-case encoding name, with clock rate
    direction: str  # sendrecv, sendonly, recvonly, inactive
    media: tuple[str, ...]  # every m= line, in order: all but the audio one are declined
    audio_index: int


@dataclass(frozen=True)
class Negotiated:
    """What both ends use: the codec and its payload type, the keypad's payload type."""

    codec: str  # PCMU or PCMA
    payload_type: int
    dtmf_payload_type: int | None
    remote: tuple[str, int]

    @property
    def audio(self) -> AudioFormat:
        return AudioFormat(ENCODINGS[self.codec], RATE)


def parse_offer(body: bytes) -> MediaOffer:
    """The offer's audio stream; :class:`SipError` 400 for SDP we cannot read, 488 for SDP
    with no audio stream."""
    if len(body) > MAX_SDP_BYTES:
        raise SipError(400, f"SDP over {MAX_SDP_BYTES} bytes")
    try:
        lines = [line.strip() for line in body.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError as exc:
        raise SipError(400, "SDP is not UTF-8") from exc
    if not lines or lines[0] != "v=0":
        raise SipError(400, "SDP does not start with v=0")
    session_address: str | None = None
    media: list[list[str]] = []
    for line in lines:
        if len(line) < 2 or line[1] != "=":
            raise SipError(400, f"not an SDP line: {line[:60]!r}")
        if line.startswith("m="):
            media.append([line])
        elif media:
            media[-1].append(line)
        elif line.startswith("c="):
            session_address = _address(line)
    audio = next((m for m in media if m[0].startswith("m=audio ")), None)
    if audio is None:
        raise SipError(488, "the offer has no audio stream")
    fields = audio[0][2:].split()  # audio <port>[/<count>] <proto> <payload types>
    port_text = fields[1].split("/")[0] if len(fields) > 1 else ""
    if len(fields) < 4 or not port_text.isdigit() or fields[2] != "RTP/AVP":
        raise SipError(488, f"audio is not RTP/AVP on a port: {audio[0][:80]!r}")
    port = int(port_text)
    if not all(f.isdigit() and int(f) < 128 for f in fields[3:]):
        raise SipError(400, "payload types are numbers 0-127")
    address = session_address
    names: dict[int, str] = {pt: f"{name}/{RATE}" for pt, name in STATIC.items()}
    direction = "sendrecv"
    for line in audio[1:]:
        if line.startswith("c="):
            address = _address(line)
        elif line.startswith("a=rtpmap:"):
            number, _, name = line[len("a=rtpmap:") :].partition(" ")
            if number.isdigit():
                names[int(number)] = name.strip().upper()
        elif line[2:] in ("sendrecv", "sendonly", "recvonly", "inactive"):
            direction = line[2:]
    if address is None:
        raise SipError(400, "the offer has no connection address (c=)")
    if not 0 < port < 65536:
        raise SipError(488, "the audio stream's port is 0: nothing to answer")
    types = tuple(int(f) for f in fields[3:])
    lines_m = tuple(m[0] for m in media)
    return MediaOffer(address, port, types, names, direction, lines_m, media.index(audio))


def _address(line: str) -> str:
    parts = line[2:].split()
    if len(parts) != 3 or parts[0] != "IN" or parts[1] not in ("IP4", "IP6"):
        raise SipError(400, f"not a connection line: {line[:60]!r}")
    address = parts[2].split("/")[0]
    try:
        ipaddress.ip_address(address)
    except ValueError as exc:
        raise SipError(400, f"the connection address {address[:60]!r} is not an IP") from exc
    return address


def negotiate(offer: MediaOffer, codecs: Sequence[str]) -> Negotiated:
    """Our first codec the offer has, and its telephone-event; 488 when none is common."""
    offered = {offer.names.get(pt, ""): pt for pt in reversed(offer.payload_types)}
    for codec in codecs:
        pt = offered.get(f"{codec}/{RATE}")
        if pt is not None:
            dtmf = offered.get(f"{TELEPHONE_EVENT.upper()}/{RATE}")
            return Negotiated(codec, pt, dtmf, (offer.address, offer.port))
    names = [offer.names.get(pt, f"payload type {pt}") for pt in offer.payload_types]
    raise SipError(488, f"no common codec: offered {', '.join(names) or 'none'}")


_ANSWER_DIRECTION = {"sendonly": "recvonly", "recvonly": "sendonly"}


def _session(address: str) -> list[str]:
    """The session lines of our SDP: its origin and connection at ``address``."""
    family = "IP6" if ":" in address else "IP4"
    version = int(time.time())
    return [
        "v=0",
        f"o=voxpipe {version} {version} IN {family} {address}",
        "s=voxpipe",
        f"c=IN {family} {address}",
        "t=0 0",
    ]


def answer(offer: MediaOffer, chosen: Negotiated, address: str, port: int) -> bytes:
    """Our answer: the chosen codec (and telephone-event) on our RTP ``address:port``."""
    types = [chosen.payload_type]
    attributes = [f"a=rtpmap:{chosen.payload_type} {chosen.codec}/{RATE}"]
    if chosen.dtmf_payload_type is not None:
        types.append(chosen.dtmf_payload_type)
        attributes.append(f"a=rtpmap:{chosen.dtmf_payload_type} {TELEPHONE_EVENT}/{RATE}")
        attributes.append(f"a=fmtp:{chosen.dtmf_payload_type} 0-16")
    lines = _session(address)
    for index, offered in enumerate(offer.media):  # the offer's order (RFC 3264, 6)
        if index == offer.audio_index:
            lines.append(f"m=audio {port} RTP/AVP {' '.join(map(str, types))}")
            lines.extend(attributes)
            lines.append(f"a=ptime:{FRAME_MS}")
            lines.append(f"a={_ANSWER_DIRECTION.get(offer.direction, offer.direction)}")
        else:  # declined: same kind and protocol, port 0
            kind, _, rest = offered[2:].partition(" ")
            _, _, formats = rest.partition(" ")
            lines.append(f"m={kind} 0 {formats}")
    return ("\r\n".join(lines) + "\r\n").encode()


def offer(codecs: Sequence[str], address: str, port: int) -> bytes:
    """Our offer for a call we place: ``codecs`` in order of preference, then
    telephone-event, on our RTP ``address:port``."""
    by_name = {name: pt for pt, name in STATIC.items()}
    types = [by_name[codec] for codec in codecs] + [OFFERED_DTMF]
    lines = [
        *_session(address),
        f"m=audio {port} RTP/AVP {' '.join(map(str, types))}",
        *(f"a=rtpmap:{by_name[codec]} {codec}/{RATE}" for codec in codecs),
        f"a=rtpmap:{OFFERED_DTMF} {TELEPHONE_EVENT}/{RATE}",
        f"a=fmtp:{OFFERED_DTMF} 0-16",
        f"a=ptime:{FRAME_MS}",
        "a=sendrecv",
    ]
    return ("\r\n".join(lines) + "\r\n").encode()


def accept_answer(answer: MediaOffer, codecs: Sequence[str]) -> Negotiated:
    """What the callee's answer to :func:`offer` chose: its first payload type that is one
    of ``codecs``; :class:`SipError` 488 when it chose none of them."""
    for pt in answer.payload_types:
        name = answer.names.get(pt, "").removesuffix(f"/{RATE}")
        if name in codecs:
            dtmf = next(
                (
                    t
                    for t in answer.payload_types
                    if answer.names.get(t) == f"{TELEPHONE_EVENT.upper()}/{RATE}"
                ),
                None,
            )
            return Negotiated(name, pt, dtmf, (answer.address, answer.port))
    names = [answer.names.get(pt, f"payload type {pt}") for pt in answer.payload_types]
    raise SipError(488, f"the answer has none of our codecs: {', '.join(names) or 'none'}")
