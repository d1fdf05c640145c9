"""Run an existing `gepa` adapter, unchanged, on gepetto's engine (budget contract, vetting, run store, report).

Any object with gepa's adapter methods works (duck typing: `gepa` need not be installed):

- `evaluate(batch, candidate, capture_traces) -> EvaluationBatch(outputs, scores, trajectories, ...)`
- `make_reflective_dataset(candidate, eval_batch, components_to_update) -> {component: [record, ...]}`

The adapter becomes a gepetto program and metric: one rollout is one data instance, run as
`evaluate([instance], candidate, capture_traces=True)`; its score is the rollout's score, and the records of
`make_reflective_dataset` (`Inputs`, `Generated Outputs`, `Feedback`) become the component's trace entries, so
reflection on a component sees exactly what gepa's would. docs/integrations.md lists what differs from gepa.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gepetto.lm.base import LM, Completion, LMError
from gepetto.program import Context, Metric, Program, TraceEntry, render_value
from gepetto.types import Candidate, Example, Score, ScoreRangeError, as_real

# the keys of gepa's recommended reflective record; any other key of a record is shown after the outputs
INPUTS, OUTPUTS, FEEDBACK = "Inputs", "Generated Outputs", "Feedback"
DATA_KEY = "gepa_data_inst"  # Example.metadata key holding the adapter's own data instance


class AdapterError(TypeError):
    """The object is no gepa adapter, or its answer breaks the protocol (wrong lengths, missing fields)."""


class AdapterTaskLM:
    """The task LM slot of an adapter run: the adapter calls its own LM, so gepetto's is never called (and the
    ledger's task role stays empty: gepa adapters report no tokens)."""

    def __init__(self, adapter: Any) -> None:
        self.name = f"gepa-adapter:{type(adapter).__name__}"

    async def complete(self, messages: Sequence[Any], **params: Any) -> Completion:
        raise LMError("a gepa adapter calls its own LM: gepetto's task LM is not used in an adapter run")


def check_adapter(adapter: Any) -> None:
    """Raise AdapterError unless `adapter` has gepa's two required methods."""
    missing = [m for m in ("evaluate", "make_reflective_dataset") if not callable(getattr(adapter, m, None))]
    if missing:
        raise AdapterError(f"{type(adapter).__name__} is not a gepa adapter: it lacks {', '.join(missing)} "
                           "(see gepa.core.adapter.GEPAAdapter)")


def _plain(value: Any) -> Any:
    """A data instance as JSON-able inputs: a mapping as a dict, a dspy.Example via toDict, a dataclass as a dict."""
    if isinstance(value, Mapping):
        return dict(value)
    if callable(getattr(value, "toDict", None)):  # dspy.Example
        return dict(value.toDict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return {"input": value}


def _content_id(inputs: Mapping[str, Any]) -> str | None:
    """A stable id from the content, or None when the content has no stable JSON form (arbitrary objects)."""
    try:
        blob = json.dumps(inputs, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def as_examples(data: Sequence[Any], split: str) -> list[Example]:
    """gepa data instances as gepetto Examples: the instance rides along in `metadata` for the adapter; the
    id is a hash of the content (so the same instance in train and val shares rollouts) or, for content with no
    JSON form, `split-index`. Repeated instances get distinct ids (`id#2`, ...)."""
    out: list[Example] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(data):
        inputs = _plain(item)
        base = _content_id(inputs) or f"{split}-{i}"
        seen[base] = seen.get(base, 0) + 1
        eid = base if seen[base] == 1 else f"{base}#{seen[base]}"
        out.append(Example(inputs, None, {DATA_KEY: item}, eid))
    return out


def _render(value: Any) -> str:
    """A record field as reflection shows it: text as is, a mapping as `key: value` lines, else JSON."""
    if isinstance(value, Mapping):
        return "\n".join(f"{k}: {render_value(v)}" for k, v in value.items())
    return render_value(value)


def record_entries(ctx: Context, component: str, records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Record one component's reflective records as its trace entries; returns their feedback texts."""
    feedbacks = []
    for rec in records:
        rec = dict(rec) if isinstance(rec, Mapping) else {OUTPUTS: rec}
        feedback = rec.pop(FEEDBACK, None)
        if INPUTS in rec or OUTPUTS in rec:
            inputs, output = _render(rec.pop(INPUTS, "")), _render(rec.pop(OUTPUTS, ""))
        else:  # no recommended keys: everything is context
            inputs, output = _render(rec), ""
            rec = {}
        if rec:  # extra keys (a rationale, a score, ...) follow the outputs
            output = f"{output}\n{_render(rec)}" if output else _render(rec)
        text = None if feedback is None else _render(feedback)
        ctx.record(component, inputs=inputs, output=output, feedback=text)
        if text:
            feedbacks.append(text)
    return feedbacks


def _item(values: Any, what: str, adapter: Any) -> Any:
    if values is None or len(values) != 1:
        n = "None" if values is None else len(values)
        raise AdapterError(f"{type(adapter).__name__}.evaluate on a batch of 1 returned {n} {what}; gepa's "
                           "protocol asks for one per example")
    return values[0]


class AdapterRun:
    """The program and metric of an adapter run: `program(candidate, example, ctx)` evaluates one instance and
    records the reflective records; `metric` turns the adapter's score into a gepetto Score."""

    def __init__(self, adapter: Any, components: Sequence[str], order: Sequence[str], *,
                 score_range: tuple[float, float] | None = None, serial: bool = True) -> None:
        check_adapter(adapter)
        if score_range is not None:
            lo, hi = (float(x) for x in score_range)
            if not hi > lo:
                raise ValueError(f"score_range must be (low, high) with high > low, got {score_range!r}")
            score_range = (lo, hi)
        self.adapter, self.components, self.order = adapter, list(components), list(order)
        self.score_range = score_range
        # gepa calls an adapter from one thread; unless told it is thread-safe, so do we
        self._lock: threading.Lock | None = threading.Lock() if serial else None
        self._verdicts: dict[int, tuple[Any, list[str], Any]] = {}  # id(trace) -> (score, feedbacks, objectives)
        self._verdict_lock = threading.Lock()
        self._warned: set[str] = set()
        self._one_by_one = False  # the adapter takes one component per make_reflective_dataset call

    def _candidate(self, candidate: Candidate) -> dict[str, str]:
        """The candidate as the adapter expects it: a plain dict, in the seed's component order."""
        return {k: candidate[k] for k in self.order}

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._lock is None:
            return fn(*args)
        with self._lock:
            return fn(*args)

    def program(self, candidate: Candidate, example: Example, ctx: Context) -> Any:
        adapter = self.adapter
        data = example.metadata.get(DATA_KEY, example.inputs)
        texts = self._candidate(candidate)
        batch = self._call(adapter.evaluate, [data], texts, True)
        output = _item(getattr(batch, "outputs", None), "outputs", adapter)
        score = _item(getattr(batch, "scores", None), "scores", adapter)
        objectives = getattr(batch, "objective_scores", None)
        objectives = objectives[0] if objectives else None
        feedbacks = self._reflect(batch, texts, ctx)
        with self._verdict_lock:
            self._verdicts[id(ctx.trace)] = (score, feedbacks, objectives)
        return output

    def _reflect(self, eval_batch: Any, texts: dict[str, str], ctx: Context) -> list[str]:
        """make_reflective_dataset for every evolved component: at once, or one by one for adapters that take one
        component per call (gepa's DefaultAdapter asserts it). A component whose records cannot be made gets
        none: reflection then sees the whole rollout."""
        adapter = self.adapter
        per_component: dict[str, Any] = {}
        if len(self.components) > 1 and not self._one_by_one:
            try:
                dataset = self._call(adapter.make_reflective_dataset, texts, eval_batch, list(self.components))
                per_component = {c: (dataset or {}).get(c) for c in self.components}
            except Exception:
                self._one_by_one = True  # remembered: no failing call on every rollout
        if not per_component:
            for c in self.components:
                try:
                    one = self._call(adapter.make_reflective_dataset, texts, eval_batch, [c])
                    per_component[c] = (one or {}).get(c)
                except Exception as exc:
                    self._warn_once(c, f"{type(adapter).__name__}.make_reflective_dataset failed for component {c!r} "
                                       f"({type(exc).__name__}: {exc}); reflection on it sees whole rollouts instead")
        feedbacks: list[str] = []
        for c in self.components:
            feedbacks += record_entries(ctx, c, per_component.get(c) or [])
        return list(dict.fromkeys(feedbacks))

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=2)

    def metric(self, example: Example, output: Any, trace: list[TraceEntry]) -> Score:
        with self._verdict_lock:
            score, feedbacks, objectives = self._verdicts.pop(id(trace))
        value = as_real(score)
        if value is None:
            raise AdapterError(f"{type(self.adapter).__name__}.evaluate returned score {score!r}; a score must be a "
                               "number")
        if self.score_range is not None:
            lo, hi = self.score_range
            if not lo <= value <= hi:
                raise ScoreRangeError(f"the adapter's score {value} is outside score_range {self.score_range}")
            value = (value - lo) / (hi - lo)
        elif not 0.0 <= value <= 1.0:
            raise ScoreRangeError(f"the adapter's score {value} is outside [0, 1], gepetto's score range: pass "
                                  "score_range=(low, high) to gepa_adapter.optimize to map its scores into it")
        feedback = "\n".join(feedbacks) or Score.coerce(value).feedback
        objs = {str(k): float(v) for k, v in (objectives or {}).items() if as_real(v) is not None}
        return Score(value, feedback, objs)


def adapter_program(adapter: Any, seed_candidate: Mapping[str, str], *, components: Sequence[str] | None = None,
                    score_range: tuple[float, float] | None = None, serial: bool = True) -> tuple[Program, Metric]:
    """The gepetto program and metric that run `adapter` (for `gepetto.optimize`, `evaluate`, a Task, ...)."""
    run = AdapterRun(adapter, components or list(seed_candidate), list(seed_candidate), score_range=score_range,
                     serial=serial)
    cls = type(adapter)

    def program(candidate: Candidate, example: Example, ctx: Context) -> Any:
        return run.program(candidate, example, ctx)

    # a stored run is named after its program (`python:MODULE:QUALNAME`): here, the adapter's class
    program.__module__, program.__qualname__ = cls.__module__, cls.__qualname__
    return program, run.metric


def optimize(
    adapter: Any,
    seed_candidate: Mapping[str, str],
    trainset: Sequence[Any],
    valset: Sequence[Any] | None = None,
    *,
    reflection_lm: LM | str,
    budget: int = 200,
    storage: str | Path | None = None,
    run: str | None = None,
    score_range: tuple[float, float] | None = None,
    max_concurrency: int = 1,
    **options: Any,
) -> Any:
    """Evolve `seed_candidate` (component -> text) with a gepa adapter, on gepetto's engine: returns a
    `gepetto.Result` (`result.best_candidate.to_dict()` is gepa's `best_candidate`).

    `trainset`/`valset`: the adapter's data instances (valset defaults to trainset, as in gepa). `budget`:
    rollouts, one per data instance evaluated. `score_range=(low, high)`: map adapter scores into gepetto's
    [0, 1] (without it a score outside [0, 1] fails the rollout). `max_concurrency`: instances evaluated at once,
    each in its own `evaluate([instance])` call; 1 (the default) calls the adapter from one thread at a time as
    gepa does; raise it for a thread-safe adapter. `storage`/`run`, `tracking` and every other option are
    `gepetto.optimize`'s (seed, minibatch_size, merge, component_descriptions, components, callbacks, ...).
    """
    from gepetto.api import optimize as run_optimize

    check_adapter(adapter)
    if getattr(adapter, "propose_new_texts", None) is not None:
        warnings.warn(f"{type(adapter).__name__}.propose_new_texts is not used: gepetto proposes with its own "
                      "reflection prompt and vets every proposal (docs/integrations.md)", UserWarning, stacklevel=2)
    if not seed_candidate:
        raise ValueError("seed_candidate is empty: give at least one component (name -> text)")
    program, metric = adapter_program(adapter, seed_candidate, components=options.get("components"),
                                      score_range=score_range, serial=max_concurrency <= 1)
    train = as_examples(trainset, "train")
    val = as_examples(valset, "val") if valset is not None else None
    if "task_lm" in options:
        raise TypeError("task_lm= has no meaning for a gepa adapter: the adapter calls its own LM")
    return run_optimize(dict(seed_candidate), train, metric, valset=val, program=program,
                        task_lm=AdapterTaskLM(adapter), reflection_lm=reflection_lm, budget=budget,
                        storage=storage, run=run, max_concurrency=max_concurrency, **options)
