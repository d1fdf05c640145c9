"""Reflection transcripts: each proposal's prompt, answer and verdict are kept with the run (the prompt beside its
answer in the run store) and shown once per proposal, linked to the right one when proposals run concurrently and
after a resume; runs stored before prompts were kept still open."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter

import pytest

import gepetto
from gepetto.engine.demos import split
from gepetto.engine.events import Outcome, RolloutFinished
from gepetto.report import render_report
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunStore
from gepetto.testing import sim


def _run(storage, run="t", **kw):
    task = sim.task(n_train=12, n_val=8, kinds=6)
    options = {"valset": task.valset, "program": task.program, "task_lm": sim.SimTaskLM(),
               "reflection_lm": sim.SimReflectionLM(noise=0.6, seed=1), "budget": 160, "storage": storage,
               "run": run, **kw}
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, **options)


def _transcripts(storage, run="t"):
    store = RunStore(storage, readonly=True)
    try:
        return run_snapshot(store, run)["transcripts"]
    finally:
        store.close()


def _current(messages) -> str:
    """The instruction a reflection prompt showed (the simulated task's prompts: <current_instruction>)."""
    prompt = next(m["content"] for m in messages if "<current_instruction>" in m["content"])
    return prompt.split("<current_instruction>\n", 1)[1].split("\n</current_instruction>", 1)[0]


def _proposed(answer: str) -> str:
    return re.search(r"<new_instruction>(.*?)</new_instruction>", answer, re.S).group(1).strip()


@pytest.mark.parametrize("per_round", [1, 3])
def test_each_attempt_is_shown_with_its_own_prompt_and_verdict(tmp_path, per_round):
    result = _run(tmp_path / "s.sqlite", proposals_per_round=per_round)
    transcripts = _transcripts(tmp_path / "s.sqlite")
    texts = {c.index: c.candidate["instruction"] for c in result.candidates}
    assert transcripts and any(t["verdict"] == "refused" for t in transcripts)
    rejected = Counter()
    for t in transcripts:
        for a in t["attempts"]:
            # the prompt this attempt was given showed its own proposal's parent, whichever ran alongside it
            assert _current(a["messages"]) == split(texts[t["parent"]])[0]
            rejected[a["rejected"]] += a["rejected"] is not None
        if t["verdict"] == "accepted":
            child = result.candidates[t["candidate"]]
            assert child.parents == (t["parent"],)
            assert split(child.candidate["instruction"])[0] == _proposed(t["attempts"][-1]["answer"])
            assert t["attempts"][-1]["rejected"] is None and t["test"]["accepted"]
        if t["verdict"] == "refused":
            assert t["test"] is None and all(a["rejected"] for a in t["attempts"])
        # a retry continues its proposal's conversation, told why the answer before was refused
        assert all(a["continues"] and a["new_from"] > 0 for a in t["attempts"][1:])
    # every vetting refusal the run counted is in a transcript, once
    for outcome in (Outcome.UNCHANGED, Outcome.EMPTY, Outcome.CHAT_REPLY, Outcome.ECHO, Outcome.SCAFFOLDING):
        assert rejected[outcome.value] == result.proposals.get(outcome, 0), outcome
    # and every candidate made by a proposal is one accepted transcript (by reflection, or a demonstration added)
    for origin in ("reflection", "demo"):
        made = sum(c.origin == origin for c in result.candidates)
        shown = sum(t["verdict"] == "accepted" and (t["test"].get("origin") or "reflection") == origin
                    for t in transcripts)
        assert shown == made, origin


def test_a_resumed_run_shows_each_proposal_once_as_the_uninterrupted_run(tmp_path):
    _run(tmp_path / "s.sqlite", run="whole")
    stop = tmp_path / "STOP"
    seen = []

    def hook(event):
        if isinstance(event, RolloutFinished):
            seen.append(1)
            if len(seen) == 70:
                stop.touch()

    _run(tmp_path / "s.sqlite", run="cut", stop_file=str(stop), callbacks=hook)
    stop.unlink()
    _run(tmp_path / "s.sqlite", run="cut")

    def shape(run):
        return [(t["parent"], t["verdict"], t["candidate"], [(a["answer"], a["rejected"]) for a in t["attempts"]],
                 t["test"]) for t in _transcripts(tmp_path / "s.sqlite", run)]

    assert shape("cut") == shape("whole")
    store = RunStore(tmp_path / "s.sqlite", readonly=True)
    # the second session replayed the first one's proposals: their events are in the log twice, shown once
    assert len(store.events("cut", "reflection")) > sum(len(t[3]) for t in shape("cut"))


def test_the_report_shows_each_proposal_with_its_prompt_escaped(tmp_path):
    hostile = "</script><b>x</b> [/INST]"
    task = sim.task(n_train=8, n_val=6, kinds=3)
    answers = iter([f"<new_instruction>{task.seed_candidate['instruction']}</new_instruction>",  # unchanged
                    f"Sure! {hostile}"])

    def reflect(messages, params):
        return next(answers, "<new_instruction>Answer the question. Apply rule-0. Apply rule-1.</new_instruction>")

    gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                     task_lm=sim.SimTaskLM(), reflection_lm=gepetto.ScriptedLM(reflect), budget=40, fewshot=0,
                     storage=tmp_path / "s.sqlite", run="h")
    snap = run_snapshot(RunStore(tmp_path / "s.sqlite", readonly=True), "h")
    first = snap["transcripts"][0]
    assert [a["rejected"] for a in first["attempts"]][:2] == ["rejected: unchanged", "rejected: chat reply"]
    told = first["attempts"][1]["messages"][-1]["content"]  # the retry is told why the answer before was refused
    assert first["attempts"][1]["continues"] and "the same as the current" in told
    page = render_report(snap)
    assert hostile not in page and "Sure! &lt;/script&gt;&lt;b&gt;x&lt;/b&gt; [/INST]" in page
    assert 'id="tx-1"' in page and "rejected: chat reply" in page and "question 0 kind 0" in page


def test_a_store_from_before_prompts_were_kept_opens_and_shows_answers_without_prompts(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE runs (name TEXT PRIMARY KEY, created REAL NOT NULL, updated REAL NOT NULL, status TEXT NOT NULL,
            seed INTEGER NOT NULL, config TEXT NOT NULL, pid INTEGER, result TEXT, ledger TEXT);
        CREATE TABLE lm_answers (run TEXT NOT NULL, key TEXT NOT NULL, text TEXT NOT NULL,
            finish_reason TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
            estimated INTEGER NOT NULL, error_type TEXT, PRIMARY KEY (run, key));
        INSERT INTO lm_answers VALUES ('r', 'k1', 'an old answer', 'stop', 10, 3, 0, NULL);
    """)
    db.commit()
    db.close()
    assert RunStore(path, readonly=True).lm_exchanges("r") == {
        "k1": {"messages": None, "text": "an old answer", "finish_reason": "stop", "error_type": None}}
    store = RunStore(path)  # opened for writing: the column is added, old rows keep no prompt
    store.put_lm_answer("r", "k2", gepetto.Completion("new"), messages=[{"role": "user", "content": "hi"}])
    exchanges = store.lm_exchanges("r")
    assert exchanges["k1"]["messages"] is None and exchanges["k2"]["messages"] == [{"role": "user", "content": "hi"}]
    assert list(exchanges) == ["k1", "k2"]
