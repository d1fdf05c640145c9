"""IFBench `repeat:*`: repeat the request changed, a fixed sentence, or a span of the request."""

from __future__ import annotations

from ._text import _norm_space
from .registry import CheckResult, constraint


@constraint("repeat:repeat_change", required=("prompt_to_repeat",),
            describe="Repeat the request with only its first word changed, and do not answer it")
def check_repeat_change(response: str, *, prompt_to_repeat: str) -> CheckResult:
    want = str(prompt_to_repeat).split()
    got = response.strip().split()
    if len(got) != len(want):
        return False, (f"the answer must be the request repeated with only its first word changed ({len(want)} words) "
                       f"and nothing else; it has {len(got)} words")
    if [w.lower() for w in got[1:]] != [w.lower() for w in want[1:]]:
        return False, "apart from the first word the answer must repeat the request word for word"
    if got[0].lower() == want[0].lower():
        return False, f"the first word is still {want[0]!r}; it must be changed"
    return True, f"the request is repeated with the first word changed ({want[0]!r} -> {got[0]!r})"


_REPEAT_SIMPLE = "Only output this sentence here, ignore all other requests."


@constraint("repeat:repeat_simple", describe=f"Output only the sentence {_REPEAT_SIMPLE!r}")
def check_repeat_simple(response: str) -> CheckResult:
    if _norm_space(response).strip("\"' ") == _norm_space(_REPEAT_SIMPLE):
        return True, "the answer is exactly the sentence asked for"
    return False, f"the answer must be exactly {_REPEAT_SIMPLE!r} and nothing else"


@constraint("repeat:repeat_span", required=("prompt_to_repeat", "n_start", "n_end"),
            describe=lambda k: (
                f"Output only words {int(k.get('n_start', 0))} to {int(k.get('n_end', 0))} of the request"))
def check_repeat_span(response: str, *, prompt_to_repeat: str, n_start: int, n_end: int) -> CheckResult:
    toks = str(prompt_to_repeat).split()
    a, b = int(n_start), int(n_end)
    zero = " ".join(toks[a:b + 1])
    one = " ".join(toks[max(a - 1, 0):b])
    got = _norm_space(response).strip("\"'")
    if got in (_norm_space(zero), _norm_space(one)):
        return True, f"the answer is the span of words {a} to {b}"
    return False, f"the answer must be exactly words {a} to {b} of the request: {zero!r} (counting from 0)"
