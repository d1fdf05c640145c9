"""Edit reflection (engine/edits.py): one rule per proposal for one frequent mistake, gated on solved cases."""

import random
import re
from collections import Counter

import pytest

from gepetto.api import build_engine
from gepetto.engine import edits
from gepetto.engine.events import Outcome
from gepetto.engine.proposers import Edit
from gepetto.program import Rollout, TraceEntry
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Score


def _rollout(eid: str, value: float, pattern: str = "", output: str = "x", feedback: str = "") -> Rollout:
    return Rollout(eid, Score(value, feedback or ("Correct." if value else "Wrong."), pattern=pattern), output,
                   [TraceEntry("instruction", f"input {eid}", output)])


def test_choose_focus_weights_patterns_and_skips_exhausted_ones():
    evidence = ([_rollout(f"a{i}", 0.0, "answered x, expected y") for i in range(6)]
                + [_rollout("b0", 0.0, "answered z, expected y"), _rollout("ok", 1.0, output="x")])
    picks = [edits.choose_focus(evidence, 1.0, {}, random.Random(s)).pattern for s in range(200)]
    assert 0.75 < picks.count("answered x, expected y") / 200 < 0.95  # 6 against 1
    focus = edits.choose_focus(evidence, 1.0, {"answered x, expected y": ["r1", "r2"]}, random.Random(0))
    assert focus.pattern == "answered z, expected y" and focus.count == 1
    assert [r.example_id for r in focus.contrast] == ["ok"]  # solved cases must not change: shown as contrast
    exhausted = {"answered x, expected y": ["r1", "r2"], "answered z, expected y": ["r3", "r4"]}
    assert edits.choose_focus(evidence, 1.0, exhausted, random.Random(0)) is None


def test_pattern_falls_back_to_the_feedback_with_the_examples_particulars_masked():
    r = Rollout("e", Score(0.0, "Expected 12. Note: a dozen is 12."), "6")
    assert edits.pattern_of(r) == "Expected N. Note: a dozen is N."
    other = Rollout("f", Score(0.0, "Expected 250. Note: a dozen is 12."), "25")
    assert edits.pattern_of(other) == edits.pattern_of(r)  # one kind of failure, one pattern


def test_contrast_prefers_solved_cases_with_the_wrongly_given_answer():
    evidence = [_rollout("f1", 0.0, "p", output="balance"), _rollout("s1", 1.0, output="routing"),
                _rollout("s2", 1.0, output="balance"), _rollout("s3", 1.0, output="pin_change")]
    focus = edits.choose_focus(evidence, 1.0, {}, random.Random(1), max_contrast=2)
    assert focus.contrast[0].example_id == "s2"


def test_gate_batch_has_failures_and_solved_cases():
    evidence = [_rollout(f"f{i}", 0.0, "p") for i in range(5)] + [_rollout(f"s{i}", 1.0) for i in range(5)]
    focus = edits.choose_focus(evidence, 1.0, {}, random.Random(0))
    ids = edits.gate_batch(focus, evidence, 1.0, 3, 3, random.Random(0))
    assert len(ids) == 6 and len(set(ids)) == 6
    assert sum(i.startswith("f") for i in ids) == 3 and sum(i.startswith("s") for i in ids) == 3


@pytest.mark.parametrize(
    ("raw", "finish", "why"),
    [
        ("<rule>If the message asks what is owed on a bill, answer bill_balance.</rule>", "stop", None),
        ("Rule: If the message asks what is owed on a bill, answer bill_balance.", "stop", None),
        ("<rule></rule>", "stop", Outcome.EMPTY),
        ("<rule>Reply with only the intent name.</rule>", "stop", Outcome.UNCHANGED),
        ("<rule>Certainly! Please provide the messages.</rule>", "stop", Outcome.CHAT_REPLY),
        ("<rule>Use [... 286 characters cut ...] carefully when answering.</rule>", "stop",
         Outcome.SCAFFOLDING),
        ("<rule>See Example 2 and answer like the feedback says.</rule>", "stop", Outcome.SCAFFOLDING),
        ("<rule>how much do i still owe on my electricity bill this month please</rule>", "stop",
         Outcome.ECHO),
        ("<rule>If the message asks what is owed on a bill, answer bill_balance. Also when the", "length", None),
        ("<rule>If the message asks what is owed on a bill and the", "length", Outcome.TRUNCATED),
    ],
)
def test_vet_rule(raw, finish, why):
    shown = [edits.Shown("how much do i still owe on my electricity bill this month please", "balance",
                         "Wrong intent.", 0.0)]
    rule, got = edits.vet_rule(raw, finish, "Classify the message. Reply with only the intent name.", shown)
    assert got is why, rule
    if why is None:
        assert "bill_balance" in rule and not edits.has_scaffolding(rule)


@pytest.mark.parametrize(
    ("rule", "copied"),
    [  # rules the 1.5B wrote on clinc-credit-oos (run rt-clinc-credit-oos-edit-s0-v3), then clean ones
        ("If a customer asks about improving their credit score, the assistant should answer with "
         "improve_credit_score, not answered credit_limit_change.", True),
        ('If a customer asks about the APR of a credit card, the assistant should answer with "apr" instead of '
         '"answered apr".', True),
        ("If a customer asks about improving their credit score, answer improve_credit_score.", False),
        ("If the customer asks about something no intent covers, answer out_of_scope, not apr.", False),
    ],
)
def test_a_rule_quoting_the_failure_pattern_is_refused(rule, copied):
    pattern = ("answered credit_limit_change, expected improve_credit_score" if "credit score" in rule
               else "answered apr, expected out_of_scope")
    assert edits.copies_pattern(rule, pattern) is copied
    _, why = edits.vet_rule(f"<rule>{rule}</rule>", "stop", "Classify.", [], pattern)
    assert why is (Outcome.SCAFFOLDING if copied else None)
    assert "label" in edits.retry_hint(Outcome.SCAFFOLDING, pattern)


def test_prompt_shows_the_mistake_contrast_and_tried_rules():
    evidence = [_rollout("f1", 0.0, "answered balance, expected bill_balance", output="balance"),
                _rollout("s1", 1.0, output="balance")]
    focus = edits.choose_focus(evidence, 1.0, {}, random.Random(0))
    messages = edits.build_edit_prompt("Classify.", focus, "instruction", ["Answer carefully."])
    user = messages[-1]["content"]
    assert "answered balance, expected bill_balance (1 times" in user
    assert "must stay right" in user and "input s1" in user
    assert "- Answer carefully." in user and "<current_instruction>\nClassify.\n</current_instruction>" in user


def _rule_writer(messages, params):
    """A scripted reflection LM that reads the rule the feedback names and writes it as a rule."""
    user = messages[1]["content"]
    wanted = re.findall(r"need (rule-\d+)", user)
    current = user.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
    missing = [r for r in dict.fromkeys(wanted) if r not in current]
    return f"<rule>Apply {missing[0]} to such questions.</rule>" if missing else "<rule></rule>"


def test_edit_proposer_reaches_the_optimum_within_budget():
    task = sim.task(n_train=16, n_val=8, kinds=4)
    result = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                          program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(_rule_writer),
                          budget=300, proposer="edit", merge="off").run
    import asyncio

    res = asyncio.run(result())
    assert res.best_score == 1.0
    assert res.rollouts_used <= 300
    text = res.best_candidate["instruction"]
    assert all(f"rule-{k}" in text for k in range(4))
    assert text.startswith("Answer the question.\n- Apply rule-")  # rules appended as a list, seed kept


def test_gate_rejects_a_rule_that_breaks_solved_cases():
    """A rule that fixes the focus failures but breaks everything else must fail on the gate, not at validation."""
    task = sim.task(n_train=16, n_val=8, kinds=2)
    seed = task.seed_candidate.replace("instruction", "Answer the question. Apply rule-0.")

    class Fragile(sim.SimTaskLM):
        async def complete(self, messages, **params):
            if "ALWAYS" in messages[0]["content"]:  # the bad rule: only kind-1 questions right
                m = sim._Q.search(messages[-1]["content"])
                ok = m and m.group(2) == "1"
                return await super().complete([{"role": "system", "content": "rule-1" if ok else ""},
                                               *messages[1:]], **params)
            return await super().complete(messages, **params)

    rules = iter(["<rule>ALWAYS answer as for rule-1 questions.</rule>"] * 50)
    import asyncio

    engine = build_engine(seed, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=Fragile(), reflection_lm=ScriptedLM(lambda m, p: next(rules)), budget=80,
                          proposer="edit", merge="off", reflection_attempts=1)
    res = asyncio.run(engine.run())
    assert res.proposals.get("rejected: not better on minibatch", 0) >= 1
    assert res.proposals.get("accepted", 0) == 0 and len(res.candidates) == 1


def test_merge_unites_rules_appended_on_two_branches():
    from gepetto.engine.merge import merge_texts, union_of_appends
    from gepetto.types import Candidate

    seed = "Classify the message.\nReply with the label."
    a, b = f"{seed}\n- rule A", f"{seed}\n- rule B\n- rule A"
    assert union_of_appends(a, b, seed) == f"{seed}\n- rule A\n- rule B"
    assert union_of_appends("Something else.\n- rule A", b, seed) is None
    child = merge_texts(Candidate(instruction=a), Candidate(instruction=f"{seed}\n- rule C"),
                        Candidate(instruction=seed), 0.5, 0.6, random.Random(0))
    assert child["instruction"] == f"{seed}\n- rule A\n- rule C"


def test_a_repeated_rule_costs_a_retry_not_the_proposal():
    """The reflection LM first repeats a rule whose child was already tried, then writes a new one."""
    import asyncio

    task = sim.task(n_train=16, n_val=8, kinds=4)
    answers: list[str] = []

    def writer(messages, params):
        last = messages[-1]["content"]
        if "That rule was already tried" in last:  # the retry hint: now write the rule the feedback asks for
            answers.append("new")
            return _rule_writer(messages[:2], params)
        answers.append("repeat")
        return "<rule>Think carefully before you answer such questions.</rule>"  # useless: rejected on the gate

    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(writer), budget=120, proposer="edit",
                          merge="off")
    res = asyncio.run(engine.run())
    assert res.proposals.get("rejected: already tried", 0) >= 1
    assert "new" in answers and res.best_score > res.seed_score
    assert edits.retry_hint(Outcome.ALREADY_TRIED, "p").startswith("That rule was already tried")


def test_a_rule_the_instruction_already_has_is_not_asked_for_again():
    """The reflection LM answers with a rule line the instruction already has ("unchanged"): asked again, the 1.5B
    mostly repeats it, so the pattern is given up for this proposal at once, with no retry."""
    import asyncio

    task = sim.task(n_train=16, n_val=8, kinds=4)
    unchanged: set[int] = set()  # the seeds of the attempts answered with a rule the instruction has
    retried: list[int] = []  # attempts that continue the conversation of such an answer

    def writer(messages, params):
        seed = params["seed"]  # the run's seed (0), the iteration and the attempt: iteration * 10 + attempt
        if len(messages) > 2 and seed - 1 in unchanged:
            retried.append(seed)
        user = messages[1]["content"]
        current = user.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
        lines = [line[2:] for line in current.split("\n") if line.startswith("- ")]
        if lines and seed // 10 % 2:  # every other iteration: the instruction's first rule again
            unchanged.add(seed)
            return f"<rule>{lines[0]}</rule>"
        return _rule_writer(messages, params)

    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(writer), budget=200, proposer="edit",
                          merge="off")
    res = asyncio.run(engine.run())
    assert res.proposals.get("rejected: unchanged", 0) >= 1
    assert unchanged and not retried  # no retry after an unchanged rule
    assert res.best_score > res.seed_score


@pytest.mark.parametrize(
    ("rule", "pattern", "names"),
    [  # rules the 1.5B wrote on clinc-credit-oos (runs rt-clinc-credit-oos-edit-s0/s1/s2-v3), then clean ones
        ('If a customer asks about the validity of their credit card, the assistant should answer with '
         '"credit_limit_change".', "answered credit_limit_change, expected expiration_date", False),
        ("If a customer asks about reporting a lost card, the assistant should answer with report_lost_card.",
         "answered report_lost_card, expected credit_score", False),
        ("If a customer asks about their credit limit or points, the assistant should answer with "
         '"credit_limit_change" instead of "improve_credit_score".',
         "answered credit_limit_change, expected improve_credit_score", True),  # names it (wrongly): no miss
        ("If the customer asks what rate the card charges, answer apr.", "answered card_declined, expected apr", True),
        ("If the message asks for the expiration date of the card, answer expiration date.",
         "answered credit_limit_change, expected expiration_date", True),  # "_" written as a space
        ("If the message is about anything else, answer out_of_scope.", "answered apr, expected out_of_scope", True),
        ("If the message names a slot, fill it.", "missed city", True),  # no expected answer: no check
    ],
)
def test_a_rule_must_name_the_right_answer_when_the_pattern_states_it(rule, pattern, names):
    _, why = edits.vet_rule(f"<rule>{rule}</rule>", "stop", CREDIT, [], pattern)
    # (the "instead of" one names the right answer, worded for the wrong one: its test decides)
    assert why is (None if names else Outcome.MISSES_ANSWER)
    if why is not None:
        assert edits.expected_answer(pattern) in edits.retry_hint(why, pattern)


def test_expected_answer_follows_the_intents_pattern():
    assert edits.expected_answer("answered apr, expected out_of_scope") == "out_of_scope"
    assert edits.expected_answer("not a valid intent name") == ""
    assert not edits.names_answer("answer aprs", "apr") and edits.names_answer("answer APR.", "apr")


def test_positives_are_other_inputs_with_the_right_answer_solved_first():
    rollouts = [_rollout("f1", 0.0, "answered apr, expected credit_limit", output="apr"),
                _rollout("m1", 0.0, "answered credit_score, expected credit_limit", output="credit_score"),
                _rollout("s1", 1.0, output="Credit_Limit."), _rollout("s2", 1.0, output="apr"),
                _rollout("s1", 1.0, output="credit_limit"),  # the same example run by another candidate: once
                _rollout("m2", 0.0, "answered apr, expected credit_score", output="apr")]
    got = edits.positives(rollouts, "credit_limit", {"f1"}, 1.0, random.Random(0))
    assert [r.example_id for r in got] == ["s1", "m1"]  # solved first, then missed; never f1, s2 or m2
    assert edits.positives(rollouts, "credit_limit", {"f1"}, 1.0, random.Random(0), k=1)[0].example_id == "s1"


def test_a_confusion_prompt_shows_the_right_answers_other_inputs_and_asks_when_to_answer_it():
    evidence = [_rollout("f1", 0.0, "answered balance, expected bill_balance", output="balance"),
                _rollout("s1", 1.0, output="balance")]
    focus = edits.choose_focus(evidence, 1.0, {}, random.Random(0))
    focus = edits.Focus(focus.pattern, 1, focus.failures, focus.contrast, [_rollout("p1", 1.0, output="bill_balance")])
    user = edits.build_edit_prompt("Classify.", focus, "instruction", [])[-1]["content"]
    assert "These inputs also have the right answer bill_balance:\n\nInput: input p1\n" in user
    assert "says when to answer bill_balance" in user and "answer bill_balance.\"" in user
    assert "replaces" not in user
    user = edits.build_edit_prompt("Classify.\n- If it asks what is owed, answer bill_balance.", focus,
                                   "instruction", [])[-1]["content"]
    assert "replaces the instruction's rule line for bill_balance" in user


def test_a_rule_replaces_the_line_that_names_its_answer_else_it_is_appended():
    text = "Classify.\n- If it asks what is owed, answer bill_balance.\n- If it asks for the PIN, answer pin_change."
    new = "If the customer asks how much a bill is, answer bill_balance."
    assert edits.apply_rule(text, new, "bill_balance") == (
        f"Classify.\n- {new}\n- If it asks for the PIN, answer pin_change.")
    assert edits.apply_rule(text, "If it asks the due date, answer bill_due.", "bill_due").endswith(
        "pin_change.\n- If it asks the due date, answer bill_due.")
    assert edits.apply_rule("Answer bill_balance or bill_due.", new, "bill_balance").endswith(f"\n- {new}")
    # no answer from the pattern: the answer the rule gives decides (one rule per answer, never two lines for it)
    assert edits.apply_rule(text, new) == f"Classify.\n- {new}\n- If it asks for the PIN, answer pin_change."
    assert edits.apply_rule(text, "If the message names a slot, fill it.") == (
        f"{text}\n- If the message names a slot, fill it.")


def test_the_gate_keeps_solved_cases_of_both_answers_in_turn():
    evidence = ([_rollout(f"f{i}", 0.0, "answered balance, expected bill_balance", output="balance")
                 for i in range(3)]
                + [_rollout(f"x{i}", 1.0, output="balance") for i in range(3)]
                + [_rollout(f"y{i}", 1.0, output="bill_balance") for i in range(3)])
    focus = edits.choose_focus(evidence, 1.0, {}, random.Random(0))
    like = edits.positives([*evidence, _rollout("elsewhere", 1.0, output="bill_balance")], "bill_balance",
                           {r.example_id for r in focus.failures}, 1.0, random.Random(0), k=5)
    focus = edits.Focus(focus.pattern, focus.count, focus.failures, focus.contrast, like)
    ids = edits.gate_batch(focus, evidence, 1.0, 3, 3, random.Random(0))
    solved = ids[3:]
    assert [i[0] for i in solved] == ["x", "y", "x"]  # the wrongly given answer's case, the right one's, ...
    assert "elsewhere" not in ids  # the parent never ran it: it would cost a rollout the test has no room for


def test_several_rules_per_proposal_share_one_validation():
    """edit(rules=3): each proposal asks for rules for three different patterns; the child carries them all and is
    tested on failures of each, so the optimum needs fewer validated children than one rule at a time."""
    import asyncio

    task = sim.task(n_train=16, n_val=8, kinds=4)
    tested = []

    def run(k):
        engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(_rule_writer),
                              budget=300, proposer=f"edit(rules={k})", merge="off",
                              callbacks=[lambda e: tested.append((k, e)) if type(e).__name__ == "ProposalTested"
                                         else None])
        return asyncio.run(engine.run())

    one, three = run(1), run(3)
    assert one.best_score == three.best_score == 1.0
    assert len(three.candidates) < len(one.candidates)
    multi = [e for k, e in tested if k == 3 and e.origin != "demo" and e.rule and e.rule.count("\n") >= 1]
    assert multi and all(len(set(e.pattern.split("; "))) == e.rule.count("\n") + 1 for e in multi)
    assert max(len(re.findall(r"^- Apply", e.text, re.M)) for e in multi) >= 2  # several rules in one child


def test_a_pattern_no_usable_rule_came_for_waits_until_the_others_are_tried():
    """A mistake the reflection LM writes no usable rule for (all attempts refused) is not asked again on that parent
    (and the children that inherit its memory) while other patterns are open, so a frequent unanswerable pattern
    (CLINC's "not a valid intent name") does not take the reflection calls of every later proposal; once every
    other pattern has been tried, it is asked again, each refused ask counting as a try (up to LATE_TRIES), so the run
    does not stall with training examples still failing."""
    import asyncio

    from gepetto.engine.proposers import LATE_TRIES

    task = sim.task(n_train=16, n_val=8, kinds=4)
    asked: list[tuple[str, str, int]] = []  # (parent instruction, pattern, candidates added before)

    def writer(messages, params):
        user = messages[1]["content"]
        if len(messages) == 2 and "need rule-0" in user:
            current = user.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
            asked.append((current, re.search(r"makes this mistake: (.*?) \(", user).group(1), len(accepted)))
        return "<rule></rule>" if "need rule-0" in user else _rule_writer(messages, params)

    accepted: list[int] = []
    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(writer), budget=300, proposer="edit",
                          merge="off", callbacks=lambda e: accepted.append(1) if type(e).__name__ == "CandidateAdded"
                          else None)
    res = asyncio.run(engine.run())
    per_parent = Counter((current, pattern) for current, pattern, _ in asked)
    assert 1 < max(per_parent.values()) <= LATE_TRIES, per_parent  # asked again, but not forever
    assert res.proposals.get("rejected: empty", 0) == len(asked) * 3  # three attempts an ask, no more
    assert res.best_score > res.seed_score  # the other patterns' rules still came


KITCHEN = ("Classify the customer's message into one of these kitchen and dining intents: accept_reservations, "
           "calories, confirm_reservation, cook_time, food_last, ingredient_substitution, meal_suggestion, recipe, "
           "restaurant_reservation, restaurant_suggestion. Reply with only the intent name.\n"
           "- If the input asks for a reservation or confirms a reservation, answer confirm_reservation.")
BANKING = ("Classify the customer's message into one of these banking intents: account_blocked, balance, "
           "bill_balance, freeze_account, pay_bill. Reply with only the intent name.")
CREDIT = ("Classify the customer's message into one of these credit cards intents: apr, credit_limit, "
          "credit_limit_change. If the message matches none of them, answer out_of_scope. Reply with only the intent "
          "name.")


@pytest.mark.parametrize(
    ("rule", "pattern", "current"),
    [  # rules for intents whose names share words: the right answer's inputs, in words of another answer's name
        ("If the customer asks when their new card will arrive, answer card_delivery_estimate.",
         "answered card_arrival, expected card_delivery_estimate", "Classify: card_arrival, card_delivery_estimate."),
        ("If the customer asks about increasing the limit on the card, answer credit_limit_change.",
         "answered credit_limit, expected credit_limit_change", CREDIT),
        ("If the user asks for the lights to be made less bright, answer iot_hue_lightdim.",
         "answered iot_hue_lightoff, expected iot_hue_lightdim", "Classify: iot_hue_lightoff, iot_hue_lightdim."),
        ("If the customer says their transfer has not arrived yet, answer transfer_not_received_by_recipient.",
         "answered balance_not_updated_after_bank_transfer, expected transfer_not_received_by_recipient",
         "Classify: balance_not_updated_after_bank_transfer, transfer_not_received_by_recipient."),
    ],
)
def test_a_rule_is_not_refused_for_the_words_of_the_answers_names(rule, pattern, current):
    """Whether a rule describes the right inputs is left to its test: the words of answer names say nothing when the
    names of fine-grained intents share them (issue 59: such rules were refused as written for another answer)."""
    assert edits.vet_rule(f"<rule>{rule}</rule>", "stop", current, [], pattern) == (rule, None)


def test_a_rule_whose_consequent_names_no_answer_gets_the_one_asked_for():
    pattern = "answered iot_cleaning, expected iot_coffee"
    assert edits.vet_rule("<rule>If the user asks for coffee, prepare it.</rule>", "stop", "Classify.", [],
                          pattern) == ("If the user asks for coffee, answer iot_coffee.", None)
    assert edits.vet_rule("<rule>If the user asks for a cup, a mug or a latte, make it.</rule>", "stop",
                          "Classify.", [], answer="iot_coffee")[0] == \
        "If the user asks for a cup, a mug or a latte, answer iot_coffee."
    # one that gives the wrong answer stays wrong: it names the answer the task LM gave
    rule, why = edits.vet_rule("<rule>If the user asks for coffee, answer iot_cleaning.</rule>", "stop",
                               "Classify.", [], pattern)
    assert why is Outcome.MISSES_ANSWER and rule.endswith("iot_cleaning.")


def test_a_rule_made_of_pasted_messages_echoes_them():
    shown = [edits.Shown("will you check and confirm command please", "general_commandstop", "", 0.0),
             edits.Shown("could you check my last question", "general_commandstop", "", 0.0),
             edits.Shown("confirm it", "general_commandstop", "", 0.0)]
    pasted = ('If the user says "will you check and confirm command please" or "could you check my last question", '
              "answer general_confirm.")
    assert edits.pasted_inputs(pasted, shown) == [shown[0].inputs, shown[1].inputs]
    assert edits.vet_rule(f"<rule>{pasted}</rule>", "stop", "Classify.", shown, answer="general_confirm")[1] \
        is Outcome.ECHO
    # one short phrase an input also has is no paste; nor is a whole input of fewer than PASTED_WORDS words
    general = "If the user asks the assistant to check or confirm what it did, answer general_confirm."
    assert edits.vet_rule(f"<rule>{general}</rule>", "stop", "Classify.", shown, answer="general_confirm")[1] is None
    assert edits.pasted_inputs('If the user says "confirm it", answer general_confirm.', shown) == []


def test_the_answers_a_pattern_and_the_rule_lines_name():
    assert edits.wrong_answer("answered cook_time, expected recipe") == "cook_time"
    assert edits.wrong_answer("not a valid intent name") == ""
    assert edits.answers_named(KITCHEN + '\n- If it asks for a recipe, the assistant should answer with "recipe".'
                               ) == ["confirm_reservation", "recipe"]


TOPICS = {"alpha": "apples", "beta": "boats", "gamma": "guitars", "delta": "deserts", "omega": "owls"}


def _topic_task():
    """Messages about one topic each; the right answer is the topic's label. The scripted task LM answers a
    message's label only when the instruction has a rule line naming its topic (else it says "alpha")."""
    from gepetto.program import single_instruction
    from gepetto.tasks.intents import make_metric
    from gepetto.types import Candidate, Example

    def examples(split, n):
        return [Example({"message": f"{split} {i}: tell me about {TOPICS[lab]}"}, gold=lab, id=f"{split}-{lab}-{i}")
                for i in range(n) for lab in sorted(TOPICS)]

    def task_lm(messages, params):
        system, user = messages[0]["content"], messages[-1]["content"]
        for lab, topic in TOPICS.items():
            if topic in user and re.search(rf"^- .*\b{topic}\b.*answer {lab}\.$", system, re.M):
                return lab
        return "alpha"

    seed = Candidate(instruction=f"Classify the message: {', '.join(sorted(TOPICS))}. Reply with the label only.")
    return seed, examples("train", 4), examples("val", 2), make_metric(sorted(TOPICS)), single_instruction(), task_lm


def _definition_writer(messages, params):
    """A scripted reflection LM: a first-draft request gets a rule naming the topic its inputs share; an edit
    request gets nothing usable."""
    user = messages[1]["content"]
    m = re.search(r"These inputs have the right answer (\w+):\n(.*?)\n\n", user, re.S)
    if not m or "makes this mistake" in user:
        return "<rule></rule>"
    topics = {t for t in TOPICS.values() if t in m.group(2)}
    return f"<rule>If the message is about {topics.pop()}, answer {m.group(1)}.</rule>"


def test_a_first_draft_writes_one_rule_per_right_answer_and_is_validated_once():
    """edit(definitions=n): the first proposal runs the seed on n training examples and drafts one rule per right answer
    seen failing there, each written from inputs whose right answer it is; one child carries them all."""
    import asyncio

    seed, train, val, metric, program, task_lm = _topic_task()
    tested, answered = [], []

    def on(event):
        if type(event).__name__ == "ProposalTested":
            tested.append(event)
        elif type(event).__name__ == "ReflectionAnswered":
            answered.append(event)

    def run(definitions):
        tested.clear()
        engine = build_engine(seed, train, metric, valset=val, program=program, task_lm=ScriptedLM(task_lm),
                              reflection_lm=ScriptedLM(_definition_writer), budget=60,
                              proposer=Edit(definitions=definitions), merge="off", callbacks=[on])
        return asyncio.run(engine.run())

    without = run(0)
    assert without.best_score == without.seed_score == 0.2  # edits alone get nothing usable here
    res = run(20)
    first = tested[0]
    assert first.pattern == "first draft of the rules" and first.accepted
    # every answer of the seed's confusions ("answered alpha, expected beta"), each with one line
    assert sorted(first.rule.split("\n")) == sorted(f"If the message is about {TOPICS[lab]}, answer {lab}."
                                                    for lab in TOPICS)
    assert first.minibatch_before == first.minibatch_after == 0  # no test: validated directly
    assert res.best_score == 1.0 and len(res.candidates) == 2  # the seed and the draft: one validation
    assert res.rollouts_used <= 60
    drafted = [e for e in answered if "right answer" in e.raw or e.rejected is None]
    assert len(drafted) >= 4


def test_an_edit_rule_that_pastes_the_other_inputs_shown_is_refused_as_an_echo():
    """An edit's prompt lists other inputs whose right answer is the mistake's ("These inputs also have ..."); a
    rule that quotes them fits those examples, not the kind of request (snips-routed s1 kept one such rule)."""
    import asyncio

    seed, train, val, metric, program, task_lm = _topic_task()
    answered = []

    def paster(messages, params):
        user = messages[1]["content"]
        m = re.search(r"These inputs also have the right answer (\w+):\n(.*?)\n(?:It already|Rules|Write)", user, re.S)
        if not m or "copies the inputs" in messages[-1]["content"]:
            lab = re.findall(r"expected (\w+)", user)[0]
            return f"<rule>If the message is about {TOPICS[lab]}, answer {lab}.</rule>"
        quoted = re.findall(r"Input: (.+)", m.group(2))[:2]
        return f"<rule>If the message is like {' or '.join(f'{q!r}' for q in quoted)}, answer {m.group(1)}.</rule>"

    def on(event):
        if type(event).__name__ == "ReflectionAnswered":
            answered.append(event)

    engine = build_engine(seed, train, metric, valset=val, program=program, task_lm=ScriptedLM(task_lm),
                          reflection_lm=ScriptedLM(paster), budget=80, proposer=Edit(definitions=0), merge="off",
                          callbacks=[on])
    res = asyncio.run(engine.run())
    pasted = [e for e in answered if "is like" in e.raw]
    assert pasted and all(e.rejected is Outcome.ECHO for e in pasted)
    assert "is like" not in res.best_candidate["instruction"] and res.best_score > res.seed_score


def test_the_first_draft_asks_for_all_its_rules_at_once():
    """The draft's requests (one per answer) read only the parent's text, so they are in flight together: a batching
    backend decodes them in one batch, an API answers them in parallel. The rules are applied in the answers' order."""
    import asyncio

    seed, train, val, metric, program, task_lm = _topic_task()
    now = most = 0

    async def writer(messages, params):
        nonlocal now, most
        now += 1
        most = max(most, now)
        await asyncio.sleep(0.01)
        now -= 1
        return _definition_writer(messages, params)

    reflection = ScriptedLM(writer)
    engine = build_engine(seed, train, metric, valset=val, program=program, task_lm=ScriptedLM(task_lm),
                          reflection_lm=reflection, budget=60, proposer=Edit(definitions=20), merge="off")
    res = asyncio.run(engine.run())
    drafts = [m for m, _ in reflection.calls if "These inputs have the right answer" in m[1]["content"]]
    assert len(drafts) >= 4 and most == len(drafts)
    assert res.best_score == 1.0
    best = res.best_candidate["instruction"]
    assert [best.index(f"answer {lab}.") for lab in sorted(TOPICS)] == sorted(
        best.index(f"answer {lab}.") for lab in TOPICS)


def test_the_first_draft_goes_before_a_demonstration_and_only_once():
    """With few-shot on, the first proposal is still the draft; later ones are edits or demonstrations."""
    import asyncio

    seed, train, val, metric, program, task_lm = _topic_task()
    tested = []
    engine = build_engine(seed, train, metric, valset=val, program=program, task_lm=ScriptedLM(task_lm),
                          reflection_lm=ScriptedLM(lambda m, p: "<rule>If it rains, answer beta.</rule>"),
                          budget=120, proposer="edit(definitions=20)", merge="off", fewshot="fewshot(k=2, share=1)",
                          callbacks=[lambda e: tested.append(e) if type(e).__name__ == "ProposalTested" else None])
    asyncio.run(engine.run())
    assert tested[0].pattern == "first draft of the rules"
    assert sum(e.pattern == "first draft of the rules" for e in tested) == 1
    assert any(e.origin == "demo" for e in tested[1:])


def test_a_run_with_a_first_draft_resumes_to_the_uninterrupted_result(tmp_path):
    import gepetto
    from gepetto.engine.events import StopReason
    from gepetto.store.sqlite import RunStore

    seed, train, val, metric, program, task_lm = _topic_task()

    def writer(messages, params):  # the draft's rules, then edits that sometimes help
        user = messages[1]["content"]
        if "makes this mistake" in user:
            wanted = re.search(r"when to answer (\w+)", user)
            return f"<rule>If the message is about {TOPICS[wanted.group(1)]}, answer {wanted.group(1)}.</rule>" \
                if wanted and params["temperature"] > 0 else "<rule>If in doubt, answer alpha.</rule>"
        return _definition_writer(messages, params) if "omega" not in user.split("right answer")[1][:8] else ""

    def run(storage, stop=None):
        return gepetto.optimize(seed, train, metric, valset=val, program=program, task_lm=ScriptedLM(task_lm),
                                reflection_lm=ScriptedLM(writer), budget=120, seed=1, proposer="edit(definitions=12)",
                                fewshot=2, storage=storage, run="r", stop=stop)

    whole = run(tmp_path / "whole.sqlite")
    assert whole.best_score == 1.0 and len(whole.candidates) >= 3  # the draft, then an edit for what it left out
    storage = tmp_path / "s.sqlite"
    for k in (1, 2):
        part = run(storage, stop=lambda s, k=k: f"iteration {k}" if s.iteration >= k else None)
        assert part.stop_reason is StopReason.CONDITION
    final = run(storage)
    strip = ("wall_seconds", "ledger")
    assert {k: v for k, v in final.to_dict().items() if k not in strip} == {
        k: v for k, v in whole.to_dict().items() if k not in strip}
    assert RunStore(storage).count_rollouts("r") == final.rollouts_used


@pytest.mark.parametrize("test_on", [None, ()])
def test_a_proposal_with_an_empty_test_is_validated_directly(test_on):
    """Proposal(test_on=()) (the first draft's): no test, the child goes straight to validation, whatever it would
    have scored; with the default test, strict acceptance rejects a child that only ties its parent."""
    import asyncio

    from gepetto.engine.proposers import Proposal

    task = sim.task(n_train=16, n_val=8, kinds=4)

    class Noop:  # a harmless line: the child scores exactly as its parent
        async def propose(self, request):
            (c,) = request.components
            return Proposal({c: request.parent[c] + f"\n- Be kind ({request.iteration})."}, test_on)

    ran: list[tuple[str, str]] = []
    engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                          task_lm=sim.SimTaskLM(), reflection_lm=ScriptedLM(["unused"]), budget=40, proposer=Noop(),
                          merge="off", callbacks=[lambda e: ran.append((e.candidate, e.example))
                                                      if type(e).__name__ == "RolloutFinished" else None])
    res = asyncio.run(engine.run())
    direct = test_on == ()
    assert res.proposals.get("accepted", 0) == len(res.candidates) - 1
    assert (len(res.candidates) > 1) is direct
    assert (res.proposals.get("rejected: not better on minibatch", 0) == 0) is direct
    children = {c.candidate.id for c in res.candidates[1:]}
    val_ids = {e.id for e in task.valset}
    assert all(ex in val_ids for cid, ex in ran if cid in children)  # a direct child ran validation only


@pytest.mark.parametrize(("definitions", "seed"), [(0, 0), (8, 3)])  # (each differed with timing before the fix)
def test_rounds_of_edit_proposals_do_not_hang_on_timing(definitions, seed):
    """With proposals_per_round > 1, what the edit proposer remembers (the component whose first draft is made, the
    patterns no rule came for) is decided in plan order: runs whose LM calls end in other orders are the same run."""
    import asyncio

    task = sim.task(n_train=16, n_val=8, kinds=4)

    def once(latency: float):
        async def writer(messages, params):  # never answers for rule-3: a pattern no usable rule comes for
            user = messages[1]["content"]
            await asyncio.sleep(latency * (len(user) % 5))
            if "<current_instruction>" not in user or "need rule-3" in user:
                return "<rule></rule>"
            return _rule_writer(messages, params)

        engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=sim.SimTaskLM(latency=latency),
                              reflection_lm=ScriptedLM(writer), budget=300, proposer=Edit(definitions=definitions),
                              merge="off", proposals_per_round=4, max_concurrency=8, reflection_attempts=1, seed=seed)
        res = asyncio.run(engine.run())
        return res, [c.candidate.id for c in res.candidates], dict(res.proposals)

    runs = [once(latency) for latency in (0.0, 0.002, 0.001)]
    assert runs[0][1:] == runs[1][1:] == runs[2][1:]
    assert runs[0][0].rollouts_used == runs[1][0].rollouts_used == runs[2][0].rollouts_used
    assert runs[0][0].best_score > runs[0][0].seed_score
