"""How the caller's audio becomes turns, the reply's text clauses, and the wire's audio."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from voxpipe.config.section import Section

# What callers say to show they are listening (with Whisper's spellings of them).
BACKCHANNEL_PHRASES = (
    "mhm", "mm", "mmhmm", "mm hmm", "mm hm", "hmm", "hm", "uh huh", "uh hum", "uh", "um",
    "ah", "oh", "yeah", "yes", "yep", "yup", "ya", "okay", "ok", "right", "sure", "alright",
    "all right", "i see", "got it", "gotcha", "cool", "great", "nice", "wow", "really",
    "exactly", "true", "of course", "makes sense", "that makes sense", "good", "perfect",
    "fine", "uh yeah", "oh okay", "ah okay", "sounds good", "that's right", "indeed",
)  # fmt: skip

INTERRUPTION_PHRASES = (
    "wait", "stop", "hold on", "hang on", "no", "sorry", "excuse me", "pardon", "actually",
    "one second", "one moment", "just a moment", "just a second",
)  # fmt: skip

# Words a sentence does not end on: articles, possessives, prepositions that take what
# follows, conjunctions, the wh-words that open a clause, and hesitations. Closed-class
# words, chosen from English grammar, not from a test set. Kept out on purpose: "on",
# "in", "up", "out", "off" (they end phrasal verbs: "come in"), auxiliaries ("yes, I do"),
# "what" and "who" ("sorry, what?").
UNFINISHED_WORDS = (
    "a", "an", "the", "my", "your", "our", "their", "its", "to", "for", "from", "of",
    "with", "at", "about", "under", "into", "onto", "than", "between", "and", "but", "or",
    "nor", "because", "if", "whether", "when", "where", "which", "whose", "um", "uh", "er",
    "erm",
)  # fmt: skip


def _phrases(default: tuple[str, ...], most: int, description: str) -> Any:
    """A list of words or phrases a caller may say, the defaults above unless set; bounded,
    since each turn's words are matched against all of it."""
    return Field(default_factory=lambda: list(default), max_length=most, description=description)


class TurnConfig(Section):
    """How speech probabilities become user turns (end-pointing)."""

    threshold: float = Field(0.5, gt=0.0, lt=1.0)
    """Speech probability that opens speech."""

    release_threshold: float | None = Field(None, gt=0.0, lt=1.0)
    """Probability below which a window is quiet (default threshold-0.15): a turn ends only on a
    quiet window. Between it and threshold, the fade after a word (at most 256 ms) and, later,
    one or two windows in a row (a breath) count toward silence_ms; a longer run is a sound and
    holds the turn."""

    min_speech_ms: int = Field(96, ge=0, le=2000)
    """Speech shorter than this is ignored."""

    prefix_padding_ms: int = Field(300, ge=0, le=2000)
    """Audio kept before detected speech start and sent to STT."""

    silence_ms: int = Field(500, ge=32, le=5000)
    """Silence that ends the user's turn (end_of_turn: silence), from the last window at
    threshold."""

    end_of_turn: Literal["silence", "smart_turn"] = "silence"
    """What ends a turn: a fixed silence (silence_ms), or the Smart Turn model judging, once the
    caller falls silent, whether what they said sounds complete: complete ends after
    smart_turn_complete_ms, not yet complete after smart_turn_max_silence_ms."""

    smart_turn_complete_ms: int = Field(200, ge=64, le=5000)
    """Silence that ends a turn the turn model judged complete."""

    smart_turn_max_silence_ms: int = Field(1600, ge=64, le=10000)
    """Silence that ends a turn the turn model (or the words) judged not complete: a caller pausing
    mid-sentence for a word, which takes a person up to about 1.2 s (and the VAD hears the
    silence begin ~0.1 s late)."""

    semantic_vad: bool = True
    """Load the turn model (Smart Turn) even when end_of_turn is silence, so that a Realtime
    client's turn_detection semantic_vad ends its turns by it. Off: semantic_vad is a fixed
    silence chosen by its eagerness."""

    smart_turn_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    """The turn model's probability at or above which a turn is complete."""

    unfinished_words: list[str] = _phrases(
        UNFINISHED_WORDS,
        500,
        "With the turn model (end_of_turn smart_turn, or a Realtime client's "
        "semantic_vad): each check also transcribes the turn so far, and if the words end on "
        "one of these ('a table for', 'from the station to') the turn waits as not "
        "complete. That transcript is the turn's own when the caller says no more. Empty "
        "(and llm_turn_end_threshold 0): the model's verdict alone, no transcript at the "
        "check.",
    )
    llm_turn_end_threshold: float = Field(0.005, ge=0.0, lt=1.0)
    """With the turn model: the embedded LLM reads the caller's words so far in the call's own
    conversation, and a turn the model judged complete whose words it gives less than this
    probability of ending there ('the problem is that my laptop') waits as unfinished. Read from
    the call's cached KV, so the answer then evaluates only a few tokens more; not asked for
    agents with tools, while a reply is speaking, or of a remote LLM. 0: not asked."""

    llm_turn_complete_threshold: float = Field(0.5, ge=0.0, le=1.0)
    """With the turn model: a turn it judged unfinished whose words the LLM gives at least this
    probability of ending there ('He was not an ill-disposed young man', which Smart Turn
    doubts) ends after silence_ms, as it would without the model, instead of
    smart_turn_max_silence_ms. Set too low, it cuts the pauses after words that only look
    finished ('pills every month'); docs/benchmarks.md. 0: not asked."""

    max_turn_s: float = Field(30.0, gt=1.0, le=120.0)
    """A turn longer than this is cut."""

    interrupt: bool = True
    """Barge-in: caller speech during a reply stops it. Off: the reply plays out and the caller's
    turn is answered after it."""

    min_interruption_ms: int = Field(250, ge=0, le=3000)
    """Speech during a reply must last this long to interrupt it; shorter speech (a backchannel
    such as 'uh-huh', a cough) only pauses the reply and is not a turn."""

    barge_in_threshold: float = Field(0.3, gt=0.0, lt=1.0)
    """Speech probability that pauses a reply speaking (a turn otherwise opens at threshold). A
    caller's first word over a phone line is often weak: a higher threshold lets the reply run
    on over a 'wait' until the second word. A pause on a sound that proves to be nothing costs
    only a short gap: the reply goes on where it stopped."""

    barge_in_min_speech_ms: int = Field(64, ge=0, le=2000)
    """Speech at barge_in_threshold for this long pauses a reply speaking (min_speech_ms
    otherwise)."""

    clear_on_pause: bool = True
    """When speech starts over a reply, the client also drops the reply audio it has buffered (up
    to audio.playback_lead_ms), so the agent falls silent as the caller starts, not
    min_interruption_ms and the buffer later; if the speech proves to be no turn, the reply goes
    on from where the caller stopped hearing it. Only where the wire has a clear that more audio
    may follow (the telephony providers). Off: a pause only stops sending, and the buffer plays
    out."""

    resume_false_interruptions: bool = True
    """Speech that interrupted a reply but holds no words (a cough, a door) or only
    backchannel_phrases is not a turn: the reply goes on from the sentence the caller was cut
    off in, and the history keeps the caller's sound out. Off: every interruption is a turn."""

    backchannel_phrases: list[str] = _phrases(
        BACKCHANNEL_PHRASES,
        200,
        "Acknowledgements a caller says while listening. Speech over a reply "
        "made only of these (one after another) is a backchannel, not a turn; one other "
        "word ('wait', 'no', 'but') makes it a turn.",
    )
    interruption_phrases: list[str] = _phrases(
        INTERRUPTION_PHRASES,
        200,
        "Speech over a reply shorter than min_interruption_ms only pauses it; its "
        "words are read at its first silence (64 ms), and if they hold one of these ('Wait, "
        "stop.', 'No.') it interrupts the reply all the same. Empty: duration alone decides.",
    )
    backchannel_max_words: int = Field(4, ge=1, le=20)
    """A backchannel has at most this many words."""

    backchannel_silence_ms: int = Field(350, ge=100, le=5000)
    """Speech that interrupted a reply is transcribed at its first silence; if its words so far are
    no turn (a backchannel, a sound), it ends after this much silence instead of the turn's
    usual one and the reply goes on. Longer than the pause inside 'okay, I see', so that one is
    not heard as two."""

    keypad_idle_ms: int = Field(2000, ge=100, le=30000)
    """Keypad digits (DTMF) become the caller's turn ('Keypad: 1234') after this long without
    another key, or at once on '#'."""

    keypad_max_digits: int = Field(32, ge=1, le=256)
    """Keypad digits gathered at most: more make a turn at once."""

    preempt_ms: int | None = Field(200, ge=32, le=5000)
    """After this much silence, start STT, LLM and TTS on the turn so far, held back until the turn
    ends (discarded if speech resumes). None = off."""

    @model_validator(mode="after")
    def _release_below_threshold(self) -> TurnConfig:
        if self.release_threshold is not None and self.release_threshold > self.threshold:
            raise ValueError("release_threshold must not exceed threshold")
        if self.smart_turn_complete_ms > self.smart_turn_max_silence_ms:
            raise ValueError("smart_turn_complete_ms must not exceed smart_turn_max_silence_ms")
        if self.preempt_ms is not None and self.preempt_ms >= self.longest_silence_ms:
            self.preempt_ms = None  # the turn ends first: nothing to preempt
        return self

    @property
    def by_model(self) -> bool:
        """Turns end by the turn model's verdict. The setting's value, ``smart_turn``, is a
        public name and stays, whichever engine ``turn_model.engine`` runs."""
        return self.end_of_turn == "smart_turn"

    @property
    def longest_silence_ms(self) -> int:
        """The longest silence a turn can run on before it ends."""
        if self.by_model:
            return self.smart_turn_max_silence_ms
        return self.silence_ms


class ChunkerConfig(Section):
    """Where the reply text is cut into clauses for TTS."""

    min_first_chars: int = Field(8, ge=1)
    """The first clause may end at a comma once it has this many chars."""

    first_phrase_max_words: int = Field(3, ge=0)
    """The first chunk (what the caller waits for) ends after this many words at most, so a long
    sentence with no comma is not spoken only once it is whole; 0 = the first chunk is a clause
    like the others."""

    first_phrase_min_words: int = Field(2, ge=1)
    """The first chunk may end before a word that starts a phrase (and, with, to, because, ...)
    once this many words precede it."""

    second_phrase_max_words: int = Field(8, ge=0)
    """The second chunk ends after this many words at most (or at a comma, or before a
    phrase-starting word, as the first): it is written and synthesized while the first plays,
    and a whole clause can outlast a short first phrase; 0 = the second chunk is a clause like
    the later ones."""

    late_first_phrase_words: int = Field(3, ge=1)
    """A late reply's first chunk (the LLM started it past llm.late_after_ms) ends after this many
    words at most."""

    min_chars: int = Field(40, ge=1)
    """Later clauses end at a comma only past this many chars."""

    max_chars: int = Field(160, ge=20)
    """A clause with no punctuation is cut at a space past this."""


class AudioConfig(Section):
    """Wire formats and buffer bounds."""

    input_sample_rate: int = 16000
    """Default rate of inbound PCM16."""

    output_sample_rate: int | None = None
    """Default rate of outbound PCM16; None = the voice's native rate."""

    min_sample_rate: int = 8000
    """Lowest rate a client may declare."""

    max_sample_rate: int = 48000
    """Highest rate a client may declare."""

    max_frame_ms: int = Field(1000, ge=10)
    """Longest inbound audio frame accepted, in milliseconds."""

    out_frame_ms: int = Field(20, ge=10, le=200)
    """Duration of each outbound frame."""

    playback_lead_ms: int = Field(400, ge=0, le=10000)
    """How far ahead of real time outbound audio is sent; the rest waits server-side so a cancel
    can still stop it."""

    outbound_buffer_ms: int = Field(15000, ge=200)
    """Bound of synthesized audio waiting to be sent (producer waits)."""

    synthesis_lead_ms: int = Field(2000, ge=0)
    """A reply's later clause is synthesized no sooner than this before the caller's audio would
    run out: work not needed yet leaves the cores to other callers' first words, and a barge-in
    saves it. 0 = synthesize every clause at once."""
