"""SDP offer and answer for one audio stream (RFC 4566, RFC 3264), as a phone call needs.

An offer is read for its first audio ``m=`` line: where to send RTP (the media's ``c=``, else
the session's), the payload types it offers, their ``rtpmap`` names, and
``telephone-event`` (RFC 4733 keypad digits). The answer takes the first of our codecs
(``sip.codecs``: PCMU and PCMA, RFC 3551's static types 0 and 8 at 8 kHz; opus, RFC 7587,
a dynamic type at 48 kHz, :mod:`codecs`) that the offer has, plus telephone-event when
offered (at the codec's clock if it is offered so, else at any), at ``ptime:20``. Any other
``m=`` line is answered with port 0 (declined), as RFC 3264 asks.

A call we place turns it around: :func:`offer` lists our codecs (opus as
:data:`OFFERED_OPUS`, and telephone-event, as :data:`OFFERED_DTMF`), and
:func:`accept_answer` takes the callee's answer: the first of its payload types that we
offered.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Sequence
from dataclasses import dataclass

from voxpipe.transports.sip.codecs import CODECS, FRAME_MS, CodecInfo, RtpCodec, codec_for
from voxpipe.transports.sip.message import SipError

STATIC = {0: "PCMU", 8: "PCMA"}  # RFC 3551's static payload types we speak
RATE = 8000  # G.711's clock, and telephone-event's unless a codec's clock says otherwise
TELEPHONE_EVENT = "telephone-event"
MAX_SDP_BYTES = 8192
OFFERED_DTMF = 101  # the dynamic payload type our offer gives telephone-event
OFFERED_OPUS = 111  # ... and opus


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

    codec: str  # PCMU, PCMA or opus (``sip.codecs``)
    payload_type: int
    dtmf_payload_type: int | None
    remote: tuple[str, int]
    dtmf_rate: int = RATE  # telephone-event's clock as negotiated

    @property
    def info(self) -> CodecInfo:
        return CODECS[self.codec]

    def new_codec(self) -> RtpCodec:
        """The call's own encoder and decoder (Opus keeps state between packets)."""
        return codec_for(self.codec)


def _rtpmap(name: str) -> tuple[str, int]:
    """An rtpmap's encoding (upper-case) and clock rate: ``OPUS/48000/2`` -> (OPUS, 48000)."""
    parts = name.upper().split("/")
    rate = parts[1] if len(parts) > 1 else ""
    return parts[0], int(rate) if rate.isdigit() else 0


def _payload_type(offer: MediaOffer, encoding: str, rate: int) -> int | None:
    """The offer's first payload type of ``encoding`` at ``rate``."""
    return next(
        (pt for pt in offer.payload_types if _rtpmap(offer.names.get(pt, "")) == (encoding, rate)),
        None,
    )


def _dtmf(offer: MediaOffer, rate: int) -> tuple[int | None, int]:
    """telephone-event's payload type and clock: at ``rate`` if offered so, else at any."""
    pt = _payload_type(offer, TELEPHONE_EVENT.upper(), rate)
    if pt is not None:
        return pt, rate
    for other in offer.payload_types:
        encoding, clock = _rtpmap(offer.names.get(other, ""))
        if encoding == TELEPHONE_EVENT.upper():
            return other, clock
    return None, RATE


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
    for codec in codecs:
        info = CODECS[codec]
        pt = _payload_type(offer, info.encoding, info.clock_rate)
        if pt is not None:
            dtmf, dtmf_rate = _dtmf(offer, info.clock_rate)
            return Negotiated(codec, pt, dtmf, (offer.address, offer.port), dtmf_rate)
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
    attributes = _codec_lines(chosen.payload_type, chosen.info)
    if chosen.dtmf_payload_type is not None:
        types.append(chosen.dtmf_payload_type)
        dtmf = chosen.dtmf_payload_type
        attributes.append(f"a=rtpmap:{dtmf} {TELEPHONE_EVENT}/{chosen.dtmf_rate}")
        attributes.append(f"a=fmtp:{dtmf} 0-16")
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


def _codec_lines(pt: int, info: CodecInfo) -> list[str]:
    """A codec's rtpmap, and for Opus the fmtp saying we send and want mono (RFC 7587, 7)."""
    lines = [f"a=rtpmap:{pt} {info.rtpmap}"]
    if info.name == "opus":
        lines.append(f"a=fmtp:{pt} stereo=0;sprop-stereo=0;useinbandfec=0")
    return lines


def offered_payload_type(codec: str) -> int:
    """The payload type our offer gives ``codec``."""
    static = CODECS[codec].static_payload_type
    return OFFERED_OPUS if static is None else static


def offer(codecs: Sequence[str], address: str, port: int) -> bytes:
    """Our offer for a call we place: ``codecs`` in order of preference, then
    telephone-event, on our RTP ``address:port``."""
    types = [offered_payload_type(codec) for codec in codecs] + [OFFERED_DTMF]
    lines = [
        *_session(address),
        f"m=audio {port} RTP/AVP {' '.join(map(str, types))}",
        *(line for c in codecs for line in _codec_lines(offered_payload_type(c), CODECS[c])),
        f"a=rtpmap:{OFFERED_DTMF} {TELEPHONE_EVENT}/{RATE}",
        f"a=fmtp:{OFFERED_DTMF} 0-16",
        f"a=ptime:{FRAME_MS}",
        "a=sendrecv",
    ]
    return ("\r\n".join(lines) + "\r\n").encode()


def accept_answer(answer: MediaOffer, codecs: Sequence[str]) -> Negotiated:
    """What the callee's answer to :func:`offer` chose: its first payload type that is one
    of ``codecs``; :class:`SipError` 488 when it chose none of them."""
    ours = {(CODECS[c].encoding, CODECS[c].clock_rate): c for c in codecs}
    for pt in answer.payload_types:
        name = ours.get(_rtpmap(answer.names.get(pt, "")))
        if name is not None:
            dtmf, dtmf_rate = _dtmf(answer, CODECS[name].clock_rate)
            return Negotiated(name, pt, dtmf, (answer.address, answer.port), dtmf_rate)
    names = [answer.names.get(pt, f"payload type {pt}") for pt in answer.payload_types]
    raise SipError(488, f"the answer has none of our codecs: {', '.join(names) or 'none'}")
