"""What the optimiser derives from what every user gives: the golds, the outputs, the scores and the feedback."""

import random

from gepetto.engine import answers, edits
from gepetto.engine.answers import NO_ANSWER, AnswerSet, Diagnosis
from gepetto.program import Rollout
from gepetto.types import Example, Score

LABELS = ["balance", "bill_due", "card_declined", "pin_change"]


def _examples(n=12):
    return [Example({"message": f"m{i}"}, gold=LABELS[i % len(LABELS)], id=f"e{i}") for i in range(n)]


def _plain_metric(example, output):
    """A metric as the README teaches it: one free-text sentence, no pattern."""
    if str(output).strip().lower() == example.gold:
        return Score(1.0, f"Correct: the intent is '{example.gold}'.")
    return Score(0.0, f"Incorrect: answered '{output}', the correct intent is '{example.gold}'.")


def test_golds_that_repeat_a_few_short_texts_are_a_closed_answer_set():
    found = answers.from_golds(_examples())
    assert found == AnswerSet(tuple(LABELS), "golds")


def test_unique_golds_numbers_records_and_long_texts_are_no_answer_set():
    assert answers.from_golds([Example({"q": i}, gold=f"answer-{i}") for i in range(12)]) is None  # all distinct
    assert answers.from_golds([Example({"q": i}, gold=i % 3) for i in range(12)]) is None  # not text
    assert answers.from_golds([Example({"q": i}, gold={"item": "egg"}) for i in range(12)]) is None
    long = "a reasonably long free text answer that says many things about it"
    assert answers.from_golds([Example({"q": i}, gold=long if i % 2 else "x") for i in range(12)]) is None
    assert answers.from_golds([Example({"q": i}) for i in range(12)]) is None  # no gold at all


def test_without_golds_the_solved_outputs_form_the_set():
    runs = [Rollout(f"e{i}", Score(1.0 if i % 3 else 0.0, "ok"), LABELS[i % 4]) for i in range(24)]
    found = answers.from_outputs(runs, 1.0)
    assert found is not None and set(found.answers) == set(LABELS)
    prose = [Rollout(f"e{i}", Score(1.0, "ok"), f"A long answer number {i} that explains itself.") for i in range(9)]
    assert answers.from_outputs(prose, 1.0) is None


def test_an_output_matches_its_answer_however_lightly_it_is_dressed():
    found = AnswerSet(tuple(LABELS), "golds")
    dressed = ["card_declined", "Card declined.", "'card-declined'", "Intent: card_declined", "I think card_declined"]
    for text in dressed:
        assert found.match(text) == "card_declined", text
    assert found.match("balance or bill_due") == ""  # two answers named: none
    assert found.match("bill_balance") == ""  # "balance" is not a word of "bill_balance"
    assert found.match("") == ""


def test_a_plain_user_metric_gives_confusions_without_any_pattern():
    examples = _examples()
    by_id = {e.id: e for e in examples}
    diag = Diagnosis(answers.from_golds(examples), by_id)
    wrong = Rollout("e2", _plain_metric(by_id["e2"], "balance"), "balance")
    assert diag.pattern(wrong) == "answered balance, expected card_declined"
    junk = Rollout("e3", _plain_metric(by_id["e3"], "{}"), "{}")
    assert diag.pattern(junk) == f"answered {NO_ANSWER}, expected pin_change"
    assert edits.expected_answer(diag.pattern(junk)) == "pin_change" and edits.wrong_answer(diag.pattern(junk)) == ""


def test_a_bare_float_metric_gives_confusions_too():
    examples = _examples()
    diag = Diagnosis(answers.from_golds(examples), {e.id: e for e in examples})
    r = Rollout("e1", Score.coerce(0.0), "pin_change")  # the automatic feedback line says nothing of answers
    assert diag.pattern(r) == "answered pin_change, expected bill_due"


def test_without_golds_the_right_answer_comes_from_the_feedback():
    found = AnswerSet(tuple(LABELS), "outputs")
    diag = Diagnosis(found, {})
    r = Rollout("x", Score(0.0, "Incorrect: answered 'balance', the correct intent is 'bill_due'."), "balance")
    assert diag.pattern(r) == "answered balance, expected bill_due"


def test_a_metrics_own_pattern_still_wins():
    examples = _examples()
    diag = Diagnosis(answers.from_golds(examples), {e.id: e for e in examples})
    r = Rollout("e2", Score(0.0, "wrong", pattern="missed the card"), "balance")
    assert diag.pattern(r) == "missed the card"


def test_free_text_feedback_forms_groups_once_its_particulars_are_masked():
    runs = [Rollout(f"e{i}", Score(0.0, f"Incorrect: you said '{i}', the answer is {i * 7}. Show your steps."),
                    str(i)) for i in range(6)]
    assert len({edits.pattern_of(r) for r in runs}) == 1
    assert edits.pattern_of(runs[0]) == "Incorrect: you said '…', the answer is N. Show your steps."


def test_the_draft_finds_answers_from_a_user_metric():
    """The rule draft's answers and positives come from derived confusions, as they did from Score.pattern."""
    examples = _examples(16)
    by_id = {e.id: e for e in examples}
    diag = Diagnosis(answers.from_golds(examples), by_id)
    runs = [Rollout(e.id, _plain_metric(e, out), out) for e in examples
            for out in [e.gold if int(e.id[1:]) % 3 else "balance"]]
    found = edits.positives(runs, "card_declined", set(), 1.0, random.Random(0), diagnosis=diag)
    assert found and all(by_id[r.example_id].gold == "card_declined" for r in found)


def test_reflection_sees_the_gold_when_a_bare_float_metric_says_nothing_of_it():
    from gepetto.engine.reflect import reflective_examples, with_gold
    from gepetto.program import TraceEntry

    ex = Example({"q": "12 + 30?"}, gold="42", id="q1")
    wrong = Rollout("q1", Score.coerce(0.0), "40", [TraceEntry("solve", "12 + 30?", "40")])
    (shown,) = reflective_examples([wrong], "solve", [ex])
    assert shown.feedback == "The output is wrong (score 0).\nExpected: 42"
    told = Rollout("q1", Score(0.0, "Incorrect: the answer is 42."), "40")
    assert with_gold(told.score.feedback, told, ex) == told.score.feedback  # already says it: nothing added
    right = Rollout("q1", Score.coerce(1.0), "42")
    assert with_gold(right.score.feedback, right, ex) == right.score.feedback


def test_the_final_answer_of_a_longer_output_is_the_one_it_names_last():
    yes_no = answers.AnswerSet(("no", "yes"), "golds")
    assert yes_no.final("No") == "no" and yes_no.final("Answer: Yes.") == "yes"
    assert yes_no.final("No, wait: the red box holds it, so yes.\nAnswer: no") == "no"
    assert yes_no.final("I cannot tell.") == ""


def test_outputs_that_are_nearly_one_answer_while_the_golds_are_not_are_a_constant_answer():
    yes_no = answers.AnswerSet(("no", "yes"), "golds")
    golds = ["yes"] * 7 + ["no"] * 13
    found = answers.constant_answer(yes_no, ["Thinking... Answer: No"] * 19 + ["Answer: yes"], golds)
    assert found is not None and (found.answer, found.given, found.of) == ("no", 19, 20)
    assert found.score == 0.65 and found.scores[:7] == (0.0,) * 7
    assert answers.constant_answer(yes_no, ["no"] * 15 + ["yes"] * 5, golds) is None  # 75%: not nearly constant
    assert answers.constant_answer(yes_no, ["no"] * 20, ["no"] * 20) is None  # the golds are just as constant
    assert answers.constant_answer(answers.AnswerSet(("no", "yes"), "outputs"), ["no"] * 20, golds) is None


def test_a_candidate_that_answers_one_constant_answer_is_no_gain_unless_it_beats_that_answer():
    """A logic-puzzle task: the seed's "Think briefly" makes the task LM reason without ever ending on an answer (it
    scores 0.1); the seed without it (a trim) answers "no" to everything, which scores what always answering "no"
    scores (0.6): a format repair that lands on the majority answer. It is kept in the pool, never returned as the
    best, and the result says why."""
    import asyncio

    from gepetto.api import build_engine
    from gepetto.program import single_instruction
    from gepetto.testing import ScriptedLM
    from gepetto.types import Candidate, Example, Score

    def examples(split, n):
        return [Example({"question": f"{split} puzzle {i}"}, gold="yes" if i % 5 < 2 else "no", id=f"{split}-{i}")
                for i in range(n)]

    train, val = examples("train", 20), examples("val", 20)

    def task(messages, params):
        system, user = messages[0]["content"], messages[-1]["content"]
        if "Think briefly" in system:  # reasons on and on; one in ten ends well
            i = int(user.rsplit(" ", 1)[1])
            return "Let me think. The boxes..." + ("\nAnswer: " + ("yes" if i % 5 < 2 else "no") if i % 10 == 0 else "")
        return "Answer: No"

    def metric(example, output, trace):
        said = str(output).rsplit("Answer:", 1)[1].strip().lower() if "Answer:" in str(output) else ""
        ok = said == example.gold
        return Score(float(ok), "Correct." if ok else f"Incorrect: the answer is {example.gold}.")

    seed = Candidate(instruction="Answer the question. Think briefly, then end with a final line 'Answer: <answer>'.")
    rewriter = ScriptedLM(lambda m, p: "<new_instruction>Answer the question.</new_instruction>")
    engine = build_engine(seed, train, metric, valset=val, program=single_instruction(), task_lm=ScriptedLM(task),
                          reflection_lm=rewriter, budget=120, merge="off", fewshot="off")
    res = asyncio.run(engine.run())
    trimmed = [c for c in res.candidates if c.origin == "trim"]
    assert trimmed and trimmed[0].mean == 0.6 > res.seed_score == 0.1
    assert trimmed[0].constant is not None and trimmed[0].constant.answer == "no" and not trimmed[0].evident
    assert res.best_index == 0 and res.best_candidate == seed  # not counted as a gain
    assert (f"candidate {trimmed[0].index} (validation 0.600) answers 'no' on 20 of 20 validation examples; always "
            "answering it scores 0.600 there: not counted as a gain") in res.summary()
