"""A small jitter buffer for a call's RTP (:class:`RtpReorderBuffer`): packets in, the same
packets out in sequence order.

The policy, for a voice agent that wants the caller's words soon more than every packet:

- in order, a packet leaves at once (no added delay on a clean network);
- a gap (a packet missing) holds the packets after it until the missing one arrives or
  ``depth`` packets are held; then the gap is skipped (counted as lost) and the held ones
  leave in order;
- a packet older than the last one out is late, and one already held is a duplicate: both
  are dropped and counted;
- a jump of more than :data:`MAX_JUMP` (the sender restarted its sequence) starts over.

Sequence numbers are 16-bit and wrap, so order is by serial-number arithmetic. The buffer
holds at most ``depth`` packets: its memory and its delay are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxpipe.transports.sip.rtp import RtpPacket

SEQ_MOD = 1 << 16
MAX_JUMP = 1000  # more than 20 s of 20 ms packets ahead or behind: a new sequence


def seq_delta(a: int, b: int) -> int:
    """``a - b`` in 16-bit serial arithmetic: positive when ``a`` comes after ``b``."""
    d = (a - b) % SEQ_MOD
    return d - SEQ_MOD if d >= SEQ_MOD // 2 else d


@dataclass
class ReorderStats:
    late: int = 0
    duplicate: int = 0
    lost: int = 0


class RtpReorderBuffer:
    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.stats = ReorderStats()
        self._held: dict[int, RtpPacket] = {}
        self._next: int | None = None  # the sequence number due next

    def push(self, packet: RtpPacket) -> list[RtpPacket]:
        """The packets that may leave now, in order (often just this one)."""
        seq = packet.sequence
        if self._next is None or abs(seq_delta(seq, self._next)) > MAX_JUMP:
            self._held.clear()
            self._next = seq
        ahead = seq_delta(seq, self._next)
        if ahead < 0:
            self.stats.late += 1
            return []
        if seq in self._held:
            self.stats.duplicate += 1
            return []
        self._held[seq] = packet
        out = self._release()
        while len(self._held) >= self.depth:  # a gap held too long: skip it
            self._skip_gap()
            out += self._release()
        return out

    def _release(self) -> list[RtpPacket]:
        out: list[RtpPacket] = []
        assert self._next is not None
        while self._next in self._held:
            out.append(self._held.pop(self._next))
            self._next = (self._next + 1) % SEQ_MOD
        return out

    def _skip_gap(self) -> None:
        assert self._next is not None
        nearest = min(self._held, key=lambda s: seq_delta(s, self._next or 0))
        self.stats.lost += seq_delta(nearest, self._next)
        self._next = nearest
