"""A fact that a tool owns is not said without that tool's result.

Asked "Do you have room for six on Saturday?", a model may answer "Yes, we have room for six"
without calling the tool that knows, or say "We're open from 10 AM to 6:30 PM" when opening
hours are a tool's. A caller cannot tell a guess from a fact, and an agent that states an
availability no tool returned is worse than one that says nothing. So while a reply's first
request has tools but no result behind it, a sentence that may state such a fact is held
until it ends and judged here. An unbacked one is never said: the request stops, and the
model is asked again for a call (``reply_rounds.py``). The tool's answer then backs the
reply, and a tool that acts reads the call back before it acts, so the caller can correct
what the model guessed.

What counts as a claim is read from the agent's own tools, not from a list kept per trade:

- **a value nobody gave**: a clock time, a sum of money, a number of minutes, or a number of
  three digits or more (a ticket, an order) that is in neither the instructions nor the
  conversation. "A table for two at seven" said back is backed; "10:00 AM" out of nowhere
  is not;
- **an action done**: after "I've", "is now", "has been" and the like, the participle of an
  acting tool's verb (``book_table``: booked; ``freeze_card``: frozen) or a generic one
  (reserved, confirmed, scheduled), or "you're all set";
- **a lookup's answer**: "we have", "there is" or "has" a thing that a read-only tool is
  about (the words of its name and description: ``free_slots`` is about slots and
  appointments; a tool about availability is also about tables, rooms, seats and times),
  such a thing "is free", the state of one ("your order has shipped"), or, where a tool
  gives the opening hours, "we're open".

A question states nothing, and neither does a clause that asks or offers ("let me check
whether a table is free", "shall I book it?"); but a statement before a question in the same
sentence does ("We have a table at 7 pm, would you like it?"). What the rules cannot see is
a claim worded in none of these ways ("Friday evening works"); what they may stop wrongly is
a sentence that only sounds like one, which costs a lookup, not a wrong fact.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from voxpipe.agent import Tool
from voxpipe.conversation.confirmation import leave_out, question_for
from voxpipe.engines.base import ChatMessage, ToolCallRequest, ToolSpec
from voxpipe.engines.call_grounding import said_words, values_said

_NUMBER_WORDS = (
    "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
    "|forty|fifty|a few|few"
)
_HOUR_WORDS = "one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
_MERIDIEM_WORDS = r"a\.?\s?m\b\.?|p\.?\s?m\b\.?|o'clock\b|in the (?:morning|afternoon|evening)\b"
_MERIDIEM = rf"(?:{_MERIDIEM_WORDS})"
_VALUES = re.compile(
    rf"\b\d{{1,2}}(?::[0-5]\d)?\s*{_MERIDIEM}"  # 7 pm, 10:00 AM
    r"|\b(?:[01]?\d|2[0-3]):[0-5]\d\b"  # 19:30
    rf"|\b(?:{_HOUR_WORDS})(?:[ -](?:thirty|fifteen|forty-five))?\s+{_MERIDIEM}"  # seven pm
    r"|[$€£]\s?\d[\d,]*(?:\.\d+)?"  # $10
    rf"|\b(?:\d[\d,]*|{_NUMBER_WORDS})(?:\.\d+)?(?: hundred| thousand)?"
    r" (?:dollars|euros|pounds|bucks|minutes?)\b"
    r"|\b\d{1,3}(?:[,.]\d{3})+\b|\b\d{3,}\b",  # 14,002; 5821
    re.IGNORECASE,
)
_DIGIT_RUN = re.compile(r"\d+(?:[ ,.-]\d+)*")
_GENERIC_DONE = (
    "booked reserved confirmed scheduled cancelled canceled arranged placed processed "
    "submitted sorted"
).split()
_IRREGULAR = {
    "freeze": "frozen",
    "unfreeze": "unfrozen",
    "send": "sent",
    "make": "made",
    "set": "set",
    "reset": "reset",
    "put": "put",
    "get": "got",
    "pay": "paid",
    "take": "taken",
    "give": "given",
    "hold": "held",
    "find": "found",
    "begin": "begun",
}
_AVAILABLE_THINGS = "table tables room rooms seat seats space slot slots time times opening".split()
_STOPWORDS = frozenset(
    (
        "the a an and or of on in at to for with from by any one named given check get "
        "find look tell whether which what when where who how is are it its this that "
        "there their your my me our we you they them about into over under after before "
        "each every some all their whose name number next day days list show"
    ).split()
)
_STATES = "free|available|open|closed|taken|full|booked|ready"
_ADVERBS = r"(?:(?:now|just|already|all|successfully|currently|still)\s+)*"
_DETERMINERS = r"(?:(?:a|an|one|two|three|four|five|six|some|any|no|plenty of|lots of|still)\s+)*"
# A clause that asks or offers states nothing: "let me check whether a table is free".
_ASKING = re.compile(
    r"\b(?:if|whether|check|see|let me|shall i|should i|would you|could you|do you|"
    r"can i|can you|want me to|like me to|i can|i could|i'll|i will|to be)\b[^.!?,;]*$",
    re.IGNORECASE,
)
# Opens the question for the values a call written after a claim lacks (the caller may have
# said them: the model did not write them).
TO_CHECK = "I can check that for you."
# Said instead of a claim that no tool backs, when the model, asked for a call, wrote words
# again (a remote model may not honour "required"), or a call that would act unasked.
UNCHECKED = "I'm sorry, I can't check that right now."
# Words that may begin a claim's opening ("we have", "has been", "your order") or answer the
# question a claim answers ("Yes, we have ..."): a run of them at the end of a sentence being
# written waits for the next word.
_OPENING_WORDS = frozenset(
    "we i there has have had is are was were your the you it can been now all "
    "we've i've you're we're it's there's yes yeah yep no nope sure unfortunately".split()
)
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


@dataclass(frozen=True)
class Claim:
    """A sentence that would state what a tool owns, with nothing behind it."""

    kind: str  # "value", "done" or "lookup"
    text: str  # the words that state it


class ClaimRules:
    """What the claims of one agent's tools look like (module docstring)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        lookups = [t for t in tools if t.read_only]
        acting = {_participle(_verb(t.name)) for t in tools if not t.read_only}
        done = sorted(set(_GENERIC_DONE) | acting)
        done_words = "|".join(re.escape(w) for w in done)
        self._done = re.compile(
            rf"\b(?:i|we)(?:'ve| have)\s+{_ADVERBS}(?:{done_words})\b"
            rf"|\b(?:is|are|'s|'re|has been|have been|was|were)\s+{_ADVERBS}(?:{done_words})\b"
            r"|\byou(?:'re| are)\s+(?:all\s+)?(?:set|booked in)\b",
            re.IGNORECASE,
        )
        things = sorted({w for tool in lookups for w in _about(tool)})
        self._lookup = _lookup_pattern(things) if things else None
        hours = any(re.search(r"hour|open", t.name) for t in lookups)
        self._hours = (
            re.compile(
                r"\b(?:we(?:'re| are)?|it(?:'s| is)|the \w+ (?:is|are))\s+"
                r"(?:open|closed|close|opens|closes)\b",
                re.IGNORECASE,
            )
            if hours
            else None
        )
        openers = [rf"\b(?:{done_words})\b", r"\d|[$€£]", rf"\b(?:{_MERIDIEM_WORDS})"]
        openers += [r"\b(?:dollars|euros|pounds|minutes?)\b", r"\byou(?:'re| are) all\b"]
        openers += [r"\b(?:has|have) been\b|\b(?:is|are) now\b|\b(?:i|we)'ve\b"]
        if things:
            openers += [r"\b(?:we|i)(?:'ve| have| do have| got)\b", r"\bthere(?:'s| is| are)\b"]
            openers += [r"\b(?:has|have) (?:a|an|one|some|no)\b", rf"\b(?:{_STATES})\b"]
            openers += [rf"\b(?:your|the) (?:{'|'.join(map(re.escape, things))})\b"]
            openers += [r"\bcan (?:come|see|have)\b"]
        if hours:
            openers.append(r"\b(?:open|closed|close|opens|closes)\b")
        self._opener = re.compile("|".join(openers), re.IGNORECASE)

    def may_claim(self, sentence: str) -> bool:
        """Whether these words (a sentence, or its start) may go on to state a claim: held
        until the sentence ends."""
        return bool(self._opener.search(sentence))

    def claim(self, sentence: str, known: frozenset[str]) -> Claim | None:
        """The first claim that ``sentence`` (a whole one) states with nothing behind it.
        ``known``: the words of the instructions and the conversation (:func:`known_words`)."""
        text = sentence.replace("’", "'").strip()
        if text.endswith("?"):
            text = _before_the_question(text)
        if not text:
            return None
        for match in _VALUES.finditer(text):
            if not _asked(text, match.start()) and not _backed(match[0], known):
                return Claim("value", match[0].strip())
        for kind, pattern in (("done", self._done), ("lookup", self._lookup)):
            for match in pattern.finditer(text) if pattern is not None else ():
                if not _asked(text, match.start()):
                    return Claim(kind, match[0].strip())
        if self._hours is not None:
            for match in self._hours.finditer(text):
                if not _asked(text, match.start()):
                    return Claim("lookup", match[0].strip())
        return None


class ClaimGate:
    """One request's words on their way to the caller: a sentence that may state a claim
    is held until it ends, then said, or stopped (:attr:`stopped`) with all that follows.

    ``push`` each piece of text; it returns what may be said now. ``flush`` at the end."""

    def __init__(self, rules: ClaimRules, known: frozenset[str]) -> None:
        self.rules, self.known = rules, known
        self.stopped: Claim | None = None
        self._sentence = ""  # the sentence being written, from its start
        self._said = 0  # how much of it has been let through

    def push(self, text: str) -> str:
        if self.stopped is not None:
            return ""
        self._sentence += text
        out: list[str] = []
        while (end := _SENTENCE_END.search(self._sentence)) is not None:
            whole, self._sentence = self._sentence[: end.end()], self._sentence[end.end() :]
            said, self._said = self._said, 0
            if (claim := self.rules.claim(whole, self.known)) is not None:
                self.stopped, self._sentence = claim, ""
                return "".join(out)
            out.append(whole[said:])
        if not self.rules.may_claim(self._sentence):  # all but words that may open one
            cut = max(self._said, _held_from(self._sentence))
            out.append(self._sentence[self._said : cut])
            self._said = cut
        return "".join(out)

    def flush(self) -> str:
        said = self.push("")
        if self.stopped is not None or not self._sentence:
            return said
        rest, self._sentence, held = self._sentence, "", self._said
        self._said = 0
        if (claim := self.rules.claim(rest, self.known)) is not None:
            self.stopped = claim
            return said
        return said + rest[held:]


def known_words(messages: Iterable[ChatMessage]) -> frozenset[str]:
    """The words that back a value: every message's (instructions, the caller's words,
    earlier replies, tool results), numbers also as words' digits and as the digits of a
    number said in groups ("1,400,2" is 14002)."""
    texts = [m.content for m in messages if m.content]
    words = set(said_words(" ".join(texts)))
    for text in texts:
        words.update(re.sub(r"\D", "", run) for run in _DIGIT_RUN.findall(text))
    return frozenset(words)


@dataclass(frozen=True)
class ForcedCalls:
    """What becomes of the calls the model was made to write after a claim."""

    run: list[ToolCallRequest] = field(default_factory=list)  # less the values made up
    ask: list[str] = field(default_factory=list)  # required values nobody said: asked for

    @property
    def instead(self) -> str | None:
        """What the caller hears instead of a run: the question for the values, or the
        apology when there is nothing to run; None when the calls run."""
        if self.ask:
            return question_for(self.ask, TO_CHECK)
        return None if self.run else UNCHECKED


def forced_calls(
    calls: Sequence[ToolCallRequest], tools: Mapping[str, Tool], caller_said: str
) -> ForcedCalls:
    """The calls the model was made to write, as they may run (``tools``: the agent's own,
    by name). Only a lookup, or a tool that asks first, runs: a call that would act with no
    readback, or a client's (not among ``tools``), never does, since the caller never asked
    for it. A run keeps only the values the caller said (:func:`grounded_call`); a required
    one never said is asked for instead of any call."""
    words = known_words([ChatMessage("user", caller_said)])
    run = []
    for call in calls:
        tool = tools.get(call.name)
        if tool is None or not (tool.spec.read_only or tool.policy.confirm):
            return ForcedCalls()
        grounded, unsaid = grounded_call(call, tool.spec, words)
        if unsaid:
            return ForcedCalls(ask=unsaid)
        run.append(grounded)
    return ForcedCalls(run)


def grounded_call(
    call: ToolCallRequest, spec: ToolSpec | None, words: frozenset[str]
) -> tuple[ToolCallRequest, list[str]]:
    """A call the model was made to write after a claim, less what it made up: its optional
    arguments the caller never said are dropped ("What are your opening hours?" asks about
    every day, not "today"); the required ones never said are returned, to be asked for
    rather than guessed. ``words``: the caller's (:func:`known_words` of their messages)."""
    if spec is None or call.error:
        return call, []
    unsaid = (
        name for name, value in call.arguments.items() if not values_said({name: value}, words)
    )
    return leave_out(call, spec, unsaid)


def _backed(value: str, known: frozenset[str]) -> bool:
    digits = re.sub(r"[,.](?=\d{3}\b)", "", value)  # 14,002 is 14002
    return values_said({"value": digits}, known)


def _held_from(text: str) -> int:
    """Where the words that wait begin: the last (it may be cut mid-word: "boo" of
    "booked"), and the run of words before it that may open a claim with it ("Yes, we" of
    "Yes, we have")."""
    words = list(re.finditer(r"\S+", text))
    if not words:
        return len(text)
    first = len(words) - 1
    while first > 0 and _plain_word(words[first - 1][0]) in _OPENING_WORDS:
        first -= 1
    return words[first].start()


def _plain_word(word: str) -> str:
    return word.lower().replace("’", "'").strip('.,;:!?"')


def _before_the_question(text: str) -> str:
    """What a sentence ending in a question states: its clauses before the last ("We have a
    table at 7 pm" of "We have a table at 7 pm, would you like it?")."""
    return ", ".join(re.split(r"[,;:]\s+", text)[:-1])


def _asked(text: str, at: int) -> bool:
    return bool(_ASKING.search(text[:at]))


def _verb(tool_name: str) -> str:
    return re.split(r"[_\-.]", tool_name.lower())[0]


def _participle(verb: str) -> str:
    if verb in _IRREGULAR:
        return _IRREGULAR[verb]
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and len(verb) > 2 and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    if verb == "cancel":
        return "cancelled"
    return verb + "ed"


def _about(tool: ToolSpec) -> set[str]:
    """The things a lookup is about: the content words of its name and description."""
    text = f"{tool.name.replace('_', ' ')} {tool.description}".lower()
    words = {w for w in re.findall(r"[a-z]+", text) if len(w) > 3 and w not in _STOPWORDS}
    if re.search(r"avail|free|slot|stock", text):
        words.update(_AVAILABLE_THINGS)
    return words - set(_STATES.split("|"))


def _lookup_pattern(things: Sequence[str]) -> re.Pattern[str]:
    thing = rf"(?:{'|'.join(map(re.escape, things))})"
    return re.compile(
        rf"\b(?:we|i)(?:'ve| have| do have|'ve got| have got| got)\s+{_DETERMINERS}"
        rf"(?:\w+\s+){{0,2}}?{thing}\b"
        rf"|\bthere(?:'s| is| are)\s+{_DETERMINERS}(?:\w+\s+){{0,2}}?{thing}\b"
        rf"|\b(?:has|have)\s+(?:a|an|one|some|no)\s+(?:\w+\s+)?{thing}\b"
        rf"|\b{thing}\s+(?:is|are)\s+{_ADVERBS}(?:{_STATES})\b"
        rf"|\b(?:your|the)\s+{thing}\s+(?:\w+\s+)?(?:is|was|has|will)\b"
        rf"|\bcan (?:come in|come|see (?:you|the \w+)|have (?:it|one|a \w+))\b[^.?!]*?"
        r"\b(?:today|tonight|tomorrow|\w+day|at \w+)\b",
        re.IGNORECASE,
    )
