"""Run (or resume) a stored simulated optimisation and kill itself at a chosen point.

    kill_run.py STORAGE RUN WHEN [PROPOSALS_PER_ROUND [OPTIONS]]

WHEN: -1 never, N: SIGKILL after N rollout events (these two on one component, no merge); or, on two components
with merges: never; EVENT:K:R: SIGKILL R rollouts after the K-th EVENT, where
EVENT is a phase (validation/seed, minibatch, reflection, validation/reflection, validation/merge) or an engine
event (merge, proposal, candidate); sigterm:N: SIGTERM after N rollouts (a graceful stop). Events are counted
from the start of this session, replayed ones included.
"""

import json
import os
import signal
import sys

from gepetto.events import PhaseStarted, RolloutFinished
from gepetto.runner import load_config, start_or_resume

storage, run, when = sys.argv[1], sys.argv[2], sys.argv[3]
per_round = int(sys.argv[4]) if len(sys.argv) > 4 else 1
options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
if when.lstrip("-").isdigit():
    cfg = load_config(task="sim", task_lm="sim:task?latency=0.002", reflection_lm="sim:reflection?noise=0.4&seed=5",
                      budget=150, seed=3, max_concurrency=4, task_options={"kinds": 6},
                      proposals_per_round=per_round, **options)
else:
    cfg = load_config(task="sim", task_lm="sim:task?latency=0.002",
                      reflection_lm="sim:reflection?noise=0.3&seed=5&forget=true&max_rules=2", budget=200, seed=2,
                      max_concurrency=4, task_options={"kinds": 6, "components": 2}, proposals_per_round=per_round,
                      **options)
sig = signal.SIGKILL
if when.startswith("sigterm:"):
    sig, when = signal.SIGTERM, when.split(":", 1)[1]
if when.lstrip("-").isdigit():
    event, count, extra = "rollout", int(when), 0
elif when == "never":
    event, count, extra = "never", -1, 0
else:
    event, count, extra = when.split(":")[0], int(when.split(":")[1]), int(when.split(":")[2])
seen, armed = 0, 0


def hook(e):
    global seen, armed
    name = e.phase + (f"/{e.origin}" if e.origin else "") if isinstance(e, PhaseStarted) else e.kind
    if isinstance(e, RolloutFinished) and armed:
        armed -= 1
        if armed == 0:
            os.kill(os.getpid(), sig)  # SIGKILL: no cleanup, no flush, as hard as a crash
    if name == event and count >= 0:
        seen += 1
        if seen == count:
            armed = extra
            if extra == 0:
                os.kill(os.getpid(), sig)


name, result = start_or_resume(cfg, storage=storage, run=run, callbacks=hook)
print(result.best_score, result.rollouts_used, result.stop_message)
