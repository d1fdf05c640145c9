"""A poisoned input (issue 37, F3): an endpoint that always fails on one input and answers every other.

Usage: PYTHONPATH=src python benchmarks/reliability/poisoned.py [--modes reset 500 error200] [--sessions 3]
       [--src PATH] [--json out.json]

An OpenAI-compatible server on loopback serves the simulated task and reflection LMs (`gepetto.testing.sim`); on
every task request whose input holds "question 7 " it fails, in one of three ways a real endpoint does on an
input that trips a bug: `reset` (the connection drops, no answer), `500` (HTTP 500), `error200` (HTTP 200 whose
body is `{"error": ...}`, a proxy's way to refuse). The run: simulated task, 12 + 12 examples of 6 kinds (the
poisoned example is in both splits), budget 150, the task LM `openai:task@URL?max_retries=1`, `lm_retry_pause`
0.2, `max_lm_failures` 5, response cache off, a run store. Each session is a child process (`--src` picks the
gepetto checkout, e.g. the one before the fix); a session that stops for an LM outage is resumed, up to
`--sessions` sessions. Also run: the same task against a server without the poison (`clean`), for the score
the run could reach.

Per mode: the sessions it took, how each stopped, rollouts used, the poisoned rollouts (failed, with their
reason) and the requests the poisoned input cost, the best validation score against the clean run's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gepetto.testing import sim_responder

POISON = "question 7 "

CHILD = r"""
import json, sys, time
import gepetto
from gepetto.testing import sim
storage, url = sys.argv[1], sys.argv[2]
t = sim.task(n_train=12, n_val=12, kinds=6)
t0 = time.monotonic()
try:
    res = gepetto.optimize(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=t.program,
                           task_lm=f"openai:task@{url}?max_retries=1", reflection_lm="sim:reflection", budget=150,
                           lm_retry_pause=0.2, max_lm_failures=5, storage=storage, run="r", cache="off")
    out = {"stop": res.stop_reason.value, "message": res.stop_message[:160], "rollouts_used": res.rollouts_used,
           "best_score": res.best_score, "candidates": len(res.candidates)}
except Exception as exc:
    out = {"stop": "raised", "message": f"{type(exc).__name__}: {exc}"[:160]}
out["seconds"] = round(time.monotonic() - t0, 1)
print(json.dumps(out))
"""


class Server:
    """The sim LMs over HTTP, failing every task request on the poisoned input in one way (`mode`)."""

    def __init__(self, mode: str) -> None:
        inner = sim_responder()
        self.requests: Counter[str] = Counter()
        counts = self.requests

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def send(self, code: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.send(200, {"object": "list", "data": []})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                msgs = body["messages"]
                poisoned = mode != "clean" and "reflection" not in body["model"] and POISON in msgs[-1]["content"]
                counts["poisoned" if poisoned else body["model"]] += 1
                if poisoned and mode == "reset":
                    self.close_connection = True
                    self.connection.close()
                    return
                if poisoned and mode == "500":
                    return self.send(500, {"error": {"message": "internal error", "type": "server_error"}})
                if poisoned and mode == "error200":
                    return self.send(200, {"error": {"message": "This model's maximum context length is 4096 tokens",
                                                     "code": 400}})
                text = inner(msgs, body)
                self.send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _session(src: str, storage: Path, url: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", CHILD, str(storage), url], env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"stop": f"exit {done.returncode}", "message": done.stderr.strip()[-200:]}
    return json.loads(lines[-1])


def _poisoned_rollouts(storage: Path) -> list[dict[str, Any]]:
    import sqlite3

    db = sqlite3.connect(storage)
    try:
        rows = db.execute("SELECT example_id, score, error FROM evaluations WHERE run='r' AND example_id LIKE '%-7'")
        return [{"example": e, "score": s, "error": (err or "")[:120]} for e, s, err in rows]
    except sqlite3.Error:
        return []
    finally:
        db.close()


def run_mode(mode: str, src: str, sessions: int, work: Path) -> dict[str, Any]:
    srv = Server(mode)
    storage = work / f"{mode}.sqlite"
    said = []
    t0 = time.monotonic()
    try:
        for _ in range(sessions):
            said.append(_session(src, storage, srv.url))
            if said[-1]["stop"] not in ("lm_unavailable", "raised") and not said[-1]["stop"].startswith("exit"):
                break
    finally:
        srv.stop()
    return {"mode": mode, "sessions": said, "finished": said[-1]["stop"] not in ("lm_unavailable", "raised"),
            "poisoned_requests": srv.requests["poisoned"], "task_requests": srv.requests["task"],
            "poisoned_rollouts": _poisoned_rollouts(storage), "wall_s": round(time.monotonic() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", nargs="+", default=["clean", "reset", "500", "error200"])
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--src", default=str(Path(__file__).resolve().parents[2] / "src"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.monotonic()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes:
            rows.append(run_mode(mode, args.src, args.sessions, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    out = {"src": args.src, "machine": machine, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "load_average": os.getloadavg()[0], "wall_s": round(time.monotonic() - t0), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wall time {out['wall_s']} s")


if __name__ == "__main__":
    main()
