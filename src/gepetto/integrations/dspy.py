"""DSPy programs: evolve the instructions of every predictor of a `dspy.Module` with gepetto.

    import dspy
    from gepetto.integrations import dspy as gdspy

    dspy.configure(lm=dspy.LM("openai/gpt-4.1-mini"))          # the task LM: DSPy calls it, as always
    optimized, result = gdspy.optimize(program, trainset, metric, valset=valset,
                                       reflection_lm="openai:gpt-4.1", budget=300)

Each predictor of the module (`module.named_predictors()`: "classify", "answer.predict", ...) is a component
named by its path, whose text is its signature's instructions. A rollout runs a private copy of the module with
the candidate's instructions (never the module given, which stays untouched) in a worker thread, so rollouts
run concurrently; each predictor call is recorded as a trace entry of its component (its input fields in, its
output fields out, or the answer DSPy could not parse), so reflection on a predictor sees that predictor's own
calls. The metric is DSPy's: `metric(gold, pred)`, `metric(gold, pred, trace)` or dspy.GEPA's
`metric(gold, pred, trace, pred_name, pred_trace)`, returning a number, a `gepetto.Score` or
`dspy.Prediction(score=..., feedback=...)`.

The task LM is DSPy's (`dspy.configure(lm=...)`, a `dspy.context(lm=...)` around the call, or a predictor's own
`lm`); gepetto's task LM is not used. The reflection LM is a gepetto LM: a name such as "local:qwen2.5-coder-1.5b"
or "openai:MODEL@URL", or an LM object. `storage=` and `run=` keep the run in the run store like any program
(`gepetto runs/show/report/export`; calling again with the same `run` resumes it exactly, from the stored
rollouts and reflection answers). The loop's options are `gepetto.optimize`'s: `config=` (a
`gepetto.config.EngineConfig`) with any keyword given (budget, seed, callbacks, proposer, ...) in its place.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    import dspy
except ImportError as exc:  # pragma: no cover - run without DSPy installed
    raise ImportError('gepetto.integrations.dspy needs DSPy: pip install "gepetto[dspy]"') from exc

from gepetto.api import optimize as _optimize
from gepetto.api import optimize_async as _optimize_async
from gepetto.config import DEFAULT_REFLECTION_LM, CacheMode, EngineConfig, UnknownOptionError
from gepetto.engine.loop import Result
from gepetto.events import Callbacks
from gepetto.lm.base import Completion, LMError, LMSetupError, LMUnavailable, Message
from gepetto.program import Context, render_value
from gepetto.types import Candidate, Example, Score

__all__ = ["DSPyTaskLM", "ModuleRun", "optimize", "optimize_async", "seed_candidate", "with_instructions"]

# gepetto.optimize's arguments the integration sets itself: the module is the program, DSPy's LM the task LM
_TAKEN = frozenset({"program", "task_lm", "task_lm_params", "seed_candidate", "trainset", "metric"})
# dspy's LM errors (3.x) by whose fault they are: retrying may help / someone must fix the setup first
_UNAVAILABLE = ("LMTransportError", "LMTimeoutError", "LMServerError", "LMRateLimitError", "LMLockTimeoutError")
_SETUP = ("LMAuthError", "LMBillingError", "LMConfigurationError", "LMUnsupportedModelError")


def _predictors(module: Any) -> list[tuple[str, Any]]:
    if not isinstance(module, dspy.Module):
        raise TypeError(f"module must be a dspy.Module, got {type(module).__name__}")
    named = list(module.named_predictors())
    if not named:
        raise ValueError(f"{type(module).__name__} has no predictors (dspy.Predict, ChainOfThought, ...) to optimise")
    return named


def seed_candidate(module: Any) -> Candidate:
    """The module's instructions as a candidate: predictor name -> its signature's instructions."""
    return Candidate({name: pred.signature.instructions or "" for name, pred in _predictors(module)})


def _apply(module: Any, candidate: Mapping[str, str]) -> Any:
    for name, pred in module.named_predictors():
        if name in candidate:
            pred.signature = pred.signature.with_instructions(candidate[name])
    return module


def with_instructions(module: Any, candidate: Mapping[str, str]) -> Any:
    """A deep copy of `module` whose predictors carry the candidate's instructions (`module` is not changed).

    E.g. `with_instructions(program, result.candidates[3].candidate)` for another candidate of a run.
    """
    unknown = set(candidate) - {name for name, _ in _predictors(module)}
    if unknown:
        raise KeyError(f"candidate names predictors the module does not have: {sorted(unknown)}")
    return _apply(module.deepcopy(), candidate)


class DSPyTaskLM:
    """Stands for the DSPy LM in gepetto's configuration (its name is recorded with a stored run): DSPy makes the
    task calls itself, so this LM is never called."""

    def __init__(self, model: str) -> None:
        self.name = f"dspy:{model}"

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        raise LMError("a DSPy program calls its LM through DSPy (dspy.configure(lm=...)), not through ctx.lm")


class ModuleRun(dict):
    """What the program gave on one example: the prediction's fields (a dict, as stored and shown), with the
    `dspy.Prediction` itself and the DSPy trace [(predictor, inputs, prediction), ...] for the metric."""

    def __init__(self, prediction: Any, trace: list[tuple[Any, dict[str, Any], Any]],
                 names: dict[int, str]) -> None:
        if hasattr(prediction, "toDict"):
            fields = prediction.toDict()
        elif isinstance(prediction, Mapping):
            fields = dict(prediction)
        else:
            fields = {"output": prediction}
        super().__init__(fields)
        self.prediction, self.trace, self._names = prediction, trace, names

    def predictor_trace(self, name: str) -> list[tuple[Any, dict[str, Any], Any]]:
        """The trace entries of one predictor, by its name."""
        return [t for t in self.trace if self._names.get(id(t[0])) == name]

    def called(self) -> list[str]:
        """Names of the predictors this run called, in first-call order."""
        return list(dict.fromkeys(n for t in self.trace if (n := self._names.get(id(t[0]))) is not None))


def _fields_text(values: Mapping[str, Any]) -> str:
    return "\n".join(f"{k}: {v if isinstance(v, str) else render_value(v)}" for k, v in values.items())


def _infrastructure(exc: BaseException) -> LMUnavailable | None:
    """The gepetto error for a DSPy LM failure that is no verdict on the candidate (an outage, a bad key)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        for kind, names in ((LMSetupError, _SETUP), (LMUnavailable, _UNAVAILABLE)):
            classes = tuple(c for n in names if isinstance(c := getattr(dspy, n, None), type))
            if classes and isinstance(cur, classes):
                return kind(f"the DSPy LM failed: {type(cur).__name__}: {cur}")
        cur = cur.__cause__ or cur.__context__
    return None


def _metric_arity(metric: Callable[..., Any]) -> int:
    """How many positional arguments to give the metric: 5 (dspy.GEPA's), 3 (with trace) or 2."""
    try:
        sig = inspect.signature(metric)
    except (TypeError, ValueError):  # a builtin or C callable: DSPy's two-argument form
        return 2
    for n in (5, 3, 2):
        try:
            sig.bind(*([None] * n))
            return n
        except TypeError:
            continue
    raise TypeError("the metric must accept (gold, pred), (gold, pred, trace) or dspy.GEPA's "
                    "(gold, pred, trace, pred_name, pred_trace)")


def _as_score(result: Any) -> Score:
    """A metric's answer as a Score: a Score, a number, or anything with a `score` (and maybe `feedback`)."""
    if isinstance(result, Score):
        return result
    if isinstance(result, (dspy.Prediction, Mapping)) or hasattr(result, "score"):
        get = result.get if isinstance(result, (dspy.Prediction, Mapping)) else lambda k, d=None: getattr(
            result, k, d)
        value = get("score", None)
        if value is None:
            raise TypeError(f"the metric returned {type(result).__name__} without a score")
        feedback = get("feedback", None)
        objectives = get("objective_scores", None) or {}
        base = Score.coerce(value)
        return Score(base.value, str(feedback) if feedback else base.feedback, dict(objectives))
    return Score.coerce(result)


class _Metric:
    """gepetto's metric(example, output, trace) over a DSPy metric; runs it in a worker thread (a metric may call
    an LM) under the same DSPy LM as the program."""

    def __init__(self, metric: Callable[..., Any], originals: Mapping[str, Any], lm: Any,
                 predictor_feedback: bool | None) -> None:
        self.metric, self.originals, self.lm = metric, originals, lm
        self.arity = _metric_arity(metric)
        if predictor_feedback and self.arity < 5:
            raise TypeError("predictor_feedback=True needs a metric taking (gold, pred, trace, pred_name, pred_trace)")
        self.per_predictor = self.arity == 5 if predictor_feedback is None else predictor_feedback
        self.__name__ = getattr(metric, "__name__", type(metric).__name__)

    def _call(self, gold: Any, pred: Any, trace: Any = None, pred_name: str | None = None,
              pred_trace: Any = None) -> Any:
        args = (gold, pred, trace, pred_name, pred_trace)[: self.arity]
        return self.metric(*args)

    def score(self, example: Example, output: ModuleRun) -> Score:
        gold = self.originals[example.id]
        with dspy.context(lm=self.lm):
            # like dspy.GEPA: the score with no trace; feedback for each predictor asked with its name
            score = _as_score(self._call(gold, output.prediction))
            if not self.per_predictor:
                return score
            notes = []
            for name in output.called():
                fb = _as_score(self._call(gold, output.prediction, output.trace, name,
                                          output.predictor_trace(name))).feedback
                if fb and fb != score.feedback:
                    notes.append(f"Feedback on predictor `{name}`: {fb}")
        if not notes:
            return score
        return Score(score.value, "\n".join([score.feedback, *notes]), score.objectives, score.pattern)

    async def __call__(self, example: Example, output: Any, trace: Any) -> Score:
        if not isinstance(output, ModuleRun):
            raise TypeError(f"expected the DSPy program's output, got {type(output).__name__}")
        return await asyncio.to_thread(self.score, example, output)


def _convert(data: Sequence[Any], split: str, originals: dict[str, Any]) -> list[Example]:
    """gepetto Examples (inputs = the example's input fields, gold = the other fields) for DSPy examples; ids are
    content hashes (stable across runs, so a stored run can be resumed), made distinct for repeated examples."""
    out: list[Example] = []
    seen: dict[str, int] = {}
    for i, ex in enumerate(data):
        if not isinstance(ex, dspy.Example):
            raise TypeError(f"{split}[{i}] is a {type(ex).__name__}; give dspy.Example objects "
                            "(dspy.Example(question=..., answer=...).with_inputs('question'))")
        try:
            inputs = dict(ex.inputs().items())
        except ValueError:
            raise TypeError(f"{split}[{i}] has no input fields: call .with_inputs(...) on it, "
                            "e.g. dspy.Example(question=..., answer=...).with_inputs('question')") from None
        gold = dict(ex.labels().items())
        base = Example(inputs, gold).id
        n = seen[base] = seen.get(base, -1) + 1
        eid = base if n == 0 else f"{base}-{n}"
        out.append(Example(inputs, gold, id=eid))
        originals[eid] = ex
    if not out:
        raise ValueError(f"{split} is empty")
    return out


class _Program:
    """Runs the module with a candidate's instructions on one example: gepetto's program(candidate, example, ctx)."""

    def __init__(self, module: Any, originals: Mapping[str, Any], lm: Any, dspy_cache: bool) -> None:
        self.module, self.originals = module, originals
        # the LMs the rollouts use, shared (not copied) by every rollout's copy of the module; without the DSPy
        # cache each is a copy with cache=False (the module's own LMs are left as they are)
        own = {id(p.lm): p.lm for _, p in module.named_predictors() if p.lm is not None}
        self.lms = {k: v if dspy_cache else v.copy(cache=False) for k, v in own.items()}
        self.lm = lm if dspy_cache or lm is None else lm.copy(cache=False)
        self._lock = threading.Lock()

    def instantiate(self, candidate: Mapping[str, str]) -> Any:
        """A private copy of the module with the candidate's instructions; its LMs are the shared ones."""
        with self._lock:  # the module is only read, but some attributes' __deepcopy__ may not be thread-safe
            memo: dict[int, Any] = dict(self.lms)
            try:
                clone = copy.deepcopy(self.module, memo)
            except Exception:  # an attribute that cannot be deep-copied: DSPy's own copy falls back per attribute
                clone = self.module.deepcopy()
                for _, pred in clone.named_predictors():
                    if pred.lm is not None:
                        pred.lm = self.lms.get(id(pred.lm), pred.lm)
        return _apply(clone, candidate)

    def __call__(self, candidate: Candidate, example: Example, ctx: Context) -> ModuleRun:
        clone = self.instantiate(candidate)
        names = {id(pred): name for name, pred in clone.named_predictors()}
        for name, pred in clone.named_predictors():
            pred.forward = self._recording(name, pred, pred.forward, ctx)
        gold = self.originals[example.id]
        t0 = time.perf_counter()
        usage = None
        try:
            with dspy.context(lm=self.lm, trace=[]), dspy.track_usage() as usage:
                prediction = clone(**gold.inputs())
                trace = list(dspy.settings.trace)
        except Exception as exc:
            unavailable = _infrastructure(exc)
            if unavailable is not None:
                raise unavailable from exc
            raise
        finally:
            if usage is not None:
                _record_usage(ctx, usage.usage_data, time.perf_counter() - t0)
        return ModuleRun(prediction, trace, names)

    @staticmethod
    def _recording(name: str, pred: Any, forward: Callable[..., Any], ctx: Context) -> Callable[..., Any]:
        """`pred.forward`, recording each call as a trace entry of component `name` (and a parse failure too)."""

        def recorded(**kwargs: Any) -> Any:
            signature = kwargs.get("signature", pred.signature)
            if not hasattr(signature, "input_fields"):  # a signature given as a string at call time
                signature = pred.signature
            inputs = _fields_text({k: v for k, v in kwargs.items() if k in signature.input_fields})
            try:
                out = forward(**kwargs)
            except dspy.AdapterParseError as exc:
                raw = getattr(exc, "lm_response", None) or ""
                ctx.record(name, inputs=inputs, output=f"(DSPy could not parse this answer into the output fields "
                                                      f"{list(signature.output_fields)})\n{raw}")
                raise
            fields = out.toDict() if hasattr(out, "toDict") else dict(out) if isinstance(out, Mapping) else out
            ctx.record(name, inputs=inputs, output=_fields_text(fields) if isinstance(fields, Mapping) else fields)
            return out

        return recorded


def _record_usage(ctx: Context, usage_data: Mapping[str, list[dict[str, Any]]], seconds: float) -> None:
    """Count the DSPy LM's calls of one rollout in the run's ledger (role "task"), on the event loop's thread."""
    ledger = getattr(ctx.task_lm, "ledger", None)
    loop = ctx._loop
    calls = [(model, u) for model, entries in usage_data.items() for u in entries]
    if ledger is None or loop is None or not calls:
        return

    def record() -> None:
        for model, u in calls:
            ledger.record("task", model=model, seconds=seconds / len(calls),
                          input_tokens=int(u.get("prompt_tokens") or u.get("input_tokens") or 0),
                          output_tokens=int(u.get("completion_tokens") or u.get("output_tokens") or 0))

    loop.call_soon_threadsafe(record)


def _prepare(module: Any, trainset: Sequence[Any], metric: Callable[..., Any], valset: Sequence[Any] | None,
             predictor_feedback: bool | None, dspy_cache: bool, options: Mapping[str, Any],
             ) -> tuple[Candidate, dict[str, Any]]:
    named = _predictors(module)
    taken = _TAKEN & set(options)
    if taken:  # a ConfigError and a TypeError, like any keyword gepetto.optimize does not take
        raise UnknownOptionError(f"{sorted(taken)}: the DSPy integration sets these itself (the module is the "
                                 "program, DSPy's configured LM the task LM, with its own parameters)")
    lm = dspy.settings.lm
    if lm is None and any(p.lm is None for _, p in named):
        raise ValueError("no DSPy LM: configure one with dspy.configure(lm=dspy.LM('openai/gpt-4.1-mini')) (or give "
                         "every predictor its own lm) before optimising")
    originals: dict[str, Any] = {}
    train = _convert(trainset, "trainset", originals)
    val = _convert(valset, "valset", originals) if valset is not None else None
    models = sorted({str(getattr(x, "model", type(x).__name__)) for x in [lm, *(p.lm for _, p in named)] if x})
    program = _Program(module, originals, lm, dspy_cache)

    def run(candidate: Candidate, example: Example, ctx: Context) -> ModuleRun:
        return program(candidate, example, ctx)

    # a stored run records the program as python:MODULE:QUALNAME: name it after the user's module class
    run.__module__, run.__qualname__ = type(module).__module__, type(module).__qualname__
    kwargs = {"valset": val, "program": run, "task_lm": DSPyTaskLM(",".join(models)),
              "metric": _Metric(metric, originals, program.lm, predictor_feedback), "trainset": train}
    return seed_candidate(module), kwargs


def optimize(module: Any, trainset: Sequence[Any], metric: Callable[..., Any], *, valset: Sequence[Any] | None = None,
             reflection_lm: Any = DEFAULT_REFLECTION_LM, callbacks: Callbacks = None,
             config: EngineConfig | Mapping[str, Any] | None = None, budget: int | None = None,
             storage: str | Path | None = None, run: str | None = None, cache: CacheMode | None = None,
             predictor_feedback: bool | None = None, dspy_cache: bool = False, **options: Any) -> tuple[Any, Result]:
    """Evolve the instructions of every predictor of `module`; returns (optimised copy of the module, Result).

    `trainset`/`valset`: dspy.Example objects with their inputs set (`.with_inputs(...)`); without a valset the
    trainset is the validation set. `metric(gold, pred[, trace[, pred_name, pred_trace]])` returns a number in
    [0, 1], a `gepetto.Score` or `dspy.Prediction(score=..., feedback=...)`; its feedback is what reflection
    learns from. `predictor_feedback` (default: when the metric takes `pred_name`) also asks the metric, for each
    predictor a run called, for feedback on that predictor, added to the run's feedback (one more metric call
    per predictor per rollout: turn it off for a costly judge). `dspy_cache`: let the rollouts use DSPy's
    response cache (off by default: rollouts call the LM, so runs stay independent of earlier ones; a stored
    run resumes exactly from its stored rollouts either way).

    `reflection_lm`, `callbacks` (one callable or a list, called with every typed event: gepetto.events),
    `config` (a `gepetto.config.EngineConfig`; a keyword given wins over it), `budget` (default: the config's),
    `storage`, `run`, `cache` (gepetto's cache of reflection answers) and the other keyword options (seed,
    minibatch_size, max_concurrency, use_merge, components, component_descriptions, proposer, parent_selector,
    stop, ...) are those of `gepetto.optimize`; an unknown one raises a `gepetto.ConfigError`. The module given
    is never changed.
    """
    seed, kwargs = _prepare(module, trainset, metric, valset, predictor_feedback, dspy_cache, options)
    result = _optimize(seed, kwargs.pop("trainset"), kwargs.pop("metric"), reflection_lm=reflection_lm,
                       callbacks=callbacks, config=config, budget=budget, storage=storage, run=run, cache=cache,
                       **kwargs, **options)
    return with_instructions(module, result.best_candidate), result


async def optimize_async(module: Any, trainset: Sequence[Any], metric: Callable[..., Any], *,
                         valset: Sequence[Any] | None = None, reflection_lm: Any = DEFAULT_REFLECTION_LM,
                         callbacks: Callbacks = None, config: EngineConfig | Mapping[str, Any] | None = None,
                         budget: int | None = None, storage: str | Path | None = None, run: str | None = None,
                         cache: CacheMode | None = None, predictor_feedback: bool | None = None,
                         dspy_cache: bool = False, **options: Any) -> tuple[Any, Result]:
    """`optimize` for callers already inside an event loop (a notebook, an async app): same arguments."""
    seed, kwargs = _prepare(module, trainset, metric, valset, predictor_feedback, dspy_cache, options)
    result = await _optimize_async(seed, kwargs.pop("trainset"), kwargs.pop("metric"), reflection_lm=reflection_lm,
                                   callbacks=callbacks, config=config, budget=budget, storage=storage, run=run,
                                   cache=cache, **kwargs, **options)
    return with_instructions(module, result.best_candidate), result
