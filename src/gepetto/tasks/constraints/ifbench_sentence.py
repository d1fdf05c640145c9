"""IFBench `sentence:*`: growing alliteration, growing sentence length, a keyword in sentence N."""

from __future__ import annotations

from itertools import pairwise

from ._text import _count_word, _plural, alpha_words, sentences, words
from .registry import CheckResult, constraint


def _initial_run(ws: list[str]) -> int:
    best = run = 0
    prev = ""
    for w in ws:
        first = w[0].lower()
        run = run + 1 if first == prev else 1
        prev = first
        best = max(best, run)
    return best


@constraint("sentence:alliteration_increment",
            describe="Give each sentence a longer run of alliterative words than the previous one")
def check_alliteration_increment(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed, each with a longer run of alliterative words"
    runs = [_initial_run(alpha_words(s)) for s in sents]
    for i, (a, b) in enumerate(pairwise(runs), 2):
        if b <= a:
            return False, (f"sentence {i} has a longest run of {b} consecutive words starting with the same letter, "
                           f"not more than sentence {i - 1} ({a}); runs per sentence: {runs}")
    return True, f"alliterative runs grow sentence by sentence: {runs}"


@constraint("sentence:increment", required=("small_n",),
            describe=lambda k: (
                f"Give each sentence exactly {int(k.get('small_n', 1))} more words than the previous one"))
def check_sentence_increment(response: str, *, small_n: int) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed"
    counts = [len(words(s)) for s in sents]
    step = int(small_n)
    for i, (a, b) in enumerate(pairwise(counts), 2):
        if b - a != step:
            return False, (f"sentence {i} has {b} words and sentence {i - 1} has {a}; each sentence needs exactly "
                           f"{step} more words than the one before (word counts: {counts[:10]})")
    return True, f"word counts grow by {step}: {counts}"


@constraint("sentence:keyword", required=("word", "N"),
            describe=lambda k: f"Put the word {k.get('word')!r} in sentence {int(k.get('N', 1))}")
def check_sentence_keyword(response: str, *, word: str, N: int) -> CheckResult:
    sents = sentences(response)
    n = int(N)
    if len(sents) < n:
        return False, f"the answer has only {_plural(len(sents), 'sentence')}; the keyword must be in sentence {n}"
    if _count_word(sents[n - 1], word) == 0:
        return False, f"sentence {n} ({sents[n - 1][:80]!r}) does not contain the word {word!r}"
    return True, f"sentence {n} contains {word!r}"
