"""Where and how the server answers SIP calls itself (``docs/sip.md``): no provider between
a trunk (or a softphone) and the agent."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator

from voxpipe.config.section import Section

SipCodec = Literal["PCMU", "PCMA", "opus"]
SipTransport = Literal["udp", "tcp"]


class SipConfig(Section):
    """The SIP user agent: its listening address, its RTP ports, what its SDP offers."""

    enabled: bool = False
    """Answer SIP calls (UDP and TCP) at startup. SIP carries no credentials here: expose the port
    to your trunk's addresses only (docs/sip.md)."""

    host: str = "0.0.0.0"
    """The address the SIP listener (UDP and TCP) and RTP bind to."""

    port: int = Field(5060, ge=0, le=65535)
    """The SIP port, UDP and TCP alike; 0: any free port."""

    transports: list[SipTransport] = Field(
        default_factory=lambda: list[SipTransport](["udp", "tcp"]), min_length=1
    )
    """The SIP transports to listen on."""

    rtp_port_range: tuple[int, int] = (10000, 20000)
    """RTP ports for calls' audio, both ends included; one port a call. (0, 0): any free port."""

    public_address: str | None = None
    """The address callers reach this server at, written in SDP (c=) and Contact; None: the address
    the INVITE arrived on."""

    codecs: list[SipCodec] = Field(
        default_factory=lambda: list[SipCodec](["PCMU", "PCMA", "opus"]), min_length=1
    )
    """The audio codecs answered and offered, in order of preference when an offer has several, 20
    ms a packet: PCMU and PCMA (G.711, 8 kHz), opus (RFC 7587, mono at 48 kHz, through PyAV's
    libopus). Leave opus out to speak G.711 only."""

    jitter_packets: int = Field(3, ge=1, le=50)
    """The jitter buffer's depth in RTP packets (20 ms each): a gap in the sequence waits until
    this many packets are held, then is skipped."""

    ring_ms: int = Field(0, ge=0, le=60_000)
    """How long a call rings (180 Ringing) before it is answered; a CANCEL meanwhile ends it with
    487. 0: answered at once."""

    ack_timeout_s: float = Field(32.0, gt=0, le=64)
    """How long a 200 OK waits for its ACK (re-sent over UDP meanwhile) before the call is ended
    with BYE (RFC 3261: 64 x T1)."""

    dial_timeout_s: float = Field(30.0, gt=0, le=300)
    """A call placed to a SIP URI (POST /v1/calls, provider sip) that is not answered in this long
    is cancelled (CANCEL) and reported as not answered."""

    caller_id: str | None = Field(None, pattern=r"^sips?:[!-~]{3,250}$")
    """The From URI of calls placed to SIP URIs (what the callee sees); None: sip:voxpipe@<this
    server's address>. With a registration, its address of record."""

    registrar: str | None = Field(None, pattern=r"^sip:[!-~]{3,250}$")
    """Register with this trunk or registrar (sip:host[:port][;transport=tcp]) so that it sends
    calls here; None: no registration (the trunk sends calls to this server's address). Needs
    username and password."""

    username: str | None = Field(None, min_length=1, max_length=128)
    """The registration's user: its address of record is sip:<username>@<register_domain>, and its
    digest username unless auth_username."""

    password: SecretStr | None = None
    """The registration's digest password (MD5 or SHA-256, RFC 2617/7616)."""

    auth_username: str | None = Field(None, max_length=128)
    """The digest username when it is not username."""

    register_domain: str | None = Field(None, max_length=253)
    """The domain of the address of record; None: the registrar's host."""

    register_expires_s: int = Field(3600, ge=1, le=86400)
    """The registration's lifetime asked for; it is renewed when 80% of what the registrar granted
    has passed, and removed (Expires: 0) at shutdown."""

    register_retry_s: float = Field(30.0, gt=0, le=3600)
    """After a failed registration (refused, wrong credentials, no answer), the wait before it is
    tried again."""

    max_message_bytes: int = Field(16384, ge=1024, le=65535)
    """The largest SIP message taken; larger: 413."""

    user_agent: str = "voxpipe"
    """The User-Agent/Server header's value."""

    @model_validator(mode="after")
    def _registration_complete(self) -> SipConfig:
        if self.registrar is not None and (self.username is None or self.password is None):
            raise ValueError("registrar: set username and password too")
        return self

    @model_validator(mode="after")
    def _ports_in_order(self) -> SipConfig:
        low, high = self.rtp_port_range
        if (low, high) != (0, 0) and not 1024 <= low <= high <= 65535:
            raise ValueError("rtp_port_range: 1024 <= low <= high <= 65535, or (0, 0)")
        return self
