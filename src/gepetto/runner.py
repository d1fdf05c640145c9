"""Named, stored, resumable runs of a built-in task: what `gepetto optimize` does, usable from Python too.

A run lives in the run store under its name. Starting a run that exists resumes it: the engine replays the
stored rollouts and the cached reflection answers, which leads it down exactly the same path, and pays only
for what was never finished.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gepetto.api import build_engine, run_engine
from gepetto.engine.loop import EventHandler, Result
from gepetto.ledger import Ledger
from gepetto.program import MetricError
from gepetto.store.sqlite import RecordedLM, RunStore, StoredRollouts

DEFAULT_STORAGE = "gepetto.sqlite"
# options that may change when a run is resumed (they do not alter the path the run has taken so far)
RESUMABLE_CHANGES = {"budget", "time_limit", "patience", "target_score", "max_concurrency", "prices",
                     "max_lm_failures", "lm_retry_pause"}


class ConfigError(ValueError):
    """A configuration a user wrote is wrong; the message names the field and what is accepted."""


class RunConfig(BaseModel):
    """Everything that defines a run. Validated; unknown fields are errors."""

    model_config = ConfigDict(extra="forbid")

    task: str = "demo"
    task_lm: str = "local:qwen2.5-coder-0.5b"
    reflection_lm: str = "local:qwen2.5-coder-1.5b"
    budget: int = Field(200, ge=1, description="rollouts (one program run on one example)")
    seed: int = 0
    minibatch_size: int = Field(3, ge=1)
    max_concurrency: int = Field(8, ge=1)
    use_merge: bool = True
    max_merges: int = Field(5, ge=0)
    time_limit: float | None = Field(None, gt=0, description="seconds")
    patience: int | None = Field(None, ge=1)
    target_score: float | None = Field(None, ge=0, le=1)
    data_dir: str | None = None
    n_train: int | None = Field(None, ge=1)
    n_val: int | None = Field(None, ge=1)
    n_test: int | None = Field(None, ge=0)
    task_options: dict[str, Any] = Field(default_factory=dict)
    cache: Literal["auto", "always", "off"] = "auto"
    proposals_per_round: int = Field(1, ge=1, description="proposals tried at once (for slow parallel APIs)")
    proposer: Literal["edit", "rewrite"] = "rewrite"
    max_lm_failures: int = Field(5, ge=1, description="LM outages in a row (or of one call) that stop the run")
    lm_retry_pause: float = Field(5.0, ge=0, description="seconds before a call the LM gave no answer to is retried")
    # price table: LM name -> [dollars per million input tokens, per million output tokens]
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        from gepetto.tasks import TASKS

        if v not in TASKS:
            raise ValueError(f"unknown task {v!r}; accepted: {', '.join(sorted(TASKS))}")
        return v

    @field_validator("task_lm", "reflection_lm")
    @classmethod
    def _lm_name(cls, v: str) -> str:
        from gepetto.lm.names import parse_lm_name

        parse_lm_name(v)  # raises ValueError listing the accepted forms
        return v


def load_config(path: str | Path | None = None, **overrides: Any) -> RunConfig:
    """A RunConfig from a YAML or TOML file (optional) plus overrides; errors become one ConfigError."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        text = p.read_text()
        try:
            if p.suffix in (".toml", ".tml"):
                try:
                    import tomllib
                except ModuleNotFoundError:  # Python 3.10
                    import tomli as tomllib  # type: ignore[no-redef]
                data = tomllib.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text) or {}
        except Exception as exc:
            raise ConfigError(f"config file {p} cannot be parsed: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a mapping of options, got {type(data).__name__}")
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return RunConfig(**data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown option; accepted: {', '.join(RunConfig.model_fields)}"
        lines.append(f"{field}: {msg} (got {err.get('input')!r})")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _task_kwargs(cfg: RunConfig, ledger: Ledger) -> dict[str, Any]:
    """Loader options: split sizes, data dir, and task LMs (e.g. a judge) built from their names."""
    from gepetto.lm.names import make_lm

    kw: dict[str, Any] = {"seed": cfg.seed}
    for key in ("data_dir", "n_train", "n_val", "n_test"):
        if getattr(cfg, key) is not None:
            kw[key] = getattr(cfg, key)
    for key, value in cfg.task_options.items():
        kw[key] = make_lm(value) if key.endswith("_lm") and isinstance(value, str) else value
    if any(k.endswith("_lm") for k in cfg.task_options):
        kw["ledger"] = ledger
    return kw


def _cached(lm: Any, storage: Path, mode: str) -> Any:
    if mode == "off":
        return lm
    from gepetto.lm.cache import CachedLM

    return CachedLM(lm, storage, mode=mode)


def start_or_resume(
    cfg: RunConfig,
    *,
    storage: str | Path = DEFAULT_STORAGE,
    run: str | None = None,
    on_event: EventHandler | None = None,
    stop_file: str | None = None,
    explicit: set[str] | None = None,
) -> tuple[str, Result]:
    """Run `cfg` under the name `run` in the store; resume it if that run exists.

    On resume the stored configuration wins; options in `explicit` (given by the user this time) may change
    only if they are in RESUMABLE_CHANGES, otherwise a ConfigError says which differ.
    """
    from gepetto.lm.names import make_lm
    from gepetto.tasks import load_task

    storage = Path(storage)
    store = RunStore(storage)
    name = run or f"{cfg.task}-{time.strftime('%Y%m%d-%H%M%S')}"
    info = store.get_run(name)
    resumed = info is not None
    if info is not None:
        stored = RunConfig(**info.config)
        asked = cfg.model_dump(include=explicit or set())
        clash = {k for k, v in asked.items() if getattr(stored, k) != v and k not in RESUMABLE_CHANGES}
        if clash:
            raise ConfigError(f"run {name!r} exists with other settings for {sorted(clash)}; resume it without "
                              f"them or start a new run with --run NEW_NAME")
        cfg = stored.model_copy(update={k: v for k, v in asked.items() if k in RESUMABLE_CHANGES})
        if cfg != stored:
            store.update_config(name, cfg.model_dump())
        store.mark_running(name)
    else:
        store.create_run(name, cfg.model_dump(), cfg.seed)

    ledger = Ledger.from_dict(store.ledger(name))  # costs of earlier sessions of this run stay counted
    ledger.prices = dict(cfg.prices)
    task = load_task(cfg.task, **_task_kwargs(cfg, ledger))
    if not resumed:
        store.put_examples(name, "train", task.trainset)
        store.put_examples(name, "val", task.valset)
    rollouts = StoredRollouts(store, name)
    # reflection answers (and errors) are kept with the run and replayed on resume, even sampled ones and with
    # the cache off: that is what makes resume exact
    task_lm = _cached(make_lm(cfg.task_lm), storage, cfg.cache)
    reflection_lm = RecordedLM(_cached(make_lm(cfg.reflection_lm), storage, "off" if cfg.cache == "off" else "always"),
                               store, name)
    session = len(store.events(name, "start"))
    store.add_event(name, "start", {"session": session, "resumed": resumed,
                                    "stored_rollouts": rollouts.stored_at_start})

    def record(kind: str, data: dict[str, Any]) -> None:
        if kind == "candidate":
            store.put_candidate(name, data["record"])
        elif kind in ("rollout", "reflection", "reflection_error", "lm_unavailable"):
            store.save_ledger(name, ledger.to_dict())  # a kill loses no cost already incurred
        elif kind in ("proposal", "merge", "plan"):
            store.add_event(name, kind, {"session": session, **{k: v for k, v in data.items() if k != "plan"}})
        if on_event is not None:
            on_event(kind, data)

    engine = build_engine(
        task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
        task_lm=task_lm, reflection_lm=reflection_lm, on_event=record, rollout_store=rollouts, ledger=ledger,
        budget=cfg.budget, seed=cfg.seed, minibatch_size=cfg.minibatch_size, max_concurrency=cfg.max_concurrency,
        use_merge=cfg.use_merge, max_merges=cfg.max_merges, time_limit=cfg.time_limit, patience=cfg.patience,
        target_score=cfg.target_score, stop_file=stop_file, proposals_per_round=cfg.proposals_per_round,
        proposer=cfg.proposer,
        max_lm_failures=cfg.max_lm_failures, lm_retry_pause=cfg.lm_retry_pause,
    )
    try:
        result = run_engine(engine)
    except MetricError:
        # the seed's rollouts hold no scores, only the broken metric's errors: a resume with a fixed metric
        # scores them again (the task LM's answers come back from the response cache)
        store.delete_rollouts(name, task.seed_candidate.id)
        store.finish_run(name, "failed", None)
        raise
    except BaseException:
        store.finish_run(name, "failed", None)
        raise
    # a run stopped by a Ctrl-C or a failing LM endpoint has more to do: resuming it goes on
    status = "interrupted" if result.stop_reason.startswith(("interrupted", "LM unavailable")) else "finished"
    store.save_ledger(name, ledger.to_dict())
    store.finish_run(name, status, result.to_dict())
    store.add_event(name, "done", {"session": session, "replayed_rollouts": rollouts.replayed,
                                   "stop_reason": result.stop_reason})
    return name, result
