"""IFEval `detectable_content:*`: square-bracket placeholders, a postscript."""

from __future__ import annotations

import re

from ._text import _count_check, _plural, _show, words
from .registry import CheckResult, constraint


@constraint("detectable_content:number_placeholders", required=("num_placeholders",),
            describe=lambda k: (
                f"Include at least {_plural(int(k.get('num_placeholders', 1)), 'placeholder')} in square brackets, "
                "like [name]"))
def check_number_placeholders(response: str, *, num_placeholders: int) -> CheckResult:
    found = re.findall(r"\[[^\[\]\n]*[^\s\[\]][^\[\]\n]*\]", response)
    return _count_check(len(found), "at least", int(num_placeholders), "placeholder", "the answer",
                        f"in square brackets: {_show(found)}" if found else "in square brackets")


@constraint("detectable_content:postscript", required=("postscript_marker",),
            describe=lambda k: f"End with a postscript starting with {k.get('postscript_marker', 'P.S.')}")
def check_postscript(response: str, *, postscript_marker: str) -> CheckResult:
    marker = str(postscript_marker).strip().rstrip(".")
    pattern = rf"(?:^|\n)[ \t>*_#]*{re.escape(marker)}\.?(?![\w.])(.*)"
    found = list(re.finditer(pattern, response, re.I))
    m = found[-1] if found else None
    if m is None:
        return False, f"no postscript starting with {postscript_marker!r} at the start of a line was found"
    if not words(m.group(1) + response[m.end():]):
        return False, f"the postscript marker {postscript_marker!r} is there but nothing follows it"
    return True, f"a postscript starting with {postscript_marker!r} is present"
