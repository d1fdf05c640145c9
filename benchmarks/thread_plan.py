"""Two embedded models on few cores: threads per decode, and decodes in turns or at once (issue 62).

    PYTHONPATH=src python benchmarks/thread_plan.py --threads 2 --busy 0
    PYTHONPATH=src python benchmarks/thread_plan.py --threads 1 --busy 1

A run's shape in small: eight task-LM calls (Qwen2.5-Coder 0.5B, short prompts, 40 tokens out) and one
reflection call (1.5B, a 700-token prompt, 120 tokens out) submitted at once, as a reflective round and the
rollouts of another proposal meet in a run, three times over (fresh prompts each time, so no prompt cache helps).
It reports the wall time and the process's CPU seconds; `--busy N` keeps N cores busy meanwhile (`yes`), and
`--turns` makes the two models decode in turns (one `llama_decode` at a time in the process, handed over in
arrival order: a plan measured here, not the backend's) instead of at the same time, as the backend does. Every
configuration runs in a fresh process (one JSON line).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import threading
import time

from gepetto.lm import llama_batch
from gepetto.lm.local import LocalLM

REFLECTION = ("You improve the instructions given to an AI assistant. " * 8 + "\n\nCurrent instruction:\n"
              "Extract the order from the customer's message. Reply with only a JSON object.\n\nExamples:\n"
              + "".join(f"Example {i}: input 'I want {i} dozen eggs for room {i * 7}', output "
                        f"{{\"item\": \"egg\", \"quantity\": {i * 7}}}, feedback: quantity should be {i * 12}.\n"
                        for i in range(1, 13))
              + "Write a better instruction.")


async def workload(task: LocalLM, refl: LocalLM, rounds: int) -> None:
    for r in range(rounds):
        calls = [task.complete([{"role": "system", "content": f"Round {r}. Extract the order as JSON."},
                                {"role": "user", "content": f"Customer {r}-{i}: please send {i + 2} lamps to "
                                                            f"room {i * 11}."}], max_tokens=40, temperature=0.0)
                 for i in range(8)]
        calls.append(refl.complete([{"role": "user", "content": f"[{r}] " + REFLECTION}], max_tokens=120,
                                   temperature=0.0))
        await asyncio.gather(*calls)


class Turns:
    """A lock handed over in the order it was asked for."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next = self._serving = 0

    def __enter__(self) -> None:
        with self._cond:
            ticket, self._next = self._next, self._next + 1
            while ticket != self._serving:
                self._cond.wait()

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._serving += 1
            self._cond.notify_all()


def in_turns(decoder: type) -> None:
    """Every decoder's `_decode` (one `llama_decode`) takes its turn from one process-wide lock."""
    turns, decode = Turns(), decoder._decode

    def one_at_a_time(self, plan):
        with turns:
            return decode(self, plan)

    decoder._decode = one_at_a_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=None, help="n_threads of both models (default: the backend's)")
    ap.add_argument("--busy", type=int, default=0)
    ap.add_argument("--turns", action="store_true", help="one decode at a time in the process (both models)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.turns:
        in_turns(llama_batch.BatchDecoder)
    opts = {} if args.threads is None else {"n_threads": args.threads}
    task, refl = LocalLM("qwen2.5-coder-0.5b", **opts), LocalLM("qwen2.5-coder-1.5b", **opts)
    task._load()  # loads outside the timing
    refl._load()
    hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(args.busy)]
    try:
        time.sleep(1.0 if hogs else 0.0)
        t0, c0 = time.perf_counter(), time.process_time()
        asyncio.run(workload(task, refl, args.rounds))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        for h in hogs:
            h.kill()
    print(json.dumps({"threads": args.threads, "busy": args.busy, "turns": args.turns, "rounds": args.rounds,
                      "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "cores": len(os.sched_getaffinity(0))}))


if __name__ == "__main__":
    main()
