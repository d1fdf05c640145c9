"""IFEval `startend:*`: the exact end phrase, the whole answer in double quotes."""

from __future__ import annotations

from ._text import _norm_space
from .registry import CheckResult, constraint


@constraint("startend:end_checker", required=("end_phrase",),
            describe=lambda k: f"End the answer with the exact phrase {k.get('end_phrase')!r}, nothing after it")
def check_end_checker(response: str, *, end_phrase: str) -> CheckResult:
    want = _norm_space(end_phrase)
    got = _norm_space(response)
    trimmed = got.rstrip("\"'*_”’ ") if not want.endswith(("\"", "'", "*", "_")) else got
    if got.endswith(want) or trimmed.endswith(want):
        return True, f"the answer ends with {end_phrase!r}"
    tail = response.strip()[-60:]
    return False, (f"the answer must end with the exact phrase {end_phrase!r} and nothing after it; "
                   f"it ends with {tail!r}")


@constraint("startend:quotation", describe="Wrap the entire answer in double quotation marks")
def check_quotation(response: str) -> CheckResult:
    t = response.strip()
    if len(t) >= 2 and t[0] in "\"“" and t[-1] in "\"”":
        return True, "the whole answer is wrapped in double quotation marks"
    return False, f"the answer must start and end with a double quotation mark; it starts {t[:1]!r} and ends {t[-1:]!r}"
