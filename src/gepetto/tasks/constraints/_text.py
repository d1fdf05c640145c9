"""Text helpers the checkers share: words, sentences, paragraphs, keyword counting, count-and-compare results,
and the small formatting helpers used in `why` texts and descriptions (conventions: the package docstring)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from .registry import CheckResult

# a word character: a letter or digit, or a combining mark / Indic or Thai sign (Python's \w misses those)
_WCH = r"(?:[^\W_]|[\u0300-\u036F\u0900-\u0963\u0966-\u0DFF\u0E00-\u0EFF\u1AB0-\u1AFF\u1DC0-\u1DFF\u20D0-\u20FF])"
_WORD_RE = re.compile(rf"{_WCH}+(?:['’\-]{_WCH}+)*")
_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "st", "vs", "etc", "e.g", "i.e", "jr", "sr", "no", "fig", "approx", "inc",
    "ltd", "co", "mt", "p.s", "p.p.s", "a.m", "p.m", "u.s", "u.k", "ca", "cf", "al",
}
_SENT_END_RE = re.compile(r"[.!?…。！？]+[\"'”’)\]]*(?=\s|$)")


def words(text: str) -> list[str]:
    """The words of a text: runs of letters and digits (inner apostrophes and hyphens allowed)."""
    return _WORD_RE.findall(text or "")


def alpha_words(text: str) -> list[str]:
    """Words made of letters only (numbers and mixed tokens left out), for letter-pattern constraints."""
    out = []
    for w in words(text):
        letters = "".join(ch for ch in w if ch.isalpha())
        if letters and not any(ch.isdigit() for ch in w):
            out.append(letters)
    return out


def sentences(text: str) -> list[str]:
    """Split a text into sentences (see the package docstring); pieces with no word character are dropped."""
    out: list[str] = []
    for line in (text or "").splitlines():
        start = 0
        for m in _SENT_END_RE.finditer(line):
            before = line[start:m.start()]
            last = before.split()[-1].lower() if before.split() else ""
            last_core = last.strip("(\"'“‘*_")
            if m.group(0).startswith(".") and len(m.group(0).rstrip("\"'”’)]")) == 1 and (
                last_core in _ABBREVIATIONS or (len(last_core) == 1 and last_core.isalpha())
            ):
                continue  # "e.g." / "Mr." / an initial: not a sentence end
            piece = line[start:m.end()].strip()
            start = m.end()
            if _WORD_RE.search(piece):
                out.append(piece)
        tail = line[start:].strip()
        if _WORD_RE.search(tail):
            out.append(tail)
    return out


def paragraphs_by_blank_lines(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", (text or "").strip()) if p.strip()]


def _norm_space(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").strip()).lower()


def _strip_fences(text: str) -> str:
    t = (text or "").strip()
    m = re.fullmatch(r"```[\w-]*\s*\n?(.*?)\n?```", t, re.S)
    return m.group(1).strip() if m else t


def _count_word(text: str, keyword: str) -> int:
    kw = str(keyword).strip()
    if not kw:
        return 0
    pattern = r"\s+".join(re.escape(part) for part in kw.split())
    return len(re.findall(rf"(?<![^\W_]){pattern}(?![^\W_])", text or "", re.I))


def _first_word(text: str) -> str:
    ws = words(text)
    return ws[0].lower() if ws else ""


def _show(items: Iterable[str], limit: int = 5) -> str:
    items = list(items)
    shown = ", ".join(repr(x) for x in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


# relations: IFEval uses "less than" / "at least"; a few more are accepted for hand-written kwargs
def _compare(count: int, relation: str, n: int) -> bool:
    rel = str(relation).strip().lower()
    if rel == "less than":
        return count < n
    if rel == "at least":
        return count >= n
    if rel == "at most":
        return count <= n
    if rel == "more than":
        return count > n
    if rel in ("exactly", "equal to"):
        return count == n
    raise ValueError(f"unknown relation {relation!r}")


def _relation_text(relation: str, n: int, unit: str) -> str:
    return f"{str(relation).strip().lower()} {_plural(n, unit)}"


def _count_check(count: int, relation: str, n: int, unit: str, what: str = "the answer",
                 detail: str = "") -> CheckResult:
    ok = _compare(count, relation, n)
    extra = f" ({detail})" if detail else ""
    return ok, f"{what} has {_plural(count, unit)}{extra}; required: {_relation_text(relation, n, unit)}"


# used by more than one family: markdown bullets, keyword lists, Unicode scripts, whitespace tokens


def _bullets(response: str) -> list[str]:
    return re.findall(r"(?m)^[ \t]*(?:\*(?!\*)|-(?!-))[ \t]+\S.*$", response)


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def _script(ch: str) -> str:
    try:
        name = unicodedata.name(ch)
    except ValueError:
        return "OTHER"
    if name.startswith(("CJK", "HIRAGANA", "KATAKANA")):
        return "KANA" if name.startswith(("HIRAGANA", "KATAKANA")) else "CJK"
    for script in ("LATIN", "CYRILLIC", "ARABIC", "DEVANAGARI", "BENGALI", "GURMUKHI", "GUJARATI", "TAMIL",
                   "TELUGU", "KANNADA", "MALAYALAM", "THAI", "HANGUL", "GREEK", "HEBREW"):
        if name.startswith(script):
            return script
    return "OTHER"


def _split(text: str) -> list[str]:
    return text.split()


# for descriptions


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def _d_rel(kw: Mapping[str, Any], rel_key: str, n_key: str, unit: str) -> str:
    return _relation_text(kw.get(rel_key, "at least"), int(kw.get(n_key, 0)), unit)
