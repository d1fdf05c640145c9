"""Head to head: gepetto vs the reference `gepa` on the same task, LMs, splits, budget and seeds.

    python benchmarks/compare/run.py sim       [--settings easy noisy multi tight] [--seeds 0 1 2 3 4]
    python benchmarks/compare/run.py real      --task demo [--budget 200] [--seeds 0 1]
    python benchmarks/compare/run.py walltime  [--budget 300] [--delay 0.3] [--seeds 0 1 2]

Each writes a markdown file and a PNG plot (best validation score against rollouts, one line per system and
seed) to benchmarks/results/, plus the raw numbers as JSON. Needs `gepa` and `matplotlib`
(benchmarks/compare/requirements.txt); run it from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.compare import sim_rules  # noqa: E402
from benchmarks.compare.measure import (  # noqa: E402
    RESULTS,
    RUN_HEADER,
    RUN_RULE,
    RunRecord,
    checkpoint_rows,
    constant_baseline,
    header,
    paired,
    plot_curves,
    plot_mean_curves,
    reach_rows,
    rollouts_to_fraction,
    run_gepetto,
    run_row,
    save_json,
    summary_rows,
    test_score,
)

from gepetto.lm.base import LM  # noqa: E402
from gepetto.program import Task  # noqa: E402
from gepetto.types import Candidate  # noqa: E402

SYSTEMS = ("gepetto", "gepa", "gepa+merge")
# gepetto with other settings than its defaults (not run unless named in --systems)
GEPETTO_VARIANTS: dict[str, dict[str, Any]] = {
    "gepetto-1try": {"reflection_attempts": 1},  # no retry after a rejected reflection answer
    "gepetto-nomerge": {"merge": "off"},
    # every reflection attempt sampled at temperature 1, rules too (the default since 2026-11-26 for rewrites,
    # whose greedy first answer copied the demo's seed back on 10 of 10 minibatches: benchmarks/reflection_probe.py)
    "gepetto-t1": {"reflection_temperatures": (1.0,)},
    "gepetto-edit": {"proposer": "edit"},  # one-rule edits (issue 10) instead of whole-text rewrites
    # few-shot demonstrations beside the rewrites (engine/demos.py), on by default since 2026-11-26 (before, off:
    # "gepetto-nofewshot"); the share learnt from the tests by default since 2026-11-26 (FewShot(adaptive=True));
    # "-fixed" is the fixed share, as "gepetto-fewshot" was before
    "gepetto-nofewshot": {"fewshot": 0},
    "gepetto-fewshot": {"fewshot": 4},
    "gepetto-fewshot-adaptive": {"fewshot": "fewshot(k=4, adaptive=true)"},
    "gepetto-fewshot-fixed": {"fewshot": "fewshot(k=4, adaptive=false)"},
    "gepetto-edit-fewshot": {"proposer": "edit", "fewshot": 4},
    # a parent whose minibatch has solved examples runs up to 3 more and reflects on its mistakes in their place
    "gepetto-seek": {"seek_failures": 3},
    "gepetto-nofewshot-seek": {"fewshot": 0, "seek_failures": 3},
    # a length budget: rewrites whose instruction (demonstrations apart) is over 250 characters are refused
    "gepetto-len250": {"max_component_chars": 250},
    "gepetto-racing": {"validation": "racing"},  # racing validation (engine/racing.py): cut children proved out early
    # racing that also cuts on a one-sided sign test at 95% confidence (not exact; random validation order)
    "gepetto-racing-sign": {"validation": "racing(confidence=0.95)"},
    # the search's own defaults against the alternatives: greedier parents, larger minibatches
    "gepetto-current-best": {"parent_selector": "current-best"},
    "gepetto-epsilon-greedy": {"parent_selector": "epsilon-greedy"},
    "gepetto-minibatch4": {"minibatch_size": 4},
    "gepetto-minibatch5": {"minibatch_size": 5},
    "gepetto-merges5": {"merge": "merge(max=5)"},  # the merge cap before 2026-11-26 night (gepa's)
    "gepetto-adaptive-merge": {"merge": "merge(adaptive=true)"},  # how often to merge, learnt from the run's merges
    # noise-aware acceptance: a tie (within the tolerance) is tested again on fresh examples
    "gepetto-paired": {"accept": "paired"},
    "gepetto-paired-0.34": {"accept": "paired(tolerance=0.34)"},  # one example in three is a tie
    # the issue-15 features on top of the real track's best configuration (edit + few-shot), one at a time
    "gepetto-edit-fewshot-racing": {"proposer": "edit", "fewshot": 4, "validation": "racing"},
    "gepetto-edit-fewshot-adaptive-merge": {"proposer": "edit", "fewshot": 4, "merge": "merge(adaptive=true)"},
    "gepetto-edit-fewshot-paired": {"proposer": "edit", "fewshot": 4, "accept": "paired"},
}
ALL_SYSTEMS = (*SYSTEMS, *GEPETTO_VARIANTS)


def run_system(system: str, task: Task, task_lm: LM, reflection_lm: LM, *, budget: int, seed: int,
               test_lm: LM | None = None, gepa_options: dict[str, Any] | None = None,
               gepetto_options: dict[str, Any] | None = None, events: Path | None = None,
               held_out_curve: bool = False) -> RunRecord:
    if system == "gepetto" or system in GEPETTO_VARIANTS:
        options = {**(gepetto_options or {}), **GEPETTO_VARIANTS.get(system, {})}
        return run_gepetto(task, task_lm, reflection_lm, budget=budget, seed=seed, test_lm=test_lm,
                           system=system, events=events, held_out_curve=held_out_curve, **options)
    if system in ("gepa", "gepa+merge"):
        from benchmarks.compare.gepa_side import run_gepa

        return run_gepa(task, task_lm, reflection_lm, budget=budget, seed=seed, system=system,
                        use_merge=system == "gepa+merge", test_lm=test_lm, held_out_curve=held_out_curve,
                        **(gepa_options or {}))
    raise ValueError(f"unknown system {system!r}; systems: {', '.join(ALL_SYSTEMS)}")


def variant_rows(records: Sequence[RunRecord], base: str, other: str) -> list[str]:
    """gepetto against one of its variants, seed by seed: validation and test score, rollouts used, rollouts
    spent when the best validation score first reached its final value, and validations raced out."""
    by = {(r.system, r.seed): r for r in records}
    seeds = sorted({r.seed for r in records if (base, r.seed) in by and (other, r.seed) in by})
    rows = [f"Paired by seed, {base} / {other}:", "",
            "| seed | validation | test | rollouts used | rollouts to final validation score | raced out | validation "
            "rollouts saved |", "|---:|---|---|---|---|---:|---:|"]
    for s in seeds:
        a, b = by[(base, s)], by[(other, s)]
        rows.append(f"| {s} | {a.best_val:.3f} / {b.best_val:.3f} | {a.test_score:.3f} / {b.test_score:.3f} | "
                    f"{a.rollouts_counted} / {b.rollouts_counted} | {rollouts_to_fraction(a.curve, 1.0)} / "
                    f"{rollouts_to_fraction(b.curve, 1.0)} | {b.proposals.get('raced_out', 0)} | "
                    f"{b.proposals.get('racing_saved', 0)} |")
    return rows


def log(record: RunRecord) -> None:
    print(f"  {record.system:11s} seed {record.seed}: test {record.test_score:.3f} val {record.best_val:.3f} "
          f"rollouts {record.rollouts_own}/{record.rollouts_counted} wall {record.wall_s:.2f}s", flush=True)


# ---- simulated track ------------------------------------------------------------------------------

def sim_track(args: argparse.Namespace, argv: Sequence[str]) -> None:
    lines = header("Head to head on the simulated hidden-rules tasks (issue 13)", argv)
    lines += SIM_INTRO
    panels = []
    everything: list[RunRecord] = []
    refs_all: dict[str, dict[str, float]] = {}
    for name in args.settings:
        w = sim_rules.world(name)
        s = w.setting
        task = w.task()
        budget = args.budget or s.budget
        lm0 = w.task_lm(0)
        refs = {
            "optimum (all rules)": test_score(task, w.oracle(), lm0),
            "seed": test_score(task, task.seed_candidate, lm0),
            "constant answer": constant_baseline(task)[1],
        }
        if s.max_rules < -(-s.topics // s.components):
            refs["best within the length limit"] = test_score(task, w.reachable_oracle(), lm0)
        print(f"setting {name}: budget {budget}; " + ", ".join(f"{k} {v:.3f}" for k, v in refs.items()), flush=True)
        records = []
        for seed in args.seeds:
            for system in args.systems:
                rec = run_system(system, task, w.task_lm(seed), w.reflection_lm(seed), budget=budget, seed=seed,
                                 test_lm=w.task_lm(seed), held_out_curve=True)
                log(rec)
                records.append(rec)
        everything += records
        refs_all[name] = refs
        panels.append((f"{name}: {s.topics} topics, {s.components} component(s), budget {budget}", records, refs))
        optimum = refs["optimum (all rules)"]
        lines += [f"## Setting `{name}`: {s.note}", "",
                  f"Splits {s.n_train}/{s.n_val}/{s.n_test} (train/val/test), budget {budget} rollouts, seeds "
                  f"{', '.join(map(str, args.seeds))}.", "",
                  "| reference (test) | score |", "|---|---:|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in refs.items()]
        marks = sorted({budget // 10, budget // 4, budget // 2, budget})
        lines += ["", *summary_rows(records, optimum), "", "Best validation score after N rollouts (equal spend):", "",
                  *checkpoint_rows(records, marks), ""]
        if reached := reach_rows(records):
            lines += [*reached, ""]
        if reached := reach_rows(records, held_out=True):
            lines += ["The same on held-out examples (here test scores cost nothing): the task LM's slips depend on "
                      "the instruction's exact text, so a validation score can still rise by rewording alone; the "
                      "test score of what the run would return shows when it had found what generalises.", "",
                      *reached, ""]
        for other in [x for x in args.systems if x != "gepetto"] if "gepetto" in args.systems else []:
            for key, label in (("test_score", "test score"), ("best_val", "best validation score")):
                win, loss, tie = paired(records, "gepetto", other, key)
                lines.append(f"- {label}, paired by seed, gepetto vs {other}: gepetto higher in {win}, {other} "
                             f"higher in {loss}, tied in {tie}.")
            if other in GEPETTO_VARIANTS:
                lines += ["", *variant_rows(records, "gepetto", other)]
        lines += ["", "<details><summary>Every run</summary>", "",
                  RUN_HEADER, RUN_RULE, *(run_row(r) for r in records), "", "</details>", ""]
    png, mean_png = RESULTS / f"{args.name}.png", RESULTS / f"{args.name}_mean.png"
    plot_curves(panels, png)
    plot_mean_curves(panels, mean_png)
    lines += ["## Plots", "", "Best validation score against rollouts, one line per system and seed (the vertical "
              "line is the budget):", "", f"![best validation score against rollouts]({png.name})", "",
              "The same, averaged over seeds (shaded: range over seeds):", "",
              f"![mean best validation score against rollouts]({mean_png.name})", ""]
    out = RESULTS / f"{args.name}.md"
    out.write_text("\n".join(lines) + "\n")
    save_json(everything, {"track": "sim", "argv": list(argv), "references": refs_all},
              RESULTS / f"{args.name}.json")
    print(f"wrote {out}, {png}")


SIM_INTRO = [
    "**The task family.** Support tickets, each about one topic (Zipf-distributed frequencies); the answer is the",
    "topic's routing code, which nobody can guess. The scripted task LM answers with a code only when its",
    "instruction states that topic's rule; the metric's feedback on a wrong answer states the rule. The",
    "scripted reflection LM copies rules from the feedback into the instruction, imperfectly (a few per edit,",
    "sometimes drops one, a length limit, a share of useless answers: empty, chat reply, unchanged, echo of a",
    "ticket). Both systems get the very same LM objects: gepetto as `LM` objects, gepa through a `GEPAAdapter`",
    "(task LM, same program and metric) and its `reflection_lm` callable. Source: `benchmarks/compare/`.",
    "",
    "**Columns.** *test*: mean score of the returned candidate on the test split. *gap to optimum*: optimum",
    "test score minus that. *rollouts counted*: metric calls counted by the harness during optimisation (each",
    "system's own count is in the per-run table, as own / counted). *to 95%*: rollouts spent when the best",
    "validation score first reached 95% of the run's final best. *useless answers paid*: reflection answers",
    "that were empty, unchanged, an echo or a chat reply (ground truth from the scripted LM) and still got",
    "evaluated on a minibatch. Means ± standard deviation over seeds. gepetto runs with its defaults",
    "(merge on, minibatch 3); gepa with `optimize` defaults (merge off) and with `use_merge=True`.",
    "",
]


# ---- real track -----------------------------------------------------------------------------------

def expert_candidate(task: Task, task_name: str) -> Candidate | None:
    """A hand-written expert prompt if the task provides one (Task.expert_candidate, Task.metadata["expert"]
    or a module EXPERT*)."""
    import importlib

    if task.expert_candidate is not None:
        return task.expert_candidate
    meta = getattr(task, "metadata", None)
    found: Any = meta.get("expert") if isinstance(meta, dict) else None
    if found is None:
        from gepetto.tasks import TASKS

        module = importlib.import_module(TASKS[task_name])
        for attr in ("EXPERT_CANDIDATE", "EXPERT_INSTRUCTION", "EXPERT_PROMPT", "EXPERT"):
            found = getattr(module, attr, None)
            if found is not None:
                break
    if found is None:
        return None
    if isinstance(found, str):
        return Candidate({next(iter(task.seed_candidate)): found})
    return Candidate(dict(found))


def real_track(args: argparse.Namespace, argv: Sequence[str]) -> None:
    from gepetto.lm.names import make_lm
    from gepetto.tasks import load_task

    options: dict[str, Any] = {"seed": args.data_seed}
    if args.data_dir:
        options["data_dir"] = args.data_dir
    for key in ("n_train", "n_val", "n_test"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    task = load_task(args.task, **options)
    task_lm, reflection_lm = make_lm(args.task_lm), make_lm(args.reflection_lm)
    refs = {"seed": test_score(task, task.seed_candidate, task_lm, max_concurrency=args.concurrency),
            "constant answer": constant_baseline(task)[1]}
    expert = expert_candidate(task, args.task)
    if expert is not None:
        refs["expert prompt"] = test_score(task, expert, task_lm, max_concurrency=args.concurrency)
    print(", ".join(f"{k} {v:.3f}" for k, v in refs.items()), flush=True)
    records = []
    for seed in args.seeds:
        for system in args.systems:
            rec = run_system(system, task, task_lm, reflection_lm, budget=args.budget, seed=seed,
                             gepetto_options={"max_concurrency": args.concurrency},
                             gepa_options={"reflection_params": {"temperature": 0.0, "max_tokens": 1000}},
                             events=Path(args.events) if args.events else None)
            log(rec)
            records.append(rec)
    lines = header(f"Head to head on the real track: `{args.task}` with the embedded models (issue 13)", argv)
    lines += [f"Task LM `{args.task_lm}`, reflection LM `{args.reflection_lm}`; splits {len(task.trainset)}/"
              f"{len(task.valset)}/{len(task.testset)}; budget {args.budget}; seeds {', '.join(map(str, args.seeds))}.",
              "", "| reference (test) | score |", "|---|---:|", *(f"| {k} | {v:.3f} |" for k, v in refs.items()),
              "", *summary_rows(records), "", RUN_HEADER, RUN_RULE, *(run_row(r) for r in records), ""]
    png = RESULTS / f"{args.name}.png"
    plot_curves([(f"{args.task}: best validation score", records, refs)], png)
    lines += [f"![best validation score against rollouts]({png.name})", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    save_json(records, {"track": "real", "argv": list(argv), "references": refs}, RESULTS / f"{args.name}.json")
    print(f"wrote {RESULTS / (args.name + '.md')}")


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="track", required=True)
    sim = sub.add_parser("sim", help="simulated hidden-rules tasks, scripted LMs")
    sim.add_argument("--settings", nargs="+", default=list(sim_rules.DEFAULT_SETTINGS),
                     choices=list(sim_rules.SETTINGS))
    sim.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    sim.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=ALL_SYSTEMS)
    sim.add_argument("--budget", type=int, default=None, help="override every setting's budget")
    sim.add_argument("--name", default="compare_sim", help="output file stem under benchmarks/results/")
    real = sub.add_parser("real", help="a built-in gepetto task with real LMs (default: the embedded Qwen models)")
    real.add_argument("--task", default="demo")
    real.add_argument("--task-lm", default="local:qwen2.5-coder-0.5b")
    real.add_argument("--reflection-lm", default="local:qwen2.5-coder-1.5b")
    real.add_argument("--budget", type=int, default=200)
    real.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    real.add_argument("--systems", nargs="+", default=["gepetto", "gepa"], choices=ALL_SYSTEMS)
    real.add_argument("--data-seed", type=int, default=0, help="the task loader's split seed (same for all runs)")
    real.add_argument("--data-dir", default=None)
    real.add_argument("--n-train", type=int, default=None)
    real.add_argument("--n-val", type=int, default=None)
    real.add_argument("--n-test", type=int, default=None)
    real.add_argument("--concurrency", type=int, default=4, help="gepetto max_concurrency and test evaluation")
    real.add_argument("--name", default=None, help="output file stem (default compare_real_TASK)")
    real.add_argument("--events", default=None, help="append gepetto's reflection answers, minibatch tests and new "
                      "candidates here, one JSON line each with its time (for diagnosis)")
    wall = sub.add_parser("walltime", help="both systems against a simulated-latency OpenAI-compatible server")
    from benchmarks.compare import walltime

    walltime.add_arguments(wall)
    args = ap.parse_args(argv)
    tracks: dict[str, Callable[[argparse.Namespace, Sequence[str]], None]] = {
        "sim": sim_track, "real": real_track, "walltime": walltime.walltime_track}
    if args.track == "real" and args.name is None:
        args.name = f"compare_real_{args.task}"
    tracks[args.track](args, argv)


if __name__ == "__main__":
    main()
