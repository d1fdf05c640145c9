"""A simulated optimisation problem with a known optimum: cheap, exact and deterministic.

Each example is of some "kind" k; the task LM answers it correctly only when the instruction of the
component handling that kind mentions `rule-k`. The metric's feedback names the missing rule, and the
simulated reflection LM adds the rules it reads in the feedback to the instruction. Used by the tests and
by the benchmarks (sample efficiency, wall time, engine overhead) where real LMs would be slow or noisy, and
from the command line as `--task sim --task-lm sim:task --reflection-lm sim:reflection` (docs/runs.md).

The simulated LMs only understand this task's questions ("question N kind K"): given another task they refuse
with an LMSetupError that says so (which stops a run at once), instead of answering nonsense that scores 0.
With `?strict=false` they answer anyway, as before: "?" from `sim:task`, the instruction unchanged from
`sim:reflection` (a plumbing test of another task).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from typing import Any

from gepetto.lm.base import Completion, LMSetupError, Message, Usage
from gepetto.lm.names import LMName
from gepetto.program import Context, Task, TraceEntry
from gepetto.types import Candidate, Example, Score

_Q = re.compile(r"question (\d+) kind (\d+)")


def examples(n: int, kinds: int, prefix: str = "ex") -> list[Example]:
    return [Example({"q": f"question {i} kind {i % kinds}"}, gold=f"answer-{i}", id=f"{prefix}-{i}")
            for i in range(n)]


def _refusal(name: str, what: str, got: str) -> LMSetupError:
    return LMSetupError(f"{name} is a simulated LM: it {what} only for the simulated task (gepetto optimize --task "
                        f"sim; questions like 'question 3 kind 1'), and this task sent {got[:80]!r}. Give a real LM "
                        "(docs/lm.md), or try the simulated task")


class SimTaskLM:
    """Answers `answer-i` when the system prompt holds `rule-k` for the question's kind, else a wrong answer.
    A message that is not a simulated question is refused (LMSetupError), or with `strict=False` answered "?"."""

    def __init__(self, latency: float = 0.0, name: str = "sim-task", strict: bool = True) -> None:
        self.name, self.latency, self.strict, self.calls = name, latency, strict, 0

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        system = messages[0]["content"]
        m = _Q.search(messages[-1]["content"])
        if m is None:
            if self.strict:
                raise _refusal(self.name, "answers", str(messages[-1]["content"]))
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
    `strict`: a request showing no simulated question is refused (LMSetupError); otherwise answered unchanged.
    """

    def __init__(self, noise: float = 0.0, max_rules: int = 1, seed: int = 0, latency: float = 0.0,
                 forget: bool = False, name: str = "sim-reflection", strict: bool = True) -> None:
        self.name, self.noise, self.max_rules, self.latency = name, noise, max_rules, latency
        self.forget, self.seed, self.strict, self.calls = forget, seed, strict, 0

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls += 1
        if self.latency:
            await asyncio.sleep(self.latency)
        # the reflection prompt; on a retry it is followed by the rejected answer and a hint
        prompt = next(m["content"] for m in messages if "<current_instruction>" in m.get("content", ""))
        current = prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
        if self.strict and _Q.search(prompt) is None:  # the examples shown are not the simulated task's
            shown = prompt.split("[Input]\n", 1)[-1] if "[Input]" in prompt else prompt
            raise _refusal(self.name, "writes instructions", shown)
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
    options = dict(name.options)
    if name.model == "task":
        unknown = sorted(set(options) - {"latency", "strict"})
        if unknown:
            raise ValueError(f"LM name {name.text!r}: sim:task takes latency and strict, not {unknown}")
        return SimTaskLM(name=name.text, **options)
    return SimReflectionLM(name=name.text, **options)

