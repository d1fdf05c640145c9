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
