"""What the optimiser can tell about a task's answers from what every user gives: the examples (their `gold`, when
there is one), the program's outputs, and the metric's scores and feedback. Nothing here needs `Score.pattern`.

- A **closed answer set**: the golds are a few short texts, each shared by several examples (labels, classes,
  yes/no); with no gold, the outputs of the seed's solved rollouts are.
- A **confusion**: a failed rollout whose output names an answer X while its example's right answer is Y, written
  "answered X, expected Y" (the right answer from the gold, else the one other answer the feedback names).
- A **failure pattern** for any other failure: the feedback's first sentence with what is particular to the example
  masked (quoted text, numbers, the output and the gold), so that free-text feedback still forms groups.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from gepetto.program import Rollout
from gepetto.types import Example

MAX_ANSWER_CHARS = 40  # an answer of a closed set is short: a label, a class, yes/no
MAX_ANSWER_WORDS = 5
MAX_ANSWERS = 60
PATTERN_CHARS = 120
# an output or gold that says what it is before the answer: "Intent: balance", "The answer is yes"
_PREFIX = re.compile(r"^(?:the\s+)?(?:intent|label|answer|category|class|classification)\s*(?:is)?\s*[:=-]?\s*", re.I)
_QUOTED = re.compile(r"'[^'\n]{1,200}'|\"[^\"\n]{1,200}\"|`[^`\n]{1,200}`|‘[^’\n]{1,200}’|“[^”\n]{1,200}”")
_NUMBER = re.compile(r"(?<![\w-])[-+]?\d[\d,]*(?:\.\d+)?(?![\w])")  # a number on its own, not in "rule-3"
_CONFUSION = re.compile(r"^answered\s+(.+?),\s*expected\s+(.+?)$", re.I)
NO_ANSWER = "no listed answer"  # X of a confusion whose output names none of the answers


def normal(text: Any) -> str:
    """The comparison key of an answer: lowercase, without quotes, a trailing period, a leading "Answer:" and the
    like; spaces, hyphens and underscores all one "_"."""
    s = str(text if text is not None else "").strip().strip("`\"'*").strip()
    s = _PREFIX.sub("", s).strip().strip("`\"'*").rstrip(".!").strip()
    return re.sub(r"[\s\-_]+", "_", s.lower())


def _short(text: str) -> bool:
    return 0 < len(text) <= MAX_ANSWER_CHARS and len(text.split()) <= MAX_ANSWER_WORDS and "\n" not in text


@dataclass(frozen=True)
class AnswerSet:
    """The closed set of answers of a task, as the golds (or the solved outputs) write them, and where it came
    from ("golds" or "outputs")."""

    answers: tuple[str, ...]
    source: str

    def match(self, text: Any) -> str:
        """The answer `text` is (compared by `normal`), or the one answer it names as a whole word when it is short
        ("I think it's balance."); "" when none or several."""
        found = self.exact(text)
        if found or not normal(text) or len(str(text)) > 4 * MAX_ANSWER_CHARS:
            return found
        named = [a for a in self.answers if names(str(text), a)]
        return named[0] if len(named) == 1 else ""

    def exact(self, text: Any) -> str:
        """The answer `text` is (compared by `normal`), "" if none: an answer alone, not a sentence naming one."""
        return self._by_key.get(normal(text), "")

    def final(self, text: Any) -> str:
        """The answer an output gives: the one it is (or, being short, names), else the one a longer text names last
        ("... so it cannot be. Answer: no" gives "no"); "" when it names none."""
        found = self.match(text)
        if found or text is None:
            return found
        last, at = "", -1
        for answer in self.answers:
            for m in re.finditer(_named(answer), str(text), re.I):
                if m.start() > at:
                    last, at = answer, m.start()
        return last

    def named_in(self, text: str) -> list[str]:
        """The answers `text` names as whole words, in the order of the set."""
        return [a for a in self.answers if names(text, a)]

    @cached_property
    def _by_key(self) -> dict[str, str]:
        return {normal(a): a for a in self.answers}

    def describe(self) -> str:
        shown = ", ".join(self.answers[:6]) + (", ..." if len(self.answers) > 6 else "")
        return f"{len(self.answers)} answers from the {self.source} ({shown})"

    def to_dict(self) -> dict[str, Any]:
        return {"answers": list(self.answers), "source": self.source}


def _named(answer: str) -> str:
    words = [re.escape(w) for w in re.split(r"[_\s\-]+", answer) if w]
    return r"(?<![\w])" + r"[_\s\-]+".join(words) + r"(?![\w])" if words else r"(?!)"


def names(text: str, answer: str) -> bool:
    """Whether `text` names `answer` as a whole word (case-insensitive; "_", "-" and spaces alike)."""
    return bool(re.search(_named(answer), text, re.I))


CONSTANT_SHARE = 0.8  # outputs this often one answer are (nearly) a constant answer


@dataclass(frozen=True)
class ConstantAnswer:
    """A candidate whose outputs are nearly all one answer while the golds are not: `answer`, given on `given` of
    `of` validation examples, and `scores`, what always giving it would score on each (1 where it is the gold).
    Such a candidate may repair a format and land on the majority answer: that is no gain unless it beats the
    constant answer itself."""

    answer: str
    given: int
    of: int
    scores: tuple[float, ...]

    @property
    def score(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"answer": self.answer, "given": self.given, "of": self.of, "score": self.score}


def constant_answer(answers: AnswerSet | None, outputs: Sequence[Any], golds: Sequence[Any], perfect: float = 1.0
                    ) -> ConstantAnswer | None:
    """The constant answer `outputs` (a candidate's, on the validation examples whose `golds` are given in the
    same order) nearly always give, when they do (CONSTANT_SHARE of them) and the golds are that answer less often;
    None otherwise, or without an answer set from golds."""
    if answers is None or answers.source != "golds" or not outputs or len(outputs) != len(golds):
        return None
    given = Counter(a for a in (answers.final(o) for o in outputs) if a)
    if not given:
        return None
    answer, count = given.most_common(1)[0]
    right = tuple(perfect if answers.match(g) == answer else 0.0 for g in golds)
    if count < CONSTANT_SHARE * len(outputs) or sum(right) / perfect >= count:
        return None
    return ConstantAnswer(answer, count, len(outputs), right)


def _closed(texts: Sequence[str], source: str, *, min_share: float) -> AnswerSet | None:
    """An answer set when the texts are short and few distinct ones cover them (each distinct one at least twice
    on average: `min_share` of the texts are repeats)."""
    if len(texts) < 4 or not all(_short(t.strip()) for t in texts):
        return None
    counts = Counter(normal(t) for t in texts)
    if "" in counts or not 2 <= len(counts) <= MAX_ANSWERS or len(counts) > (1 - min_share) * len(texts):
        return None
    first: dict[str, str] = {}
    for t in texts:
        first.setdefault(normal(t), t.strip())
    return AnswerSet(tuple(sorted(first.values(), key=normal)), source)


def from_golds(trainset: Iterable[Example], valset: Iterable[Example] = ()) -> AnswerSet | None:
    """The answer set the examples' golds form: every example has a short text gold and, in the training set
    alone, few distinct golds cover them all (each at least twice on average: a label set); the validation golds
    join the set. None otherwise (no gold, numbers, records, free text, a gold per example)."""
    train, val = [e.gold for e in trainset], [e.gold for e in valset]
    if not train or not all(isinstance(g, str) for g in train + val):
        return None
    if _closed(train, "golds", min_share=0.5) is None:
        return None
    return _closed(train + val, "golds", min_share=0.0)


def from_outputs(rollouts: Iterable[Rollout], perfect: float) -> AnswerSet | None:
    """The answer set the solved rollouts' outputs form (for examples without golds): short outputs, few of them
    distinct, and most outputs of all the rollouts short too."""
    runs = list(rollouts)
    outputs = [str(r.output) for r in runs if r.output is not None and r.score.value >= perfect]
    short = sum(_short(str(r.output).strip()) for r in runs if r.output is not None)
    if short < 0.8 * len(runs):
        return None
    return _closed(outputs, "outputs", min_share=0.3)


STRAY_SHARE = 0.2  # a step's answers may include this share of one-off texts and still form a closed set


def of_step(rollouts: Iterable[Rollout], component: str, instruction: str = "") -> AnswerSet | None:
    """The answer set of an inner step: the texts its last call gives in `rollouts` (the seed's validation), when
    they are short, the ones given at least twice cover all but STRAY_SHARE of them and few distinct ones do (a
    router's areas, a classifier feeding a later step), with the other items of a list in its `instruction` that
    names two of them (the areas it never chose yet); None otherwise (free text, queries, summaries)."""
    texts = [str(o).strip() for r in rollouts if (o := step_output(r, component)) is not None]
    counts = Counter(normal(t) for t in texts)
    repeated = [t for t in texts if normal(t) and counts[normal(t)] >= 2]
    if len(repeated) < (1 - STRAY_SHARE) * len(texts):
        return None
    given = _closed(repeated, "outputs", min_share=0.3)
    if given is None:
        return None
    more = [a for a in listed(instruction, given.answers) if not given.exact(a)]
    if not more:
        return given
    return AnswerSet(tuple(sorted([*given.answers, *more], key=normal))[:MAX_ANSWERS], "outputs and its instruction")


_LIST_ITEM = re.compile(r",\s*(?:or\s+|and\s+)?|\s+or\s+|\s+and\s+")


def listed(instruction: str, known: Sequence[str]) -> list[str]:
    """The items of each list in `instruction` ("...: alarm, audio, calendar or email.") that holds at least two of
    the `known` answers, each no more words than they have: one clause each (split at line ends, colons and
    sentence ends)."""
    keys, found = {normal(k) for k in known}, []
    for clause in re.split(r"\n|:|(?<=[.!?])\s", instruction):
        items = [i.strip().strip("`\"'*").rstrip(".!?").strip() for i in _LIST_ITEM.split(clause)]
        items = [i for i in items if i and _short(i)]
        named = [i for i in items if normal(i) in keys]
        if len(items) >= 3 and len(named) >= 2:
            words = max(len(normal(i).split("_")) for i in named)  # (an answer's words, as its key spells them)
            found += [i for i in items
                      if i not in found and normal(i) not in keys and len(normal(i).split("_")) <= words]
    return found


def step_output(rollout: Rollout, component: str) -> str | None:
    """The answer of `component`'s last call in the rollout (None: the step was not called)."""
    calls = [t for t in rollout.trace if t.component == component]
    return str(calls[-1].output) if calls else None


def step_view(rollout: Rollout, component: str) -> Rollout:
    """The rollout as an inner step's: its output is the step's last answer, and the metric's pattern (which names
    the program's answer, not the step's) is dropped, so its confusion comes from the feedback."""
    score = replace(rollout.score, pattern="") if rollout.score.pattern else rollout.score
    return replace(rollout, output=step_output(rollout, component), score=score)


def mask(feedback: str, *specifics: str) -> str:
    """The feedback with what is particular to one example masked (the output, the gold, quoted text, numbers), so
    that the same kind of failure reads the same on every example: its first sentences, as many as fit in
    PATTERN_CHARS (a long tail, such as a reference solution, is left out)."""
    text = " ".join(feedback.split())
    for part in sorted({s.strip() for s in specifics if s and s.strip()}, key=len, reverse=True):
        if len(part) >= 2:  # as a whole, not inside a longer word or number ("25" in "250")
            text = re.sub(r"(?<![\w])" + re.escape(part) + r"(?![\w])", "…", text)
    text = _NUMBER.sub("N", _QUOTED.sub("'…'", text))
    kept = ""
    for sentence in re.split(r"(?<=[.!?])\s", text):
        if kept and len(kept) + 1 + len(sentence) > PATTERN_CHARS:
            break
        kept = f"{kept} {sentence}".strip()
    return kept[:PATTERN_CHARS] or "failed"


def confusion(pattern: str) -> tuple[str, str]:
    """(X, Y) of a confusion pattern "answered X, expected Y" (X is NO_ANSWER when the output named no answer);
    ("", "") for any other pattern."""
    m = _CONFUSION.match(pattern.strip())
    return (m.group(1).strip(), m.group(2).strip()) if m else ("", "")


class Diagnosis:
    """Reads failures the same way for every proposer: their pattern, their right answer and the answer given,
    from the run's answer set (or None) and the examples by id."""

    def __init__(self, answers: AnswerSet | None, examples: Mapping[str, Example]) -> None:
        self.answers = answers
        self.examples = examples

    def expected(self, rollout: Rollout) -> str:
        """The right answer of the rollout's example: its gold (as the set writes it); without golds, the one
        answer the feedback names besides the one given; "" when unknown."""
        if self.answers is None:
            return ""
        example = self.examples.get(rollout.example_id)
        if self.answers.source == "golds" and example is not None:
            return self.answers.match(example.gold)
        if rollout.score.pattern:
            return confusion(rollout.score.pattern)[1]
        others = [a for a in self.answers.named_in(rollout.score.feedback) if a != self.given(rollout)]
        return others[0] if len(others) == 1 else ""

    def given(self, rollout: Rollout) -> str:
        """The answer the rollout's output is (or names), "" if none."""
        return self.answers.match(rollout.output) if self.answers is not None and rollout.output is not None else ""

    def pattern(self, rollout: Rollout) -> str:
        """The failure's pattern: the metric's `Score.pattern` when it gives one; else, with an answer set, the
        confusion "answered X, expected Y"; else the masked first sentence of the feedback."""
        if rollout.score.pattern:
            return rollout.score.pattern
        right = self.expected(rollout)
        given = self.given(rollout)
        if right and given != right:
            return f"answered {given or NO_ANSWER}, expected {right}"
        example = self.examples.get(rollout.example_id)
        gold = example.gold if example is not None and isinstance(example.gold, (str, int, float)) else ""
        return mask(rollout.score.feedback, str(rollout.output or ""), str(gold))

    def expected_of(self, pattern: str) -> str:
        """The right answer a pattern names (Y of a confusion; also a metric's own "answered X, expected Y")."""
        return confusion(pattern)[1]

    def wrong_of(self, pattern: str) -> str:
        """The answer given in a confusion pattern, when it is one of the answers (never NO_ANSWER)."""
        given = confusion(pattern)[0]
        if not given or given == NO_ANSWER:
            return ""
        return given if self.answers is None else (self.answers.match(given) or "")
