"""MLflow tracking of a gepetto run: configuration as params, per-iteration metrics, the best candidate, the result
and the HTML report as artifacts.

`gepetto.optimize(..., tracking="mlflow")` or `gepetto optimize --tracking mlflow`. Where to log follows MLflow's
own environment: `MLFLOW_TRACKING_URI` (default: MLflow's, `sqlite:///mlflow.db` in the working directory; MLflow 3
refuses its `file:` store, which is said as a ConfigError), `MLFLOW_EXPERIMENT_NAME` or `MLFLOW_EXPERIMENT_ID`
(default: the "Default" experiment); `MlflowTracker(experiment=..., tracking_uri=...)` says it in code. A run
started inside an active MLflow run is logged as its child. mlflow is imported when a run starts, not before.

`read_event` is the only code that reads the engine's events (gepetto.engine.events).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gepetto.engine import events as ev
from gepetto.ledger import Ledger
from gepetto.secrets import redact, redact_data

MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
PARAMS_PER_CALL = 100  # and on params per log_batch


@dataclass
class Reading:
    """What an engine event says for tracking: metrics at a step, and the final Result at the end."""

    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    result: Any = None  # gepetto.Result, on the "done" event


def read_event(event: ev.Event) -> Reading | None:
    """Metrics of one engine event (None: nothing to log). The seed's validation is step 0; each iteration is
    its own step; the end gives the final numbers and the Result."""
    match event:
        case ev.CandidateAdded(record=rec, best=best, front=front) if rec.index == 0:
            return Reading(0, {"best_score": best, "rollouts_used": rec.rollouts_at_creation, "candidates": 1,
                               "pareto_front_size": len(front)})
        case ev.IterationEnded():
            metrics: dict[str, float] = {"rollouts_used": event.used, "candidates": event.candidates,
                                         "pareto_front_size": event.front}
            if event.best is not None:
                metrics["best_score"] = event.best
            return Reading(event.iteration, metrics)
        case ev.RunEnded(result=r):
            metrics = {"rollouts_used": r.rollouts_used, "candidates": len(r.candidates),
                       "pareto_front_size": len(r.pareto_front), "iterations": r.iterations,
                       "wall_seconds": r.wall_seconds}
            if r.candidates:
                metrics.update(best_score=r.best_score, seed_score=r.seed_score)
            return Reading(r.iterations, metrics, result=r)
    return None


def ledger_metrics(ledger: Ledger | None) -> dict[str, float]:
    """Cost and tokens so far, in all and per role (task, reflection, judge), where the ledger has them."""
    if ledger is None:
        return {}
    out: dict[str, float] = {}
    for prefix, u in [("", ledger.total())] + [(f"{role}_", u) for role, u in ledger.roles.items()]:
        out[f"{prefix}lm_calls"] = u.calls
        if u.input_tokens or u.output_tokens:
            out[f"{prefix}input_tokens"], out[f"{prefix}output_tokens"] = u.input_tokens, u.output_tokens
        if ledger.prices or u.cost:
            out[f"{prefix}cost_usd"] = u.cost
    return out


_KEY = re.compile(r"[^\w\-. /]")


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested configuration as MLflow params: `a.b` keys, values as text (JSON for lists), cut to MLflow's
    limit, secrets redacted."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = _KEY.sub("_", f"{prefix}{key}")
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, f"{name}."))
            continue
        text = value if isinstance(value, str) else json.dumps(redact_data(value), ensure_ascii=False, default=str)
        text = redact(text)
        out[name] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
    return out


def _artifact_name(component: str) -> str:
    return re.sub(r"[^\w\-.]", "_", component) or "component"


class MlflowTracker:
    """Logs one gepetto run as one MLflow run. Use it through `tracking=` (it is then started before and closed
    after the run), or as a plain callback in `callbacks=` (it starts at the first event it reads and ends with the
    run)."""

    def __init__(self, experiment: str | None = None, *, tracking_uri: str | None = None,
                 run_name: str | None = None, tags: Mapping[str, str] | None = None, log_report: bool = True) -> None:
        self.experiment, self.tracking_uri, self.run_name = experiment, tracking_uri, run_name
        self.tags, self.log_report = dict(tags or {}), log_report
        self.run_id: str | None = None
        self._client: Any = None
        self._managed = False
        self._closed = False
        self._ledger: Ledger | None = None
        self._store_path: str | Path | None = None
        self._name: str | None = None
        self._params: dict[str, str] = {}
        self._result: Any = None
        self._worker: ThreadPoolExecutor | None = None  # metrics are sent off the event loop, in order
        self._warned = False
        self._lock = threading.Lock()

    # ---- the tracker protocol (gepetto.tracking) ------------------------------------------------------
    def start(self, *, name: str | None = None, params: Mapping[str, Any] | None = None,
              ledger: Ledger | None = None, store_path: str | Path | None = None) -> None:
        """Create the MLflow run and log the configuration; errors here (no mlflow, a bad URI) stop the
        optimisation before anything is paid for."""
        self._managed, self._closed, self._result, self.run_id = True, False, None, None  # one tracker, many runs
        self._name, self._ledger, self._store_path = name, ledger, store_path
        self._params = flat_params(params or {})
        self._open()

    def __call__(self, event: ev.Event) -> None:
        try:
            reading = read_event(event)
        except (KeyError, AttributeError, TypeError) as exc:  # an event this version cannot read
            self._warn(f"cannot read the {getattr(event, 'kind', type(event).__name__)!r} event "
                       f"({type(exc).__name__}: {exc})")
            return
        if reading is None or self._closed:
            return
        if self.run_id is None:
            try:  # a plain callback: tracking must not stop the run
                self._open()
            except Exception as exc:
                self._closed = True
                self._warn(f"tracking is off for this run: {type(exc).__name__}: {exc}")
                return
        metrics = {**reading.metrics, **ledger_metrics(self._ledger if reading.result is None
                                                       else reading.result.ledger)}
        self._send(self._log_metrics, reading.step, metrics)
        if reading.result is not None:
            self._result = reading.result
            if not self._managed:
                self.close()

    def close(self, error: BaseException | None = None) -> None:
        """Log the best candidate, the result and the report, and end the MLflow run (FAILED on an error)."""
        with self._lock:
            if self._closed or self.run_id is None:
                self._closed = True
                return
            self._closed = True
        if self._worker is not None:
            self._worker.shutdown(wait=True)
        client, run_id = self._client, self.run_id
        status = "FINISHED"
        try:
            if error is not None:
                status = "KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED"
                client.set_tag(run_id, "gepetto.error", redact(f"{type(error).__name__}: {error}")[:5000])
            if self._result is not None:
                reason = self._result.stop_reason
                if reason.failed:  # the LM endpoint kept failing (resumable, but the run did not end well)
                    status = "FAILED"
                elif reason.resumable:  # Ctrl-C, SIGTERM: a stored run resumes (a new MLflow run)
                    status = "KILLED"
                self._log_result(self._result)
        except Exception as exc:
            self._warn(f"could not log the result ({type(exc).__name__}: {exc})")
        finally:
            try:
                client.set_terminated(run_id, status)
            except Exception as exc:
                self._warn(f"could not end the MLflow run ({type(exc).__name__}: {exc})")

    # ---- MLflow --------------------------------------------------------------------------------------
    def _open(self) -> None:
        try:
            import mlflow
            from mlflow import MlflowClient
        except ImportError as exc:
            from gepetto._install import install_hint

            raise ImportError(f"MLflow tracking needs mlflow: {install_hint('mlflow')}") from exc
        from mlflow.entities import Param

        try:
            client = MlflowClient(tracking_uri=self.tracking_uri)
            client.search_experiments(max_results=1)  # the store is opened: a refused one stops the run unpaid
        except Exception as exc:
            if "MLFLOW_ALLOW_FILE_STORE" not in str(exc):
                raise
            from gepetto.config import ConfigError

            uri = self.tracking_uri or mlflow.get_tracking_uri()
            raise ConfigError(f"MLflow tracking store {uri!r}: MLflow 3 refuses its plain-directory store (in "
                              "maintenance mode); use a database store, e.g. MLFLOW_TRACKING_URI=sqlite:///mlflow.db, "
                              "or a tracking server (docs/integrations.md, MLflow); MLFLOW_ALLOW_FILE_STORE=true "
                              "forces the old store") from None
        tags = {"gepetto.version": _version(), **self.tags}
        if self._name:
            tags["gepetto.run"] = self._name
        active = mlflow.active_run()
        if active is not None and (self.tracking_uri is None or self.tracking_uri == mlflow.get_tracking_uri()):
            tags["mlflow.parentRunId"] = active.info.run_id
        experiment_id = self._experiment_id(client, active)
        run = client.create_run(experiment_id, run_name=self.run_name or self._name, tags=tags)
        self._client, self.run_id = client, run.info.run_id
        items = [Param(k, v) for k, v in self._params.items()]
        for i in range(0, len(items), PARAMS_PER_CALL):
            client.log_batch(self.run_id, params=items[i : i + PARAMS_PER_CALL])
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gepetto-mlflow")

    def _experiment_id(self, client: Any, active: Any) -> str:
        name = self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not name and os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        if not name and active is not None:
            return active.info.experiment_id
        name = name or "Default"
        found = client.get_experiment_by_name(name)
        return found.experiment_id if found is not None else client.create_experiment(name)

    def _send(self, fn: Any, *args: Any) -> None:
        if self._worker is None:
            return

        def guarded() -> None:
            try:
                fn(*args)
            except Exception as exc:
                self._warn(f"could not log to MLflow ({type(exc).__name__}: {exc})")

        with contextlib.suppress(RuntimeError):  # closed meanwhile
            self._worker.submit(guarded)

    def _log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in metrics.items()
                                                     if v is not None])

    def _log_result(self, result: Any) -> None:
        client, run_id = self._client, self.run_id
        client.set_tag(run_id, "gepetto.stop_reason", str(result.stop_reason.value))
        client.set_tag(run_id, "gepetto.stop_message", redact(result.stop_message)[:5000])
        best = result.best_candidate.to_dict()
        client.log_dict(run_id, redact_data(best), "best_candidate.json")
        for component, text in best.items():
            client.log_text(run_id, redact(text), f"best_candidate/{_artifact_name(component)}.txt")
        client.log_text(run_id, json.dumps(redact_data(result.to_dict()), ensure_ascii=False, indent=1, default=str),
                        "result.json")
        if self.log_report:
            from gepetto.report import render_report

            client.log_text(run_id, render_report(self._snapshot(result)), "report.html")

    def _snapshot(self, result: Any) -> dict[str, Any]:
        """The report's data: the stored run (with sample outputs) when there is a store, else the Result."""
        if self._store_path is not None and self._name is not None:
            from gepetto.store.snapshot import run_snapshot
            from gepetto.store.sqlite import RunStore

            try:
                return run_snapshot(RunStore(self._store_path, readonly=True), self._name)
            except Exception as exc:
                self._warn(f"report from the result only: the run store could not be read ({exc})")
        config = {k: v for k, v in self._params.items()}
        run = {"name": self._name or self.run_name or "gepetto run", "status": "finished", "config": config,
               "task": config.get("task", ""), "task_lm": config.get("task_lm", ""),
               "reflection_lm": config.get("reflection_lm", ""), "seed": config.get("seed")}
        return {"run": run, "result": redact_data(result.to_dict()), "samples": []}

    def _warn(self, message: str) -> None:
        if not self._warned:  # tracking never stops a run; say it once
            self._warned = True
            warnings.warn(f"MLflow tracking: {message}", RuntimeWarning, stacklevel=2)


def _version() -> str:
    from gepetto import __version__

    return __version__
