"""Two processes on one stored run (issue 37, F1): what is paid, stored and kept.

Usage: PYTHONPATH=src python benchmarks/reliability/two_process.py [--trials 3] [--src PATH] [--json out.json]

A "paid API" on loopback (`gepetto.testing.FakeOpenAIServer` serving the simulated task and reflection LMs, the
reflection sampling a random word into each rewrite, as a model at temperature > 0 does) counts every request it
answers. Each child process runs the same stored run (`gepetto.optimize(..., storage=S, run="same")`, simulated
task on two components, 12 + 12 examples, budget 200, seed 2, max_concurrency 4, response cache off so that each
rollout is one paid request). Per trial:

- `alone`: one process, as the reference;
- `1 s apart`: a second process "resumes" the run one second after the first started (a second terminal);
- `at once`: two processes released by the same file at the same instant (a script started twice);
- `after`: a second process resumes it after the first finished (it replays, and should pay nothing).

For each: the task and reflection requests paid, what each process said (ran, or the error it ended with), the
rollouts stored against the budget, and whether the store is consistent (the candidates table is the pool of the
stored result; the ledger's task calls are the task requests paid). `--src` runs the children on another gepetto
checkout (e.g. the one before the fix) to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gepetto.testing import FakeOpenAIServer, sim_responder

CHILD = r"""
import json, os, sys, time, pathlib
import gepetto
from gepetto.testing import sim
storage, url, gate = sys.argv[1], sys.argv[2], sys.argv[3]
t = sim.task(n_train=12, n_val=12, kinds=6, components=2)
if gate != "-":
    pathlib.Path(gate + ".ready." + str(os.getpid())).touch()
    while not os.path.exists(gate):
        time.sleep(0.002)
t0 = time.monotonic()
try:
    res = gepetto.optimize(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=t.program,
                           task_lm=f"openai:task@{url}", reflection_lm=f"openai:reflection@{url}", storage=storage,
                           run="same", budget=200, seed=2, max_concurrency=4, cache="off")
    out = {"outcome": "ran", "rollouts_used": res.rollouts_used, "best_score": res.best_score}
except Exception as exc:
    out = {"outcome": type(exc).__name__, "message": str(exc)[:200]}
out["seconds"] = round(time.monotonic() - t0, 1)
print(json.dumps(out))
"""


def _responder() -> Any:
    import random

    inner = sim_responder("sim:task?latency=0.01", "sim:reflection?noise=0.3&seed=5&forget=true&max_rules=2")
    rng = random.Random()

    def respond(messages: list[dict[str, str]], body: dict[str, Any]) -> str:
        text = inner(messages, body)
        if "reflection" in body.get("model", ""):
            time.sleep(0.3)  # a reflection call takes a while: the two processes overlap
            text = text.replace("</new_instruction>", f" (v{rng.randint(0, 99999)})</new_instruction>")
        return text

    return respond


def _child(src: str, storage: Path, url: str, gate: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", CHILD, str(storage), url, gate], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _said(proc: subprocess.Popen) -> dict[str, Any]:
    out, err = proc.communicate(timeout=900)
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"outcome": f"exit {proc.returncode}", "message": err.strip().splitlines()[-1][:200] if err else ""}
    return json.loads(lines[-1])


def _store(storage: Path) -> dict[str, Any]:
    db = sqlite3.connect(storage)
    try:
        rollouts = db.execute("SELECT COUNT(*) FROM evaluations WHERE run='same'").fetchone()[0]
        table = [r[0] for r in db.execute("SELECT id FROM candidates WHERE run='same' ORDER BY idx")]
        row = db.execute("SELECT result, ledger FROM runs WHERE name='same'").fetchone()
        sessions = db.execute("SELECT COUNT(*) FROM events WHERE run='same' AND kind='start'").fetchone()[0]
    finally:
        db.close()
    result = json.loads(row[0]) if row and row[0] else {}
    ledger = json.loads(row[1]) if row and row[1] else {}
    pool = [c.get("id") for c in result.get("candidates", [])]
    return {"stored_rollouts": rollouts, "sessions": sessions, "candidates": len(table),
            "pool_matches_table": pool == table, "ledger_task_calls": (ledger.get("task") or {}).get("calls"),
            "best_score": result.get("best_score")}


def trial(kind: str, src: str, work: Path) -> dict[str, Any]:
    storage = work / f"{kind}.sqlite"
    with FakeOpenAIServer(_responder()) as srv:
        gate = str(work / f"{kind}.go")
        if kind == "alone":
            said = [_said(_child(src, storage, srv.url, "-"))]
        elif kind == "after":
            said = [_said(_child(src, storage, srv.url, "-"))]
            before = len(srv.requests)
            said.append(_said(_child(src, storage, srv.url, "-")))
            said[-1]["paid"] = len(srv.requests) - before
        elif kind == "1 s apart":
            first = _child(src, storage, srv.url, "-")
            time.sleep(1.0)
            said = [_said(p) for p in (first, _child(src, storage, srv.url, "-"))]
        else:  # at once
            procs = [_child(src, storage, srv.url, gate) for _ in range(2)]
            while len(list(work.glob(f"{kind}.go.ready.*"))) < 2:
                time.sleep(0.01)
            Path(gate).touch()
            said = [_said(p) for p in procs]
        task = sum(1 for r in srv.requests if r.get("model") == "task")
        reflection = sum(1 for r in srv.requests if r.get("model") == "reflection")
    return {"kind": kind, "paid_task": task, "paid_reflection": reflection, "processes": said, **_store(storage)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "src"))
    ap.add_argument("--kinds", nargs="+", default=["alone", "1 s apart", "at once", "after"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.trials):
            for kind in args.kinds:
                work = Path(tmp) / f"t{n}"
                work.mkdir(exist_ok=True)
                row = trial(kind, args.src, work)
                row["trial"] = n
                rows.append(row)
                print(json.dumps(row), flush=True)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    out = {"src": args.src, "machine": machine,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average": os.getloadavg()[0],
           "wall_s": round(time.monotonic() - t0), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wall time {out['wall_s']} s")


if __name__ == "__main__":
    main()
