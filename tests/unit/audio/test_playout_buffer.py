"""The reply buffer a real-time clock plays out (SIP's RTP and WebRTC's track)."""

from voxpipe.audio.buffers import PlayoutBuffer


def test_reply_audio_leaves_in_frames_and_says_which_reply_frames_finished() -> None:
    reply = PlayoutBuffer(960_000)
    reply.push(1, b"\1\0" * 100)
    reply.push(2, b"\2\0" * 200)
    pcm, done = reply.take(320)
    assert pcm == b"\1\0" * 100 + b"\2\0" * 60 and done == [1]
    pcm, done = reply.take(320)
    assert pcm == b"\2\0" * 140 + b"\0\0" * 20 and done == [2]  # silence after the reply
    assert reply.empty and reply.take(4) == (b"\0" * 4, [])


def test_reply_audio_is_bounded_and_cleared() -> None:
    reply = PlayoutBuffer(1600)  # 100 ms at 8 kHz
    for seq in range(10):
        reply.push(seq, b"\1\0" * 160)  # 20 ms each
    _, done = reply.take(320)
    assert done == [5]  # the five oldest frames were dropped
    reply.clear()
    assert reply.empty
