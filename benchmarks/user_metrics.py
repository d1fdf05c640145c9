"""The metrics of the user's track, as users write them (`usertrack.py`, `product_run.py`).

Only `gepetto.types` is imported, so a worktree of an older commit (`local_batch.py product --before`) runs with the
very same metric.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gepetto.types import Example, Score


def _render(value: Any) -> str:
    """A gold or an output as a user's feedback line quotes it (a math gold: its answer, not its solution)."""
    if isinstance(value, dict) and set(value) == {"answer", "solution"}:
        value = value["answer"]
    if isinstance(value, str):
        return repr(value.strip())
    return json.dumps(value, ensure_ascii=False)


def user_metric(task: Any, style: str) -> Callable[..., Any]:
    """The task's metric as a user writes it: its value, with one free-text sentence (`plain`) or none (`float`)."""
    if style == "builtin":
        return task.metric

    def value(example: Example, output: Any, trace: Any) -> float:
        return task.metric(example, output, trace).value

    if style == "float":
        return value

    def plain(example: Example, output: Any, trace: Any) -> Score:
        v, gold = value(example, output, trace), _render(example.gold)
        if v >= 1.0:
            return Score(1.0, f"Correct: the answer is {gold}.")
        said = _render(str(output if output is not None else "")[:200])
        return Score(v, f"Incorrect: answered {said}, the correct answer is {gold}." if v == 0 else
                     f"Partly correct ({v:.2f}): answered {said}, the correct answer is {gold}.")

    return plain
