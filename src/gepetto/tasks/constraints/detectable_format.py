"""IFEval `detectable_format:*`: fixed answer phrases, JSON, sections, bullet lists, highlights, a title."""

from __future__ import annotations

import json
import re

from ._text import _bullets, _count_check, _plural, _show, _strip_fences
from .registry import CheckResult, constraint

_CONSTRAINED = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


@constraint("detectable_format:constrained_response",
            describe="Answer with one of: 'My answer is yes.', 'My answer is no.', 'My answer is maybe.'")
def check_constrained_response(response: str) -> CheckResult:
    low = response.lower()
    found = [p for p in _CONSTRAINED if p.lower() in low]
    if not found:
        return False, f"none of the phrases {_show(_CONSTRAINED)} appears in the answer"
    if len(found) > 1:
        return False, f"the answer contains several of the phrases ({_show(found)}); exactly one is allowed"
    return True, f"the answer contains {found[0]!r}"


@constraint("detectable_format:json_format", describe="Make the entire answer valid JSON")
def check_json_format(response: str) -> CheckResult:
    body = _strip_fences(response)
    if not body:
        return False, "the answer is empty, not JSON"
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        return False, f"the answer is not valid JSON ({exc.msg} at character {exc.pos}); the whole answer must be JSON"
    return True, "the whole answer is valid JSON"


@constraint("detectable_format:multiple_sections", required=("section_spliter", "num_sections"),
            describe=lambda k: (
                f"Have {int(k.get('num_sections', 1))} sections, each starting with "
                f"'{k.get('section_spliter', 'Section')} X' (X = 1, 2, ...)"))
def check_multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> CheckResult:
    spl = str(section_spliter).strip()
    heads = re.findall(rf"(?im)^[ \t#*_>]*{re.escape(spl)}\s*(\d+)", response)
    return _count_check(len(heads), "at least", int(num_sections), "section", "the answer",
                        f"marked '{spl} X' at the start of a line")


@constraint("detectable_format:number_bullet_lists", required=("num_bullets",),
            describe=lambda k: (
                f"Use exactly {_plural(int(k.get('num_bullets', 1)), 'markdown bullet point')} ('* item')"))
def check_number_bullet_lists(response: str, *, num_bullets: int) -> CheckResult:
    found = _bullets(response)
    return _count_check(len(found), "exactly", int(num_bullets), "markdown bullet point", "the answer",
                        "lines starting with '* ' or '- '")


_ITALIC_RE = re.compile(r"(?<!\*)\*(?![\s*])([^\n*]*?[^\s*])\*(?!\*)")
_BOLD_RE = re.compile(r"\*\*(?![\s*])([^\n*]*?[^\s*])\*\*")


@constraint("detectable_format:number_highlighted_sections", required=("num_highlights",),
            describe=lambda k: (
                f"Highlight at least {_plural(int(k.get('num_highlights', 1)), 'section')} with markdown, like *this*"))
def check_number_highlighted_sections(response: str, *, num_highlights: int) -> CheckResult:
    found = _ITALIC_RE.findall(response) + _BOLD_RE.findall(response)
    return _count_check(len(found), "at least", int(num_highlights), "highlighted section", "the answer",
                        f"written like *this*: {_show(found, 3)}" if found else "written like *this*")


@constraint("detectable_format:title", describe="Include a title wrapped in double angular brackets, like <<title>>")
def check_title(response: str) -> CheckResult:
    m = re.search(r"<<([^<>\n]*\S[^<>\n]*)>>", response)
    if not m:
        return False, "no title wrapped in double angular brackets, like <<my title>>, was found"
    return True, f"title <<{m.group(1).strip()}>> found"
