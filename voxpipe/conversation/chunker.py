"""Cut the streaming reply text into clauses for TTS.

The caller waits for the first chunk, so it is a *phrase*: released at the
first comma-like boundary once it is a few characters long, or before a word
that starts a new phrase (a conjunction or preposition) once a few words are
complete, or after a few words at most. A long sentence with no comma then no
longer holds the first audio back until it ends. The second chunk is cut by the
same rules with a larger bound (``second_phrase_max_words``): it must be written
and synthesized while the first plays, and a short first phrase is soon over.
Later chunks are clauses and prefer sentence ends, which sound better; by then
the caller is listening with audio queued.
"""

from __future__ import annotations

import re

from voxpipe.config import ChunkerConfig

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*(?=\s)")
_CLAUSE_END = re.compile(r"[,;:—–]+(?=\s)")
_MARKUP = re.compile(r"[*_`#>|~]+|\[(.*?)\]\(.*?\)")
_WORD = re.compile(r"\S+(?=\s)")  # a complete word: the next token has begun
# Words a spoken phrase naturally starts with: a pause before them sounds deliberate.
PHRASE_STARTS = frozenset(
    "and but or because although while when where which who whose that if unless "
    "until after before since with without for from about at on in into to of by "
    "between during through".split()
)


def clean_for_speech(text: str) -> str:
    """Remove markdown the model may emit; keep link text."""
    return re.sub(r"\s+", " ", _MARKUP.sub(lambda m: m.group(1) or "", text)).strip()


class ClauseChunker:
    def __init__(self, config: ChunkerConfig) -> None:
        self.cfg = config
        self._buffer = ""
        self._emitted = 0
        self._first_phrase_words = config.first_phrase_max_words

    def hurry(self) -> None:
        """The reply is late: its first phrase ends after ``late_first_phrase_words``."""
        late = self.cfg.late_first_phrase_words
        self._first_phrase_words = min(self._first_phrase_words or late, late)

    def push(self, delta: str) -> list[str]:
        """Add a text delta; return the clauses that are now complete."""
        self._buffer += delta
        out: list[str] = []
        while clause := self._next_clause():
            out.append(clause)
        return out

    def flush(self) -> list[str]:
        """End of the reply: whatever is left is the last clause."""
        rest, self._buffer = clean_for_speech(self._buffer), ""
        return [rest] if _speakable(rest) else []

    def _next_clause(self) -> str | None:
        """Cut at the earliest eligible boundary, so the clauses do not depend on how the
        text arrived (token by token or in one piece)."""
        buf = self._buffer
        limit = self.cfg.max_chars
        phrase_words = self._phrase_words()
        min_clause = self.cfg.min_first_chars if phrase_words else self.cfg.min_chars
        ends = [m.end() for m in _SENTENCE_END.finditer(buf) if m.end() >= self.cfg.min_first_chars]
        ends += [m.end() for m in _CLAUSE_END.finditer(buf) if m.end() >= min_clause]
        ends = [e for e in ends if e <= limit]
        if phrase_words and (phrase := self._phrase_end(buf, phrase_words)) is not None:
            ends.append(phrase)
        cut = min(ends) if ends else None
        if cut is None and len(buf) > limit:
            space = buf.rfind(" ", 0, limit)
            cut = space if space > 0 else limit
        if cut is None:
            return None
        clause, self._buffer = clean_for_speech(buf[:cut]), buf[cut:].lstrip()
        if not _speakable(clause):
            return self._next_clause() if self._buffer else None
        self._emitted += 1
        return clause

    def _phrase_words(self) -> int:
        """The most words of the next chunk, if it is a phrase (the first two); 0: a clause."""
        if self._emitted == 0:
            return self._first_phrase_words
        return self.cfg.second_phrase_max_words if self._emitted == 1 else 0

    def _phrase_end(self, buf: str, most: int) -> int | None:
        """Where a phrase may end: before a phrase-starting word once
        ``first_phrase_min_words`` words precede it, or after ``most`` complete words;
        None while neither has happened."""
        least = self.cfg.first_phrase_min_words
        for i, word in enumerate(_WORD.finditer(buf)):
            bare = word.group().strip("\"'()[],.;:!?…").lower()
            if i >= least and bare in PHRASE_STARTS:
                return len(buf[: word.start()].rstrip()) or None
            if i + 1 >= most:
                return word.end()
        return None


def _speakable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)
