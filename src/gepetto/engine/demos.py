"""Few-shot demonstrations: solved training examples written into a component's text, evolved like its words.

Small task models often follow an example better than a rule (the demo task: a prompt with five worked
examples scored 0.943 on validation where the same facts written as rules scored 0.743). A demonstration is one
input and the output the task LM gave for it on a training example the metric scored perfect, taken from
rollouts already paid for, so proposing one costs no reflection call at all. Where the program returns its one
LM call's answer as is, an example's gold written as that answer (`written_as`) is a right answer too, once the
metric scores it perfect: a demonstration of an example no candidate has solved yet (`from_gold`).

Demonstrations live at the end of the component's text, after a fixed header, one `Input:`/`Output:` pair
each, so any program that calls `ctx.lm(component, ...)` sees them without a change:

    <the instruction>

    Examples of correct answers:
    Input: ...
    Output: ...

Reflection (rewrite and edit) sees and changes only the instruction part and the child keeps its parent's
demonstrations, so the echo guard applies to the instruction alone. Pure functions here; the proposer that
uses them is `FewShot` in engine/proposers.py.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gepetto.program import Rollout

HEADER = "Examples of correct answers:"
_SEP = f"\n\n{HEADER}\n"
MAX_INPUT_CHARS = 500
MAX_OUTPUT_CHARS = 300
_NOT_WHOLE = {"length", "error", "content_filter"}  # finish reasons of an answer not to show (any other: whole)
NEAREST = 3  # a new demonstration is drawn from this many solved inputs most like the mistake's inputs


@dataclass(frozen=True)
class Demo:
    """One demonstration: an input as the task LM saw it and the output that scored perfect."""

    input: str
    output: str
    example_id: str = ""  # where it came from (not written into the text)

    def render(self) -> str:
        return f"Input: {self.input}\nOutput: {self.output}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def split(text: str) -> tuple[str, list[Demo]]:
    """(instruction, demonstrations) of a component's text; a text without the header has none."""
    head, sep, block = text.rpartition(_SEP)
    if not sep:
        return text, []
    demos: list[Demo] = []
    lines = block.split("\n")
    for i in range(0, len(lines) - 1, 2):
        inp, out = lines[i], lines[i + 1]
        if not (inp.startswith("Input: ") and out.startswith("Output: ")):
            return text, []  # not a block we wrote: leave the text whole
        demos.append(Demo(inp[len("Input: "):], out[len("Output: "):]))
    if len(lines) % 2:
        return text, []
    return head, demos


def join(instruction: str, demos: Sequence[Demo]) -> str:
    """The component's text: the instruction, then the demonstrations (none: the instruction alone)."""
    if not demos:
        return instruction
    return instruction + _SEP + "\n".join(d.render() for d in demos)


def add(text: str, demo: Demo, max_demos: int) -> str:
    """`text` with `demo` appended. When `max_demos` are already there, one goes: the oldest whose answer another
    demonstration also shows (so the answers shown stay varied), else the oldest."""
    instruction, demos = split(text)
    demos = [*demos, demo]
    while len(demos) > max(max_demos, 0):
        outputs = [d.output.lower() for d in demos]
        drop = next((i for i, o in enumerate(outputs) if outputs.count(o) > 1), 0)
        del demos[drop]
    return join(instruction, demos)


def from_rollout(rollout: Rollout, component: str) -> Demo | None:
    """The demonstration a solved rollout gives for `component`: its first call's input and answer, on one line
    each; None without such a call, with a cut answer (or an error) or with an input too long to show whole."""
    call = next((t for t in rollout.trace if t.component == component), None)
    if call is None or call.finish_reason in _NOT_WHOLE:
        return None
    inp, out = _one_line(call.inputs), _one_line(call.output)
    if not inp or not out or len(inp) > MAX_INPUT_CHARS or len(out) > MAX_OUTPUT_CHARS:
        return None
    return Demo(inp, out, rollout.example_id)


def written_as(gold: Any, answer: str) -> str | None:
    """`gold` written the way the task LM's `answer` is: a text as is; a mapping or a list as JSON when the answer
    is JSON too (it starts with a brace or a bracket, perhaps inside a code fence); None otherwise."""
    if isinstance(gold, str):
        return _one_line(gold) or None
    if isinstance(gold, (Mapping, list)) and answer.strip().lstrip("`").removeprefix("json").lstrip()[:1] in ("{", "["):
        try:
            return json.dumps(gold, ensure_ascii=False)
        except (TypeError, ValueError):
            return None
    return None


def from_gold(rollout: Rollout, component: str, gold: Any) -> Demo | None:
    """The demonstration `gold` gives for `component` on `rollout`'s example, unchecked (the metric must still score
    its output perfect): its input from the rollout's call, its output the gold written as that call's answer;
    None unless the program made that one call and returned its answer as is."""
    if len(rollout.trace) != 1 or rollout.trace[0].component != component:
        return None
    call = rollout.trace[0]
    if not isinstance(rollout.output, str) or rollout.output != call.output:
        return None
    inp, out = _one_line(call.inputs), written_as(gold, call.output)
    if not inp or not out or len(inp) > MAX_INPUT_CHARS or len(out) > MAX_OUTPUT_CHARS:
        return None
    return Demo(inp, out, rollout.example_id)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def nearest(pool: dict[str, Demo], like: Sequence[str], k: int = NEAREST) -> list[str]:
    """The ids of the `k` demonstrations in `pool` whose inputs share the most rare words with the texts in
    `like` (the inputs the parent got wrong), rarity counted over the pool and `like` (idf); all of `pool`
    when nothing is shared."""
    docs = {i: _words(d.input) for i, d in pool.items()}
    target = [_words(t) for t in like]
    if not any(target):
        return sorted(pool)
    n = len(docs) + len(target)
    df: dict[str, int] = {}
    for words in [*docs.values(), *target]:
        for w in words:
            df[w] = df.get(w, 0) + 1
    idf = {w: math.log(n / c) for w, c in df.items()}
    # fsum: the exact sum, whatever order a set of words iterates in (it changes with each process's hash seed),
    # so equal scores tie exactly and the ids break the tie, in every process (resume replays this choice)
    score = {i: max(math.fsum(idf[w] for w in words & t) for t in target) for i, words in docs.items()}
    ranked = sorted((i for i in pool if score[i] > 0), key=lambda i: (-score[i], i))
    return ranked[:k] or sorted(pool)


def choose(solved: Iterable[Rollout], component: str, current: Sequence[Demo], answer: str, avoid: set[str],
           rng: random.Random, like: Sequence[str] = (), golds: Sequence[Demo] = ()) -> Demo | None:
    """A new demonstration from `solved` rollouts (training examples only), or from `golds` (demonstrations
    written from golds, for examples no solved rollout shows): one whose output is `answer` (the right answer
    the parent keeps missing) when there is one, else any; among those, one of the few whose inputs are most like
    `like` (the inputs the parent got wrong); never an input already shown, nor an example in `avoid` (the
    examples the child is tested on, and any validation example)."""
    shown = {d.input for d in current}
    pool: dict[str, Demo] = {}
    made = (from_rollout(r, component) for r in sorted(solved, key=lambda r: r.example_id))
    for demo in [*made, *sorted(golds, key=lambda d: d.example_id)]:
        if demo is not None and demo.example_id not in avoid and demo.example_id not in pool \
                and demo.input not in shown:
            pool[demo.example_id] = demo
    if not pool:
        return None
    wanted = {i: d for i, d in pool.items() if answer and d.output.lower() == answer.lower()}
    return pool[rng.choice(nearest(wanted or pool, like))]
