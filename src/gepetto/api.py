"""The public entry point: `optimize()` (and its async twin) over a program, a metric and examples."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import inspect
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from gepetto.config import (
    DEFAULT_REFLECTION_LM,
    DEFAULT_TASK_LM,
    ENGINE_FIELDS,
    PYTHON,
    STRATEGIES,
    Accept,
    CacheMode,
    ConfigError,
    EngineConfig,
    ExecutorName,
    ProposerName,
    TrackingName,
    UnknownOptionError,
)
from gepetto.engine import stopping
from gepetto.engine.executors import Executor, aclose_executor
from gepetto.engine.loop import Engine, Result, RolloutStore
from gepetto.engine.proposers import Proposer
from gepetto.engine.strategies import (
    Acceptance,
    ComponentSelector,
    MinibatchSampler,
    ParentSelector,
    label,
)
from gepetto.events import Callbacks, Event, StopReason, as_callbacks
from gepetto.ledger import Ledger
from gepetto.lm.base import LM, LMConfigError, RedactingLM, aclose_lm, check_endpoints
from gepetto.program import Metric, Program, Rollout, run_rollout, single_instruction
from gepetto.tracking import Tracker, make_tracker, tracked, with_tracker
from gepetto.types import Candidate, Example

if TYPE_CHECKING:
    from gepetto.runner import StoredRun


SeedCandidate = Candidate | Mapping[str, str] | str  # a bare string is the one component "instruction"
Examples = Sequence[Example | Mapping[str, Any]]
P = ParamSpec("P")
R = TypeVar("R")


RENAMED = {"on_event": "callbacks", "lm_params": "task_lm_params"}  # keywords of earlier versions -> their names now


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
                close = [RENAMED[k]] if RENAMED.get(k) in accepted else difflib.get_close_matches(k, accepted, n=1)
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


def strategy_objects(given: Mapping[str, Any]) -> dict[str, Any]:
    """The strategies given as objects (not names), by option."""
    return {k: v for k, v in given.items() if k in STRATEGIES and v is not None and not isinstance(v, str)}


def engine_config(config: EngineConfig | Mapping[str, Any] | None, given: Mapping[str, Any]) -> EngineConfig:
    """`config` (default: EngineConfig()) with the options in `given` that are not None put in its place; a
    strategy given as an object is named by its `label` (python:MODULE:QUALNAME)."""
    changes: dict[str, Any] = {k: label(v) if k in STRATEGIES else v for k, v in given.items()
                               if k in ENGINE_FIELDS and v is not None}
    if config is None:
        return EngineConfig(**changes)
    if isinstance(config, EngineConfig):
        base = config.model_dump(include=set(ENGINE_FIELDS))  # (a RunConfig has more: only the engine's part)
    elif isinstance(config, Mapping):
        base = dict(config)
    else:
        raise ConfigError(f"config= takes a gepetto.EngineConfig (or a mapping of its options), got "
                          f"{type(config).__name__}")
    return EngineConfig(**{**base, **changes})


@contextlib.contextmanager
def lm_config_errors() -> Iterator[None]:
    """An LM set up wrong (LMConfigError: a missing API key, an endpoint that cannot be reached) as a ConfigError."""
    try:
        yield
    except LMConfigError as exc:
        raise ConfigError(str(exc)) from None


def resolve_lm(lm: LM | str) -> LM:
    """An LM object as is, or one built from a name such as `local:qwen2.5-coder-0.5b`."""
    if isinstance(lm, str):
        from gepetto.lm.names import make_lm

        return make_lm(lm)
    return lm


def as_examples(data: Sequence[Example | Mapping[str, Any]] | None) -> list[Example]:
    out = []
    for item in data or []:
        if isinstance(item, Example):
            out.append(item)
        elif isinstance(item, Mapping):
            item = dict(item)
            gold = item.pop("gold", item.pop("answer", None))
            out.append(Example(inputs=item, gold=gold))
        else:
            raise TypeError(f"examples must be gepetto.Example or dicts, got {type(item).__name__}")
    return out


def candidate_and_program(
    candidate: Candidate | Mapping[str, str] | str, program: Program | None
) -> tuple[Candidate, Program]:
    """A Candidate (a bare string is the one component "instruction") and its program (default: one call)."""
    if isinstance(candidate, str):
        candidate = {"instruction": candidate}
    cand = candidate if isinstance(candidate, Candidate) else Candidate(candidate)
    if program is None:
        if len(cand) != 1:
            raise ValueError("a candidate with several components needs a program that uses them")
        program = single_instruction(next(iter(cand)))
    return cand, program


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
    cfg = engine_config(config, locals())
    objects = strategy_objects(locals())
    seed_cand, program = candidate_and_program(seed_candidate, program)
    train = as_examples(trainset)
    val = as_examples(valset) if valset is not None else train
    # no secret reaches feedback, events or the reflection prompt: LM errors, and the reflection LM's prompts and
    # answers, are redacted (the program gets the task LM's answers as they are)
    with lm_config_errors():
        task = RedactingLM(resolve_lm(task_lm))
        reflection = RedactingLM(resolve_lm(reflection_lm), inputs=True)
        check_endpoints(task, reflection)  # before anything is paid: a dead endpoint or a refused key
    observers = as_callbacks(callbacks)

    def redacted(event: Event) -> None:  # redacted once, for every callback
        clean = event.redacted()
        for callback in observers:
            callback(clean)

    return Engine(program, metric, seed_cand, train, val, task, reflection, cfg,
                  callbacks=[redacted] if observers else None, rollout_store=rollout_store, ledger=ledger,
                  strategies=objects, stop=stop)


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
    from gepetto.runner import _lm_label

    program = args["program"]
    params = {"task": label(program if program is not None else metric).removeprefix(PYTHON),
              "task_lm": _lm_label(args["task_lm"]), "reflection_lm": _lm_label(args["reflection_lm"]),
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
    tracker = _tracker(args)
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

    `storage` (a SQLite file, e.g. "gepetto.sqlite") keeps every rollout, reflection answer and candidate in
    the run store under the name `run` (default: generated), where `gepetto runs/show/report/export` see it;
    calling again with the same `run` resumes it exactly, and a changed seed, examples or path-changing option
    is refused with a ConfigError (the budget may grow). `cache`: the LM response cache (docs/runs.md).
    `tracking="mlflow"` also logs the run to MLflow (params, metrics per iteration, best candidate, report;
    docs/integrations.md), or give a tracker object (gepetto.tracking); it is called after `callbacks`.
    """
    args = dict(locals())
    tracker = _tracker(args)
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


STOP_SIGNALS = {signal.SIGINT: StopReason.INTERRUPTED, signal.SIGTERM: StopReason.SIGTERM}


def run_engine(engine: Engine) -> Result:
    """Run an engine to the end in a fresh event loop; Ctrl-C (SIGINT) or SIGTERM stops it gracefully, keeping
    everything paid for (a stored run is then resumable)."""
    return asyncio.run(drive_engine(engine, own_loop=True))


async def drive_engine(engine: Engine, *, own_loop: bool) -> Result:
    """Run an engine in the running event loop. `own_loop`: the loop is ours (from `asyncio.run`), so Ctrl-C and
    SIGTERM stop the run gracefully and the LMs' HTTP clients are closed before it ends."""
    signals = [stopping.OnSignal(sig, reason) for sig, reason in STOP_SIGNALS.items()] if own_loop else []
    try:
        return await engine.run(session_stops=signals)
    finally:
        if own_loop:
            # HTTP clients belong to this loop: close them here, not at exit from a loop that is gone
            await aclose_lm(engine.task_lm)
            await aclose_lm(engine.reflection_lm)
        await aclose_executor(engine.executor)  # e.g. a Ray instance started for this run
