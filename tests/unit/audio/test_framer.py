from __future__ import annotations

from voxpipe.audio.framer import Pcm16Framer


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
