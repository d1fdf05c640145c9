"""Helpers several built-in tasks share: answer normalisation and scores, echo detection, finding data files,
seeded splits, JSON in answers."""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from pathlib import Path
from typing import Any

from gepetto.types import Example


def parse_json_object(output: Any) -> dict[str, Any] | None:
    """The JSON object in an answer (from the first '{' to the last '}'; code fences allowed), or None."""
    m = re.search(r"\{.*\}", str(output or ""), re.S)
    if not m:
        return None
    try:
        value = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


# --- text normalisation and scores ---------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014"}


def normalize_answer(text: Any) -> str:
    """SQuAD-style normalisation: lowercase, drop punctuation and articles, collapse whitespace."""
    s = str(text if text is not None else "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def token_f1(prediction: Any, gold: Any) -> float:
    """Token-overlap F1 between two texts after `normalize_answer`."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: Any, gold: Any) -> bool:
    return normalize_answer(prediction) == normalize_answer(gold)


def is_echo(answer: Any, question: Any, *, fuzzy: bool = True) -> bool:
    """True when the answer is the question repeated back (after normalisation).

    With `fuzzy` (for short-answer tasks) also when the answer contains the whole question or overlaps it
    heavily (token F1 >= 0.7); tasks whose good answers may resemble the input (rewriting an email) use exact.
    """
    a, q = normalize_answer(answer), normalize_answer(question)
    if not a or not q:
        return False
    if a == q:
        return True
    return fuzzy and ((len(q) >= 20 and q in a) or token_f1(a, q) >= 0.7)


def clean_line(text: Any, label: str = "") -> str:
    """The first non-empty line of an LM answer, without a leading `label:` and without wrapping quotes."""
    s = str(text or "").strip()
    for line in s.splitlines():
        if line.strip():
            s = line.strip()
            break
    s = s.strip("\"'` ")
    if label:
        s = re.sub(rf"^\**\s*{re.escape(label)}\s*\**\s*[:\-]\s*", "", s, flags=re.I)
    return s.strip().strip("\"'`*").strip()


# --- data ---------------------------------------------------------------------------------------------------------


def resolve_file(data_dir: Any, folder: str, filename: str) -> Path:
    """The data file: `data_dir` may be the file itself, the data root (with `folder/`) or the folder."""
    from gepetto.tasks import default_data_dir

    base = Path(data_dir) if data_dir is not None else default_data_dir()
    for path in (base, base / folder / filename, base / filename):
        if path.is_file():
            return path
    raise FileNotFoundError(f"{filename} not found: looked for {base / folder / filename} and {base / filename} "
                            "(set data_dir or GEPETTO_DATA_DIR to the benchmark data directory)")


def split(items: list[Example], seed: int, n_train: int, n_val: int, n_test: int, tag: str
          ) -> tuple[list[Example], list[Example], list[Example]]:
    """Shuffle with a seed string (stable across Python versions) and cut train / val / test."""
    if min(n_train, n_val, n_test) < 0:
        raise ValueError("split sizes must not be negative")
    if n_train + n_val + n_test > len(items):
        raise ValueError(f"{tag} has {len(items)} examples; asked for {n_train}+{n_val}+{n_test}")
    items = list(items)
    random.Random(f"{tag}:{seed}").shuffle(items)
    return items[:n_train], items[n_train:n_train + n_val], items[n_train + n_val:n_train + n_val + n_test]
