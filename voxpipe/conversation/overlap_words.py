"""What the caller's speech over a reply turns out to have been, once it is transcribed.

Duration alone stops the agent for any 250 ms of voice, and "okay" or "mhm" last longer
than that. So a barge-in is decided fast, by duration (the caller must not talk over the
agent for long), and judged again by its words at the end of the overlap: speech with no
words (a cough, a door) or only acknowledgements ("mhm", "yeah, okay", "I see") was not a
turn, and the reply goes on from the sentence the caller was cut off in. The other way
round, speech too short to stop the agent by duration ("Wait, stop." can be) stops it by
its words when they ask for the floor (:func:`asks_for_the_floor`).
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z0-9']+")


def words_of(text: str) -> list[str]:
    """Lower-case words, hyphens split ("uh-huh" is "uh huh"), punctuation dropped."""
    return _WORD.findall(text.lower().replace("-", " ").replace("’", "'"))


def is_acknowledgement(transcript: str, phrases: list[str], max_words: int) -> bool:
    """True when ``transcript`` is only ``phrases`` one after another (at most
    ``max_words`` words), or has no words at all. "Yeah, but Friday" is not: one word
    that is no acknowledgement makes the speech a turn."""
    words = words_of(transcript)
    if len(words) > max_words:
        return False
    known = sorted({tuple(words_of(p)) for p in phrases if words_of(p)}, key=len, reverse=True)
    at = 0
    while at < len(words):
        match = next((p for p in known if tuple(words[at : at + len(p)]) == p), None)
        if match is None:
            return False
        at += len(match)
    return True


def asks_for_the_floor(transcript: str, phrases: list[str]) -> bool:
    """True when ``transcript`` holds one of ``phrases`` as whole words ("Wait, stop."
    holds "wait"; "awaiting" does not)."""
    words = words_of(transcript)
    for phrase in phrases:
        wanted = words_of(phrase)
        if wanted and any(
            words[at : at + len(wanted)] == wanted for at in range(len(words) - len(wanted) + 1)
        ):
            return True
    return False


def no_turn(transcript: str, over: str, phrases: list[str], max_words: int) -> bool:
    """Whether speech heard as ``transcript`` over a reply that said ``over`` was no turn:
    only a sound or acknowledgements (:func:`is_acknowledgement`), and no words at all over
    a reply that ends in a question ("yes" to a readback answers it early)."""
    if not is_acknowledgement(transcript, phrases, max_words):
        return False
    return not (words_of(transcript) and over.rstrip().endswith("?"))


BACK_UP_WORDS = 8  # the most words said again when the reply goes on


def resume_at(heard: str) -> int:
    """Where the reply goes on, as an index into the ``heard`` words: the start of the
    sentence the caller was cut off in ("Number 1 is" -> "Number 1 is here."), or of its
    clause when that is shorter, so the rest makes sense on its own; at most
    :data:`BACK_UP_WORDS` back, else at the first word not heard."""
    words = heard.split()
    for marks in (".!?", ".!?,;:"):
        ends = [i + 1 for i, w in enumerate(words) if w[-1] in marks]
        start = ends[-1] if ends else 0
        if len(words) - start <= BACK_UP_WORDS:
            return start
    return len(words)


def unheard(generated: str, heard: str) -> str:
    """The words of ``generated`` from :func:`resume_at` on (the playback tracker keeps
    whole words, so ``heard`` is a prefix of them)."""
    return " ".join(generated.split()[resume_at(heard) :])
