"""IFBench `ratio:*`: trigram overlap with a reference, sentence kinds, equal-length sentences, stop words."""

from __future__ import annotations

from collections import Counter

from ._text import _plural, _show, _split, sentences, words
from .registry import CheckResult, constraint

_STOP_WORDS = frozenset(_split(
    "a about above after again against all am an and any are as at be because been before being below between both "
    "but by can could did do does doing down during each few for from further had has have having he her here hers "
    "herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on "
    "once only or other our ours ourselves out over own same she should so some such than that the their theirs "
    "them themselves then there these they this those through to too under until up very was we were what when "
    "where which while who whom why will with would you your yours yourself yourselves"))


def _trigrams(text: str) -> set[tuple[str, ...]]:
    ws = [w.lower() for w in words(text)]
    return {tuple(ws[i:i + 3]) for i in range(len(ws) - 2)}


@constraint("ratio:overlap", required=("reference_text", "percentage"),
            describe=lambda k: (
                f"Keep the word-trigram overlap with the reference text at {float(k.get('percentage', 0)):g}% (±2)"))
def check_overlap(response: str, *, reference_text: str, percentage: float) -> CheckResult:
    ref = _trigrams(reference_text)
    if not ref:
        return False, "the reference text has no trigrams"
    share = 100.0 * len(ref & _trigrams(response)) / len(ref)
    target = float(percentage)
    ok = abs(share - target) <= 2.0
    return ok, (f"{share:.1f}% of the reference text's word trigrams appear in the answer; "
                f"{target:g}% (±2 points) is required")


def _sentence_kinds(response: str) -> Counter:
    kinds: Counter = Counter()
    for s in sentences(response):
        end = s.rstrip("\"'”’)]*_ ")
        if end.endswith("?") or end.endswith("?!"):
            kinds["interrogative"] += 1
        elif end.endswith("!"):
            kinds["exclamatory"] += 1
        else:
            kinds["declarative"] += 1
    return kinds


@constraint("ratio:sentence_balance",
            describe="Balance declarative, interrogative and exclamatory sentences (counts within 1 of each other)")
def check_sentence_balance(response: str) -> CheckResult:
    k = _sentence_kinds(response)
    counts = {t: k.get(t, 0) for t in ("declarative", "interrogative", "exclamatory")}
    desc = ", ".join(f"{v} {t}" for t, v in counts.items())
    if min(counts.values()) == 0 or max(counts.values()) - min(counts.values()) > 1:
        return False, f"the answer has {desc}; all three kinds are required, with counts differing by at most 1"
    return True, f"balanced: {desc}"


@constraint("ratio:sentence_type", describe="Use declarative and interrogative sentences in a 2:1 ratio")
def check_sentence_type(response: str) -> CheckResult:
    k = _sentence_kinds(response)
    d, q = k.get("declarative", 0), k.get("interrogative", 0)
    if q == 0 or d != 2 * q:
        return False, f"the answer has {d} declarative and {q} interrogative sentences; the ratio must be exactly 2:1"
    return True, f"{d} declarative and {q} interrogative sentences (2:1)"


@constraint("ratio:sentence_words",
            describe="Write exactly three sentences of the same number of characters, never repeating a word")
def check_sentence_words(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) != 3:
        return False, f"the answer has {_plural(len(sents), 'sentence')}; exactly 3 are required"
    lens = [len(s.strip()) for s in sents]
    if len(set(lens)) != 1:
        return False, f"the sentences have {lens} characters (spaces and punctuation included); they must be equal"
    ws = [w.lower() for w in words(response)]
    dup = sorted({w for w in ws if ws.count(w) > 1})
    if dup:
        return False, f"some words are used more than once: {_show(dup)}; all words must be different"
    return True, f"3 sentences of {lens[0]} characters with no repeated word"


@constraint("ratio:stop_words", required=("percentage",),
            describe=lambda k: f"Keep stop words at most {float(k.get('percentage', 0)):g}% of all words")
def check_stop_words(response: str, *, percentage: float) -> CheckResult:
    ws = [w.lower() for w in words(response)]
    if not ws:
        return False, "the answer has no words"
    share = 100.0 * sum(1 for w in ws if w in _STOP_WORDS) / len(ws)
    ok = share <= float(percentage)
    return ok, f"stop words are {share:.1f}% of the {len(ws)} words; at most {float(percentage):g}% is allowed"
