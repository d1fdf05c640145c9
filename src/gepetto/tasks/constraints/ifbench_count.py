"""IFBench `count:*`: conjunctions, repeated keywords, numbers, names, pronouns, punctuation, word counts,
Japanese words."""

from __future__ import annotations

import re

from ._text import _count_check, _count_word, _plural, _script, _show, _split, words
from .registry import CheckResult, constraint

_COORDINATING = ("for", "and", "nor", "but", "or", "yet", "so")
_PRONOUNS = frozenset(_split(
    "i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself "
    "we us our ours ourselves they them their theirs themselves who whom whose whoever whomever anyone anybody "
    "anything everyone everybody everything someone somebody something nobody nothing none"))

PERSON_NAMES = tuple(_split(
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander Amelia Benjamin "
    "Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella Jacob Scarlett Nathan Victoria "
    "Elijah Layla Nicholas Audrey David Hannah Christopher Penelope Thomas Nora Andrew Aria Joseph Claire Ryan "
    "Stella Jonathan"))


@constraint("count:conjunctions", required=("small_n",),
            describe=lambda k: (
                f"Use at least {int(k.get('small_n', 1))} different coordinating conjunctions "
                "(for, and, nor, but, or, yet, so)"))
def check_conjunctions(response: str, *, small_n: int) -> CheckResult:
    toks = {w.lower() for w in words(response)}
    used = [c for c in _COORDINATING if c in toks]
    return _count_check(len(used), "at least", int(small_n), "different coordinating conjunction", "the answer",
                        f"used: {', '.join(used) or 'none'}; the seven are for, and, nor, but, or, yet, so")


_ORDINAL_TIMES = {1: "once", 2: "twice", 3: "three times", 4: "four times", 5: "five times", 7: "seven times"}
_MULTI_COUNTS = {"keyword1": 1, "keyword2": 2, "keyword3": 3, "keyword4": 5, "keyword5": 7}


@constraint("count:keywords_multiple", required=("keyword1",),
            describe=lambda k: "Use " + ", ".join(
                f"{k[key]!r} {_ORDINAL_TIMES[n]}" for key, n in _MULTI_COUNTS.items() if key in k) + " (exactly)")
def check_keywords_multiple(response: str, **kw: str) -> CheckResult:
    problems, seen = [], []
    for key, want in _MULTI_COUNTS.items():
        if key not in kw:
            continue
        n = _count_word(response, kw[key])
        seen.append(f"{kw[key]!r} {n}x")
        if n != want:
            problems.append(f"{kw[key]!r} appears {_plural(n, 'time')} but must appear exactly {_plural(want, 'time')}")
    if problems:
        return False, "; ".join(problems)
    return True, "every keyword appears the required number of times (" + ", ".join(seen) + ")"


_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?\d+(?:[,.]\d+)*(?:%)?(?![\w])")


@constraint("count:numbers", required=("N",),
            describe=lambda k: f"Include exactly {_plural(int(k.get('N', 0)), 'number')}")
def check_numbers(response: str, *, N: int) -> CheckResult:
    found = [m.group(0) for m in _NUMBER_RE.finditer(response)]
    return _count_check(len(found), "exactly", int(N), "number", "the answer",
                        f"written in digits: {_show(found)}" if found else "written in digits")


@constraint("count:person_names", required=("N",),
            describe=lambda k: f"Mention at least {int(k.get('N', 1))} different person names from the given list")
def check_person_names(response: str, *, N: int) -> CheckResult:
    used = [n for n in PERSON_NAMES if re.search(rf"(?<![^\W_]){n}(?![^\W_])", response)]
    return _count_check(len(used), "at least", int(N), "different name", "the answer",
                        f"from the given list: {_show(used)}" if used else "from the given list")


@constraint("count:pronouns", required=("N",),
            describe=lambda k: f"Use at least {_plural(int(k.get('N', 1)), 'pronoun')}")
def check_pronouns(response: str, *, N: int) -> CheckResult:
    n = sum(1 for w in words(response) if w.lower() in _PRONOUNS)
    return _count_check(n, "at least", int(N), "pronoun", "the answer", "personal, possessive, reflexive, who/whom/"
                        "whose and indefinite pronouns such as someone are counted")


_PUNCTUATION_MARKS = {
    "period": ".", "comma": ",", "question mark": "?", "exclamation mark": "!", "colon": ":", "semicolon": ";",
    "apostrophe": "'", "quotation mark": '"', "parenthesis": "(", "hyphen or dash": "-",
}


@constraint("count:punctuation",
            describe="Use every standard punctuation mark at least once (. , ? ! : ; ' \" ( - ), including the "
                     "interrobang ?!")
def check_punctuation(response: str) -> CheckResult:
    t = response.replace("’", "'").replace("“", '"').replace("”", '"').replace("—", "-").replace("–", "-")
    missing = [name for name, mark in _PUNCTUATION_MARKS.items() if mark not in t]
    if "?!" not in t and "‽" not in t:
        missing.append("interrobang (?! or ‽)")
    if missing:
        return False, "missing punctuation: " + ", ".join(missing)
    return True, "every standard punctuation mark, including the interrobang, is used"


@constraint("count:unique_word_count", required=("N",),
            describe=lambda k: f"Use at least {int(k.get('N', 1))} unique words")
def check_unique_word_count(response: str, *, N: int) -> CheckResult:
    n = len({w.lower() for w in words(response)})
    return _count_check(n, "at least", int(N), "unique word", "the answer")


@constraint("count:word_count_range", required=("min_words", "max_words"),
            describe=lambda k: (
                f"Answer with between {int(k.get('min_words', 0))} and {int(k.get('max_words', 0))} words"))
def check_word_count_range(response: str, *, min_words: int, max_words: int) -> CheckResult:
    n = len(words(response))
    ok = int(min_words) <= n <= int(max_words)
    return ok, f"the answer has {_plural(n, 'word')}; between {int(min_words)} and {int(max_words)} are required"


def _is_japanese(token: str) -> bool:
    return any(_script(ch) in ("KANA", "CJK") for ch in token)


@constraint("count:words_japanese", required=("N",),
            describe=lambda k: f"Make every {int(k.get('N', 1))}th word of the answer Japanese")
def check_words_japanese(response: str, *, N: int) -> CheckResult:
    n = int(N)
    toks = response.split()
    if len(toks) < n:
        return False, f"the answer has only {_plural(len(toks), 'word')}, so it has no {n}th word to write in Japanese"
    bad = [(i, toks[i - 1]) for i in range(n, len(toks) + 1, n) if not _is_japanese(toks[i - 1])]
    if bad:
        shown = ", ".join(f"word {i} {t!r}" for i, t in bad[:4])
        return False, f"{_plural(len(bad), 'word')} at positions that must be Japanese are not: {shown}"
    return True, f"every {n}th word (counting whitespace-separated words) is Japanese"
