"""Batched decoding in the embedded backend against the serial one, on real-track prompts (issue 38).

    python benchmarks/local_batch.py curve --model qwen2.5-coder-0.5b --parallel 1 2 4 8 12 --out F
    python benchmarks/local_batch.py curve --model qwen2.5-coder-1.5b --workload write --parallel 1 2 4 8 --out F
    python benchmarks/local_batch.py agree --n 100 --out F
    python benchmarks/local_batch.py cost --model qwen2.5-coder-0.5b --out F   # llama.cpp's cost of k sequences
    python benchmarks/local_batch.py threads --out F   # OMP_WAIT_POLICY and n_threads on this machine, now
    python benchmarks/local_batch.py whole --task clinc-banking --seeds 0 1 2 --budget 300 [--backends batched] --out F
    python benchmarks/local_batch.py whole --task demo --seeds 0 1 2 --budget 120 --metric builtin --out F
    python benchmarks/local_batch.py whole --task demo --seeds 6 7 --budget 120 --backends batched --metric builtin \
        --flash-attn on off --out F  # the decoder with flash attention and without, in turn for each seed
    python benchmarks/local_batch.py product --task demo --seeds 0 1 2 --budget 120 --metric builtin --out F
    python benchmarks/local_batch.py draft --rounds 2 --out F   # the first draft's rule requests: in turn or at once
    python benchmarks/local_batch.py where --task clinc-banking --seeds 0 --budget 300 --out F  # a run's decoding
    python benchmarks/local_batch.py kept --keeps 8 2 --flash-attn auto off --out F  # a write step, cells held
    python benchmarks/local_batch.py lookup --task demo --seeds 0 --budget 120 --out F  # drafting from the prompt
    python benchmarks/local_batch.py read --ks 1 2 8 32 128 480 --out F  # one sequence reading k tokens, repacking
    python benchmarks/local_batch.py precision --flash-attn auto --n 96 --out F  # next-token logits against unfused
    python benchmarks/local_batch.py timeline --task demo --seeds 0 --budget 120 --metric builtin --out F  # refusals

The prompts are what the clinc-banking task's program sends for its seed instruction (one system prompt, one
customer message per call): `clinc` asks for the intent (a few tokens out: prompt reading dominates), `unshared`
is the same with a different first line in every system prompt (nothing to share: batching alone), `write` asks
for a short reply to the message (up to 96 tokens out: decoding dominates), `long` is shaped like a reflection call
(a long shared instruction, a long message of several customer messages, up to 160 tokens out).

`curve` runs the same N calls, in rounds, with every setting in turn, so that the machine's load (2 shared cores)
falls on all of them alike: `serial` is the backend as it was before batching (llama-cpp-python's
`create_chat_completion`, one call at a time, as `LocalLM` called it), `P=k` is the batched backend with k calls in
flight. Tokens per second count the answers' tokens; "identical" counts greedy answers equal to the serial one's.

`agree` scores the seed instruction on N examples with both backends (8 in flight for the batched one): how many
greedy answers differ, and the mean score of each (the task's own metric).

`whole` runs the default configuration (gepetto.optimize with the task's plain user metric, as
`benchmarks/usertrack.py run`, or `--metric float|builtin`: the demo's own is `builtin`) once per seed with the
serial backend for both models and once with the batched one, in turn, each in a fresh store (no answer cached
from another run): wall time, rollouts, validation and the best's dev-test score (scored with the batched backend,
8 in flight, for both).

`product` runs the product as it stood at `--before` and today's, in turn for each seed, each as a user runs it
(`product_run.py` in its own process on a worktree of each commit, the embedded default models, a fresh store, each
side's own OMP_WAIT_POLICY default). The issue's "today's wall time" is that of the product when the issue was
written: e7ff4ae, the default (issues 36-40 were filed on it); 8c32d8d, main just before the batched backend was
merged, separates the backend (and the work of the same day) from what came before.

`kept` times a write step of one sequence against the cells that kept prefixes (prompts of ended requests, up to
the decoder's `keep`) hold in the cache, for each `--keeps` and `--flash-attn` setting (the decoder's flash
attention: `auto`, its default, leaves it to llama.cpp).

`precision` compares each model's next-token logits with flash attention against the unfused context, along one
greedy answer fed to both; `timeline` times each reflection answer of whole runs and counts those vetting refused.

`draft` times the rule requests of the labels route's first proposal (`edit(definitions=n)`: one per answer, each
with 4 training inputs of that answer and the seed instruction, as `edits.build_definition_prompt` writes them) on
the 1.5B, one at a time and all at once, each setting on a freshly loaded model per round (no prompt kept from the
other setting).

`where` runs the default once per seed with the batched backend and counts, per model, what its decoder did
(steps, tokens decoded, prompt tokens asked and of those taken from the cache) and its answer tokens.

`cost` times one `llama_decode` of k sequences x 1 token (after a shared 100-token prompt) on a bare llama.cpp
context, in CPU seconds of the process: what batching can give at best. `threads` times one decode of 1, 8 and 300
tokens in fresh processes with 1 or 2 threads and libgomp's default wait policy or `OMP_WAIT_POLICY=PASSIVE`.

`lookup` asks what prompt-lookup decoding (drafting the next tokens of an answer from an earlier occurrence of its
last few tokens in the prompt or the answer, and checking the draft in the same decode) would buy the reflection
LM: it runs the default once per seed (plain user metric unless `--metric`), keeps the tokens of every reflection
prompt and answer, counts the decode steps a drafter of at most k tokens would need to write the same answers (a
draft token is kept while it is the token written), and times one sequence decoding j tokens at once on a bare
context, which is what a step with a draft costs. The predicted speed-up of the answers' writing is their tokens
at the cost of one token each, over the steps at the cost of their batch (an upper bound: a sampled answer keeps a
drafted token only with the probability the model gives it, and here the written token is taken as that sample).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partialmethod
from pathlib import Path
from typing import Any

from gepetto.api import evaluate_async
from gepetto.lm.base import Completion, Usage
from gepetto.lm.local import LocalLM, is_looping, model_path
from gepetto.tasks import default_data_dir, load_task

TASK = "clinc-banking"


class SerialLM:
    """The embedded backend before batching: one llama-cpp-python `Llama`, one `create_chat_completion` at a time,
    streamed so that the loop detector can cut it (as `LocalLM` did without its speed options)."""

    def __init__(self, model: str, n_ctx: int = 4096, n_threads: int = 2) -> None:
        from llama_cpp import Llama

        self.name = f"serial:{model}"
        self.llama = Llama(model_path=str(model_path(model)), n_ctx=n_ctx, n_threads=n_threads,
                           n_threads_batch=n_threads, verbose=False, seed=0)
        self._lock = threading.Lock()

    def _generate(self, messages: list[dict[str, str]], params: dict[str, Any]) -> Completion:
        kwargs: dict[str, Any] = {"temperature": float(params.get("temperature", 0.0)),
                                  "max_tokens": int(params.get("max_tokens", 512))}
        for key in ("stop", "seed", "top_p", "top_k", "repeat_penalty"):
            if params.get(key) is not None:
                kwargs[key] = params[key]
        parts: list[str] = []
        finish = "stop"
        with self._lock:
            for chunk in self.llama.create_chat_completion(messages=messages, stream=True, **kwargs):
                choice = chunk["choices"][0]
                piece = choice.get("delta", {}).get("content") or ""
                parts.append(piece)
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
                if ("." in piece or "\n" in piece) and is_looping("".join(parts)):
                    finish = "length"
                    break
        text = "".join(parts)
        return Completion(text, Usage(0, len(self.llama.tokenize(text.encode("utf-8"), add_bos=False))), finish)

    async def complete(self, messages: Any, **params: Any) -> Completion:
        return await asyncio.to_thread(self._generate, [dict(m) for m in messages], params)


class Recorder:
    """A task LM that keeps the messages it is sent and answers nothing useful (to collect real prompts)."""

    name = "recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, str]], dict[str, Any]]] = []

    async def complete(self, messages: Any, **params: Any) -> Completion:
        self.calls.append(([dict(m) for m in messages], dict(params)))
        return Completion("balance")


def prompts(workload: str, n: int) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
    """N calls of the clinc-banking program with its seed instruction (see the module docstring)."""
    task = load_task(TASK, seed=0)
    examples = [*task.trainset, *task.valset, *task.testset][:n]
    rec = Recorder()
    asyncio.run(evaluate_async(task.seed_candidate, examples, task.metric, program=task.program, task_lm=rec,
                               max_concurrency=1))
    calls = rec.calls
    if workload == "unshared":
        calls = [([{**m, "content": f"Ticket {i}: {m['content']}"} if m["role"] == "system" else m for m in msgs],
                  params) for i, (msgs, params) in enumerate(calls)]
    elif workload == "write":
        calls = [([{"role": "system", "content": "You answer customers of a bank. Write a short, polite reply to "
                                                 "the customer's message, in two or three sentences."},
                   *[m for m in msgs if m["role"] != "system"]], {**params, "max_tokens": 96})
                 for msgs, params in calls]
    elif workload == "long":
        task = load_task(TASK, seed=0)
        pool = [str(e.inputs.get("message", e.inputs)) for e in task.trainset]
        header = ("You improve the instruction of a step of a program that classifies banking customer messages. "
                  "Read the current instruction, the messages it was run on, what it answered and the feedback. "
                  "Then write lessons about the intents the step confuses, and a better instruction. " * 4)
        calls = [([{"role": "system", "content": header},
                   {"role": "user", "content": "Messages:\n" + "\n".join(pool[(7 * i + k) % len(pool)]
                                                                            for k in range(12))
                    + "\nWrite the lessons, then the new instruction."}], {"max_tokens": 160})
                 for i in range(len(calls))]
    return calls


@dataclass
class Run:
    seconds: float
    texts: list[str]
    tokens_out: int
    tokens_in: int
    cpu: float = 0.0  # CPU seconds of the process (all threads): less bent by the machine's load than wall time


async def _run(lm: Any, calls: list[tuple[list[dict[str, str]], dict[str, Any]]], in_flight: int) -> Run:
    sem = asyncio.Semaphore(in_flight)

    async def one(msgs: list[dict[str, str]], params: dict[str, Any]) -> Completion:
        async with sem:
            return await lm.complete(msgs, **{"temperature": 0.0, **params})

    t0, c0 = time.perf_counter(), time.process_time()
    outs = await asyncio.gather(*(one(m, p) for m, p in calls))
    return Run(time.perf_counter() - t0, [o.text for o in outs], sum(o.usage.output_tokens for o in outs),
               sum(o.usage.input_tokens for o in outs), time.process_time() - c0)


def _report(text: str, out: Path | None) -> None:
    """Print a block of results and append it to `out` (a markdown file), if given."""
    print(text)
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(text)


def _describe() -> str:
    """The commit measured (with "-dirty" when the working tree differs from it)."""
    return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()


def _metric_flag(metric: str) -> str:
    """The command line's --metric, as given (none for the default)."""
    return f" --metric {metric}" if metric != "plain" else ""


def _machine() -> str:
    policy = os.environ.get("OMP_WAIT_POLICY") or "unset (libgomp spins, then sleeps)"
    return (f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), Python {platform.python_version()}, "
            f"llama-cpp-python {__import__('llama_cpp').__version__}, OMP_WAIT_POLICY {policy}")


def curve(model: str, workload: str, parallel: list[int], n: int, rounds: int, threads: int,
          out: Path | None) -> None:
    calls = prompts(workload, n)
    serial = SerialLM(model, n_threads=threads)
    batched = LocalLM(model, n_threads=threads, parallel=max(parallel))
    batched._load()
    settings: list[tuple[str, Any, int]] = [("serial", serial, 1)] + [(f"P={p}", batched, p) for p in parallel]
    asyncio.run(_run(serial, calls[:2], 1))  # warm both up (first-call allocations)
    asyncio.run(_run(batched, calls[:2], 1))
    results: dict[str, list[Run]] = {label: [] for label, _, _ in settings}
    loads = [os.getloadavg()[0]]
    t_start = datetime.now(timezone.utc)
    for r in range(rounds):
        for label, lm, p in settings:
            run = asyncio.run(_run(lm, calls, p))
            results[label].append(run)
            loads.append(os.getloadavg()[0])
            print(f"round {r} {label}: {run.seconds:.1f} s ({run.cpu:.1f} CPU s), {run.tokens_out} tokens out",
                  flush=True)
    base = results["serial"]
    rows = []
    for label, _, _ in settings:
        runs = results[label]
        secs = [x.seconds for x in runs]
        ratio = [b.seconds / x.seconds for b, x in zip(base, runs, strict=True)]
        cpu_ratio = sum(b.cpu for b in base) / sum(x.cpu for x in runs)
        same = sum(a == b for x, y in zip(base, runs, strict=True) for a, b in zip(x.texts, y.texts, strict=True))
        tok = sum(x.tokens_out for x in runs) / sum(secs)
        rows.append(f"| {model} | {workload} | {label} | {n} x {rounds} | {statistics.median(secs):.1f} | "
                    f"{n * rounds / sum(secs):.2f} | {tok:.1f} | {statistics.median(ratio):.2f}x "
                    f"({min(ratio):.2f}-{max(ratio):.2f}) | {sum(x.cpu for x in runs) / (n * rounds):.2f} | "
                    f"{cpu_ratio:.2f}x | {same}/{n * rounds} |")
    table = ("| model | prompts | setting | calls x rounds | median s per round | calls / s | tokens out / s | "
             "speed-up vs serial, wall (median of rounds, range) | CPU s per call | speed-up vs serial, CPU | "
             "greedy answers identical to serial |\n"
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows))
    print(table)
    if out:
        with open(out, "a") as f:
            f.write(f"\n`python benchmarks/local_batch.py curve --model {model} --workload {workload} --parallel "
                    f"{' '.join(map(str, parallel))} --n {n} --rounds {rounds} --threads {threads}`, "
                    f"{t_start:%Y-%m-%d %H:%M} UTC, {_machine()}; load average (1 min) during the run "
                    f"{min(loads):.1f}-{max(loads):.1f}.\n\n{table}\n")


def agree(n: int, in_flight: int, threads: int, out: Path | None) -> None:
    task = load_task(TASK, seed=0)
    examples = [*task.valset, *task.testset, *task.trainset][:n]
    serial = SerialLM("qwen2.5-coder-0.5b", n_threads=threads)
    batched = LocalLM("qwen2.5-coder-0.5b", n_threads=threads, parallel=in_flight)
    t_start = datetime.now(timezone.utc)
    evals, seconds = {}, {}
    for label, lm, k in (("serial", serial, 1), ("batched", batched, in_flight)):
        t0 = time.perf_counter()
        evals[label] = asyncio.run(evaluate_async(task.seed_candidate, examples, task.metric, program=task.program,
                                                  task_lm=lm, max_concurrency=k))
        seconds[label] = time.perf_counter() - t0
    a, b = evals["serial"].rollouts, evals["batched"].rollouts
    differ = [(x, y) for x, y in zip(a, b, strict=True) if [t.output for t in x.trace] != [t.output for t in y.trace]]
    flips = sum(x.score.value != y.score.value for x, y in differ)
    lines = [f"\n`python benchmarks/local_batch.py agree --n {n} --parallel {in_flight} --threads {threads}`, "
             f"{t_start:%Y-%m-%d %H:%M} UTC, {_machine()}, load average (1 min) {os.getloadavg()[0]:.1f} at the end.",
             "",
             f"- {TASK}, seed instruction, {n} examples (validation, then test, then training), Qwen2.5-Coder 0.5B, "
             f"temperature 0.",
             f"- greedy answers that differ between the serial and the batched backend: {len(differ)}/{n}; of "
             f"these, {flips} change the example's score.",
             f"- mean score: serial {evals['serial'].mean:.3f}, batched {evals['batched'].mean:.3f}.",
             f"- wall time: serial {seconds['serial']:.0f} s, batched ({in_flight} in flight) "
             f"{seconds['batched']:.0f} s.", ""]
    lines += [f"  - `{x.trace[0].output!r}` -> `{y.trace[0].output!r}` ({x.score.value:.0f} -> {y.score.value:.0f})"
              for x, y in differ[:12] if x.trace and y.trace]
    text = "\n".join(lines) + "\n"
    _report(text, out)


def _context(llama: Any, n_seq: int, *, ubatch: int = 512, flash: str = "off") -> Any:
    """A llama.cpp context of `n_seq` sequences (4096 cells, one unified cache) on a loaded model, reading up to
    `ubatch` tokens per decode, with flash attention as `flash` says (a --flash-attn setting)."""
    import llama_cpp
    from llama_cpp._internals import LlamaContext

    from gepetto.lm.llama_batch import flash_attn_type

    params = llama_cpp.llama_context_params.from_buffer_copy(llama.context_params)
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max, params.kv_unified = 4096, 512, ubatch, n_seq, True
    params.flash_attn_type = flash_attn_type(FLASH[flash])
    return LlamaContext(model=llama._model, params=params, verbose=False)


def _bare_context(model: str, threads: int, n_seq: int, extra_bufts: bool = True
                  ) -> tuple[Any, Any, Any, list[int]]:
    """A llama.cpp context of `n_seq` sequences on the model (as the batched backend makes it, with llama.cpp's
    extra buffer types, weight repacking among them, or without), a batch and 800 tokens."""
    import llama_cpp

    from gepetto.lm import cpu
    from gepetto.lm.local import _new_llama

    with cpu.extra_bufts(extra_bufts):
        llama = _new_llama(model_path(model), n_threads=threads)
    ctx = _context(llama, n_seq)
    text = b"Read the customer's message and answer with a JSON object with the keys item and quantity. " * 80
    return llama, ctx, llama_cpp.llama_batch_init(512, 0, 1), llama.tokenize(text)[:800]


def _decode_cpu(ctx: Any, batch: Any, entries: list[tuple[int, int, int, int]]) -> tuple[float, float]:
    """One llama_decode of (token, position, sequence, logits?) entries: (CPU seconds, wall seconds)."""
    import llama_cpp

    for i, (tok, pos, sid, out) in enumerate(entries):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos, 1, out
        batch.seq_id[i][0] = sid
    batch.n_tokens = len(entries)
    c0, t0 = time.process_time(), time.perf_counter()
    if llama_cpp.llama_decode(ctx.ctx, batch) != 0:
        raise RuntimeError("llama_decode failed")
    llama_cpp.llama_synchronize(ctx.ctx)
    return time.process_time() - c0, time.perf_counter() - t0


def cost(model: str, threads: int, out: Path | None) -> None:
    import llama_cpp

    ks = (1, 2, 4, 8, 16, 32)
    llama, ctx, batch, toks = _bare_context(model, threads, max(ks))  # (llama holds the weights)
    mem = llama_cpp.llama_get_memory(ctx.ctx)
    _decode_cpu(ctx, batch, [(t, i, 0, 0) for i, t in enumerate(toks[:100])])
    for s in range(1, max(ks)):
        llama_cpp.llama_memory_seq_cp(mem, 0, s, 0, 100)
    loads, cpu, wall = [os.getloadavg()[0]], {}, {}
    for k in ks:
        runs = []
        for _ in range(7):
            for s in range(k):
                llama_cpp.llama_memory_seq_rm(mem, s, 100, -1)
            runs.append(_decode_cpu(ctx, batch, [(toks[100 + s], 100, s, 1) for s in range(k)]))
        cpu[k] = statistics.median(c for c, _ in runs)
        wall[k] = statistics.median(w for _, w in runs)
        loads.append(os.getloadavg()[0])
    del llama
    line = (f"| {model} | " + " | ".join(f"{1000 * cpu[k]:.0f} ms ({k / cpu[k] / (1 / cpu[1]):.1f}x)" for k in ks)
            + " | " + " | ".join(f"{1000 * wall[k]:.0f} ms" for k in ks) + " |")
    head = ("| model | " + " | ".join(f"{k} seq CPU" for k in ks) + " | " + " | ".join(f"{k} seq wall" for k in ks)
            + " |\n|---|" + "---:|" * (2 * len(ks)))
    text = (f"\n`python benchmarks/local_batch.py cost --model {model} --threads {threads}`, "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {_machine()}, load average (1 min) "
            f"{min(loads):.1f}-{max(loads):.1f}; median of 7; in brackets, tokens per CPU second against 1 "
            f"sequence.\n\n{head}\n{line}\n")
    _report(text, out)


def _read_costs(model: str, threads: int, ks: Sequence[int], *, extra_bufts: bool = True, every_logit: bool = False,
                reps: int = 5) -> dict[int, tuple[float, float]]:
    """One sequence reading k tokens in one decode after a 300-token prompt, for each k: the median (CPU seconds,
    wall seconds) of `reps`. With `every_logit` the logits of every token are computed (a step checking a draft),
    else those of the last only (a prompt read in one batch)."""
    import llama_cpp

    llama, ctx, batch, toks = _bare_context(model, threads, 1, extra_bufts)
    mem = llama_cpp.llama_get_memory(ctx.ctx)
    _decode_cpu(ctx, batch, [(t, i, 0, 0) for i, t in enumerate(toks[:300])])
    costs = {}
    for k in ks:
        runs = []
        for _ in range(reps):
            llama_cpp.llama_memory_seq_rm(mem, 0, 300, -1)
            runs.append(_decode_cpu(ctx, batch, [(toks[300 + j], 300 + j, 0, int(every_logit or j == k - 1))
                                                 for j in range(k)]))
        costs[k] = statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs)
    ctx.close()
    del llama
    return costs


def read(models: list[str], ks: list[int], threads: int, out: Path | None) -> None:
    """One sequence reading k tokens in one decode (a prompt read in one batch), with llama.cpp's extra buffer
    types (repacked weights) and without."""
    rows, loads = [], [os.getloadavg()[0]]
    for model in models:
        for extra in (True, False):
            costs = _read_costs(model, threads, ks, extra_bufts=extra)
            loads.append(os.getloadavg()[0])
            row = (f"| {model} | {'on' if extra else 'off'} | "
                   + " | ".join(f"{1000 * costs[k][1]:.0f} ms ({k / costs[k][1]:.0f}/s)" for k in ks) + " |")
            print(row, flush=True)
            rows.append(row)
    text = (f"\n`python benchmarks/local_batch.py read --models {' '.join(models)} --ks {' '.join(map(str, ks))}"
            f" --threads {threads}`, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {_machine()}, load average "
            f"(1 min) {min(loads):.1f}-{max(loads):.1f}; wall time of one decode of k tokens of one sequence, median "
            f"of 5, in brackets tokens per second.\n\n| model | extra buffer types | "
            + " | ".join(f"k={k}" for k in ks) + " |\n|---|---|" + "---:|" * len(ks) + "\n" + "\n".join(rows) + "\n")
    _report(text, out)


def _threads_child(model: str, threads: int) -> None:
    """(In a fresh process, so that OMP_WAIT_POLICY applies.) Median wall and CPU of decodes of 300, 8, 1 tokens."""
    import llama_cpp

    llama, ctx, batch, toks = _bare_context(model, threads, 1)  # (llama holds the weights)
    mem = llama_cpp.llama_get_memory(ctx.ctx)
    res = []
    for n in (300, 8, 1):
        runs = []
        for _ in range(3):
            llama_cpp.llama_memory_clear(mem, True)
            runs.append(_decode_cpu(ctx, batch, [(t, i, 0, int(i == n - 1)) for i, t in enumerate(toks[:n])]))
        res.append(f"{1000 * statistics.median(w for _, w in runs):.0f} ms")
    del llama
    print(" | ".join(res))


def threads(model: str, rounds: int, out: Path | None) -> None:
    import subprocess

    rows, loads = [], [os.getloadavg()[0]]
    settings = [("unset (libgomp spins, then sleeps)", 2), ("PASSIVE", 2), ("unset (libgomp spins, then sleeps)", 1),
                ("PASSIVE", 1)]
    for r in range(rounds):
        for policy, n in settings:
            env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
            env["OMP_WAIT_POLICY"] = "PASSIVE" if policy == "PASSIVE" else ""
            got = subprocess.run([sys.executable, __file__, "_threads", "--model", model, "--threads", str(n)],
                                 env=env, capture_output=True, text=True, check=True).stdout.strip()
            loads.append(os.getloadavg()[0])
            rows.append(f"| {r} | {policy} | {n} | {got} | {loads[-1]:.1f} |")
            print(rows[-1], flush=True)
    text = (f"\n`python benchmarks/local_batch.py threads --model {model} --rounds {rounds}`, "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {_machine()} (this process; each row's own is in "
            f"its column), load average (1 min) {min(loads):.1f}-{max(loads):.1f}; wall time of one llama_decode, "
            f"median of 3, each row a fresh process.\n\n| round | OMP_WAIT_POLICY | threads | 300 tokens | 8 tokens | "
            f"1 token | load |\n|---:|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    _report(text, out)


def draft(rounds: int, out: Path | None) -> None:
    from gepetto.engine import edits

    task = load_task(TASK, seed=0)
    instruction = task.seed_candidate["instruction"]
    by_label: dict[str, list[str]] = {}
    for ex in task.trainset:
        by_label.setdefault(str(ex.gold), []).append(str(ex.inputs["message"]))
    calls = [edits.build_definition_prompt(instruction, label, inputs[:4]) for label, inputs in sorted(by_label.items())
             if len(inputs) >= 2]
    params = {"temperature": 0.0, "max_tokens": 90, "stop": [edits.RULE_CLOSE], "seed": 0}

    async def in_turn(lm: Any) -> list[Completion]:
        return [await lm.complete(m, **params) for m in calls]

    async def at_once(lm: Any) -> list[Completion]:
        return list(await asyncio.gather(*(lm.complete(m, **params) for m in calls)))

    rows, texts = [], {}
    t_start = datetime.now(timezone.utc)
    for r in range(rounds):
        for label, fn in (("one at a time", in_turn), ("all at once", at_once)):
            lm = LocalLM("qwen2.5-coder-1.5b")
            asyncio.run(lm.complete([{"role": "user", "content": "Say yes."}], max_tokens=2))  # load, warm up
            t0, c0 = time.perf_counter(), time.process_time()
            outs = asyncio.run(fn(lm))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            lm.close()
            texts.setdefault(label, []).append([o.text for o in outs])
            row = (f"| {r} | {label} | {len(calls)} | {sum(o.usage.input_tokens for o in outs)} | "
                   f"{sum(o.usage.output_tokens for o in outs)} | {wall:.1f} s | {cpu:.1f} s |")
            print(row, flush=True)
            rows.append(row)
    same = sum(a == b for x, y in zip(texts["one at a time"], texts["all at once"], strict=True)
               for a, b in zip(x, y, strict=True))
    text = (f"\n**The first draft's rule requests** (`python benchmarks/local_batch.py draft --rounds {rounds}`; "
            f"{_machine()}; {t_start:%Y-%m-%d %H:%M} UTC; `git describe`: {_describe()}). Qwen2.5-Coder 1.5B, "
            f"greedy, a fresh model per setting and round; answers identical between the settings: "
            f"{same}/{len(calls) * rounds}.\n\n"
            "| round | requests | calls | tokens in | tokens out | wall | CPU (process) |\n"
            "|---:|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    _report(text, out)


def _default_run(task: Any, lms: tuple[Any, Any], seed: int, budget: int, options: dict[str, Any] | None = None,
                 metric: str = "plain") -> tuple[Any, float, float]:
    """The default configuration (with `options` of `gepetto.optimize`, if any) and the user metric of `metric`'s
    style (`user_metrics.user_metric`: plain, float, or the task's builtin one), in a fresh store (no answer cached
    from another run): the result, wall seconds and CPU seconds of the process."""
    import tempfile

    from user_metrics import user_metric

    import gepetto

    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        result = gepetto.optimize(task.seed_candidate, task.trainset, user_metric(task, metric), valset=task.valset,
                                  program=task.program, task_lm=lms[0], reflection_lm=lms[1], budget=budget,
                                  seed=seed, storage=Path(tmp) / "run.sqlite", run=f"s{seed}", **(options or {}))
        return result, time.perf_counter() - t0, time.process_time() - c0


def _overlap(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Seconds during which an interval of `a` and one of `b` ran at once (each list sorted, non-overlapping)."""
    total, j = 0.0, 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            total += min(end, b[k][1]) - max(start, b[k][0])
            k += 1
    return total


@contextmanager
def _timed_decodes(probe: Callable[[Any], Any] | None = None) -> Iterator[list[tuple[Any, Any, float, float, Any]]]:
    """Every batched decode step while inside, in order: (decoder, plan, start, end, `probe(decoder)` before it)."""
    from gepetto.lm.llama_batch import BatchDecoder

    decode = BatchDecoder._decode
    steps: list[tuple[Any, Any, float, float, Any]] = []

    def timed(self: Any, plan: Any) -> int:
        seen, t0 = probe(self) if probe else None, time.perf_counter()
        try:
            return decode(self, plan)
        finally:
            steps.append((self, plan, t0, time.perf_counter(), seen))

    BatchDecoder._decode = timed  # type: ignore[method-assign]
    try:
        yield steps
    finally:
        BatchDecoder._decode = decode  # type: ignore[method-assign]


FLASH = {"auto": None, "on": True, "off": False}  # a --flash-attn setting: BatchDecoder's flash_attn


@contextmanager
def _decoders_made(**keywords: Any) -> Iterator[None]:
    """Every BatchDecoder made while inside takes these keywords."""
    from gepetto.lm.llama_batch import BatchDecoder

    init = BatchDecoder.__init__
    BatchDecoder.__init__ = partialmethod(init, **keywords)  # type: ignore[method-assign]
    try:
        yield
    finally:
        BatchDecoder.__init__ = init  # type: ignore[method-assign]


def where(task_name: str, seeds: list[int], budget: int, out: Path | None, metric: str = "plain") -> None:
    task = load_task(task_name, seed=0)
    rows = []
    with _timed_decodes() as steps:
        for seed in seeds:
            lms = LocalLM("qwen2.5-coder-0.5b"), LocalLM("qwen2.5-coder-1.5b")
            steps.clear()
            result, wall, _ = _default_run(task, lms, seed, budget, metric=metric)
            both = _overlap(*([(t0, t1) for d, _, t0, t1, _ in steps if d is lm._decoder] for lm in lms))
            for role, lm in zip(("task", "reflection"), lms, strict=True):
                st = lm._decoder.stats if lm._decoder is not None else None
                usage = result.ledger.roles.get(role)
                if st is not None and usage is not None:
                    rows.append(f"| {seed} | {role} ({lm.model}) | {wall:.0f} s | {st.decode_seconds:.0f} s | "
                                f"{st.requests} | {st.steps} | {st.batch_tokens} | {st.prompt_tokens} | "
                                f"{st.reused_tokens} ({st.reused_tokens / max(st.prompt_tokens, 1):.0%}) | "
                                f"{usage.output_tokens} |")
                    print(rows[-1], flush=True)
                lm.close()
            rows.append(f"| {seed} | both models decoding at once | {wall:.0f} s | {both:.0f} s | | | | | | |")
            print(rows[-1], flush=True)
    text = (f"\n**Where a batched run's time goes** (`python benchmarks/local_batch.py where --task {task_name} "
            f"--seeds {' '.join(map(str, seeds))} --budget {budget}{_metric_flag(metric)}`; {_machine()}; "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `git describe`: {_describe()}). "
            "Counts of each model's decoder over the whole run:\n\n"
            "| seed | model | run wall | inside llama_decode | requests | decode steps | tokens decoded (prompts read "
            "+ answers) | prompt tokens asked | of which from the cache | answer tokens |\n"
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    _report(text, out)


def kept(models: list[str], keeps: list[int], flash: list[str], rounds: int, out: Path | None) -> None:
    """A write step of one sequence against the cells other prompts hold in the cache: a fresh decoder per model,
    `keep` (how many ended prompts it keeps as prefixes) and flash attention setting (`auto`: the decoder's
    default, llama.cpp's choice; `on`; `off`), then per round six other ~500-token prompts (kept as prefixes, up
    to `keep`) and one answer of 80 tokens to a new ~450-token prompt, greedy. Without flash attention a step in a
    unified cache attends over the cells in use, kept prefixes included."""
    import random

    words = ["account", "balance", "transfer", "payment", "card", "fraud", "bill", "routing", "number", "interest",
             "rate", "pin", "freeze", "order", "checks", "spending", "history", "transactions"]

    def text(seed: int, n: int) -> str:
        rng = random.Random(seed)
        return " ".join(rng.choice(words) for _ in range(n))

    rows = []
    with _timed_decodes(lambda decoder: decoder._cells_used()) as steps:
        for model, fa, keep in itertools.product(models, flash, keeps):
            with _decoders_made(keep=keep, flash_attn=FLASH[fa]):
                lm = LocalLM(model)
                for r in range(rounds):
                    for k in range(6):
                        asyncio.run(lm.complete([{"role": "user", "content": text(100 * r + k, 500)}],
                                                max_tokens=1, temperature=0.0))
                    steps.clear()
                    ask = (text(10_000 + r, 450)
                           + "\nWrite a long numbered list of twenty rules about banking requests.")
                    asyncio.run(lm.complete([{"role": "user", "content": ask}], max_tokens=80, temperature=0.0))
                    one = [(t1 - t0, cells) for _, plan, t0, t1, cells in steps
                           if sum(len(t) for _, t, _ in plan) == 1]
                    row = (f"| {model} | {fa} | {keep} | {r} | {len(one)} | {max(c for _, c in one)} | "
                           f"{1000 * statistics.median(t for t, _ in one):.1f} ms |")
                    print(row, flush=True)
                    rows.append(row)
                lm.close()
    _report(f"\n`python benchmarks/local_batch.py kept --models {' '.join(models)} --keeps {' '.join(map(str, keeps))} "
            f"--flash-attn {' '.join(flash)} --rounds {rounds}`; {_machine()}; "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `git describe`: {_describe()}.\n\n"
            "| model | flash attention | kept prefixes (keep) | round | write steps | cells in use | median write "
            "step |\n|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n", out)


def precision(models: list[str], flash: list[str], steps: int, out: Path | None) -> None:
    """How far the decoder's next-token distributions are, for each flash attention setting, from its context
    without flash attention (llama.cpp's unfused attention: the decoder before f9251d3), on reflection-shaped
    prompts (`long`'s first, and its first three in one for a longer context): each prompt read 512 tokens at a
    time, then the reference's greedy answer of `steps` tokens fed to every setting alike, every written position
    compared. As a floor, the unfused context reading the prompt 64 tokens at a time: the arithmetic differences
    a batch's shape alone makes."""
    import llama_cpp
    import numpy as np

    from gepetto.lm.local import _new_llama, chat_request

    calls = prompts("long", 3)
    settings = [("off", 512), ("off", 64), *((fa, 512) for fa in flash if fa != "off")]
    rows = []
    for model in models:
        llama = _new_llama(model_path(model), n_threads=2)
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama._model.vocab)
        longer = [calls[0][0][0], {"role": "user", "content": "\n\n".join(m[1]["content"] for m, _ in calls)}]
        for msgs in (calls[0][0], longer):
            prompt = list(chat_request(llama, msgs, max_tokens=steps)["prompt"])
            reference: list[int] = []
            logits = []
            for fa, chunk in settings:
                ctx = _context(llama, 1, ubatch=chunk, flash=fa)
                batch = llama_cpp.llama_batch_init(512, 0, 1)
                for at in range(0, len(prompt), 512):
                    _decode_cpu(ctx, batch, [(t, at + i, 0, int(at + i == len(prompt) - 1))
                                             for i, t in enumerate(prompt[at:at + 512])])
                seen = []
                for k in range(steps):
                    row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ctx, -1), shape=(n_vocab,))
                    seen.append(row.astype(np.float64))
                    if len(reference) <= k:
                        reference.append(int(row.argmax()))
                    _decode_cpu(ctx, batch, [(reference[k], len(prompt) + k, 0, 1)])
                llama_cpp.llama_batch_free(batch)
                ctx.close()
                logits.append(np.array(seen))

            def log_softmax(x: Any) -> Any:
                x = x - x.max(1, keepdims=True)
                return x - np.log(np.exp(x).sum(1, keepdims=True))

            ref = logits[0]
            log_p = log_softmax(ref)
            for (fa, chunk), got in zip(settings, logits, strict=True):
                kl = (np.exp(log_p) * (log_p - log_softmax(got))).sum(1)
                flips = int((got.argmax(1) != ref.argmax(1)).sum())
                line = (f"| {model} | {len(prompt)} | {fa} | {chunk} | {steps} | {flips} | {max(kl.mean(), 0):.1e} | "
                        f"{np.median(np.abs(got - ref).max(1)):.3f} |")
                print(line, flush=True)
                rows.append(line)
        del llama
    _report(f"\n`python benchmarks/local_batch.py precision --models {' '.join(models)} --flash-attn {' '.join(flash)} "
            f"--n {steps}`; {_machine()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `git describe`: "
            f"{_describe()}. Against the unfused context reading the prompt 512 tokens at a time (the reference, "
            "first row of each prompt), over the positions of the reference's greedy answer:\n\n"
            "| model | prompt tokens | flash attention | prompt read k at a time | positions | most likely token "
            "differs | mean KL divergence from the reference | median of the largest logit difference |\n"
            "|---|---:|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n", out)


def _draft_steps(prompt: list[int], answer: list[int], k: int, longest: int = 3) -> list[int]:
    """Prompt-lookup drafting over a written answer: for each decode step, how many tokens the step reads (the
    token written before it, answer[i], and the draft). The draft is the k tokens after the latest earlier
    occurrence of the last n tokens (n from `longest` down to 1) of prompt + answer[:i + 1]; it is kept while it
    matches the answer. The last step reads the last token and ends the answer."""
    steps, i = [], 0
    while i < len(answer):
        seen, drafted = prompt + answer[:i + 1], []
        for n in range(min(longest, len(seen) - 1), 0, -1):
            tail = seen[-n:]
            at = next((j for j in range(len(seen) - n - 1, -1, -1) if seen[j:j + n] == tail), None)
            if at is not None:
                drafted = seen[at + n:at + n + k]
                break
        kept = 0
        while kept < len(drafted) and i + 1 + kept < len(answer) and drafted[kept] == answer[i + 1 + kept]:
            kept += 1
        steps.append(1 + len(drafted))
        i += 1 + kept
    return steps


def lookup(task_name: str, seeds: list[int], budget: int, ks: list[int], threads: int, out: Path | None,
           metric: str = "plain") -> None:
    from gepetto.lm.llama_batch import BatchDecoder

    task = load_task(task_name, seed=0)
    calls: dict[int, list[tuple[list[int], list[int]]]] = {}
    end = BatchDecoder._end

    def kept(self: Any, seq: Any, finish: str = "stop", error: Exception | None = None) -> None:
        if seq.job is not None and error is None:
            calls.setdefault(id(self), []).append((list(seq.job.prompt), list(seq.out)))
        end(self, seq, finish, error)

    BatchDecoder._end = kept  # type: ignore[method-assign]
    answers: list[tuple[list[int], list[int]]] = []
    try:
        for seed in seeds:
            lms = LocalLM("qwen2.5-coder-0.5b"), LocalLM("qwen2.5-coder-1.5b")
            _default_run(task, lms, seed, budget, metric=metric)
            answers += calls.get(id(lms[1]._decoder), [])
            calls.clear()
            for lm in lms:
                lm.close()
    finally:
        BatchDecoder._end = end  # type: ignore[method-assign]
    written = sum(len(a) for _, a in answers)
    if not written:
        sys.exit(f"no reflection answer in {len(seeds)} run(s) of {task_name} at budget {budget}: a larger budget")
    plans = {k: [n for p, a in answers for n in _draft_steps(p, a, k)] for k in ks}
    loads = [os.getloadavg()[0]]
    costs = _read_costs("qwen2.5-coder-1.5b", threads, range(1, max(ks) + 2), every_logit=True, reps=9)
    loads.append(os.getloadavg()[0])
    cpu, wall = ({j: c[i] for j, c in costs.items()} for i in (0, 1))
    rows = []
    for k in ks:
        steps = plans[k]
        rows.append(f"| {k} | {len(steps)} | {written / max(len(steps), 1):.2f} | "
                    f"{sum(steps) / max(len(steps), 1):.1f} | "
                    f"{written * cpu[1] / sum(cpu[n] for n in steps):.2f}x | "
                    f"{written * wall[1] / sum(wall[n] for n in steps):.2f}x |")
    per_j = " | ".join(f"{1000 * cpu[j]:.0f} ms" for j in range(1, max(ks) + 2))
    text = (f"\n**Drafting the reflection LM's answers from its prompt** (`python benchmarks/local_batch.py lookup "
            f"--task {task_name} --seeds {' '.join(map(str, seeds))} --budget {budget} --ks "
            f"{' '.join(map(str, ks))}{_metric_flag(metric)}`; {_machine()}; "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load "
            f"average (1 min) {min(loads):.1f}-{max(loads):.1f}; `git describe`: {_describe()}). "
            f"{len(answers)} reflection answers, {written} tokens written, one per step without drafts.\n\n"
            "One sequence decoding j tokens at once (Qwen2.5-Coder 1.5B, after a 300-token prompt; CPU seconds, "
            "median of 9), j = 1, 2, ...:\n\n"
            "| " + " | ".join(f"j={j}" for j in range(1, max(ks) + 2)) + " |\n|" + "---:|" * (max(ks) + 1)
            + f"\n| {per_j} |\n\n"
            "| drafts of at most k | steps | tokens written per step | tokens read per step | predicted speed-up "
            "of writing (CPU) | (wall) |\n|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n")
    _report(text, out)


def whole(task_name: str, seeds: list[int], budget: int, backends: list[str], out: Path | None,
          options: dict[str, Any] | None = None, metric: str = "plain", flash: Sequence[str] = ("auto",)) -> None:
    """Whole runs of the default configuration, for each seed in turn each backend (the batched one once per
    flash attention setting of its decoder, `flash`); each best is scored on the dev test with the default
    batched backend."""
    task = load_task(task_name, seed=0)
    scorer = LocalLM("qwen2.5-coder-0.5b")
    given = "".join(f" --set {k}={json.dumps(v)}" for k, v in (options or {}).items())
    with_ = f" with{given.replace(' --set', '')}" if given else ""
    given += _metric_flag(metric) + ("" if list(flash) == ["auto"] else f" --flash-attn {' '.join(flash)}")
    lines = [f"\n**A whole run, before and after** (`python benchmarks/local_batch.py whole --task {task_name} --seeds "
             f"{' '.join(map(str, seeds))} --budget {budget} --backends {' '.join(backends)}{given}`; {_machine()}; "
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC). The default configuration{with_}, {metric} metric, "
             f"fresh store per run; {' then '.join(backends)} for each seed (`git describe`: {_describe()}):\n",
             "| seed | backend | wall | CPU (process) | rollouts | proposals | reflection calls, seconds (summed) | "
             f"validation seed -> best | dev test of the best ({len(task.testset)}) |",
             "|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    runs = [(b, fa) for b in backends for fa in (flash if b == "batched" else ["auto"])]
    for seed in seeds:
        for backend, fa in runs:
            if backend == "serial":
                lms: tuple[Any, Any] = (SerialLM("qwen2.5-coder-0.5b"), SerialLM("qwen2.5-coder-1.5b"))
            else:
                lms = ("local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-1.5b")
            with _decoders_made(flash_attn=FLASH[fa]):
                result, wall, cpu = _default_run(task, lms, seed, budget, options, metric)
            if len(flash) > 1 and backend == "batched":
                backend = f"batched, flash attention {fa}"
            refl = result.ledger.roles.get("reflection")
            calls, seconds = (refl.calls, refl.seconds) if refl else (0, 0.0)
            test = asyncio.run(evaluate_async(result.best_candidate, task.testset, task.metric, program=task.program,
                                              task_lm=scorer, max_concurrency=8)).mean
            row = (f"| {seed} | {backend} | {wall:.0f} s | {cpu:.0f} s | {result.rollouts_used} | "
                   f"{sum(result.proposals.values())} | {calls}, {seconds:.0f} s | "
                   f"{result.seed_score:.3f} -> {result.best_score:.3f} | "
                   f"{test:.3f} |")
            print(row, flush=True)
            lines.append(row)
            del lms
    text = "\n".join(lines) + "\n"
    _report(text, out)


class _AnswerClock:
    """A run's callback: each reflection answer, timed from its request (the reflection phase's start, or the
    answer before it in the same proposal), with what vetting made of it (None: usable)."""

    def __init__(self) -> None:
        self.answers: list[tuple[float, Any]] = []
        self._start = time.perf_counter()

    def __call__(self, event: Any) -> None:
        from gepetto.engine import events as ev

        now = time.perf_counter()
        if isinstance(event, ev.ReflectionAnswered):
            self.answers.append((now - self._start, event.rejected))
        if isinstance(event, ev.ReflectionAnswered) or (isinstance(event, ev.PhaseStarted)
                                                         and event.phase == "reflection"):
            self._start = now


def timeline(task_name: str, seeds: list[int], budget: int, out: Path | None, metric: str = "plain") -> None:
    """Where a run's reflection time goes: its answers (`_AnswerClock`), usable or refused."""
    from gepetto.engine.events import Outcome

    rows = []
    for seed in seeds:
        clock = _AnswerClock()
        task = load_task(task_name, seed=0)
        result, wall, _ = _default_run(task, ("local:qwen2.5-coder-0.5b", "local:qwen2.5-coder-1.5b"), seed, budget,
                                       {"callbacks": [clock]}, metric)
        answers = clock.answers
        refused = [(t, r) for t, r in answers if r is not None]
        unchanged = [t for t, r in refused if r is Outcome.UNCHANGED]
        row = (f"| {seed} | {wall:.0f} s | {result.rollouts_used} | {len(answers)} | {len(unchanged)} | "
               f"{len(refused) - len(unchanged)} | {sum(t for t, _ in answers):.0f} s | {sum(unchanged):.0f} s | "
               f"{sum(t for t, _ in refused):.0f} s |")
        print(row, flush=True)
        rows.append(row)
    _report(f"\n**Where the reflection time goes** (`python benchmarks/local_batch.py timeline --task {task_name} "
            f"--seeds {' '.join(map(str, seeds))} --budget {budget}{_metric_flag(metric)}`; {_machine()}; "
            f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `git describe`: {_describe()}). The default "
            "configuration; each reflection answer timed from its request:\n\n"
            "| seed | run wall | rollouts | reflection answers | refused as unchanged | refused otherwise | seconds "
            "in all answers | in answers refused as unchanged | in all refused answers |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n", out)


def product(task_name: str, seeds: list[int], budget: int, before: str, out: Path | None, metric: str = "plain"
            ) -> None:
    """The product as it stood at `before` against today's, in turn for each seed: `product_run.py` in a fresh
    process on a worktree of each, with OMP_WAIT_POLICY as each ships it (unset before batching; today's backend sets
    PASSIVE itself). The best of each run is scored on the dev test here, with today's batched backend."""
    import tempfile

    root = Path(__file__).resolve().parents[1]
    rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", before], capture_output=True, text=True,
                         check=True).stdout.strip()
    task = load_task(task_name, seed=0)
    scorer = LocalLM("qwen2.5-coder-0.5b")
    command = (f"python benchmarks/local_batch.py product --task {task_name} --seeds {' '.join(map(str, seeds))} "
               f"--budget {budget} --before {before}{_metric_flag(metric)}")
    lines = [f"\n**The product before and after** (`{command}`; {_machine()} in this process, each run with its "
             f"own default; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC). Before: {rev}; today: "
             f"{_describe()}. The default configuration, {metric} metric, fresh store per run, before then today for "
             "each seed:\n",
             "| seed | product | wall | CPU (process) | rollouts | proposals | reflection calls | "
             f"validation seed -> best | dev test of the best ({len(task.testset)}) |",
             "|---:|---|---:|---:|---:|---:|---:|---|---:|"]
    walls: dict[str, list[float]] = {"before": [], "today": []}
    tests: dict[str, list[float]] = {"before": [], "today": []}
    # stopped with SIGTERM, raise: subprocess.run then kills the run in progress, which would otherwise go on
    # decoding beside whatever is measured next
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(old), rev], check=True,
                       capture_output=True)
        # today's child and metric for both sides, run from here: a script's own folder comes first on sys.path
        for name in ("product_run.py", "user_metrics.py"):
            (Path(tmp) / name).write_text((root / "benchmarks" / name).read_text(encoding="utf-8"), encoding="utf-8")
        child = Path(tmp) / "product_run.py"
        try:
            for seed in seeds:
                for side, tree in (("before", old), ("today", root)):
                    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
                    env["GEPETTO_DATA_DIR"] = str(default_data_dir().resolve())  # the child runs in `tmp`
                    env["PYTHONPATH"] = str(tree / "src")
                    done = subprocess.run([sys.executable, str(child), "--task",
                                           task_name, "--seed", str(seed), "--budget", str(budget), "--metric", metric],
                                          env=env, cwd=tmp, capture_output=True, text=True)
                    if done.returncode:
                        raise SystemExit(f"the {side} run of seed {seed} failed:\n{done.stderr[-3000:]}")
                    run = json.loads(done.stdout.strip().splitlines()[-1])
                    test = asyncio.run(evaluate_async(run["best"], task.testset, task.metric, program=task.program,
                                                      task_lm=scorer, max_concurrency=8)).mean
                    walls[side].append(run["wall"])
                    tests[side].append(test)
                    row = (f"| {seed} | {side} | {run['wall']:.0f} s | {run['cpu']:.0f} s | {run['rollouts']} | "
                           f"{run['proposals']} | {run['reflection_calls']} | {run['seed_val']:.3f} -> "
                           f"{run['best_val']:.3f} | {test:.3f} |")
                    print(row, flush=True)
                    lines.append(row)
        finally:
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(old)], capture_output=True)
    b, t = statistics.mean(walls["before"]), statistics.mean(walls["today"])
    per_seed = ", ".join(f"{y / x:.2f}x" for x, y in zip(walls["before"], walls["today"], strict=True))
    spread = {k: f"{statistics.mean(v):.3f} ± {statistics.stdev(v) if len(v) > 1 else 0.0:.3f}"
              for k, v in tests.items()}
    lines.append(f"\nMean wall time {b:.0f} s before, {t:.0f} s today: **{t / b:.2f}x** (per seed {per_seed}); dev "
                 f"test {spread['before']} before, {spread['today']} today.\n")
    _report("\n".join(lines) + "\n", out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["curve", "agree", "cost", "threads", "_threads", "whole", "product", "draft",
                                     "kept", "where", "lookup", "read", "precision",
                                     "timeline"])
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"],
                    help="read, kept, precision")
    ap.add_argument("--workload", default="clinc", choices=["clinc", "unshared", "write", "long"])
    ap.add_argument("--parallel", nargs="+", type=int, default=[1, 2, 4, 8, 12])
    ap.add_argument("--n", type=int, default=24, help="calls per round (curve) or examples (agree)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--backends", nargs="+", default=["serial", "batched"], choices=["serial", "batched"],
                    help="whole: the backends to run, in turn for each seed")
    ap.add_argument("--metric", default="plain", choices=["plain", "float", "builtin"],
                    help="whole, where, lookup, product, timeline: the metric as a user writes it "
                         "(user_metrics.user_metric), or the task's own")
    ap.add_argument("--ks", nargs="+", type=int, default=[2, 4, 8],
                    help="lookup: the longest drafts to count; read: the tokens read at once")
    ap.add_argument("--before", default="e7ff4ae",
                    help="product: the commit to run as the product before (default: when the issue was filed)")
    ap.add_argument("--keeps", nargs="+", type=int, default=[8, 2], help="kept: the decoder's keep settings")
    ap.add_argument("--flash-attn", nargs="+", default=["auto"], choices=["auto", "on", "off"],
                    help="kept, whole, precision: the decoder's flash attention settings (auto: its default, "
                         "llama.cpp's choice)")
    ap.add_argument("--out", type=Path, default=None, help="append the results to this markdown file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="whole: an option of gepetto.optimize, VALUE read as JSON; the heading says it")
    args = ap.parse_args(argv)
    if args.mode == "curve":
        curve(args.model, args.workload, args.parallel, args.n, args.rounds, args.threads, args.out)
    elif args.mode == "cost":
        cost(args.model, args.threads, args.out)
    elif args.mode == "threads":
        threads(args.model, args.rounds, args.out)
    elif args.mode == "whole":
        from realtrack import _option

        whole(args.task, args.seeds, args.budget, args.backends, args.out, dict(map(_option, args.set)), args.metric,
              args.flash_attn)
    elif args.mode == "product":
        product(args.task, args.seeds, args.budget, args.before, args.out, args.metric)
    elif args.mode == "kept":
        kept(args.models, args.keeps, args.flash_attn, args.rounds, args.out)
    elif args.mode == "timeline":
        timeline(args.task, args.seeds, args.budget, args.out, args.metric)
    elif args.mode == "precision":
        precision(args.models, args.flash_attn, args.n, args.out)
    elif args.mode == "where":
        where(args.task, args.seeds, args.budget, args.out, args.metric)
    elif args.mode == "read":
        read(args.models, args.ks, args.threads, args.out)
    elif args.mode == "lookup":
        lookup(args.task, args.seeds, args.budget, args.ks, args.threads, args.out, args.metric)
    elif args.mode == "draft":
        draft(args.rounds, args.out)
    elif args.mode == "_threads":
        _threads_child(args.model, args.threads)
    else:
        agree(args.n, args.parallel[0] if len(args.parallel) == 1 else 8, args.threads, args.out)


if __name__ == "__main__":
    sys.exit(main())
