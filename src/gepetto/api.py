"""The public entry point: `optimize()` (and its async twin) over a program, a metric and examples."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

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
    Accept,
    CacheMode,
    EngineConfig,
    ExecutorName,
    ProposerName,
    TrackingName,
    UnknownOptionError,
)
from gepetto.engine import stopping
from gepetto.engine.executors import aclose_executor
from gepetto.engine.loop import Engine, RolloutStore
from gepetto.engine.proposers import Proposer
from gepetto.engine.strategies import (
    Acceptance,
    ComponentSelector,
    MinibatchSampler,
    ParentSelector,
    label,
)
from gepetto.events import Callbacks, Result, as_callbacks
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, RedactingLM, aclose_lm
from gepetto.program import Executor, Metric, Program, Rollout, Task, run_rollout
from gepetto.tracking import Tracker, make_tracker, tracked, with_tracker
from gepetto.types import Candidate, Example

if TYPE_CHECKING:
    from gepetto.evaluation import RunEvaluation
    from gepetto.presets import PresetName
    from gepetto.runner import StoredRun


SeedCandidate = Candidate | Mapping[str, str] | str  # a bare string is the one component "instruction"
Examples = Sequence[Example | Mapping[str, Any]]
P = ParamSpec("P")
R = TypeVar("R")


def checked_keywords(fn: Callable[P, R]) -> Callable[P, R]:
    """A keyword argument `fn` does not take raises a ConfigError naming it and the closest accepted names
    (instead of Python's bare TypeError; it is still a TypeError)."""
    params = inspect.signature(fn).parameters
    accepted = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def check(kwargs: Mapping[str, Any]) -> None:
        unknown = [k for k in kwargs if k not in params]
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


@checked_keywords
def build_engine(
    seed_candidate: SeedCandidate,
    trainset: Examples,
    metric: Metric,
    *,
    valset: Examples | None = None,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    reflection_lm: LM | str = DEFAULT_REFLECTION_LM,
    callbacks: Callbacks = None,
    rollout_store: RolloutStore | None = None,
    ledger: Ledger | None = None,
    config: EngineConfig | Mapping[str, Any] | None = None,
    budget: int | None = None,
    seed: int | None = None,
    max_concurrency: int | None = None,
    task_lm_params: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
    patience: int | None = None,
    target_score: float | None = None,
    perfect_score: float | None = None,
    stop_file: str | None = None,
    max_idle_iterations: int | None = None,
    max_cost_usd: float | None = None,
    max_lm_failures: int | None = None,
    lm_retry_pause: float | None = None,
    rollout_timeout: float | None = None,
    executor: ExecutorName | Executor | None = None,
    ray_address: str | None = None,
    minibatch_size: int | None = None,
    seek_failures: int | None = None,
    parent_selector: ParentSelector | str | None = None,
    epsilon: float | None = None,
    component_selector: ComponentSelector | str | None = None,
    minibatch_sampler: MinibatchSampler | str | None = None,
    accept: Acceptance | Accept | None = None,
    accept_tolerance: float | None = None,
    proposals_per_round: int | None = None,
    racing: bool | None = None,
    racing_chunk: int | None = None,
    racing_confidence: float | None = None,
    components: Sequence[str] | None = None,
    component_descriptions: Mapping[str, str] | None = None,
    proposer: Proposer | ProposerName | None = None,
    reflection_attempts: int | None = None,
    reflection_temperatures: Sequence[float] | None = None,
    reflection_max_tokens: int | None = None,
    reflection_chars: int | None = None,
    max_component_chars: int | None = None,
    evidence_size: int | None = None,
    gate_solved: int | None = None,
    rule_max_tokens: int | None = None,
    edit_rules: int | None = None,
    definitions: int | None = None,
    fewshot: int | None = None,
    fewshot_share: float | None = None,
    adaptive_fewshot: bool | None = None,
    use_merge: bool | None = None,
    max_merges: int | None = None,
    adaptive_merge: bool | None = None,
    prices: Mapping[str, tuple[float, float]] | None = None,
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None = None,
) -> Engine:
    """The engine `optimize` would run, for callers that want to drive or observe it themselves.

    The options are `optimize`'s: `config` (an EngineConfig) with the keyword arguments given in place.
    """
    return assemble_engine(seed_candidate, trainset, metric, valset=valset, program=program, task_lm=task_lm,
                           reflection_lm=reflection_lm, callbacks=callbacks, rollout_store=rollout_store,
                           ledger=ledger, config=engine_config(config, locals()), strategies=strategy_objects(locals()),
                           stop=stop)


def _open_stored(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, args: dict[str, Any]
                 ) -> StoredRun | None:
    """The stored run `optimize(..., storage=)` opens (created or resumed), or None without a store."""
    if args["storage"] is None:
        if args["run"] is not None or args["cache"] is not None:
            raise TypeError("run= and cache= name a stored run: give storage= too (e.g. storage='gepetto.sqlite')")
        return None
    from gepetto.runner import open_program_run

    return open_program_run(seed_candidate, trainset, metric, storage=args["storage"], run=args["run"],
                            cache=args["cache"], valset=args["valset"], program=args["program"],
                            task_lm=args["task_lm"], reflection_lm=args["reflection_lm"], callbacks=args["callbacks"],
                            config=engine_config(args["config"], args), strategies=strategy_objects(args),
                            stop=args["stop"])


def _engine_tracking(engine: Engine, metric: Metric, args: Mapping[str, Any]) -> dict[str, Any]:
    """What a tracker is started with for a run without a store: the engine's configuration and ledger."""
    program = args["program"]
    params = {"task": label(program if program is not None else metric).removeprefix(PYTHON),
              "task_lm": lm_label(args["task_lm"]), "reflection_lm": lm_label(args["reflection_lm"]),
              "n_train": len(engine.trainset), "n_val": len(engine.valset), "components": engine.components,
              **engine.config.model_dump()}
    return {"name": None, "params": params, "ledger": engine.state.ledger}


def _tracker(args: dict[str, Any]) -> Tracker | None:
    """The tracker `tracking=` asks for (None: none), put after the user's callbacks in `args`."""
    tracker = make_tracker(args["tracking"])
    if tracker is not None:
        args["callbacks"] = with_tracker(args["callbacks"], tracker)
    return tracker


def _engine_for(seed_candidate: SeedCandidate, trainset: Examples, metric: Metric, args: dict[str, Any]) -> Engine:
    return build_engine(seed_candidate, trainset, metric, valset=args["valset"], program=args["program"],
                        task_lm=args["task_lm"], reflection_lm=args["reflection_lm"], callbacks=args["callbacks"],
                        config=engine_config(args["config"], args), stop=args["stop"], **strategy_objects(args))


def _with_preset(seed_candidate: SeedCandidate, trainset: Examples, args: dict[str, Any]) -> None:
    """`preset=` (gepetto.presets): the budget sized to the task, unless a budget was given (keyword or config)."""
    if args["preset"] is None:
        return
    from gepetto.presets import get_preset, preset_budget

    get_preset(args["preset"])  # an unknown name is refused even when the budget is given
    config = args["config"]
    if args["budget"] is not None or (isinstance(config, EngineConfig) and "budget" in config.model_fields_set) or (
            isinstance(config, Mapping) and "budget" in config):
        return
    n_components = len(args["components"] or ({"instruction": ""} if isinstance(seed_candidate, str)
                                               else seed_candidate))
    n_val = len(args["valset"] if args["valset"] is not None else trainset)
    args["budget"] = preset_budget(args["preset"], n_val=n_val, n_components=n_components,
                                   config=engine_config(config, args))


def _progress_display(args: dict[str, Any]) -> Any:
    """The live progress display `progress=` asks for (gepetto.progress.ProgressDisplay, the CLI's), put after the
    user's callbacks: by default on when stderr is a terminal and no display is among the callbacks; or None."""
    progress = args["progress"]
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    from gepetto.progress import ProgressDisplay

    callbacks = as_callbacks(args["callbacks"])
    if progress is None and any(isinstance(c, ProgressDisplay) for c in callbacks):
        return None
    display = ProgressDisplay()
    args["callbacks"] = [*callbacks, display]
    return display


@checked_keywords
async def optimize_async(
    seed_candidate: SeedCandidate,
    trainset: Examples,
    metric: Metric,
    *,
    valset: Examples | None = None,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    reflection_lm: LM | str = DEFAULT_REFLECTION_LM,
    callbacks: Callbacks = None,
    storage: str | Path | None = None,
    run: str | None = None,
    cache: CacheMode | None = None,
    tracking: TrackingName | Tracker | None = None,
    progress: bool | None = None,
    preset: PresetName | None = None,
    config: EngineConfig | Mapping[str, Any] | None = None,
    budget: int | None = None,
    seed: int | None = None,
    max_concurrency: int | None = None,
    task_lm_params: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
    patience: int | None = None,
    target_score: float | None = None,
    perfect_score: float | None = None,
    stop_file: str | None = None,
    max_idle_iterations: int | None = None,
    max_cost_usd: float | None = None,
    max_lm_failures: int | None = None,
    lm_retry_pause: float | None = None,
    rollout_timeout: float | None = None,
    executor: ExecutorName | Executor | None = None,
    ray_address: str | None = None,
    minibatch_size: int | None = None,
    seek_failures: int | None = None,
    parent_selector: ParentSelector | str | None = None,
    epsilon: float | None = None,
    component_selector: ComponentSelector | str | None = None,
    minibatch_sampler: MinibatchSampler | str | None = None,
    accept: Acceptance | Accept | None = None,
    accept_tolerance: float | None = None,
    proposals_per_round: int | None = None,
    racing: bool | None = None,
    racing_chunk: int | None = None,
    racing_confidence: float | None = None,
    components: Sequence[str] | None = None,
    component_descriptions: Mapping[str, str] | None = None,
    proposer: Proposer | ProposerName | None = None,
    reflection_attempts: int | None = None,
    reflection_temperatures: Sequence[float] | None = None,
    reflection_max_tokens: int | None = None,
    reflection_chars: int | None = None,
    max_component_chars: int | None = None,
    evidence_size: int | None = None,
    gate_solved: int | None = None,
    rule_max_tokens: int | None = None,
    edit_rules: int | None = None,
    definitions: int | None = None,
    fewshot: int | None = None,
    fewshot_share: float | None = None,
    adaptive_fewshot: bool | None = None,
    use_merge: bool | None = None,
    max_merges: int | None = None,
    adaptive_merge: bool | None = None,
    prices: Mapping[str, tuple[float, float]] | None = None,
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None = None,
) -> Result:
    """Async `optimize`: same arguments, for callers already inside an event loop."""
    args = dict(locals())
    _with_preset(seed_candidate, trainset, args)
    display = _progress_display(args)
    tracker = _tracker(args)
    with display if display is not None else contextlib.nullcontext():
        stored = _open_stored(seed_candidate, trainset, metric, args)
        if stored is not None:
            with tracked(tracker, **stored.tracking_info()):
                return await stored.run_async()
        engine = _engine_for(seed_candidate, trainset, metric, args)
        try:
            with tracked(tracker, **_engine_tracking(engine, metric, args)):
                return await engine.run()
        finally:
            await aclose_executor(engine.executor)  # e.g. a Ray instance started for this run


@checked_keywords
def optimize(
    seed_candidate: SeedCandidate,
    trainset: Examples,
    metric: Metric,
    *,
    valset: Examples | None = None,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    reflection_lm: LM | str = DEFAULT_REFLECTION_LM,
    callbacks: Callbacks = None,
    storage: str | Path | None = None,
    run: str | None = None,
    cache: CacheMode | None = None,
    tracking: TrackingName | Tracker | None = None,
    progress: bool | None = None,
    preset: PresetName | None = None,
    config: EngineConfig | Mapping[str, Any] | None = None,
    budget: int | None = None,
    seed: int | None = None,
    max_concurrency: int | None = None,
    task_lm_params: Mapping[str, Any] | None = None,
    time_limit: float | None = None,
    patience: int | None = None,
    target_score: float | None = None,
    perfect_score: float | None = None,
    stop_file: str | None = None,
    max_idle_iterations: int | None = None,
    max_cost_usd: float | None = None,
    max_lm_failures: int | None = None,
    lm_retry_pause: float | None = None,
    rollout_timeout: float | None = None,
    executor: ExecutorName | Executor | None = None,
    ray_address: str | None = None,
    minibatch_size: int | None = None,
    seek_failures: int | None = None,
    parent_selector: ParentSelector | str | None = None,
    epsilon: float | None = None,
    component_selector: ComponentSelector | str | None = None,
    minibatch_sampler: MinibatchSampler | str | None = None,
    accept: Acceptance | Accept | None = None,
    accept_tolerance: float | None = None,
    proposals_per_round: int | None = None,
    racing: bool | None = None,
    racing_chunk: int | None = None,
    racing_confidence: float | None = None,
    components: Sequence[str] | None = None,
    component_descriptions: Mapping[str, str] | None = None,
    proposer: Proposer | ProposerName | None = None,
    reflection_attempts: int | None = None,
    reflection_temperatures: Sequence[float] | None = None,
    reflection_max_tokens: int | None = None,
    reflection_chars: int | None = None,
    max_component_chars: int | None = None,
    evidence_size: int | None = None,
    gate_solved: int | None = None,
    rule_max_tokens: int | None = None,
    edit_rules: int | None = None,
    definitions: int | None = None,
    fewshot: int | None = None,
    fewshot_share: float | None = None,
    adaptive_fewshot: bool | None = None,
    use_merge: bool | None = None,
    max_merges: int | None = None,
    adaptive_merge: bool | None = None,
    prices: Mapping[str, tuple[float, float]] | None = None,
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None = None,
) -> Result:
    """Evolve the seed candidate's texts to score better under `metric`, within `budget` rollouts.

    `program(candidate, example, ctx)` runs the user's system (default: the seed's one instruction as the
    system prompt, the example's input as the user message); `valset` defaults to the trainset. `callbacks`:
    one callable or a list, each called with every event (a typed dataclass: see gepetto.events). The options
    of the loop come from `config` (an EngineConfig; default: EngineConfig()) with each keyword argument given
    (not None) in place: budget, seed, minibatch_size, max_concurrency, use_merge, time_limit, patience,
    target_score, stop_file, max_lm_failures, component_descriptions, executor ("local", "ray" or an Executor
    object: where rollouts run; docs/integrations.md), ... (EngineConfig documents each). An
    unknown name or a bad value raises a ConfigError. Ctrl-C or SIGTERM returns the best so far;
    `Result.stop_reason` (a gepetto.StopReason) says why the run stopped.

    The strategies `parent_selector`, `component_selector`, `minibatch_sampler`, `proposer` and `accept` take a
    built-in name ("pareto", "current-best", "epsilon-greedy"; "round-robin", "all"; ...) or an object of your
    own (docs/strategies.md); `stop`: stop conditions to add to the config's (callables of the run status, or
    "sigterm"/"sigint"). `max_cost_usd` stops the run once its LM calls cost that much by `prices`.

    `storage` (a SQLite file, e.g. "gepetto.sqlite", or a database URL a team shares, "postgresql://user@host/db")
    keeps every rollout, reflection answer and candidate in the run store under the name `run` (default:
    generated), where `gepetto runs/show/report/export` see it; calling again with the same `run` resumes it
    exactly, and a changed seed, examples or path-changing option is refused with a ConfigError (the budget may
    grow). `cache`: the LM response cache (docs/runs.md).
    `tracking="mlflow"` also logs the run to MLflow (params, metrics per iteration, best candidate, report;
    docs/integrations.md), or give a tracker object (gepetto.tracking); it is called after `callbacks`.

    `progress`: the live display of the command line (rollouts, best score, ETA, a line per new candidate) on
    stderr; default: on when stderr is a terminal (None), `False` for none. `preset` ("light", "medium",
    "heavy"; gepetto.presets) sizes `budget` to the task (its validation set and components), unless a budget
    is given.
    """
    args = dict(locals())
    _with_preset(seed_candidate, trainset, args)
    display = _progress_display(args)
    tracker = _tracker(args)
    with display if display is not None else contextlib.nullcontext():
        stored = _open_stored(seed_candidate, trainset, metric, args)
        if stored is not None:
            with tracked(tracker, **stored.tracking_info()):
                return stored.run()
        engine = _engine_for(seed_candidate, trainset, metric, args)
        with tracked(tracker, **_engine_tracking(engine, metric, args)):
            return run_engine(engine)


@dataclass
class Evaluation:
    """Scores of one candidate on a set of examples (e.g. a held-out test set)."""

    mean: float
    rollouts: list[Rollout]

    @property
    def scores(self) -> dict[str, float]:
        return {r.example_id: r.score.value for r in self.rollouts}


@checked_keywords
async def evaluate_async(
    candidate: SeedCandidate,
    examples: Examples,
    metric: Metric,
    *,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    config: EngineConfig | Mapping[str, Any] | None = None,
    max_concurrency: int | None = None,
    task_lm_params: Mapping[str, Any] | None = None,
    rollout_timeout: float | None = None,
) -> Evaluation:
    """Run a candidate on examples outside any optimisation (no budget): mean score and every rollout.

    `max_concurrency`, `task_lm_params` and `rollout_timeout` are the EngineConfig options of that name (from
    `config`, default EngineConfig()). A program or metric error scores 0, as does a rollout longer than
    `rollout_timeout` seconds; an LM that gives no answer at all raises `LMUnavailable` instead.
    """
    cfg = engine_config(config, locals())
    cand, program = candidate_and_program(candidate, program)
    lm, data = RedactingLM(resolve_lm(task_lm)), as_examples(examples)
    sem = asyncio.Semaphore(cfg.max_concurrency)

    async def one(ex: Example) -> Rollout:
        async with sem:
            return await run_rollout(program, metric, cand, ex, lm, cfg.task_lm_params, cfg.rollout_timeout)

    runs = list(await asyncio.gather(*(one(ex) for ex in data)))
    return Evaluation(sum(r.score.value for r in runs) / len(runs) if runs else float("nan"), runs)


@checked_keywords
def evaluate(
    candidate: SeedCandidate,
    examples: Examples,
    metric: Metric,
    *,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    config: EngineConfig | Mapping[str, Any] | None = None,
    max_concurrency: int | None = None,
    task_lm_params: Mapping[str, Any] | None = None,
    rollout_timeout: float | None = None,
) -> Evaluation:
    """`evaluate_async` in a fresh event loop; the task LM's HTTP client is closed before the loop ends."""

    async def main() -> Evaluation:
        try:
            return await evaluate_async(candidate, examples, metric, program=program, task_lm=task_lm,
                                        config=config, max_concurrency=max_concurrency,
                                        task_lm_params=task_lm_params, rollout_timeout=rollout_timeout)
        finally:
            if not isinstance(task_lm, str):
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
    `metric=` (and `program=`). The task LM is the run's (its name, behind the run's response cache), or
    `task_lm=`. A program or metric error scores 0; an LM that gives no answer raises LMUnavailable.
    """
    from gepetto.evaluation import evaluate_stored_run

    return evaluate_stored_run(run, storage=storage, split=split, candidates=candidates, task=task,
                               examples=as_examples(examples) if examples is not None else None, metric=metric,
                               program=program, task_lm=task_lm, max_concurrency=max_concurrency)


def run_engine(engine: Engine) -> Result:
    """Run an engine to the end in a fresh event loop; Ctrl-C (SIGINT) or SIGTERM stops it gracefully, keeping
    everything paid for (a stored run is then resumable)."""
    return asyncio.run(drive_engine(engine, own_loop=True))
