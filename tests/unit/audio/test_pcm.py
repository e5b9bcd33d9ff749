"""PCM16 frames: the stream resampler gives, chunk by chunk, the same signal as resampling it
whole, and the framer cuts chunks of any size into whole frames."""

from __future__ import annotations

import numpy as np
import pytest
import soxr

from voxpipe.audio.pcm import Pcm16Framer, StreamResampler, resample, trim_silence


def sine(freq: float, rate: int, seconds: float) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def chunked(resampler: StreamResampler, audio: np.ndarray, sizes: list[int]) -> np.ndarray:
    out, start, i = [], 0, 0
    while start < audio.shape[0]:
        size = sizes[i % len(sizes)]
        out.append(resampler.process(audio[start : start + size]))
        start, i = start + size, i + 1
    out.append(resampler.process(np.zeros(0, np.float32), last=True))
    return np.concatenate(out)


def peak_hz(audio: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(audio.shape[0])))
    return float(np.fft.rfftfreq(audio.shape[0], 1 / rate)[int(np.argmax(spectrum))])


@pytest.mark.parametrize(("in_rate", "out_rate"), [(48000, 16000), (22050, 24000), (8000, 16000)])
def test_chunked_output_matches_one_shot_length(in_rate: int, out_rate: int) -> None:
    audio = sine(440, in_rate, 1.0)
    whole = soxr.resample(audio, in_rate, out_rate, quality="HQ")
    streamed = chunked(StreamResampler(in_rate, out_rate), audio, [320, 17, 960, 1])
    assert abs(streamed.shape[0] - whole.shape[0]) <= 4
    assert streamed.dtype == np.float32
    # Away from the edges the two are the same signal.
    n = min(streamed.shape[0], whole.shape[0])
    middle = slice(n // 10, n - n // 10)
    assert np.max(np.abs(streamed[:n][middle] - whole[:n][middle])) < 1e-3


@pytest.mark.parametrize(("in_rate", "out_rate"), [(48000, 16000), (22050, 24000)])
def test_a_440_hz_sine_keeps_its_frequency(in_rate: int, out_rate: int) -> None:
    out = chunked(StreamResampler(in_rate, out_rate), sine(440, in_rate, 1.0), [480])
    assert abs(out.shape[0] - out_rate) <= 4
    assert abs(peak_hz(out, out_rate) - 440) <= 2  # FFT bins are 1 Hz wide over 1 s
    rms = float(np.sqrt(np.mean(out[out_rate // 10 : -out_rate // 10] ** 2)))
    assert rms == pytest.approx(0.5 / np.sqrt(2), rel=0.02)  # and its level


def test_pass_through_when_rates_match() -> None:
    resampler = StreamResampler(16000, 16000)
    audio = sine(440, 16000, 0.1)
    assert resampler.process(audio) is audio  # no copy for the common 16 kHz input
    as_float64 = audio.astype(np.float64)
    out = resampler.process(as_float64, last=True)
    assert out.dtype == np.float32 and np.array_equal(out, audio)
    assert resampler.process(np.zeros(0, np.float32), last=True).shape == (0,)


def test_one_shot_resample() -> None:
    audio = sine(440, 48000, 0.5)
    assert resample(audio, 48000, 48000) is audio
    out = resample(audio, 48000, 16000)
    assert out.shape[0] == 8000 and out.dtype == np.float32
    assert abs(peak_hz(out, 16000) - 440) <= 2


def test_chunks_of_any_size_come_out_as_whole_frames() -> None:
    framer = Pcm16Framer(samples_per_frame=4)  # 8 bytes a frame
    assert framer.push(bytes(5)) == []
    assert framer.push(bytes(13)) == [bytes(8), bytes(8)]
    assert framer.flush() == [bytes(2)]  # the last frame may be short
    assert framer.flush() == []


def test_a_padded_flush_ends_in_a_whole_frame_of_silence() -> None:
    framer = Pcm16Framer(samples_per_frame=4)
    framer.push(b"\x01\x02\x03")
    assert framer.flush(pad=True) == [b"\x01\x02\x03" + bytes(5)]


def test_a_phrase_is_kept_without_the_tts_padding() -> None:
    """50 ms of quiet before the words and 300 ms after (Piper pads about that much): cut
    to 10 ms before and 80 ms after; the words themselves untouched."""
    rate = 16000
    t = np.arange(rate // 2) / rate
    words = (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    hiss = np.full(rate * 5 // 100, 0.001, np.float32)  # under the floor
    padded = np.concatenate([hiss, words, np.zeros(rate * 3 // 10, np.float32)])
    trimmed = trim_silence(padded, rate)
    before, after = rate // 100, rate * 8 // 100  # 10 ms and 80 ms
    assert np.array_equal(trimmed[:before], hiss[:before])
    assert np.array_equal(trimmed[before : before + len(words)], words)
    assert len(trimmed) == before + len(words) + after
    quiet = np.zeros(rate, np.float32)
    assert trim_silence(quiet, rate) is quiet  # nothing loud: nothing cut
    assert len(trim_silence(np.zeros(10, np.float32), rate)) == 10
