"""Trims: before the search, the rewrite proposer's openings (`trim` of them) each drop one sentence (or line) of the
seed, with no reflection call, so that a sentence that hurts the task model can go (no reflection LM writes the
shorter text); the search after them goes as it would have gone without them."""

import re
import warnings

import gepetto
from gepetto.engine import events as ev
from gepetto.engine.proposers import drop_unit, instruction_units
from gepetto.testing import ScriptedLM
from gepetto.types import Example
from test_route import _metric  # (an exact match, with one free-text sentence)

SEED = "Work out the sum. Reply with the first number you see."


def test_units_are_lines_or_sentences_and_an_abbreviation_or_list_marker_ends_none():
    assert instruction_units(SEED) == ["Work out the sum.", "Reply with the first number you see."]
    assert drop_unit(SEED, "Reply with the first number you see.") == "Work out the sum."
    text = "Find the city, e.g. Paris. Return JSON! 1. Read it. Done?"
    assert instruction_units(text) == ["Find the city, e.g. Paris.", "Return JSON!", "1. Read it.", "Done?"]
    lines = "Steps:\n1. Read. Then think.\n\nAnswer: <n>"
    assert instruction_units(lines) == ["Steps:", "1. Read. Then think.", "Answer: <n>"]
    assert drop_unit(lines, "1. Read. Then think.") == "Steps:\n\nAnswer: <n>"
    assert instruction_units("One sentence only.") == ["One sentence only."]


def _examples(n, prefix):
    return [Example({"question": f"{i} + {i + 7}"}, gold=str(2 * i + 7), id=f"{prefix}-{i}") for i in range(n)]


def _solver(messages, params):
    """A task LM that sums the question unless told to reply with the first number (then it does that)."""
    system, user = messages[0]["content"], messages[-1]["content"]
    a, b = map(int, re.findall(r"\d+", user)[-2:])
    return str(a) if "first number" in system else str(a + b)


def _adder(messages, params):
    """A reflection LM that only ever adds to the instruction it is shown (as small ones do)."""
    current = re.search(r"```\n(.*?)\n```", messages[-1]["content"], re.S)
    return f"```\n{current.group(1) if current else SEED} Be careful.\n```"


def _run(**options):
    events = []
    result = gepetto.optimize(SEED, _examples(20, "train"), _metric, valset=_examples(10, "val"),
                              task_lm=ScriptedLM(_solver), reflection_lm=ScriptedLM(_adder), fewshot=0,
                              callbacks=events.append, **{"budget": 120, **options})  # the default: trim=4
    return result, events


def test_trims_drop_the_sentence_that_hurts_where_reflection_only_adds():
    result, events = _run()
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.name == "rewrite"
    trims = [e for e in events if isinstance(e, ev.ProposalTested) and e.origin == "trim"]
    assert trims and all(e.rule.startswith("dropped: ") for e in trims)
    first = next(e for e in events if isinstance(e, ev.ProposalTested))
    assert first.origin == "trim" and first.parent == 0  # the seed's units go first
    assert result.best_score == 1.0 and result.best_candidate["instruction"] == "Work out the sum."
    assert next(c for c in result.candidates if c.candidate == result.best_candidate).origin == "trim"
    # each unit of a parent is dropped once: no trim child is tested twice
    assert len({e.text for e in trims}) == len(trims)

    off, events = _run(proposer="auto(trim=0)")
    assert not [e for e in events if isinstance(e, ev.ProposalTested) and e.origin == "trim"]
    assert off.best_score == 0.0 and "first number" in off.best_candidate["instruction"]


def _careless(messages, params):
    """A task LM that needs every sentence of NEEDED (else it answers in words), and slips on some sums: the fewer,
    the more of the CARE sentences it is given."""
    system, user = messages[0]["content"], messages[-1]["content"]
    a, b = map(int, re.findall(r"\d+", user)[-2:])
    total = a + b + max(0, a % 4 - sum(c in system for c in CARE))
    if "Work out the sum." not in system or "number only" not in system:
        return f"The result is {total}."
    return str(total)


def _careful(messages, params):
    """A reflection LM that adds the first CARE sentence the instruction lacks."""
    text = re.search(r"<current_instruction>\n(.*?)\n</current_instruction>", messages[1]["content"], re.S).group(1)
    return f"<new_instruction>\n{text} {next((c for c in CARE if c not in text), '')}\n</new_instruction>"


NEEDED = "Work out the sum. Give the number only."
CARE = ("Add carefully.", "Check the carry.", "Verify the total.")


def test_trims_that_fail_leave_the_search_on_the_path_it_takes_without_them():
    def tested(trim):
        events = []
        used[trim] = gepetto.optimize(NEEDED, _examples(20, "train"), _metric, valset=_examples(20, "val"),
                         task_lm=ScriptedLM(_careless), reflection_lm=ScriptedLM(_careful), budget=150, fewshot=0,
                         merge="off", proposer=f"auto(trim={trim})", seed=2, callbacks=events.append).rollouts_used
        return [e for e in events if isinstance(e, ev.ProposalTested)]

    used: dict[int, int] = {}
    with_trims, without = tested(2), tested(0)
    trims = [e for e in with_trims if e.origin == "trim"]
    assert len(trims) == 2 and not any(e.accepted for e in trims) and with_trims[:2] == trims
    searched = with_trims[2:]
    assert len(searched) >= 2 and any(e.accepted for e in searched)
    assert searched == without[:len(searched)]  # (the budget the trims took ends it sooner)
    # each trim was cut once it was behind the seed on the validation examples it ran (chunks of 5, of 20)
    assert searched == without and used[2] - used[0] <= 2 * 10


def test_trim_given_to_the_auto_proposer_warns_on_the_labels_route():
    labels = ["a", "b"]
    train = [Example({"m": f"m{i}"}, gold=labels[i % 2], id=f"t{i}") for i in range(12)]
    val = [Example({"m": f"v{i}"}, gold=labels[i % 2], id=f"v{i}") for i in range(6)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gepetto.optimize("Answer a or b. Be short.", train, _metric, valset=val, task_lm=ScriptedLM(lambda m, p: "a"),
                         reflection_lm=ScriptedLM(lambda m, p: "<rule></rule>"), budget=30, proposer="auto(trim=2)")
    said = [str(w.message) for w in caught if "no effect" in str(w.message)]
    assert said == ["trim has no effect with the edit proposer the route chose"]


def test_a_run_with_trims_stopped_and_resumed_ends_as_the_uninterrupted_one(tmp_path):
    def stored(storage, stop=None):
        return _run(storage=storage, run="r", stop=stop, seed=3)

    whole, _ = stored(tmp_path / "whole.sqlite")
    storage = tmp_path / "s.sqlite"
    _, first = stored(storage, stop=lambda s: "stop" if s.iteration >= 3 else None)
    assert [e for e in first if isinstance(e, ev.ProposalTested) and e.origin == "trim"]  # (trims before the stop)
    again, _ = stored(storage)
    timeless = {"wall_seconds": 0, "ledger": 0}
    assert again.to_dict() | timeless == whole.to_dict() | timeless


def test_the_report_shows_a_trim_child_as_one(tmp_path):
    from gepetto.report import render_report
    from gepetto.store.snapshot import run_snapshot
    from gepetto.store.sqlite import RunStore

    _run(storage=tmp_path / "s.sqlite", run="r")
    page = render_report(run_snapshot(RunStore(tmp_path / "s.sqlite"), "r"))
    assert '<circle class="pt trim' in page and "pink trim" in page
    assert "a sentence dropped, no reflection" in page and "dropped: Reply with the first number you see." in page


def test_a_trim_whose_worst_case_does_not_fit_the_budget_is_not_tried():
    result, events = _run(budget=10 + 9)  # the seed's validation, then one trim's validation, less one
    assert not [e for e in events if isinstance(e, ev.ProposalTested)]
    assert result.rollouts_used <= 19
    result, events = _run(budget=10 + 10)
    assert len([e for e in events if isinstance(e, ev.ProposalTested) and e.origin == "trim"]) == 1
    assert result.rollouts_used <= 20
