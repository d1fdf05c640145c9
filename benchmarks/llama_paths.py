"""Speed of llama.cpp's two CPU paths on this machine: with its extra buffer types (AMX, weight repacking) and without.

    PYTHONPATH=src python benchmarks/llama_paths.py --reps 3 --out benchmarks/results/llama_paths.md

gepetto.lm.cpu loads models without the extra buffer types where they crash (a CPU that advertises AMX without
enabling it); this measures what that fallback costs where both paths run. Each measurement is a fresh subprocess
(one model load), the two paths interleaved (on, off, on, off, ...) so that a change in the machine's load hits
both alike: load time, prompt processing (a ~260-token prompt in one batch) and decoding (64 greedy tokens), in
wall time and in the process's CPU time, with `--threads` llama.cpp threads. The answers of the two paths are
compared too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

CHILD = r"""
import json, sys, time
import llama_cpp
from gepetto.lm.cpu import extra_bufts
path, extra, n_out, threads = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4])
t0 = time.perf_counter()
with extra_bufts(extra):
    llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_threads=threads, n_batch=512, verbose=False, seed=0)
load = time.perf_counter() - t0
assert llm.model_params.use_extra_bufts == extra
prompt = ("Customer message: I would like to order three boxes of green tea and two packs of oat biscuits, "
          "delivered to 12 Rue des Lilas before Friday. ") * 8 + "Extract the order as JSON:"
tokens = llm.tokenize(prompt.encode())
c0, w0 = time.process_time(), time.perf_counter()
llm.eval(tokens)
c1, w1 = time.process_time(), time.perf_counter()
out = []
for _ in range(n_out):
    token = llm.sample(temp=0.0)
    out.append(token)
    llm.eval([token])
c2, w2 = time.process_time(), time.perf_counter()
print(json.dumps({"load_s": load, "prompt_tokens": len(tokens), "prompt_s": w1 - w0, "prompt_cpu_s": c1 - c0,
                  "decode_tokens": n_out, "decode_s": w2 - w1, "decode_cpu_s": c2 - c1,
                  "text": llm.detokenize(out).decode("utf-8", "replace")}))
"""


def _model(name: str) -> Path:
    from gepetto.lm.local import model_path

    return model_path(name)


def _measure(path: Path, extra: bool, n_out: int, threads: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), "1" if extra else "0", str(n_out),
                           str(threads)],
                          capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return {"failed": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _spread(values: list[float], fmt: str) -> str:
    """The median, and the range in brackets."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "smollm2-135m"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (gepetto's default: 2)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    started = datetime.now(timezone.utc)
    load_before = os.getloadavg()
    results: dict[str, dict[bool, list[dict[str, Any]]]] = {}
    for name in args.models:
        path = _model(name)
        results[name] = {True: [], False: []}
        for rep in range(args.reps):
            for extra in (True, False) if rep % 2 == 0 else (False, True):
                r = _measure(path, extra, args.tokens, args.threads)
                print(name, "extra_bufts" if extra else "plain", rep, {k: v for k, v in r.items() if k != "text"},
                      flush=True)
                results[name][extra].append(r)
    load_after = os.getloadavg()
    lines = [
        "# llama.cpp's CPU paths: with and without its extra buffer types (issue 37)",
        "",
        f"`PYTHONPATH=src python benchmarks/llama_paths.py --reps {args.reps} --tokens {args.tokens} --threads "
        f"{args.threads} --models {' '.join(args.models)}`, "
        f"{started:%Y-%m-%d %H:%M} UTC; {platform.machine()}, "
        f"{os.cpu_count()} CPU cores ({_cpu_name()}; AVX-512: {_has('avx512f')}, AMX: {_has('amx_tile')}), Python "
        f"{platform.python_version()}, llama-cpp-python {_llama_version()} compiled here with native flags, "
        f"n_threads {args.threads}. The machine was shared: load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (2 cores), so the absolute numbers are lower than on an idle machine; the two "
        "paths ran interleaved.",
        "",
        "Medians of the fresh-process runs (each: load the model, one ~260-token prompt in one batch, then "
        f"{args.tokens} greedy tokens one at a time), and the range over the runs in brackets. Tokens per second are "
        "wall time, which other work on the machine stretches; CPU milliseconds per token (the process's CPU "
        "time, all its threads) are the work each path does, much less sensitive to that.",
        "",
        "| model | path | runs | load s | prompt tokens / s | decode tokens / s | prompt CPU ms / token | "
        "decode CPU ms / token | same answer as the other path |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, by_path in results.items():
        texts = {extra: {r.get("text") for r in rows if "text" in r} for extra, rows in by_path.items()}
        for extra, rows in by_path.items():
            ok = [r for r in rows if "failed" not in r]
            label = "extra buffer types (default)" if extra else "without (`use_extra_bufts = False`)"
            if not ok:
                lines.append(f"| {name} | {label} | 0 | - | - | - | - | - | {rows[0]['failed'][:80]} |")
                continue
            same = "yes" if texts[True] == texts[False] and len(texts[True]) == 1 else "no"
            lines.append(f"| {name} | {label} | {len(ok)} | {_median(ok, 'load_s'):.2f} | "
                         f"{_spread([r['prompt_tokens'] / r['prompt_s'] for r in ok], '.0f')} | "
                         f"{_spread([r['decode_tokens'] / r['decode_s'] for r in ok], '.1f')} | "
                         f"{_spread([1000 * r['prompt_cpu_s'] / r['prompt_tokens'] for r in ok], '.1f')} | "
                         f"{_spread([1000 * r['decode_cpu_s'] / r['decode_tokens'] for r in ok], '.1f')} | {same} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _has(flag: str) -> str:
    try:
        return "yes" if f" {flag} " in Path("/proc/cpuinfo").read_text() else "no"
    except OSError:
        return "?"


def _llama_version() -> str:
    try:
        import llama_cpp

        return str(llama_cpp.__version__)
    except ImportError:
        return "not installed"


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"wall time {time.monotonic() - t0:.0f} s")
