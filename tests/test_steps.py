"""Inner steps that answer from a closed set of their own (a router before the step that answers): found from the
seed's validation, given rules whose right answer comes from the feedback, the other steps left as they were."""

import json
import re

import gepetto
from gepetto.engine import events as ev
from gepetto.engine.answers import of_step, step_view
from gepetto.program import Rollout, TraceEntry
from gepetto.testing import ScriptedLM
from gepetto.types import Example, Score

AREA = {"alarm_set": "alarm", "alarm_remove": "alarm", "volume_up": "audio", "volume_mute": "audio"}
WORD = {"alarm_set": "wake", "alarm_remove": "delete", "volume_up": "louder", "volume_mute": "silence"}
ROUTER_SEED = "Say which area the message is about: alarm or audio. Reply with the area only."
INTENT_SEED = "Pick the intent of the message among those listed. Reply with the intent only."


def _examples(n, prefix, gold=lambda intent, text: intent):
    intents = list(AREA)
    out = []
    for i in range(n):
        intent = intents[i % 4]
        text = f"please {WORD[intent]} thing number {i}"
        out.append(Example({"message": text}, gold=gold(intent, text), id=f"{prefix}-{i}"))
    return out


def _task_lm(messages, params):
    """The router: an area by a rule of its instruction naming the message's word, else by its own habit (which
    sends 'silence' to alarm); the intent step: the listed intent whose word the message has, else the first."""
    system, user = messages[0]["content"], messages[-1]["content"]
    if system.startswith("Say which area"):
        for word in WORD.values():
            if word in user and (rule := re.search(rf"{word}\b[^\n]*answer (\w+)", system)):
                return rule.group(1)
        return "audio" if "louder" in user else "alarm"
    listed = re.search(r"Intents: (.*)", user).group(1).split(", ")
    intent = next((i for i in listed if WORD[i] in user), listed[0])
    if "as JSON" in system:  # an open answer: a record of the message
        return json.dumps({"intent": intent, "said": re.search(r"Message: (.*)", user).group(1)})
    return intent


def _rule_writer(messages, params):
    """A rule naming every known word of the inputs it is asked to describe, for the answer asked for; a whole
    rewrite: the text as it was with one line more."""
    user = messages[-1]["content"]
    asked = re.search(r"say when to answer (\w+)", user) or re.search(r'answer (\w+)\."', user)
    if asked is None:
        current = re.search(r"<current_instruction>\n(.*?)\n</current_instruction>", user, re.S)
        return f"<new_instruction>{(current.group(1) if current else '')}\nBe brief.</new_instruction>"
    cases = user.split("It already answers these correctly")[0]  # the inputs to describe, not the contrast
    words = sorted({w for w in WORD.values() if re.search(rf"Input:[^\n]*\b{w}\b", cases)})
    return f"<rule>If the message asks to {' or '.join(words) or 'do it'}, answer {asked.group(1)}.</rule>"


async def _program(candidate, example, ctx):
    area = (await ctx.lm("router", example.inputs["message"], max_tokens=8)).strip()
    intents = [i for i, a in AREA.items() if a == area] or list(AREA)
    return await ctx.lm("intent", f"Message: {example.inputs['message']}\nIntents: {', '.join(intents)}")


def _metric(example, output, trace):
    gold = example.gold if isinstance(example.gold, str) else example.gold["intent"]
    got = output if isinstance(example.gold, str) else json.loads(output)["intent"]
    said = next(t.output for t in trace if t.component == "router")
    if got == gold:
        return Score(1.0, "Correct.")
    if said != AREA[gold]:
        return Score(0.0, f"The router answered '{said}', but the message is about {AREA[gold]}.")
    return Score(0.0, f"The router was right; the intent step answered '{got}', the correct intent is {gold}.")


def _run(program=_program, gold=lambda intent, text: intent, intent_seed=INTENT_SEED):
    events = []
    result = gepetto.optimize({"router": ROUTER_SEED, "intent": intent_seed}, _examples(24, "train", gold), _metric,
                              valset=_examples(12, "val", gold), program=program, task_lm=ScriptedLM(_task_lm),
                              reflection_lm=ScriptedLM(_rule_writer), budget=200, callbacks=events.append)
    return result, events


def test_a_router_gets_rules_whose_right_answer_the_feedback_names():
    result, events = _run()
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.name == "labels"
    assert "rules for intent" in chosen.reason and "rules for router (2 answers from the outputs" in chosen.reason
    assert result.seed_score == 0.75  # the router sends 'silence' to alarm
    router = result.best_candidate["router"]
    assert re.search(r"^- If the message asks to [a-z ]*silence[a-z ]*, answer audio\.$", router, re.M), router
    assert result.best_score == 1.0 and result.best_candidate["intent"] == INTENT_SEED


def test_a_router_before_an_open_answer_takes_the_labels_route_for_itself_only():
    seed = INTENT_SEED.replace("Reply with the intent only.", "Reply as JSON: the intent and the message.")
    result, events = _run(gold=lambda intent, text: {"intent": intent, "said": text}, intent_seed=seed)
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.name == "labels" and chosen.reason.startswith("rules for router (2 answers from the outputs")
    assert "so the other components are rewritten" in chosen.reason
    assert "silence, answer audio" in result.best_candidate["router"] and result.best_score == 1.0
    # the step that gives the open answer got no rule lines
    assert not any(line.startswith("- If") for line in result.best_candidate["intent"].split("\n"))


def _rollout(i, router, score=0.0, feedback="", pattern=""):
    trace = [TraceEntry("router", f"message {i}", router), TraceEntry("intent", f"message {i}", "x")]
    return Rollout(f"e{i}", Score(score, feedback, pattern=pattern), output="x", trace=trace)


def test_a_steps_answers_are_few_short_repeated_texts_and_a_stray_one_is_forgiven():
    runs = [_rollout(i, a) for i, a in enumerate(["alarm", "audio", "Alarm.", "audio", "alarm", "audio", "alarm",
                                                   "audio", "alarm", "I am not sure which"])]
    step = of_step(runs, "router")
    assert step is not None and step.answers == ("alarm", "audio") and step.source == "outputs"
    assert of_step([*runs[:5], _rollout(9, "what"), _rollout(10, "who")], "router") is None  # 2 strays of 7
    free = [_rollout(i, f"a summary of message {i}") for i in range(8)]
    assert of_step(free, "router") is None
    assert of_step(runs, "absent") is None


def test_a_steps_view_of_a_rollout_is_its_own_answer_without_the_programs_pattern():
    viewed = step_view(_rollout(1, "alarm", pattern="answered x, expected y"), "router")
    assert viewed.output == "alarm" and viewed.score.pattern == "" and viewed.example_id == "e1"


def test_the_names_a_steps_instruction_lists_beside_its_answers_join_them():
    runs = [_rollout(i, a) for i, a in enumerate(["alarm", "audio"] * 4)]
    text = "Say which of these areas the message is about: alarm, audio, calendar, email or lists. Reply briefly."
    step = of_step(runs, "router", text)
    assert step.answers == ("alarm", "audio", "calendar", "email", "lists")
    assert step.source == "outputs and its instruction"
    assert of_step(runs, "router", "Answer alarm or audio, then stop.").answers == ("alarm", "audio")
    # a list that names none of the answers given is not theirs
    assert of_step(runs, "router", "Be brief, polite and exact. Areas: alarm, audio.").answers == ("alarm", "audio")


def _silent_metric(example, output, trace):
    """Feedback that never names the router's answers: its mistakes cannot be read as a step's."""
    return Score(1.0, "Correct.") if output == example.gold else Score(0.0, f"Incorrect: the intent is {example.gold}.")


def test_a_router_whose_feedback_never_names_its_answers_is_rewritten_whole():
    events = []
    gepetto.optimize({"router": ROUTER_SEED, "intent": INTENT_SEED}, _examples(24, "train"), _silent_metric,
                     valset=_examples(12, "val"), program=_program, task_lm=ScriptedLM(_task_lm),
                     reflection_lm=ScriptedLM(_rule_writer), budget=120, callbacks=events.append)
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert "rules for router" in chosen.reason  # its answers are a closed set all the same
    on_router = [e for e in events if isinstance(e, ev.ProposalTested) and e.component == "router"]
    assert on_router, "no proposal was tested on the router"
    # no rule line and no demonstration: the router's own text with a line more, the whole rewrite's answer,
    # written from the program's rollouts (a minibatch of the sampler's: every training example was known)
    assert all(e.rule is None and e.origin is None and e.text == f"{ROUTER_SEED}\nBe brief." for e in on_router)
    assert all(e.minibatch_before < 3 for e in on_router)  # a minibatch with the program's mistakes
    assert any(e.rule for e in events if isinstance(e, ev.ProposalTested) and e.component == "intent")


def test_a_routers_demonstration_shows_the_right_answer_of_its_own_mistake():
    def writer(messages, params):  # the router's rules for its mistake are wrong: demonstrations are tried
        user = messages[-1]["content"]
        mistake = "makes this mistake" in user and "Say which area" in user
        if mistake or ("already tried" in user and "audio" in user):
            return "<rule>If the message mentions a thing number, answer audio.</rule>"
        return _rule_writer(messages, params)

    events = []
    gepetto.optimize({"router": ROUTER_SEED, "intent": INTENT_SEED}, _examples(24, "train"), _metric,
                     valset=_examples(12, "val"), program=_program, task_lm=ScriptedLM(_task_lm),
                     reflection_lm=ScriptedLM(writer), budget=300, callbacks=events.append)
    shown = [e.text.rsplit("Output: ", 1)[1] for e in events
             if isinstance(e, ev.ProposalTested) and e.component == "router" and e.origin == "demo"]
    # its mistake is 'silence' sent to alarm: every demonstration answers audio (the program's answer, an intent,
    # is not the router's)
    assert shown and set(shown) == {"audio"}, shown
