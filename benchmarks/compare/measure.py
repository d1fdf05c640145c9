"""What both systems are measured with: independent counters, one record per run, gepetto's runner,
baselines, and the markdown table and plot. Nothing here imports `gepa` (see `gepa_side.py`).

The counters sit between each optimiser and the shared pieces: `CountingMetric` counts every metric call
(= rollout) and `CountingLM` every LM call and its tokens, so both systems are counted by the same code
whatever they report themselves. A run's curve is (metric calls so far, best validation score so far),
sampled whenever the optimiser learns a new candidate's validation score.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gzip
import io
import json
import math
import os
import platform
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.compare.real_summary import rollouts_to_reach

from gepetto.api import evaluate_async, optimize
from gepetto.engine.events import CandidateAdded, Event, Outcome, ProposalTested, ReflectionAnswered
from gepetto.lm.base import LM, Completion, Message
from gepetto.program import Metric, Task, TraceEntry
from gepetto.types import Candidate, Example, Score

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def gepa_version() -> str:
    """The installed reference gepa's version (the pages say which one they measured)."""
    from importlib.metadata import version

    return version("gepa")


def header(title: str, argv: Sequence[str]) -> list[str]:
    """The first lines of a results page of `run.py`: its title, the command, the machine and the date."""
    return [
        f"# {title}", "",
        f"Command: `python benchmarks/compare/run.py {' '.join(argv)}`", "",
        f"Machine: {os.cpu_count()} CPU cores, no GPU; Python {platform.python_version()}; gepa {gepa_version()}; "
        f"date {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.", "",
    ]


WASTE_KINDS = ("empty", "unchanged", "echo", "chat")
JSON_BYTES = 100_000  # raw numbers larger than this are written as X.json.gz


class CountingMetric:
    """Wraps a metric; `calls` is the number of rollouts judged (thread-safe)."""

    def __init__(self, metric: Metric) -> None:
        self.metric, self.calls = metric, 0
        self._lock = threading.Lock()

    def __call__(self, example: Example, output: Any, trace: list[TraceEntry]) -> Any:
        with self._lock:
            self.calls += 1
        return self.metric(example, output, trace)


class CountingLM:
    """Wraps an LM (gepetto's protocol); counts calls and tokens as the backend reports them."""

    def __init__(self, lm: LM) -> None:
        self.lm, self.name = lm, lm.name
        self.calls = self.input_tokens = self.output_tokens = self.errors = 0
        self._lock = threading.Lock()

    def _count(self, out: Completion) -> Completion:
        with self._lock:
            self.calls += 1
            self.input_tokens += out.usage.input_tokens
            self.output_tokens += out.usage.output_tokens
        return out

    def _failed(self) -> None:
        with self._lock:
            self.errors += 1

    def respond(self, messages: Sequence[Message], **params: Any) -> Completion:
        """Synchronous fast path, for scripted LMs that have one."""
        try:
            return self._count(self.lm.respond(messages, **params))  # type: ignore[attr-defined]
        except Exception:
            self._failed()
            raise

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        try:
            return self._count(await self.lm.complete(messages, **params))
        except Exception:
            self._failed()
            raise

    def snapshot(self) -> tuple[int, int, int]:
        return self.calls, self.input_tokens, self.output_tokens


@dataclass
class RunRecord:
    """Everything measured about one optimisation run."""

    system: str
    task: str
    seed: int
    budget: int
    test_score: float
    best_val: float
    seed_val: float
    rollouts_own: int  # the system's own count (gepetto: rollouts_used; gepa: total_metric_calls)
    rollouts_counted: int  # metric calls counted by the harness during optimisation (metric_checks included)
    wall_s: float
    task_calls: int
    task_tokens: tuple[int, int]
    reflection_calls: int
    reflection_tokens: tuple[int, int]
    curve: list[tuple[int, float]]
    candidates: int
    proposals: dict[str, int] = field(default_factory=dict)
    best_candidate: dict[str, str] = field(default_factory=dict)
    note: str = ""
    curve_s: list[float] = field(default_factory=list)  # seconds since the start, for each curve point
    # (rollouts, test score of the candidate the run would have returned then): each time the best validation
    # score rose; only where test scores cost nothing (the simulated track: `held_out_curve`)
    test_curve: list[tuple[int, float]] = field(default_factory=list)
    metric_checks: int = 0  # of rollouts_counted, the metric calls that judged no rollout (gepetto: golds as answers)

    @property
    def rollouts_to_95(self) -> int | None:
        """Metric calls spent when the best validation score first reached 95% of its final value."""
        return rollouts_to_fraction(self.curve, 0.95)

    @property
    def seconds_to_95(self) -> float | None:
        """Wall time when the best validation score first reached 95% of its final value."""
        if len(self.curve_s) != len(self.curve):
            return None
        timed = [(t, score) for t, (_, score) in zip(self.curve_s, self.curve, strict=True)]
        return rollouts_to_fraction(timed, 0.95)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rollouts_to_95"] = self.rollouts_to_95
        d["seconds_to_95"] = self.seconds_to_95
        return d


def rollouts_to_fraction(curve: Sequence[tuple[Any, float]], fraction: float) -> Any:
    if not curve:
        return None
    final = max(score for _, score in curve)
    target = fraction * final
    return next((used for used, score in curve if score >= target - 1e-12), None)


def proposal_accounting(kinds: Sequence[str], paid: Sequence[bool], *, rejected_minibatch: int, accepted: int,
                        merges_accepted: int = 0, merges_rejected: int = 0, retests: int = 0) -> dict[str, int]:
    """Reflection answers by kind, how many useless ones were paid for with rollouts, and the minibatch verdicts."""
    out: dict[str, int] = {"answers": len(kinds)}
    counts = Counter(kinds)
    for kind in WASTE_KINDS:
        out[kind] = counts.get(kind, 0)
    out["useless"] = sum(out[k] for k in WASTE_KINDS)
    out["useless_paid"] = sum(1 for k, p in zip(kinds, paid, strict=False) if p and k in WASTE_KINDS)
    out["rejected_minibatch"] = rejected_minibatch
    out["accepted"] = accepted
    out["merges_accepted"] = merges_accepted
    out["merges_rejected"] = merges_rejected
    out["retests"] = retests  # proposals whose tie was tested again on fresh examples (accept "paired")
    return out


def reflection_kinds(lm: Any) -> list[str] | None:
    """The scripted reflection LM's log of answer kinds (None for a real LM)."""
    inner = getattr(lm, "lm", lm)
    log = getattr(inner, "log", None)
    return list(log) if isinstance(log, list) else None


GEPETTO_KIND = {"": "edit", "empty": "empty", "unchanged": "unchanged", "chat reply": "chat",
                "echoes the examples": "echo", "truncated": "empty"}


def run_gepetto(task: Task, task_lm: LM, reflection_lm: LM, *, budget: int, seed: int, system: str = "gepetto",
                test_lm: LM | None = None, events: Path | None = None, held_out_curve: bool = False,
                **config: Any) -> RunRecord:
    """One gepetto run through its public `optimize`, counted by the harness; with `events`, each reflection
    answer, minibatch test and new candidate is appended there as a JSON line, with its time (for diagnosis);
    with `held_out_curve`, the test score of each new best candidate is measured after the run (`test_curve`)."""
    metric, tlm, rlm = CountingMetric(task.metric), CountingLM(task_lm), CountingLM(reflection_lm)
    curve: list[tuple[int, float]] = []
    curve_s: list[float] = []
    t0 = time.perf_counter()
    verdicts: list[str] = []  # vet verdict of every reflection answer, in call order ("" = kept)
    paid: list[bool] = []  # whether that answer was tried on a minibatch (exact with proposals_per_round=1)
    bests: list[tuple[int, dict[str, str]]] = []  # (rollouts, candidate) each time the best validation score rose
    retests = 0

    def on_event(event: Event) -> None:
        if events is not None and isinstance(event, (ReflectionAnswered, ProposalTested, CandidateAdded)):
            data = {"candidate": event.record.index, "val": event.record.mean} if isinstance(
                event, CandidateAdded) else {k: v for k, v in asdict(event).items() if k != "raw"}
            with open(events, "a") as f:
                f.write(json.dumps({"system": system, "seed": seed, "t": round(time.perf_counter() - t0, 2),
                                    "kind": event.kind, "rollouts": metric.calls, **data}, default=str) + "\n")
        if isinstance(event, CandidateAdded):
            if not curve or event.best > curve[-1][1]:  # (the best is the earliest of ties: this one)
                bests.append((metric.calls, event.record.candidate.to_dict()))
            curve.append((metric.calls, event.best))
            curve_s.append(time.perf_counter() - t0)
        elif isinstance(event, ReflectionAnswered):
            verdicts.append(event.rejected.reason if event.rejected else "")
            paid.append(False)
        elif isinstance(event, ProposalTested):
            nonlocal retests
            retests += bool(event.retested)
            if paid and event.origin is None:  # a reflection answer's child (not a demonstration added)
                paid[-1] = True

    t0 = time.perf_counter()
    result = optimize(task.seed_candidate, task.trainset, metric, valset=task.valset, program=task.program,
                      task_lm=tlm, reflection_lm=rlm, budget=budget, seed=seed, callbacks=on_event, **config)
    wall = time.perf_counter() - t0
    counted, t_snap, r_snap = metric.calls, tlm.snapshot(), rlm.snapshot()
    kinds = reflection_kinds(reflection_lm) or [GEPETTO_KIND.get(v, v) for v in verdicts]
    p = result.proposals
    proposals = proposal_accounting(
        kinds, paid, rejected_minibatch=p.get(Outcome.NOT_BETTER, 0),
        accepted=p.get(Outcome.ACCEPTED, 0), merges_accepted=p.get(Outcome.MERGE_ACCEPTED, 0),
        merges_rejected=p.get(Outcome.MERGE_REJECTED, 0), retests=retests)
    proposals["rejected_before_rollouts"] = sum(v for k, v in p.items() if k.group == "rejected"
                                                and k not in (Outcome.NOT_BETTER, Outcome.RACED_OUT))
    proposals["raced_out"] = p.get(Outcome.RACED_OUT, 0)  # racing: validations cut short (counted apart)
    proposals["racing_saved"] = sum(len(task.valset) - len(c.val_scores) for c in result.raced_out)
    test = test_score(task, result.best_candidate, test_lm or task_lm)
    return RunRecord(system, task.name, seed, budget, test, result.best_score, result.seed_score,
                     result.rollouts_used, counted, wall, t_snap[0], t_snap[1:], r_snap[0], r_snap[1:],
                     curve, len(result.candidates), proposals, result.best_candidate.to_dict(),
                     note=f"stopped: {result.stop_message}; LM errors: task {tlm.errors}, reflection {rlm.errors}",
                     curve_s=curve_s, test_curve=scored_on_test(task, bests, test_lm or task_lm) if held_out_curve
                     else [], metric_checks=result.metric_checks)


def scored_on_test(task: Task, bests: Sequence[tuple[int, dict[str, str]]], lm: LM) -> list[tuple[int, float]]:
    """A run's held-out curve: (rollouts, test score) for each (rollouts, candidate) at which its best rose."""
    return [(used, test_score(task, c, lm)) for used, c in bests]


def test_score(task: Task, candidate: Candidate | dict[str, str], lm: LM, examples: Sequence[Example] | None = None,
               max_concurrency: int = 8) -> float:
    """Mean score of a candidate on the test split (outside any budget), the same code for every system."""
    data = task.testset if examples is None else examples
    return asyncio.run(evaluate_async(Candidate(dict(candidate)), data, task.metric, program=task.program,
                                      task_lm=lm, max_concurrency=max_concurrency)).mean


def constant_baseline(task: Task) -> tuple[str, float]:
    """The best constant answer (majority class for labels), chosen on train, and its test score."""
    def render(gold: Any) -> str:
        return gold if isinstance(gold, str) else json.dumps(gold)

    options = Counter(render(e.gold) for e in task.trainset)

    def mean(answer: str, data: Sequence[Example]) -> float:
        total = 0.0
        for e in data:
            r = task.metric(e, answer, [])
            total += Score.coerce(r).value if not asyncio.iscoroutine(r) else 0.0
        return total / max(len(data), 1)

    best = max(options, key=lambda a: (mean(a, task.trainset), options[a]))
    return best, mean(best, task.testset)


# ---- reporting -----------------------------------------------------------------------------------

def _fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def mean_std(values: Sequence[float], digits: int = 3) -> str:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return "-"
    m = sum(vals) / len(vals)
    sd = (sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0.0
    return f"{m:.{digits}f} ± {sd:.{digits}f}"


RUN_HEADER = ("| system | seed | test | best val | rollouts (own / counted) | to 95% | wall s | task LM calls (tokens "
              "in+out) | reflection calls (tokens in+out) | answers: useless (empty/unch/echo/chat) | useless paid "
              "| rejected on minibatch | accepted (merges) | candidates | note |")
RUN_RULE = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"


def run_row(r: RunRecord) -> str:
    p = r.proposals
    useless = (f"{p.get('answers', 0)}: {p.get('useless', 0)} ({p.get('empty', 0)}/{p.get('unchanged', 0)}/"
               f"{p.get('echo', 0)}/{p.get('chat', 0)})")
    return (f"| {r.system} | {r.seed} | {_fmt(r.test_score)} | {_fmt(r.best_val)} | {r.rollouts_own} / "
            f"{r.rollouts_counted} | {r.rollouts_to_95 if r.rollouts_to_95 is not None else '-'} | {r.wall_s:.2f} | "
            f"{r.task_calls} ({r.task_tokens[0]}+{r.task_tokens[1]}) | {r.reflection_calls} "
            f"({r.reflection_tokens[0]}+{r.reflection_tokens[1]}) | {useless} | {p.get('useless_paid', 0)} | "
            f"{p.get('rejected_minibatch', 0)} | {p.get('accepted', 0)} ({p.get('merges_accepted', 0)}) | "
            f"{r.candidates} | {r.note} |")


def summary_rows(records: Sequence[RunRecord], optimum: float | None = None, times: bool = False) -> list[str]:
    """Per system: mean ± sd over seeds of test, gap to the optimum, best val, rollouts, to-95%, wall time."""
    lines = ["| system | runs | test | gap to optimum (test) | best val | rollouts counted | to 95% | wall s | "
             + ("wall s to 95% | " if times else "")
             + "wall s per 100 rollouts | reflection calls | useless answers paid |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if times else "")]
    for system in dict.fromkeys(r.system for r in records):
        rs = [r for r in records if r.system == system]
        gap = mean_std([optimum - r.test_score for r in rs]) if optimum is not None else "-"
        to95 = [float(r.rollouts_to_95) for r in rs if r.rollouts_to_95 is not None]
        per100 = [100 * r.wall_s / r.rollouts_counted for r in rs if r.rollouts_counted]
        lines.append(
            f"| {system} | {len(rs)} | {mean_std([r.test_score for r in rs])} | {gap} | "
            f"{mean_std([r.best_val for r in rs])} | {mean_std([float(r.rollouts_counted) for r in rs], 0)} | "
            f"{mean_std(to95, 0)} | {mean_std([r.wall_s for r in rs], 2)} | "
            + (f"{mean_std([r.seconds_to_95 for r in rs if r.seconds_to_95 is not None], 2)} | " if times else "")
            + f"{mean_std(per100, 2)} | "
            f"{mean_std([float(r.reflection_calls) for r in rs], 1)} | "
            f"{mean_std([float(r.proposals.get('useless_paid', 0)) for r in rs], 1)} |")
    return lines


def _xy(r: RunRecord, seconds: bool) -> list[tuple[float, float]]:
    if seconds:
        return [(t, v) for t, (_, v) in zip(r.curve_s, r.curve, strict=True)]
    return [(float(u), v) for u, v in r.curve]


def _x_label(seconds: bool) -> str:
    return "wall time (s)" if seconds else "rollouts (metric calls, counted by the harness)"


def _color(system: str, systems: Sequence[str]) -> str:
    known = {"gepetto": "tab:blue", "gepa": "tab:orange", "gepa+merge": "tab:red", "gepetto-1try": "tab:cyan",
             "gepetto-nomerge": "tab:purple"}
    return known.get(system, f"C{systems.index(system) + 3}")


PNG_BYTES = 60_000  # a committed figure stays under this (save_small)


def save_small(fig: Any, path: Path) -> None:
    """Write a figure as a light PNG: a palette of 32 colours (octree: the lines keep their hues), at a lower
    resolution when it is still too big."""
    from PIL import Image

    for dpi, colors in ((100, 32), (80, 32), (64, 32), (64, 16)):
        raw = io.BytesIO()
        fig.savefig(raw, dpi=dpi, format="png")
        out = io.BytesIO()
        image = Image.open(raw).convert("RGB").quantize(colors=colors, method=Image.Quantize.FASTOCTREE)
        image.save(out, format="png", optimize=True)
        if out.tell() <= PNG_BYTES:
            break
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out.getvalue())


def plot_curves(panels: Sequence[tuple[str, Sequence[RunRecord], dict[str, float]]], path: Path,
                budget_lines: bool = True, legend_outside: bool = False) -> None:
    """One panel per task: best validation score against metric calls, one line per system and seed;
    horizontal reference lines (e.g. optimum, seed, constant baseline) from each panel's dict. With more than
    3 seeds of a system its lines are thin and its legend entry is one, with the number of seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    width = 6.5 * cols + (3.5 if legend_outside else 0)
    fig, axes = plt.subplots(rows, cols, figsize=(width, 4.2 * rows), squeeze=False)
    styles = ["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1))]
    for ax, (title, records, refs) in zip(axes.flat, panels, strict=False):
        systems = list(dict.fromkeys(r.system for r in records))
        seeds = Counter(r.system for r in records)
        labelled: set[str] = set()
        for r in records:
            xs = [0] + [u for u, _ in r.curve]
            ys = [r.curve[0][1] if r.curve else 0.0] + [s for _, s in r.curve]
            if seeds[r.system] <= 3:
                ax.step(xs, ys, where="post", color=_color(r.system, systems),
                        linestyle=styles[r.seed % len(styles)], alpha=0.8, label=f"{r.system} seed {r.seed}")
            else:
                label = None if r.system in labelled else f"{r.system} ({seeds[r.system]} seeds)"
                labelled.add(r.system)
                ax.step(xs, ys, where="post", color=_color(r.system, systems), linewidth=0.7, alpha=0.6,
                        label=label)
        for i, (name, y) in enumerate(refs.items()):
            ax.axhline(y, color="grey", linestyle=[":", "--", "-."][i % 3], linewidth=1)
            ax.annotate(name, (0, y), xytext=(2, 2), textcoords="offset points", fontsize=7, color="grey")
        if budget_lines and records:
            ax.axvline(records[0].budget, color="black", linewidth=0.8, alpha=0.5)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(_x_label(False))
        ax.set_ylabel("best validation score")
        ax.set_ylim(-0.02, 1.02)
        if legend_outside:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend(fontsize=6, ncol=2, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    save_small(fig, path)
    plt.close(fig)


def plot_mean_curves(panels: Sequence[tuple[str, Sequence[RunRecord], dict[str, float]]], path: Path,
                     seconds: bool | Sequence[bool] = False) -> None:
    """Like `plot_curves`, but one line per system: the mean over seeds of the best validation score at each
    rollout count (or second, per panel), with the range over seeds shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels)
    by_time = [seconds] * n if isinstance(seconds, bool) else list(seconds)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.0 * rows), squeeze=False)
    for ax, (title, records, refs), timed in zip(axes.flat, panels, by_time, strict=False):
        systems = list(dict.fromkeys(r.system for r in records))
        top = max((x for r in records for x, _ in _xy(r, timed)), default=1.0)
        grid = [top * i / 300 for i in range(301)]
        for system in systems:
            runs = [r for r in records if r.system == system and r.curve]
            values = [[_step_value(_xy(r, timed), x) for x in grid] for r in runs]
            mean = [sum(col) / len(col) for col in zip(*values, strict=True)]
            lo = [min(col) for col in zip(*values, strict=True)]
            hi = [max(col) for col in zip(*values, strict=True)]
            color = _color(system, systems)
            ax.plot(grid, mean, color=color, label=f"{system} (mean of {len(runs)})")
            ax.fill_between(grid, lo, hi, color=color, alpha=0.12)
        for j, (name, y) in enumerate(refs.items()):
            ax.axhline(y, color="grey", linestyle=[":", "--", "-."][j % 3], linewidth=1)
            ax.annotate(name, (0, y), xytext=(2, 2), textcoords="offset points", fontsize=7, color="grey")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(_x_label(timed))
        ax.set_ylabel("best validation score")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    save_small(fig, path)
    plt.close(fig)


def _step_value(curve: Sequence[tuple[float, float]], x: float) -> float:
    """The best validation score known after `x` metric calls (0 before the seed was scored)."""
    value = 0.0
    for used, score in curve:
        if used > x:
            break
        value = score
    return value


def mean_reaches(curves: Sequence[Sequence[tuple[float, float]]], target: float) -> int | None:
    """The first rollout count at which the mean over runs of a curve's score (e.g. the best validation score)
    reaches `target` (None: never within the runs' spend)."""
    top = int(max(used for curve in curves for used, _ in curve))
    return next((x for x in range(top + 1)
                 if sum(_step_value(c, x) for c in curves) / len(curves) >= target - 1e-9), None)


def reach_rows(records: Sequence[RunRecord], reference: str = "gepa", held_out: bool = False) -> list[str]:
    """The issue's measure of speed: when each system's mean best validation score over seeds first reaches the
    mean of `reference`'s final scores, and that as a multiple of when `reference`'s own mean reaches it; per seed
    pair too. `held_out`: the same on the test score of the candidate each run would have returned at each
    point (`test_curve`), against `reference`'s mean final test score."""
    def curves(system: str) -> dict[int, list[tuple[int, float]]]:
        return {r.seed: c for r in records if r.system == system and (c := r.test_curve if held_out else r.curve)}

    own = curves(reference)
    if not own:
        return []
    target = sum(c[-1][1] for c in own.values()) / len(own)
    base = mean_reaches(list(own.values()), target)
    what = "test score of the candidate it would return" if held_out else "best validation score"
    lines = [f"Rollouts until the mean {what} over seeds first reaches {reference}'s mean final score, "
             f"{target:.3f} (the mean follows the slowest runs, so it moves with the number of seeds); and, per "
             f"seed, when the run first reaches that seed's {reference} final score over when {reference}'s run "
             f"does (median over seeds, and the runs that never reach it):", "",
             f"| system | rollouts | x {reference}'s | per seed: median x | per seed: never |",
             "|---|---:|---:|---:|---:|"]
    for system in dict.fromkeys(r.system for r in records):
        mine = curves(system)
        at = mean_reaches(list(mine.values()), target)
        ratio = f"{at / base:.2f}x" if at is not None and base else "-"
        ratios, never = paired_reach_ratios(mine, own)
        median = f"{statistics.median(ratios):.2f}x" if ratios else "-"
        lines.append(f"| {system} | {'never' if at is None else at} | {ratio} | {median} | {never} |")
    return lines


def paired_reach_ratios(curves: Mapping[int, Sequence[tuple[float, float]]],
                        reference: Mapping[int, Sequence[tuple[float, float]]]) -> tuple[list[float], int]:
    """Per seed with a curve in both: rollouts until the run's curve first reaches the reference run's final
    value, over the rollouts the reference run took to reach it; and how many runs never did."""
    ratios, never = [], 0
    for seed, curve in curves.items():
        if seed not in reference:
            continue
        target = reference[seed][-1][1]
        mine, theirs = rollouts_to_reach(curve, target), rollouts_to_reach(reference[seed], target)
        if mine is None:
            never += 1
        elif theirs:
            ratios.append(mine / theirs)
    return ratios, never


def checkpoint_rows(records: Sequence[RunRecord], checkpoints: Sequence[float], seconds: bool = False) -> list[str]:
    """Best validation score known after N metric calls, or after N seconds (mean ± sd over seeds)."""
    unit = " s" if seconds else ""
    lines = ["| system | " + " | ".join(f"after {c:g}{unit}" for c in checkpoints) + " |",
             "|---|" + "---:|" * len(checkpoints)]
    for system in dict.fromkeys(r.system for r in records):
        rs = [r for r in records if r.system == system]

        def curve(r: RunRecord) -> list[tuple[float, float]]:
            return [(t, v) for t, (_, v) in zip(r.curve_s, r.curve, strict=True)] if seconds else list(r.curve)

        cells = [mean_std([_step_value(curve(r), c) for r in rs]) for c in checkpoints]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return lines


def paired(records: Sequence[RunRecord], a: str, b: str, key: str = "test_score") -> tuple[int, int, int]:
    """Over the seeds both ran: how often `a` scored higher, lower, the same as `b`."""
    left = {r.seed: getattr(r, key) for r in records if r.system == a}
    right = {r.seed: getattr(r, key) for r in records if r.system == b}
    seeds = sorted(set(left) & set(right))
    wins = sum(left[s] > right[s] + 1e-9 for s in seeds)
    losses = sum(left[s] < right[s] - 1e-9 for s in seeds)
    return wins, losses, len(seeds) - wins - losses


def read_text(path: Path) -> str:
    """A results file's text; `X.json` committed compressed is read from `X.json.gz`."""
    if path.suffix != ".gz" and not path.exists() and path.with_name(path.name + ".gz").exists():
        path = path.with_name(path.name + ".gz")
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def load_json(path: Path) -> list[RunRecord]:
    """The runs `save_json` wrote (for replotting without rerunning); `X.json` or `X.json.gz`."""
    runs = json.loads(read_text(path))["runs"]
    fields = set(RunRecord.__dataclass_fields__)
    out = []
    for d in runs:
        d = {k: v for k, v in d.items() if k in fields}
        d["curve"] = [(int(u), float(v)) for u, v in d["curve"]]
        d["test_curve"] = [(int(u), float(v)) for u, v in d.get("test_curve", [])]
        d["task_tokens"], d["reflection_tokens"] = tuple(d["task_tokens"]), tuple(d["reflection_tokens"])
        out.append(RunRecord(**d))
    return out


def save_json(records: Sequence[RunRecord], extra: dict[str, Any], path: Path) -> None:
    """The raw numbers, one run per line (curves rounded), for later analysis."""
    runs = []
    for r in records:
        d = r.to_dict()
        d["curve"] = [[u, round(v, 4)] for u, v in r.curve]
        d["curve_s"] = [round(t, 3) for t in r.curve_s]
        d["test_curve"] = [[u, round(v, 4)] for u, v in r.test_curve]
        runs.append(json.dumps(d, separators=(",", ":")))
    head = json.dumps(extra, separators=(",", ":"))
    text = '{"meta":' + head + ',\n"runs":[\n' + ",\n".join(runs) + "\n]}\n"
    packed = path.with_name(path.name + ".gz")
    if len(text) > JSON_BYTES:  # committed compressed (benchmarks/RESULTS.md)
        packed.write_bytes(gzip.compress(text.encode(), mtime=0))
        path.unlink(missing_ok=True)
    else:
        path.write_text(text)
        packed.unlink(missing_ok=True)


def load_meta(path: Path) -> dict[str, Any]:
    """What `save_json` kept beside the runs (track, argv, references); `X.json` or `X.json.gz`."""
    return dict(json.loads(read_text(path)).get("meta", {}))


RunFn = Callable[..., RunRecord]
