"""A stored run's candidates scored on a split of its task, most often the held-out test set the optimiser never saw
(`gepetto evaluate RUN --split test`, `gepetto.evaluate_run`). The scores are kept with the run (an `evaluation`
event in its log: `gepetto show`, the report, `compare` and `export --rollouts` read them), never among the run's
own rollouts, which a resume replays.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gepetto.config import PYTHON, ConfigError, RunConfig, stored_config
from gepetto.engine.pareto import stored_best
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, MeteredLM, RedactingLM, aclose_lm
from gepetto.program import Metric, Program, Rollout, Task, run_rollout
from gepetto.store.sqlite import RunStore, StoreError, shown, store_exists
from gepetto.types import Candidate, Example

SPLITS: tuple[str, ...] = ("test", "val", "train")


@dataclass
class CandidateScores:
    """One stored candidate's scores on the split: its index in the run, what it is to the run (seed, best)."""

    index: int
    label: str
    candidate: Candidate
    rollouts: list[Rollout]

    @property
    def mean(self) -> float:
        return sum(r.score.value for r in self.rollouts) / len(self.rollouts) if self.rollouts else float("nan")

    @property
    def scores(self) -> dict[str, float]:
        return {r.example_id: r.score.value for r in self.rollouts}


@dataclass
class RunEvaluation:
    """What `gepetto.evaluate_run` measured: each candidate's scores on the split's examples."""

    run: str
    split: str
    examples: int
    candidates: list[CandidateScores]
    overlap: int = 0  # examples of the split that the run also trained or validated on (a leak, if not 0)
    ledger: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> CandidateScores | None:
        """The run's best candidate (by validation), if it was scored."""
        return next((c for c in self.candidates if c.label == "best"), None)

    @property
    def seed(self) -> CandidateScores | None:
        """The seed candidate (index 0), if it was scored."""
        return next((c for c in self.candidates if c.index == 0), None)

    def summary(self) -> str:
        parts = [f"{c.label} (#{c.index}) {c.mean:.3f}" for c in self.candidates]
        return f"{self.split} ({self.examples} examples) of run {self.run!r}: " + ", ".join(parts)

    def to_event(self, task_lm: str) -> dict[str, Any]:
        """What the run store keeps (an `evaluation` event): the means, the scores and every rollout."""
        return {
            "split": self.split, "examples": self.examples, "overlap": self.overlap, "task_lm": task_lm,
            "time": time.time(), "ledger": self.ledger,
            "candidates": [{"index": c.index, "id": c.candidate.id, "label": c.label, "mean": c.mean,
                            "scores": c.scores} for c in self.candidates],
            "rollouts": [{"candidate": c.index, "candidate_id": c.candidate.id, "example_id": r.example_id,
                          "score": r.score.value, "feedback": r.score.feedback, "output": r.output, "error": r.error}
                         for c in self.candidates for r in c.rollouts],
        }


def _labels(stored: list[dict[str, Any]], wanted: Sequence[int | str] | None,
            result: Mapping[str, Any] | None = None) -> dict[int, str]:
    """Candidate index -> label ("best", "seed" or "#3") for the candidates to score: by default the seed and the
    best (the one the run returned, `stored_best`; one candidate, labelled best, when the seed is the best)."""
    best = stored_best(stored, result)
    best = stored[best]["index"] if best is not None else None
    labels: dict[int, str] = {}
    for item in wanted if wanted is not None else ["seed", "best"]:
        if item == "seed":
            index = 0
        elif item == "best" and best is not None:
            index = best
        else:
            try:
                index = int(item)
            except (TypeError, ValueError):
                raise ConfigError(f"candidate {item!r}: give an index (0-{len(stored) - 1}), 'seed' or "
                                  "'best'") from None
            if not 0 <= index < len(stored):
                raise ConfigError(f"candidate {index}: the run has candidates 0-{len(stored) - 1}")
        labels[index] = "best" if index == best else "seed" if index == 0 else f"#{index}"
    return labels


def _task_of(cfg: RunConfig, name: str, task: Task | None) -> Task:
    if task is not None:
        return task
    if cfg.task.startswith(PYTHON):
        raise ConfigError(f"run {name!r} was started from Python ({cfg.task}): its program cannot be loaded from a "
                          "name; call gepetto.evaluate_run(..., task=gepetto.Task(...)) or give examples=, metric= "
                          "and program=")
    from gepetto.runner import load_run_task

    return load_run_task(cfg, Ledger())


def _split_examples(task: Task, split: str) -> list[Example]:
    if split not in SPLITS:
        raise ConfigError(f"split {split!r}: one of {', '.join(SPLITS)}")
    examples = {"test": task.testset, "val": task.valset, "train": task.trainset}[split]
    if not examples:
        why = " (a Task's testset: held-out examples never used to optimise)" if split == "test" else ""
        raise ConfigError(f"task {task.name!r} has no {split} examples{why}")
    return list(examples)


def _task_lm(cfg: RunConfig, storage: str | Path, given: LM | str | None) -> tuple[LM, str]:
    """The LM to score with (and its name): the one given (an object, or a name), else the run's task LM; behind
    the run's response cache, as the run had it."""
    if given is not None and not isinstance(given, str):
        lm, name = given, f"{PYTHON}{getattr(given, 'name', type(given).__name__)}"
    else:
        name = given or cfg.task_lm
        if name.startswith(PYTHON):
            raise ConfigError(f"the run's task LM is an object given in Python ({name}): pass task_lm=")
        from gepetto.lm.names import make_lm

        lm = make_lm(name)
    if cfg.cache != "off":
        from gepetto.lm.cache import CachedLM

        lm = CachedLM(lm, storage, mode=cfg.cache)
    return lm, name


async def _score_all(program: Program, metric: Metric, candidates: Mapping[int, Candidate], examples: list[Example],
                     lm: LM, cfg: RunConfig, max_concurrency: int) -> dict[int, list[Rollout]]:
    sem = asyncio.Semaphore(max_concurrency)

    async def one(cand: Candidate, ex: Example) -> Rollout:
        async with sem:
            return await run_rollout(program, metric, cand, ex, lm, cfg.task_lm_params, cfg.rollout_timeout)

    order = list(candidates.items())
    tasks = [asyncio.ensure_future(one(c, ex)) for _, c in order for ex in examples]
    try:
        flat = await asyncio.gather(*tasks)
    except BaseException:  # (an LM outage, say: the other rollouts are stopped, not left running or unread)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        await aclose_lm(lm)
    n = len(examples)
    return {i: list(flat[k * n:(k + 1) * n]) for k, (i, _) in enumerate(order)}


def evaluate_stored_run(
    run: str,
    *,
    storage: str | Path,
    split: str = "test",
    candidates: Sequence[int | str] | None = None,
    task: Task | None = None,
    examples: Sequence[Example] | None = None,
    metric: Metric | None = None,
    program: Program | None = None,
    task_lm: LM | str | None = None,
    max_concurrency: int | None = None,
    record: bool = True,
) -> RunEvaluation:
    """Score candidates of the stored run `run` (default: the seed and the best) on the `split` examples of its
    task, and keep the scores with the run (`record`). The task is loaded as `gepetto optimize` loads it (a
    built-in task, or `file.py:make_task` with the run's task options); a run started from Python needs `task=`,
    or `examples=`, `metric=` and `program=`. The task LM is the run's, behind the run's response cache.
    An LM that gives no answer raises LMUnavailable; a program or metric error scores 0, as in a run."""
    if not store_exists(storage):
        raise StoreError(f"no run store at {shown(storage)}")
    store = RunStore(storage) if record else RunStore(storage, readonly=True)
    path = store.path
    try:
        info = store.get_run(run)
        if info is None:
            known = ", ".join(r.name for r in store.list_runs()) or "none"
            raise ConfigError(f"no run named {run!r} in {path} (runs: {known})")
        cfg = stored_config(run, path, info.config, resume=False)
        stored = store.candidates(run)
        if not stored:
            raise ConfigError(f"run {run!r} has no validated candidate yet")
        if task is None and examples is not None and metric is not None:
            task = Task(run, program or _default_program(stored), metric, Candidate(stored[0]["texts"]), [], [])
        loaded = _task_of(cfg, run, task)
        data = list(examples) if examples is not None else _split_examples(loaded, split)
        labels = _labels(stored, candidates, info.result)
        chosen = {i: Candidate(stored[i]["texts"]) for i in labels}
        lm, lm_name = _task_lm(cfg, storage, task_lm)
        ledger = Ledger(prices=dict(cfg.prices))
        metered = RedactingLM(MeteredLM(lm, ledger, "task"))
        concurrency = max_concurrency or cfg.max_concurrency
        scored = asyncio.run(_score_all(loaded.program, loaded.metric, chosen, data, metered, cfg, concurrency))
        used = set(store.examples(run, "train")) | set(store.examples(run, "val"))
        overlap = len({e.id for e in data} & used) if split == "test" else 0
        result = RunEvaluation(run, split, len(data), [CandidateScores(i, labels[i], chosen[i], scored[i])
                                                       for i in labels], overlap, ledger.to_dict())
        if record:
            store.add_event(run, "evaluation", result.to_event(lm_name))
        return result
    finally:
        store.close()


def _default_program(stored: list[dict[str, Any]]) -> Program:
    from gepetto.program import single_instruction

    texts = stored[0]["texts"]
    if len(texts) != 1:
        raise ConfigError("a run with several components needs program= to be evaluated")
    return single_instruction(next(iter(texts)))


__all__ = ["CandidateScores", "RunEvaluation", "evaluate_stored_run"]
