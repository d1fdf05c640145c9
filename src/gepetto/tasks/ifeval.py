"""IFEval: answer a request that carries verifiable constraints (two stages: answer, then rewrite).

Data (in `<data_dir>/ifeval/`, from microsoft/llm-steer-instruct):
- `ifeval_wo_instructions.jsonl` (main file, the 541 IFEval prompts as `original_prompt` with their
  `instruction_id_list`; its `prompt` field is a constraint-stripping meta prompt and is not used). This copy has
  **no kwargs**, so the constraint parameters are recovered: from the other files when they hold the same prompt
  (the 163 single-instruction prompts; the keyword lists of `keywords:existence` / `keywords:forbidden_words`),
  else parsed from the prompt text by `infer_kwargs` below (e.g. "at least 300 words" -> num_words=300,
  relation="at least"). A constraint whose parameters cannot be recovered stays in the example but is not scored
  (it is listed as not scored in the feedback); an example with nothing left to score is dropped. If a user's
  copy of the file does carry `kwargs`, they are used as they are.
- `ifeval_single_keyword_include.jsonl` / `_exclude.jsonl`: variants of IFEval prompts with a single keyword
  include / exclude constraint (with kwargs); used as extra train/val examples.
- `ifeval_single_instr_format.jsonl`: the same prompts as single-constraint rows of the main file (deduplicated
  by prompt; they only supply kwargs).

Splits (seeded): examples are grouped by IFEval `key` (variants of one base prompt share it) and no group is
split across train/val/test. Test = the main-file example of the first `n_test` groups of a seeded shuffle
(default 100 real IFEval prompts); train / val take at most one example per group (main or a keyword variant,
chosen at random) from the other end of the shuffle (defaults 50 / 50), so train/val do not depend on n_test
(the ifbench task reuses exactly these train/val sets). Example ids: `ifeval-<key>` for main-file prompts,
`ifeval-<key>-<hash of prompt>` for variants.

Differences from the paper (GEPA, Agrawal et al. 2025): the paper evaluates this two-stage program on IFBench
(see the ifbench task), with train/val built from IFEval-like training data that is not among this project's
data files; this "ifeval" task instead tests on IFEval prompts and trains on the IFEval files only. The
constraint checkers are our own (gepetto.tasks.constraints), not the official verifiers, so scores are close to
but not identical with official IFEval numbers: the official "loose" variants (stripping markdown, first/last
line) are not applied; the all-capital / all-lowercase checks look at letter case only, not at whether the text
is English; language identification is a Unicode-script / function-word heuristic, not a trained detector.
Every IFEval instruction type is supported (none unsupported); parameters inferred from text may rarely differ
from the official ones, and 2 of the 541 prompts' constraints could not be parsed (one prompt is dropped, one
constraint is reported as not scored). Calls are bounded to 400 tokens each.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gepetto.program import Task
from gepetto.tasks import _instruct
from gepetto.tasks import constraints as C
from gepetto.types import Example

MAIN_FILE = "ifeval_wo_instructions.jsonl"
FORMAT_FILE = "ifeval_single_instr_format.jsonl"
INCLUDE_FILE = "ifeval_single_keyword_include.jsonl"
EXCLUDE_FILE = "ifeval_single_keyword_exclude.jsonl"

# ----------------------------------------------------------------------------------------------------------
# recovering constraint parameters from the prompt text

_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "a single": 1, "single": 1,
}
_N = r"(\d+|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")"
_ORDINALS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7,
             "eighth": 8, "ninth": 9, "tenth": 10}


def _num(text: str) -> int:
    t = text.strip().lower()
    return int(t) if t.isdigit() else _NUMBER_WORDS[t]


Found = tuple[int, list[tuple[str, int]]]  # (position in the prompt, IFEval constraints [(relation, n)])


def _quantities(text: str, unit: str) -> list[Found]:
    """Every count constraint on `unit` (a regex for the noun, e.g. 'words?') in the text, IFEval-style.

    Relations become "at least" / "less than": "more than N" -> at least N+1, "at most N" -> less than N+1,
    "N to M" / "N or M" / "exactly N" -> both bounds.
    """
    u = rf"(?:\s+(?:\w+\s+){{0,2}}?)?{unit}\b"
    found: list[Found] = []

    def add(m: re.Match[str], cons: list[tuple[str, int]]) -> None:
        found.append((m.start(), cons))

    for m in re.finditer(rf"\b(?:in the range of\s+)?{_N}\s*(?:to|-|–|or)\s*{_N}{u}", text, re.I):
        a, b = _num(m.group(1)), _num(m.group(2))
        if a <= b:
            add(m, [("at least", a), ("less than", b + 1)])
    pats = [
        (rf"\b(?:at least|no less than|a minimum of|minimum of)\s+{_N}{u}", lambda n: [("at least", n)]),
        (rf"\b(?:more than|over)\s+{_N}{u}", lambda n: [("at least", n + 1)]),
        (rf"\b(?:less than|fewer than|under)\s+(?:a total of\s+)?{_N}{u}", lambda n: [("less than", n)]),
        (rf"\b(?:at most|no more than|not more than|maximum of|a maximum of|anything longer than)\s+{_N}{u}",
         lambda n: [("less than", n + 1)]),
        (rf"\bexactly\s+{_N}{u}", lambda n: [("at least", n), ("less than", n + 1)]),
        (rf"\b{_N}\s*(?:\+|or more|or greater){u}", lambda n: [("at least", n)]),
        (rf"\b{_N}{u}\s*or more\b", lambda n: [("at least", n)]),
        (rf"\b{_N}\s*(?:or less|or fewer){u}", lambda n: [("less than", n + 1)]),
        (rf"\b{_N}{u}\s*or (?:less|fewer)\b", lambda n: [("less than", n + 1)]),
        (rf"\b{_N}\+?-{unit}\b", lambda n: [("at least", n)]),
        (rf"\ba\s+{_N}\s+{unit}\b", lambda n: [("at least", n)]),
    ]
    # the unit named first: "the number of sentences should be in the range of 40 to 60", "words ... 250 or more"
    before = rf"\b{unit}\b[^.\n]{{0,60}}?\b"
    for m in re.finditer(rf"{before}(?:in the range of\s+|between\s+)?{_N}\s*(?:to|-|–|and)\s*{_N}\b(?!\s*\w*\s*\w)",
                         text, re.I):
        a, b = _num(m.group(1)), _num(m.group(2))
        if a <= b:
            add(m, [("at least", a), ("less than", b + 1)])
    pats += [
        (rf"{before}{_N}\s*or more\b", lambda n: [("at least", n)]),
        (rf"{before}{_N}\s*or (?:less|fewer)\b", lambda n: [("less than", n + 1)]),
    ]
    for pat, make in pats:
        for m in re.finditer(pat, text, re.I):
            if any(abs(m.start() - pos) < 3 for pos, _ in found):
                continue
            add(m, make(_num(m.group(1))))
    return sorted(found, key=lambda f: f[0])


def _times(clause: str) -> list[Found]:
    """Count constraints on 'times' (with once / twice) in a clause."""
    t = clause
    found = _quantities(t, r"times?")
    for pat, cons in [
        (r"\b(?:at least|no less than) once\b", [("at least", 1)]),
        (r"\b(?:at least|no less than) twice\b", [("at least", 2)]),
        (r"\b(?:at most once|once or less|only once|no more than once)\b", [("less than", 2)]),
        (r"\b(?:at most twice|twice or less|no more than twice)\b", [("less than", 3)]),
        (r"\bless than twice\b", [("less than", 2)]),
        (r"\bmore than twice\b", [("at least", 3)]),
        (r"\bmore than once\b", [("at least", 2)]),
    ]:
        for m in re.finditer(pat, t, re.I):
            found.append((m.start(), cons))
    return sorted(found, key=lambda f: f[0])


def _clauses(prompt: str) -> list[str]:
    """Rough clauses: split at sentence ends and line breaks, outside of quotes."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])|\n+", prompt)
    return [p.strip() for p in parts if p.strip()]


def _first(found: list[Found], k: int) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for _, cons in found:
        for c in cons:
            if c not in out:
                out.append(c)
    return out[:k] if k else out


_NEG = re.compile(r"\b(?:avoid|without|do not|don't|never|refrain|not contain|not include|not use|exclude)\b", re.I)


def _parse_number_words(prompt: str, k: int) -> list[dict[str, Any]]:
    text = re.sub(r"(?i)words?\s+(?:be\s+)?(?:in|with)\s+all\s+cap\w*", "CAPWORDS", prompt)
    text = re.sub(r"(?i)\b\d+\s+words?\s+(?:in|with)\s+all", "CAPWORDS", text)
    return [{"num_words": n, "relation": r} for r, n in _first(_quantities(text, r"words?"), k)]


def _parse_number_sentences(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(r"\b(\d+)-line\b", prompt)
    if m and re.search(r"each line[^.]*one sentence", prompt, re.I):
        n = int(m.group(1))
        cons = [("at least", n), ("less than", n + 1)][: k or 2]
    else:
        cons = _first(_quantities(prompt, r"sentences?"), k)
    return [{"num_sentences": n, "relation": r} for r, n in cons]


_NOT_KEYWORDS = {"with", "in", "that", "be", "of", "the", "a", "an", "each", "for", "should", "to", "is"}


def _parse_keyword_frequency(prompt: str, k: int) -> list[dict[str, Any]]:
    out: list[tuple[int, dict[str, Any]]] = []
    for clause in _clauses(prompt):
        if re.search(r"capital|\bcaps\b|\bletter\b", clause, re.I):
            continue
        kw_pat = r"(?:word|keyword|name)s?\s+([\"'“‘])?([A-Za-z][\w-]*)[\"'”’]?"
        kws = [m for m in re.finditer(kw_pat, clause) if m.group(1) or m.group(2).lower() not in _NOT_KEYWORDS]
        avoid = re.search(r"\bavoid mentioning\s+[\"'“]?([A-Za-z][\w-]*)", clause, re.I)
        if avoid:
            out.append((prompt.find(clause), {"keyword": avoid.group(1), "frequency": 1, "relation": "less than"}))
            continue
        if not kws:
            continue
        for pos, cons in _times(clause):
            before = [m for m in kws if m.start() < pos]
            m = before[-1] if before else kws[0]
            for r, n in cons:
                out.append((prompt.find(clause) + pos, {"keyword": m.group(2), "frequency": n, "relation": r}))
    return _dedupe([d for _, d in sorted(out, key=lambda x: x[0])])[: k or None]


def _parse_letter_frequency(prompt: str, k: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    absent: list[dict[str, Any]] = []  # "without the letter e": used only when no clause gives a count
    for clause in _clauses(prompt):
        m = re.search(r"\bletter\s+[\"'“]?([A-Za-z])\b[\"'”]?", clause, re.I)
        letter = m.group(1).lower() if m else None
        if letter is None:
            hm = re.search(rf"\b{_N}\s+(?:or more\s+)?hashtags", clause, re.I)
            em = re.search(rf"\b{_N}\s+or more exclamation marks|\b{_N}\s+exclamation marks", clause, re.I)
            if hm and re.search(r"at least|or more", clause, re.I):
                out.append({"letter": "#", "let_frequency": _num(hm.group(1)), "let_relation": "at least"})
            elif em:
                n = _num(em.group(1) or em.group(2))
                out.append({"letter": "!", "let_frequency": n, "let_relation": "at least"})
            continue
        quants = _times(clause) or _quantities(clause, r"(?:times?)?")
        neg = _NEG.search(clause)
        more = re.search(rf"\bmore than\s+({_N[1:-1]}|twice|once)\b", clause, re.I)
        if neg and more:
            word = more.group(1).lower()
            n = 2 if word == "twice" else 1 if word == "once" else _num(word)
            out.append({"letter": letter, "let_frequency": n + 1, "let_relation": "less than"})
        elif quants:
            for r, n in _first(quants, 0):
                out.append({"letter": letter, "let_frequency": n, "let_relation": r})
        elif neg:
            absent.append({"letter": letter, "let_frequency": 1, "let_relation": "less than"})
    counted = {d["letter"] for d in out}
    out += [d for d in absent if d["letter"] not in counted]
    return _dedupe(out)[: k or None]


def _parse_capital_frequency(prompt: str, k: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    clauses = _clauses(prompt)
    for i, clause in enumerate(clauses):
        if not re.search(r"capital|\bcaps\b", clause, re.I):
            continue
        if not re.search(r"\d|times|once|twice|" + _N[1:-1], clause, re.I) and i + 1 < len(clauses):
            clause = clause + " " + clauses[i + 1]
        found = _times(clause) + _quantities(clause, r"(?:(?:such\s+)?capitalized\s+)?words?")
        found += _quantities(clause, r"(?=\.|$)")
        for r, n in _first(sorted(found, key=lambda f: f[0]), 0):
            out.append({"capital_frequency": n, "capital_relation": r})
    return _dedupe(out)[: k or None]


def _parse_placeholders(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(rf"\b(?:at least\s+)?{_N}\s+placeholders?", prompt, re.I)
    return [{"num_placeholders": _num(m.group(1))}] if m else []


def _parse_postscript(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(r"\b(P\.P\.S|P\.S)\b\.?", prompt)
    if not m:
        return []
    return [{"postscript_marker": "P.P.S" if m.group(1) == "P.P.S" else "P.S."}]


def _parse_multiple_sections(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(r"[\"']?\b([A-Za-z]+) X\b", prompt)
    spl = m.group(1) if m else None
    n = None
    if spl is None:
        m2 = re.search(r"\b([A-Za-z]+) 1[\"']? and [\"']?\1 2\b", prompt)
        if m2:
            spl, n = m2.group(1), 2
    if spl is None:
        return []
    if n is None:
        unit = r"(?:sections?|paragraphs?|parts?|days?|versions?|" + re.escape(spl.lower()) + r"s?)"
        m3 = None
        for m3 in re.finditer(rf"\b(?:at least\s+|exactly\s+)?{_N}[\s-]+(?:\w+\s+)?{unit}\b", prompt, re.I):
            if not re.search(r"version", m3.group(0), re.I):
                break
        if m3 is None or re.search(r"version", m3.group(0), re.I):
            return []
        n = _num(m3.group(1))
    return [{"section_spliter": spl, "num_sections": n}]


def _parse_bullets(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(rf"\b(?:exactly\s+)?{_N}\s+(?:\w+\s+){{0,3}}?bullet", prompt, re.I)
    if not m:
        m = re.search(rf"\bexactly\s+{_N}\b", prompt, re.I)
    return [{"num_bullets": _num(m.group(1))}] if m else []


def _parse_highlights(prompt: str, k: int) -> list[dict[str, Any]]:
    units = r"(?:sections?|parts?|names|keywords|words|phrases)"
    for clause in _clauses(prompt):
        if not re.search(r"highlight|italic|\bbold", clause, re.I):
            continue
        m = re.search(rf"\b(?:at least\s+)?{_N}\s+(?:(?:text|italic|italics|of your favorite)\s+)*{units}\b",
                      clause, re.I)
        if m:
            return [{"num_highlights": _num(m.group(1))}]
        m = re.search(rf"\b{_N}\s+italic", clause, re.I)
        if m:
            return [{"num_highlights": _num(m.group(1))}]
        if re.search(r"\btwice\b", clause, re.I):
            return [{"num_highlights": 2}]
        if re.search(r"\beach section\b", clause, re.I):
            m = re.search(rf"\b{_N}\s+(?:or more\s+)?sections\b", prompt, re.I)
            if m:
                return [{"num_highlights": _num(m.group(1))}]
        return [{"num_highlights": 1}]
    return []


def _parse_number_paragraphs(prompt: str, k: int) -> list[dict[str, Any]]:
    unit = r"(?:paragraphs?|sections?|parts?|stanzas?|steps|Q and As|advice|versions?)"
    for m in re.finditer(rf"\b{_N}\s+(?:\w+\s+){{0,2}}?{unit}", prompt, re.I):
        if not re.search(r"asterisk|\*", m.group(0)):
            return [{"num_paragraphs": _num(m.group(1))}]
    dividers = len(re.findall(r"(?m)^\s*\*\*\*\s*$", prompt))
    if dividers:
        return [{"num_paragraphs": dividers + 1}]
    if re.search(r"\bseparate (?:the |your )?\w+(?: \w+)? and ", prompt, re.I):
        return [{"num_paragraphs": 2}]
    return []


def _parse_nth_paragraph(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(rf"\b(?:exactly\s+)?{_N}[\s-]+paragraphs?\b", prompt, re.I)
    if not m:
        return []
    total = _num(m.group(1))
    nth = None
    m2 = re.search(r"\b(first|second|third|fourth|fifth|sixth|seventh|last|\d+(?:st|nd|rd|th))\s+paragraph", prompt,
                   re.I)
    m3 = re.search(r"\bparagraph\s+(\d+)\b", prompt, re.I)
    if m3:
        nth = int(m3.group(1))
    elif m2:
        w = m2.group(1).lower()
        nth = total if w == "last" else _ORDINALS.get(w) or int(re.sub(r"\D", "", w))
    m4 = re.search(r"\b(?:start|starts|begin|begins)\b[^.\n]*?\bwith\s+(?:the\s+)?(?:word\s+)?[\"'“]?([A-Za-z]+)",
                   prompt, re.I)
    if nth is None or not m4:
        return []
    return [{"num_paragraphs": total, "nth_paragraph": nth, "first_word": m4.group(1)}]


_LANGUAGE_CODES = {name.lower(): code for code, name in C.LANGUAGE_NAMES.items()}
_LANGUAGE_CODES.update({"farsi": "fa", "mandarin": "zh"})


def _parse_language(prompt: str, k: int) -> list[dict[str, Any]]:
    counts: dict[str, int] = defaultdict(int)
    first: dict[str, int] = {}
    for m in re.finditer(r"\b(" + "|".join(_LANGUAGE_CODES) + r")\b", prompt, re.I):
        code = _LANGUAGE_CODES[m.group(1).lower()]
        counts[code] += 1
        first.setdefault(code, m.start())
    if not counts:
        return []
    if len(counts) > 1:
        counts.pop("en", None)
    best = max(counts, key=lambda c: (counts[c], -first[c]))
    return [{"language": best}]


def _parse_end_phrase(prompt: str, k: int) -> list[dict[str, Any]]:
    m = re.search(r"\b(?:end|ends|ending|finish|finishes)\b|\bvery (?:end|last)\b", prompt, re.I)
    if not m:
        return []
    rest = prompt[m.end():]
    q = re.search(r"[\"“]([^\"”]+)[\"”]", rest)
    if q and q.start() < 80 and "\n" not in rest[:q.start()]:
        phrase = q.group(1)
    else:
        mk = (re.search(r"\b(?:phrase|question|like)\b\s*:?\s*", rest, re.I)
              or re.search(r"\bwith\s*:\s*", rest, re.I) or re.search(r"\bwith\b\s*", rest, re.I))
        if not mk:
            return []
        lines = [ln.strip() for ln in rest[mk.end():].split("\n")]
        phrase = next((ln for ln in lines if ln), "")
    phrase = phrase.strip()
    return [{"end_phrase": phrase}] if phrase else []


def _parse_repeat_prompt(prompt: str, k: int) -> list[dict[str, Any]]:
    lines = prompt.split("\n")
    idx = next((i for i, ln in enumerate(lines) if re.search(r"\b(?:repeat|repleat)\b", ln, re.I)), None)
    if idx is None:
        return []
    if idx > 0:
        request = "\n".join(lines[:idx]).strip()
    else:
        paras = [p for p in re.split(r"\n\s*\n", prompt) if p.strip()]
        if len(paras) < 2:
            return []
        request = "\n\n".join(paras[1:]).strip()
    return [{"prompt_to_repeat": request}] if request else []


PARSERS = {
    "length_constraints:number_words": _parse_number_words,
    "length_constraints:number_sentences": _parse_number_sentences,
    "keywords:frequency": _parse_keyword_frequency,
    "keywords:letter_frequency": _parse_letter_frequency,
    "change_case:capital_word_frequency": _parse_capital_frequency,
    "detectable_content:number_placeholders": _parse_placeholders,
    "detectable_content:postscript": _parse_postscript,
    "detectable_format:multiple_sections": _parse_multiple_sections,
    "detectable_format:number_bullet_lists": _parse_bullets,
    "detectable_format:number_highlighted_sections": _parse_highlights,
    "length_constraints:number_paragraphs": _parse_number_paragraphs,
    "length_constraints:nth_paragraph_first_word": _parse_nth_paragraph,
    "language:response_language": _parse_language,
    "startend:end_checker": _parse_end_phrase,
    "combination:repeat_prompt": _parse_repeat_prompt,
}


def _dedupe(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for d in items:
        if d not in out:
            out.append(d)
    return out


def infer_kwargs(instruction_id: str, prompt: str, count: int = 1) -> list[dict[str, Any]]:
    """Parameters of `instruction_id` read from the prompt text: up to `count` kwargs dicts (first found first).

    Ids that need no parameters give [{}]; an id whose parameters cannot be found gives [].
    """
    req = C.REGISTRY[instruction_id].required if instruction_id in C.REGISTRY else ()
    if not req:
        return [{}]
    parser = PARSERS.get(instruction_id)
    if parser is None:
        return []
    try:
        found = parser(prompt, count)
    except (KeyError, ValueError):
        return []
    return [d for d in found if all(r in d for r in req)][: max(count, 1)]


# ----------------------------------------------------------------------------------------------------------
# loading


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def _known_kwargs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [k or {} for k in rows]


def read_examples(data_dir: Any = None) -> list[Example]:
    """All IFEval examples (main file first, then keyword variants), deduplicated by prompt."""
    from gepetto.tasks import default_data_dir

    root = Path(data_dir) if data_dir is not None else default_data_dir()
    folder = root / "ifeval"
    main_path = folder / MAIN_FILE
    if not main_path.exists():
        raise FileNotFoundError(f"IFEval data not found: {main_path} (set data_dir or GEPETTO_DATA_DIR)")
    main = _read_jsonl(main_path)

    def optional(name: str) -> list[dict[str, Any]]:
        p = folder / name
        return _read_jsonl(p) if p.exists() else []

    fmt, inc, exc = optional(FORMAT_FILE), optional(INCLUDE_FILE), optional(EXCLUDE_FILE)
    by_prompt: dict[str, dict[str, Any]] = {}
    for r in fmt:
        for cid, kw in zip(r["instruction_id_list"], _known_kwargs(r["kwargs"]), strict=False):
            by_prompt.setdefault(r["prompt"], {})[cid] = C.clean_kwargs(kw)
    keywords: dict[Any, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for rows, cid, field in ((inc, "keywords:existence", "keywords"), (exc, "keywords:forbidden_words",
                                                                       "forbidden_words")):
        for r in rows:
            for w in (r["kwargs"][0] or {}).get(field) or []:
                if w not in keywords[r["key"]][cid]:
                    keywords[r["key"]][cid].append(w)

    examples: list[Example] = []
    seen_prompts: set[str] = set()
    for r in main:
        prompt = r.get("original_prompt") or r.get("prompt") or ""
        if not prompt or prompt in seen_prompts:
            continue
        ids: list[str] = list(r["instruction_id_list"])
        given = r.get("kwargs")
        kwargs_list: list[dict[str, Any]] = []
        out_ids: list[str] = []
        if isinstance(given, list) and len(given) == len(ids):
            out_ids, kwargs_list = ids, [C.clean_kwargs(k) for k in given]
        else:
            counts: dict[str, int] = defaultdict(int)
            for cid in ids:
                counts[cid] += 1
            for cid in dict.fromkeys(ids):
                known = by_prompt.get(prompt, {}).get(cid)
                name = {"keywords:existence": "keywords", "keywords:forbidden_words": "forbidden_words"}.get(cid)
                if known is not None:
                    found = [known]
                elif name and keywords.get(r["key"], {}).get(cid):
                    found = [{name: list(keywords[r["key"]][cid])}]
                else:
                    found = infer_kwargs(cid, prompt, counts[cid])
                if not found:
                    found = [{}]  # parameters unknown: kept, reported as not scored
                for kw in found:
                    out_ids.append(cid)
                    kwargs_list.append(kw)
        ex = _instruct.make_example(f"ifeval-{r['key']}", prompt, out_ids, kwargs_list, source=MAIN_FILE,
                                    key=r["key"])
        seen_prompts.add(prompt)
        if ex is not None:
            examples.append(ex)
    for name, rows in ((INCLUDE_FILE, inc), (EXCLUDE_FILE, exc), (FORMAT_FILE, fmt)):
        for r in rows:
            prompt = r["prompt"]
            if prompt in seen_prompts:
                continue
            seen_prompts.add(prompt)
            ex = _instruct.make_example(f"ifeval-{r['key']}-{_hash(prompt)}", prompt, r["instruction_id_list"],
                                        _known_kwargs(r["kwargs"]), source=name, key=r["key"])
            if ex is not None:
                examples.append(ex)
    return examples


def split_examples(
    examples: list[Example], *, seed: int, n_train: int, n_val: int, n_test: int
) -> tuple[list[Example], list[Example], list[Example]]:
    """Seeded, group-aware split (see module docstring): test from the front of the shuffled groups, train/val
    from the back, one example per group for train/val."""
    groups: dict[Any, list[Example]] = defaultdict(list)
    for ex in examples:
        groups[ex.metadata["key"]].append(ex)
    keys = sorted(groups, key=str)
    rng = random.Random(f"ifeval:{seed}")
    rng.shuffle(keys)
    test: list[Example] = []
    test_keys: set[Any] = set()
    for key in keys:
        if len(test) >= n_test:
            break
        main = [e for e in groups[key] if e.metadata.get("source") == MAIN_FILE]
        if main:
            test.append(main[0])
            test_keys.add(key)
    if len(test) < n_test:
        raise ValueError(f"IFEval has {len(test)} main-file examples; asked for n_test={n_test}")
    pick = random.Random(f"ifeval-pick:{seed}")
    pool: list[Example] = []
    for key in reversed(keys):
        if len(pool) >= n_train + n_val:
            break
        if key in test_keys:
            raise ValueError(f"IFEval has too few prompt groups for n_train={n_train}, n_val={n_val}, "
                             f"n_test={n_test}")
        pool.append(pick.choice(groups[key]))
    if len(pool) < n_train + n_val:
        raise ValueError(f"IFEval has {len(pool)} groups for train/val; asked for {n_train + n_val}")
    return pool[:n_train], pool[n_train:n_train + n_val], test


def load(
    data_dir: Any = None, *, seed: int = 0, n_train: int = 50, n_val: int = 50, n_test: int = 100, **_: Any
) -> Task:
    """IFEval task: two-stage program (answer, rewrite); splits as in the module docstring."""
    examples = read_examples(data_dir)
    train, val, test = split_examples(examples, seed=seed, n_train=n_train, n_val=n_val, n_test=n_test)
    return _instruct.make_task("ifeval", train, val, test,
                               "IFEval prompts with verifiable constraints; answer then rewrite; score = share "
                               "of constraints met (gepetto's own checkers).")
