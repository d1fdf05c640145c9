"""The head-to-head harness (benchmarks/compare): the simulated hidden-rules world, the counters, and the
gepetto side end to end. The gepa side runs only where the reference `gepa` package is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.compare import sim_rules
from benchmarks.compare.measure import (
    CountingLM,
    CountingMetric,
    RunRecord,
    constant_baseline,
    proposal_accounting,
    rollouts_to_fraction,
    run_gepetto,
)
from benchmarks.compare.measure import test_score as score_on_test

from gepetto.engine.reflect import ReflectionExample, build_prompt
from gepetto.types import Example

RULE_A = sim_rules.render_rule("billing", "QX-41")
RULE_B = sim_rules.render_rule("shipping", "ZZ-10")


def ask(lm: sim_rules.ScriptedTaskLM, instruction: str, ticket: str) -> str:
    return lm.respond([{"role": "system", "content": instruction}, {"role": "user", "content": ticket}]).text


def gepetto_prompt(current: str, feedback: list[str]) -> list[dict[str, str]]:
    shown = [ReflectionExample(f"Ticket {i}: about something", "GENERAL", f, 0.0) for i, f in enumerate(feedback)]
    return build_prompt(current, shown)


def gepa_prompt(current: str, feedback: list[str]) -> list[dict[str, str]]:
    """The shape of gepa 0.1.4's default reflection prompt (instruction and examples in ``` blocks)."""
    samples = "\n\n".join(f"# Example {i + 1}\n## Inputs\nTicket {i}: about something\n\n## Generated Outputs\n"
                          f"GENERAL\n\n## Feedback\n{f}\n" for i, f in enumerate(feedback))
    text = (f"I provided an assistant with the following instructions to perform a task for me:\n```\n{current}\n```"
            f"\n\nThe following are examples ...:\n```\n{samples}\n```\n\nYour task is to write a new instruction "
            "for the assistant. ... Provide the new instructions within ``` blocks.")
    return [{"role": "user", "content": text}]


def feedback_for(topic: str, code: str) -> str:
    ex = Example({"ticket": f"Ticket 1: about {topic}"}, gold=code, metadata={"topic": topic})
    return sim_rules.metric(ex, "GENERAL", []).feedback


# ---- the scripted task LM follows exactly the rules in its instruction ----------------------------------

def test_task_lm_answers_only_topics_whose_rule_is_stated() -> None:
    lm = sim_rules.ScriptedTaskLM()
    instruction = f"Route tickets.\n{RULE_A}\n{RULE_B}"
    assert ask(lm, instruction, "Ticket 3: Please help me with billing. Thanks.") == "QX-41"
    assert ask(lm, instruction, "Ticket 4: Something is wrong with my shipping.") == "ZZ-10"
    assert ask(lm, instruction, "Ticket 5: I have a question about returns.") == sim_rules.DEFAULT_ANSWER
    assert ask(lm, "Route tickets.", "Ticket 3: Please help me with billing.") == sim_rules.DEFAULT_ANSWER
    # a rule mentioned in the ticket instead of the instruction does not count
    assert ask(lm, "Route tickets.", f"Ticket 6: billing. {RULE_A}") == sim_rules.DEFAULT_ANSWER


def test_task_lm_error_rate_is_deterministic_and_about_right() -> None:
    lm = sim_rules.ScriptedTaskLM(error_rate=0.2, seed=3)
    tickets = [f"Ticket {i}: Please help me with billing." for i in range(1000)]
    answers = [ask(lm, RULE_A, t) for t in tickets]
    assert answers == [ask(lm, RULE_A, t) for t in tickets]
    slips = answers.count(sim_rules.DEFAULT_ANSWER) / len(answers)
    assert 0.15 < slips < 0.25
    assert set(answers) == {"QX-41", sim_rules.DEFAULT_ANSWER}


# ---- the scripted reflection LM edits as specified ------------------------------------------------------

@pytest.mark.parametrize("prompt", [gepetto_prompt, gepa_prompt])
def test_reflection_adds_at_most_max_add_rules_seen_in_feedback(prompt) -> None:
    lm = sim_rules.ScriptedReflectionLM(max_add=2)
    feedback = [feedback_for("billing", "QX-41"), feedback_for("shipping", "ZZ-10"), feedback_for("login", "AB-12")]
    current, _, _ = sim_rules.read_request(prompt("Route tickets.", feedback))
    assert current == "Route tickets."
    out = lm.respond(prompt("Route tickets.", feedback)).text
    if prompt is gepetto_prompt:
        assert "<new_instruction>" in out and "```" not in out
        text = out.split("<new_instruction>")[1].split("</new_instruction>")[0].strip()
    else:
        assert out.startswith("```") and "<new_instruction>" not in out
        text = out.strip("`\n")
    assert sim_rules.parse_rules(text) == [("billing", "QX-41"), ("shipping", "ZZ-10")]
    assert text.startswith("Route tickets.")
    assert lm.log == ["edit"]


def test_reflection_keeps_rules_drops_one_and_respects_the_length_limit() -> None:
    current = "Route tickets.\n" + "\n".join(sim_rules.render_rule(t, f"AA-{10 + i}")
                                             for i, t in enumerate(["billing", "shipping", "returns"]))
    feedback = [feedback_for("login", "BB-20"), feedback_for("privacy", "CC-30")]
    keep = sim_rules.ScriptedReflectionLM(max_add=1)
    text = keep.respond(gepetto_prompt(current, feedback)).text
    assert [t for t, _ in sim_rules.parse_rules(text)] == ["billing", "shipping", "returns", "login"]
    drop = sim_rules.ScriptedReflectionLM(max_add=1, drop_prob=1.0)
    topics = [t for t, _ in sim_rules.parse_rules(drop.respond(gepetto_prompt(current, feedback)).text)]
    assert len(topics) == 3 and topics[-1] == "login"
    short = sim_rules.ScriptedReflectionLM(max_add=2, max_rules=3)
    topics = [t for t, _ in sim_rules.parse_rules(short.respond(gepetto_prompt(current, feedback)).text)]
    assert topics == ["returns", "login", "privacy"]  # the oldest rules go first


def test_reflection_with_nothing_new_answers_unchanged() -> None:
    lm = sim_rules.ScriptedReflectionLM()
    current = f"Route tickets.\n{RULE_A}"
    out = lm.respond(gepa_prompt(current, [feedback_for("billing", "QX-41")])).text
    assert out.strip("`\n") == current and lm.log == ["unchanged"]


def test_reflection_noise_gives_only_useless_answers_deterministically() -> None:
    def answers(seed: int) -> tuple[list[str], list[str]]:
        lm = sim_rules.ScriptedReflectionLM(noise=1.0, seed=seed)
        texts = [lm.respond(gepetto_prompt("Route tickets.", [feedback_for("billing", "QX-41")])).text
                 for _ in range(40)]
        return texts, lm.log

    texts, kinds = answers(1)
    assert (texts, kinds) == answers(1)
    assert set(kinds) == {"empty", "chat", "unchanged", "echo"}
    for text, kind in zip(texts, kinds, strict=True):
        assert "QX-41" not in text
        if kind == "chat":
            assert text == sim_rules.CHAT_REPLY
        if kind == "empty":
            assert text == ""


# ---- the metric ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("output", ["", "   ", "{}", None, {"code": "QX-41"}, "Ticket 1: Please help me with billing.",
                                    "GENERAL", "qx-41", "The code is QX-41."])
def test_metric_scores_degenerate_outputs_at_zero(output) -> None:
    ex = Example({"ticket": "Ticket 1: Please help me with billing."}, gold="QX-41", metadata={"topic": "billing"})
    score = sim_rules.metric(ex, output, [])
    assert score.value == 0.0
    assert "Tickets about billing get code QX-41." in score.feedback


def test_metric_gives_one_for_exactly_the_code() -> None:
    ex = Example({"ticket": "Ticket 1: billing"}, gold="QX-41", metadata={"topic": "billing"})
    assert sim_rules.metric(ex, " QX-41\n", []).value == 1.0


# ---- the worlds -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(sim_rules.SETTINGS))
def test_worlds_are_deterministic_with_a_known_optimum(name: str) -> None:
    w, again = sim_rules.world(name), sim_rules.world(name)
    task = w.task()
    assert w.codes == again.codes and [e.inputs for e in task.testset] == [e.inputs for e in again.task().testset]
    assert len(set(w.codes.values())) == len(w.codes)
    lm = w.task_lm(0)
    assert score_on_test(task, task.seed_candidate, lm) == 0.0
    optimum = score_on_test(task, w.oracle(), lm)
    assert optimum >= 1 - 2 * w.setting.error_rate - 0.03
    if w.setting.max_rules < w.setting.topics // w.setting.components:
        assert score_on_test(task, w.reachable_oracle(), lm) < optimum
    answer, score = constant_baseline(task)
    top = max(set(e.gold for e in task.trainset), key=[e.gold for e in task.trainset].count)
    assert answer == top and score == pytest.approx(sum(e.gold == top for e in task.testset) / len(task.testset))


# ---- the measuring pieces and the gepetto side end to end ------------------------------------------

def test_rollouts_to_fraction_and_accounting() -> None:
    curve = [(30, 0.2), (66, 0.5), (102, 0.95), (150, 1.0)]
    assert rollouts_to_fraction(curve, 0.95) == 102
    assert rollouts_to_fraction(curve, 1.0) == 150
    assert rollouts_to_fraction([], 0.95) is None
    acc = proposal_accounting(["edit", "empty", "chat", "edit", "unchanged"], [True, True, False, True, True],
                              rejected_minibatch=2, accepted=1)
    assert acc["answers"] == 5 and acc["useless"] == 3 and acc["useless_paid"] == 2
    assert (acc["empty"], acc["chat"], acc["unchanged"], acc["echo"]) == (1, 1, 1, 0)



def test_reach_is_measured_on_the_mean_and_per_seed_pair() -> None:
    from dataclasses import replace

    from benchmarks.compare.measure import paired_reach_ratios, reach_rows

    w = sim_rules.world("easy")
    base = run_gepetto(w.task(), w.task_lm(0), w.reflection_lm(0), budget=60, seed=0)
    ref = {0: [(30, 0.0), (66, 0.5), (102, 1.0)], 1: [(30, 0.0), (138, 1.0)]}
    fast = [replace(base, system="fast", seed=0, curve=[(30, 0.0), (51, 1.0)]),
            replace(base, system="fast", seed=1, curve=[(30, 0.0), (69, 1.0)])]
    slow = [replace(base, system="slow", seed=0, curve=[(30, 0.0), (66, 0.5)]),  # never reaches 1.0
            replace(base, system="slow", seed=1, curve=[(30, 0.0), (276, 1.0)])]
    assert paired_reach_ratios({r.seed: r.curve for r in fast}, ref) == ([0.5, 0.5], 0)
    assert paired_reach_ratios({r.seed: r.curve for r in slow}, ref) == ([2.0], 1)
    gepa = [replace(base, system="gepa", seed=s, curve=c) for s, c in ref.items()]
    rows = reach_rows([*gepa, *fast, *slow])
    assert "| gepa | 138 | 1.00x | 1.00x | 0 |" in rows  # the mean reaches 1.0 when the slower seed does
    assert "| fast | 69 | 0.50x | 0.50x | 0 |" in rows and "| slow | never | - | 2.00x | 1 |" in rows
    # held out: the same measure on the test curves (the validation curves play no part)
    held = [replace(r, test_curve=[(u, v / 2) for u, v in ref[r.seed]]) for r in gepa]
    held += [replace(r, test_curve=[(30, 0.0), (90, 0.5)]) for r in fast]
    rows = reach_rows(held, held_out=True)
    assert rows and "0.500" in rows[0] and "| gepa | 138 | 1.00x | 1.00x | 0 |" in rows
    assert "| fast | 90 | 0.65x | 0.77x | 0 |" in rows  # per seed: 90 / 102 and 90 / 138
    assert reach_rows(gepa, held_out=True) == []  # no test curves recorded: no table

async def test_counters_count_calls_and_tokens() -> None:
    w = sim_rules.world("easy")
    lm = CountingLM(w.task_lm())
    await lm.complete([{"role": "system", "content": "x"}, {"role": "user", "content": "Ticket 1: billing"}])
    lm.respond([{"role": "user", "content": "Ticket 2: billing"}])
    assert lm.calls == 2 and lm.input_tokens > 0 and lm.output_tokens > 0
    metric = CountingMetric(sim_rules.metric)
    ex = w.task().valset[0]
    metric(ex, ex.gold, [])
    assert metric.calls == 1


def test_gepetto_side_end_to_end_on_the_sim_track() -> None:
    w = sim_rules.world("noisy")
    task = w.task()
    rec = run_gepetto(task, w.task_lm(0), w.reflection_lm(0), budget=200, seed=0)
    assert rec.system == "gepetto" and rec.budget == 200
    assert rec.rollouts_own <= 200  # gepetto never overspends
    # every metric call the harness counted judged a rollout, or a gold written as an answer (a demonstration)
    assert rec.rollouts_own + rec.metric_checks == rec.rollouts_counted
    assert rec.task_calls == rec.rollouts_own  # one task LM call per rollout of this program
    assert rec.curve[0] == (len(task.valset), rec.seed_val)
    assert [s for _, s in rec.curve] == sorted(s for _, s in rec.curve)
    assert rec.best_val == rec.curve[-1][1] > rec.seed_val
    assert 0.0 < rec.test_score <= 1.0
    assert rec.proposals["answers"] == rec.reflection_calls
    assert rec.proposals["useless_paid"] == 0  # every useless scripted answer is caught before rollouts
    assert rec.rollouts_to_95 is not None and rec.rollouts_to_95 <= rec.rollouts_counted
    again = run_gepetto(task, w.task_lm(0), w.reflection_lm(0), budget=200, seed=0, held_out_curve=True)
    assert (again.curve, again.best_candidate) == (rec.curve, rec.best_candidate)
    assert rec.test_curve == []  # measured only when asked
    assert_held_out_curve_follows_the_best(again)


def assert_held_out_curve_follows_the_best(rec: RunRecord) -> None:
    """One test score per rise of the best validation score (the seed's included), at the same rollout
    counts, the last being the returned candidate's."""
    rises = [(u, v) for i, (u, v) in enumerate(rec.curve) if i == 0 or v > rec.curve[i - 1][1]]
    assert [u for u, _ in rec.test_curve] == [u for u, _ in rises] and len(rises) >= 2
    assert rec.test_curve[0][1] == 0.0  # the seed states no rule
    assert rec.test_curve[-1][1] == rec.test_score > 0.0


def test_a_demonstration_added_is_not_counted_as_a_paid_reflection_answer() -> None:
    # with fewshot, half of the proposals add a demonstration without a reflection call: their minibatch test
    # must not be put on the last reflection answer's account (in this run, a useless one before the fix)
    w = sim_rules.world("noisy")
    rec = run_gepetto(w.task(), w.task_lm(0), w.reflection_lm(0), budget=600, seed=0, fewshot=4)
    assert rec.proposals["useless"] > 0 and rec.proposals["useless_paid"] == 0


def test_gepetto_side_over_http_on_the_walltime_track() -> None:
    import argparse
    import dataclasses

    from benchmarks.compare import walltime

    ap = argparse.ArgumentParser()
    walltime.add_arguments(ap)
    args = ap.parse_args(["--budget", "60", "--delay", "0", "--n-val", "10"])
    w = sim_rules.RulesWorld(dataclasses.replace(sim_rules.SETTINGS["easy"], n_val=10))
    rec = walltime.one_run("gepetto", w, w.task(), args, seed=0)
    assert rec.rollouts_own + rec.metric_checks == rec.rollouts_counted and rec.task_calls == rec.rollouts_own <= 60
    assert rec.reflection_calls >= 1 and rec.best_val >= rec.seed_val


def test_plot_and_tables(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from benchmarks.compare.measure import RUN_HEADER, plot_curves, run_row, summary_rows

    w = sim_rules.world("easy")
    rec = run_gepetto(w.task(), w.task_lm(0), w.reflection_lm(0), budget=100, seed=0)
    plot_curves([("easy", [rec], {"optimum": 1.0})], tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert run_row(rec).count("|") == RUN_HEADER.count("|")
    assert len(summary_rows([rec], 1.0)) == 3


def test_json_round_trip(tmp_path: Path) -> None:
    from benchmarks.compare.measure import load_json, save_json

    w = sim_rules.world("easy")
    rec = run_gepetto(w.task(), w.task_lm(0), w.reflection_lm(0), budget=150, seed=0)
    save_json([rec], {"track": "sim"}, tmp_path / "r.json")
    (back,) = load_json(tmp_path / "r.json")
    assert (back.proposals, back.best_candidate) == (rec.proposals, rec.best_candidate)
    assert [u for u, _ in back.curve] == [u for u, _ in rec.curve]
    assert [v for _, v in back.curve] == pytest.approx([v for _, v in rec.curve], abs=1e-4)  # rounded in the file
    assert back.rollouts_to_95 == rec.rollouts_to_95


def test_real_lm_proposals_are_classified_with_gepettos_vetting_rules() -> None:
    from benchmarks.compare.gepa_side import Recorder, classify

    shown = [{"Inputs": "Ticket 1: Please help me with billing. It started yesterday.", "Generated Outputs": "GENERAL",
              "Feedback": feedback_for("billing", "QX-41")}]
    cases = {"": "empty", sim_rules.CHAT_REPLY: "chat", "Route tickets.": "unchanged",
             "Ticket 1: Please help me with billing. It started yesterday.": "echo",
             f"Route tickets.\n{RULE_A}": "edit"}
    for text, kind in cases.items():
        assert classify(text, "Route tickets.", shown) == kind
    rec = Recorder(CountingMetric(sim_rules.metric))  # gepa's callback events, as gepa 0.1.4 sends them
    rec.on_proposal_start({"parent_candidate": {"instruction": "Route tickets."},
                           "reflective_dataset": {"instruction": shown}})
    rec.on_proposal_end({"new_instructions": {"instruction": sim_rules.CHAT_REPLY}})
    rec.on_evaluation_end({"candidate_idx": None})
    rec.on_evaluation_end({"candidate_idx": 0})
    rec.on_valset_evaluated({"average_score": 0.5, "candidate": {"instruction": "a"}})
    rec.on_valset_evaluated({"average_score": 0.5, "candidate": {"instruction": "b"}})  # a tie: not the best
    assert rec.kinds == ["chat"] and rec.child_evals == 1 and rec.curve == [(0, 0.5), (0, 0.5)]
    assert rec.bests == [(0, {"instruction": "a"})]


# ---- the gepa side (only where gepa is installed) ----------------------------------------------------

def test_gepa_side_end_to_end_on_the_sim_track() -> None:
    pytest.importorskip("gepa")
    from benchmarks.compare.gepa_side import run_gepa

    w = sim_rules.world("multi")
    task = w.task()
    rec = run_gepa(task, w.task_lm(0), w.reflection_lm(0), budget=300, seed=0, held_out_curve=True)
    assert_held_out_curve_follows_the_best(rec)
    assert rec.rollouts_own == rec.rollouts_counted
    assert rec.rollouts_counted >= 300  # gepa spends its whole budget (and may overshoot)
    assert rec.curve[0] == (len(task.valset), rec.seed_val) and rec.best_val >= rec.seed_val
    assert rec.proposals["answers"] == rec.reflection_calls
    assert rec.proposals["useless_paid"] == rec.proposals["useless"]  # gepa evaluates every answer
    assert set(rec.best_candidate) == set(task.seed_candidate)


def test_learnt_fewshot_share_tests_fewer_demonstrations_where_they_do_not_help(tmp_path) -> None:
    # the scripted task LM reads rules only: a demonstration passes its test only when it happens to undo a slip
    w = sim_rules.world("multi")

    def demo_tests(**options: object) -> tuple[list[dict], int]:
        path = tmp_path / f"{sorted(options.items())}.jsonl"
        # (the rewrite proposer, whose rewrites this world's scripted reflection LM writes; its codes are a closed
        # answer set, where the default takes the labels route)
        run_gepetto(w.task(), w.task_lm(0), w.reflection_lm(0), budget=1500, seed=0, events=path, proposer="rewrite",
                    **options)
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        proposals = [e for e in lines if e["kind"] == "proposal"]
        return [e for e in proposals if e["origin"] == "demo"], len(proposals)

    # (learnt: the default)
    (fixed, n_fixed), (learnt, n_learnt) = demo_tests(fewshot="fewshot(k=4, adaptive=false)"), demo_tests(fewshot=4)
    assert sum(e["accepted"] for e in fixed) < len(fixed) / 5  # they rarely pass
    assert len(learnt) / n_learnt < 0.6 * len(fixed) / n_fixed  # a smaller share of the proposals
