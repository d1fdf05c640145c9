"""IFEval `keywords:*`: keywords present, forbidden words, a word's or a letter's frequency."""

from __future__ import annotations

from collections.abc import Sequence

from ._text import _as_list, _compare, _count_word, _d_rel, _plural, _relation_text, _show
from .registry import CheckResult, constraint


@constraint("keywords:existence", required=("keywords",),
            describe=lambda k: f"Include the keywords {_show(_as_list(k.get('keywords', [])), 10)}")
def check_keywords_existence(response: str, *, keywords: Sequence[str]) -> CheckResult:
    kws = _as_list(keywords)
    missing = [k for k in kws if _count_word(response, k) == 0]
    if missing:
        return False, f"missing keyword(s) {_show(missing)} (whole words, any case)"
    return True, f"all keywords present: {_show(kws)}"


@constraint("keywords:forbidden_words", required=("forbidden_words",),
            describe=lambda k: f"Do not use the words {_show(_as_list(k.get('forbidden_words', [])), 10)}")
def check_forbidden_words(response: str, *, forbidden_words: Sequence[str]) -> CheckResult:
    bad = [(w, _count_word(response, w)) for w in _as_list(forbidden_words)]
    bad = [(w, n) for w, n in bad if n]
    if bad:
        used = ", ".join(f"{w!r} ({_plural(n, 'time')})" for w, n in bad)
        return False, f"forbidden word(s) used: {used}"
    return True, "none of the forbidden words is used"


@constraint("keywords:frequency", required=("keyword", "frequency", "relation"),
            describe=lambda k: f"Use the word {k.get('keyword')!r} {_d_rel(k, 'relation', 'frequency', 'time')}")
def check_keyword_frequency(response: str, *, keyword: str, frequency: int, relation: str) -> CheckResult:
    n = _count_word(response, keyword)
    return _compare(n, relation, int(frequency)), (
        f"the word {keyword!r} appears {_plural(n, 'time')}; "
        f"required: {_relation_text(relation, int(frequency), 'time')}")


@constraint("keywords:letter_frequency", required=("letter", "let_frequency", "let_relation"),
            describe=lambda k: (
                f"Use the letter {str(k.get('letter', '')).lower()!r} "
                f"{_d_rel(k, 'let_relation', 'let_frequency', 'time')}"))
def check_letter_frequency(response: str, *, letter: str, let_frequency: int, let_relation: str) -> CheckResult:
    ch = str(letter).strip().lower()
    n = response.lower().count(ch)
    ok = _compare(n, let_relation, int(let_frequency))
    return ok, (f"the letter {ch!r} appears {_plural(n, 'time')} (any case); "
                f"required: {_relation_text(let_relation, int(let_frequency), 'time')}")
