"""IFEval `length_constraints:*`: paragraphs, sentences and words."""

from __future__ import annotations

import re

from ._text import _compare, _d_rel, _first_word, _plural, _relation_text, paragraphs_by_blank_lines, sentences, words
from .registry import CheckResult, constraint


@constraint("length_constraints:nth_paragraph_first_word", required=("num_paragraphs", "nth_paragraph", "first_word"),
            describe=lambda k: (
                f"Write exactly {_plural(int(k.get('num_paragraphs', 1)), 'paragraph')} separated by blank lines; "
                f"paragraph {int(k.get('nth_paragraph', 1))} must start with the word {k.get('first_word')!r}"))
def check_nth_paragraph_first_word(response: str, *, num_paragraphs: int, nth_paragraph: int,
                                   first_word: str) -> CheckResult:
    paras = paragraphs_by_blank_lines(response)
    n, k = int(num_paragraphs), int(nth_paragraph)
    if len(paras) != n:
        return False, (f"the answer has {_plural(len(paras), 'paragraph')} separated by blank lines; "
                       f"exactly {n} are required")
    if not 1 <= k <= len(paras):
        return False, f"paragraph {k} does not exist"
    got = _first_word(paras[k - 1])
    if got != str(first_word).strip().lower():
        return False, f"paragraph {k} starts with {got!r}; it must start with the word {first_word!r}"
    return True, f"{_plural(n, 'paragraph')}, and paragraph {k} starts with {first_word!r}"


def _divider_parts(response: str) -> list[str]:
    return re.split(r"(?m)^[ \t]*\*[ \t]*\*[ \t]*\*[ \t]*$", response.strip())


@constraint("length_constraints:number_paragraphs", required=("num_paragraphs",),
            describe=lambda k: (
                f"Write exactly {_plural(int(k.get('num_paragraphs', 1)), 'paragraph')} separated by markdown "
                "dividers ***"))
def check_number_paragraphs(response: str, *, num_paragraphs: int) -> CheckResult:
    parts = [p.strip() for p in _divider_parts(response)]
    n = int(num_paragraphs)
    if any(not p for p in parts):
        return False, "there is an empty paragraph around a '***' divider (or a divider at the very start or end)"
    if len(parts) != n:
        return False, (f"the answer has {_plural(len(parts), 'paragraph')} separated by '***' divider lines; "
                       f"exactly {n} are required")
    return True, f"{_plural(n, 'paragraph')} separated by '***' divider lines"


@constraint("length_constraints:number_sentences", required=("num_sentences", "relation"),
            describe=lambda k: f"Answer with {_d_rel(k, 'relation', 'num_sentences', 'sentence')}")
def check_number_sentences(response: str, *, num_sentences: int, relation: str) -> CheckResult:
    n = len(sentences(response))
    return _compare(n, relation, int(num_sentences)), (
        f"the answer has {_plural(n, 'sentence')}; "
        f"required: {_relation_text(relation, int(num_sentences), 'sentence')}")


@constraint("length_constraints:number_words", required=("num_words", "relation"),
            describe=lambda k: f"Answer with {_d_rel(k, 'relation', 'num_words', 'word')}")
def check_number_words(response: str, *, num_words: int, relation: str) -> CheckResult:
    n = len(words(response))
    return _compare(n, relation, int(num_words)), (
        f"the answer has {_plural(n, 'word')}; required: {_relation_text(relation, int(num_words), 'word')}")
