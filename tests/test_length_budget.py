"""The per-component length budget (EngineConfig.max_component_chars): told to reflection, enforced before rollouts."""

import asyncio

from gepetto.api import build_engine
from gepetto.engine.events import Outcome
from gepetto.testing import ScriptedLM, sim

LONG = "Answer the question. " + "Be careful and thorough in every single respect. " * 10  # ~510 chars


def _engine(reflection, **options):
    task = sim.task(n_train=16, n_val=8, kinds=3)
    return build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                        task_lm=sim.SimTaskLM(), reflection_lm=reflection, budget=60, merge="off", **options)


def test_an_over_long_rewrite_is_rejected_before_any_rollout_and_the_limit_is_told():
    answers = iter([f"<new_instruction>{LONG}</new_instruction>",
                    "<new_instruction>Answer the question. Apply rule-0.</new_instruction>"] * 20)
    reflection = ScriptedLM(lambda m, p: next(answers))
    res = asyncio.run(_engine(reflection, max_component_chars=200, reflection_attempts=2).run())
    assert res.proposals.get(Outcome.OVER_LENGTH, 0) >= 1
    first_prompt = reflection.calls[0][0][-1]["content"]
    assert "at most 200 characters" in first_prompt
    # the next attempt is a new request to shorten that answer, not the same conversation told it was too long (a
    # small model asked again there writes its long answer back)
    shorten = reflection.calls[1][0]
    assert len(shorten) == 2 and shorten[0]["role"] == "system"
    assert f"too long: it has {len(LONG.strip())} characters" in shorten[1]["content"]
    assert LONG.strip() in shorten[1]["content"] and "at most 200 characters (about 33 words)" in shorten[1]["content"]
    assert "Example 1" not in shorten[1]["content"]
    assert all(len(c.candidate["instruction"]) <= 200 for c in res.candidates)
    assert all(LONG not in c.candidate["instruction"] for c in res.candidates)


def test_without_a_budget_the_long_text_is_tried_and_nothing_is_said_of_length():
    answers = iter([f"<new_instruction>{LONG} Apply rule-0.</new_instruction>"] * 40)
    reflection = ScriptedLM(lambda m, p: next(answers))
    res = asyncio.run(_engine(reflection, reflection_attempts=1).run())
    assert Outcome.OVER_LENGTH not in res.proposals
    assert all("characters" not in msgs[-1]["content"] for msgs, _ in reflection.calls)
    assert any(len(c.candidate["instruction"]) > 200 for c in res.candidates)


def test_an_edit_rule_that_overflows_the_budget_costs_a_retry():
    answers = iter(["<rule>If the question is of kind 0, apply rule-0 and " + "think hard " * 20 + ".</rule>",
                    "<rule>Apply rule-0 to such questions.</rule>"] * 30)
    reflection = ScriptedLM(lambda m, p: next(answers))
    res = asyncio.run(_engine(reflection, proposer="edit", max_component_chars=120).run())
    assert res.proposals.get(Outcome.OVER_LENGTH, 0) >= 1
    assert "keep the rule under" in reflection.calls[0][0][-1]["content"]
    assert all(len(c.candidate["instruction"]) <= 120 for c in res.candidates)
    assert len(res.candidates) >= 2  # the short rule was tried and accepted


def test_an_over_long_proposal_costs_no_rollout():
    from gepetto.engine.events import ProposalTested, RolloutFinished

    events = []
    reflection = ScriptedLM(lambda m, p: f"<new_instruction>{LONG}</new_instruction>")  # always too long
    engine = _engine(reflection, max_component_chars=200, reflection_attempts=3, max_idle_iterations=3,
                     fewshot="fewshot(gold=false)")  # (no demonstration from a gold: only rewrites are proposed)
    engine.callbacks.append(events.append)
    res = asyncio.run(engine.run())
    assert res.proposals[Outcome.OVER_LENGTH] == len(reflection.calls) >= 3
    assert not any(isinstance(e, ProposalTested) for e in events)  # no child was ever run
    paid = [e for e in events if isinstance(e, RolloutFinished)]
    assert all(e.candidate == res.candidates[0].candidate.id for e in paid)  # only the seed's rollouts
    assert len(res.candidates) == 1
