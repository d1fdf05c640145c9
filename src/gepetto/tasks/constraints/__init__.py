"""Verifiable-constraint checkers for the instruction-following tasks (IFEval and IFBench instruction ids).

Written for gepetto from the meaning of each constraint (the upstream verifier code is not used). Every
supported instruction id maps to a checker `check(response, **kwargs) -> (ok, why)`, where `why` says
concretely what was counted and what was required, and to a human sentence from `describe(id, kwargs)`.

Conventions (stated here because the benchmarks leave them open):
- words are runs of letters/digits (apostrophes and hyphens inside a word keep it one word);
- sentences end at `.`, `!`, `?` or `…` followed by a space, or at a line break (common abbreviations such as
  "e.g." and "Mr." and single-letter initials do not end a sentence);
- keyword matching is case-insensitive and on whole words;
- numeric kwargs given as floats (IFBench writes `5.0`) are treated as integers, and None-valued kwargs are dropped.

`UNSUPPORTED` lists the instruction ids with no checker (they need world knowledge or a part-of-speech tagger);
`check_all` reports them as not checked instead of guessing.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

CheckResult = tuple[bool, str]
Checker = Callable[..., CheckResult]

# ----------------------------------------------------------------------------------------------------------
# text helpers

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
    """Split a text into sentences (see module docstring); pieces with no word character are dropped."""
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


# ----------------------------------------------------------------------------------------------------------
# IFEval constraints


def _all_caps_words(text: str) -> list[str]:
    return [w for w in words(text) if sum(ch.isalpha() for ch in w) >= 2 and w.isupper()]


def check_capital_word_frequency(response: str, *, capital_frequency: int, capital_relation: str) -> CheckResult:
    caps = _all_caps_words(response)
    return _count_check(len(caps), capital_relation, int(capital_frequency), "word", "the answer",
                        f"in all capital letters: {_show(caps)}" if caps else "in all capital letters")


def check_english_capital(response: str) -> CheckResult:
    if not any(ch.isalpha() for ch in response):
        return False, "the answer has no letters at all"
    lower = [w for w in words(response) if any(ch.islower() for ch in w)]
    if lower:
        return False, f"{_plural(len(lower), 'word')} contain lowercase letters, e.g. {_show(lower)}"
    return True, "every letter is a capital letter"


def check_english_lowercase(response: str) -> CheckResult:
    if not any(ch.isalpha() for ch in response):
        return False, "the answer has no letters at all"
    upper = [w for w in words(response) if any(ch.isupper() for ch in w)]
    if upper:
        return False, f"{_plural(len(upper), 'word')} contain capital letters, e.g. {_show(upper)}"
    return True, "every letter is lowercase"


def check_repeat_prompt(response: str, *, prompt_to_repeat: str) -> CheckResult:
    want, got = _norm_space(prompt_to_repeat), _norm_space(response)
    if not got.startswith(want):
        common = 0
        for a, b in zip(want, got, strict=False):
            if a != b:
                break
            common += 1
        where = "at its very start" if common == 0 else f"after {common} matching characters"
        return False, (f"the answer does not begin with the request repeated word for word (it differs {where}); "
                       f"it must start with: {prompt_to_repeat.strip()[:150]!r}")
    if not words(got[len(want):]):
        return False, "the answer repeats the request but then gives no answer"
    return True, "the answer starts with the request repeated word for word, then answers it"


def check_two_responses(response: str) -> CheckResult:
    parts = [p.strip() for p in re.split(r"\*{6}", response)]
    if len(parts) != 2:
        n = response.count("******")
        return False, (f"the answer has {_plural(n, 'separator')} '******'; exactly one separator between two "
                       "responses is required")
    if not parts[0] or not parts[1]:
        return False, "one of the two responses around '******' is empty"
    if _norm_space(parts[0]) == _norm_space(parts[1]):
        return False, "the two responses are identical; they must be different"
    return True, "two different responses separated by '******'"


def check_number_placeholders(response: str, *, num_placeholders: int) -> CheckResult:
    found = re.findall(r"\[[^\[\]\n]*[^\s\[\]][^\[\]\n]*\]", response)
    return _count_check(len(found), "at least", int(num_placeholders), "placeholder", "the answer",
                        f"in square brackets: {_show(found)}" if found else "in square brackets")


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


_CONSTRAINED = ("My answer is yes.", "My answer is no.", "My answer is maybe.")


def check_constrained_response(response: str) -> CheckResult:
    low = response.lower()
    found = [p for p in _CONSTRAINED if p.lower() in low]
    if not found:
        return False, f"none of the phrases {_show(_CONSTRAINED)} appears in the answer"
    if len(found) > 1:
        return False, f"the answer contains several of the phrases ({_show(found)}); exactly one is allowed"
    return True, f"the answer contains {found[0]!r}"


def check_json_format(response: str) -> CheckResult:
    body = _strip_fences(response)
    if not body:
        return False, "the answer is empty, not JSON"
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        return False, f"the answer is not valid JSON ({exc.msg} at character {exc.pos}); the whole answer must be JSON"
    return True, "the whole answer is valid JSON"


def check_multiple_sections(response: str, *, section_spliter: str, num_sections: int) -> CheckResult:
    spl = str(section_spliter).strip()
    heads = re.findall(rf"(?im)^[ \t#*_>]*{re.escape(spl)}\s*(\d+)", response)
    return _count_check(len(heads), "at least", int(num_sections), "section", "the answer",
                        f"marked '{spl} X' at the start of a line")


def _bullets(response: str) -> list[str]:
    return re.findall(r"(?m)^[ \t]*(?:\*(?!\*)|-(?!-))[ \t]+\S.*$", response)


def check_number_bullet_lists(response: str, *, num_bullets: int) -> CheckResult:
    found = _bullets(response)
    return _count_check(len(found), "exactly", int(num_bullets), "markdown bullet point", "the answer",
                        "lines starting with '* ' or '- '")


_ITALIC_RE = re.compile(r"(?<!\*)\*(?![\s*])([^\n*]*?[^\s*])\*(?!\*)")
_BOLD_RE = re.compile(r"\*\*(?![\s*])([^\n*]*?[^\s*])\*\*")


def check_number_highlighted_sections(response: str, *, num_highlights: int) -> CheckResult:
    found = _ITALIC_RE.findall(response) + _BOLD_RE.findall(response)
    return _count_check(len(found), "at least", int(num_highlights), "highlighted section", "the answer",
                        f"written like *this*: {_show(found, 3)}" if found else "written like *this*")


def check_title(response: str) -> CheckResult:
    m = re.search(r"<<([^<>\n]*\S[^<>\n]*)>>", response)
    if not m:
        return False, "no title wrapped in double angular brackets, like <<my title>>, was found"
    return True, f"title <<{m.group(1).strip()}>> found"


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def check_keywords_existence(response: str, *, keywords: Sequence[str]) -> CheckResult:
    kws = _as_list(keywords)
    missing = [k for k in kws if _count_word(response, k) == 0]
    if missing:
        return False, f"missing keyword(s) {_show(missing)} (whole words, any case)"
    return True, f"all keywords present: {_show(kws)}"


def check_forbidden_words(response: str, *, forbidden_words: Sequence[str]) -> CheckResult:
    bad = [(w, _count_word(response, w)) for w in _as_list(forbidden_words)]
    bad = [(w, n) for w, n in bad if n]
    if bad:
        used = ", ".join(f"{w!r} ({_plural(n, 'time')})" for w, n in bad)
        return False, f"forbidden word(s) used: {used}"
    return True, "none of the forbidden words is used"


def check_keyword_frequency(response: str, *, keyword: str, frequency: int, relation: str) -> CheckResult:
    n = _count_word(response, keyword)
    return _compare(n, relation, int(frequency)), (
        f"the word {keyword!r} appears {_plural(n, 'time')}; "
        f"required: {_relation_text(relation, int(frequency), 'time')}")


def check_letter_frequency(response: str, *, letter: str, let_frequency: int, let_relation: str) -> CheckResult:
    ch = str(letter).strip().lower()
    n = response.lower().count(ch)
    ok = _compare(n, let_relation, int(let_frequency))
    return ok, (f"the letter {ch!r} appears {_plural(n, 'time')} (any case); "
                f"required: {_relation_text(let_relation, int(let_frequency), 'time')}")


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


def check_number_paragraphs(response: str, *, num_paragraphs: int) -> CheckResult:
    parts = [p.strip() for p in _divider_parts(response)]
    n = int(num_paragraphs)
    if any(not p for p in parts):
        return False, "there is an empty paragraph around a '***' divider (or a divider at the very start or end)"
    if len(parts) != n:
        return False, (f"the answer has {_plural(len(parts), 'paragraph')} separated by '***' divider lines; "
                       f"exactly {n} are required")
    return True, f"{_plural(n, 'paragraph')} separated by '***' divider lines"


def check_number_sentences(response: str, *, num_sentences: int, relation: str) -> CheckResult:
    n = len(sentences(response))
    return _compare(n, relation, int(num_sentences)), (
        f"the answer has {_plural(n, 'sentence')}; "
        f"required: {_relation_text(relation, int(num_sentences), 'sentence')}")


def check_number_words(response: str, *, num_words: int, relation: str) -> CheckResult:
    n = len(words(response))
    return _compare(n, relation, int(num_words)), (
        f"the answer has {_plural(n, 'word')}; required: {_relation_text(relation, int(num_words), 'word')}")


def check_no_comma(response: str) -> CheckResult:
    n = response.count(",") + response.count("，")
    if n:
        return False, f"the answer contains {_plural(n, 'comma')}; none are allowed"
    return True, "no commas"


def check_end_checker(response: str, *, end_phrase: str) -> CheckResult:
    want = _norm_space(end_phrase)
    got = _norm_space(response)
    trimmed = got.rstrip("\"'*_”’ ") if not want.endswith(("\"", "'", "*", "_")) else got
    if got.endswith(want) or trimmed.endswith(want):
        return True, f"the answer ends with {end_phrase!r}"
    tail = response.strip()[-60:]
    return False, (f"the answer must end with the exact phrase {end_phrase!r} and nothing after it; "
                   f"it ends with {tail!r}")


def check_quotation(response: str) -> CheckResult:
    t = response.strip()
    if len(t) >= 2 and t[0] in "\"“" and t[-1] in "\"”":
        return True, "the whole answer is wrapped in double quotation marks"
    return False, f"the answer must start and end with a double quotation mark; it starts {t[:1]!r} and ends {t[-1:]!r}"


# --- language identification (own heuristic: Unicode scripts, then common function words for Latin script)

LANGUAGE_NAMES = {
    "en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese",
    "nl": "Dutch", "fi": "Finnish", "sw": "Swahili", "vi": "Vietnamese", "tr": "Turkish", "pl": "Polish",
    "id": "Indonesian", "ru": "Russian", "bg": "Bulgarian", "uk": "Ukrainian", "ar": "Arabic", "fa": "Persian",
    "ur": "Urdu", "hi": "Hindi", "mr": "Marathi", "ne": "Nepali", "bn": "Bengali", "pa": "Punjabi",
    "gu": "Gujarati", "ta": "Tamil", "te": "Telugu", "kn": "Kannada", "ml": "Malayalam", "th": "Thai",
    "ko": "Korean", "ja": "Japanese", "zh": "Chinese", "el": "Greek", "he": "Hebrew",
}

_SCRIPT_OF = {
    "ru": "CYRILLIC", "bg": "CYRILLIC", "uk": "CYRILLIC", "ar": "ARABIC", "fa": "ARABIC", "ur": "ARABIC",
    "hi": "DEVANAGARI", "mr": "DEVANAGARI", "ne": "DEVANAGARI", "bn": "BENGALI", "pa": "GURMUKHI",
    "gu": "GUJARATI", "ta": "TAMIL", "te": "TELUGU", "kn": "KANNADA", "ml": "MALAYALAM", "th": "THAI",
    "ko": "HANGUL", "ja": "CJK", "zh": "CJK", "el": "GREEK", "he": "HEBREW",
}

_FUNCTION_WORDS = {
    "en": "the and of to is in that it for was on are with as this be not have you they at by from",
    "de": "der die und das ist nicht ein eine zu den mit sich des auf für im dem auch es sie ich wir",
    "fr": "le la les et des est une un du en que qui dans pour pas sur au avec il elle nous vous ce",
    "es": "el la los las y de que en es un una por con para no se del al lo como más pero su",
    "it": "il la di che e è un una per non con del della sono le gli si anche ma come nel alla",
    "pt": "o a os as e de que em um uma para com não do da no na se por mais ao é são",
    "nl": "de het een en van is dat niet op te zijn voor met die ik je er maar ook als",
    "fi": "ja on ei se että oli hän mutta kun niin myös ovat tai joka ole kuin mitä jos tämä",
    "sw": "na ya wa kwa ni la za katika hii kwamba lakini kama si yake mimi wewe huu ndani cha",
    "vi": "và của là không có các những được trong cho một người với này đã khi để đến",
    "tr": "ve bir bu da de için ile çok ne daha gibi olarak ama en o var değil",
    "pl": "i w nie na że się z do to jest jak ale o co po tak dla od",
    "id": "dan yang di itu dengan untuk tidak ini dari dalam akan pada juga ke ada",
}
_FW_SETS = {lang: set(ws.split()) for lang, ws in _FUNCTION_WORDS.items()}


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


def _script_shares(text: str) -> Counter:
    counts = Counter(_script(ch) for ch in text if ch.isalpha())
    return counts


def _latin_guess(text: str) -> tuple[str, dict[str, int]]:
    toks = [w.lower() for w in words(text)]
    scores = {lang: sum(1 for t in toks if t in fw) for lang, fw in _FW_SETS.items()}
    best = max(scores, key=lambda k: scores[k])
    return best, scores


_MARKERS = {  # distinguishing words within a shared script
    "hi": {"है", "हैं", "और", "के", "की", "में", "से", "यह", "नहीं", "था"},
    "mr": {"आहे", "आणि", "आहेत", "हे", "च्या", "मध्ये", "नाही", "होते", "ही", "या"},
    "ne": {"छ", "छन्", "र", "को", "मा", "हो", "पनि", "गर्न", "थियो", "यो"},
    "ru": {"что", "это", "этот", "который", "которая", "был", "была", "были", "так", "как", "если", "он", "она"},
    "bg": {"че", "това", "тази", "този", "която", "който", "ще", "са", "бяха", "беше", "като", "ако", "е"},
}
_FAMILIES = (("hi", "mr", "ne"), ("ru", "bg"))


def check_response_language(response: str, *, language: str) -> CheckResult:
    lang = str(language).strip().lower()
    name = LANGUAGE_NAMES.get(lang, lang)
    shares = _script_shares(response)
    total = sum(shares.values())
    if total == 0:
        return False, f"the answer has no letters, so it is not in {name}"
    if lang in _SCRIPT_OF:
        script = _SCRIPT_OF[lang]
        have = shares.get(script, 0) + (shares.get("KANA", 0) if lang == "ja" else 0)
        if lang == "ja" and shares.get("KANA", 0) == 0:
            have = 0
        frac = have / total
        if frac < 0.7:
            return False, (f"only {frac:.0%} of the letters are in the {script.title()} script used by {name}; "
                           f"the answer must be written entirely in {name}")
        if lang == "zh" and shares.get("KANA", 0) > 0.05 * total:
            return False, "the answer contains Japanese kana; it must be written in Chinese"
        toks = set(re.split(r"[\s\u0964\u0965,.!?;:\"'()\[\]]+", response))
        toks = {t.lower() for t in toks}
        for family in _FAMILIES:
            if lang in family:
                hits = {k: len(toks & _MARKERS[k]) for k in family}
                other = max((k for k in hits if k != lang), key=lambda k: hits[k])
                if hits[other] >= 2 and hits[lang] * 2 < hits[other]:
                    return False, f"the answer looks like {LANGUAGE_NAMES[other]}, not {name}"
        if lang in ("ru", "bg"):
            text = response.lower()
            ru_hits = sum(text.count(c) for c in "ыэё")
            bg_hits = text.count("ъ")
            if lang == "bg" and ru_hits > 2:
                return False, "the answer uses the letters ы/э/ё, which Russian has and Bulgarian does not"
            if lang == "ru" and bg_hits >= 2 and ru_hits == 0:
                return False, "the answer looks like Bulgarian (many ъ, no ы/э), not Russian"
        return True, f"{frac:.0%} of the letters are in the {script.title()} script of {name}"
    # Latin-script languages
    frac = shares.get("LATIN", 0) / total
    if frac < 0.7:
        return False, f"only {frac:.0%} of the letters are Latin letters; the answer must be written in {name}"
    if lang not in _FW_SETS:
        return True, f"{frac:.0%} of the letters are Latin letters (no finer check for {name})"
    best, scores = _latin_guess(response)
    if scores[best] == 0:
        return len(words(response)) < 5, f"too few common {name} words to tell the language"
    if best != lang and scores[best] > scores[lang] * 1.2:
        return False, (f"the answer reads as {LANGUAGE_NAMES.get(best, best)} ({scores[best]} common "
                       f"{LANGUAGE_NAMES.get(best, best)} words vs {scores[lang]} {name} words); it must be in {name}")
    return True, f"the answer reads as {name}"


# ----------------------------------------------------------------------------------------------------------
# IFBench constraints

def _split(text: str) -> list[str]:
    return text.split()


_COORDINATING = ("for", "and", "nor", "but", "or", "yet", "so")
_PRONOUNS = frozenset(_split(
    "i me my mine myself you your yours yourself yourselves he him his himself she her hers herself it its itself "
    "we us our ours ourselves they them their theirs themselves who whom whose whoever whomever anyone anybody "
    "anything everyone everybody everything someone somebody something nobody nothing none"))
_STOP_WORDS = frozenset(_split(
    "a about above after again against all am an and any are as at be because been before being below between both "
    "but by can could did do does doing down during each few for from further had has have having he her here hers "
    "herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on "
    "once only or other our ours ourselves out over own same she should so some such than that the their theirs "
    "them themselves then there these they this those through to too under until up very was we were what when "
    "where which while who whom why will with would you your yours yourself yourselves"))
PERSON_NAMES = tuple(_split(
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte Alexander Amelia Benjamin "
    "Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen Abigail Gabriel Ella Jacob Scarlett Nathan Victoria "
    "Elijah Layla Nicholas Audrey David Hannah Christopher Penelope Thomas Nora Andrew Aria Joseph Claire Ryan "
    "Stella Jonathan"))
_EMOJI_CLASS = "\U0001F000-\U0001FAFF\u2600-\u27BF\u2300-\u23FF\u2B00-\u2BFF\u3030\u303D\u3297\u3299\uFE0F\u200D"
_EMOJI_RE = re.compile(f"[{_EMOJI_CLASS}]")


def check_conjunctions(response: str, *, small_n: int) -> CheckResult:
    toks = {w.lower() for w in words(response)}
    used = [c for c in _COORDINATING if c in toks]
    return _count_check(len(used), "at least", int(small_n), "different coordinating conjunction", "the answer",
                        f"used: {', '.join(used) or 'none'}; the seven are for, and, nor, but, or, yet, so")


_ORDINAL_TIMES = {1: "once", 2: "twice", 3: "three times", 4: "four times", 5: "five times", 7: "seven times"}
_MULTI_COUNTS = {"keyword1": 1, "keyword2": 2, "keyword3": 3, "keyword4": 5, "keyword5": 7}


def check_keywords_multiple(response: str, **kw: str) -> CheckResult:
    problems, seen = [], []
    for key, want in _MULTI_COUNTS.items():
        if key not in kw:
            continue
        n = _count_word(response, kw[key])
        seen.append(f"{kw[key]!r} {n}x")
        if n != want:
            problems.append(f"{kw[key]!r} appears {_plural(n, 'time')} but must appear exactly {_plural(want, 'time')}")
    if problems:
        return False, "; ".join(problems)
    return True, "every keyword appears the required number of times (" + ", ".join(seen) + ")"


_NUMBER_RE = re.compile(r"(?<![\w.])[-+]?\d+(?:[,.]\d+)*(?:%)?(?![\w])")


def check_numbers(response: str, *, N: int) -> CheckResult:
    found = [m.group(0) for m in _NUMBER_RE.finditer(response)]
    return _count_check(len(found), "exactly", int(N), "number", "the answer",
                        f"written in digits: {_show(found)}" if found else "written in digits")


def check_person_names(response: str, *, N: int) -> CheckResult:
    used = [n for n in PERSON_NAMES if re.search(rf"(?<![^\W_]){n}(?![^\W_])", response)]
    return _count_check(len(used), "at least", int(N), "different name", "the answer",
                        f"from the given list: {_show(used)}" if used else "from the given list")


def check_pronouns(response: str, *, N: int) -> CheckResult:
    n = sum(1 for w in words(response) if w.lower() in _PRONOUNS)
    return _count_check(n, "at least", int(N), "pronoun", "the answer", "personal, possessive, reflexive, who/whom/"
                        "whose and indefinite pronouns such as someone are counted")


_PUNCTUATION_MARKS = {
    "period": ".", "comma": ",", "question mark": "?", "exclamation mark": "!", "colon": ":", "semicolon": ";",
    "apostrophe": "'", "quotation mark": '"', "parenthesis": "(", "hyphen or dash": "-",
}


def check_punctuation(response: str) -> CheckResult:
    t = response.replace("’", "'").replace("“", '"').replace("”", '"').replace("—", "-").replace("–", "-")
    missing = [name for name, mark in _PUNCTUATION_MARKS.items() if mark not in t]
    if "?!" not in t and "‽" not in t:
        missing.append("interrobang (?! or ‽)")
    if missing:
        return False, "missing punctuation: " + ", ".join(missing)
    return True, "every standard punctuation mark, including the interrobang, is used"


def check_unique_word_count(response: str, *, N: int) -> CheckResult:
    n = len({w.lower() for w in words(response)})
    return _count_check(n, "at least", int(N), "unique word", "the answer")


def check_word_count_range(response: str, *, min_words: int, max_words: int) -> CheckResult:
    n = len(words(response))
    ok = int(min_words) <= n <= int(max_words)
    return ok, f"the answer has {_plural(n, 'word')}; between {int(min_words)} and {int(max_words)} are required"


def _is_japanese(token: str) -> bool:
    return any(_script(ch) in ("KANA", "CJK") for ch in token)


def check_words_japanese(response: str, *, N: int) -> CheckResult:
    n = int(N)
    toks = response.split()
    if len(toks) < n:
        return False, f"the answer has only {_plural(len(toks), 'word')}, so it has no {n}th word to write in Japanese"
    bad = [(i, toks[i - 1]) for i in range(n, len(toks) + 1, n) if not _is_japanese(toks[i - 1])]
    if bad:
        shown = ", ".join(f"word {i} {t!r}" for i, t in bad[:4])
        return False, f"{_plural(len(bad), 'word')} at positions that must be Japanese are not: {shown}"
    return True, f"every {n}th word (counting whitespace-separated words) is Japanese"


def _reads_forward(text: str) -> bool:
    t = text.strip()
    return bool(t) and t[0].isupper() and t[-1] in ".!?"


def check_character_reverse(response: str) -> CheckResult:
    t = response.strip()
    if not words(t):
        return False, "the answer is empty"
    if _reads_forward(t):
        return False, "the answer reads normally (capital first, full stop last); it must be reversed letter by letter"
    if not _reads_forward(t[::-1]):
        return False, ("read backwards letter by letter the answer should be a normal sentence (starting with a "
                       "capital letter and ending with . ! or ?), but it is not")
    return True, f"reversed letter by letter the answer reads: {t[::-1][:80]!r}"


def check_word_reverse(response: str) -> CheckResult:
    toks = response.split()
    if not toks:
        return False, "the answer is empty"
    if _reads_forward(" ".join(toks)):
        return False, "the answer reads normally; its words must be in reverse order"
    back = " ".join(reversed(toks))
    if not _reads_forward(back):
        return False, ("read backwards word by word the answer should be a normal sentence (first word "
                       "capitalised, last word ending with . ! or ?), but it is not")
    if any(tok != tok[::-1] and _reads_forward(tok[::-1]) and len(tok) > 3 for tok in toks[:1]):
        return False, "the letters of the words are reversed too; only the word order must be reversed"
    return True, f"reversed word by word the answer reads: {back[:80]!r}"


def _csv_rows(response: str) -> list[str]:
    body = _strip_fences(response)
    return [ln for ln in body.splitlines() if ln.strip()]


def _check_csv(response: str, *, columns: list[str], rows: int, delimiter: str, quote_all: bool,
               special: bool) -> CheckResult:
    import csv
    import io

    lines = _csv_rows(response)
    if not lines:
        return False, "the answer contains no CSV lines"
    name = "tab" if delimiter == "\t" else "comma"
    parsed = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter))
    header = [h.strip() for h in parsed[0]]
    if header != columns:
        return False, (f"the first line must be the header {delimiter.join(columns)!r} ({name}-delimited); "
                       f"got {lines[0][:100]!r}")
    data = parsed[1:]
    if len(data) != rows:
        return False, f"the answer has {_plural(len(data), 'data row')} after the header; exactly {rows} are required"
    bad = [i + 2 for i, r in enumerate(data) if len(r) != len(columns)]
    if bad:
        return False, f"line(s) {_show(map(str, bad))} do not have {len(columns)} {name}-separated fields"
    if quote_all:
        for i, ln in enumerate(lines):
            fields = ln.split(delimiter)
            if not all(len(f.strip()) >= 2 and f.strip()[0] == '"' and f.strip()[-1] == '"' for f in fields):
                return False, f"line {i + 1} has a field not enclosed in double quotes: {ln[:100]!r}"
    if special:
        quoted = re.findall(r'"([^"]*)"', "\n".join(lines[1:]))
        if not any(re.search(r"[^\w\s.]", q) for q in quoted):
            return False, "no field contains a special character (such as & , / ' or -) enclosed in double quotes"
    return True, f"a {name}-delimited CSV with the header and {rows} data rows"


def check_csv_city(response: str) -> CheckResult:
    return _check_csv(response, columns=["ID", "Country", "City", "Year", "Count"], rows=7, delimiter=",",
                      quote_all=False, special=False)


def check_csv_quotes(response: str) -> CheckResult:
    return _check_csv(response, columns=["StudentID", "Subject", "Grade", "Semester", "Score"], rows=3,
                      delimiter="\t", quote_all=True, special=False)


def check_csv_special_character(response: str) -> CheckResult:
    return _check_csv(response, columns=["ProductID", "Category", "Brand", "Price", "Stock"], rows=14,
                      delimiter=",", quote_all=False, special=True)


def check_date_format_list(response: str) -> CheckResult:
    import datetime as dt

    items = [x.strip() for x in _strip_fences(response).strip().rstrip(".").split(",")]
    if len(items) < 2:
        return False, "the answer must be a comma-separated list of several dates (YYYY-MM-DD) and nothing else"
    bad = []
    for x in items:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", x):
            bad.append(x)
            continue
        try:
            dt.date.fromisoformat(x)
        except ValueError:
            bad.append(x)
    if bad:
        return False, f"these items are not dates in the form YYYY-MM-DD: {_show(bad)} (no explanation allowed)"
    return True, f"{len(items)} comma-separated dates, all YYYY-MM-DD (the dates themselves are not verified)"


_MCQ_OPTION_RE = re.compile(r"(?m)^[ \t]*(?:[-*][ \t]+)?\(?[A-Ea-e1-5][).:][ \t]+\S")


def check_mcq_count_length(response: str) -> CheckResult:
    starts = [m.start() for m in re.finditer(r"(?m)^[ \t#*]*Question\b", response)]
    if len(starts) != 4:
        return False, (f"the answer has {_plural(len(starts), 'line')} starting with 'Question'; "
                       "exactly 4 questions are required")
    blocks = [response[a:b] for a, b in zip(starts, [*starts[1:], len(response)], strict=True)]
    lengths = []
    for i, block in enumerate(blocks, 1):
        lines = block.splitlines()
        opts = len(_MCQ_OPTION_RE.findall("\n".join(lines[1:])))
        if opts != 5:
            return False, f"question {i} has {_plural(opts, 'option')} (lines like 'A) ...'); exactly 5 are required"
        lengths.append(len(lines[0].strip()))
    if any(b <= a for a, b in pairwise(lengths)):
        return False, f"the question lines must get longer each time; their lengths in characters are {lengths}"
    if response[starts[-1]:].strip().count("\n") > 6:
        return False, "there is extra text after the last question's options; no explanation is allowed"
    return True, f"4 questions with 5 options each, getting longer ({lengths} characters)"


def check_multiples(response: str) -> CheckResult:
    nums = [int(x) for x in re.findall(r"\d+", response)]
    want = [14, 21, 28, 35, 42, 49]
    if nums != want:
        return False, f"the numbers printed are {nums[:12]}; exactly {want} (multiples of 7 from 10 to 50) are required"
    return True, "prints exactly 14, 21, 28, 35, 42, 49"


def _list_item(line: str) -> str:
    return re.sub(r"^[\s*\-•]*(?:\d+[.)]\s*)?", "", line).strip()


def check_reverse_newline(response: str) -> CheckResult:
    items = [_list_item(ln) for ln in response.splitlines() if _list_item(ln)]
    if len(items) < 40:
        return False, f"the answer lists {_plural(len(items), 'line')}; Africa has 54 countries, one per line"
    long = [x for x in items if len(x.split()) > 6]
    if long:
        return False, f"some lines are not just a country name: {_show(long, 2)}"
    keys = [unicodedata.normalize("NFKD", x).encode("ascii", "ignore").decode().lower() for x in items]
    for i, (a, b) in enumerate(pairwise(keys), 1):
        if b > a:
            return False, f"not in reverse alphabetical order: {items[i - 1]!r} comes before {items[i]!r}"
    return True, f"{len(items)} lines in reverse alphabetical order (the country names themselves are not verified)"


def check_sentence_alphabet(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) != 26:
        return False, f"the answer has {_plural(len(sents), 'sentence')}; exactly 26 are required"
    for i, s in enumerate(sents):
        letter = chr(ord("a") + i)
        first = _first_word(s)
        if not first.startswith(letter):
            return False, f"sentence {i + 1} starts with {first!r}; it must start with the letter {letter.upper()}"
    return True, "26 sentences whose first words start with A to Z in order"


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


def check_emoji(response: str) -> CheckResult:
    sents = _emoji_sentences(response)
    if not sents:
        return False, "the answer has no sentences"
    bad = [s for s in sents if not _EMOJI_RE.search(s.rstrip(".!?… \"'”’)")[-1:] or "")]
    if bad:
        return False, f"{_plural(len(bad), 'sentence')} of {len(sents)} do not end with an emoji, e.g. {_show(bad, 2)}"
    return True, f"all {_plural(len(sents), 'sentence')} end with an emoji"


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


def check_newline(response: str) -> CheckResult:
    lines = [ln.strip() for ln in response.strip().splitlines() if ln.strip()]
    if not lines:
        return False, "the answer is empty"
    bad = [ln for ln in lines if len(ln.split()) > 1]
    if bad:
        return False, (f"{_plural(len(bad), 'line')} hold more than one word, e.g. {_show(bad, 2)}; "
                       "write each word on its own line")
    return True, f"{_plural(len(lines), 'word')}, each on its own line"


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


def check_options(response: str, *, options: str) -> CheckResult:
    opts = _option_list(options)
    got = _opt_norm(response)
    for o in opts:
        if got == _opt_norm(o):
            return True, f"the answer is the option {o!r}"
    return False, f"the answer must be exactly one of {_show(opts)} and nothing else; it is {response.strip()[:80]!r}"


_TEMPLATE = ("My Answer:", "My Conclusion:", "Future Outlook:")


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


def check_quotes(response: str) -> CheckResult:
    d = _quote_depth(response)
    if d < 3:
        return False, (f"quotes are nested {d} level(s) deep; at least 3 levels alternating double and single "
                       "quotes are required")
    return True, f"quotes nested {d} levels deep, alternating double and single"


def check_quote_unquote(response: str) -> CheckResult:
    quotes = list(re.finditer(r"\"[^\"\n]+\"|“[^”\n]+”", response))
    if not quotes:
        return False, "the answer has no quoted phrase to explain"
    for q, nxt in zip(quotes, [*quotes[1:], None], strict=True):
        after = response[q.end():nxt.start() if nxt else len(response)]
        if len(words(after)) < 2:
            return False, f"the quoted phrase {q.group(0)[:60]!r} is not followed by an unquoted explanation"
    return True, f"each of the {_plural(len(quotes), 'quoted phrase')} is followed by an unquoted explanation"


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


def _trigrams(text: str) -> set[tuple[str, ...]]:
    ws = [w.lower() for w in words(text)]
    return {tuple(ws[i:i + 3]) for i in range(len(ws) - 2)}


def check_overlap(response: str, *, reference_text: str, percentage: float) -> CheckResult:
    ref = _trigrams(reference_text)
    if not ref:
        return False, "the reference text has no trigrams"
    share = 100.0 * len(ref & _trigrams(response)) / len(ref)
    target = float(percentage)
    ok = abs(share - target) <= 2.0
    return ok, (f"{share:.1f}% of the reference text's word trigrams appear in the answer; "
                f"{target:g}% (±2 points) is required")


def _sentence_kinds(response: str) -> Counter:
    kinds: Counter = Counter()
    for s in sentences(response):
        end = s.rstrip("\"'”’)]*_ ")
        if end.endswith("?") or end.endswith("?!"):
            kinds["interrogative"] += 1
        elif end.endswith("!"):
            kinds["exclamatory"] += 1
        else:
            kinds["declarative"] += 1
    return kinds


def check_sentence_balance(response: str) -> CheckResult:
    k = _sentence_kinds(response)
    counts = {t: k.get(t, 0) for t in ("declarative", "interrogative", "exclamatory")}
    desc = ", ".join(f"{v} {t}" for t, v in counts.items())
    if min(counts.values()) == 0 or max(counts.values()) - min(counts.values()) > 1:
        return False, f"the answer has {desc}; all three kinds are required, with counts differing by at most 1"
    return True, f"balanced: {desc}"


def check_sentence_type(response: str) -> CheckResult:
    k = _sentence_kinds(response)
    d, q = k.get("declarative", 0), k.get("interrogative", 0)
    if q == 0 or d != 2 * q:
        return False, f"the answer has {d} declarative and {q} interrogative sentences; the ratio must be exactly 2:1"
    return True, f"{d} declarative and {q} interrogative sentences (2:1)"


def check_sentence_words(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) != 3:
        return False, f"the answer has {_plural(len(sents), 'sentence')}; exactly 3 are required"
    lens = [len(s.strip()) for s in sents]
    if len(set(lens)) != 1:
        return False, f"the sentences have {lens} characters (spaces and punctuation included); they must be equal"
    ws = [w.lower() for w in words(response)]
    dup = sorted({w for w in ws if ws.count(w) > 1})
    if dup:
        return False, f"some words are used more than once: {_show(dup)}; all words must be different"
    return True, f"3 sentences of {lens[0]} characters with no repeated word"


def check_stop_words(response: str, *, percentage: float) -> CheckResult:
    ws = [w.lower() for w in words(response)]
    if not ws:
        return False, "the answer has no words"
    share = 100.0 * sum(1 for w in ws if w in _STOP_WORDS) / len(ws)
    ok = share <= float(percentage)
    return ok, f"stop words are {share:.1f}% of the {len(ws)} words; at most {float(percentage):g}% is allowed"


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


def check_repeat_simple(response: str) -> CheckResult:
    if _norm_space(response).strip("\"' ") == _norm_space(_REPEAT_SIMPLE):
        return True, "the answer is exactly the sentence asked for"
    return False, f"the answer must be exactly {_REPEAT_SIMPLE!r} and nothing else"


def check_repeat_span(response: str, *, prompt_to_repeat: str, n_start: int, n_end: int) -> CheckResult:
    toks = str(prompt_to_repeat).split()
    a, b = int(n_start), int(n_end)
    zero = " ".join(toks[a:b + 1])
    one = " ".join(toks[max(a - 1, 0):b])
    got = _norm_space(response).strip("\"'")
    if got in (_norm_space(zero), _norm_space(one)):
        return True, f"the answer is the span of words {a} to {b}"
    return False, f"the answer must be exactly words {a} to {b} of the request: {zero!r} (counting from 0)"


def _initial_run(ws: list[str]) -> int:
    best = run = 0
    prev = ""
    for w in ws:
        first = w[0].lower()
        run = run + 1 if first == prev else 1
        prev = first
        best = max(best, run)
    return best


def check_alliteration_increment(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed, each with a longer run of alliterative words"
    runs = [_initial_run(alpha_words(s)) for s in sents]
    for i, (a, b) in enumerate(pairwise(runs), 2):
        if b <= a:
            return False, (f"sentence {i} has a longest run of {b} consecutive words starting with the same letter, "
                           f"not more than sentence {i - 1} ({a}); runs per sentence: {runs}")
    return True, f"alliterative runs grow sentence by sentence: {runs}"


def check_sentence_increment(response: str, *, small_n: int) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed"
    counts = [len(words(s)) for s in sents]
    step = int(small_n)
    for i, (a, b) in enumerate(pairwise(counts), 2):
        if b - a != step:
            return False, (f"sentence {i} has {b} words and sentence {i - 1} has {a}; each sentence needs exactly "
                           f"{step} more words than the one before (word counts: {counts[:10]})")
    return True, f"word counts grow by {step}: {counts}"


def check_sentence_keyword(response: str, *, word: str, N: int) -> CheckResult:
    sents = sentences(response)
    n = int(N)
    if len(sents) < n:
        return False, f"the answer has only {_plural(len(sents), 'sentence')}; the keyword must be in sentence {n}"
    if _count_word(sents[n - 1], word) == 0:
        return False, f"sentence {n} ({sents[n - 1][:80]!r}) does not contain the word {word!r}"
    return True, f"sentence {n} contains {word!r}"


def check_words_alphabet(response: str) -> CheckResult:
    ws = alpha_words(response)
    if len(ws) < 2:
        return False, "the answer needs several words"
    for i, (a, b) in enumerate(pairwise(ws), 2):
        want = chr((ord(a[0].lower()) - ord("a") + 1) % 26 + ord("a")) if "a" <= a[0].lower() <= "z" else None
        if want is None or b[0].lower() != want:
            return False, (f"word {i} {b!r} follows {a!r} but must start with {want.upper() if want else '?'}; "
                           "each word must start with the next letter of the alphabet")
    return True, f"{len(ws)} words follow the alphabet letter by letter"


_VOWELS = set("aeiou")


def _has_cluster(word: str) -> bool:
    w = word.lower()
    return any(a.isalpha() and b.isalpha() and a not in _VOWELS and b not in _VOWELS for a, b in pairwise(w))


def check_consonants(response: str) -> CheckResult:
    ws = alpha_words(response)
    if not ws:
        return False, "the answer has no words"
    bad = [w for w in ws if not _has_cluster(w)]
    if bad:
        return False, f"{_plural(len(bad), 'word')} have no two consonants in a row, e.g. {_show(bad)}"
    return True, "every word has a consonant cluster"


def check_keywords_specific_position(response: str, *, keyword: str, n: int, m: int) -> CheckResult:
    sents = sentences(response)
    si, wi = int(n), int(m)
    if len(sents) < si:
        return False, (f"the answer has only {_plural(len(sents), 'sentence')}; {keyword!r} must be word {wi} "
                       f"of sentence {si}")
    ws = words(sents[si - 1])
    if len(ws) < wi or ws[wi - 1].lower() != str(keyword).lower():
        got = ws[wi - 1] if len(ws) >= wi else f"nothing (the sentence has {len(ws)} words)"
        return False, f"word {wi} of sentence {si} is {got!r}; it must be {keyword!r}"
    return True, f"{keyword!r} is word {wi} of sentence {si}"


def check_last_first(response: str) -> CheckResult:
    sents = sentences(response)
    if len(sents) < 2:
        return False, "at least two sentences are needed"
    for i, (a, b) in enumerate(pairwise(sents), 2):
        wa, wb = words(a), words(b)
        if not wa or not wb or wa[-1].lower() != wb[0].lower():
            return False, (f"sentence {i} starts with {wb[0] if wb else ''!r} but sentence {i - 1} ends with "
                           f"{wa[-1] if wa else ''!r}; each sentence must start with the last word of the previous one")
    return True, f"all {len(sents)} sentences chain last word to first word"


def check_no_consecutive(response: str) -> CheckResult:
    ws = alpha_words(response)
    pairs = [(a, b) for a, b in pairwise(ws) if a[0].lower() == b[0].lower()]
    if not ws:
        return False, "the answer has no words"
    if pairs:
        shown = ", ".join(f"'{a} {b}'" for a, b in pairs[:4])
        return False, f"{_plural(len(pairs), 'pair')} of consecutive words share a first letter: {shown}"
    return True, "no two consecutive words share a first letter"


def syllables(word: str) -> int:
    """A rough English syllable count: vowel groups, minus a silent final e."""
    w = word.lower()
    groups = re.findall(r"[aeiouy]+", w)
    n = len(groups)
    if w.endswith("e") and not w.endswith(("le", "ee", "ye")) and n > 1:
        n -= 1
    return max(n, 1)


def check_odd_even_syllables(response: str) -> CheckResult:
    ws = alpha_words(response)
    if len(ws) < 2:
        return False, "the answer needs several words"
    parities = [syllables(w) % 2 for w in ws]
    for i in range(1, len(ws)):
        if parities[i] == parities[i - 1]:
            return False, (f"{ws[i - 1]!r} ({syllables(ws[i - 1])} syllables) and {ws[i]!r} ({syllables(ws[i])}) "
                           "are both odd or both even; odd and even syllable counts must alternate")
    return True, f"{len(ws)} words alternate odd and even syllable counts (estimated)"


def check_palindrome(response: str) -> CheckResult:
    found = sorted({w.lower() for w in alpha_words(response) if len(w) >= 5 and w.lower() == w.lower()[::-1]})
    return _count_check(len(found), "at least", 10, "different palindrome", "the answer",
                        f"of 5+ letters: {_show(found)}" if found else "of 5+ letters")


def check_paragraph_last_first(response: str) -> CheckResult:
    paras = [p for p in response.strip().splitlines() if words(p)]
    if not paras:
        return False, "the answer is empty"
    for i, p in enumerate(paras, 1):
        ws = words(p)
        if ws[0].lower() != ws[-1].lower():
            return False, f"paragraph {i} starts with {ws[0]!r} but ends with {ws[-1]!r}; they must be the same word"
    return True, f"all {_plural(len(paras), 'paragraph')} end with the word they start with"


_PRIMES = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31}


def check_prime_lengths(response: str) -> CheckResult:
    ws = alpha_words(response)
    if not ws:
        return False, "the answer has no words"
    bad = [w for w in ws if len(w) not in _PRIMES]
    if bad:
        return False, f"{_plural(len(bad), 'word')} have a length that is not prime, e.g. {_show(bad)}"
    return True, "every word has a prime number of letters"


def check_repeats(response: str, *, small_n: int) -> CheckResult:
    c = Counter(w.lower() for w in words(response))
    over = [(w, n) for w, n in c.most_common() if n > int(small_n)]
    if over:
        shown = ", ".join(f"{w!r} {n}x" for w, n in over[:5])
        return False, f"words repeated more than {int(small_n)} times: {shown}"
    return True, f"no word appears more than {int(small_n)} times"


def check_vowel(response: str) -> CheckResult:
    used = sorted({ch for ch in response.lower() if ch in _VOWELS})
    if not words(response):
        return False, "the answer has no words"
    if len(used) > 3:
        return False, f"the answer uses {len(used)} different vowels ({', '.join(used)}); at most 3 are allowed"
    return True, f"only the vowels {', '.join(used)} are used"


def check_words_position(response: str, *, keyword: str) -> CheckResult:
    ws = words(response)
    kw = str(keyword).lower()
    if len(ws) < 3:
        return False, "the answer is too short"
    problems = []
    if ws[1].lower() != kw:
        problems.append(f"the second word is {ws[1]!r}")
    if ws[-2].lower() != kw:
        problems.append(f"the second-to-last word is {ws[-2]!r}")
    if problems:
        return False, " and ".join(problems) + f"; both must be {keyword!r}"
    return True, f"the second and second-to-last words are {keyword!r}"


# ----------------------------------------------------------------------------------------------------------
# descriptions


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3].rstrip() + "..."


def _d_rel(kw: Mapping[str, Any], rel_key: str, n_key: str, unit: str) -> str:
    return _relation_text(kw.get(rel_key, "at least"), int(kw.get(n_key, 0)), unit)


DESCRIBERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "change_case:capital_word_frequency": lambda k: (
        f"Use words in ALL CAPITAL letters {_d_rel(k, 'capital_relation', 'capital_frequency', 'time')}"),
    "change_case:english_capital": lambda k: "Write the entire answer in English capital letters (no lowercase)",
    "change_case:english_lowercase": lambda k: "Write the entire answer in lowercase letters (no capitals)",
    "combination:repeat_prompt": lambda k: (
        f"Start by repeating the request word for word ({_clip(str(k.get('prompt_to_repeat', '')), 80)!r}), "
        "then answer"),
    "combination:two_responses": lambda k: "Give two different responses separated by six asterisks ******",
    "detectable_content:number_placeholders": lambda k: (
        f"Include at least {_plural(int(k.get('num_placeholders', 1)), 'placeholder')} in square brackets, "
        "like [name]"),
    "detectable_content:postscript": lambda k: (
        f"End with a postscript starting with {k.get('postscript_marker', 'P.S.')}"),
    "detectable_format:constrained_response": lambda k: (
        "Answer with one of: 'My answer is yes.', 'My answer is no.', 'My answer is maybe.'"),
    "detectable_format:json_format": lambda k: "Make the entire answer valid JSON",
    "detectable_format:multiple_sections": lambda k: (
        f"Have {int(k.get('num_sections', 1))} sections, each starting with "
        f"'{k.get('section_spliter', 'Section')} X' (X = 1, 2, ...)"),
    "detectable_format:number_bullet_lists": lambda k: (
        f"Use exactly {_plural(int(k.get('num_bullets', 1)), 'markdown bullet point')} ('* item')"),
    "detectable_format:number_highlighted_sections": lambda k: (
        f"Highlight at least {_plural(int(k.get('num_highlights', 1)), 'section')} with markdown, like *this*"),
    "detectable_format:title": lambda k: "Include a title wrapped in double angular brackets, like <<title>>",
    "keywords:existence": lambda k: f"Include the keywords {_show(_as_list(k.get('keywords', [])), 10)}",
    "keywords:forbidden_words": lambda k: f"Do not use the words {_show(_as_list(k.get('forbidden_words', [])), 10)}",
    "keywords:frequency": lambda k: (
        f"Use the word {k.get('keyword')!r} {_d_rel(k, 'relation', 'frequency', 'time')}"),
    "keywords:letter_frequency": lambda k: (
        f"Use the letter {str(k.get('letter', '')).lower()!r} {_d_rel(k, 'let_relation', 'let_frequency', 'time')}"),
    "language:response_language": lambda k: (
        f"Write the entire answer in {LANGUAGE_NAMES.get(str(k.get('language')), k.get('language'))}, "
        "no other language"),
    "length_constraints:nth_paragraph_first_word": lambda k: (
        f"Write exactly {_plural(int(k.get('num_paragraphs', 1)), 'paragraph')} separated by blank lines; paragraph "
        f"{int(k.get('nth_paragraph', 1))} must start with the word {k.get('first_word')!r}"),
    "length_constraints:number_paragraphs": lambda k: (
        f"Write exactly {_plural(int(k.get('num_paragraphs', 1)), 'paragraph')} separated by markdown dividers ***"),
    "length_constraints:number_sentences": lambda k: (
        f"Answer with {_d_rel(k, 'relation', 'num_sentences', 'sentence')}"),
    "length_constraints:number_words": lambda k: f"Answer with {_d_rel(k, 'relation', 'num_words', 'word')}",
    "punctuation:no_comma": lambda k: "Do not use any commas",
    "startend:end_checker": lambda k: f"End the answer with the exact phrase {k.get('end_phrase')!r}, nothing after it",
    "startend:quotation": lambda k: "Wrap the entire answer in double quotation marks",
    # IFBench
    "count:conjunctions": lambda k: (
        f"Use at least {int(k.get('small_n', 1))} different coordinating conjunctions "
        "(for, and, nor, but, or, yet, so)"),
    "count:keywords_multiple": lambda k: "Use " + ", ".join(
        f"{k[key]!r} {_ORDINAL_TIMES[n]}" for key, n in _MULTI_COUNTS.items() if key in k) + " (exactly)",
    "count:numbers": lambda k: f"Include exactly {_plural(int(k.get('N', 0)), 'number')}",
    "count:person_names": lambda k: (
        f"Mention at least {int(k.get('N', 1))} different person names from the given list"),
    "count:pronouns": lambda k: f"Use at least {_plural(int(k.get('N', 1)), 'pronoun')}",
    "count:punctuation": lambda k: (
        "Use every standard punctuation mark at least once (. , ? ! : ; ' \" ( - ), including the interrobang ?!"),
    "count:unique_word_count": lambda k: f"Use at least {int(k.get('N', 1))} unique words",
    "count:word_count_range": lambda k: (
        f"Answer with between {int(k.get('min_words', 0))} and {int(k.get('max_words', 0))} words"),
    "count:words_japanese": lambda k: f"Make every {int(k.get('N', 1))}th word of the answer Japanese",
    "custom:character_reverse": lambda k: "Write the answer sentence reversed letter by letter",
    "custom:csv_city": lambda k: (
        "Output comma-delimited CSV with header ID,Country,City,Year,Count and exactly 7 data rows"),
    "custom:csv_quotes": lambda k: (
        "Output tab-delimited CSV with header StudentID, Subject, Grade, Semester, Score and 3 data rows, "
        "every field in double quotes"),
    "custom:csv_special_character": lambda k: (
        "Output comma-delimited CSV with header ProductID,Category,Brand,Price,Stock and 14 data rows, one field "
        "with a special character enclosed in double quotes"),
    "custom:date_format_list": lambda k: "Give only a comma-separated list of dates in the format YYYY-MM-DD",
    "custom:mcq_count_length": lambda k: (
        "Write 4 questions starting with 'Question', 5 options each, each question longer than the previous, no "
        "explanation"),
    "custom:multiples": lambda k: "Print only the multiples of 7 from 10 to 50",
    "custom:reverse_newline": lambda k: "List the items in reverse alphabetical order, one per line",
    "custom:sentence_alphabet": lambda k: "Write 26 sentences whose first words start with A, B, C, ... Z in order",
    "custom:word_reverse": lambda k: "Write the answer sentence with its words in reverse order",
    "format:emoji": lambda k: "End every sentence with an emoji",
    "format:line_indent": lambda k: "Indent each new line further than the previous one (stairs)",
    "format:list": lambda k: f"Answer with a list of items marked with {k.get('sep')!r} instead of bullet points",
    "format:newline": lambda k: "Write each word on its own line",
    "format:no_bullets_bullets": lambda k: (
        "Write at least two sentences ending in a period, followed by at least two bullet points marked '* '"),
    "format:no_whitespace": lambda k: "Use no whitespace at all",
    "format:options": lambda k: f"Answer with exactly one of the options: {k.get('options')}",
    "format:output_template": lambda k: (
        "Use the template 'My Answer: ... My Conclusion: ... Future Outlook: ...'"),
    "format:parentheses": lambda k: "Nest brackets (), [], {} at least 5 levels deep",
    "format:quote_unquote": lambda k: "Follow every quoted phrase with an unquoted explanation",
    "format:quotes": lambda k: "Nest quotes at least 3 levels deep, alternating double and single quotes",
    "format:sub-bullets": lambda k: "Use bullet points '* ' each with at least one sub-bullet '- '",
    "format:thesis": lambda k: "Begin each section with a thesis statement in HTML italics (<i>...</i>)",
    "format:title_case": lambda k: "Write the entire answer in title case (capitalise every major word)",
    "ratio:overlap": lambda k: (
        f"Keep the word-trigram overlap with the reference text at {float(k.get('percentage', 0)):g}% (±2)"),
    "ratio:sentence_balance": lambda k: (
        "Balance declarative, interrogative and exclamatory sentences (counts within 1 of each other)"),
    "ratio:sentence_type": lambda k: "Use declarative and interrogative sentences in a 2:1 ratio",
    "ratio:sentence_words": lambda k: (
        "Write exactly three sentences of the same number of characters, never repeating a word"),
    "ratio:stop_words": lambda k: f"Keep stop words at most {float(k.get('percentage', 0)):g}% of all words",
    "repeat:repeat_change": lambda k: "Repeat the request with only its first word changed, and do not answer it",
    "repeat:repeat_simple": lambda k: f"Output only the sentence {_REPEAT_SIMPLE!r}",
    "repeat:repeat_span": lambda k: (
        f"Output only words {int(k.get('n_start', 0))} to {int(k.get('n_end', 0))} of the request"),
    "sentence:alliteration_increment": lambda k: (
        "Give each sentence a longer run of alliterative words than the previous one"),
    "sentence:increment": lambda k: (
        f"Give each sentence exactly {int(k.get('small_n', 1))} more words than the previous one"),
    "sentence:keyword": lambda k: f"Put the word {k.get('word')!r} in sentence {int(k.get('N', 1))}",
    "words:alphabet": lambda k: "Start each word with the next letter of the alphabet (Z loops to A)",
    "words:consonants": lambda k: "Give every word a cluster of two consonants in a row",
    "words:keywords_specific_position": lambda k: (
        f"Make {k.get('keyword')!r} word {int(k.get('m', 1))} of sentence {int(k.get('n', 1))}"),
    "words:last_first": lambda k: "Start each sentence with the last word of the previous sentence",
    "words:no_consecutive": lambda k: "Never let two consecutive words start with the same letter",
    "words:odd_even_syllables": lambda k: "Alternate words with odd and even numbers of syllables",
    "words:palindrome": lambda k: "Include at least 10 different palindrome words of 5 or more letters",
    "words:paragraph_last_first": lambda k: "End each paragraph (one per line) with the word it starts with",
    "words:prime_lengths": lambda k: "Use only words whose length is a prime number",
    "words:repeats": lambda k: f"Use no word more than {int(k.get('small_n', 1))} times",
    "words:vowel": lambda k: "Use at most three different vowels in the whole answer",
    "words:words_position": lambda k: f"Make {k.get('keyword')!r} the second word and the second-to-last word",
}


@dataclass(frozen=True)
class Constraint:
    """One verifiable constraint type: its checker and the kwargs the checker needs."""

    id: str
    check: Checker
    required: tuple[str, ...] = ()


_SPECS: list[tuple[str, Checker, tuple[str, ...]]] = [
    ("change_case:capital_word_frequency", check_capital_word_frequency, ("capital_frequency", "capital_relation")),
    ("change_case:english_capital", check_english_capital, ()),
    ("change_case:english_lowercase", check_english_lowercase, ()),
    ("combination:repeat_prompt", check_repeat_prompt, ("prompt_to_repeat",)),
    ("combination:two_responses", check_two_responses, ()),
    ("detectable_content:number_placeholders", check_number_placeholders, ("num_placeholders",)),
    ("detectable_content:postscript", check_postscript, ("postscript_marker",)),
    ("detectable_format:constrained_response", check_constrained_response, ()),
    ("detectable_format:json_format", check_json_format, ()),
    ("detectable_format:multiple_sections", check_multiple_sections, ("section_spliter", "num_sections")),
    ("detectable_format:number_bullet_lists", check_number_bullet_lists, ("num_bullets",)),
    ("detectable_format:number_highlighted_sections", check_number_highlighted_sections, ("num_highlights",)),
    ("detectable_format:title", check_title, ()),
    ("keywords:existence", check_keywords_existence, ("keywords",)),
    ("keywords:forbidden_words", check_forbidden_words, ("forbidden_words",)),
    ("keywords:frequency", check_keyword_frequency, ("keyword", "frequency", "relation")),
    ("keywords:letter_frequency", check_letter_frequency, ("letter", "let_frequency", "let_relation")),
    ("language:response_language", check_response_language, ("language",)),
    ("length_constraints:nth_paragraph_first_word", check_nth_paragraph_first_word,
     ("num_paragraphs", "nth_paragraph", "first_word")),
    ("length_constraints:number_paragraphs", check_number_paragraphs, ("num_paragraphs",)),
    ("length_constraints:number_sentences", check_number_sentences, ("num_sentences", "relation")),
    ("length_constraints:number_words", check_number_words, ("num_words", "relation")),
    ("punctuation:no_comma", check_no_comma, ()),
    ("startend:end_checker", check_end_checker, ("end_phrase",)),
    ("startend:quotation", check_quotation, ()),
    # IFBench
    ("count:conjunctions", check_conjunctions, ("small_n",)),
    ("count:keywords_multiple", check_keywords_multiple, ("keyword1",)),
    ("count:numbers", check_numbers, ("N",)),
    ("count:person_names", check_person_names, ("N",)),
    ("count:pronouns", check_pronouns, ("N",)),
    ("count:punctuation", check_punctuation, ()),
    ("count:unique_word_count", check_unique_word_count, ("N",)),
    ("count:word_count_range", check_word_count_range, ("min_words", "max_words")),
    ("count:words_japanese", check_words_japanese, ("N",)),
    ("custom:character_reverse", check_character_reverse, ()),
    ("custom:csv_city", check_csv_city, ()),
    ("custom:csv_quotes", check_csv_quotes, ()),
    ("custom:csv_special_character", check_csv_special_character, ()),
    ("custom:date_format_list", check_date_format_list, ()),
    ("custom:mcq_count_length", check_mcq_count_length, ()),
    ("custom:multiples", check_multiples, ()),
    ("custom:reverse_newline", check_reverse_newline, ()),
    ("custom:sentence_alphabet", check_sentence_alphabet, ()),
    ("custom:word_reverse", check_word_reverse, ()),
    ("format:emoji", check_emoji, ()),
    ("format:line_indent", check_line_indent, ()),
    ("format:list", check_list_sep, ("sep",)),
    ("format:newline", check_newline, ()),
    ("format:no_bullets_bullets", check_no_bullets_bullets, ()),
    ("format:no_whitespace", check_no_whitespace, ()),
    ("format:options", check_options, ("options",)),
    ("format:output_template", check_output_template, ()),
    ("format:parentheses", check_parentheses, ()),
    ("format:quote_unquote", check_quote_unquote, ()),
    ("format:quotes", check_quotes, ()),
    ("format:sub-bullets", check_sub_bullets, ()),
    ("format:thesis", check_thesis, ()),
    ("format:title_case", check_title_case, ()),
    ("ratio:overlap", check_overlap, ("reference_text", "percentage")),
    ("ratio:sentence_balance", check_sentence_balance, ()),
    ("ratio:sentence_type", check_sentence_type, ()),
    ("ratio:sentence_words", check_sentence_words, ()),
    ("ratio:stop_words", check_stop_words, ("percentage",)),
    ("repeat:repeat_change", check_repeat_change, ("prompt_to_repeat",)),
    ("repeat:repeat_simple", check_repeat_simple, ()),
    ("repeat:repeat_span", check_repeat_span, ("prompt_to_repeat", "n_start", "n_end")),
    ("sentence:alliteration_increment", check_alliteration_increment, ()),
    ("sentence:increment", check_sentence_increment, ("small_n",)),
    ("sentence:keyword", check_sentence_keyword, ("word", "N")),
    ("words:alphabet", check_words_alphabet, ()),
    ("words:consonants", check_consonants, ()),
    ("words:keywords_specific_position", check_keywords_specific_position, ("keyword", "n", "m")),
    ("words:last_first", check_last_first, ()),
    ("words:no_consecutive", check_no_consecutive, ()),
    ("words:odd_even_syllables", check_odd_even_syllables, ()),
    ("words:palindrome", check_palindrome, ()),
    ("words:paragraph_last_first", check_paragraph_last_first, ()),
    ("words:prime_lengths", check_prime_lengths, ()),
    ("words:repeats", check_repeats, ("small_n",)),
    ("words:vowel", check_vowel, ()),
    ("words:words_position", check_words_position, ("keyword",)),
]

REGISTRY: dict[str, Constraint] = {cid: Constraint(cid, fn, req) for cid, fn, req in _SPECS}

# IFBench ids with no checker, and why
UNSUPPORTED_REASONS: dict[str, str] = {
    "words:start_verb": "needs a part-of-speech tagger to tell whether the first word is a verb",
    "custom:european_capitals_sort": (
        "needs geographic knowledge (which capitals lie north of 45 degrees, and their order)"),
}
UNSUPPORTED: list[str] = sorted(UNSUPPORTED_REASONS)


def clean_kwargs(kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """Drop None values; turn integral floats (IFBench's `5.0`) into ints."""
    out: dict[str, Any] = {}
    for k, v in (kwargs or {}).items():
        if v is None:
            continue
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out[k] = v
    return out


def is_supported(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> bool:
    """True when there is a checker for the id and (if kwargs are given) they hold its required parameters."""
    c = REGISTRY.get(instruction_id)
    if c is None:
        return False
    if kwargs is None:
        return True
    kw = clean_kwargs(kwargs)
    return all(k in kw for k in c.required)


def describe(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """A human sentence for the constraint, e.g. 'Answer with at least 300 words'."""
    fn = DESCRIBERS.get(instruction_id)
    kw = clean_kwargs(kwargs)
    if fn is None:
        return f"Follow the instruction {instruction_id!r}"
    try:
        return fn(kw)
    except (KeyError, TypeError, ValueError):
        return f"Follow the instruction {instruction_id!r}"


def check(instruction_id: str, response: Any, kwargs: Mapping[str, Any] | None = None) -> CheckResult:
    """Run one checker; raises KeyError for an unsupported id and ValueError when a required kwarg is missing."""
    c = REGISTRY[instruction_id]
    kw = clean_kwargs(kwargs)
    missing = [k for k in c.required if k not in kw]
    if missing:
        raise ValueError(f"{instruction_id} needs the parameter(s) {', '.join(missing)}")
    text = response if isinstance(response, str) else ("" if response is None else str(response))
    return c.check(text, **kw)


def check_all(
    response: Any, ids: Sequence[str], kwargs_list: Sequence[Mapping[str, Any] | None] | None = None
) -> list[tuple[str, str, bool | None, str]]:
    """Check every constraint: (id, description, ok, why); ok is None for one that could not be checked."""
    kwargs_list = list(kwargs_list or [])
    out: list[tuple[str, str, bool | None, str]] = []
    for i, cid in enumerate(ids):
        kw = kwargs_list[i] if i < len(kwargs_list) else {}
        desc = describe(cid, kw)
        if cid not in REGISTRY:
            reason = UNSUPPORTED_REASONS.get(cid, "no checker for this constraint type")
            out.append((cid, desc, None, f"not checked: {reason}"))
            continue
        try:
            ok, why = check(cid, response, kw)
        except ValueError as exc:
            out.append((cid, desc, None, f"not checked: {exc}"))
            continue
        except Exception as exc:  # a checker bug must not break a run: count it as not checked
            out.append((cid, desc, None, f"not checked: checker error {type(exc).__name__}: {exc}"))
            continue
        out.append((cid, desc, bool(ok), why))
    return out
