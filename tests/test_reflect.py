"""Parsing and vetting of reflection answers: bad proposals never reach a rollout."""

import pytest

from gepetto.engine.events import Outcome
from gepetto.engine.reflect import (
    ReflectionExample,
    build_prompt,
    clip,
    echo_fraction,
    parse_proposal,
    reflective_examples,
    vet,
)
from gepetto.program import Rollout, TraceEntry
from gepetto.types import Example, Score

CURRENT = "Read the customer's message and say what it is about."
EXAMPLES = [
    ReflectionExample("I was charged twice for the same order last Tuesday evening.", "It is about money.",
                      "Wrong: expected 'billing'.", 0.0),
    ReflectionExample("The vase arrived smashed into pieces and the box was soaked.", "Shipping problem.",
                      "Right team but other words.", 0.3),
]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("<new_instruction>Answer with one word.</new_instruction>", "Answer with one word."),
        ("Some thinking.\n<new_instruction>\nAnswer with one word.\n</new_instruction>\n", "Answer with one word."),
        ("<NEW_INSTRUCTION>Answer briefly.", "Answer briefly."),  # unclosed tag: take the rest
        ("Here it is:\n```\nAnswer with one word.\n```\nHope it helps", "Answer with one word."),
        ("```text\nshort\n```\n```\nThe longest fenced block wins.\n```", "The longest fenced block wins."),
        ("Here is the new instruction:\nYou route messages to teams.", "You route messages to teams."),
        ("You route messages to teams.", "You route messages to teams."),  # no marker at all: whole answer
    ],
)
def test_parse_proposal(raw, expected):
    assert parse_proposal(raw) == expected


GOOD = ("You route customer messages to a team. Reply with exactly one word: account, billing, shipping or "
        "technical. Refunds always go to billing.")


@pytest.mark.parametrize(
    ("raw", "finish", "reason"),
    [
        ("", "stop", Outcome.EMPTY),
        ("<new_instruction></new_instruction>", "stop", Outcome.EMPTY),
        (f"<new_instruction>{GOOD}", "length", Outcome.TRUNCATED),
        (f"<new_instruction>{CURRENT}</new_instruction>", "stop", Outcome.UNCHANGED),
        (f"<new_instruction>{CURRENT.upper()}  </new_instruction>", "stop", Outcome.UNCHANGED),
        ("Certainly! Please provide the inputs you would like me to classify.", "stop", Outcome.CHAT_REPLY),
        ("<new_instruction>Could you please provide more details about the task?</new_instruction>", "stop",
         Outcome.CHAT_REPLY),
        ("<new_instruction>I was charged twice for the same order last Tuesday evening.</new_instruction>",
         "stop", Outcome.ECHO),
        (f"<new_instruction>{GOOD}</new_instruction>", "stop", None),
    ],
)
def test_vet(raw, finish, reason):
    assert vet(raw, finish, CURRENT, EXAMPLES).rejected is reason


def test_echo_fraction_is_low_for_a_real_instruction():
    assert echo_fraction(GOOD, EXAMPLES) == 0.0
    assert echo_fraction(EXAMPLES[0].inputs, EXAMPLES) == 1.0


def test_prompt_is_capped_whatever_the_trace_size():
    huge = ReflectionExample("x" * 200_000, "y" * 100_000, "z" * 50_000, 0.0)
    messages = build_prompt(CURRENT, [huge] * 3, max_chars=6000)
    assert len(messages[1]["content"]) < 9000
    assert CURRENT in messages[1]["content"]
    assert "<new_instruction>" in messages[1]["content"]


def test_clip_keeps_head_and_tail():
    text = "HEAD" + "." * 1000 + "TAIL"
    out = clip(text, 100)
    assert out.startswith("HEAD") and out.endswith("TAIL") and len(out) < 200


def test_reflection_sees_only_its_component_and_failures_first():
    runs = [
        Rollout("e1", Score(1.0, "ok"), "x", [TraceEntry("a", "in-a1", "out-a1"), TraceEntry("b", "in-b1", "out-b1")]),
        Rollout("e2", Score(0.0, "bad"), "y", [TraceEntry("a", "in-a2", "out-a2")]),
        Rollout("e3", Score(0.0, "raised"), None, [], error="ValueError: boom"),
    ]
    examples = [Example({"q": f"question {i}"}, id=f"e{i}") for i in (1, 2, 3)]
    b = reflective_examples(runs, "b", examples)
    assert b[-1].inputs == "in-b1" and not b[-1].whole_run
    # where `b` left no trace, reflection sees the whole run: the example's inputs, the output or the error
    e2, e3 = sorted(b[:2], key=lambda e: e.inputs)
    assert e2.whole_run and (e2.inputs, e2.output, e2.feedback) == ("question 2", "y", "bad")
    assert e3.whole_run and e3.inputs == "question 3" and "ValueError: boom" in e3.output
    a = reflective_examples(runs, "a", examples)
    assert [e.score for e in a] == [0.0, 0.0, 1.0]
    assert [e.whole_run for e in a] == [False, True, False]  # at equal score, its own trace first
    assert all("in-b" not in e.inputs for e in a)


def test_a_looping_answer_is_salvaged_when_cut_off():
    loop = "Reply with JSON. The item is the thing ordered. " + "The order should be extracted. " * 30
    proposal = vet(f"<new_instruction>{loop}", "length", CURRENT, EXAMPLES)
    assert proposal.rejected is None
    assert proposal.text.count("The order should be extracted.") == 1
    assert proposal.text.startswith("Reply with JSON.")
    assert vet("<new_instruction>A long instruction that was simply cut in the mid", "length", CURRENT,
               EXAMPLES).rejected is Outcome.TRUNCATED


def test_lessons_block_is_not_part_of_the_instruction():
    raw = "Lessons:\n- quantities are integers\n- a dozen is 12\n\nYou extract orders as JSON."
    assert parse_proposal(raw) == "You extract orders as JSON."
    tagged = "Lessons:\n1. a dozen is 12\n<new_instruction>You extract orders.</new_instruction>"
    assert parse_proposal(tagged) == "You extract orders."


def test_unchanged_retry_asks_to_apply_the_models_own_lessons():
    from gepetto.engine.reflect import lessons, retry_messages

    raw = f"Lessons:\n1. 'half a dozen' means 6\n- items are singular\n\n<new_instruction>{CURRENT}</new_instruction>"
    assert lessons(raw) == ["'half a dozen' means 6", "items are singular"]
    msgs = retry_messages([{"role": "user", "content": "q"}], raw, Outcome.UNCHANGED)
    assert msgs[-2]["role"] == "assistant"
    assert "- 'half a dozen' means 6" in msgs[-1]["content"] and "explicit rules" in msgs[-1]["content"]
    asked = [{"role": "user", "content": "q"}]
    assert retry_messages(asked, raw, Outcome.TRUNCATED) == asked


def test_prompt_cap_holds_with_many_examples_and_counts_the_current_text():
    many = [ReflectionExample("input " * 80, "output " * 40, "feedback " * 40, 0.0) for _ in range(40)]
    current = "Do the task well. " * 60  # about 1,100 characters
    user = build_prompt(current, many, max_chars=6000)[1]["content"]
    assert current.strip() in user  # the current text is shown whole
    assert len(user) < 6000 + 1500  # the cap (plus our fixed wording) holds with 40 examples
    assert user.count("=== Example") >= 1


def test_proposals_carrying_our_scaffolding_are_rejected():
    raw = "<new_instruction>Answer with one word.\n[... 286 characters cut ...]\nBe brief.</new_instruction>"
    assert vet(raw, "stop", CURRENT, EXAMPLES).rejected is Outcome.SCAFFOLDING
    # our tag's name without its brackets, as the demo's 1.5B reflection LM wrote once when asked to shorten
    raw = '<new_instruction>Reply with JSON. Use the "current_instruction" field for guidance.</new_instruction>'
    assert vet(raw, "stop", CURRENT, EXAMPLES).rejected is Outcome.SCAFFOLDING
    assert not vet("<new_instruction>Reply with JSON: the current instruction is yours.</new_instruction>", "stop",
                   CURRENT, EXAMPLES).rejected


def test_an_answer_that_copies_an_example_block_before_its_lessons_gives_what_follows_them():
    # seen on SNIPS: no tags, a copied example with its feedback, the lessons, then the instruction
    raw = ("You extract slots.\n\nExample: \"Rain in Oslo?\"\nAnswer: {\"city\": \"Oslo\"}\n\nFeedback:\n"
           "Partly correct (0.33): answered '{}'.\n\nLessons:\n- extract only the slots listed\n\n"
           "New instruction:\nYou extract the listed slots as JSON.")
    assert parse_proposal(raw) == "You extract the listed slots as JSON."
    assert parse_proposal("You extract slots as JSON.\n\nLessons:\n- a dozen is 12") == "You extract slots as JSON."


@pytest.mark.parametrize(
    "tail",
    ["\nFeedback:\nThe assistant's output is incorrect (score 0.00)\nExpected:",  # seen on SNIPS, accepted once
     "\nFeedback: Incorrect: answered 'Oslo'.", " A wrong answer scores low (score 0.00)."],
)
def test_our_example_blocks_rewritten_without_brackets_are_scaffolding(tail):
    assert vet(f"<new_instruction>{GOOD}{tail}</new_instruction>", "stop", CURRENT, EXAMPLES).rejected is \
        Outcome.SCAFFOLDING


def test_a_feedback_line_the_task_itself_asks_for_and_a_lessons_list_are_kept():
    current = "You grade essays. Write two lines:\nGrade: A-F\nFeedback: one sentence."
    child = current + "\nLessons:\n- A grade of A needs a thesis."
    assert vet(f"<new_instruction>{child}</new_instruction>", "stop", current, EXAMPLES).rejected is None



def test_a_new_instruction_heading_inside_the_tags_gives_what_follows_it():
    # seen on SNIPS (bare float, seed 2): the lessons and our answer's heading inside the tags, kept as the prompt
    inner = ("Lessons:\n1. Temperature should be in Celsius.\n\nNew instruction:\n"
             "Extract the slots from the request as JSON.")
    assert parse_proposal(f"<new_instruction>{inner}</new_instruction>") == \
        "Extract the slots from the request as JSON."
    # a heading with nothing after it, or words that only mention a new prompt, are left alone
    assert parse_proposal("<new_instruction>Answer briefly.\nNew instruction:</new_instruction>") == \
        "Answer briefly.\nNew instruction:"
    kept = "When the user asks for a new prompt: write one."
    assert parse_proposal(f"<new_instruction>{kept}</new_instruction>") == kept


def test_every_request_of_a_run_starts_with_the_same_text():
    # the job is the system message, the same whatever the instruction and examples: a backend that keeps
    # prompt prefixes reads it once a run; the answer's form comes last, after the examples
    one = build_prompt(CURRENT, EXAMPLES)
    other = build_prompt("Say which team should answer.", EXAMPLES[:1])
    assert one[0] == other[0] and "Keep what already works" in one[0]["content"]
    assert one[1]["content"].index(EXAMPLES[0].inputs) < one[1]["content"].index('First write "Lessons:"')
    assert one[1]["content"].rstrip().endswith("nothing after </new_instruction>.")
