"""Rollouts as Ray tasks, for programs whose rollouts are heavy (tools, code execution, retrieval).

`gepetto.optimize(..., executor="ray")` (CLI: `--executor ray`) runs every rollout (the program and the metric on
one example, for one candidate) as a Ray task: on a local Ray started for the run (`ray.init()`), or on the
cluster at `executor="ray(address=...)"`, or on the Ray this process is already connected to. Everything else
stays on the driver: the decisions, the budget, the reflection LM, the run store. The run is the same as with the local
executor (same seed and deterministic LMs: same candidates, scores and rollout count).

What travels to a worker, and the constraints that follow (docs/integrations.md, "Ray"):
- the program and the metric, by cloudpickle: functions of `__main__` or a notebook travel by value, functions of
  a module by reference, so that module (and gepetto) must be importable on every worker;
- the candidate and the example (plain data); the program's output travels back, so it must be picklable;
- the task LM as a recipe, never as a live object: an LM built from a name (`openai:MODEL@URL`, `local:...`) is
  built again from that name in each worker process, once per run; an LM object is pickled (it must hold no
  open client) and each worker process works on its own copy. The worker calls the LM itself: the endpoint must
  be reachable from the workers, an API key is read from the worker's environment (gepetto never ships keys),
  and a `local:` LM loads its own copy of the weights in every worker process.
- The driver's response cache is not used by the workers, and LM calls a metric makes itself (a judge) happen on
  the worker's copy, outside the run's ledger. The task LM's calls are replayed into the run's ledger.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gepetto.ledger import Ledger
from gepetto.lm.base import LM, LMUnavailable, MeteredLM, RedactingLM
from gepetto.program import Metric, Program, Rollout, run_rollout
from gepetto.types import Candidate, Example


class ExecutorError(RuntimeError):
    """Ray could not run a rollout at all (not the program's or the metric's failure): the run stops."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        from gepetto._install import install_hint

        raise ImportError(f"executor='ray' needs Ray: {install_hint('ray')}") from None
    return ray


# ---- the driver side ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LMRecipe:
    """How a worker gets the task LM: built again from its name, or unpickled; redacted as on the driver."""

    name: str | None = None
    blob: bytes | None = None
    redact_inputs: bool | None = None  # None: not wrapped in a RedactingLM

    def build(self) -> LM:
        if self.name is not None:
            from gepetto.lm.names import make_lm

            lm = make_lm(self.name)
        else:
            from ray import cloudpickle

            assert self.blob is not None  # a recipe holds a name or a pickled LM
            lm = cloudpickle.loads(self.blob)
        return lm if self.redact_inputs is None else RedactingLM(lm, inputs=self.redact_inputs)


def lm_recipe(task_lm: LM) -> tuple[LMRecipe, Ledger | None, str]:
    """The recipe of `task_lm` for the workers, and the ledger and role its calls are to be recorded under.

    The engine's wrappers are taken off: metering (replayed on the driver), redaction (done again in the worker)
    and the response cache (a SQLite file of the driver's)."""
    from gepetto.lm.cache import CachedLM

    ledger, role, redact_inputs, lm = None, "task", None, task_lm
    while True:
        if isinstance(lm, MeteredLM):
            if ledger is None:
                ledger, role = lm.ledger, lm.role
            lm = lm.lm
        elif isinstance(lm, RedactingLM):
            redact_inputs = bool(redact_inputs) or lm.inputs
            lm = lm.lm
        elif isinstance(lm, CachedLM):
            lm = lm.lm
        else:
            break
    name = getattr(lm, "source_name", None)
    if isinstance(name, str):
        return LMRecipe(name=name, redact_inputs=redact_inputs), ledger, role
    return LMRecipe(blob=_pickled(lm, f"the task LM {getattr(lm, 'name', type(lm).__name__)!r}",
                                  "give the task LM by name (e.g. 'openai:MODEL@URL'), or make the object picklable "
                                  "(open its clients on first use, not in __init__)"),
                    redact_inputs=redact_inputs), ledger, role


def _pickled(obj: Any, what: str, hint: str) -> bytes:
    from ray import cloudpickle

    try:
        return cloudpickle.dumps(obj)
    except Exception as exc:
        raise ExecutorError(f"{what} cannot be sent to Ray workers ({type(exc).__name__}: {exc}); {hint}") from None


@dataclass
class _Bundle:
    """What every rollout of a run shares, put once in Ray's object store and kept by each worker process."""

    owner: tuple[Any, ...]  # the driver's objects it was made from (held, so their ids stay theirs)
    key: str
    ref: Any  # ObjectRef of the pickled (program, metric, LM recipe, LM params)
    ledger: Ledger | None
    role: str


class RayExecutor:
    """Runs each rollout as a Ray task; see the module docstring for what must be serialisable.

    `address`: the Ray cluster to join (None: `$RAY_ADDRESS`, else the Ray last started on this machine, else a
    local Ray started for the run), joined on the first rollout unless this process is already connected (call
    `ray.init(...)` yourself for other options, e.g. a `runtime_env` that ships your program's module). A Ray
    this executor joined or started is left by `aclose()` (at the end of `gepetto.optimize`); `init_options`
    go to `ray.init`. `remote_options`: Ray task options for each rollout, e.g. `{"num_cpus": 0.5}` or
    `{"resources": {"sandbox": 1}}` (default: one CPU per rollout).
    """

    def __init__(self, address: str | None = None, *, init_options: Mapping[str, Any] | None = None,
                 remote_options: Mapping[str, Any] | None = None) -> None:
        _ray()  # a missing extra is said before anything is paid for
        self.address = address
        self.init_options = dict(init_options or {})
        self.remote_options = dict(remote_options or {})
        self._started = False
        self._remote: Any = None
        self._bundle: _Bundle | None = None

    def _connect(self) -> Any:
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=self.address, **self.init_options)
            self._started = True
        if self._remote is None:
            remote = ray.remote(_worker_rollout)
            self._remote = remote.options(**self.remote_options) if self.remote_options else remote
        return ray

    def _bundle_for(self, program: Program, metric: Metric, task_lm: LM, lm_params: Mapping[str, Any]) -> _Bundle:
        owner = (program, metric, task_lm, json.dumps(dict(lm_params), sort_keys=True, default=str))
        b = self._bundle
        if b is not None and all(x is y for x, y in zip(b.owner[:3], owner[:3], strict=True)) \
                and b.owner[3] == owner[3]:
            return b
        recipe, ledger, role = lm_recipe(task_lm)
        fix = "define it in the script or in a module installed on every worker"
        payload = (_pickled(program, "the program", fix), _pickled(metric, "the metric", fix),
                   recipe, dict(lm_params))
        from ray import cloudpickle

        self._bundle = _Bundle(owner, uuid.uuid4().hex, _ray().put(cloudpickle.dumps(payload)), ledger, role)
        return self._bundle

    async def run(self, program: Program, metric: Metric, candidate: Candidate, example: Example, task_lm: LM,
                  lm_params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Rollout:
        ray = self._connect()
        bundle = self._bundle_for(program, metric, task_lm, lm_params or {})
        ref = self._remote.remote(bundle.key, bundle.ref, candidate, example, timeout)
        try:
            reply: _Reply = await asyncio.wrap_future(ref.future())  # also a Ray Client (ray://) reference
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except ray.exceptions.RayError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise ExecutorError(f"a rollout of example {example.id!r} could not run on Ray: {type(cause).__name__}: "
                                f"{str(cause).strip().splitlines()[-1] if str(cause).strip() else ''} (is gepetto, "
                                f"the same version, installed on every worker?)") from exc
        if bundle.ledger is not None:
            for call in reply.calls:
                bundle.ledger.record(bundle.role, **call)
        if reply.setup_error is not None:
            raise ExecutorError(reply.setup_error)
        if reply.unavailable is not None:
            raise reply.unavailable
        assert reply.rollout is not None
        return reply.rollout

    async def aclose(self) -> None:
        self._bundle = None
        if self._started:
            self._started = False
            self._remote = None
            _ray().shutdown()


# ---- the worker side ----------------------------------------------------------------------------------------


@dataclass
class _Reply:
    rollout: Rollout | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # ledger.record keywords, one per task-LM call
    unavailable: LMUnavailable | None = None
    setup_error: str | None = None


class _CallLog(Ledger):
    """A ledger that keeps each call as recorded, to be replayed into the driver's ledger."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any]] = []

    def record(self, role: str, **call: Any) -> None:
        self.calls.append(call)


@dataclass
class _Loaded:
    program: Program
    metric: Metric
    lm: LM
    lm_params: dict[str, Any]


_LOADED: OrderedDict[str, _Loaded] = OrderedDict()  # per worker process: the last runs' programs and LMs
_KEEP = 2
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _worker_loop() -> asyncio.AbstractEventLoop:
    """One event loop per worker process, kept across tasks (an LM's HTTP client belongs to a loop)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="gepetto-ray-loop", daemon=True).start()
            _LOOP = loop
        return _LOOP


def _load(key: str, payload: bytes) -> _Loaded:
    loaded = _LOADED.get(key)
    if loaded is None:
        from ray import cloudpickle

        program, metric, recipe, lm_params = cloudpickle.loads(payload)
        loaded = _Loaded(cloudpickle.loads(program), cloudpickle.loads(metric), recipe.build(), lm_params)
        _LOADED[key] = loaded
        while len(_LOADED) > _KEEP:
            _LOADED.popitem(last=False)
    _LOADED.move_to_end(key)
    return loaded


def _worker_rollout(key: str, payload: bytes, candidate: Candidate, example: Example,
                    timeout: float | None = None) -> _Reply:
    """The Ray task: one rollout in this worker process, as `run_rollout` does it in the driver's (a rollout
    longer than `timeout` seconds is cut there, as in the driver)."""
    try:
        loaded = _load(key, payload)
    except Exception as exc:
        import socket

        return _Reply(setup_error=f"the program, metric or task LM could not be loaded in a Ray worker on "
                                  f"{socket.gethostname()}: {type(exc).__name__}: {exc} (what a module defines "
                                  f"must be importable there: install it on the workers, or ship it with "
                                  f"ray.init(runtime_env={{'py_modules': [...]}}))")
    log = _CallLog()
    lm = MeteredLM(loaded.lm, log, "task")
    future = asyncio.run_coroutine_threadsafe(
        run_rollout(loaded.program, loaded.metric, candidate, example, lm, loaded.lm_params, timeout), _worker_loop())
    try:
        return _Reply(future.result(), log.calls)
    except LMUnavailable as exc:
        return _Reply(calls=log.calls, unavailable=exc)
    except BaseException:  # e.g. the task was cancelled: stop the rollout too
        future.cancel()
        raise
