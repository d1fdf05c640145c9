"""dspy.GEPA beside gepetto on the DSPy form of `hwu-routed` (issue 61): the same two-step DSPy program, metric,
models, data, seed and budget, optimised once by DSPy's own `dspy.GEPA` (on the gepa package) and once by
`gepetto.integrations.dspy.GEPA` (the same call on gepetto's engine).

The program (`gepetto.tasks.routed`'s, as DSPy modules): `router` (message -> area; instructions: the seed's router
text) names one of 5 areas, then `intent` (message, intents -> intent; instructions: the seed's intent text) picks
the intent among that area's intents (all 16 when the router names no area). The metric is `routed_metric`'s
score and feedback sentences, in dspy.GEPA's five-argument form (the same feedback whichever predictor is asked).
Both optimisers get the same `dspy.GEPA(...)` arguments: `max_metric_calls=BUDGET`, `reflection_lm`, `seed`,
`num_threads`, `track_stats=True` (gepetto's also `storage=`/`run=`, so its run can be resumed).

Models: the task LM is Qwen2.5-Coder 0.5B and the reflection LM Qwen2.5-Coder 1.5B, the GGUF files of gepetto's
embedded backend, each behind its own llama-cpp-python OpenAI-compatible server on loopback (`python -m
gepetto.lm.cpu serve --config_file ...`: `python -m llama_cpp.server` with llama.cpp's CPU fast paths only where
they run; 2 llama.cpp threads, n_ctx 4096 and 8192, seed 0). Both stay loaded; only one computes at a time, since
both optimisers wait for a reflection before the next rollouts. (`--servers 1` lists both models in one server,
which swaps them: ~40 s to load the 1.5B and ~10 s back each iteration, measured here.) DSPy calls them as
`dspy.LM("openai/<alias>", api_base=..., temperature=0, cache=False, engine="litellm")` through the
`PlainAdapter` of examples/dspy_program.py (system message = the instructions, inputs as `name: value` lines, the
first line of the answer is the output field), which small models need. Task answers are cut at 8 tokens (router)
and 16 (intent), as gepetto's `routed_program`; reflection answers at 1024.

Measured, per run: the optimised program's instructions, the validation score of the seed and of the best as the
optimiser reports it (`detailed_results.val_aggregate_scores`), metric calls (rollouts) used, wall seconds of
`compile`, and the best program's score on hwu-routed's dev test (120 examples) with the same metric. With
`--locked` (once, when the issue closes), also the locked test (240): `locked_test` and `first_look: true`. One
JSON row per run is appended to `--log`. gepetto's run is stored (`--storage`, run `dspy-side-hwu-routed-sSEED`):
the same command again resumes it (replays its rollouts; a larger `--budget` goes on), and then `seconds` is that
session's only; a fresh run needs another `--run` or `--storage`. Both systems pay the reflection server's first
call once (~35 s here: the 1.5B's first answer after loading).

Commands (from the repository root; one run at a time, each starts and stops its own servers):

    python benchmarks/dspy_side.py --system dspy --seed 0 --budget 300
    python benchmarks/dspy_side.py --system gepetto --seed 0 --budget 300 --storage benchmarks/results/dspy_side.sqlite

Smoke test (tiny sizes, a scratch log):

    python benchmarks/dspy_side.py --system dspy --seed 0 --budget 16 --n-train 4 --n-val 4 --n-test 4 \\
        --log /tmp/dspy_side_smoke.jsonl
    python benchmarks/dspy_side.py --system gepetto --seed 0 --budget 16 --n-train 4 --n-val 4 --n-test 4 \\
        --log /tmp/dspy_side_smoke.jsonl --storage /tmp/dspy_side_smoke.sqlite
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # DSPy's LiteLLM: no price list fetched
import dspy

from gepetto.program import TraceEntry
from gepetto.tasks.hwu64 import labels
from gepetto.tasks.intents import normalize_label
from gepetto.tasks.routed import ROUTED, load, routed_metric, routed_seed
from gepetto.types import Example

ROOT = Path(__file__).resolve().parents[1]
TASK_LM, REFLECTION_LM = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"  # gepetto.lm.local's names, the server's aliases
ROUTER_TOKENS, INTENT_TOKENS, REFLECTION_TOKENS = 8, 16, 1024
ALL_INTENTS = [i for a in ROUTED for i in labels(a)]

_spec = importlib.util.spec_from_file_location("dspy_program", ROOT / "examples" / "dspy_program.py")
_example = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_example)  # type: ignore[union-attr]
PlainAdapter = _example.PlainAdapter


# ---- the program and the metric -----------------------------------------------------------------------------

class Routed(dspy.Module):
    """`routed_program` as DSPy modules: the router names an area, the intent step chooses among its intents."""

    def __init__(self) -> None:
        super().__init__()
        seed = routed_seed()
        self.router = dspy.Predict(dspy.Signature("message -> area", seed["router"]), max_tokens=ROUTER_TOKENS)
        self.intent = dspy.Predict(dspy.Signature("message, intents -> intent", seed["intent"]),
                                   max_tokens=INTENT_TOKENS)

    def forward(self, message: str) -> dspy.Prediction:
        said = self.router(message=message).area
        area = normalize_label(said)
        intents = labels(area) if area in ROUTED else ALL_INTENTS
        return dspy.Prediction(area=said, intent=self.intent(message=message, intents=", ".join(intents)).intent)


def metric(gold: dspy.Example, pred: dspy.Prediction, trace: Any = None, pred_name: str | None = None,
           pred_trace: Any = None) -> dspy.Prediction:
    """`routed_metric`, as dspy.GEPA's metric: its score and feedback (which step went wrong), the router's answer
    given to it as the trace entry `routed_program` would have recorded. The same feedback for either predictor."""
    example = Example({"message": gold.message}, gold=gold.intent)
    fields = pred if isinstance(pred, dspy.Prediction) else {}  # (a failed prediction: no answer)
    said, output = str(fields.get("area") or ""), fields.get("intent")
    score = routed_metric(example, output, [TraceEntry("router", gold.message, said)])
    return dspy.Prediction(score=score.value, feedback=score.feedback)


def as_dspy(examples: Sequence[Example]) -> list[dspy.Example]:
    return [dspy.Example(message=e.inputs["message"], intent=e.gold).with_inputs("message") for e in examples]


def evaluate(program: dspy.Module, examples: Sequence[dspy.Example]) -> float:
    """The mean metric score of `program` on `examples` (a program that raises scores 0 on that example)."""
    scores = []
    for ex in examples:
        try:
            pred = program(**ex.inputs())
        except Exception as exc:  # what dspy.GEPA counts as a failure, scored 0
            logging.getLogger(__name__).warning("the program failed on %r: %s", ex.message, exc)
            scores.append(0.0)
            continue
        scores.append(float(metric(ex, pred).score))
    return sum(scores) / len(scores) if scores else 0.0


# ---- the server --------------------------------------------------------------------------------------------

def model_settings(threads: int) -> list[dict[str, Any]]:
    """The two models as entries of llama-cpp-python's --config_file."""
    from gepetto.lm.local import model_path

    common = {"n_threads": threads, "n_threads_batch": threads, "seed": 0, "verbose": True}
    return [
        # the task model's RAM prompt cache keeps the router's and the intent step's prompt states. Its size counts
        # llama.cpp's state only, while each entry also copies the logits buffer (n_batch x vocab floats, ~300 MB
        # for Qwen's 152k vocab): at the default 2 GiB the 0.5B's server grew to 20 GB and was OOM-killed. 8 MiB
        # keeps about ten entries (~3 GB)
        {"model": str(model_path(TASK_LM)), "model_alias": TASK_LM, "n_ctx": 4096, "cache": True,
         "cache_size": 8 << 20, **common},
        {"model": str(model_path(REFLECTION_LM)), "model_alias": REFLECTION_LM, "n_ctx": 8192, **common},
    ]


@contextlib.contextmanager
def _server(models: list[dict[str, Any]], log_path: Path, timeout: float = 300) -> Iterator[str]:
    """One llama-cpp-python server with `models` (its --config_file) on a free loopback port
    (examples/dspy_program.py `llama_server`): yields the base URL and stops the server on exit."""
    config_path = log_path.with_suffix(".server.json")

    def args(port: int) -> list[str]:
        config_path.write_text(json.dumps({"host": "127.0.0.1", "port": port, "models": models}, indent=1))
        # --model names the file gepetto.lm.cpu's probe decides on; the server itself reads --config_file
        return ["--model", models[0]["model"], "--config_file", str(config_path)]

    with _example.llama_server(args, log_path, timeout=timeout) as url:
        yield url


@contextlib.contextmanager
def serve(log_path: Path, threads: int, servers: int) -> Iterator[dict[str, str]]:
    """The two models on loopback: yields {alias: base URL}. `servers=2`: one server per model, each kept loaded
    (only one computes at a time: both optimisers wait for the reflection before the next rollouts); `servers=1`:
    one server with both models, which loads the one asked for in place of the other (measured here: ~40 s to
    swap in the 1.5B, ~10 s back, twice per iteration)."""
    models = model_settings(threads)
    with contextlib.ExitStack() as stack:
        if servers == 1:
            url = stack.enter_context(_server(models, log_path))
            yield {m["model_alias"]: url for m in models}
        else:
            yield {m["model_alias"]: stack.enter_context(_server([m], log_path.with_suffix(f".{m['model_alias']}.log")))
                   for m in models}


def lm(url: str, alias: str, max_tokens: int) -> dspy.LM:
    """A DSPy LM on the server. engine="litellm": DSPy 3.4's default engine sends `max_completion_tokens`, which
    llama-cpp-python's server ignores. A long timeout: a 1024-token reflection on a busy 2-core machine takes
    minutes, and a retry after a client timeout would queue the same request again behind the first."""
    return dspy.LM(f"openai/{alias}", api_base=url, api_key="local", temperature=0.0, max_tokens=max_tokens,
                   cache=False, engine="litellm", timeout=3600)


# ---- one run -----------------------------------------------------------------------------------------------

def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()


def run_name(args: argparse.Namespace) -> str:
    sizes = (args.n_train, args.n_val) != (40, 40)
    return args.run or (f"dspy-side-hwu-routed-s{args.seed}" + (f"-n{args.n_train}-{args.n_val}" if sizes else ""))


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    task = load(seed=0, n_train=args.n_train, n_val=args.n_val, n_test=args.n_test)
    train, val, dev = as_dspy(task.trainset), as_dspy(task.valset), as_dspy(task.testset)
    locked = (as_dspy(load(seed=0, n_train=args.n_train, n_val=args.n_val, n_locked=args.n_locked,
                           test_split="locked").testset) if args.locked else [])
    server_log = Path(args.server_log or Path(tempfile.gettempdir()) / f"dspy_side-{args.system}-s{args.seed}.log")
    print(f"[dspy-side] {args.system} seed {args.seed} budget {args.budget}: train {len(train)}, val {len(val)}, "
          f"dev test {len(dev)}" + (f", locked test {len(locked)}" if locked else "") + f"; server log {server_log}",
          flush=True)
    program = Routed()
    with serve(server_log, args.threads, args.servers) as urls:
        task_lm = lm(urls[TASK_LM], TASK_LM, INTENT_TOKENS)
        reflection_lm = lm(urls[REFLECTION_LM], REFLECTION_LM, REFLECTION_TOKENS)
        common: dict[str, Any] = {"metric": metric, "max_metric_calls": args.budget, "reflection_lm": reflection_lm,
                                  "seed": args.seed, "num_threads": args.num_threads, "track_stats": True}
        extra: dict[str, Any] = {}
        if args.system == "dspy":
            optimizer: Any = dspy.GEPA(**common, log_dir=args.dspy_log_dir)
        else:
            from gepetto.integrations.dspy import GEPA

            optimizer = GEPA(**common, storage=args.storage, run=run_name(args))
        with dspy.context(lm=task_lm, adapter=PlainAdapter()):
            t0 = time.perf_counter()
            optimized = optimizer.compile(program, trainset=train, valset=val)
            seconds = time.perf_counter() - t0
            details = optimized.detailed_results
            scores = list(details.val_aggregate_scores)
            if args.system == "gepetto":
                result = optimizer.result
                extra = {"run": optimizer.run, "storage": str(args.storage), "stop_reason": str(result.stop_reason),
                         "candidates": len(result.candidates)}
            else:
                extra = {"candidates": len(scores)}
            best = {name: pred.signature.instructions for name, pred in optimized.named_predictors()}
            print(f"[dspy-side] {args.system}: validation {scores[0]:.3f} (seed) -> {scores[details.best_idx]:.3f} "
                  f"(best, candidate {details.best_idx}); {details.total_metric_calls} metric calls; {seconds:.0f} s",
                  flush=True)
            t1 = time.perf_counter()
            dev_test = evaluate(optimized, dev)
            test_seconds = time.perf_counter() - t1
            print(f"[dspy-side] {args.system}: dev test {dev_test:.3f} ({len(dev)} examples, {test_seconds:.0f} s)",
                  flush=True)
            locked_test = evaluate(optimized, locked) if locked else None
    row: dict[str, Any] = {
        "kind": "dspy-side", "system": args.system, "task": "hwu-routed", "seed": args.seed, "budget": args.budget,
        "seed_val": scores[0], "best_val": scores[details.best_idx], "metric_calls": details.total_metric_calls,
        "seconds": round(seconds, 1), "dev_test": dev_test, "best": best,
        "n_train": len(train), "n_val": len(val), "n_test": len(dev), "test_seconds": round(test_seconds, 1),
        "task_lm": TASK_LM, "reflection_lm": REFLECTION_LM, "threads": args.threads, "num_threads": args.num_threads,
        "servers": args.servers,
        **extra,
    }
    if locked:
        row.update(locked_test=locked_test, n_locked=len(locked), first_look=True)
        print(f"[dspy-side] {args.system}: locked test {locked_test:.3f} ({len(locked)} examples)", flush=True)
    row.update(command=shlex.join(["python", "benchmarks/dspy_side.py", *argv]),
               date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"), commit=_commit(), machine="2 cores")
    return row


def main(argv: Sequence[str] | None = None) -> None:
    """`argv`: the arguments after the script's name (default: the command line's)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=("dspy", "gepetto"), required=True, help="dspy.GEPA or gepetto's GEPA")
    ap.add_argument("--seed", type=int, default=0, help="the optimiser's seed (the data splits are fixed)")
    ap.add_argument("--budget", type=int, default=300, help="max_metric_calls")
    ap.add_argument("--log", default=str(ROOT / "benchmarks" / "results" / "dspy_side.jsonl"),
                    help="the .jsonl file a row is appended to")
    ap.add_argument("--storage", default=str(ROOT / "benchmarks" / "results" / "dspy_side.sqlite"),
                    help="gepetto's run store (gepetto only; *.sqlite is git-ignored)")
    ap.add_argument("--run", default=None, help="gepetto's run name (default: dspy-side-hwu-routed-sSEED)")
    ap.add_argument("--dspy-log-dir", default=None, help="dspy.GEPA's log_dir, to resume it (dspy only)")
    ap.add_argument("--locked", action="store_true", help="also score the best on the locked test (once)")
    ap.add_argument("--n-train", type=int, default=40)
    ap.add_argument("--n-val", type=int, default=40)
    ap.add_argument("--n-test", type=int, default=120)
    ap.add_argument("--n-locked", type=int, default=240)
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads of the server")
    ap.add_argument("--num-threads", type=int, default=1,
                    help="dspy.GEPA's num_threads for both (the server answers one request at a time)")
    ap.add_argument("--servers", type=int, choices=(1, 2), default=2,
                    help="2: a server per model (default); 1: one server that swaps the models")
    ap.add_argument("--server-log", default=None,
                    help="the servers' log (default: in the temp folder; with 2 servers, one file per model)")
    args = ap.parse_args(argv)
    # task answers are cut at 8 or 16 tokens on purpose (PlainAdapter takes the first line): no warning for each
    logging.getLogger("dspy.clients.lm").setLevel(logging.ERROR)
    row = run(args, argv)
    Path(args.log).parent.mkdir(parents=True, exist_ok=True)
    with open(args.log, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(f"[dspy-side] row appended to {args.log}")


if __name__ == "__main__":
    main()
