"""G.711 tables against the reference: the stdlib's ``audioop`` (Python 3.11; gone in 3.13)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from voxpipe.audio.pcm import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ALL_CODES = bytes(range(256))
ALL_PCM16 = np.arange(-32768, 32768, dtype="<i2").tobytes()
pcm16 = st.lists(st.integers(-32768, 32767), max_size=2000).map(
    lambda samples: np.array(samples, dtype="<i2").tobytes()
)


def test_decode_of_every_code_matches_audioop() -> None:
    assert ulaw_decode(ALL_CODES) == audioop.ulaw2lin(ALL_CODES, 2)
    assert alaw_decode(ALL_CODES) == audioop.alaw2lin(ALL_CODES, 2)


def test_encode_of_every_pcm16_value_matches_audioop() -> None:
    assert ulaw_encode(ALL_PCM16) == audioop.lin2ulaw(ALL_PCM16, 2)
    assert alaw_encode(ALL_PCM16) == audioop.lin2alaw(ALL_PCM16, 2)


@given(pcm16)
def test_encode_matches_audioop(pcm: bytes) -> None:
    assert ulaw_encode(pcm) == audioop.lin2ulaw(pcm, 2)
    assert alaw_encode(pcm) == audioop.lin2alaw(pcm, 2)


@given(st.binary(max_size=2000))
def test_decode_matches_audioop(data: bytes) -> None:
    assert ulaw_decode(data) == audioop.ulaw2lin(data, 2)
    assert alaw_decode(data) == audioop.alaw2lin(data, 2)


@given(st.binary(max_size=500))
def test_a_decoded_code_encodes_back_to_itself(data: bytes) -> None:
    """Each code's value lies in its own quantization interval: decode then encode is exact,
    except μ-law's two zeros (0x7F and 0xFF both decode to 0, which encodes as 0xFF)."""
    assert alaw_encode(alaw_decode(data)) == data
    assert ulaw_encode(ulaw_decode(data)) == data.replace(b"\x7f", b"\xff")


def test_lengths_and_odd_input() -> None:
    assert len(ulaw_encode(bytes(320))) == 160  # 20 ms at 8 kHz
    assert len(ulaw_decode(bytes(160))) == 320
    assert ulaw_encode(b"") == b"" and alaw_decode(b"") == b""
    with pytest.raises(ValueError, match="even number of bytes"):
        ulaw_encode(b"\x00\x01\x02")
    with pytest.raises(ValueError, match="even number of bytes"):
        alaw_encode(b"\x00")


def test_silence_and_full_scale() -> None:
    assert ulaw_encode(bytes(2)) == b"\xff" and alaw_encode(bytes(2)) == b"\xd5"
    loud = np.array([32767, -32768], dtype="<i2").tobytes()
    assert ulaw_encode(loud) == b"\x80\x00"
    assert alaw_encode(loud) == b"\xaa\x2a"
