"""The embedded backend on real calls, replayed (issue 15; its speed options went with the serial backend, issue 38).

    python benchmarks/local_speed.py record --budget 60 --trace /tmp/demo_calls.json
    python benchmarks/local_speed.py replay --trace /tmp/demo_calls.json --out benchmarks/results/local_speed.md
    python benchmarks/local_speed.py batch     # what checking a draft of k tokens costs on this machine

`record` runs a task (the demo, or a task target such as examples/support_router.py:make_task) with the embedded
Qwen2.5-Coder 0.5B task LM and 1.5B reflection LM, without a run store (so no response cache), and keeps every LM
call in the order it finished: messages, parameters and answer. `replay` sends the same calls, one at a time in
the same order, to a fresh model per setting, and reports wall time, tokens per second and how many answers at
temperature 0 are identical to the first setting's (sampled calls, the reflection retries at a higher
temperature, are timed only). The settings of issue 15 (`lookup`, `prefix_cache_mb`) no longer exist: the
batched backend keeps shared prefixes itself; `benchmarks/local_batch.py` measures it against the serial one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gepetto.lm.local import LocalLM

ROLES = {"task": "qwen2.5-coder-0.5b", "reflection": "qwen2.5-coder-1.5b"}


class Recorder:
    """An LM that passes calls through and keeps them, in the order they finished."""

    def __init__(self, lm: LocalLM, role: str, calls: list[dict[str, Any]]) -> None:
        self.name, self._lm, self._role, self._calls = lm.name, lm, role, calls

    async def complete(self, messages: Any, **params: Any) -> Any:
        out = await self._lm.complete(messages, **params)
        self._calls.append({"role": self._role, "messages": [dict(m) for m in messages],
                            "params": {k: v for k, v in params.items() if k != "response_format"},
                            "response_format": _schema(params.get("response_format")), "text": out.text})
        return out


def _schema(fmt: Any) -> Any:
    if fmt is None:
        return None
    from gepetto.lm.base import json_schema_of

    return json_schema_of(fmt)


def record(budget: int, trace: Path, threads: int, task_name: str) -> None:
    import gepetto
    from gepetto.tasks import load_task
    from gepetto.usertask import is_target, load_target

    task = load_target(task_name) if is_target(task_name) else load_task(task_name)
    calls: list[dict[str, Any]] = []
    lms = {role: Recorder(LocalLM(model, n_threads=threads), role, calls) for role, model in ROLES.items()}
    t0 = time.perf_counter()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=lms["task"], reflection_lm=lms["reflection"],
                              budget=budget, seed=0)  # no storage: no response cache, every call runs
    trace.write_text(json.dumps({"task": task_name, "budget": budget, "wall_s": time.perf_counter() - t0,
                                 "calls": calls}))
    print(f"{len(calls)} calls recorded ({sum(c['role'] == 'reflection' for c in calls)} reflection); best val "
          f"{result.best_score:.3f}; {time.perf_counter() - t0:.0f} s -> {trace}")


async def _replay(calls: list[dict[str, Any]], role: str, options: dict[str, int], threads: int) -> dict[str, Any]:
    lm = LocalLM(ROLES[role], n_threads=threads, **options)
    lm._load()  # loading is not part of the timing
    texts, seconds, tokens_out, tokens_in = [], 0.0, 0, 0
    for call in calls:
        params = dict(call["params"])
        if call["response_format"] is not None:
            params["response_format"] = call["response_format"]
        t0 = time.perf_counter()
        out = await lm.complete(call["messages"], **params)
        seconds += time.perf_counter() - t0
        texts.append(out.text)
        tokens_out += out.usage.output_tokens
        tokens_in += out.usage.input_tokens
    return {"texts": texts, "seconds": seconds, "tokens_out": tokens_out, "tokens_in": tokens_in}


SETTINGS: dict[str, list[tuple[str, dict[str, int]]]] = {
    "reflection": [("baseline", {})],
    "task": [("baseline", {}), ("parallel=1", {"parallel": 1})],
}


def batch_cost(threads: int) -> None:
    """Median time of one eval of k tokens after a prompt: what checking a draft of k - 1 tokens costs."""
    from llama_cpp import Llama

    from gepetto.lm.local import model_path

    text = b"Read the customer's message and answer with a JSON object with the keys item and quantity. " * 6
    for model in (ROLES["reflection"], ROLES["task"]):
        llama = Llama(model_path=str(model_path(model)), n_ctx=4096, n_threads=threads, verbose=False)
        prompt = llama.tokenize(text)
        llama.reset()
        llama.eval(prompt)
        times = {}
        for k in (1, 2, 4, 6, 11):
            runs = []
            for _ in range(8):
                llama.n_tokens = len(prompt)  # drop the k tokens checked last time
                t0 = time.perf_counter()
                llama.eval(prompt[:k])
                runs.append(time.perf_counter() - t0)
            times[k] = sorted(runs)[len(runs) // 2]
        print(f"| {model} (after {len(prompt)} prompt tokens) | "
              + " | ".join(f"{1000 * t:.1f} ms" for t in times.values()) + " |")


HEADER = ("| LM | setting | calls | tokens in | tokens out | seconds | tokens out / s | speed-up | "
          "identical to baseline (temperature 0) | identical to the recorded run |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")


def replay(trace: Path, out: Path | None, threads: int, limit: int | None, roles: list[str]) -> None:
    data = json.loads(trace.read_text())
    rows: list[str] = []
    for role in roles:
        calls = [c for c in data["calls"] if c["role"] == role][:limit]
        greedy = [float(c["params"].get("temperature", 0.0)) == 0.0 for c in calls]
        base: dict[str, Any] | None = None
        for label, options in SETTINGS[role]:
            r = asyncio.run(_replay(calls, role, options, threads))
            base = base or r
            same = sum(a == b for a, b, g in zip(r["texts"], base["texts"], greedy, strict=True) if g)
            same_rec = sum(a == c["text"] for a, c, g in zip(r["texts"], calls, greedy, strict=True) if g)
            row = (f"| {role} | {label} | {len(calls)} | {r['tokens_in']} | {r['tokens_out']} | {r['seconds']:.1f} | "
                   f"{r['tokens_out'] / r['seconds']:.1f} | {base['seconds'] / r['seconds']:.2f}x | "
                   f"{same}/{sum(greedy)} | {same_rec}/{sum(greedy)} |")
            print(row, flush=True)
            rows.append(row)
    if out:
        n = {role: sum(c["role"] == role for c in data["calls"]) for role in ROLES}
        task = data.get("task", "demo")  # traces recorded before the option named no task: the demo
        section = (f"## {task}: {n['task']} task-LM and {n['reflection']} reflection calls (budget "
                   f"{data['budget']})\n\n"
                   f"`python benchmarks/local_speed.py record --task {task} --budget {data['budget']} "
                   f"--trace T` then `python benchmarks/local_speed.py replay --trace T --roles {' '.join(roles)} "
                   f"--out {out}` (threads {threads}), {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
                   f"{platform.machine()}, Python {platform.python_version()}, 2 CPU cores.\n\n{HEADER}\n"
                   + "\n".join(rows) + "\n\n")
        with open(out, "a") as f:
            f.write(section)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["record", "replay", "batch"])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--task", default="demo", help="a built-in task or a task target file.py:make_task")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="replay only the first N calls of each role")
    ap.add_argument("--roles", nargs="+", choices=list(ROLES), default=list(ROLES))
    ap.add_argument("--out", type=Path, default=None, help="append a section with the table to this markdown file")
    args = ap.parse_args(argv)
    if args.mode == "batch":
        batch_cost(args.threads)
    elif args.trace is None:
        ap.error("--trace is required")
    elif args.mode == "record":
        record(args.budget, args.trace, args.threads, args.task)
    else:
        replay(args.trace, args.out, args.threads, args.limit, args.roles)


if __name__ == "__main__":
    sys.exit(main())
