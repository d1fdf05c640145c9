"""The demo and a real-track run on this machine's CPU: wall time, CPU seconds and tokens per role (issue 62).

    python benchmarks/commodity_cpu.py demo --seeds 0 1 2 3 4 5 --label after --out /tmp/cpu.jsonl
    python benchmarks/commodity_cpu.py demo --seeds 0 --busy 1 --label after-busy --out /tmp/cpu.jsonl
    python benchmarks/commodity_cpu.py track --task clinc-banking --seed 0 --budget 300 --label after --out /tmp/t.jsonl
    python benchmarks/commodity_cpu.py table /tmp/cpu.jsonl

`demo` runs `gepetto demo --seed S` exactly as a user types it (the CLI of whichever gepetto is first on the path,
its default models and time limit, a fresh run store, the held-out test scored at the end) as a child process, and
measures its wall time and CPU seconds (user + system, all its threads) from the kernel's accounting of the child.
`--busy N` starts N processes that each keep a core busy (`yes > /dev/null`, as the issue's check does) for the
whole run. The run's ledger gives the tokens per role: prompt tokens sent, of which the embedded backend took from
its prompt cache, and completion tokens. `track` runs one real-track task the way `benchmarks/usertrack.py` does
(the default configuration, the plain metric, the dev arrangement's train and validation sets) through
`benchmarks/product_run.py` in a child process, which reports its own wall time, CPU seconds and ledger. One JSON
line per run; `table` prints the Markdown rows of a file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from realtrack import read_log

from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore


def cpu_model() -> str:
    """The CPU's model name and whether it advertises AVX-512 (Linux)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    name = re.search(r"model name\s*:\s*(.*)", info)
    avx512 = "avx512f" in info
    simd = "AVX-512" if avx512 else "AVX2, no AVX-512"
    return f"{name.group(1).strip() if name else '?'} ({simd}), {os.cpu_count()} cores"


def run_demo(seed: int, busy: int, extra: list[str], keep: Path | None = None) -> dict[str, Any]:
    """One `gepetto demo --seed SEED` in a child process: its output, wall time, CPU seconds and ledger."""
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            storage = str(Path(tmp) / "demo.sqlite")
            cmd = ["gepetto", "demo", "--seed", str(seed), "--storage", storage, *extra]
            t0, cpu0 = time.perf_counter(), _children_cpu()
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, "COLUMNS": "200"})
            out, _ = child.communicate()
            wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0  # (the busy processes are not reaped yet)
            store = RunStore(storage, readonly=True)
            try:
                runs = store.list_runs()
                snap = run_snapshot(store, runs[0].name, transcripts=False) if runs else {}
            finally:
                store.close()
            if keep is not None:  # the run store, to read its transcripts later
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(storage, keep / f"demo-s{seed}-busy{busy}.sqlite")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    result = snap.get("result", {})
    test = re.search(r"test: seed ([\d.]+) -> best ([\d.]+)", out)
    val = re.search(r"validation: seed ([\d.]+) -> best ([\d.]+); (\d+)/(\d+) rollouts", out)
    return {
        "seed": seed, "busy": busy, "returncode": child.returncode, "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "val_seed": float(val.group(1)) if val else None, "val_best": float(val.group(2)) if val else None,
        "rollouts": int(val.group(3)) if val else None, "budget": int(val.group(4)) if val else None,
        "test_seed": float(test.group(1)) if test else None, "test_best": float(test.group(2)) if test else None,
        "stop": result.get("stop_reason"), "ledger": result.get("ledger", {}),
        "tail": out[-1500:],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo")
    d.add_argument("--seeds", type=int, nargs="+", default=[0])
    d.add_argument("--busy", type=int, default=0, help="processes keeping a core busy during each run")
    d.add_argument("--label", required=True)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--keep", type=Path, help="copy each run's store into this folder")
    d.add_argument("extra", nargs="*", help="more options for `gepetto demo` (after --)")
    k = sub.add_parser("track")
    k.add_argument("--task", default="clinc-banking")
    k.add_argument("--seed", type=int, default=0)
    k.add_argument("--budget", type=int, default=300)
    k.add_argument("--label", required=True)
    k.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("table")
    t.add_argument("file", type=Path)
    args = ap.parse_args()
    if args.cmd == "table":
        return table(args.file)
    if args.cmd == "track":
        return track(args)
    for seed in args.seeds:
        row = run_demo(seed, args.busy, args.extra, args.keep)
        row.update(label=args.label, machine=cpu_model(), python=platform.python_version(),
                   date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   command=" ".join(["gepetto", "demo", "--seed", str(seed), *args.extra]))
        _append(args.out, row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("tail", "ledger")}), flush=True)


def track(args: argparse.Namespace) -> None:
    """One real-track run, measured by `product_run.py` in a child process."""
    cmd = [sys.executable, str(Path(__file__).with_name("product_run.py")), "--task", args.task, "--seed",
           str(args.seed), "--budget", str(args.budget), "--metric", "plain"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    row.update(kind="track", task=args.task, seed=args.seed, budget=args.budget, label=args.label,
               machine=cpu_model(), date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               command=" ".join(["python", *cmd[1:]]))
    _append(args.out, row)
    print(json.dumps({k: v for k, v in row.items() if k not in ("best", "ledger")}), flush=True)


def _children_cpu() -> float:
    import resource

    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def _append(path: Path, row: dict[str, Any]) -> None:
    """One row more in a JSON-lines file (a gzip member more when its name ends in .gz)."""
    with gzip.open(path, "at") if path.suffix == ".gz" else path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def table(path: Path) -> None:
    rows = [r for r in read_log(path) if r.get("kind") != "track"]
    print("| label | seed | busy | wall s | CPU s | rollouts | stop | test seed -> best | task: prompt (cached) + "
          "completion tokens | reflection: prompt (cached) + completion tokens |")
    print("|---|---:|---:|---:|---:|---:|---|---|---|---|")
    for r in rows:
        cells = []
        for role in ("task", "reflection"):
            u = r["ledger"].get(role, {})
            cells.append(f"{u.get('input_tokens', 0)} ({u.get('cached_input_tokens', 0)}) + "
                         f"{u.get('output_tokens', 0)}")
        print(f"| {r['label']} | {r['seed']} | {r['busy']} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['rollouts']}/{r['budget']} | {r['stop']} | {r['test_seed']} -> {r['test_best']} | {cells[0]} | "
              f"{cells[1]} |")


if __name__ == "__main__":
    sys.exit(main())
