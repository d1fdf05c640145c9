"""Few-shot demonstrations (engine/demos.py and the FewShot proposer): texts, choices and whole runs."""

import asyncio
import json
import os
import random
import re
import subprocess
import sys

import pytest

import gepetto
from gepetto.api import build_engine
from gepetto.engine import demos
from gepetto.engine.proposers import FewShot
from gepetto.lm.base import Completion
from gepetto.program import Rollout, TraceEntry, single_instruction
from gepetto.testing import ScriptedLM
from gepetto.types import Example, Score


def test_split_and_join_round_trip():
    ds = [demos.Demo("I lost my card", "report_lost_card"), demos.Demo("what's my apr", "apr")]
    text = demos.join("Classify the message.\nReply with the intent.", ds)
    assert text.endswith("Examples of correct answers:\nInput: I lost my card\nOutput: report_lost_card\n"
                         "Input: what's my apr\nOutput: apr")
    instruction, back = demos.split(text)
    assert instruction == "Classify the message.\nReply with the intent." and back == ds
    assert demos.join(instruction, back) == text
    assert demos.split("No examples here.") == ("No examples here.", [])
    assert demos.join("Plain.", []) == "Plain."


def test_a_block_we_did_not_write_is_left_whole():
    text = "Do it.\n\nExamples of correct answers:\nsomething else entirely"
    assert demos.split(text) == (text, [])


def test_add_keeps_at_most_max_demos_dropping_the_oldest():
    text = "Do it."
    for i in range(4):
        text = demos.add(text, demos.Demo(f"in {i}", f"out {i}"), max_demos=3)
    _, kept = demos.split(text)
    assert [d.input for d in kept] == ["in 1", "in 2", "in 3"]


def test_when_full_a_repeated_answer_goes_before_the_oldest():
    text = demos.join("Do it.", [demos.Demo("in 0", "a"), demos.Demo("in 1", "b"), demos.Demo("in 2", "b")])
    _, kept = demos.split(demos.add(text, demos.Demo("in 3", "c"), max_demos=3))
    assert [d.input for d in kept] == ["in 0", "in 2", "in 3"]  # "in 1" showed "b" twice over; "a" stays shown
    _, kept = demos.split(demos.add(text, demos.Demo("in 3", "a"), max_demos=3))
    assert [d.input for d in kept] == ["in 1", "in 2", "in 3"]  # all repeated: the oldest of them goes


def test_a_seed_may_bring_demonstrations_of_its_own_in_the_same_form():
    text = "Classify.\n\nExamples of correct answers:\nInput: hello\nOutput: greeting"
    assert demos.split(text) == ("Classify.", [demos.Demo("hello", "greeting")])
    assert demos.split(demos.join(text, [demos.Demo("bye", "farewell")]))[1] == [demos.Demo("bye", "farewell")]


def _solved(eid: str, inp: str, out: str, finish: str = "stop", component: str = "instruction") -> Rollout:
    return Rollout(eid, Score(1.0, "Correct."), out, [TraceEntry(component, inp, out, finish)])


def test_from_rollout_takes_the_components_call_on_one_line_and_skips_cut_answers():
    d = demos.from_rollout(_solved("e1", "two\nlines", "an  answer"), "instruction")
    assert d == demos.Demo("two lines", "an answer", "e1")
    assert demos.from_rollout(_solved("e2", "x", "y", finish="length"), "instruction") is None
    assert demos.from_rollout(_solved("e2", "x", "y", finish="end_turn"), "instruction") is not None  # a backend's word
    assert demos.from_rollout(_solved("e3", "x", "y", component="other"), "instruction") is None
    assert demos.from_rollout(_solved("e4", "x" * 600, "y"), "instruction") is None


def test_choose_prefers_the_missed_answer_and_avoids_shown_and_tested_examples():
    solved = [_solved("a", "msg a", "balance"), _solved("b", "msg b", "bill_balance"), _solved("c", "msg c", "apr")]
    rng = random.Random(0)
    for _ in range(5):
        assert demos.choose(solved, "instruction", [], "bill_balance", set(), rng).example_id == "b"
    # the wanted example is tested on: another one is chosen
    assert demos.choose(solved, "instruction", [], "bill_balance", {"b"}, rng).example_id in {"a", "c"}
    shown = [demos.Demo("msg a", "balance"), demos.Demo("msg c", "apr")]
    assert demos.choose(solved, "instruction", shown, "", {"b"}, rng) is None


def test_choose_prefers_inputs_like_the_mistakes():
    solved = [_solved(f"s{i}", text, f"out {i}") for i, text in enumerate([
        "I'd like to order three notebooks for my kids.", "Send me 12 pencils.", "A dozen muffins for 2 o'clock.",
        "Could I order nine plates?", "I want to buy five towels.", "Ten mugs with our logo, please."])]
    like = ["Hi, could I get a dozen eggs delivered tomorrow?"]
    picks = {demos.choose(solved, "instruction", [], "", set(), random.Random(i), like=like).example_id
             for i in range(20)}
    assert "s2" in picks and len(picks) <= demos.NEAREST  # the "dozen" one, among the few nearest
    # nothing in common: any of them
    assert demos.nearest({"a": demos.Demo("x y", "1"), "b": demos.Demo("z", "2")}, ["w"]) == ["a", "b"]



_NEAREST_PROBE = """
import random
from gepetto.engine.demos import Demo, nearest
openers = ("I have a question about", "Something is wrong with my", "Please help me with", "I need help with")
fillers = ("It started yesterday.", "This is urgent.", "Thanks in advance.", "Nothing in the FAQ helped.")
topics = ("billing", "shipping", "returns", "login", "privacy", "coupons")
for s in range(200):
    rng = random.Random(s)
    pool = {f"t{i}": Demo(f"Ticket {i}: {rng.choice(openers)} {rng.choice(topics)}. {rng.choice(fillers)}", "X")
            for i in rng.sample(range(60), rng.randint(3, 40))}
    like = [f"Ticket {rng.randrange(60)}: {rng.choice(openers)} {rng.choice(topics)}. {rng.choice(fillers)}"
            for _ in range(rng.randint(1, 4))]
    print(nearest(pool, like))
"""


def test_the_nearest_demonstrations_are_the_same_in_every_process():
    # templated inputs share whole sets of words: their scores tie, and a sum over a set of words in the order the
    # set iterates (it changes with the process's hash seed) broke those ties by rounding, so a resumed run (a new
    # process) could choose another demonstration than the run it continues
    outputs = {subprocess.run([sys.executable, "-c", _NEAREST_PROBE], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in range(6)}
    assert len(outputs) == 1 and outputs.pop().count("\n") == 200


# ---- whole runs ---------------------------------------------------------------------------------------------
# Messages of 4 kinds, each with its own label. The scripted task LM gets a "clear" message right always, and a
# "vague" one only when its system prompt demonstrates that label (any demonstration with `Output: <label>`);
# otherwise it answers "other". A rule can't help it: only examples do.
_MSG = re.compile(r"(clear|vague) message of kind (\d)")


def _label(kind: str) -> str:
    return f"label_{kind}"


def _examples(prefix: str, n: int) -> list[Example]:
    out = []
    for i in range(n):
        kind, clarity = str(i % 4), ("clear" if i % 8 < 4 else "vague")
        out.append(Example({"message": f"{clarity} message of kind {kind} (#{prefix}{i})"}, gold=_label(kind),
                           id=f"{prefix}{i}"))
    return out


def _metric(example, output, trace):
    answer = str(output).strip()
    if answer == example.gold:
        return Score(1.0, "Correct.")
    return Score(0.0, f"Wrong: expected {example.gold}.", pattern=f"answered {answer}, expected {example.gold}")


def _task_lm():
    def answer(messages, params):
        system, user = messages[0]["content"], messages[-1]["content"]
        clarity, kind = _MSG.search(user).groups()
        if clarity == "clear" or f"Output: {_label(kind)}" in system:
            return Completion(_label(kind), finish_reason="stop")
        return Completion("other", finish_reason="stop")

    return ScriptedLM(answer, name="kinds")


def _run(*, val=None, **options):
    train = _examples("t", 32)
    val = _examples("v", 16) if val is None else val
    reflection = ScriptedLM(lambda m, p: "<new_instruction>Classify the message carefully.</new_instruction>",
                            name="reflect")
    engine = build_engine({"instruction": "Classify the message. Reply with the label only."}, train, _metric,
                          valset=val, program=single_instruction(), task_lm=_task_lm(), reflection_lm=reflection,
                          budget=300, merge="off", seed=0, **options)
    return asyncio.run(engine.run()), reflection


@pytest.mark.parametrize("proposer", ["rewrite", "edit"])
def test_demonstrations_find_the_gain_rules_cannot(proposer):
    without, _ = _run(proposer=proposer, fewshot=0)
    with_demos, reflection = _run(proposer=proposer, fewshot=4)
    assert without.best_score == pytest.approx(0.5)  # only the clear half: the words never help
    assert with_demos.best_score >= 0.875
    assert with_demos.rollouts_used <= 300
    instruction, shown = demos.split(with_demos.best_candidate["instruction"])
    assert instruction.startswith("Classify the message") and 2 <= len(shown) <= 4
    # every demonstration is a training example the task LM got right, never a validation one
    assert all(re.search(r"\(#t\d+\)", d.input) and d.output.startswith("label_") for d in shown)
    # reflection never sees the demonstrations block
    assert all(demos.HEADER not in m["content"] for msgs, _ in reflection.calls for m in msgs)
    # the children that added one say so (CandidateRecord.origin, ProposalTested.origin)
    assert any(c.origin == "demo" for c in with_demos.candidates)
    assert not any(c.origin == "demo" for c in without.candidates)


def test_a_rewrite_keeps_the_parents_demonstrations():
    from gepetto.config import EngineConfig
    from gepetto.engine.proposers import parts

    cfg = EngineConfig(fewshot=2)
    text = demos.join("Classify.", [demos.Demo("vague message of kind 1 (#t5)", "label_1")])
    assert parts(cfg, text) == ("Classify.", [demos.Demo("vague message of kind 1 (#t5)", "label_1")])
    assert parts(EngineConfig(fewshot=0), text) == (text, [])  # fewshot off: the text is all instruction


def test_fewshot_runs_are_deterministic():
    a, _ = _run(proposer="edit", fewshot=3)
    b, _ = _run(proposer="edit", fewshot=3)
    assert a.best_candidate == b.best_candidate and a.rollouts_used == b.rollouts_used
    assert [c.candidate.id for c in a.candidates] == [c.candidate.id for c in b.candidates]


def test_demonstrations_never_come_from_validation_examples():
    train = _examples("t", 32)
    result, _ = _run(proposer="edit", fewshot=4, val=_examples("v", 8) + train[:16])  # half the train is val too
    shown = [d for c in result.candidates for d in demos.split(c.candidate["instruction"])[1]]
    assert shown and all(int(re.search(r"\(#t(\d+)\)", d.input).group(1)) >= 16 for d in shown)


def test_without_a_separate_valset_no_demonstration_is_proposed_and_a_warning_says_why():
    with pytest.warns(RuntimeWarning, match="every training example is also a validation example"):
        result, _ = _run(proposer="edit", fewshot=4, val=_examples("t", 32))
    assert not any(demos.HEADER in c.candidate["instruction"] for c in result.candidates)


def test_demonstrations_are_on_by_default_where_a_valset_is_apart():
    from gepetto.config import FEWSHOT, EngineConfig

    assert EngineConfig().fewshot == "fewshot" and EngineConfig().fewshot_k is None
    assert EngineConfig().demonstrations == FEWSHOT == 4
    assert EngineConfig(fewshot=0).demonstrations == 0
    result, _ = _run(proposer="rewrite")
    assert any(c.origin == "demo" for c in result.candidates) and result.best_score >= 0.875


def test_by_default_a_run_without_a_valset_apart_is_one_without_demonstrations_and_says_nothing():
    import warnings

    train = _examples("t", 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (an explicit fewshot warns: the test above)
        default, _ = _run(proposer="rewrite", val=train)
    off, _ = _run(proposer="rewrite", val=train, fewshot=0)
    timeless = {"wall_seconds": 0, "ledger": 0}
    assert default.to_dict() | timeless == off.to_dict() | timeless
    assert default.ledger.roles["reflection"].calls == off.ledger.roles["reflection"].calls
    assert not any(c.origin == "demo" for c in default.candidates)


def test_at_the_budgets_tail_a_last_proposal_is_made_without_a_demonstration():
    # a demonstration's test (minibatch + its gate_solved examples) no longer fits: the last proposal is tested on its
    # minibatch, so the budget is spent as it would be without few-shot
    from gepetto.engine.events import ProposalTested
    from gepetto.testing import sim

    task, seen = sim.task(n_train=6, n_val=6, kinds=2), []

    def run(**options):
        return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                                budget=30, seed=0, merge="off", proposer="rewrite(trim=0)", **options)

    result, off = run(callbacks=seen.append), run(fewshot=0)  # (no trims: they change the budget's tail)
    assert result.rollouts_used == off.rollouts_used == 30
    last = [e for e in seen if isinstance(e, ProposalTested)][-1]
    assert last.origin is None  # (3 + 6 + 6 would not fit in the 12 left; 3 + 3 + 6 does)


# ---- reflection on a text with demonstrations ------------------------------------------------------------
_LONG = ("please tell me which of the four kinds this rather long and winding customer message belongs to, "
         "since the order it is about went out late and the parcel that came was not what anyone had asked for")


_FIRST = "Classify the message. Reply with the label only."
_BETTER = "You sort customer messages into four kinds; think about the kind first, then reply with its label only."


def _copying_reflection():
    """Hands back the text it was shown as the current instruction with its first sentence reworded (as small
    models often do)."""
    def answer(messages, params):
        user = messages[1]["content"]
        current = user.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]
        return f"<new_instruction>{current.replace(_FIRST, _BETTER)}</new_instruction>"

    return ScriptedLM(answer, name="copy")


@pytest.mark.parametrize("fewshot", [0, 3])
def test_a_rewrite_keeps_the_demonstrations_and_is_no_echo_of_them(fewshot):
    from gepetto.engine.events import Outcome, ProposalTested, ReflectionAnswered

    train = [Example({"message": f"vague message of kind {k} (#t{k}) {_LONG}"}, gold=_label(str(k)), id=f"t{k}")
             for k in range(3)]
    shown = [demos.Demo(e.inputs["message"], e.gold) for e in train]  # the seed shows every training example
    seed = demos.join(_FIRST, shown)
    seen = []
    reflection = _copying_reflection()
    engine = build_engine({"instruction": seed}, train, _metric, valset=_examples("v", 8),
                          program=single_instruction(), reflection_lm=reflection, budget=40,
                          task_lm=ScriptedLM(lambda m, p: Completion("other", finish_reason="stop")),  # all wrong
                          merge="off", seed=0, fewshot=f"fewshot(k={fewshot}, share=0.0)", callbacks=seen.append,
                          proposer="auto(trim=4)" if fewshot else "auto(trim=0)")  # (trims of the seed's lines too)
    result = asyncio.run(engine.run())
    answers = [e for e in seen if isinstance(e, ReflectionAnswered)]
    assert answers
    if fewshot:  # reflection sees the instruction alone; the child gets the parent's demonstrations back
        assert all(demos.HEADER not in m["content"] for msgs, _ in reflection.calls for m in msgs)
        assert answers[0].rejected is None and Outcome.ECHO not in result.proposals
        tested = [e for e in seen if isinstance(e, ProposalTested)]
        rewrites = [e for e in tested if e.origin is None]
        assert rewrites and all(demos.split(e.text) == (_BETTER, shown) for e in rewrites)
        # a trim drops a sentence of the instruction and keeps the demonstrations too
        trims = [e for e in tested if e.origin == "trim"]
        assert trims and all(demos.split(e.text)[1] == shown for e in trims)
    else:  # the whole text is the instruction: what it hands back copies the shown examples, an echo
        assert answers[0].rejected is Outcome.ECHO


def test_a_proposer_of_ones_own_gets_demonstrations_beside_it():
    from gepetto.config import EngineConfig
    from gepetto.engine.proposers import Proposer
    from gepetto.parts import resolve

    class Mine(Proposer):
        async def propose(self, request):
            return None

    mine = Mine()
    assert resolve("proposer", mine, EngineConfig()) is mine  # by default only the built-ins get demonstrations
    assert resolve("proposer", mine, EngineConfig(fewshot="fewshot(share=0.3)")) is mine  # (k not set)
    wrapped = resolve("proposer", mine, EngineConfig(fewshot=2))
    assert isinstance(wrapped, FewShot) and wrapped.inner is mine and wrapped.test_size == 3 + 3

    class Duck:  # no base class: it only proposes, and gets the base's defaults
        async def propose(self, request):
            return None

    duck = resolve("proposer", Duck(), EngineConfig())
    assert isinstance(duck, Proposer) and duck.test_size is None and not duck.fits_test_room


def test_realtrack_names_a_fewshot_run_apart():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.realtrack import run_name

    assert run_name("demo", "edit", 0) == "rt-demo-edit-s0"
    assert run_name("demo", "edit", 0, fewshot=4) == "rt-demo-edit-fs4-s0"
    assert run_name("demo", "edit", 1, fewshot=4, suffix="v6fs") == "rt-demo-edit-s1-v6fs"  # as before the tag


# ---- FewShot(adaptive=True): the share learnt from how each kind of proposal fared ----------------------------
def test_the_demo_share_starts_at_the_given_share_and_follows_the_tests():
    from gepetto.engine.proposers import demo_share

    none = {"demo": [0, 0], "other": [0, 0]}
    assert demo_share(0.5, none) == pytest.approx(0.5) and demo_share(0.3, none) == pytest.approx(0.3)
    failing_demos = {"demo": [0, 10], "other": [5, 10]}
    assert demo_share(0.5, failing_demos) == pytest.approx((1 / 12) / (1 / 12 + 6 / 12))
    assert demo_share(0.5, {"demo": [6, 8], "other": [1, 8]}) > 0.75  # demonstrations help more: more of them
    assert demo_share(0.5, {"demo": [3, 10], "other": [3, 10]}) == pytest.approx(0.5)  # alike: as given
    assert demo_share(0.0, failing_demos) == 0.0 and demo_share(1.0, failing_demos) == 1.0


def _demo_tests(task_lm, *, adaptive):
    from gepetto.engine.events import ProposalTested

    seen = []
    reflection = ScriptedLM(lambda m, p: "<new_instruction>Classify the message carefully.</new_instruction>",
                            name="reflect")
    engine = build_engine({"instruction": "Classify the message. Reply with the label only."}, _examples("t", 32),
                          _metric, valset=_examples("v", 16), program=single_instruction(), task_lm=task_lm,
                          reflection_lm=reflection, budget=300, merge="off", seed=0,
                          fewshot=FewShot(k=4, adaptive=adaptive), callbacks=seen.append)
    result = asyncio.run(engine.run())
    return result, [e for e in seen if isinstance(e, ProposalTested) and e.origin == "demo"]


def test_the_learnt_share_keeps_demonstrations_where_they_help():
    result, shown = _demo_tests(_task_lm(), adaptive=True)  # only demonstrations help this task LM
    assert any(e.accepted for e in shown) and result.best_score >= 0.875


# ---- demonstrations written from golds ------------------------------------------------------------------------
def test_a_gold_is_written_the_way_the_task_lm_answers():
    assert demos.written_as("  bill\nbalance ", "anything") == "bill balance"
    assert demos.written_as({"city": "Paris"}, '{"city": "Lyon"}') == '{"city": "Paris"}'
    assert demos.written_as({"city": "Paris"}, '```json\n{"city": "Lyon"}\n```') == '{"city": "Paris"}'
    assert demos.written_as(["a"], "[]") == '["a"]'
    assert demos.written_as({"answer": "18"}, "First, 3 + 15 = 18. Answer: 18") is None  # prose: no JSON shown
    assert demos.written_as({"answer": "18"}, "") is None and demos.written_as(18, "18") is None
    assert demos.written_as("", "x") is None


def test_from_gold_needs_the_one_call_whose_answer_the_program_returns():
    one = Rollout("e1", Score(0.0, "Wrong."), '{"x": 1}', [TraceEntry("instruction", "two\nlines", '{"x": 1}')])
    assert demos.from_gold(one, "instruction", {"city": "Paris"}) == demos.Demo("two lines", '{"city": "Paris"}',
                                                                                   "e1")
    cut = Rollout("e1", Score(0.0, "Cut."), '{"x": ', [TraceEntry("instruction", "m", '{"x": ', "length")])
    assert demos.from_gold(cut, "instruction", {"city": "Paris"}) is not None  # the input is whole: its gold shows
    parsed = Rollout("e1", Score(0.0, "Wrong."), {"x": 1}, [TraceEntry("instruction", "m", '{"x": 1}')])
    assert demos.from_gold(parsed, "instruction", {"city": "Paris"}) is None  # the program changed the answer
    two = Rollout("e1", Score(0.0, "Wrong."), "b", [TraceEntry("plan", "m", "a"), TraceEntry("instruction", "a", "b")])
    assert demos.from_gold(two, "instruction", "c") is None  # a call's right answer is not the gold
    assert demos.from_gold(one, "other", {"city": "Paris"}) is None
    long = Rollout("e1", Score(0.0, "Wrong."), "y", [TraceEntry("instruction", "x" * 600, "y")])
    assert demos.from_gold(long, "instruction", "z") is None


def _shown_only_lm():
    """Answers a message's label only when the system prompt demonstrates that label: it never solves one alone."""
    def answer(messages, params):
        system, user = messages[0]["content"], messages[-1]["content"]
        kind = _MSG.search(user).group(2)
        return Completion(_label(kind) if f"Output: {_label(kind)}" in system else "other", finish_reason="stop")

    return ScriptedLM(answer, name="shown-only")


def _gold_run(fewshot, metric=_metric, proposer="auto"):
    reflection = ScriptedLM(lambda m, p: "<new_instruction>Classify the message carefully.</new_instruction>",
                            name="reflect")
    engine = build_engine({"instruction": "Classify the message. Reply with the label only."}, _examples("t", 32),
                          metric, valset=_examples("v", 16), program=single_instruction(), task_lm=_shown_only_lm(),
                          reflection_lm=reflection, budget=300, merge="off", seed=0, fewshot=fewshot,
                          proposer=proposer)
    return asyncio.run(engine.run())


def test_demonstrations_from_golds_where_no_example_is_solved():
    assert _gold_run("fewshot(k=4, gold=false)").best_score == 0.0  # nothing solved: nothing to demonstrate
    result = _gold_run("fewshot(k=4, gold=true)")
    assert result.best_score >= 0.75
    shown = demos.split(result.best_candidate["instruction"])[1]
    assert len(shown) >= 3 and all(re.search(r"\(#t\d+\)", d.input) and d.output.startswith("label_") for d in shown)
    # unset: on with whole rewrites, off with rule edits
    assert _gold_run("fewshot(k=4)", proposer="rewrite").best_score >= 0.75
    assert _gold_run("fewshot(k=4)", proposer="edit").best_score == 0.0


def test_a_mapping_gold_loses_the_fields_the_metric_does_not_need():
    from gepetto.testing import ScriptedLM as Scripted

    train = [Example({"message": f"order {i}"}, gold={"item": "cup", "quantity": i, "note": "a note"}, id=f"t{i}")
             for i in range(8)]

    def metric(example, output, trace):  # asks for the item and the quantity; a note is neither here nor there
        data = json.loads(output) if str(output).startswith("{") else {}
        ok = data.get("item") == "cup" and data.get("quantity") == example.gold["quantity"]
        return Score(1.0 if ok else 0.0, "Checked.")

    from gepetto.engine.events import ProposalTested

    seen: list = []
    engine = build_engine({"instruction": "Reply with JSON."}, train, metric, callbacks=seen.append, valset=[
        Example({"message": f"order {i}"}, gold={"item": "cup", "quantity": i, "note": ""}, id=f"v{i}")
        for i in range(10, 14)], program=single_instruction(), merge="off", seed=0, budget=60,
        task_lm=Scripted(lambda m, p: Completion('{"item": "mug"}', finish_reason="stop")), fewshot="fewshot(k=2)",
        reflection_lm=Scripted(lambda m, p: "<new_instruction>Reply with JSON only.</new_instruction>"))
    asyncio.run(engine.run())
    shown = [d for e in seen if isinstance(e, ProposalTested) and e.origin == "demo" for d in demos.split(e.text)[1]]
    assert shown and all(json.loads(d.output) == {"item": "cup", "quantity": int(d.input.split()[-1])}
                         for d in shown)


def test_a_gold_the_metric_does_not_score_perfect_is_never_shown():
    def strict(example, output, trace):  # the right answer is "Label: <gold>", not the bare gold
        return Score(1.0 if str(output).strip() == f"Label: {example.gold}" else 0.0, "Checked.")

    result = _gold_run("fewshot(k=4, gold=true)", metric=strict)
    assert not any(demos.HEADER in c.candidate["instruction"] for c in result.candidates)


def test_a_run_with_demonstrations_from_golds_resumes_to_the_uninterrupted_result(tmp_path):
    def run(storage, stop=None):
        reflection = ScriptedLM(lambda m, p: "<new_instruction>Classify the message carefully.</new_instruction>",
                                name="reflect")
        return gepetto.optimize({"instruction": "Classify the message. Reply with the label only."},
                                _examples("t", 32), _metric, valset=_examples("v", 16), program=single_instruction(),
                                task_lm=_shown_only_lm(), reflection_lm=reflection, budget=200, merge="off", seed=0,
                                fewshot="fewshot(k=4, gold=true)", storage=storage, run="r", stop=stop,
                                progress=False)

    whole = run(tmp_path / "whole.sqlite")
    assert any(c.origin == "demo" for c in whole.candidates) and whole.metric_checks > 0
    storage = tmp_path / "s.sqlite"
    part = run(storage, stop=lambda s: "iteration 3" if s.iteration >= 3 else None)
    assert part.iterations < whole.iterations
    final = run(storage)
    timeless = {"wall_seconds": 0, "ledger": 0}
    assert final.to_dict() | timeless == whole.to_dict() | timeless
