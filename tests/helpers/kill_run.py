"""Run (or resume) a stored simulated optimisation; SIGKILL itself after N rollout events (N < 0: never)."""

import os
import signal
import sys

from gepetto.runner import load_config, start_or_resume

storage, run, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
cfg = load_config(task="sim", task_lm="sim:task?latency=0.002", reflection_lm="sim:reflection?noise=0.4&seed=5",
                  budget=150, seed=3, max_concurrency=4, task_options={"kinds": 6})
seen = 0


def hook(kind, data):
    global seen
    if kind == "rollout":
        seen += 1
        if 0 <= kill_after <= seen:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush: as hard as a crash


name, result = start_or_resume(cfg, storage=storage, run=run, on_event=hook)
print(result.best_score, result.rollouts_used)
