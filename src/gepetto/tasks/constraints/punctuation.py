"""IFEval `punctuation:no_comma`."""

from __future__ import annotations

from ._text import _plural
from .registry import CheckResult, constraint


@constraint("punctuation:no_comma", describe="Do not use any commas")
def check_no_comma(response: str) -> CheckResult:
    n = response.count(",") + response.count("，")
    if n:
        return False, f"the answer contains {_plural(n, 'comma')}; none are allowed"
    return True, "no commas"
