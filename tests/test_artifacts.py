"""Texts that are not prompts (issue 14): a regex read by the program, `ctx.record`, component descriptions."""

import importlib.util
import re
from pathlib import Path

import pytest

import gepetto
from gepetto.engine import edits
from gepetto.engine.events import Outcome
from gepetto.engine.reflect import ReflectionExample, build_prompt, reflective_examples, vet
from gepetto.program import Rollout, TraceEntry
from gepetto.testing import ScriptedLM
from gepetto.types import Candidate, Example, Score

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rx = _load_example("regex_extractor")


def _current(messages) -> str:
    prompt = next(m["content"] for m in messages if "<current_instruction>" in m["content"])
    return prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]


def regex_reflection(messages, params) -> str:
    """A scripted reflection LM that fixes the regex from what the feedback and the examples show."""
    prompt, new = messages[1]["content"], _current(messages)
    if "Missed" in prompt and re.search(r"\bord[- ]\d", prompt) and "(?i)" not in new:
        new = "(?i)" + new
    if "Missed" in prompt and re.search(r"\bORD \d", prompt, re.I):
        new = new.replace("ORD-", "ORD[- ]")
    if "Wrong matches" in prompt:
        new = new.replace(r"(\d+)", r"(\d{5})\b")
    return f"Lessons:\n- the pattern misses some order numbers\n<new_instruction>{new}</new_instruction>"


def test_a_regex_is_optimised_end_to_end_with_its_description():
    reflection = ScriptedLM(regex_reflection)
    result = rx.optimize(reflection, budget=60, seed=0)
    assert result.seed_score < 0.6
    assert result.best_score == 1.0, result.summary()
    best = result.best_candidate["pattern"]
    assert re.compile(best) and "\n- " not in best
    assert all(re.findall(best, e["message"]) == e.gold for e in rx.dataset())
    system, prompt = (m["content"] for m in reflection.calls[0][0])
    assert f"The text you are editing is: {rx.DESCRIPTION}." in prompt
    assert "Keep it that kind of text" in system and "instruction for the assistant" not in system + prompt
    # what `ctx.record` recorded: the message as input, the matches as JSON, and the metric's feedback
    assert "[Input]\n" in prompt and "[Output]\n[" in prompt and "Missed order numbers" in prompt
    assert any(text in prompt for text, _ in rx.MESSAGES)


def test_a_component_without_trace_entries_is_reflected_on_with_the_whole_run():
    def program(candidate, example, ctx):  # reads the component, records nothing
        return re.findall(candidate["pattern"], example["message"])

    data = rx.dataset()
    reflection = ScriptedLM(regex_reflection)
    result = gepetto.optimize(rx.SEED, data[:6], rx.metric, valset=data[6:], program=program,
                              task_lm=ScriptedLM([]), reflection_lm=reflection, budget=60,
                              component_descriptions={"pattern": rx.DESCRIPTION})
    assert result.best_score > result.seed_score
    assert "skipped: component not called" not in result.proposals
    prompt = reflection.calls[0][0][1]["content"]
    assert "[Program output]\n[" in prompt and "Missed order numbers" in prompt
    assert any(f"[Input]\n{text}" in prompt for text, _ in rx.MESSAGES)


def test_whole_run_shows_the_error_when_the_program_failed():
    example = Example({"message": "ORD-1"}, id="e")
    run = Rollout("e", Score(0.0, "The program raised an error."), None, [], error="error: bad escape", stage="program")
    [shown] = reflective_examples([run], "pattern", [example])
    assert shown.whole_run and shown.inputs == "ORD-1" and "bad escape" in shown.output


def test_without_a_description_the_prompt_still_speaks_of_an_instruction():
    ex = [ReflectionExample("in", "out", "Wrong.", 0.0)]
    plain = build_prompt("Answer briefly.", ex)[1]["content"]
    assert "this instruction (its system prompt)" in plain and "[Assistant's answer]" in plain
    system, described = (m["content"] for m in build_prompt(r"\d+", ex, description="a regex."))
    assert "The text you are editing is: a regex. Keep it" in system and "system prompt" not in described


def test_ctx_record_in_sync_and_async_programs():
    def sync_program(candidate, example, ctx):
        found = ctx.record("pattern", inputs=example["message"], output=re.findall(candidate["pattern"],
                                                                                  example["message"]))
        ctx.record("config", inputs={"n": len(found)}, output={"ok": True, "items": found})
        return found

    async def async_program(candidate, example, ctx):
        found = ctx.record("pattern", inputs=example["message"], output=re.findall(candidate["pattern"],
                                                                                  example["message"]))
        reply = await ctx.lm("instruction", f"found {found}")
        return [reply]

    cand = Candidate(pattern=r"\d+", config="{}", instruction="Echo.")
    data = [Example({"message": "order 12 and 34"}, id="e")]
    seen = {}

    def metric(example, output, trace):
        seen[len(seen)] = [t.to_dict() for t in trace]
        return 1.0

    gepetto.evaluate(cand, data, metric, program=sync_program, task_lm=ScriptedLM([]))
    gepetto.evaluate(cand, data, metric, program=async_program, task_lm=ScriptedLM(["ok"]))
    sync_trace, async_trace = seen[0], seen[1]
    assert [(t["component"], t["inputs"], t["output"]) for t in sync_trace] == [
        ("pattern", "order 12 and 34", '["12", "34"]'),
        ("config", '{"n": 2}', '{"ok": true, "items": ["12", "34"]}'),
    ]
    assert [t["component"] for t in async_trace] == ["pattern", "instruction"]
    assert async_trace[1]["inputs"] == "found ['12', '34']"


def test_ctx_record_of_an_unknown_component_fails_the_rollout():
    def program(candidate, example, ctx):
        return ctx.record("nope", inputs="x", output="y")

    ev = gepetto.evaluate(Candidate(pattern="x"), [Example({"m": "x"}, id="e")], lambda e, o, t: 1.0,
                          program=program, task_lm=ScriptedLM([]))
    assert ev.mean == 0.0 and "nope" in ev.rollouts[0].error


REGEX_SHOWN = [ReflectionExample("Order ORD-12345 is late.", '["12345"]', "Missed order numbers: 22222.", 0.5)]


@pytest.mark.parametrize(
    "text",
    [
        r"\d{5}",  # shorter than a prose instruction may be
        r"(?i)\bORD[- ]?(\d{5})\b",
        r"(?i)ord-(\d+)",  # differs from the current text only in case: not "unchanged"
        r'"([^"]+)"',  # quotes belong to the pattern
        r"hi\b|hello",  # starts like a greeting, is no chat reply
        "def f(x):\n    return x\n\ndef g(x):\n    return x\n",  # repeated lines are normal in code
        '{"labels": ["billing", "shipping"], "Example 1": "a key may say Example 1"}',
    ],
)
def test_vetting_accepts_valid_artifacts(text):
    proposal = vet(f"<new_instruction>{text}</new_instruction>", "stop", r"(?i)ORD-(\d+)", REGEX_SHOWN,
                   artifact=True)
    assert proposal.rejected is None and proposal.text == text.strip()


@pytest.mark.parametrize(
    ("raw", "finish", "reason"),
    [
        ("<new_instruction></new_instruction>", "stop", Outcome.EMPTY),
        (r"<new_instruction>(?i)ORD-(\d+)</new_instruction>", "stop", Outcome.UNCHANGED),
        ("<new_instruction>Certainly! Here is the improved regex.</new_instruction>", "stop", Outcome.CHAT_REPLY),
        ("Sure, I can help with that.", "stop", Outcome.CHAT_REPLY),
        ("<new_instruction>=== Example 1 ===\n\\d+</new_instruction>", "stop", Outcome.SCAFFOLDING),
        ("<new_instruction>(?i)ORD-(\\d{5}", "length", Outcome.TRUNCATED),
    ],
)
def test_vetting_still_refuses_unusable_artifacts(raw, finish, reason):
    assert vet(raw, finish, r"(?i)ORD-(\d+)", REGEX_SHOWN, artifact=True).rejected is reason


def test_a_fenced_or_backticked_artifact_is_unwrapped_and_prose_vetting_would_refuse_a_short_regex():
    assert vet("<new_instruction>```regex\n\\d{5}\n```</new_instruction>", "stop", "x", REGEX_SHOWN,
               artifact=True).text == r"\d{5}"
    assert vet("<new_instruction>`\\d{5}`</new_instruction>", "stop", "x", REGEX_SHOWN, artifact=True).text == r"\d{5}"
    assert vet("<new_instruction>\\d{5}</new_instruction>", "stop", "x", REGEX_SHOWN).rejected is Outcome.EMPTY


def test_edit_proposer_rewrites_a_described_component_whole():
    reflection = ScriptedLM(regex_reflection)
    result = rx.optimize(reflection, budget=60, proposer="edit")
    assert result.best_score == 1.0
    assert all("<rule>" not in m["content"] for messages, _ in reflection.calls for m in messages)
    assert "\n- " not in result.best_candidate["pattern"]


def test_edit_prompt_shows_the_whole_run_of_a_component_without_trace():
    fail = Rollout("e1", Score(0.0, "Missed order numbers: 22222."), ["11111"], [])
    good = Rollout("e2", Score(1.0, "Correct."), ["33333"], [])
    focus = edits.Focus("Missed order numbers", 1, [fail], [good])
    by_id = {"e1": Example({"message": "ORD-11111 and ord-22222"}, id="e1"),
             "e2": Example({"message": "ORD-33333"}, id="e2")}
    prompt = edits.build_edit_prompt("Find order numbers.", focus, "pattern", [], by_id)[1]["content"]
    assert "not called" not in prompt
    assert 'Input: ORD-11111 and ord-22222\nProgram\'s output: ["11111"]' in prompt
    assert 'Input: ORD-33333\nProgram\'s output: ["33333"]' in prompt


def test_a_description_of_an_unknown_component_is_a_clear_error():
    with pytest.raises(ValueError, match="component_descriptions"):
        gepetto.optimize(rx.SEED, rx.dataset(), rx.metric, program=rx.program, task_lm=ScriptedLM([]),
                         reflection_lm=ScriptedLM([]), component_descriptions={"patern": "a regex"})


def test_trace_entries_from_records_reach_the_metric():
    ctx_trace: list[TraceEntry] = []

    def metric(example, output, trace):
        ctx_trace.extend(trace)
        return 1.0

    gepetto.evaluate(rx.SEED, rx.dataset()[:1], metric, program=rx.program, task_lm=ScriptedLM([]))
    assert ctx_trace == [TraceEntry("pattern", "My order ORD-48213 never arrived.", '["48213"]')]
