"""A simulated optimisation problem with a known optimum: cheap, exact and deterministic.

Each example is of some "kind" k; the task LM answers it correctly only when the instruction of the
component handling that kind mentions `rule-k`. The metric's feedback names the missing rule, and the
simulated reflection LM adds the rules it reads in the feedback to the instruction. Used by the tests and
by the benchmarks (sample efficiency, wall time, engine overhead) where real LMs would be slow or noisy.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from typing import Any

from gepetto.lm.base import Completion, Message, Usage
from gepetto.lm.names import LMName
from gepetto.program import Context, Task, TraceEntry
from gepetto.types import Candidate, Example, Score

_Q = re.compile(r"question (\d+) kind (\d+)")


def examples(n: int, kinds: int, prefix: str = "ex") -> list[Example]:
    return [Example({"q": f"question {i} kind {i % kinds}"}, gold=f"answer-{i}", id=f"{prefix}-{i}")
            for i in range(n)]


class SimTaskLM:
    """Answers `answer-i` when the system prompt holds `rule-k` for the question's kind, else a wrong answer."""

    def __init__(self, latency: float = 0.0, name: str = "sim-task") -> None:
        self.name, self.latency, self.calls = name, latency, 0

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        system = messages[0]["content"]
        m = _Q.search(messages[-1]["content"])
        if m is None:
            return Completion("?", Usage(20, 1))
        i, k = m.groups()
        ok = re.search(rf"\brule-{k}\b", system) is not None
        return Completion(f"answer-{i}" if ok else "no idea", Usage(20 + len(system) // 4, 3))


class SimReflectionLM:
    """Adds every `rule-k` named in the feedback to the current instruction.

    `noise` in [0, 1): share of answers that are useless in one of the ways small models fail (empty,
    chat reply, unchanged text, an echo of an example), drawn from an RNG seeded by `seed` and the request's
    own `seed` parameter (like a seeded sampler: the same request gets the same answer).
    `max_rules`: at most this many new rules per proposal (slower, more realistic progress).
    `forget`: the new instruction keeps none of the current rules (as small models often rewrite from
    scratch), which makes candidates trade off against each other instead of forming a single chain.
    """

    def __init__(self, noise: float = 0.0, max_rules: int = 1, seed: int = 0, latency: float = 0.0,
                 forget: bool = False, name: str = "sim-reflection") -> None:
        self.name, self.noise, self.max_rules, self.latency = name, noise, max_rules, latency
        self.forget, self.seed, self.calls = forget, seed, 0

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        # the reflection prompt; on a retry it is followed by the rejected answer and a hint
        prompt = next(m["content"] for m in messages if "<current_instruction>" in m.get("content", ""))
        current = prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
        rng = random.Random(f"{self.seed}:{params.get('seed')}:{len(messages)}")
        if rng.random() < self.noise:
            bad = rng.choice([
                "", "Certainly! Please provide the inputs you want me to work on.",
                f"<new_instruction>{current}</new_instruction>",
                "<new_instruction>" + prompt.split("[Input]\n", 1)[-1][:200] + "</new_instruction>",
            ])
            return Completion(bad, Usage(len(prompt) // 4, len(bad) // 4))
        feedback = " ".join(re.findall(r"\[Feedback\][^\n]*\n([^\n]*)", prompt))
        missing = [r for r in dict.fromkeys(re.findall(r"rule-\d+", feedback)) if r not in current]
        added = " ".join(f"Apply {r}." for r in missing[: self.max_rules])
        base = re.sub(r"\s*Apply rule-\d+\.", "", current) if self.forget else current
        text = f"Thinking about the feedback.\n<new_instruction>{base} {added}".rstrip()
        return Completion(text + "</new_instruction>", Usage(len(prompt) // 4, 40))


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    if output == example.gold:
        return Score(1.0, "Correct.")
    kind = _Q.search(example.inputs["q"]).group(2)  # type: ignore[union-attr]
    return Score(0.0, f"Wrong: expected {example.gold}. Questions of kind {kind} need rule-{kind}.")


async def two_component_program(candidate: Candidate, example: Example, ctx: Context) -> str:
    """Even kinds are handled by component `a`, odd kinds by `b`."""
    kind = int(_Q.search(example.inputs["q"]).group(2))  # type: ignore[union-attr]
    return await ctx.lm("a" if kind % 2 == 0 else "b", example.inputs["q"])


def task(n_train: int = 12, n_val: int = 12, kinds: int = 4, components: int = 1) -> Task:
    """A simulated task: one instruction, or two components (`a` for even kinds, `b` for odd)."""
    from gepetto.program import single_instruction

    if components == 1:
        program, seed = single_instruction("instruction"), Candidate(instruction="Answer the question.")
    else:
        program, seed = two_component_program, Candidate(a="Answer the question.", b="Answer the question.")
    return Task("sim", program, metric, seed, examples(n_train, kinds, "train"), examples(n_val, kinds, "val"),
                examples(n_val, kinds, "test"), "simulated task with a known optimum")


def load(data_dir: Any = None, *, seed: int = 0, n_train: int = 12, n_val: int = 12, n_test: int = 12,
         kinds: int = 4, components: int = 1, **_: Any) -> Task:
    """The simulated task for the task registry (`--task sim`); the data are generated, `seed` is unused."""
    t = task(n_train=n_train, n_val=n_val, kinds=kinds, components=components)
    t.testset = examples(n_test, kinds, "test")
    return t


def lm_from_name(name: LMName) -> SimTaskLM | SimReflectionLM:
    """The LM a name `sim:task?latency=...` or `sim:reflection?noise=...` stands for."""
    if name.model == "task":
        return SimTaskLM(latency=name.options.get("latency", 0.0), name=name.text)
    return SimReflectionLM(name=name.text, **name.options)

