"""Run (or resume) a stored run of the support-router example through `gepetto.optimize(storage=...)`, with
scripted LMs, and SIGKILL itself after a number of rollouts.

    kill_user_run.py STORAGE RUN KILL_AFTER      (KILL_AFTER -1: never)
"""

import importlib.util
import os
import signal
import sys
from pathlib import Path

import gepetto
from gepetto.engine.events import RolloutFinished

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_router.py"
spec = importlib.util.spec_from_file_location("support_router", EXAMPLE)
router = importlib.util.module_from_spec(spec)
spec.loader.exec_module(router)

storage, run, kill_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = 0


def hook(event):
    global seen
    if isinstance(event, RolloutFinished):
        seen += 1
        if seen == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush: as hard as a crash


task = router.make_task()
result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=router.scripted_task_lm(), reflection_lm=router.scripted_reflection_lm(),
                          budget=150, max_concurrency=4, storage=storage, run=run, callbacks=hook)
print(result.best_score, result.rollouts_used, result.stop_message)
