"""IFEval `change_case:*`: all-capital words, all capitals, all lowercase."""

from __future__ import annotations

from ._text import _count_check, _d_rel, _plural, _show, words
from .registry import CheckResult, constraint


def _all_caps_words(text: str) -> list[str]:
    return [w for w in words(text) if sum(ch.isalpha() for ch in w) >= 2 and w.isupper()]


@constraint("change_case:capital_word_frequency", required=("capital_frequency", "capital_relation"),
            describe=lambda k: (
                f"Use words in ALL CAPITAL letters {_d_rel(k, 'capital_relation', 'capital_frequency', 'time')}"))
def check_capital_word_frequency(response: str, *, capital_frequency: int, capital_relation: str) -> CheckResult:
    caps = _all_caps_words(response)
    return _count_check(len(caps), capital_relation, int(capital_frequency), "word", "the answer",
                        f"in all capital letters: {_show(caps)}" if caps else "in all capital letters")


@constraint("change_case:english_capital", describe="Write the entire answer in English capital letters (no lowercase)")
def check_english_capital(response: str) -> CheckResult:
    if not any(ch.isalpha() for ch in response):
        return False, "the answer has no letters at all"
    lower = [w for w in words(response) if any(ch.islower() for ch in w)]
    if lower:
        return False, f"{_plural(len(lower), 'word')} contain lowercase letters, e.g. {_show(lower)}"
    return True, "every letter is a capital letter"


@constraint("change_case:english_lowercase", describe="Write the entire answer in lowercase letters (no capitals)")
def check_english_lowercase(response: str) -> CheckResult:
    if not any(ch.isalpha() for ch in response):
        return False, "the answer has no letters at all"
    upper = [w for w in words(response) if any(ch.isupper() for ch in w)]
    if upper:
        return False, f"{_plural(len(upper), 'word')} contain capital letters, e.g. {_show(upper)}"
    return True, "every letter is lowercase"
