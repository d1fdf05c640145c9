"""An engine put together from what a caller gives (examples, a seed and its program, LMs by name or as objects,
the options and strategy objects), and driven in an event loop: shared by the Python API (api.py) and stored runs
(runner.py), so that neither imports the other's module.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gepetto.config import ENGINE_FIELDS, PYTHON, STRATEGIES, ConfigError, EngineConfig
from gepetto.engine import stopping
from gepetto.engine.events import Callbacks, Event, Result, StopReason, as_callbacks
from gepetto.engine.executors import aclose_executor
from gepetto.engine.loop import Engine, check_inputs
from gepetto.engine.strategies import builtin_spec, label
from gepetto.lm.base import LM, LMConfigError, RedactingLM, aclose_lm, check_endpoints
from gepetto.parts import build_parts
from gepetto.program import Metric, Program, single_instruction
from gepetto.types import Candidate, Example

if TYPE_CHECKING:
    from gepetto.engine.loop import RolloutStore
    from gepetto.ledger import Ledger


def strategy_objects(given: Mapping[str, Any]) -> dict[str, Any]:
    """The strategies given as objects of one's own (not specs, nor built-in objects, which are named by their
    spec), by option."""
    return {k: v for k, v in given.items()
            if k in STRATEGIES and v is not None and not isinstance(v, (str, Mapping)) and builtin_spec(v) is None}


def engine_config(config: EngineConfig | Mapping[str, Any] | None, given: Mapping[str, Any]) -> EngineConfig:
    """`config` (default: EngineConfig()) with the options in `given` that are not None put in its place; a
    strategy given as an object is named by its `label` (its spec, or python:MODULE:QUALNAME for one's own)."""
    changes: dict[str, Any] = {k: label(v) if k in STRATEGIES and not isinstance(v, Mapping) else v
                               for k, v in given.items() if k in ENGINE_FIELDS and v is not None}
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


def lm_label(lm: LM | str) -> str:
    """How an LM is named in a stored run's config and a tracker's params: its name, or python:NAME for an object."""
    return lm if isinstance(lm, str) else f"{PYTHON}{getattr(lm, 'name', type(lm).__name__)}"


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


def assemble_engine(
    seed_candidate: Candidate | Mapping[str, str] | str,
    trainset: Sequence[Example | Mapping[str, Any]],
    metric: Metric,
    *,
    valset: Sequence[Example | Mapping[str, Any]] | None,
    program: Program | None,
    task_lm: LM | str,
    reflection_lm: LM | str,
    callbacks: Callbacks,
    rollout_store: RolloutStore | None,
    ledger: Ledger | None,
    config: EngineConfig,
    strategies: Mapping[str, Any],
    stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None,
) -> Engine:
    """The engine for these inputs, its parts built from `config` (complete) and `strategies`, the objects given
    (by option)."""
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

    check_inputs(seed_cand, train, val, config)  # the user's mistakes first, then the parts' own
    options, parts = build_parts(config, strategies, train, val, stop)
    return Engine(program, metric, seed_cand, train, val, task, reflection, options, parts,
                  callbacks=[redacted] if observers else None, rollout_store=rollout_store, ledger=ledger)


STOP_SIGNALS = {signal.SIGINT: StopReason.INTERRUPTED, signal.SIGTERM: StopReason.SIGTERM}


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
