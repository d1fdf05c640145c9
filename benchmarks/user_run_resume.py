"""Your program, your run: a program of one's own (examples/support_router.py) as a stored run, SIGKILLed twice
mid-run, resumed to exactly the result of an uninterrupted run, then shown and reported; once through the CLI
(`gepetto optimize --task examples/support_router.py:make_task`) and once through `gepetto.optimize(...,
storage=, run=)` (tests/helpers/kill_user_run.py, which SIGKILLs itself after a number of rollouts).

The LMs are the example's scripted LMs (a known optimum; seconds, not hours). The Python API takes them as
objects; for the CLI they are served by an OpenAI-compatible server on loopback (gepetto.testing.FakeOpenAIServer)
and named like any endpoint, `openai:router-task@http://127.0.0.1:PORT/v1`, so every call goes through the real
HTTP backend. The CLI run is killed from outside: this script polls the run store and sends SIGKILL once enough
rollouts are stored.

    python benchmarks/user_run_resume.py [--out benchmarks/results/user_run_resume.md] [--workdir DIR]

Exit code 0 when both resumed runs equal their uninterrupted twins.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gepetto.store.snapshot import run_snapshot  # noqa: E402
from gepetto.store.sqlite import RunStore  # noqa: E402
from gepetto.testing import FakeOpenAIServer  # noqa: E402

EXAMPLE = ROOT / "examples" / "support_router.py"
KILL_PY = ROOT / "tests" / "helpers" / "kill_user_run.py"
KILL_AT = (45, 110)  # rollouts stored before each SIGKILL (of 150)
SAME = ("best_candidate", "best_score", "seed_score", "candidates", "pareto_front", "rollouts_used", "iterations",
        "history", "proposals", "stop_reason")

_spec = importlib.util.spec_from_file_location("support_router", EXAMPLE)
router = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(router)  # type: ignore[union-attr]


def respond(messages: list[dict[str, str]], body: dict[str, Any]) -> str:
    """The example's scripted LMs behind HTTP: model router-reflection reflects, any other routes."""
    params = {k: v for k, v in body.items() if k not in ("model", "messages")}
    fn = router._reflection_answer if "reflection" in body.get("model", "") else router._task_answer
    return fn(messages, params)


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def block(self, text: str) -> None:
        self("```")
        for line in text.rstrip().splitlines():
            self(line.rstrip())
        self("```")


def env() -> dict[str, str]:
    e = dict(os.environ, COLUMNS="120")
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [e.get("PYTHONPATH")])])
    return e


def gepetto_cmd() -> list[str]:
    exe = shutil.which("gepetto")
    return [exe] if exe else [sys.executable, "-c", "from gepetto.cli import main; main()"]


def shown(args: list[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def stored_rollouts(storage: Path, run: str) -> int:
    if not storage.exists():
        return 0
    try:
        return RunStore(storage, readonly=True).count_rollouts(run)
    except Exception:  # not created yet
        return 0


def final(storage: Path, run: str) -> dict[str, Any]:
    res = run_snapshot(RunStore(storage, readonly=True), run)["result"]
    return {k: res[k] for k in SAME}


def cli_part(log: Log, work: Path, url: str, strategies: tuple[str, ...] = ()) -> bool:
    """The CLI run, uninterrupted and SIGKILLed twice then resumed; `strategies`: more options (a shorter record)."""
    g = gepetto_cmd()
    lms = ["--task-lm", f"openai:router-task@{url}", "--reflection-lm", f"openai:router-reflection@{url}"]
    start = ["optimize", "--task", f"{EXAMPLE.relative_to(ROOT)}:make_task", *lms, "--budget", "150",
             "--max-concurrency", "4", *strategies]
    tag = "-strategies" if strategies else ""
    if not strategies:
        log("## 1. The CLI: `gepetto optimize --task examples/support_router.py:make_task`\n")
        log(f"The scripted LMs are served at `{url}` (a fresh port each time the script runs). Working directory: "
            "the repository root; stores in a temporary directory.\n")
    else:
        log(f"## 3. The CLI with strategies by name: `{' '.join(strategies)}`\n")

    whole_store, store = work / f"cli-whole{tag}.sqlite", work / f"cli{tag}.sqlite"
    cmd = [*start, "--run", "router-whole", "--storage", str(whole_store), "-q"]
    t0 = time.monotonic()
    out = subprocess.run([*g, *cmd], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    log(f"Uninterrupted run ({time.monotonic() - t0:.0f}s, exit {out.returncode}):\n")
    log.block(f"$ gepetto {shown(cmd)}\n" + "\n".join(out.stdout.splitlines()[-3:]))

    log("\nThe same run, SIGKILLed from outside twice (this script polls the store and kills the process once "
        f"{' and '.join(map(str, KILL_AT))} rollouts are stored), then resumed by name:\n")
    cmd = [*start, "--run", "router", "--storage", str(store), "-q"]
    for k, at in enumerate(KILL_AT):
        args = cmd if k == 0 else ["optimize", "--run", "router", "--storage", str(store), "-q"]
        proc = subprocess.Popen([*g, *args], cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        while proc.poll() is None and stored_rollouts(store, "router") < at:
            time.sleep(0.02)
        got = stored_rollouts(store, "router")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        log(f"- `$ gepetto {shown(args)}`: SIGKILLed with {got} rollouts stored (exit {proc.returncode})")
    runs = subprocess.run([*g, "runs", "--storage", str(store)], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=120)
    log("\nAfter the second kill:\n")
    log.block(f"$ gepetto runs --storage {store}\n{runs.stdout}")
    args = ["optimize", "--run", "router", "--storage", str(store), "-q"]
    t0 = time.monotonic()
    out = subprocess.run([*g, *args], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    log(f"\nResumed to the end ({time.monotonic() - t0:.0f}s, exit {out.returncode}):\n")
    log.block(f"$ gepetto {shown(args)}\n" + "\n".join(out.stdout.splitlines()[-3:]))
    same = final(store, "router") == final(whole_store, "router-whole")
    log(f"\n**Resumed run == uninterrupted run: {same}** (best candidate, scores, every candidate with its "
        "lineage and validation scores, front, rollouts, iterations, history, proposal outcomes, stop reason)\n")
    if strategies:
        config = RunStore(store, readonly=True).get_run("router").config  # type: ignore[union-attr]
        log(f"Stored with the run: parent_selector={config['parent_selector']!r}, "
            f"component_selector={config['component_selector']!r}; candidates: "
            f"{len(final(store, 'router')['candidates'])}.\n")
        return same
    show = subprocess.run([*g, "show", "router", "--storage", str(store)], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=120)
    log.block(f"$ gepetto show router --storage {store}\n{show.stdout}")
    html = work / "router.html"
    rep = subprocess.run([*g, "report", "router", "-o", str(html), "--storage", str(store)], cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=300)
    log.block(f"$ gepetto report router -o {html} --storage {store}\n{rep.stdout.strip()}")
    log(f"\nThe report: {html.stat().st_size // 1024} KB, one self-contained HTML file "
        f"(exit {rep.returncode}).\n")
    return same and rep.returncode == 0


def python_part(log: Log, work: Path) -> bool:
    g = gepetto_cmd()
    log("## 2. The Python API: `gepetto.optimize(..., storage=, run=)`\n")
    log("`tests/helpers/kill_user_run.py STORAGE RUN KILL_AFTER` runs the example with its scripted LM objects:\n")
    log.block("task = router.make_task()\n"
              "result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,\n"
              "                          program=task.program, task_lm=router.scripted_task_lm(),\n"
              "                          reflection_lm=router.scripted_reflection_lm(), budget=150,\n"
              "                          max_concurrency=4, storage=storage, run=run,\n"
              "                          callbacks=hook)  # hook: SIGKILL after N rollouts")
    whole_store, store = work / "py-whole.sqlite", work / "py.sqlite"

    def session(storage: Path, kill_after: int) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, str(KILL_PY.relative_to(ROOT)), str(storage), "r", str(kill_after)]
        out = subprocess.run(args, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
        what = "SIGKILLed itself" if out.returncode == -9 else f"ended: {out.stdout.strip()}"
        log(f"- `$ python {shown(args[1:])}`: exit {out.returncode}, {what} (best score, rollouts, stop message)")
        return out

    log("\nUninterrupted:\n")
    session(whole_store, -1)
    log(f"\nKilled after {' and '.join(map(str, KILL_AT))} rollouts of each session (replayed ones count), then "
        "resumed:\n")
    for at in KILL_AT:
        session(store, at)
    session(store, -1)
    same = final(store, "r") == final(whole_store, "r")
    log(f"\n**Resumed run == uninterrupted run: {same}**\n")
    runs = subprocess.run([*g, "runs", "--storage", str(store)], cwd=ROOT, env=env(), capture_output=True,
                          text=True, timeout=120)
    log.block(f"$ gepetto runs --storage {store}\n{runs.stdout}")
    html = work / "py.html"
    rep = subprocess.run([*g, "report", "r", "-o", str(html), "--storage", str(store)], cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=300)
    log.block(f"$ gepetto report r -o {html} --storage {store}\n{rep.stdout.strip()}")
    exported = subprocess.run([*g, "export", "r", "--storage", str(store)], cwd=ROOT, env=env(), capture_output=True,
                              text=True, timeout=120)
    log.block(f"$ gepetto export r --storage {store}\n{exported.stdout}")
    return same and rep.returncode == 0 and json.loads(exported.stdout) == final(store, "r")["best_candidate"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="Markdown file for the record (default: print only).")
    ap.add_argument("--workdir", type=Path, default=None, help="Where the stores and reports go (default: a temp dir).")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="user-run-"))
    work.mkdir(parents=True, exist_ok=True)
    log = Log()
    log("# Your program, your run: SIGKILL and exact resume of a user program (CLI and Python API)\n")
    log(f"Recorded by `python benchmarks/user_run_resume.py` on {time.strftime('%Y-%m-%d')} "
        f"(Python {sys.version.split()[0]}); the program is `examples/support_router.py` (summarize, then route; "
        "12 train / 9 validation examples), with the example's scripted LMs, budget 150, max_concurrency 4.\n")
    t0 = time.monotonic()
    server = FakeOpenAIServer(respond, delay=0.01)
    server._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a killed client
    with server:  # serves the CLI runs; the Python API takes the LM objects
        ok_cli = cli_part(log, work, server.url)
        ok_py = python_part(log, work)
        ok_strategies = cli_part(log, work, server.url, ("--parent-selector", "epsilon-greedy(epsilon=0.3)",
                                                          "--component-selector", "all"))
    log(f"\nTotal wall time {time.monotonic() - t0:.0f}s. Resume exact: CLI {ok_cli}; Python {ok_py}; CLI with "
        f"strategies {ok_strategies}.")
    if args.out:
        args.out.write_text("\n".join(log.lines) + "\n")
    return 0 if ok_cli and ok_py and ok_strategies else 1


if __name__ == "__main__":
    sys.exit(main())
