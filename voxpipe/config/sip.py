"""Where and how the server answers SIP calls itself (``docs/sip.md``): no provider between
a trunk (or a softphone) and the agent."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

SipCodec = Literal["PCMU", "PCMA"]
SipTransport = Literal["udp", "tcp"]


class SipConfig(BaseModel):
    """The SIP user agent: its listening address, its RTP ports, what its SDP offers."""

    enabled: bool = Field(
        False,
        description="Answer SIP calls (UDP and TCP) at startup. SIP carries no credentials "
        "here: expose the port to your trunk's addresses only (docs/sip.md).",
    )
    host: str = Field(
        "0.0.0.0", description="The address the SIP listener (UDP and TCP) and RTP bind to."
    )
    port: int = Field(
        5060, ge=0, le=65535, description="The SIP port, UDP and TCP alike; 0: any free port."
    )
    transports: list[SipTransport] = Field(
        default_factory=lambda: list[SipTransport](["udp", "tcp"]),
        min_length=1,
        description="The SIP transports to listen on.",
    )
    rtp_port_range: tuple[int, int] = Field(
        (10000, 20000),
        description="RTP ports for calls' audio, both ends included; one port a call. "
        "(0, 0): any free port.",
    )
    public_address: str | None = Field(
        None,
        description="The address callers reach this server at, written in SDP (c=) and "
        "Contact; None: the address the INVITE arrived on.",
    )
    codecs: list[SipCodec] = Field(
        default_factory=lambda: list[SipCodec](["PCMU", "PCMA"]),
        min_length=1,
        description="The audio codecs answered, in order of preference when an offer has "
        "several (8 kHz, 20 ms).",
    )
    jitter_packets: int = Field(
        3,
        ge=1,
        le=50,
        description="The jitter buffer's depth in RTP packets (20 ms each): a gap in the "
        "sequence waits until this many packets are held, then is skipped.",
    )
    ring_ms: int = Field(
        0,
        ge=0,
        le=60_000,
        description="How long a call rings (180 Ringing) before it is answered; a CANCEL "
        "meanwhile ends it with 487. 0: answered at once.",
    )
    ack_timeout_s: float = Field(
        32.0,
        gt=0,
        le=64,
        description="How long a 200 OK waits for its ACK (re-sent over UDP meanwhile) before "
        "the call is ended with BYE (RFC 3261: 64 x T1).",
    )
    dial_timeout_s: float = Field(
        30.0,
        gt=0,
        le=300,
        description="A call placed to a SIP URI (POST /v1/calls, provider sip) that is not "
        "answered in this long is cancelled (CANCEL) and reported as not answered.",
    )
    caller_id: str | None = Field(
        None,
        pattern=r"^sips?:[!-~]{3,250}$",
        description="The From URI of calls placed to SIP URIs (what the callee sees); None: "
        "sip:voxpipe@<this server's address>. With a registration, its address of record.",
    )
    max_message_bytes: int = Field(
        16384, ge=1024, le=65535, description="The largest SIP message taken; larger: 413."
    )
    user_agent: str = Field("voxpipe", description="The User-Agent/Server header's value.")

    @model_validator(mode="after")
    def _ports_in_order(self) -> SipConfig:
        low, high = self.rtp_port_range
        if (low, high) != (0, 0) and not 1024 <= low <= high <= 65535:
            raise ValueError("rtp_port_range: 1024 <= low <= high <= 65535, or (0, 0)")
        return self
