"""SIP messages (RFC 3261, section 7): parsing what arrives, writing what we send.

Parsing is in two steps, so that bad input still gets an answer: :func:`parse` splits the
bytes into a start line, headers and a body (it raises :class:`SipError` only when the bytes
are not a SIP message at all, and then keeps whatever headers it read, for the 400); then
:meth:`SipRequest.check` asks for what a request needs before anything acts on it (Via,
From, To, Call-ID, a CSeq whose method is the request's). Headers keep their order and
their repeats (Via); compact names (``i``, ``v``, ``m`` ...) are read as their long forms.

Why not a library: the PyPI candidates either drop an unparseable message without an answer
(aiosipua 0.7, alpha), run their own threads (pyVoIP) or event loop (sippy), and each would
still need wrapping to count bad input; a user agent that answers calls needs this much.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from voxpipe.observability.logs import check_id

SIP_VERSION = "SIP/2.0"
BRANCH_MAGIC = "z9hG4bK"  # RFC 3261 branch ids start with this
MAX_HEADERS = 100
RECENT_S = 32.0  # how long a response is kept for a re-sent request (64 x T1)
RECENT_MAX = 1024
MAX_CALL_ID_CHARS = 256  # RFC 3261 sets none; a caller's id in our logs and dialogs

COMPACT = {
    "i": "call-id",
    "m": "contact",
    "e": "content-encoding",
    "l": "content-length",
    "c": "content-type",
    "f": "from",
    "s": "subject",
    "k": "supported",
    "t": "to",
    "v": "via",
}
REQUIRED = ("via", "from", "to", "call-id", "cseq")
_TOKEN = re.compile(r"^[A-Za-z0-9.!%*_+`'~-]+$")
_REQUEST_LINE = re.compile(r"^([A-Za-z0-9.!%*_+`'~-]+) (\S+) SIP/2\.0$")
_STATUS_LINE = re.compile(r"^SIP/2\.0 ([1-6][0-9]{2}) ?(.*)$")
_CSEQ = re.compile(r"^([0-9]{1,10})\s+([A-Za-z0-9.!%*_+`'~-]+)$")
_TAG = re.compile(r";\s*tag=([^;>\s]+)", re.IGNORECASE)
_BRANCH = re.compile(r";\s*branch=([^;,\s]+)", re.IGNORECASE)
_URI_IN_BRACKETS = re.compile(r"<([^>]*)>")
_HOST_PORT = re.compile(r"^(?:sips?:)?(?:[^@;>]*@)?(\[[^\]]+\]|[^:;>?]+)(?::([0-9]{1,5}))?")

REASONS = {
    100: "Trying",
    180: "Ringing",
    200: "OK",
    400: "Bad Request",
    405: "Method Not Allowed",
    413: "Request Entity Too Large",
    415: "Unsupported Media Type",
    420: "Bad Extension",
    481: "Call/Transaction Does Not Exist",
    482: "Loop Detected",
    486: "Busy Here",
    487: "Request Terminated",
    488: "Not Acceptable Here",
    500: "Server Internal Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "Version Not Supported",
}


class SipError(Exception):
    """A request we refuse: the status to answer with, and why (the reason phrase's text
    goes in a Warning header, so a trunk's log says what was wrong)."""

    def __init__(self, status: int, detail: str, headers: Headers | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = headers  # what was read before the error, to address the answer


Header = tuple[str, str]  # (lower-case long name, value)


@dataclass(frozen=True)
class Headers:
    """A message's headers in order, names folded to lower case and long form."""

    items: tuple[Header, ...] = ()

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.items if k == name), None)

    def all(self, name: str) -> list[str]:
        """Every value of ``name``, a comma-separated header split into its values."""
        out: list[str] = []
        for key, value in self.items:
            if key == name:
                out.extend(_split_commas(value))
        return out


def _split_commas(value: str) -> list[str]:
    """Split a header's comma-separated values, not inside quotes or angle brackets."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(value):
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "<":
            depth += 1
        elif not quoted and ch == ">":
            depth = max(0, depth - 1)
        elif not quoted and depth == 0 and ch == ",":
            parts.append(value[start:i].strip())
            start = i + 1
    parts.append(value[start:].strip())
    return [p for p in parts if p]


@dataclass(frozen=True)
class CSeq:
    number: int
    method: str


@dataclass(frozen=True)
class SipMessage:
    """A request or a response as parsed: the headers that the dialog and the transactions
    both read (Call-ID, CSeq, the tags, the branch) are read here, one way for all."""

    headers: Headers
    body: bytes

    @property
    def call_id(self) -> str:
        return self.headers.get("call-id") or ""

    @property
    def cseq(self) -> CSeq | None:
        match = _CSEQ.match((self.headers.get("cseq") or "").strip())
        return CSeq(int(match[1]), match[2].upper()) if match else None

    @property
    def from_tag(self) -> str | None:
        return tag_of(self.headers.get("from") or "")

    @property
    def to_tag(self) -> str | None:
        return tag_of(self.headers.get("to") or "")

    @property
    def branch(self) -> str:
        """The top Via's branch: it names the transaction."""
        vias = self.headers.all("via")
        match = _BRANCH.search(vias[0]) if vias else None
        return match[1] if match else ""

    @property
    def content_type(self) -> str:
        return (self.headers.get("content-type") or "").split(";")[0].strip().lower()


@dataclass(frozen=True)
class SipRequest(SipMessage):
    method: str = ""
    uri: str = ""

    def check(self) -> None:
        """Raise :class:`SipError` (400) unless the request has what every request needs."""
        missing = [name for name in REQUIRED if not (self.headers.get(name) or "").strip()]
        if missing:
            raise SipError(400, f"missing header(s): {', '.join(missing)}", self.headers)
        cseq = self.cseq
        if cseq is None:
            raise SipError(400, "CSeq is not '<number> <method>'", self.headers)
        if cseq.method != self.method:
            raise SipError(400, f"CSeq method {cseq.method} is not {self.method}", self.headers)
        if self.from_tag is None:
            raise SipError(400, "From has no tag", self.headers)
        try:  # a Call-ID is the caller's id for the call: printable, as every id is
            check_id(self.call_id.strip(), MAX_CALL_ID_CHARS)
        except ValueError as exc:
            raise SipError(400, f"Call-ID: {exc}", self.headers) from None


@dataclass(frozen=True)
class SipResponse(SipMessage):
    status: int = 0
    reason: str = ""


def tag_of(value: str) -> str | None:
    match = _TAG.search(value)
    return match[1] if match else None


def uri_of(name_addr: str) -> str:
    """The URI in a From/To/Contact value: inside <...>, or the value up to its parameters."""
    match = _URI_IN_BRACKETS.search(name_addr)
    return match[1].strip() if match else name_addr.split(";")[0].strip()


def host_port(uri: str, default_port: int = 5060) -> tuple[str, int] | None:
    """The host and port a SIP URI (or a Via's sent-by) names, None if it names none."""
    match = _HOST_PORT.match(uri.strip())
    if not match or not match[1]:
        return None
    return match[1].strip("[]"), int(match[2]) if match[2] else default_port


def header_end(data: bytes) -> int:
    """Where a message's head ends (the index after its blank line), -1 if not yet."""
    at = data.find(b"\r\n\r\n")
    return at + 4 if at >= 0 else -1


def parse(data: bytes) -> SipRequest | SipResponse:
    """One whole SIP message: its body is ``Content-Length`` bytes (all of it, without one)."""
    end = header_end(data)
    head, body = (data[: end - 4], data[end:]) if end >= 0 else (data.rstrip(b"\r\n"), b"")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SipError(400, f"the message head is not UTF-8 (byte {exc.start})") from exc
    lines = text.split("\r\n") if "\r\n" in text else text.split("\n")
    start, headers = lines[0].strip(), _headers(lines[1:])
    length = headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise SipError(400, "Content-Length is not a number", headers)
        size = int(length)
        if size > len(body):
            raise SipError(400, f"Content-Length {size}, {len(body)} body bytes", headers)
        body = body[:size]
    if (status := _STATUS_LINE.match(start)) is not None:
        return SipResponse(headers, body, int(status[1]), status[2])
    request = _REQUEST_LINE.match(start)
    if request is None:
        if start.endswith(("SIP/3.0", "SIP/1.0")):
            raise SipError(505, "only SIP/2.0 is spoken here", headers)
        raise SipError(400, f"not a SIP request line: {start[:80]!r}", headers)
    return SipRequest(headers, body, request[1].upper(), request[2])


def _headers(lines: Iterable[str]) -> Headers:
    items: list[Header] = []
    for line in lines:
        if line[:1] in (" ", "\t") and items:  # a folded line continues the header before
            name, value = items[-1]
            items[-1] = (name, f"{value} {line.strip()}")
            continue
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon or not _TOKEN.match(name):
            raise SipError(400, f"not a header line: {line[:80]!r}", Headers(tuple(items)))
        items.append((COMPACT.get(name, name), value.strip()))
        if len(items) > MAX_HEADERS:
            raise SipError(400, f"over {MAX_HEADERS} headers", Headers(tuple(items)))
    return Headers(tuple(items))


def new_tag() -> str:
    return secrets.token_hex(6)


def new_branch() -> str:
    return f"{BRANCH_MAGIC}{secrets.token_hex(8)}"


@dataclass
class Outgoing:
    """A message we write: a start line, headers in order, a body."""

    start: str
    headers: list[Header] = field(default_factory=list)
    body: bytes = b""
    content_type: str | None = None

    def add(self, name: str, value: str) -> Outgoing:
        self.headers.append((name, value))
        return self

    def encode(self) -> bytes:
        lines = [self.start, *(f"{name}: {value}" for name, value in self.headers)]
        if self.body and self.content_type:
            lines.append(f"Content-Type: {self.content_type}")
        lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body


def bracketed(host: str) -> str:
    """A host as a URI or Via writes it: an IPv6 address in brackets (RFC 3261, 25.1)."""
    return f"[{host}]" if ":" in host else host


def new_request(
    method: str,
    uri: str,
    via: str,
    from_: str,
    to: str,
    call_id: str,
    cseq: int,
    contact: str | None = None,
    routes: Iterable[str] = (),
) -> Outgoing:
    """A request's head, the headers every request carries in the order RFC 3261 (8.1.1)
    lists them; the caller adds what its method needs after them."""
    out = Outgoing(f"{method} {uri} {SIP_VERSION}")
    out.add("Via", via)
    out.add("Max-Forwards", "70")
    for route in routes:
        out.add("Route", route)
    out.add("From", from_)
    out.add("To", to)
    out.add("Call-ID", call_id)
    out.add("CSeq", f"{cseq} {method}")
    if contact is not None:
        out.add("Contact", contact)
    return out


_ECHOED = (("via", "Via"), ("from", "From"), ("to", "To"), ("call-id", "Call-ID"), ("cseq", "CSeq"))


def response(
    request: Headers,
    status: int,
    to_tag: str | None = None,
    reason: str | None = None,
    server: str = "voxpipe",
) -> Outgoing:
    """A response to a request with these headers: its Vias, From, Call-ID and CSeq echoed,
    its To given our tag where we have one and it has none (RFC 3261, 8.2.6), and, in a
    provisional or success answer, its Record-Route, so that the caller's later requests
    go through the proxies that asked to stay in the call (12.1.1)."""
    out = Outgoing(f"{SIP_VERSION} {status} {reason or REASONS.get(status, 'Unknown')}")
    echoed = _ECHOED + ((("record-route", "Record-Route"),) if 100 < status < 300 else ())
    for key, name in echoed:
        for key_, value in request.items:
            if key_ != key:
                continue
            if key == "to" and to_tag and tag_of(value) is None:
                value = f"{value};tag={to_tag}"
            out.add(name, value)
    out.add("Server", server)
    return out


class RecentResponses:
    """The last response to each request, by (Call-ID, CSeq, method, branch), for a while."""

    def __init__(self) -> None:
        self._responses: OrderedDict[tuple[str, ...], tuple[float, bytes]] = OrderedDict()

    def key(self, request: SipRequest) -> tuple[str, ...]:
        cseq = request.cseq
        return request.call_id, str(cseq.number if cseq else ""), request.method, request.branch

    def get(self, request: SipRequest) -> bytes | None:
        self._expire()
        found = self._responses.get(self.key(request))
        return found[1] if found else None

    def put(self, request: SipRequest, data: bytes) -> None:
        self._responses[self.key(request)] = (time.monotonic(), data)
        self._responses.move_to_end(self.key(request))
        while len(self._responses) > RECENT_MAX:
            self._responses.popitem(last=False)

    def _expire(self) -> None:
        now = time.monotonic()
        while self._responses and now - next(iter(self._responses.values()))[0] > RECENT_S:
            self._responses.popitem(last=False)
