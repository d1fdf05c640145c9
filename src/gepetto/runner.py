"""Named, stored, resumable runs: what `gepetto optimize` and `gepetto.optimize(..., storage=)` do.

A run lives in the run store under its name. Starting a run that exists resumes it: the engine replays the
stored rollouts and the cached reflection answers, which leads it down exactly the same path, and pays only
for what was never finished. Built-in tasks, a user's task target (`file.py:make_task`) and a program given
to `gepetto.optimize` all go through one path, `open_run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepetto.assembly import (
    as_examples,
    assemble_engine,
    candidate_and_program,
    drive_engine,
    engine_config,
    lm_config_errors,
    lm_label,
    strategy_objects,
)
from gepetto.config import (
    DEFAULT_REFLECTION_LM,
    DEFAULT_TASK_LM,
    PYTHON,
    RESUMABLE_CHANGES,
    RUN_FORMAT,
    SESSION_ONLY,
    CacheMode,
    ConfigError,
    EngineConfig,
    RunConfig,
    implicit_defaults,
    load_config,
    stored_config,
)
from gepetto.engine import events as ev
from gepetto.engine.events import Result
from gepetto.engine.loop import Engine
from gepetto.engine.strategies import label
from gepetto.ledger import Ledger
from gepetto.lm.base import LM
from gepetto.presets import preset_budget
from gepetto.program import Metric, MetricError, Program, Task
from gepetto.secrets import REDACTED, redact, redact_data
from gepetto.store.recorder import RunRecorder
from gepetto.store.sqlite import (
    RecordedLM,
    RunInfo,
    RunStore,
    StoredRollouts,
    StoreError,
    dumps,
    run_in_use,
)
from gepetto.tracking import Tracker, make_tracker, tracked, with_tracker
from gepetto.types import Candidate, Example, portable

DEFAULT_STORAGE = "gepetto.sqlite"


def _option_values(cfg: RunConfig) -> dict[str, Any]:
    """The task options, with LMs (e.g. a judge: `judge_lm=openai:...`) built from their names."""
    from gepetto.lm.names import make_lm

    return {k: make_lm(v) if k.endswith("_lm") and isinstance(v, str) else v for k, v in cfg.task_options.items()}


def _task_kwargs(cfg: RunConfig, ledger: Ledger) -> dict[str, Any]:
    """Built-in loader options: split sizes, data dir, and task LMs (e.g. a judge) built from their names."""
    kw: dict[str, Any] = {"seed": cfg.seed}
    for key in ("data_dir", "n_train", "n_val", "n_test"):
        if getattr(cfg, key) is not None:
            kw[key] = getattr(cfg, key)
    kw.update(_option_values(cfg))
    if any(k.endswith("_lm") for k in cfg.task_options):
        kw["ledger"] = ledger
    return kw


def load_run_task(cfg: RunConfig, ledger: Ledger) -> Task:
    """The Task a config names: a built-in task, or a user's task target called with the task options."""
    from gepetto.tasks import TASKS, load_task
    from gepetto.usertask import TargetError, UserCodeError, load_target

    if cfg.task.startswith(PYTHON):
        raise ConfigError(f"task {cfg.task!r} is a program given to gepetto.optimize() in Python: resume the run by "
                          "calling gepetto.optimize() again with the same arguments and the same run= name")
    if cfg.task in TASKS:
        return load_task(cfg.task, **_task_kwargs(cfg, ledger))
    builtin_only = [k for k in ("data_dir", "n_train", "n_val", "n_test") if getattr(cfg, k) is not None]
    if builtin_only:
        raise ConfigError(f"{', '.join(builtin_only)}: options of the built-in tasks; give options of your own task "
                          "as task options (--task-option KEY=VALUE), passed to it as keyword arguments")
    try:
        return load_target(cfg.task, **_option_values(cfg))
    except TargetError as exc:
        raise ConfigError(str(exc)) from None
    except UserCodeError as exc:
        if isinstance(exc.error, ConfigError):  # make_task's own way to say its options are wrong
            raise ConfigError(f"{cfg.task}: {exc.error}") from exc
        raise


def _cached(lm: Any, storage: str | Path, mode: CacheMode) -> Any:
    if mode == "off":
        return lm
    from gepetto.lm.cache import CachedLM

    return CachedLM(lm, storage, mode=mode)  # (a store that cannot be used raises StoreError)


def _as_stored(obj: Any) -> Any:
    """`obj` the way the run store gives it back (JSON, redacted, sets sorted): what a resume compares against."""
    return json.loads(dumps(portable(obj)))


def _resumed_config(name: str, stored: RunConfig, cfg: RunConfig, explicit: set[str], hint: str) -> RunConfig:
    """The stored configuration, with the options in `explicit` that may change on resume taken from `cfg`, and
    those the store keeps redacted (a password in an LM's URL) taken from `cfg` when they redact the same."""
    asked = cfg.model_dump(include=explicit - SESSION_ONLY)
    same = {k for k, v in asked.items() if getattr(stored, k) in (v, redact_data(v))}
    clash = sorted(k for k in asked if k not in same and k not in RESUMABLE_CHANGES)
    if clash:
        shown = "; ".join(f"{k}: stored {getattr(stored, k)!r}, now {asked[k]!r}" for k in clash)
        raise ConfigError(redact(f"run {name!r} exists with other settings for {clash} ({shown}); {hint}"))
    secret = sorted(k for k, v in stored.model_dump(exclude=set(asked) | SESSION_ONLY).items() if REDACTED in str(v))
    if secret:
        raise ConfigError(f"run {name!r}: {', '.join(secret)} held a secret (such as a password in a URL), which "
                          f"is never stored: give {'it' if len(secret) == 1 else 'them'} again to resume the run")
    session = {k: getattr(cfg, k) for k in SESSION_ONLY}  # a stop file is this session's, never stored
    return stored.model_copy(update={**{k: v for k, v in asked.items() if k in RESUMABLE_CHANGES or k in same},
                                     **session})


def _check_budget(store: RunStore, name: str, info: RunInfo, cfg: RunConfig) -> None:
    """A budget below the rollouts a run has used would end it short of where it got, its result worse than the
    stored one: refused, saying what the run used."""
    used = max(int((info.result or {}).get("rollouts_used") or 0), store.count_rollouts(name))
    if cfg.budget < used:
        raise ConfigError(f"run {name!r} has used {used} rollouts; a budget of {cfg.budget} would end it short of "
                          f"where it got, with a worse result than the one stored: give a budget of at least {used} "
                          "to go on with it, or look at it with `gepetto show` / `gepetto export`")


def _differences(stored: Mapping[str, Any], given: Mapping[str, Any]) -> str:
    def some(ids: list[str]) -> str:
        return ", ".join(repr(i) for i in ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")

    parts = []
    for what, ids in (("new", [i for i in given if i not in stored]), ("gone", [i for i in stored if i not in given]),
                      ("changed", [i for i in given if i in stored and stored[i] != given[i]])):
        if ids:
            parts.append(f"{len(ids)} {what} ({some(ids)})")
    return ", ".join(parts) or "the same examples in another order"


def _first_session(store: RunStore, name: str) -> dict[str, Any]:
    """What the run's first session recorded when it started (its "start" event)."""
    first = store.events(name, "start")[:1]
    return first[0]["data"] if first else {}


def _check_same_inputs(store: RunStore, name: str, task: Task, hint: str) -> None:
    """A resumed run must start from the same seed candidate and the same examples: its stored rollouts and
    decisions were made on them. Raises ConfigError saying what differs."""
    seed = _first_session(store, name).get("seed_candidate")  # None: a run stored before this check
    given_seed = _as_stored(task.seed_candidate.to_dict())
    if seed is not None and seed != given_seed:
        changed = sorted(k for k in set(seed) | set(given_seed) if seed.get(k) != given_seed.get(k))
        raise ConfigError(f"run {name!r} was started from another seed candidate (components that differ: {changed});"
                          f" {hint}")
    problems = []
    for split, examples in (("train", task.trainset), ("val", task.valset)):
        stored = store.examples(name, split)
        given = {e.id: {"inputs": _as_stored(dict(e.inputs)), "gold": _as_stored(e.gold)} for e in examples}
        # (nothing stored: a run from a version that did not keep its examples)
        if stored and list(stored.items()) != list(given.items()):
            problems.append(f"{split}: {_differences(stored, given)}")
    if problems:
        raise ConfigError(f"run {name!r} was started on other examples ({'; '.join(problems)}); {hint}")


def _check_format(store: RunStore, name: str) -> None:
    """A resumed run must have been stored in this gepetto's run format (`RUN_FORMAT`, kept with its first
    session): in another, its options and its proposals' random numbers read otherwise, and it would take another
    path. Raises ConfigError saying so."""
    then = _first_session(store, name).get("defaults") or {}
    stored = then.get("format", 1)  # (format 1 did not say it; a run older than the defaults kept is of it too)
    if stored != RUN_FORMAT:
        raise ConfigError(f"run {name!r} was stored by an earlier gepetto (run format {stored}, this one writes "
                          f"{RUN_FORMAT}: strategies named with their parameters, and the proposals' random numbers "
                          f"drawn otherwise): resumed here it would not continue the same run, so it is not resumed. "
                          f"Start a new run, or resume it with the gepetto version that started it; `gepetto show`, "
                          f"`report`, `export` and `evaluate` still read it")


def _unset(cfg: RunConfig, option: str) -> bool:
    """Whether `cfg` leaves `option` (a key of implicit_defaults) to the gepetto's default."""
    return cfg.fewshot_k is None if option == "fewshot" else getattr(cfg, option) is None


def _check_same_defaults(store: RunStore, name: str, cfg: RunConfig) -> None:
    """A resumed run's unset options must stand for what they stood for when it started (they are kept with its
    first session): a gepetto whose defaults have changed since would not continue the same run. Raises
    ConfigError naming them."""
    then = _first_session(store, name).get("defaults") or {}
    now = {k: v for k, v in implicit_defaults().items() if k != "format"}  # (the format: `_check_format`)
    changed = [f"{option}: {then.get(option)} then, {value} now" for option, value in now.items()
               if _unset(cfg, option) and then.get(option) != value]
    if changed:
        raise ConfigError(f"run {name!r} was started by a gepetto whose defaults differ from this one's "
                          f"({'; '.join(changed)}): resumed here it would not continue the same run. Resume it "
                          "with the gepetto version that started it, or start a new run")


def _label(task: str) -> str:
    """A short name for a task in a generated run name: the built-in name, the file or the function."""
    if task.startswith(PYTHON):
        return task.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
    where = task.rpartition(":")[0]
    return Path(where).stem if where.endswith(".py") else where.rsplit(".", 1)[-1] if where else task


def _new_name(store: RunStore, base: str) -> str:
    """A generated run name no run in the store has (two runs started within a second are two runs)."""
    name, n = base, 1
    while store.get_run(name) is not None:
        n += 1
        name = f"{base}-{n}"
    return name


class _StillOwned:
    """A stop condition of a run in a shared store: the session ends, its step in flight cancelled, as soon as the
    heartbeat finds that another process has taken the run over (this one went unheard for longer than the
    store's grace period: asleep, or cut off from the server)."""

    def __init__(self, store: RunStore, name: str) -> None:
        self.store, self.name = store, name
        self.message = f"run {name!r} was taken over by another process"

    def __call__(self, _status: Any) -> str | None:
        return None if self.store.owns(self.name) else self.message

    def arm(self, stop: Callable[..., None]) -> Callable[[], None]:
        loop = asyncio.get_running_loop()

        def lost() -> None:  # (called from the heartbeat's thread)
            loop.call_soon_threadsafe(stop, ev.StopReason.CONDITION, self.message)

        return self.store.watch_ownership(self.name, lost)


def _with_owner_check(stop: Any, store: RunStore, name: str) -> Any:
    """`stop`, and in a shared store `_StillOwned`."""
    if not store.shared:
        return stop
    given = [] if stop is None else [stop] if isinstance(stop, str) or callable(stop) else list(stop)
    return [*given, _StillOwned(store, name)]


TaskFactory = Callable[[RunConfig, Ledger], Task]
CLI_HINT = "resume it without them or start a new run with --run NEW_NAME"
PYTHON_HINT = "call again with what the run was started with, or give another run= name to start a new run"


@dataclass
class StoredRun:
    """One session of a stored run, ready to go: `run()` (or `await run_async()`) drives its engine and records
    how the session ended."""

    store: RunStore
    name: str
    config: RunConfig
    task: Task
    engine: Engine
    rollouts: StoredRollouts
    ledger: Ledger
    session: int
    previous: RunInfo | None = None  # the run as stored when this session began (None: a new run)

    async def run_async(self, *, own_loop: bool = False) -> Result:
        """Run in the running event loop; `own_loop`: it is ours, so signals stop the run and LMs are closed."""
        store, name = self.store, self.name
        try:
            result = await drive_engine(self.engine, own_loop=own_loop)
        except MetricError:
            # the seed's rollouts hold no scores, only the broken metric's errors: a resume with a fixed metric
            # scores them again (the task LM's answers come back from the response cache)
            with contextlib.suppress(StoreError):
                store.delete_rollouts(name, self.task.seed_candidate.id)
                store.finish_run(name, "failed", None)
            raise
        except BaseException:
            with contextlib.suppress(StoreError):  # the store itself may be what failed (a full disk): say that
                store.finish_run(name, "failed", None)
            raise
        # a run stopped by a Ctrl-C, SIGTERM or a failing LM endpoint has more to do: resuming it goes on
        status = "interrupted" if result.stop_reason.resumable else "finished"
        store.save_ledger(name, self.ledger.to_dict())
        before = self._further_before(result)
        if before is not None:
            status = before.status
        store.finish_run(name, status, result.to_dict(), keep_result=before is not None)
        store.add_event(name, "done", {"session": self.session, "replayed_rollouts": self.rollouts.replayed,
                                       "stop_reason": result.stop_reason.value, "stop_message": result.stop_message})
        self._check_retraced(status)
        return result

    def _further_before(self, result: Result) -> RunInfo | None:
        """The run as stored before this session when it had got further than this session (a shorter limit on a
        resumed run: `time_limit`, `patience`, ...). A resume retraces the stored path, so a result from earlier on
        it is never better: the stored result is kept, and a warning says so."""
        before = self.previous
        old = (before.result or {}) if before is not None else {}
        if before is None or int(old.get("rollouts_used") or 0) <= result.rollouts_used:
            return None
        best = old.get("best_score")
        warnings.warn(f"run {self.name!r} had got further before ({old['rollouts_used']} rollouts, best "
                      f"{best if best is None else format(best, '.3f')}) than this session's limits let it "
                      f"({result.rollouts_used} rollouts, stopped: {result.stop_message}): the stored result is "
                      "kept", RuntimeWarning, stacklevel=3)
        return before

    def _check_retraced(self, status: str) -> None:
        """Warn (and log a `diverged` event) when a resumed session that ran to its end took another path than
        the stored one: it paid new rollouts and never asked for some stored ones. Its result is sound, but
        not the one the uninterrupted run would have given."""
        left, paid = self.rollouts.left_behind, self.rollouts.paid
        if status != "finished" or not left or not paid:
            return
        self.store.add_event(self.name, "diverged", {"session": self.session, "left_behind": left, "paid": paid,
                                                     "stored_rollouts": self.rollouts.stored_at_start})
        warnings.warn(f"run {self.name!r} did not retrace its stored path on resume: {left} of its "
                      f"{self.rollouts.stored_at_start} stored rollouts were never asked for again and {paid} new ones "
                      "were paid. The result stands, but it is not the one an uninterrupted run would have given. "
                      "Usual causes: the run was started by another gepetto version (defaults or proposals "
                      "changed), or a strategy or program of one's own decides on something outside the run "
                      "(unseeded randomness, the clock)", RuntimeWarning, stacklevel=2)

    def run(self) -> Result:
        """Run to the end in a fresh event loop; Ctrl-C or SIGTERM stops it gracefully (resumable)."""
        return asyncio.run(self.run_async(own_loop=True))

    def tracking_info(self) -> dict[str, Any]:
        """What a tracker (gepetto.tracking) is started with: the run's name, configuration, ledger and store."""
        return {"name": self.name, "params": {"run": self.name, **self.config.model_dump()}, "ledger": self.ledger,
                "store_path": self.store.storage}


def open_run(
    cfg: RunConfig,
    make_task: TaskFactory = load_run_task,
    *,
    storage: str | Path = DEFAULT_STORAGE,
    run: str | None = None,
    explicit: set[str] | None = None,
    hint: str = CLI_HINT,
    callbacks: ev.Callbacks = None,
    stop_file: str | None = None,
    task_lm: LM | None = None,
    reflection_lm: LM | None = None,
    strategies: Mapping[str, Any] | None = None,
    stop: Any = None,
    preset: str | None = None,
) -> StoredRun:
    """Create the run `run` in the store, or reopen it to resume; the one path every stored run takes.

    On resume the stored configuration wins; options in `explicit` may change only if they are in
    RESUMABLE_CHANGES, and the task must give the same seed candidate and examples, otherwise a ConfigError
    says what differs (ending with `hint`). `task_lm`/`reflection_lm`: LM objects to use instead of building
    them from the config's names. `stop_file`: overrides the config's (it is this session's, never stored).
    `strategies`: strategy objects (their labels are in the config), `stop`: extra stop conditions (this session's).
    `preset` (gepetto.presets: light, medium, heavy) sizes a new run's budget to its task, unless `budget` is in
    `explicit`; an existing run keeps its stored budget, so a preset for it is refused.
    """
    if stop_file is not None:
        cfg = cfg.model_copy(update={"stop_file": stop_file})
    from gepetto.lm.names import make_lm

    store = RunStore(storage)
    name = run or _new_name(store, f"{_label(cfg.task)}-{time.strftime('%Y%m%d-%H%M%S')}")
    info = store.get_run(name)
    resumed = info is not None
    if preset is not None and resumed:
        raise ConfigError(f"run {name!r} exists and keeps the budget it was given; a preset sizes a new run only: "
                          "resume it without a preset (--budget N gives it more rollouts), or start a new run")
    if info is not None:
        if info.owned_elsewhere:  # (checked again when the run is claimed, in one transaction)
            raise run_in_use(name, info.pid, info.host if info.remote else None)
        _check_format(store, name)
        cfg = _resumed_config(name, stored_config(name, store.path, info.config), cfg, explicit or set(), hint)
        _check_same_defaults(store, name, cfg)
        _check_budget(store, name, info, cfg)
    ledger = Ledger.from_dict(store.ledger(name))  # costs of earlier sessions of this run stay counted
    ledger.prices = dict(cfg.prices)
    task = make_task(cfg, ledger)
    if info is not None:
        _check_same_inputs(store, name, task, hint)
    elif preset is not None and "budget" not in (explicit or set()):
        cfg = cfg.model_copy(update={"budget": preset_budget(
            preset, n_val=len(task.valset), n_components=len(cfg.components or task.seed_candidate),
            config=cfg.engine_config())})
    rollouts = StoredRollouts(store, name)
    # reflection answers (and errors) are kept with the run and replayed on resume, even sampled ones and with
    # the cache off: that is what makes resume exact
    with lm_config_errors():  # a missing API key: a configuration error, found before anything is paid
        task_lm = _cached(task_lm if task_lm is not None else make_lm(cfg.task_lm), storage, cfg.cache)
        reflection_lm = RecordedLM(_cached(reflection_lm if reflection_lm is not None else make_lm(cfg.reflection_lm),
                                           storage, "off" if cfg.cache == "off" else "always"), store, name)
    session = len(store.events(name, "start"))
    record = RunRecorder(store, name, ledger, session)

    # built (its inputs and LM endpoints checked) before the store is written: a refused start leaves no run behind
    given = strategies or {}
    engine = assemble_engine(
        task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
        task_lm=task_lm, reflection_lm=reflection_lm, callbacks=[record, *ev.as_callbacks(callbacks)],
        rollout_store=rollouts, ledger=ledger, config=engine_config(cfg.engine_config(), given),
        strategies=strategy_objects(given), stop=_with_owner_check(stop, store, name))
    if info is None:
        store.create_run(name, cfg.stored(), cfg.seed)
        store.put_examples(name, "train", task.trainset)
        store.put_examples(name, "val", task.valset)
    else:
        if cfg.stored() != info.config:
            store.update_config(name, cfg.stored())
        store.mark_running(name)
    # what a resume must start from, and what its unset options stand for
    first = {} if resumed else {"seed_candidate": task.seed_candidate.to_dict(), "defaults": implicit_defaults()}
    store.add_event(name, "start", {"session": session, "resumed": resumed,
                                    "stored_rollouts": rollouts.stored_at_start, **first})
    return StoredRun(store, name, cfg, task, engine, rollouts, ledger, session, info)


def start_or_resume(
    cfg: RunConfig,
    *,
    storage: str | Path = DEFAULT_STORAGE,
    run: str | None = None,
    callbacks: ev.Callbacks = None,
    stop_file: str | None = None,
    explicit: set[str] | None = None,
    tracking: str | Tracker | None = None,
    preset: str | None = None,
) -> tuple[str, Result]:
    """Run `cfg` (a built-in task or a task target) under the name `run` in the store; resume it if it exists.

    On resume the stored configuration wins; options in `explicit` (given by the user this time) may change
    only if they are in RESUMABLE_CHANGES, otherwise a ConfigError says which differ. `tracking` (default: the
    config's): "mlflow" (or a tracker object) logs the run there too (gepetto.tracking). `preset`: see `open_run`.
    """
    tracker = make_tracker(tracking if tracking is not None else cfg.tracking)
    stored = open_run(cfg, storage=storage, run=run, explicit=explicit, callbacks=with_tracker(callbacks, tracker),
                      stop_file=stop_file, preset=preset)
    with tracked(tracker, **stored.tracking_info()):
        return stored.name, stored.run()


def open_program_run(
    seed_candidate: Candidate | Mapping[str, str] | str,
    trainset: Sequence[Example | Mapping[str, Any]],
    metric: Metric,
    *,
    storage: str | Path,
    run: str | None = None,
    cache: CacheMode | None = None,
    valset: Sequence[Example | Mapping[str, Any]] | None = None,
    program: Program | None = None,
    task_lm: LM | str = DEFAULT_TASK_LM,
    reflection_lm: LM | str = DEFAULT_REFLECTION_LM,
    callbacks: ev.Callbacks = None,
    config: EngineConfig | None = None,
    strategies: Mapping[str, Any] | None = None,
    stop: Any = None,
) -> StoredRun:
    """`gepetto.optimize(..., storage=...)`: a user's program as a stored run (the arguments are optimize's).

    The config records the program as `python:MODULE:QUALNAME` (the metric's name for the default program) and
    LM objects as `python:NAME`. `cache` defaults to "auto" for LMs given by name and "off" for LM objects (the
    response cache keys on an LM's name, which an object need not make unique).
    """
    identity = label(program if program is not None else metric).removeprefix(PYTHON)
    seed, program = candidate_and_program(seed_candidate, program)
    train = as_examples(trainset)
    val = as_examples(valset) if valset is not None else train
    objects = not (isinstance(task_lm, str) and isinstance(reflection_lm, str))
    engine = (config or EngineConfig()).model_dump()
    cfg = load_config(task=PYTHON + identity, task_lm=lm_label(task_lm), reflection_lm=lm_label(reflection_lm),
                      cache=cache or ("off" if objects else "auto"), **engine)
    task = Task(cfg.task, program, metric, seed, train, val)
    return open_run(cfg, lambda _cfg, _ledger: task, storage=storage, run=run, explicit=set(RunConfig.model_fields),
                    hint=PYTHON_HINT, callbacks=callbacks,
                    task_lm=None if isinstance(task_lm, str) else task_lm,
                    reflection_lm=None if isinstance(reflection_lm, str) else reflection_lm, strategies=strategies,
                    stop=stop)
