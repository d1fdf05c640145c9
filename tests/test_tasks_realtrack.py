"""Real-track tasks (CLINC150 intents, SNIPS slots): splits, seeds, and metrics that degenerate outputs cannot game."""

import json

import pytest

from gepetto.tasks import default_data_dir, hwu64, load_task
from gepetto.tasks.intents import labels, normalize_label
from gepetto.types import Example

NAMES = ["clinc-banking", "clinc-credit-oos", "clinc-meta", "clinc-travel", "clinc-utility", "snips-restaurant",
         "snips-weather"]
pytestmark = pytest.mark.skipif(not (default_data_dir() / "clinc150").is_dir(), reason="no ../shared/data here")


@pytest.fixture(scope="module", params=NAMES)
def task(request):
    return load_task(request.param)


def test_splits_are_disjoint_with_unique_ids(task):
    parts = [task.trainset, task.valset, task.testset]
    ids = [e.id for p in parts for e in p]
    assert len(ids) == len(set(ids))
    texts = [{e["message"].lower() for e in p} for p in parts]
    assert not (texts[0] & texts[2]) and not (texts[1] & texts[2]) and not (texts[0] & texts[1])
    assert len(task.testset) >= 90 and len(task.valset) == 30 and len(task.trainset) == 60


def test_degenerate_outputs_score_zero(task):
    for ex in task.testset[:20]:
        gold_out = ex.gold if isinstance(ex.gold, str) else json.dumps(ex.gold)
        assert task.metric(ex, gold_out, []).value == 1.0
        if isinstance(ex.gold, dict) and not ex.gold:
            continue
        for junk in ["", "{}", ex["message"], task.seed_candidate["instruction"], "null", "[]"]:
            assert task.metric(ex, junk, []).value == 0.0, junk


def test_seed_states_task_labels_and_format_and_expert_adds_definitions(task):
    seed, expert = task.seed_candidate["instruction"], task.expert_candidate["instruction"]
    assert "Reply with only" in seed and "Reply with only" in expert
    assert len(expert) > len(seed)
    if task.name.startswith("clinc"):
        domain = {"clinc-banking": "banking", "clinc-credit_cards-oos": "credit_cards"}.get(task.name, task.name[6:])
        for lab in labels(domain, "oos" in task.name):
            assert lab in seed and lab in expert


def test_the_trivial_baseline_is_weak(task):
    score = sum(task.metric(e, task.baseline, []).value for e in task.testset) / len(task.testset)
    assert score <= 0.25


def test_clinc_answers_listing_labels_or_with_extra_words_score_zero():
    task = load_task("clinc-banking")
    ex = next(e for e in task.testset if e.gold == "balance")
    assert task.metric(ex, "balance, bill_balance", []).value == 0.0
    assert task.metric(ex, "The customer wants to know their balance", []).value == 0.0
    assert task.metric(ex, "Intent: balance.", []).value == 1.0
    wrong = task.metric(ex, "bill_balance", [])
    assert wrong.value == 0.0 and wrong.pattern == "answered bill_balance, expected balance"
    assert normalize_label(" `Bill Balance` ") == "bill_balance"
    invalid = task.metric(ex, "balance_inquiry", [])  # no label at all: one pattern, the right answer in the feedback
    assert invalid.value == 0.0 and invalid.pattern == "not a valid intent name"
    assert "not one of the intents" in invalid.feedback and "the right intent is balance" in invalid.feedback


def test_clinc_expert_forms_carry_the_same_definitions():
    from gepetto.tasks.intents import DEFINITIONS, expert_instruction, seed_instruction

    rules = expert_instruction("banking")
    assert rules.startswith(seed_instruction("banking"))
    assert "- If the customer asks for the bank's routing number, answer routing." in rules
    defs = expert_instruction("banking", form="definitions")
    for name, text in DEFINITIONS["banking"].items():
        assert text in rules and text in defs and f"- {name}: the customer {text}" in defs
    assert "out_of_scope." in expert_instruction("work", oos=True).splitlines()[-1]
    with pytest.raises(ValueError, match="form"):
        expert_instruction("banking", form="prose")


def test_clinc_subset_uses_only_its_intents_and_rejects_unknown_subsets():
    from gepetto.tasks.intents import SUBSETS

    task = load_task("clinc-banking8")
    wanted = set(SUBSETS["banking8"])
    for part in (task.trainset, task.valset, task.testset):
        assert {e.gold for e in part} == wanted
    assert "routing" not in task.seed_candidate["instruction"] and "min_payment" in task.seed_candidate["instruction"]
    ex = task.testset[0]
    assert task.metric(ex, "routing", []).value == 0.0  # a banking intent outside the subset is not a label
    with pytest.raises(ValueError, match="subset"):
        load_task("clinc-banking", subset="nope")


def test_the_user_sized_small_talk_family_is_balanced_and_its_locked_split_holds_no_dev_message():
    from collections import Counter

    from gepetto.tasks.intents import SUBSETS

    dev, locked = load_task("clinc-smalltalk8"), load_task("clinc-smalltalk8", test_split="locked")
    assert [len(dev.trainset), len(dev.valset), len(dev.testset)] == [24, 40, 80]  # the sizes of a user's family
    for part in (dev.trainset, dev.valset, dev.testset):
        assert set(Counter(e.gold for e in part).values()) == {len(part) // 8}  # balanced over the eight intents
        assert {e.gold for e in part} == set(SUBSETS["smalltalk8"])
    assert len(locked.testset) == 160 and not {e.id for e in locked.testset} & {e.id for e in dev.testset}
    assert locked.trainset == dev.trainset and locked.valset == dev.valset
    instruction = dev.seed_candidate["instruction"]
    assert "small talk intents" in instruction and "greeting" not in instruction  # only the subset's names
    expert = dev.expert_candidate["instruction"]
    assert expert.startswith(instruction) and expert.count("\n- If the customer ") == 8
    ex = dev.testset[0]
    for junk in ["", "{}", ex["message"], instruction, "greeting"]:  # "greeting" is small talk, not one of the eight
        assert dev.metric(ex, junk, []).value == 0.0


def test_clinc_oos_has_out_of_scope_examples_in_every_split():
    task = load_task("clinc-credit-oos")
    for part in (task.trainset, task.valset, task.testset):
        share = sum(e.gold == "out_of_scope" for e in part) / len(part)
        assert 0.15 <= share <= 0.25


def test_snips_f1_partial_credit_and_patterns():
    task = load_task("snips-restaurant")
    ex = Example({"message": "book a table for 4 at a pub in Boston"},
                 gold={"party_size_number": "4", "restaurant_type": "pub", "city": "Boston"}, id="t")
    full = task.metric(ex, '{"party_size_number": "4", "restaurant_type": "pub", "city": "boston"}', [])
    assert full.value == 1.0
    part = task.metric(ex, '```json\n{"party_size_number": "4", "city": "Boston"}\n```', [])
    assert part.value == pytest.approx(0.8) and part.pattern == "missed restaurant_type"
    extra = task.metric(ex, '{"party_size_number": "4", "restaurant_type": "pub", "city": "Boston", '
                            '"cuisine": "pub food"}', [])
    assert 0.8 < extra.value < 1.0 and extra.pattern == "invented cuisine"
    assert task.metric(ex, '{"table": "4"}', []).value == 0.0  # not a slot name
    assert task.metric(ex, '{"party_size_number": 4, "city": ["Boston"], "restaurant_type": "pub"}', []).value == 1.0


def test_snips_says_when_the_reply_was_cut_off():
    from gepetto.program import TraceEntry

    task = load_task("snips-restaurant")
    ex = task.valset[0]
    cut = task.metric(ex, '{\n  "city": "Paris",\n  "country": "Fr', [TraceEntry("instruction", "x", "y", "length")])
    assert cut.value == 0.0 and cut.pattern == "reply too long, JSON cut off"


@pytest.mark.skipif(not (default_data_dir() / "hwu64").is_dir(), reason="no hwu64 data here")
@pytest.mark.parametrize("name, n_test", [("hwu-iot", 120), ("hwu-email", 120), ("hwu-qa", 120), ("hwu-leisure", 80),
                                                   ("hwu-daily", 80)])
def test_hwu_tasks_split_the_folds_without_overlap_and_score_degenerate_outputs_zero(name, n_test):
    dev, locked = load_task(name), load_task(name, test_split="locked")
    assert (len(dev.trainset), len(dev.valset), len(dev.testset), len(locked.testset)) == (24, 40, n_test, 240)
    assert [e.id for e in dev.trainset + dev.valset] == [e.id for e in locked.trainset + locked.valset]
    texts = [{e["message"].lower() for e in part} for part in (dev.trainset, dev.valset, dev.testset, locked.testset)]
    assert all(not (texts[i] & texts[j]) for i in range(4) for j in range(i + 1, 4))  # no text in two splits
    golds = {e.gold for e in dev.testset}
    assert golds == set(hwu64.labels(name.removeprefix("hwu-"))) == {e.gold for e in dev.trainset}
    for ex in dev.testset[:20]:
        assert dev.metric(ex, ex.gold, []).value == 1.0
        for junk in ["", "{}", ex["message"], dev.seed_candidate["instruction"], "null", ", ".join(sorted(golds))]:
            assert dev.metric(ex, junk, []).value == 0.0, junk
    seed, expert = dev.seed_candidate["instruction"], dev.expert_candidate["instruction"]
    assert all(g in seed for g in golds) and expert.startswith(seed)
    assert expert.count("\n- If the user ") == len(golds)  # one hand-written definition per intent
    score = sum(dev.metric(e, dev.baseline, []).value for e in dev.testset) / len(dev.testset)
    assert score <= 0.25


def test_a_family_of_scenarios_takes_their_intents_together():
    task = load_task("hwu-leisure")
    assert hwu64.labels("leisure") == sorted([*hwu64.labels("music"), *hwu64.labels("recommendation"),
                                             *hwu64.labels("takeaway")])
    assert len(hwu64.labels("leisure")) == 8 and "leisure intents" in task.seed_candidate["instruction"]
    with pytest.raises(ValueError, match="leisure"):  # the error lists families among the known names
        load_task("hwu-iot", scenario="nope")


@pytest.mark.skipif(not (default_data_dir() / "hwu64").is_dir(), reason="no hwu64 data here")
def test_the_routed_program_runs_its_two_steps_and_its_feedback_names_the_step_that_erred():
    import asyncio

    from gepetto.program import run_rollout
    from gepetto.tasks import routed
    from gepetto.testing import ScriptedLM

    task = load_task("hwu-routed")
    assert (len(task.trainset), len(task.valset), len(task.testset)) == (40, 40, 120)
    assert set(task.seed_candidate) == {"router", "intent"} == set(task.expert_candidate)
    assert task.expert_candidate["intent"].count("\n- If the user ") == 16
    ex = next(e for e in task.testset if e.gold == "email_query")

    def lm(area, intent):
        return ScriptedLM(lambda m, p: area if "areas" in m[0]["content"] else intent)

    def rollout(area, intent):
        return asyncio.run(run_rollout(task.program, task.metric, task.seed_candidate, ex, lm(area, intent)))

    right = rollout("email", "email_query")
    assert right.score.value == 1.0 and [t.component for t in right.trace] == ["router", "intent"]
    assert "Intents: email_addcontact, email_query, email_querycontact, email_sendemail" in right.trace[1].inputs
    wrong_area = rollout("lists", "lists_query")
    assert wrong_area.score.value == 0.0 and "The router answered 'lists', but the message is about email" in \
        wrong_area.score.feedback
    wrong_intent = rollout("email", "email_sendemail")
    assert wrong_intent.score.value == 0.0 and "The router was right (email); the intent step answered" in \
        wrong_intent.score.feedback
    lost = rollout("weather", "email_query")  # no area named: the intent step chooses among all 16
    assert lost.trace[1].inputs.count("_") >= 16 and lost.score.value == 1.0
    for junk in ["", "{}", ex["message"], "email", "email_query, email_sendemail"]:
        assert task.metric(ex, junk, []).value == 0.0
    assert routed.AREAS.keys() == set(routed.ROUTED)


@pytest.mark.skipif(not (default_data_dir() / "snips").is_dir(), reason="no snips data here")
def test_the_snips_routed_program_gives_the_extractor_the_named_intents_slots_and_its_feedback_names_the_step():
    import asyncio

    from gepetto.program import run_rollout
    from gepetto.tasks import snips_routed
    from gepetto.testing import ScriptedLM

    task = load_task("snips-routed")
    locked = load_task("snips-routed", test_split="locked")
    assert (len(task.trainset), len(task.valset), len(task.testset), len(locked.testset)) == (42, 42, 140, 210)
    ids = [e.id for e in task.trainset + task.valset + task.testset + locked.testset]
    assert len(set(ids)) == len(ids)  # no message in two splits
    assert set(task.seed_candidate) == {"router", "extractor"} == set(task.expert_candidate)
    assert all(task.expert_candidate[c].startswith(task.seed_candidate[c]) for c in task.seed_candidate)
    assert task.expert_candidate["router"].count("\n- If the message is about ") == 7
    ex = next(e for e in task.testset if e.gold["intent"] == "get_weather" and len(e.gold["slots"]) >= 2)
    gold = json.dumps(ex.gold["slots"])

    def rollout(intent, slots):
        lm = ScriptedLM(lambda m, p: intent if "kind of request" in m[0]["content"] else slots)
        return asyncio.run(run_rollout(task.program, task.metric, task.seed_candidate, ex, lm))

    right = rollout("get_weather", gold)
    assert right.score.value == 1.0 and [t.component for t in right.trace] == ["router", "extractor"]
    assert "Slot names: city, condition_description" in right.trace[1].inputs  # the weather slots only
    wrong_route = rollout("rate_book", "{}")
    assert wrong_route.score.value == 0.0
    assert "The router answered 'rate_book', but the request is get_weather" in wrong_route.score.feedback
    half = rollout("get_weather", json.dumps(dict(list(ex.gold["slots"].items())[:1])))
    assert 0 < half.score.value < 1 and "The router was right; the extractor missed" in half.score.feedback
    lost = rollout("weather please", gold)  # no intent named: every slot name is shown
    assert lost.trace[1].inputs.count(",") >= 30
    for junk in ["", "{}", ex.inputs["message"], "get_weather", '{"city": "nowhere at all"}']:
        assert task.metric(ex, junk, []).value == 0.0, junk
    assert set(snips_routed.SNIPS_NAMES) == set(snips_routed.INTENTS)
