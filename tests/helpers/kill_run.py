"""Run (or resume) a stored simulated optimisation and kill itself at a chosen point.

    kill_run.py STORAGE RUN WHEN [PROPOSALS_PER_ROUND [OPTIONS]]

WHEN: -1 never, N: SIGKILL after N rollout events (these two on one component, no merge); or, on two components
with merges: never; EVENT:K:R: SIGKILL R rollouts after the K-th EVENT, where
EVENT is a phase (validation/seed, minibatch, reflection, validation/reflection, validation/merge) or an engine
event (merge, proposal, candidate); call:ROLE:K: SIGKILL inside the K-th LM call (role task or reflection) that
reaches the LM, before it answers; tx:METHOD:K: SIGKILL inside the K-th run-store transaction of METHOD
(put_rollout, put_candidate, add_event, save_ledger, put_lm_answer), its statements run and not committed;
sigterm:N: SIGTERM after N rollouts (a graceful stop). Events and calls are counted from the start of this
session, replayed ones included (calls answered from the run store or the cache never reach the LM).

Environment: KILL_RUN_CACHE sets the response-cache mode (default: the config's); KILL_RUN_PAID names a file
that gets one line per LM call that reaches the LM ("task" or "reflection"), written before the call
returns, so the calls a kill cut short are counted too. OPTIONS: a JSON object of run options added to the config.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any

from gepetto.engine import events as ev


def make_config(merges: bool, per_round: int = 1, cache: str | None = None,
                options: dict[str, Any] | None = None) -> Any:
    """The run's config; `options` (the JSON OPTIONS argument) adds or overrides run options."""
    from gepetto.config import load_config

    extra: dict[str, Any] = {"cache": cache} if cache else {}
    extra.update(options or {})
    if not merges:
        return load_config(task="sim", task_lm="sim:task?latency=0.002",
                           reflection_lm="sim:reflection?noise=0.4&seed=5", budget=150, seed=3, max_concurrency=4,
                           task_options={"kinds": 6}, proposals_per_round=per_round, **extra)
    return load_config(task="sim", task_lm="sim:task?latency=0.002",
                       reflection_lm="sim:reflection?noise=0.3&seed=5&forget=true&max_rules=2", budget=200, seed=2,
                       max_concurrency=4, task_options={"kinds": 6, "components": 2}, proposals_per_round=per_round,
                       **extra)


def event_name(event: ev.Event) -> str:
    """An engine event as counted here: a phase with its origin ("validation/seed"), or the event's kind.
    (The one place that reads events: adapt it when events change shape.)"""
    if isinstance(event, ev.PhaseStarted):
        return event.phase + (f"/{event.origin}" if event.origin else "")
    return event.kind


def _die(sig: int) -> None:
    os.kill(os.getpid(), sig)  # SIGKILL: no cleanup, no flush, as hard as a crash


class PaidLM:
    """Counts the calls that reach the LM (in the file KILL_RUN_PAID), and can die inside the K-th one."""

    def __init__(self, lm: Any, role: str, kill_at: int = -1) -> None:
        self.lm, self.role, self.kill_at, self.name = lm, role, kill_at, lm.name
        self.calls = 0
        path = os.environ.get("KILL_RUN_PAID")
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    async def complete(self, messages: Any, **params: Any) -> Any:
        self.calls += 1
        if self._fd is not None:
            os.write(self._fd, f"{self.role}\n".encode())  # unbuffered: survives the kill
        if self.calls == self.kill_at:
            _die(signal.SIGKILL)
        return await self.lm.complete(messages, **params)


def kill_inside_transactions(method: str, k: int) -> None:
    """SIGKILL inside the k-th transaction of RunStore.`method`: after its statements, before its COMMIT."""
    from gepetto.store.sqlite import RunStore

    seen = 0
    original, original_tx = getattr(RunStore, method), RunStore._tx

    def counted(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        seen += 1
        self._kill_in_tx = seen == k  # type: ignore[attr-defined]
        try:
            return original(self, *args, **kwargs)
        finally:
            self._kill_in_tx = False  # type: ignore[attr-defined]

    @contextmanager
    def tx(self: RunStore, *args: Any, **kwargs: Any) -> Any:
        with original_tx(self, *args, **kwargs) as db:
            yield db
            if getattr(self, "_kill_in_tx", False):
                _die(signal.SIGKILL)

    setattr(RunStore, method, counted)
    RunStore._tx = tx  # type: ignore[method-assign]


def main() -> None:
    from gepetto.lm.names import make_lm
    from gepetto.runner import open_run

    storage, run, when = sys.argv[1], sys.argv[2], sys.argv[3]
    per_round = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    cfg = make_config(not when.lstrip("-").isdigit(), per_round, os.environ.get("KILL_RUN_CACHE"), options)
    sig = signal.SIGKILL
    kill_call = {"task": -1, "reflection": -1}
    if when.startswith("sigterm:"):
        sig, when = signal.SIGTERM, when.split(":", 1)[1]
    if when.lstrip("-").isdigit():
        event, count, extra = "rollout", int(when), 0
    elif when == "never":
        event, count, extra = "never", -1, 0
    elif when.startswith("call:"):
        _, role, k = when.split(":")
        kill_call[role] = int(k)
        event, count, extra = "never", -1, 0
    elif when.startswith("tx:"):
        _, method, k = when.split(":")
        kill_inside_transactions(method, int(k))
        event, count, extra = "never", -1, 0
    else:
        event, count, extra = when.split(":")[0], int(when.split(":")[1]), int(when.split(":")[2])
    seen, armed = 0, 0

    def hook(e: ev.Event) -> None:
        nonlocal seen, armed
        name = event_name(e)
        if name == "rollout" and armed:
            armed -= 1
            if armed == 0:
                _die(sig)
        if name == event and count >= 0:
            seen += 1
            if seen == count:
                armed = extra
                if extra == 0:
                    _die(sig)

    stored = open_run(cfg, storage=storage, run=run, callbacks=hook,
                      task_lm=PaidLM(make_lm(cfg.task_lm), "task", kill_call["task"]),
                      reflection_lm=PaidLM(make_lm(cfg.reflection_lm), "reflection", kill_call["reflection"]))
    result = stored.run()
    print(result.best_score, result.rollouts_used, result.stop_message)


if __name__ == "__main__":
    main()
