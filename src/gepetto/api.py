"""The public entry point: `optimize()` (and its async twin) over a program, a metric and examples.

The options are written once: `EngineOptions` (the loop's, one per `EngineConfig` field, generated from those fields
into gepetto/_engine_options.py) and the run's own (`RunOptions`), typed dictionaries that
`optimize(..., **options)`, `optimize_async` and `build_engine` unpack, so an editor shows every keyword with its
type; an unknown keyword raises a ConfigError naming the closest one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import functools
import inspect
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypedDict, TypeVar

from gepetto._engine_options import EngineOptions
from gepetto.assembly import (
    as_examples,
    assemble_engine,
    candidate_and_program,
    drive_engine,
    engine_config,
    lm_label,
    resolve_lm,
    strategy_objects,
)
from gepetto.config import (
    DEFAULT_REFLECTION_LM,
    DEFAULT_TASK_LM,
    PYTHON,
    CacheMode,
    EngineConfig,
    TrackingName,
    UnknownOptionError,
)
from gepetto.engine import stopping
from gepetto.engine.events import Callbacks, Result, as_callbacks
from gepetto.engine.loop import Engine, RolloutStore
from gepetto.engine.strategies import label
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, RedactingLM, aclose_lm
from gepetto.program import Metric, Program, Rollout, Task, run_rollout
from gepetto.tracking import Tracker, make_tracker, tracked, with_tracker
from gepetto.types import Candidate, Example

if sys.version_info >= (3, 11):
    from typing import Unpack
else:  # Python 3.10
    from typing_extensions import Unpack

if TYPE_CHECKING:
    from gepetto.evaluation import RunEvaluation
    from gepetto.presets import PresetName
    from gepetto.runner import StoredRun


SeedCandidate = Candidate | Mapping[str, str] | str  # a bare string is the one component "instruction"
Examples = Sequence[Example | Mapping[str, Any]]
P = ParamSpec("P")
R = TypeVar("R")


class RunOptions(EngineOptions, total=False):
    """What a run is made of besides the seed, the examples and the metric, with the engine options. `valset`
    defaults to the trainset; `program` to the seed's one instruction as the system prompt; `task_lm` and
    `reflection_lm` to the embedded models; `config` (an EngineConfig or a mapping of its options) to
    EngineConfig(), the keywords given winning over it; `stop` adds stop conditions to the config's."""

    valset: Examples | None
    program: Program | None
    task_lm: LM | str | None
    reflection_lm: LM | str | None
    callbacks: Callbacks
    config: EngineConfig | Mapping[str, Any] | None
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None


class BuildOptions(RunOptions, total=False):
    """`build_engine`'s options: a run's, and where its rollouts and costs go (`rollout_store`, `ledger`)."""

    rollout_store: RolloutStore | None
    ledger: Ledger | None


class OptimizeOptions(RunOptions, total=False):
    """`optimize`'s options: a run's, and its store, tracking and display (see `optimize`)."""

    storage: str | Path | None
    run: str | None
    cache: CacheMode | None
    tracking: TrackingName | Tracker | None
    progress: bool | None
    preset: PresetName | None


def _keywords(options: type) -> tuple[str, ...]:
    """The keys of a typed dictionary of options, in the order they are declared (its bases' first)."""
    return tuple(options.__annotations__)


def _unpacked(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keywords of the typed dictionary `fn` unpacks as `**options: Unpack[...]` (none without one)."""
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.VAR_KEYWORD:
            annotation = p.annotation  # (a string: this module's annotations are postponed)
            name = re.fullmatch(r"Unpack\[(\w+)\]", annotation) if isinstance(annotation, str) else None
            options = fn.__globals__[name.group(1)] if name else typing.get_args(annotation)[0]
            return _keywords(options)
    return ()


def checked_keywords(fn: Callable[P, R]) -> Callable[P, R]:
    """A keyword argument `fn` does not take (by name, or in the typed dictionary it unpacks) raises a
    ConfigError naming it and the closest accepted names (instead of Python's bare TypeError; it is still a
    TypeError)."""
    params = inspect.signature(fn).parameters
    named = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    accepted = [*named, *_unpacked(fn)]

    def check(kwargs: Mapping[str, Any]) -> None:
        unknown = [k for k in kwargs if k not in accepted]
        if unknown:
            hints = []
            for k in unknown:
                close = difflib.get_close_matches(k, accepted, n=1)
                hints.append(f"{k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise UnknownOptionError(f"{fn.__name__}(): unknown option {', '.join(hints)}; accepted: "
                                     f"{', '.join(accepted)}")

    if inspect.iscoroutinefunction(fn):
        async def checked_async(*args: Any, **kwargs: Any) -> Any:
            check(kwargs)
            return await fn(*args, **kwargs)

        return functools.wraps(fn)(checked_async)  # type: ignore[return-value]

    @functools.wraps(fn)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        check(kwargs)
        return fn(*args, **kwargs)

    return checked


@dataclass(frozen=True)
class _Call:
    """One call's options, read once from its keywords: the engine's configuration (`config` with the engine
    options given in place, a preset's budget included), the strategies given as objects, and the run's own
    options. Frozen: a display or tracker is added with `dataclasses.replace`, never by changing it in place."""

    config: EngineConfig
    strategies: dict[str, Any]
    valset: Examples | None = None
    program: Program | None = None
    task_lm: LM | str = DEFAULT_TASK_LM
    reflection_lm: LM | str = DEFAULT_REFLECTION_LM
    callbacks: Callbacks = None
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None = None
    rollout_store: RolloutStore | None = None
    ledger: Ledger | None = None
    storage: str | Path | None = None
    run: str | None = None
    cache: CacheMode | None = None
    tracking: TrackingName | Tracker | None = None
    progress: bool | None = None

    @classmethod
    def of(cls, seed_candidate: SeedCandidate, trainset: Examples, options: Mapping[str, Any]) -> _Call:
        """The call `options` (keywords of BuildOptions or OptimizeOptions) make; None is the default."""
        given = {k: v for k, v in options.items() if v is not None}
        config = engine_config(given.get("config"), given)
        if "preset" in given:
            config = _with_preset(seed_candidate, trainset, config, given)
        own = {f.name for f in dataclasses.fields(cls)} - {"config", "strategies"}
        return cls(config=config, strategies=strategy_objects(given),
                   **{k: v for k, v in given.items() if k in own})

    def assemble(self, seed_candidate: SeedCandidate, trainset: Examples, metric: Metric) -> Engine:
        """The engine of this call."""
        return assemble_engine(seed_candidate, trainset, metric, valset=self.valset, program=self.program,
                               task_lm=self.task_lm, reflection_lm=self.reflection_lm, callbacks=self.callbacks,
                               rollout_store=self.rollout_store, ledger=self.ledger, config=self.config,
                               strategies=self.strategies, stop=self.stop)

    def open_stored(self, seed_candidate: SeedCandidate, trainset: Examples, metric: Metric) -> StoredRun | None:
        """The stored run `storage=` opens (created or resumed), or None without a store."""
        if self.storage is None:
            if self.run is not None or self.cache is not None:
                raise TypeError("run= and cache= name a stored run: give storage= too (e.g. storage='gepetto.sqlite')")
            return None
        from gepetto.runner import open_program_run

        return open_program_run(seed_candidate, trainset, metric, storage=self.storage, run=self.run,
                                cache=self.cache, valset=self.valset, program=self.program, task_lm=self.task_lm,
                                reflection_lm=self.reflection_lm, callbacks=self.callbacks, config=self.config,
                                strategies=self.strategies, stop=self.stop)

    def engine_tracking(self, engine: Engine, metric: Metric) -> dict[str, Any]:
        """What a tracker is started with for a run without a store: the engine's configuration and ledger."""
        program = self.program
        params = {"task": label(program if program is not None else metric).removeprefix(PYTHON),
                  "task_lm": lm_label(self.task_lm), "reflection_lm": lm_label(self.reflection_lm),
                  "n_train": len(engine.trainset), "n_val": len(engine.valset), "components": engine.components,
                  **(engine.config.model_dump() if isinstance(engine.config, EngineConfig) else {})}
        return {"name": None, "params": params, "ledger": engine.state.ledger}


@checked_keywords
def build_engine(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric,
                 **options: Unpack[BuildOptions]) -> Engine:
    """The engine `optimize` would run, for callers that want to drive or observe it themselves.

    Args:
        seed_candidate: The texts to evolve, as for `optimize`.
        trainset: The examples reflection learns from, as for `optimize`.
        metric: `(example, output, trace) -> Score | float`, as for `optimize`.
        **options: `optimize`'s run and engine options (`RunOptions`: `config` with the keyword arguments given
            in its place), and `rollout_store` and `ledger`, where the engine keeps rollouts and costs.

    Returns:
        The Engine, built and checked but not started: `run_engine(engine)` runs it to the end.

    Raises:
        ConfigError: An unknown option or a bad value, named; an LM that cannot be built.

    Example:
        ```python
        from gepetto.api import build_engine, run_engine
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm="sim:task", reflection_lm="sim:reflection", budget=40)
        print(run_engine(engine).best_score)
        ```
    """
    return _Call.of(seed_candidate, trainset, options).assemble(seed_candidate, trainset, metric)


def _with_preset(seed_candidate: SeedCandidate, trainset: Examples, config: EngineConfig,
                 given: Mapping[str, Any]) -> EngineConfig:
    """`preset=` (gepetto.presets): the budget sized to the task, unless a budget was given (keyword or config)."""
    from gepetto.presets import get_preset, preset_budget

    get_preset(given["preset"])  # an unknown name is refused even when the budget is given
    base = given.get("config")
    if "budget" in given or (isinstance(base, EngineConfig) and "budget" in base.model_fields_set) or (
            isinstance(base, Mapping) and "budget" in base):
        return config
    n_components = len(config.components or ({"instruction": ""} if isinstance(seed_candidate, str)
                                             else seed_candidate))
    n_val = len(given["valset"] if given.get("valset") is not None else trainset)
    budget = preset_budget(given["preset"], n_val=n_val, n_components=n_components, config=config)
    return engine_config(config, {"budget": budget})


def _with_tracker(call: _Call) -> tuple[_Call, Tracker | None]:
    """The tracker `tracking=` asks for (None: none), put after the user's callbacks."""
    tracker = make_tracker(call.tracking)
    if tracker is None:
        return call, None
    return dataclasses.replace(call, callbacks=with_tracker(call.callbacks, tracker)), tracker


def _with_progress(call: _Call) -> tuple[_Call, Any]:
    """The live progress display `progress=` asks for (gepetto.progress.ProgressDisplay, the CLI's), put after the
    user's callbacks: by default on when stderr is a terminal and no display is among the callbacks; or None."""
    if call.progress is False or (call.progress is None and not sys.stderr.isatty()):
        return call, None
    from gepetto.progress import ProgressDisplay

    callbacks = as_callbacks(call.callbacks)
    if call.progress is None and any(isinstance(c, ProgressDisplay) for c in callbacks):
        return call, None
    display = ProgressDisplay()
    return dataclasses.replace(call, callbacks=[*callbacks, display]), display


@checked_keywords
async def optimize_async(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric,
                         **options: Unpack[OptimizeOptions]) -> Result:
    """Async `optimize`: same arguments, returns and errors, for callers already inside an event loop.

    Example:
        ```python
        import asyncio
        import gepetto
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        result = asyncio.run(gepetto.optimize_async(task.seed_candidate, task.trainset, task.metric,
                                                    valset=task.valset, program=task.program, task_lm="sim:task",
                                                    reflection_lm="sim:reflection", budget=40, progress=False))
        print(result.best_score)
        ```
    """
    return await _optimize(seed_candidate, trainset, metric, options, own_loop=False)


async def _optimize(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, options: Mapping[str, Any], *,
                    own_loop: bool) -> Result:
    """`optimize`'s body, in the running event loop; `own_loop`: the loop is `optimize`'s own, so Ctrl-C and SIGTERM
    stop the run gracefully and the LMs' clients are closed in it (gepetto.assembly.drive_engine)."""
    call, display = _with_progress(_Call.of(seed_candidate, trainset, options))
    call, tracker = _with_tracker(call)
    with display if display is not None else contextlib.nullcontext():
        stored = call.open_stored(seed_candidate, trainset, metric)
        if stored is not None:
            with tracked(tracker, **stored.tracking_info()):
                return await stored.run_async(own_loop=own_loop)
        engine = call.assemble(seed_candidate, trainset, metric)
        with tracked(tracker, **call.engine_tracking(engine, metric)):
            return await drive_engine(engine, own_loop=own_loop)


@checked_keywords
def optimize(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric,
             **options: Unpack[OptimizeOptions]) -> Result:
    """Evolve the seed candidate's texts to score better under `metric`, within `budget` rollouts.

    Every option of the loop (`EngineOptions`: budget, seed, minibatch_size, max_concurrency, merge, time_limit,
    patience, target_score, stop_file, max_lm_failures, component_descriptions, executor, ...; EngineConfig
    documents each) comes from `config` with each keyword given (not None) in its place. The strategies
    (`parent_selector`, `component_selector`, `minibatch_sampler`, `proposer`, `accept`, `fewshot`, `validation`,
    `merge`, `executor`) take a spec, a built-in name with its parameters ("epsilon-greedy(epsilon=0.2)",
    "edit(rules=3)"), a built-in object (`gepetto.strategies.Edit(rules=3)`) or, for the first five, an object of
    your own (docs/strategies.md). `max_cost_usd` stops the run once its LM calls cost that much by `prices`; a
    stored run resumed may be given a larger budget. Ctrl-C or SIGTERM returns the best so far.

    Args:
        seed_candidate: The texts to evolve: one instruction (a str), or a mapping of component names to texts.
        trainset: Examples (gepetto.Example, or mappings of inputs with a "gold") that reflection learns from.
        metric: `(example, output, trace) -> Score | float`, a score in [0, 1]; a Score's feedback sentence is what
            the reflection LM reads.
        **options: `RunOptions`, `EngineOptions` and these:
            `valset` (default: the trainset), `program` (default: the seed's one instruction as the system
            prompt, the example's input as the user message), `task_lm` and `reflection_lm` (names or LM objects;
            default: the embedded models), `callbacks` (called with every typed event, gepetto.engine.events), `stop`
            (stop conditions added to the config's), `storage` (a SQLite file or a database URL: every rollout,
            reflection answer and candidate kept under the name `run`, and the same `run` resumed exactly; a
            changed seed, examples or path-changing option is refused), `cache` (the LM response cache,
            docs/runs.md), `tracking` ("mlflow" or a tracker object), `progress` (the live display on stderr;
            default: on when stderr is a terminal), `preset` ("light", "medium", "heavy": a budget sized to the
            task, unless `budget` is given).

    Returns:
        The Result: `best_candidate`, `best_score` (validation), `candidates` with lineage and scores, the ledger
        of LM costs per role, and `stop_reason` (a gepetto.StopReason) with `stop_message`, why the run stopped.

    Raises:
        ConfigError: An unknown option or a bad value, named; a stored run resumed with other inputs; an LM that
            cannot be built or reached (checked before anything is paid).
        MetricError: The metric fails on every seed rollout (`gepetto check` shows where).

    Example:
        ```python
        import gepetto
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm="sim:task", reflection_lm="sim:reflection",
                                  budget=60, progress=False)
        print(result.summary())
        ```
    """
    return asyncio.run(_optimize(seed_candidate, trainset, metric, options, own_loop=True))


@dataclass
class Evaluation:
    """Scores of one candidate on a set of examples (e.g. a held-out test set), as `evaluate` returns them.

    Attributes:
        mean: The mean score over the examples (NaN for none).
        rollouts: One Rollout per example: its score with feedback, the program's output and trace.
    """

    mean: float
    rollouts: list[Rollout]

    @property
    def scores(self) -> dict[str, float]:
        """Each example's score, by example id."""
        return {r.example_id: r.score.value for r in self.rollouts}


class EvaluateOptions(TypedDict, total=False):
    """`evaluate`'s options (see `evaluate_async`); None, or a keyword left out, is the default."""

    program: Program | None
    task_lm: LM | str | None
    config: EngineConfig | Mapping[str, Any] | None
    max_concurrency: int | None
    task_lm_params: Mapping[str, Any] | None
    rollout_timeout: float | None


@checked_keywords
async def evaluate_async(candidate: SeedCandidate, examples: Examples, metric: Metric,
                         **options: Unpack[EvaluateOptions]) -> Evaluation:
    """Run a candidate on examples outside any optimisation (no budget): mean score and every rollout.

    Args:
        candidate: The texts to run: one instruction (a str), a mapping of components, or a Candidate (e.g. a
            Result's `best_candidate`).
        examples: The examples to score it on (e.g. a held-out test set).
        metric: `(example, output, trace) -> Score | float`, as for `optimize`.
        **options: `EvaluateOptions`: `program`, the program that runs the candidate (default: its one
            instruction as the system prompt); `task_lm`, the LM the program calls (a name or an LM object;
            default: the embedded 0.5B); `config`, an EngineConfig (or a mapping of its options) for the three
            after it (default EngineConfig()); `max_concurrency`, rollouts at once; `task_lm_params`, parameters
            of every task LM call (temperature, max_tokens, ...); `rollout_timeout`, seconds a rollout (program
            and metric) may take, a longer one scoring 0.

    Returns:
        An Evaluation: `mean`, `rollouts` (each with its score, feedback, output and trace) and `scores` by
        example id. A program or metric error scores that rollout 0, with the error as feedback.

    Raises:
        LMUnavailable: The LM gives no answer at all (not a verdict on the candidate).

    Example:
        ```python
        from gepetto import evaluate
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        ev = evaluate(task.seed_candidate, task.valset, task.metric, program=task.program, task_lm="sim:task")
        print(f"{ev.mean:.3f} over {len(ev.rollouts)} examples")
        ```
    """
    cfg = engine_config(options.get("config"), options)
    cand, program = candidate_and_program(candidate, options.get("program"))
    lm, data = RedactingLM(resolve_lm(options.get("task_lm") or DEFAULT_TASK_LM)), as_examples(examples)
    sem = asyncio.Semaphore(cfg.max_concurrency)

    async def one(ex: Example) -> Rollout:
        async with sem:
            return await run_rollout(program, metric, cand, ex, lm, cfg.task_lm_params, cfg.rollout_timeout)

    runs = list(await asyncio.gather(*(one(ex) for ex in data)))
    return Evaluation(sum(r.score.value for r in runs) / len(runs) if runs else float("nan"), runs)


@checked_keywords
def evaluate(candidate: SeedCandidate, examples: Examples, metric: Metric,
             **options: Unpack[EvaluateOptions]) -> Evaluation:
    """`evaluate_async` in a fresh event loop; the task LM's HTTP client is closed before the loop ends."""

    async def main() -> Evaluation:
        try:
            return await evaluate_async(candidate, examples, metric, **options)
        finally:
            task_lm = options.get("task_lm")
            if task_lm is not None and not isinstance(task_lm, str):
                await aclose_lm(task_lm)

    return asyncio.run(main())


@checked_keywords
def evaluate_run(
    run: str,
    *,
    storage: str | Path = "gepetto.sqlite",
    split: str = "test",
    candidates: Sequence[int | str] | None = None,
    task: Task | None = None,
    examples: Examples | None = None,
    metric: Metric | None = None,
    program: Program | None = None,
    task_lm: LM | str | None = None,
    max_concurrency: int | None = None,
) -> RunEvaluation:
    """Score a stored run's seed and best candidates (or `candidates`: indices, "seed", "best") on a split of its
    task ("test": the held-out examples of the task's `testset`; "val", "train") and keep the scores with the run,
    where `gepetto show`, the report and `gepetto compare` show them (`gepetto evaluate RUN` does the same).

    The task is loaded as `gepetto optimize` loads it (a built-in task, or `file.py:make_task` with the run's task
    options); for a run started here in Python give `task=` (a gepetto.Task with a testset), or `examples=` and
    `metric=` (and `program=`). The task LM is the run's (built from its name), or `task_lm=`; either behind the
    run's response cache, as the run had it. A program or metric error scores 0.

    Args:
        run: The stored run's name.
        storage: The SQLite file or database URL the run is stored in.
        split: "test", "val" or "train".
        candidates: Which candidates to score (indices, "seed", "best"); default the seed and the best.
        task: The run's task, for a run started in Python (default: loaded as `gepetto optimize` loads it).
        examples: Examples to score on instead of the task's split (with `metric=`).
        metric: The metric for `examples=`.
        program: The program for `examples=` (default: the run's one instruction as the system prompt).
        task_lm: The task LM, a name or an LM object (default: the run's); behind the run's response cache.
        max_concurrency: Rollouts at once (default: the run's).

    Returns:
        A RunEvaluation: each candidate's mean and per-example scores on the split, kept with the run.

    Raises:
        ConfigError: No such run, or a task that cannot be loaded.
        LMUnavailable: The LM gives no answer at all.

    Example:
        ```python
        from gepetto.api import evaluate_run

        scores = evaluate_run("my-run", storage="gepetto.sqlite", split="test")  # a run of a built-in task
        print(scores)
        ```
    """
    from gepetto.evaluation import evaluate_stored_run

    return evaluate_stored_run(run, storage=storage, split=split, candidates=candidates, task=task,
                               examples=as_examples(examples) if examples is not None else None, metric=metric,
                               program=program, task_lm=task_lm, max_concurrency=max_concurrency)


def run_engine(engine: Engine) -> Result:
    """Run an engine to the end in a fresh event loop; Ctrl-C (SIGINT) or SIGTERM stops it gracefully, keeping
    everything paid for (a stored run is then resumable).

    Args:
        engine: An Engine, e.g. from `build_engine`.

    Returns:
        The Result, as `optimize` returns it.
    """
    return asyncio.run(drive_engine(engine, own_loop=True))
