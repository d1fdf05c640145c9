"""Wall-time track: both systems against a simulated-latency OpenAI-compatible server, at equal budget.

The server (`gepetto.testing.FakeOpenAIServer`, 127.0.0.1 only) answers every chat request after a fixed
delay, many at once, with the scripted LMs of `sim_rules` behind it (a model name containing "reflection"
gets the reflection LM). Each system talks to it the way its documentation says to use a hosted API:

- gepetto: `OpenAILM(model, base_url=..., max_concurrency=C)` for both roles, `optimize(max_concurrency=C,
  proposals_per_round=P)`.
- gepa: `optimize(task_lm=..., ...)` builds gepa's default adapter over LiteLLM; here it is built explicitly
  as `DefaultAdapter("openai/<model>", evaluator, max_litellm_workers=W, litellm_batch_completion_kwargs=
  {api_base})` (the documented way to set the endpoint), `reflection_lm="openai/<model>"` with
  `reflection_lm_kwargs={api_base}`, and for the parallel variant `sampling_strategy=IndependentSampling(P)`
  (several proposals per iteration, their reflections batched).

The requests are counted on the server, the metric calls by the harness.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.compare import sim_rules
from benchmarks.compare.measure import (
    RESULTS,
    RUN_HEADER,
    RUN_RULE,
    CountingMetric,
    RunRecord,
    checkpoint_rows,
    header,
    load_json,
    plot_curves,
    plot_mean_curves,
    proposal_accounting,
    run_row,
    save_json,
    summary_rows,
    test_score,
)

from gepetto.engine.events import CandidateAdded, Event, Outcome
from gepetto.lm.base import Completion
from gepetto.testing import FakeOpenAIServer
from gepetto.types import Example

TASK_MODEL, REFLECTION_MODEL = "rules-task", "rules-reflection"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--setting", default="noisy", choices=list(sim_rules.SETTINGS))
    ap.add_argument("--n-val", type=int, default=20)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--delay", type=float, default=0.3, help="seconds the server takes per request")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--concurrency", type=int, default=16, help="gepetto max_concurrency; gepa litellm workers")
    ap.add_argument("--proposals", type=int, default=4, help="proposals per round/iteration in the parallel variants")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--name", default="compare_walltime")
    ap.add_argument("--replot", action="store_true", help="only redraw the plots from the saved JSON")


# system label -> (system, parallel proposals?, worker setting: "default" or "max")
CONFIGS: dict[str, tuple[str, bool, str]] = {
    "gepetto": ("gepetto", False, "max"),
    "gepetto (4 proposals/round)": ("gepetto", True, "max"),
    "gepa (defaults)": ("gepa", False, "default"),
    "gepa (16 workers, 4 proposals/iter)": ("gepa", True, "max"),
}


class Server:
    """The latency server with the scripted LMs behind it; counts requests and tokens per role."""

    def __init__(self, world: sim_rules.RulesWorld, seed: int, delay: float) -> None:
        self.task_lm, self.reflection_lm = world.task_lm(seed), world.reflection_lm(seed)
        self.srv = FakeOpenAIServer(self.respond, delay=delay)

    def respond(self, messages: list[dict[str, str]], body: dict[str, Any]) -> str:
        lm = self.reflection_lm if "reflection" in body.get("model", "") else self.task_lm
        out: Completion = lm.respond(messages)
        return out.text

    def counts(self, role: str) -> tuple[int, int, int]:
        reqs = [r for r in self.srv.requests if ("reflection" in r.get("model", "")) == (role == "reflection")]
        tokens_in = sum(sum(len(m.get("content") or "") for m in r.get("messages", [])) // 4 + 1 for r in reqs)
        return len(reqs), tokens_in, 0


def run_gepetto_http(task: Any, url: str, budget: int, seed: int, concurrency: int, proposals: int,
                     metric: CountingMetric) -> tuple[Any, tuple[list[tuple[int, float]], list[float]], float]:
    import openai  # noqa: F401  (imported before the clock starts)

    from gepetto.api import optimize_async
    from gepetto.lm.openai import OpenAILM

    curve: list[tuple[int, float]] = []
    curve_s: list[float] = []
    t0 = time.perf_counter()

    def on_event(event: Event) -> None:
        if isinstance(event, CandidateAdded):
            curve.append((metric.calls, event.best))
            curve_s.append(time.perf_counter() - t0)

    os.environ.setdefault("OPENAI_API_KEY", "not-needed")
    task_lm = OpenAILM(TASK_MODEL, base_url=url, max_concurrency=concurrency)
    reflection_lm = OpenAILM(REFLECTION_MODEL, base_url=url, max_concurrency=concurrency)
    async def main() -> Any:
        try:
            return await optimize_async(
                task.seed_candidate, task.trainset, metric, valset=task.valset, program=task.program,
                task_lm=task_lm, reflection_lm=reflection_lm, budget=budget, seed=seed,
                max_concurrency=concurrency, proposals_per_round=proposals, callbacks=on_event)
        finally:  # OpenAILM has no close(): close its HTTP client inside the loop that opened it
            for lm in (task_lm, reflection_lm):
                client = getattr(lm, "_client", None)
                if client is not None:
                    await client.close()

    t0 = time.perf_counter()
    result = asyncio.run(main())
    return result, (curve, curve_s), time.perf_counter() - t0


def run_gepa_http(task: Any, url: str, budget: int, seed: int, workers: int, proposals: int,
                  metric: CountingMetric) -> tuple[Any, Any, float]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no internet: do not fetch the price list
    import gepa
    import litellm  # noqa: F401  (gepa imports it lazily; import it before the clock starts)
    from benchmarks.compare.gepa_side import QuietLogger, Recorder
    from gepa.adapters.default_adapter.default_adapter import DefaultAdapter, EvaluationResult
    from gepa.strategies.proposal_sampling import IndependentSampling

    by_id = {e.id: e for e in [*task.trainset, *task.valset]}

    def evaluator(data: dict[str, Any], response: str) -> EvaluationResult:
        score = metric(by_id[data["id"]], response, [])
        return EvaluationResult(score=score.value, feedback=score.feedback)

    def as_inst(e: Example) -> dict[str, Any]:
        return {"input": e.inputs["ticket"], "additional_context": {}, "answer": e.gold, "id": e.id}

    creds = {"api_base": url, "api_key": "not-needed"}
    adapter = DefaultAdapter(f"openai/{TASK_MODEL}", evaluator=evaluator, max_litellm_workers=workers,
                             litellm_batch_completion_kwargs=creds)
    recorder = Recorder(metric)
    extra: dict[str, Any] = {"sampling_strategy": IndependentSampling(proposals)} if proposals > 1 else {}
    t0 = recorder.t0 = time.perf_counter()
    result = gepa.optimize(
        seed_candidate=dict(task.seed_candidate), trainset=[as_inst(e) for e in task.trainset],
        valset=[as_inst(e) for e in task.valset], adapter=adapter, reflection_lm=f"openai/{REFLECTION_MODEL}",
        reflection_lm_kwargs=creds, max_metric_calls=budget, seed=seed, callbacks=[recorder], logger=QuietLogger(),
        **extra)
    return result, recorder, time.perf_counter() - t0


def one_run(label: str, world: sim_rules.RulesWorld, task: Any, args: argparse.Namespace, seed: int) -> RunRecord:
    system, parallel, workers = CONFIGS[label]
    proposals = args.proposals if parallel else 1
    server = Server(world, seed, args.delay)
    metric = CountingMetric(task.metric)
    with server.srv:
        url = server.srv.url
        if system == "gepetto":
            result, (curve, curve_s), wall = run_gepetto_http(task, url, args.budget, seed, args.concurrency,
                                                               proposals, metric)
            own, best, seed_val = result.rollouts_used, result.best_candidate.to_dict(), result.seed_score
            checks = result.metric_checks
            best_val, n_cands = result.best_score, len(result.candidates)
            p = result.proposals
            proposals_d = proposal_accounting(
                server.reflection_lm.log, [], rejected_minibatch=p.get(Outcome.NOT_BETTER, 0),
                accepted=p.get(Outcome.ACCEPTED, 0), merges_accepted=p.get(Outcome.MERGE_ACCEPTED, 0))
        else:
            n_workers = args.concurrency if workers == "max" else 10  # DefaultAdapter's default
            result, rec, wall = run_gepa_http(task, url, args.budget, seed, n_workers, proposals, metric)
            curve, curve_s, own, checks = rec.curve, rec.curve_s, int(result.total_metric_calls or 0), 0
            scores = list(result.val_aggregate_scores)
            best, best_val, seed_val, n_cands = dict(result.best_candidate), scores[result.best_idx], scores[0], \
                len(result.candidates)
            proposals_d = proposal_accounting(server.reflection_lm.log, [True] * len(server.reflection_lm.log),
                                              rejected_minibatch=rec.rejected, accepted=rec.accepted)
        task_counts, refl_counts = server.counts("task"), server.counts("reflection")
        max_in_flight = server.srv.max_in_flight
    counted = metric.calls
    test = test_score(task, best, world.task_lm(seed))
    record = RunRecord(label, task.name, seed, args.budget, test, best_val, seed_val, own, counted, wall,
                       task_counts[0], task_counts[1:], refl_counts[0], refl_counts[1:], curve, n_cands,
                       proposals_d, best, note=f"most requests in flight: {max_in_flight}", curve_s=curve_s,
                       metric_checks=checks)
    print(f"  {label:38s} seed {seed}: wall {wall:6.1f}s rollouts {own}/{counted} val {best_val:.3f} "
          f"test {test:.3f} in flight {max_in_flight}", flush=True)
    return record


def walltime_track(args: argparse.Namespace, argv: Sequence[str]) -> None:

    if args.replot:
        walltime_plots(load_json(RESULTS / f"{args.name}.json"), RESULTS, args.name)
        return
    base = sim_rules.SETTINGS[args.setting]
    world = sim_rules.RulesWorld(dataclasses.replace(base, n_val=args.n_val))
    task = world.task()
    records = []
    for seed in args.seeds:
        for label in args.configs:
            records.append(one_run(label, world, task, args, seed))
    lines = header("Wall time against a simulated-latency API: gepetto vs gepa (issue 13)", argv)
    lines += [
        f"Task: the simulated `{args.setting}` hidden-rules setting ({base.note}), splits "
        f"{base.n_train}/{args.n_val}/{base.n_test}; budget {args.budget} rollouts; server delay {args.delay}s per "
        f"request, unlimited parallel capacity, loopback only. gepetto: `max_concurrency={args.concurrency}`; gepa: "
        f"default adapter over LiteLLM with `max_litellm_workers` 10 (its default) or {args.concurrency}; "
        f"the parallel variants try {args.proposals} proposals at once. Task and reflection calls are counted on "
        "the server (tokens: prompt characters / 4).", "",
        *summary_rows(records, times=True), "", "Best validation score after N seconds (equal wall time):", "",
        *checkpoint_rows(records, [5, 10, 15, 20, 30], seconds=True), "", "<details><summary>Every run</summary>", "",
        RUN_HEADER, RUN_RULE, *(run_row(r) for r in records), "", "</details>", ""]
    png, mean_png = walltime_plots(records, RESULTS, args.name)
    lines += ["## Plots", "", "Best validation score against rollouts, one line per system and seed:", "",
              f"![best validation score against rollouts]({png.name})", "",
              "Mean over seeds (shaded: range) against rollouts and against wall time:", "",
              f"![mean best validation score against rollouts and seconds]({mean_png.name})", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    save_json(records, {"track": "walltime", "argv": list(argv)}, RESULTS / f"{args.name}.json")
    print(f"wrote {RESULTS / (args.name + '.md')}")


def walltime_plots(records: Sequence[RunRecord], results: Path, name: str) -> tuple[Path, Path]:
    png, mean_png = results / f"{name}.png", results / f"{name}_mean.png"
    plot_curves([("wall-time track: best validation score against rollouts", records, {})], png,
                legend_outside=True)
    plot_mean_curves([("against rollouts", records, {}), ("against wall time", records, {})], mean_png,
                     seconds=[False, True])
    return png, mean_png
