"""The default configuration's route: chosen from the examples and the seed's first rollouts, shown, replayed."""

import re
import warnings

import gepetto
from gepetto.engine import events as ev
from gepetto.engine import route
from gepetto.engine.answers import AnswerSet
from gepetto.program import Rollout, TraceEntry
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Example, Score

LABELS = ["balance", "bill_due", "card_declined", "pin_change"]
TOPIC = {"balance": "money", "bill_due": "electricity", "card_declined": "shop", "pin_change": "code"}


def _examples(n, prefix):
    return [Example({"message": f"{prefix} {i}: about my {TOPIC[LABELS[i % 4]]}"}, gold=LABELS[i % 4],
                    id=f"{prefix}-{i}") for i in range(n)]


def _classifier(messages, params):
    """A task LM that answers a label when the instruction has a rule naming the message's topic word, else
    'balance'."""
    system, user = messages[0]["content"], messages[-1]["content"]
    for label, word in TOPIC.items():
        if word in user and re.search(rf"{word}\b.*answer {label}", system):
            return label
    return "balance"


def _rule_writer(messages, params):
    user = messages[-1]["content"]
    label = re.search(r"answer (\w+)\.\" Describe", user) or re.search(r"say when to answer (\w+)", user)
    if label is None:
        return "<rule></rule>"
    return f"<rule>If the message is about the {TOPIC.get(label.group(1), 'thing')}, answer {label.group(1)}.</rule>"


def _metric(example, output, trace):
    if str(output).strip() == example.gold:
        return gepetto.Score(1.0, f"Correct: the intent is '{example.gold}'.")
    return gepetto.Score(0.0, f"Incorrect: answered '{output}', the correct intent is '{example.gold}'.")


def _run(**options):
    events = []
    result = gepetto.optimize("Classify the message: balance, bill_due, card_declined or pin_change.",
                              _examples(24, "train"), _metric, valset=_examples(12, "val"),
                              task_lm=ScriptedLM(_classifier), reflection_lm=ScriptedLM(_rule_writer), budget=160,
                              callbacks=events.append, **options)
    return result, events


def test_a_closed_answer_set_takes_the_labels_route_and_its_rules_work_with_a_plain_metric():
    result, events = _run()
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.name == "labels" and "4 answers from the golds" in chosen.reason
    assert chosen.settings == {"proposer": "edit(rules=3, definitions=60)", "parent_selector": "current-best"}
    assert "(proposer=edit(rules=3, definitions=60), parent_selector=current-best)" in chosen.describe()
    assert result.best_score > result.seed_score  # the draft's rules, from confusions the metric never named
    assert "answer card_declined" in result.best_candidate["instruction"]


def test_open_answers_take_the_rewrite_route():
    task = sim.task(kinds=4)
    events = []
    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                     task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=60, callbacks=events.append)
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.name == "rewrite" and chosen.settings["proposer"] == "rewrite"


def test_explicit_options_win_and_an_idle_option_warns_once():
    _, events = _run(proposer="edit")
    assert not [e for e in events if isinstance(e, ev.RouteChosen)]  # a given proposer: no route
    _, events = _run(parent_selector="pareto")
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert "parent_selector" not in chosen.settings
    _, events = _run(proposer="auto(rules=5, gate_solved=2)")  # the auto proposer's parameters win over the route's
    (chosen,) = [e for e in events if isinstance(e, ev.RouteChosen)]
    assert chosen.settings["proposer"] == "edit(rules=5, definitions=60, gate_solved=2)"
    task = sim.task(kinds=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                         task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), budget=40,
                         proposer="auto(definitions=30, max_tokens=900)")
    said = [str(w.message) for w in caught if "no effect" in str(w.message)]
    assert len(said) == 1 and "definitions" in said[0] and "max_tokens" not in said[0]  # (rewrite's: it acts)


def test_the_route_is_taken_again_on_resume(tmp_path):
    kw = {"valset": _examples(12, "val"), "task_lm": ScriptedLM(_classifier), "budget": 60,
          "storage": tmp_path / "s.sqlite", "run": "r"}
    first = gepetto.optimize("Classify the message.", _examples(24, "train"), _metric,
                             reflection_lm=ScriptedLM(_rule_writer), **kw)
    events = []
    again = gepetto.optimize("Classify the message.", _examples(24, "train"), _metric,
                             reflection_lm=ScriptedLM(_rule_writer), callbacks=events.append,
                             **{**kw, "budget": 120})
    assert [e.name for e in events if isinstance(e, ev.RouteChosen)] == ["labels"]
    assert again.rollouts_used >= first.rollouts_used


def test_long_answers_that_end_in_a_label_are_not_the_labels_route():
    answers = AnswerSet(("No", "Yes"), "golds")
    runs = [Rollout(f"v{i}", Score(1.0), "Let me think step by step about who tells the truth ... so: Yes",
                    [TraceEntry("instruction", "q", "...")]) for i in range(10)]
    assert route.choose(answers, ("instruction",), runs).name == "rewrite"


def test_answering_components_are_those_whose_answer_is_the_programs():
    runs = [Rollout(f"v{i}", Score(0.0), "billing", [TraceEntry("summary", "m", "A customer writes about a bill."),
                                                      TraceEntry("router", "s", "billing")]) for i in range(5)]
    assert route.answering(("summary", "router"), runs) == ("router",)


def test_every_component_at_once_takes_the_rewrite_route():
    answers = AnswerSet(tuple(LABELS), "golds")
    assert route.choose(answers, ("a",), [], one_component=False).name == "rewrite"


def test_show_and_the_report_say_which_route_the_run_took(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from gepetto.cli import app

    monkeypatch.chdir(tmp_path)
    gepetto.optimize("Classify the message.", _examples(24, "train"), _metric, valset=_examples(12, "val"),
                     task_lm=ScriptedLM(_classifier), reflection_lm=ScriptedLM(_rule_writer), budget=60,
                     storage="s.sqlite", run="r")
    shown = CliRunner().invoke(app, ["show", "r", "--storage", "s.sqlite"], env={"COLUMNS": "300"}).output
    assert "route labels: 4 answers from the golds" in shown
    CliRunner().invoke(app, ["report", "r", "--storage", "s.sqlite", "-o", "r.html"])
    assert "route labels: 4 answers from the golds" in (tmp_path / "r.html").read_text()
