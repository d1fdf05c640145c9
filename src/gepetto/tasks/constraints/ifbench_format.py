"""IFBench `format:*`: emoji endings, indentation, list markers, one word per line, options, templates, nesting,
quotes, sub-bullets, theses, title case."""

from __future__ import annotations

import re
from itertools import pairwise

from ._text import _WORD_RE, _bullets, _plural, _show, _split, alpha_words, paragraphs_by_blank_lines, sentences, words
from .registry import CheckResult, constraint

_EMOJI_CLASS = "\U0001F000-\U0001FAFF\u2600-\u27BF\u2300-\u23FF\u2B00-\u2BFF\u3030\u303D\u3297\u3299\uFE0F\u200D"
_EMOJI_RE = re.compile(f"[{_EMOJI_CLASS}]")


def _emoji_sentences(text: str) -> list[str]:
    end = re.compile(rf"(?:[.!?…]+[\"'”’)]*(?:[ \t]*[{_EMOJI_CLASS}]+)*|[{_EMOJI_CLASS}]+(?:[ \t]*[.!?…]+)?)(?=\s|$)")
    out = []
    for line in text.splitlines():
        pos = 0
        for m in end.finditer(line):
            seg = line[pos:m.end()].strip()
            pos = m.end()
            if _WORD_RE.search(seg):
                out.append(seg)
        tail = line[pos:].strip()
        if _WORD_RE.search(tail):
            out.append(tail)
    return out


@constraint("format:emoji", describe="End every sentence with an emoji")
def check_emoji(response: str) -> CheckResult:
    sents = _emoji_sentences(response)
    if not sents:
        return False, "the answer has no sentences"
    bad = [s for s in sents if not _EMOJI_RE.search(s.rstrip(".!?… \"'”’)")[-1:] or "")]
    if bad:
        return False, f"{_plural(len(bad), 'sentence')} of {len(sents)} do not end with an emoji, e.g. {_show(bad, 2)}"
    return True, f"all {_plural(len(sents), 'sentence')} end with an emoji"


@constraint("format:line_indent", describe="Indent each new line further than the previous one (stairs)")
def check_line_indent(response: str) -> CheckResult:
    lines = [ln.replace("\t", "    ") for ln in response.strip("\n").splitlines() if ln.strip()]
    if len(lines) < 2:
        return False, "the answer needs several lines, each indented further than the one before"
    indents = [len(ln) - len(ln.lstrip(" ")) for ln in lines]
    for i, (a, b) in enumerate(pairwise(indents), 2):
        if b <= a:
            return False, (f"line {i} is indented {b} spaces, not more than line {i - 1} ({a}); "
                           "every new line must be indented further")
    return True, f"{len(lines)} lines with growing indentation"


@constraint("format:list", required=("sep",),
            describe=lambda k: f"Answer with a list of items marked with {k.get('sep')!r} instead of bullet points")
def check_list_sep(response: str, *, sep: str) -> CheckResult:
    s = str(sep)
    items = [ln for ln in response.splitlines() if ln.strip().startswith(s)]
    if len(items) < 2:
        n = response.count(s)
        if n >= 2 and "\n" not in response.strip():
            return True, f"{_plural(n, 'item')} marked with {s!r}"
        return False, (f"the answer has {_plural(len(items), 'line')} starting with {s!r}; "
                       f"a list of items marked with {s!r} is required")
    other = [ln for ln in _bullets(response) if not ln.strip().startswith(s)]
    if other:
        return False, f"the answer uses ordinary bullet points ({_show(other, 2)}); use {s!r} instead"
    return True, f"{_plural(len(items), 'item')} marked with {s!r}"


@constraint("format:newline", describe="Write each word on its own line")
def check_newline(response: str) -> CheckResult:
    lines = [ln.strip() for ln in response.strip().splitlines() if ln.strip()]
    if not lines:
        return False, "the answer is empty"
    bad = [ln for ln in lines if len(ln.split()) > 1]
    if bad:
        return False, (f"{_plural(len(bad), 'line')} hold more than one word, e.g. {_show(bad, 2)}; "
                       "write each word on its own line")
    return True, f"{_plural(len(lines), 'word')}, each on its own line"


@constraint("format:no_bullets_bullets",
            describe=(
                "Write at least two sentences ending in a period, followed by at least two bullet points marked '* '"))
def check_no_bullets_bullets(response: str) -> CheckResult:
    lines = response.strip().splitlines()
    first = next((i for i, ln in enumerate(lines) if re.match(r"^[ \t]*\*[ \t]+\S", ln)), None)
    if first is None:
        return False, "no bullet points marked with '* ' were found"
    before = "\n".join(lines[:first])
    n_period = sum(1 for s in sentences(before) if s.rstrip("\"'”’)").endswith("."))
    n_bullets = sum(1 for ln in lines[first:] if re.match(r"^[ \t]*\*[ \t]+\S", ln))
    if n_period < 2:
        return False, (f"before the bullet points there are {_plural(n_period, 'sentence')} ending in a period; "
                       "at least 2 are required")
    if n_bullets < 2:
        return False, f"there are {_plural(n_bullets, 'bullet point')} marked '* '; at least 2 are required"
    return True, f"{n_period} sentences ending in a period, then {n_bullets} bullet points"


@constraint("format:no_whitespace", describe="Use no whitespace at all")
def check_no_whitespace(response: str) -> CheckResult:
    t = response.strip()
    if not t:
        return False, "the answer is empty"
    n = sum(1 for ch in t if ch.isspace())
    if n:
        return False, f"the answer contains {_plural(n, 'whitespace character')}; none are allowed"
    return True, "no whitespace"


def _option_list(options: str) -> list[str]:
    o = str(options).strip()
    if "/" in o:
        parts = o.split("/")
    elif ", " in o:
        parts = o.split(", ")
    else:
        parts = re.split(r"\s+or\s+", o)
    return [p.strip() for p in parts if p.strip()]


def _opt_norm(text: str) -> str:
    t = text.replace("’", "'").lower()
    t = re.sub(r"[^\w\s']", " ", t)
    return re.sub(r"\s+", " ", t).strip()


@constraint("format:options", required=("options",),
            describe=lambda k: f"Answer with exactly one of the options: {k.get('options')}")
def check_options(response: str, *, options: str) -> CheckResult:
    opts = _option_list(options)
    got = _opt_norm(response)
    for o in opts:
        if got == _opt_norm(o):
            return True, f"the answer is the option {o!r}"
    return False, f"the answer must be exactly one of {_show(opts)} and nothing else; it is {response.strip()[:80]!r}"


_TEMPLATE = ("My Answer:", "My Conclusion:", "Future Outlook:")


@constraint("format:output_template",
            describe="Use the template 'My Answer: ... My Conclusion: ... Future Outlook: ...'")
def check_output_template(response: str) -> CheckResult:
    pos, spans = 0, []
    for label in _TEMPLATE:
        i = response.find(label, pos)
        if i < 0:
            return False, f"the label {label!r} is missing (in order: {', '.join(_TEMPLATE)})"
        spans.append(i)
        pos = i + len(label)
    if response[:spans[0]].strip():
        return False, "there is text before 'My Answer:'; the answer must follow the template exactly"
    ends = [*spans[1:], len(response)]
    for label, a, b in zip(_TEMPLATE, spans, ends, strict=True):
        content = response[a + len(label):b].strip()
        if not words(content) or re.fullmatch(r"\[\w+\]", content):
            return False, f"the part after {label!r} is empty or still the placeholder; fill it in"
    return True, "the answer follows the template My Answer / My Conclusion / Future Outlook"


@constraint("format:parentheses", describe="Nest brackets (), [], {} at least 5 levels deep")
def check_parentheses(response: str) -> CheckResult:
    depth = best = 0
    for ch in response:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
    if best < 5:
        return False, f"the deepest nesting of (), [] and {{}} is {best} levels; at least 5 are required"
    return True, f"brackets nested {best} levels deep"


@constraint("format:quote_unquote", describe="Follow every quoted phrase with an unquoted explanation")
def check_quote_unquote(response: str) -> CheckResult:
    quotes = list(re.finditer(r"\"[^\"\n]+\"|“[^”\n]+”", response))
    if not quotes:
        return False, "the answer has no quoted phrase to explain"
    for q, nxt in zip(quotes, [*quotes[1:], None], strict=True):
        after = response[q.end():nxt.start() if nxt else len(response)]
        if len(words(after)) < 2:
            return False, f"the quoted phrase {q.group(0)[:60]!r} is not followed by an unquoted explanation"
    return True, f"each of the {_plural(len(quotes), 'quoted phrase')} is followed by an unquoted explanation"


_DOUBLE_Q = "\"“”"
_SINGLE_Q = "'‘’"


def _quote_depth(text: str) -> int:
    stack: list[str] = []
    best = 0
    for i, ch in enumerate(text):
        if ch in _SINGLE_Q:
            prev_alpha = i > 0 and text[i - 1].isalnum()
            next_alpha = i + 1 < len(text) and text[i + 1].isalnum()
            if prev_alpha and next_alpha:
                continue  # an apostrophe (don't)
            if prev_alpha and ch != "‘" and not (stack and stack[-1] == "s"):
                continue  # a possessive (the dogs')
            kind = "s"
        elif ch in _DOUBLE_Q:
            kind = "d"
        else:
            continue
        if stack and stack[-1] == kind:
            stack.pop()
        else:
            stack.append(kind)
            best = max(best, len(stack))
    return best


@constraint("format:quotes", describe="Nest quotes at least 3 levels deep, alternating double and single quotes")
def check_quotes(response: str) -> CheckResult:
    d = _quote_depth(response)
    if d < 3:
        return False, (f"quotes are nested {d} level(s) deep; at least 3 levels alternating double and single "
                       "quotes are required")
    return True, f"quotes nested {d} levels deep, alternating double and single"


@constraint("format:sub-bullets", describe="Use bullet points '* ' each with at least one sub-bullet '- '")
def check_sub_bullets(response: str) -> CheckResult:
    bullets: list[int] = []
    for ln in response.splitlines():
        if re.match(r"^[ \t]*\*[ \t]+\S", ln):
            bullets.append(0)
        elif re.match(r"^[ \t]*-[ \t]+\S", ln) and bullets:
            bullets[-1] += 1
    if not bullets:
        return False, "no bullet points marked with '* ' were found"
    lacking = [i + 1 for i, n in enumerate(bullets) if n == 0]
    if lacking:
        return False, (f"bullet point(s) {_show(map(str, lacking))} of {len(bullets)} have no sub-bullet marked '- ' "
                       "under them")
    return True, f"all {_plural(len(bullets), 'bullet point')} have at least one '- ' sub-bullet"


def _sections(response: str) -> list[list[str]]:
    lines = response.strip().splitlines()
    if any(re.match(r"^\s*#{1,6}\s", ln) for ln in lines):
        out: list[list[str]] = [[]]
        for ln in lines:
            if re.match(r"^\s*#{1,6}\s", ln):
                out.append([])
            elif ln.strip():
                out[-1].append(ln)
        return [s for s in out if s]
    return [p.splitlines() for p in paragraphs_by_blank_lines(response)]


@constraint("format:thesis", describe="Begin each section with a thesis statement in HTML italics (<i>...</i>)")
def check_thesis(response: str) -> CheckResult:
    secs = _sections(response)
    if not secs:
        return False, "the answer is empty"
    bad = [i + 1 for i, s in enumerate(secs)
           if not re.match(r"^\s*<(i|em)>[^<]*\w[^<]*</\1>", s[0].strip(), re.I)]
    if bad:
        return False, (f"section(s) {_show(map(str, bad))} of {len(secs)} do not begin with a thesis in HTML italics "
                       "(<i>...</i> or <em>...</em>)")
    return True, f"all {_plural(len(secs), 'section')} begin with an italic thesis statement"


_MINOR = frozenset(_split(
    "a an the and but or nor for so yet as at by in of on to up via per vs off out with from into onto over upon "
    "than"))


@constraint("format:title_case", describe="Write the entire answer in title case (capitalise every major word)")
def check_title_case(response: str) -> CheckResult:
    bad = []
    for line in response.splitlines():
        ws = alpha_words(line)
        for j, w in enumerate(ws):
            if w[0].islower() and (j == 0 or w.lower() not in _MINOR):
                bad.append(w)
    if bad:
        return False, f"{_plural(len(bad), 'word')} should be capitalised, e.g. {_show(bad)}"
    if not alpha_words(response):
        return False, "the answer has no words"
    return True, "every major word is capitalised"
