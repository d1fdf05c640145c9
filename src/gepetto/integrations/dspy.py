"""DSPy programs: evolve the instructions of every predictor of a `dspy.Module` with gepetto.

    import dspy
    from gepetto.integrations.dspy import GEPA

    dspy.configure(lm=dspy.LM("openai/gpt-4.1-mini"))          # the task LM: DSPy calls it, as always
    optimized = GEPA(metric=metric, auto="light", reflection_lm=dspy.LM("openai/gpt-4.1")).compile(
        program, trainset=trainset, valset=valset)

`GEPA` is a `dspy.teleprompt.Teleprompter` with dspy.GEPA's main arguments; `optimize` is the same run as a
function returning (optimised module, gepetto Result):

    optimized, result = gdspy.optimize(program, trainset, metric, valset=valset,
                                       reflection_lm="openai/gpt-4.1", budget=300)

Each predictor of the module (`module.named_predictors()`: "classify", "answer.predict", ...) is a component
named by its path, whose text is its signature's instructions. A rollout runs a private copy of the module with
the candidate's instructions (never the module given, which stays untouched) in a worker thread, so rollouts
run concurrently; each predictor call is recorded as a trace entry of its component (its input fields in, its
output fields out, or the answer DSPy could not parse), so reflection on a predictor sees that predictor's own
calls. The metric is DSPy's: `metric(gold, pred)`, `metric(gold, pred, trace)` or dspy.GEPA's
`metric(gold, pred, trace, pred_name, pred_trace)`, returning a number, a `gepetto.Score` or
`dspy.Prediction(score=..., feedback=...)`.

The task LM is DSPy's (`dspy.configure(lm=...)`, a `dspy.context(lm=...)` around the call, or a predictor's own
`lm`); gepetto's task LM is not used. The reflection LM is a `dspy.LM`, a gepetto LM name such as
"local:qwen2.5-coder-1.5b", "openai/gpt-4.1" or "openai:MODEL@URL", or a gepetto LM object. `storage=` and `run=`
keep the run in the run store like any program (`gepetto runs/show/report/export`; calling again with the same
`run` resumes it exactly, from the stored rollouts and reflection answers). The loop's options are
`gepetto.optimize`'s: `config=` (a `gepetto.config.EngineConfig`) with any keyword given (budget, seed,
callbacks, proposer, ...) in its place.
"""

from __future__ import annotations

import asyncio
import copy
import difflib
import inspect
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gepetto._install import install_hint

try:
    import dspy
    from dspy.teleprompt.gepa.gepa import DspyGEPAResult
except ImportError as exc:  # pragma: no cover - run without DSPy installed
    raise ImportError(f"gepetto.integrations.dspy needs DSPy: {install_hint('dspy')}") from exc

from gepetto.api import OptimizeOptions
from gepetto.api import optimize as _optimize
from gepetto.api import optimize_async as _optimize_async
from gepetto.config import DEFAULT_REFLECTION_LM, CacheMode, EngineConfig, UnknownOptionError
from gepetto.engine.events import Callbacks
from gepetto.engine.loop import Result
from gepetto.lm.base import Completion, LMError, LMSetupError, LMUnavailable, Message, Usage
from gepetto.program import Context, render_value
from gepetto.types import Candidate, Example, Score

__all__ = ["GEPA", "DSPyLM", "DSPyTaskLM", "DetailedResults", "ModuleRun", "auto_budget", "optimize", "optimize_async",
           "seed_candidate", "with_instructions"]

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


# gepetto's LM params a DSPy request carries (the reflection LM's are temperature, max_tokens, seed and stop)
_REQUEST_PARAMS = frozenset({"temperature", "max_tokens", "seed", "stop", "top_p", "response_format"})


class DSPyLM:
    """A DSPy LM (`dspy.LM(...)`, any `dspy.BaseLM`) as a gepetto LM, e.g. the reflection LM: each call goes through
    DSPy (its engine, response cache, history and usage tracking), in a worker thread."""

    def __init__(self, lm: Any) -> None:
        if not isinstance(lm, dspy.BaseLM):
            raise TypeError(f"expected a dspy.LM, got {type(lm).__name__}")
        self.lm = lm
        self.name = f"dspy:{lm.model}"

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        unknown = set(params) - _REQUEST_PARAMS
        if unknown:
            raise LMError(f"{self.name}: parameters a DSPy request does not carry: {sorted(unknown)}")
        return await asyncio.to_thread(self._call, list(messages), params)

    def _call(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        from dspy import lm15

        request = lm15.request_from_openai_chat({"model": self.lm.model, "messages": messages, **params})
        try:
            response = self.lm(request)
        except Exception as exc:
            failure = _infrastructure(exc)
            if failure is not None:
                raise failure from exc
            raise LMError(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        usage = response.usage
        counted = usage is not None and (usage.input_tokens is not None or usage.output_tokens is not None)
        text = response.text or ""
        if counted:
            tokens = Usage(usage.input_tokens or 0, usage.output_tokens or 0)
        else:  # the engine reported no usage: the ledger's usual estimate
            from gepetto.lm.base import estimated_usage

            tokens = estimated_usage(messages, text)
        return Completion(text, tokens, finish_reason=str(response.finish_reason or "stop"))


def as_lm(lm: Any) -> Any:
    """A reflection LM as gepetto takes it: a `dspy.LM` wrapped in `DSPyLM`; a name or gepetto LM as it is."""
    return DSPyLM(lm) if isinstance(lm, dspy.BaseLM) else lm


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
    return "\n".join(f"{k}: {_value_text(v)}" for k, v in values.items())


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else render_value(value)


def _output_text(fields: Any) -> str:
    """A predictor's answer as its trace records it: the value of its one output field as it is (a router's "alarm",
    so that feedback naming "alarm" reads as that step's answer), several as `name: value` lines."""
    if not isinstance(fields, Mapping):
        return _value_text(fields)
    return _value_text(next(iter(fields.values()))) if len(fields) == 1 else _fields_text(fields)


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
            ctx.record(name, inputs=inputs, output=_output_text(fields))
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

    `reflection_lm`: a `dspy.LM`, a gepetto LM name ("local:qwen2.5-coder-1.5b", "openai/gpt-4.1", ...) or a
    gepetto LM object. `callbacks` (one callable or a list, called with every typed event: gepetto.engine.events),
    `config` (a `gepetto.config.EngineConfig`; a keyword given wins over it), `budget` (default: the config's),
    `storage`, `run`, `cache` (gepetto's cache of reflection answers) and the other keyword options (seed,
    minibatch_size, max_concurrency, merge, components, component_descriptions, proposer, parent_selector,
    stop, ...) are those of `gepetto.optimize`; an unknown one raises a `gepetto.ConfigError`. The module given
    is never changed.
    """
    seed, kwargs = _prepare(module, trainset, metric, valset, predictor_feedback, dspy_cache, options)
    result = _optimize(seed, kwargs.pop("trainset"), kwargs.pop("metric"), reflection_lm=as_lm(reflection_lm),
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
    result = await _optimize_async(seed, kwargs.pop("trainset"), kwargs.pop("metric"),
                                   reflection_lm=as_lm(reflection_lm), callbacks=callbacks, config=config,
                                   budget=budget, storage=storage, run=run, cache=cache, **kwargs, **options)
    return with_instructions(module, result.best_candidate), result


# ---- dspy.GEPA's shape: a Teleprompter ------------------------------------------------------------------------

# dspy.GEPA's `auto` presets: how many candidates the budget is sized for
AUTO_CANDIDATES: dict[str, int] = {"light": 6, "medium": 12, "heavy": 18}
_SELECTION = {"pareto": "pareto", "current_best": "current-best"}
_COMPONENTS = {"round_robin": "round-robin", "all": "all"}
# gepetto.optimize's options that GEPA's own arguments set (one name for each thing: dspy.GEPA's)
_GEPA_SETS = {"budget": "auto, max_metric_calls or max_full_evals", "minibatch_size": "reflection_minibatch_size",
              "parent_selector": "candidate_selection_strategy", "component_selector": "component_selector",
              "merge": "use_merge and max_merge_invocations", "max_concurrency": "num_threads",
              "perfect_score": "perfect_score", "seed": "seed", "tracking": "use_mlflow",
              "reflection_lm": "reflection_lm"}


def auto_budget(n_predictors: int, n_candidates: int, n_val: int, minibatch: int = 35, full_eval_every: int = 5
                ) -> int:
    """Rollouts for dspy.GEPA's `auto` presets, by DSPy's rule: the seed's validation, 5 bootstrap runs per
    candidate, a number of trials (growing with predictors and candidates) of `minibatch` runs each, and a full
    validation every `full_eval_every` trials (one more when the trials are fewer)."""
    trials = int(max(4 * n_predictors * math.log2(n_candidates), 1.5 * n_candidates))
    full_evals = (trials + 1) // full_eval_every + 1 + (trials < full_eval_every)
    return n_val + 5 * n_candidates + trials * minibatch + full_evals * n_val


@dataclass(frozen=True)
class DetailedResults(DspyGEPAResult):
    """dspy.GEPA's `detailed_results` (candidates as modules, lineage, validation scores keyed by the valset's
    index, ...), plus gepetto's `Result` (costs, stop reason, `summary()`) and the stored run's name."""

    result: Result | None = None
    run: str | None = None


def detailed_results(module: Any, result: Result, val_ids: Sequence[str], *, seed: int | None = None,
                     log_dir: str | None = None, run: str | None = None) -> DetailedResults:
    """A run's pool in dspy.GEPA's terms; `val_ids` are the validation examples' ids in valset order."""
    pool = result.candidates
    subscores = [{i: rec.val_scores[eid] for i, eid in enumerate(val_ids) if eid in rec.val_scores} for rec in pool]
    best_on: dict[Any, set[int]] = {}
    for i in range(len(val_ids)):
        scored = [(sub[i], c) for c, sub in enumerate(subscores) if i in sub]
        if scored:
            top = max(v for v, _ in scored)
            best_on[i] = {c for v, c in scored if v == top}
    return DetailedResults(
        candidates=[with_instructions(module, rec.candidate) for rec in pool],
        parents=[list(rec.parents) if rec.parents else [None] for rec in pool],
        val_aggregate_scores=[rec.mean for rec in pool],
        val_subscores=subscores,
        per_val_instance_best_candidates=best_on,
        discovery_eval_counts=[rec.rollouts_at_creation for rec in pool],
        total_metric_calls=result.rollouts_used,
        num_full_val_evals=len(pool),
        log_dir=log_dir, seed=seed, result=result, run=run)


class GEPA(dspy.teleprompt.Teleprompter):
    """dspy.GEPA's interface on gepetto's engine: `GEPA(metric=..., auto="light", reflection_lm=...)
    .compile(student, trainset=..., valset=...)` returns an optimised copy of `student`.

    The budget is exactly one of `auto` ("light", "medium", "heavy": sized by DSPy's rule, `auto_budget`),
    `max_metric_calls` (rollouts: one program run and its score) or `max_full_evals` (that many passes over
    trainset + valset). dspy.GEPA's arguments keep their meaning: `reflection_minibatch_size`,
    `candidate_selection_strategy` ("pareto", "current_best"), `component_selector` ("round_robin", "all"),
    `use_merge`, `max_merge_invocations`, `num_threads` (rollouts at once), `perfect_score`, `seed`,
    `use_mlflow`; `log_dir` keeps the run in `log_dir/gepetto.sqlite` and compiling again with it resumes the run;
    `track_stats=True` sets `optimized.detailed_results` (a `DetailedResults`). `reflection_lm` is a `dspy.LM`
    or a gepetto LM name (default: gepetto's, the embedded local model). The metric may take dspy.GEPA's five
    arguments or fewer (`optimize` says which forms). What gepetto cannot honour is refused, not ignored:
    `instruction_proposer`, `code_proposer`, `gepa_kwargs`, W&B, `track_best_outputs`, a `failure_score` other than
    0, `skip_perfect_score=False`. `add_format_failure_as_feedback` and `warn_on_score_mismatch` are accepted:
    gepetto always shows reflection the answer DSPy could not parse, and takes the score from the call without
    `pred_name`.

    gepetto's own: `storage` and `run` (the run store, as in `optimize`), `callbacks`, `config` (an
    EngineConfig; these arguments win over it) and any other keyword option of `optimize` (`predictor_feedback`,
    `dspy_cache`, `cache`, `time_limit`, `proposer`, ...). After `compile`, `self.result` is gepetto's Result and
    `self.run` the stored run's name.
    """

    def __init__(
        self,
        metric: Callable[..., Any],
        *,
        auto: Literal["light", "medium", "heavy"] | None = None,
        max_full_evals: int | None = None,
        max_metric_calls: int | None = None,
        reflection_minibatch_size: int = 3,
        candidate_selection_strategy: Literal["pareto", "current_best"] = "pareto",
        reflection_lm: Any = None,
        skip_perfect_score: bool = True,
        add_format_failure_as_feedback: bool = False,
        instruction_proposer: Any = None,
        code_proposer: Any = None,
        component_selector: Any = "round_robin",
        use_merge: bool = True,
        max_merge_invocations: int | None = 5,
        num_threads: int | None = None,
        failure_score: float = 0.0,
        perfect_score: float = 1.0,
        log_dir: str | Path | None = None,
        track_stats: bool = False,
        use_wandb: bool = False,
        wandb_api_key: str | None = None,
        wandb_init_kwargs: dict[str, Any] | None = None,
        track_best_outputs: bool = False,
        warn_on_score_mismatch: bool = True,
        use_mlflow: bool = False,
        seed: int | None = 0,
        gepa_kwargs: dict[str, Any] | None = None,
        storage: str | Path | None = None,
        run: str | None = None,
        callbacks: Callbacks = None,
        config: EngineConfig | Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        _metric_arity(metric)  # a metric of the wrong shape is refused here, not after the first rollouts
        given = [name for name, v in (("auto", auto), ("max_full_evals", max_full_evals),
                                      ("max_metric_calls", max_metric_calls)) if v is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of auto, max_metric_calls, max_full_evals (as dspy.GEPA); got "
                             + (", ".join(given) if given else "none"))
        if auto is not None and auto not in AUTO_CANDIDATES:
            raise ValueError(f"auto={auto!r}: accepted {', '.join(map(repr, AUTO_CANDIDATES))}")
        if candidate_selection_strategy not in _SELECTION:
            raise ValueError(f"candidate_selection_strategy={candidate_selection_strategy!r}: accepted "
                             f"{', '.join(map(repr, _SELECTION))}")
        unsupported = {
            "instruction_proposer": (instruction_proposer is not None,
                                     "gepetto proposes with its own proposers: proposer='rewrite' or 'edit', or a "
                                     "gepetto Proposer object (docs/strategies.md)"),
            "code_proposer": (code_proposer is not None, "dspy.Flex code components are not optimised"),
            "gepa_kwargs": (bool(gepa_kwargs), "gepa's options do not apply: give gepetto's as keyword options"),
            "use_wandb": (use_wandb or wandb_api_key is not None or wandb_init_kwargs is not None,
                          "W&B is not supported; use_mlflow=True tracks the run in MLflow"),
            "track_best_outputs": (track_best_outputs, "not supported yet; give storage= and read the stored "
                                                      "rollouts (gepetto export)"),
            "failure_score": (failure_score != 0.0, "a failed rollout scores 0 in gepetto"),
            "skip_perfect_score": (not skip_perfect_score, "gepetto never reflects on a minibatch the parent "
                                                          "solves perfectly"),
        }
        refused = [f"{name}: {why}" for name, (bad, why) in unsupported.items() if bad]
        if refused:
            raise ValueError("not supported by gepetto's GEPA: " + "; ".join(refused))
        if log_dir is not None and storage is not None:
            raise ValueError("give log_dir (dspy.GEPA's) or storage (gepetto's), not both")
        _check_options(options)
        self.metric = metric
        self.auto, self.max_full_evals, self.max_metric_calls = auto, max_full_evals, max_metric_calls
        self.reflection_lm = reflection_lm
        self.track_stats, self.seed = track_stats, seed
        self.log_dir = str(log_dir) if log_dir is not None else None
        # not `self.callbacks`: DSPy reads that attribute of an optimiser for its own callbacks
        self.storage, self.run_name, self.event_callbacks, self.config = storage, run, callbacks, config
        mapped: dict[str, Any] = {
            "minibatch_size": reflection_minibatch_size,
            "parent_selector": _SELECTION[candidate_selection_strategy],
            "component_selector": (_COMPONENTS.get(component_selector, component_selector)
                                   if isinstance(component_selector, str) else component_selector),
            "merge": ("off" if not use_merge else "merge" if max_merge_invocations is None
                      else f"merge(max={max_merge_invocations})"), "max_concurrency": num_threads,
            "perfect_score": perfect_score, "seed": seed, "tracking": "mlflow" if use_mlflow else None,
        }
        # None: gepetto's default (gepetto.optimize takes None as "not given")
        self.options: dict[str, Any] = {**{k: v for k, v in mapped.items() if v is not None}, **options}
        self.result: Result | None = None
        self.run: str | None = None

    def budget(self, student: Any, trainset: Sequence[Any], valset: Sequence[Any] | None) -> int:
        """The rollout budget this optimiser gives `student` on these sets (dspy.GEPA's `max_metric_calls`)."""
        if self.max_metric_calls is not None:
            return self.max_metric_calls
        if self.max_full_evals is not None:
            return self.max_full_evals * (len(trainset) + len(valset or ()))
        assert self.auto is not None
        return auto_budget(max(len(_predictors(student)), 1), AUTO_CANDIDATES[self.auto],
                           len(valset) if valset is not None else len(trainset))

    def compile(self, student: Any, *, trainset: Sequence[Any], teacher: Any = None,
                valset: Sequence[Any] | None = None, **kwargs: Any) -> Any:
        """Optimise `student`'s instructions; returns an optimised copy (`student` is not changed). Without a
        valset the trainset is the validation set too, as in dspy.GEPA."""
        if kwargs:
            raise TypeError(f"compile() got unexpected keyword arguments: {sorted(kwargs)}")
        if teacher is not None:
            raise ValueError("a teacher program is not supported (nor is it by dspy.GEPA)")
        if not trainset:
            raise ValueError("trainset must be given and non-empty")
        storage, run = self.storage, self.run_name
        if self.log_dir is not None:  # dspy.GEPA resumes from its log_dir: here, a run store in it
            Path(self.log_dir).mkdir(parents=True, exist_ok=True)
            storage, run = Path(self.log_dir) / "gepetto.sqlite", run or "gepa"
        if storage is not None and run is None:  # named here, as gepetto would name it, so `self.run` can say it
            run = f"{type(student).__name__}-{time.strftime('%Y%m%d-%H%M%S')}"
        reflection = DEFAULT_REFLECTION_LM if self.reflection_lm is None else self.reflection_lm
        optimized, result = optimize(student, trainset, self.metric, valset=valset, reflection_lm=reflection,
                                     callbacks=self.event_callbacks, config=self.config,
                                     budget=self.budget(student, trainset, valset), storage=storage, run=run,
                                     **self.options)
        self.result, self.run = result, run
        if self.track_stats:
            val_ids = [e.id for e in _convert(valset if valset is not None else trainset, "valset", {})]
            optimized.detailed_results = detailed_results(student, result, val_ids, seed=self.seed,
                                                          log_dir=self.log_dir, run=self.run)
        return optimized


def _check_options(options: Mapping[str, Any]) -> None:
    """gepetto's keyword options given to GEPA: each must be one `optimize` takes and GEPA does not set."""
    taken = sorted(set(options) & set(_GEPA_SETS))
    if taken:
        raise UnknownOptionError("GEPA(): " + "; ".join(f"{k} is set by dspy.GEPA's {_GEPA_SETS[k]}" for k in taken))
    accepted = set(OptimizeOptions.__annotations__) - _TAKEN - set(_GEPA_SETS) - {
        "seed_candidate", "valset", "callbacks", "storage", "run", "config"}
    accepted |= {"predictor_feedback", "dspy_cache"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        hints = []
        for k in unknown:
            close = difflib.get_close_matches(k, sorted(accepted), n=1)
            hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise UnknownOptionError(f"GEPA(): unknown option {', '.join(hints)}")
