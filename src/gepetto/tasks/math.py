"""Math word problems: GSM8K and AIME, one chain-of-thought component `solve`.

The program is the one-call program: system prompt = `solve`, user message = the problem; the seed asks to
reason step by step and end with "Answer: <number>" (at most `max_tokens`, 400 by default).

Answer extraction (`extract_answer`), first that applies: the last "Answer: X" line, else the last
\\boxed{X}, else the last "#### X", else the last number in the text. Numbers are compared exactly (as fractions)
after removing "$", thousands commas, "%" and LaTeX spacing, so "1,234", "1234.0", "$1234" and "01234" are
all 1234 (AIME answers such as "025" are 25). The metric scores 1 for the correct answer, else 0; its feedback
quotes the extracted answer and says where it came from, gives the correct answer, says whether the reply was
wrong, unparseable (no number) or cut off at the token limit, and shows the start of the reference solution
where the data has one.

Data (`math/` in the data directory):
- dataset="gsm8k": `gsm8k_test.jsonl` ({question, answer ending in "#### N"}, 1,319 problems), shuffled with
  `seed` and split 50 train / 50 val / 200 test by default.
- dataset="aime": train and val from `aime24.jsonl` (30 AIME 2024 problems, shuffled with `seed`, 15 / 15 by
  default); test = `aime25.jsonl` (the 30 AIME 2025 problems, file order, not shuffled).

How this differs from the GEPA paper (as we read it):
- AIME: the paper trains and validates on AIME 2022-2024 problems and tests on AIME 2025 (each test problem
  run several times); here train/val are only the 30 AIME 2024 problems (15/15) and each test problem runs once.
- GSM8K is not one of the paper's benchmarks; its splits here all come from the GSM8K test file.
- Reasoning budget: 400 tokens by default (a loader option), far below what reasoning models use on AIME, so
  AIME scores are low with small models; the paper's models reason at length.
- Metric: exact numeric match as in the paper; the feedback wording and the reference-solution excerpt are ours.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

from gepetto.program import Task, TraceEntry, single_instruction
from gepetto.tasks.common import resolve_file
from gepetto.types import Candidate, Example, Score

SEED_INSTRUCTION = "Solve the math problem. Reason step by step, then end with a final line of the form " \
    "'Answer: <number>'."
# the plain seed: the task and the answer format only (with it the 0.5B model answers at once, without reasoning)
PLAIN_INSTRUCTION = "Solve the math word problem. End your reply with a final line of the form 'Answer: <number>'."
MAX_TOKENS = 400
DEFAULT_SPLITS = {"gsm8k": (50, 50, 200), "aime": (15, 15, 30)}
SOLUTION_CHARS = 400

# a number: optional sign (only when not glued to a preceding word, digit or bracket, so "5-3" is 5 and 3),
# digits with optional thousands commas, optional decimals
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|(?<![\w.])-?\.\d+")
_FRACTION = re.compile(r"\\d?frac\{\s*(-?[\d,.]+)\s*\}\{\s*(-?[\d,.]+)\s*\}|(-?[\d,.]+)\s*/\s*(-?[\d,.]+)")
_ANSWER_LINE = re.compile(r"\banswer\b\s*\**\s*[:\uff1a][ \t]*\**[ \t]*([^\n]*)", re.I)
_HASHES = re.compile(r"####\s*([^\n]*)")


class Extraction(NamedTuple):
    """An answer found in a reply: canonical value (None if no number), the text it came from, and where."""

    value: str | None
    raw: str
    source: str  # "Answer: line", "\\boxed{}", "####", "last number", or "none"


def _clean(text: str) -> str:
    s = text.replace("\u2212", "-").replace("{,}", ",").replace("\\,", "").replace("\\!", "")
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    return re.sub(r"\\text\{([^{}]*)\}", r"\1", s)


def _canonical(value: Fraction) -> str:
    """"18", "-3", "1250.5" (a finite decimal), or "1/3" (otherwise)."""
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if value.denominator == 1 or den != 1:
        return str(value)
    return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


def normalize_number(text: Any) -> str | None:
    """A number's canonical form ("18", "-3", "0.5", "1/3"), or None when `text` holds no number."""
    s = _clean(str(text if text is not None else "")).strip()
    frac = _FRACTION.match(s)  # a fraction first, e.g. \frac{1}{2} or 3/4
    if frac:
        num, den = (frac.group(1), frac.group(2)) if frac.group(1) is not None else (frac.group(3), frac.group(4))
        try:
            return _canonical(Fraction(num.replace(",", "")) / Fraction(den.replace(",", "")))
        except (ValueError, ZeroDivisionError):
            pass
    m = _NUMBER.search(s)
    if not m:
        return None
    try:
        return _canonical(Fraction(m.group(0).replace(",", "")))
    except (ValueError, ZeroDivisionError):
        return None


def _boxed_contents(text: str) -> list[str]:
    """The contents of every \\boxed{...} / \\fbox{...}, with nested braces matched."""
    out = []
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            out.append(text[m.end():i - 1])
    return out


def _from_answer_text(rest: str) -> str | None:
    boxed = _boxed_contents(rest)
    if boxed:
        return normalize_number(boxed[-1])
    if "=" in rest:  # "Answer: 9 x 2 = 18": the value after the last "="
        value = normalize_number(rest.rsplit("=", 1)[1])
        if value is not None:
            return value
    return normalize_number(rest)


def extract_answer(text: Any) -> Extraction:
    """The final answer of a reply: "Answer: X", else \\boxed{X}, else "#### X", else the last number."""
    s = str(text) if isinstance(text, str) else ""
    for m in reversed(list(_ANSWER_LINE.finditer(s))):
        rest, raw = m.group(1).strip(), m.group(0)
        if not rest:  # "Answer:" alone on its line: the value is on the next non-empty line
            after = s[m.end():].lstrip()
            rest = after.split("\n", 1)[0].strip()
            raw = f"{m.group(0).strip()} {rest}"
        value = _from_answer_text(rest)
        if value is not None:
            return Extraction(value, " ".join(raw.split())[:80], "Answer: line")
    for content in reversed(_boxed_contents(s)):
        value = normalize_number(content)
        if value is not None:
            return Extraction(value, f"\\boxed{{{content.strip()[:60]}}}", "\\boxed{}")
    for m in reversed(list(_HASHES.finditer(s))):
        value = normalize_number(m.group(1))
        if value is not None:
            return Extraction(value, " ".join(m.group(0).split())[:80], "####")
    numbers = list(_NUMBER.finditer(_clean(s)))
    for m in reversed(numbers):
        value = normalize_number(m.group(0))
        if value is not None:
            return Extraction(value, m.group(0), "last number")
    return Extraction(None, "", "none")


def _text_of(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, Mapping):
        for key in ("answer", "text", "output"):
            if isinstance(output.get(key), str):
                return output[key]
    return ""


def _reference(example: Example) -> str:
    gold = example.gold if isinstance(example.gold, Mapping) else {}
    solution = re.sub(r"\[asy\].*?\[/asy\]", " [figure] ", str(gold.get("solution") or ""), flags=re.S)
    solution = " ".join(solution.split())
    if not solution:
        return ""
    cut = solution[:SOLUTION_CHARS] + (" [...]" if len(solution) > SOLUTION_CHARS else "")
    return f" Reference solution: {cut}"


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """1 when the extracted final answer equals the gold number, else 0; feedback says what went wrong."""
    gold = example.gold if isinstance(example.gold, Mapping) else {"answer": example.gold}
    gold_raw = str(gold.get("answer", "")).strip()
    gold_value = normalize_number(gold_raw)
    shown = gold_value if gold_value is not None else gold_raw
    fmt = "End the reply with a final line 'Answer: <number>'."
    text = _text_of(output)
    if not text.strip():
        return Score(0.0, f"No answer was given. The correct answer is {shown}. {fmt}{_reference(example)}")
    problem = " ".join(str(example.inputs.get("problem", "")).split())
    flat = " ".join(text.split())
    if problem and problem in flat:
        rest = flat.replace(problem, " ")
        if not re.search(r"\w", rest):
            return Score(0.0, f"The reply only repeats the problem. The correct answer is {shown}: solve it and "
                              f"give the result. {fmt}{_reference(example)}")
        text = rest
    got = extract_answer(text)
    cut_off = any(t.finish_reason == "length" for t in trace if isinstance(t, TraceEntry))
    cut_note = " The reply was cut off at the token limit: reason more briefly so the answer line fits." \
        if cut_off else ""
    if got.value is None:
        return Score(0.0, f"Unparseable: no number was found in the reply, so it scored 0. The correct answer is "
                          f"{shown}. {fmt}{cut_note}{_reference(example)}")
    where = "" if got.source == "Answer: line" else \
        f" No 'Answer: <number>' line was found; the answer was taken from the {got.source}. {fmt}"
    if got.value == gold_value:
        return Score(1.0, f"Correct: the final answer {got.raw!r} equals the correct answer {shown}.{where}")
    return Score(0.0, f"Wrong: the extracted final answer is {got.raw!r} (= {got.value}), but the correct answer "
                      f"is {shown}.{where}{cut_note}{_reference(example)}")


# --- data -----------------------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gsm8k_examples(path: Path) -> list[Example]:
    out = []
    for i, row in enumerate(_read_jsonl(path)):
        solution, _, final = str(row["answer"]).rpartition("####")
        solution = re.sub(r"<<[^>]*>>", "", solution).strip()
        out.append(Example({"problem": str(row["question"])},
                           gold={"answer": final.strip().replace(",", ""), "solution": solution},
                           id=f"gsm8k-{row.get('idx', i)}"))
    return out


def aime_examples(path: Path, tag: str) -> list[Example]:
    out = []
    for i, row in enumerate(_read_jsonl(path)):
        out.append(Example({"problem": str(row["problem"])},
                           gold={"answer": str(row["answer"]).strip(), "solution": str(row.get("solution") or "")},
                           id=f"{tag}-{row.get('id', i)}"))
    return out


def _shuffled(items: list[Example], tag: str, seed: int) -> list[Example]:
    items = list(items)
    random.Random(f"{tag}:{seed}").shuffle(items)
    return items


def load(
    data_dir: Any = None,
    *,
    seed: int = 0,
    dataset: str = "gsm8k",
    n_train: int | None = None,
    n_val: int | None = None,
    n_test: int | None = None,
    max_tokens: int = MAX_TOKENS,
    seed_form: str = "reasoning",
    test_split: str = "dev",
    n_locked: int = 300,
    **_: Any,
) -> Task:
    """GSM8K (a seeded split of its test file) or AIME (2024 for train/val, 2025 for test).

    `seed_form="plain"` makes the seed state only the task and the answer format (the reasoning instruction is then
    the expert's); `test_split="locked"` (GSM8K) gives the `n_locked` problems after the dev test split, kept to be
    scored once, when a result is reported."""
    if seed_form not in ("reasoning", "plain") or test_split not in ("dev", "locked"):
        raise ValueError("seed_form must be 'reasoning' or 'plain', test_split 'dev' or 'locked'")
    if dataset not in DEFAULT_SPLITS:
        raise ValueError(f"unknown math dataset {dataset!r}; choose one of {', '.join(DEFAULT_SPLITS)}")
    d_train, d_val, d_test = DEFAULT_SPLITS[dataset]
    n_train, n_val, n_test = (d_train if n_train is None else n_train, d_val if n_val is None else n_val,
                              d_test if n_test is None else n_test)
    if min(n_train, n_val, n_test) < 0:
        raise ValueError("split sizes must not be negative")
    if dataset == "gsm8k":
        items = _shuffled(gsm8k_examples(resolve_file(data_dir, "math", "gsm8k_test.jsonl")), "gsm8k", seed)
        if n_train + n_val + n_test > len(items):
            raise ValueError(f"gsm8k has {len(items)} problems; asked for {n_train}+{n_val}+{n_test}")
        train, val = items[:n_train], items[n_train:n_train + n_val]
        test = items[n_train + n_val:n_train + n_val + n_test]
        if test_split == "locked":
            test = items[n_train + n_val + n_test:n_train + n_val + n_test + n_locked]
        name, what = "GSM8K", f"GSM8K test-file problems (seeded split, seed {seed})"
    else:
        pool = _shuffled(aime_examples(resolve_file(data_dir, "math", "aime24.jsonl"), "aime24"), "aime", seed)
        held_out = aime_examples(resolve_file(data_dir, "math", "aime25.jsonl"), "aime25")
        if n_train + n_val > len(pool) or n_test > len(held_out):
            raise ValueError(f"aime has {len(pool)} AIME 2024 problems for train+val and {len(held_out)} AIME 2025 "
                             f"problems for test; asked for {n_train}+{n_val} and {n_test}")
        train, val, test = pool[:n_train], pool[n_train:n_train + n_val], held_out[:n_test]
        name, what = "AIME (2024 train/val, 2025 test)", "AIME problems: train/val from 2024, test from 2025"
    return Task(
        name=name,
        program=single_instruction("solve", max_tokens=max_tokens),
        metric=metric,
        seed_candidate=Candidate(solve=SEED_INSTRUCTION if seed_form == "reasoning" else PLAIN_INSTRUCTION),
        trainset=train,
        valset=val,
        testset=test,
        description=f"{what}; chain of thought ending in 'Answer: <number>', exact numeric match.",
        expert_candidate=Candidate(solve=SEED_INSTRUCTION) if seed_form == "plain" else None,
        baseline=f"Answer: {Counter(e.gold['answer'] for e in train).most_common(1)[0][0]}" if train else None,
    )
