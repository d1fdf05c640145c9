"""Issue 37, "fails safe": one regression test (or a few) per finding F1-F10, each made from its repro in
`../shared/repros/` (named in the test's first comment). Simulated and scripted LMs, loopback servers, small
budgets: seconds each. docs/reliability.md ("Found by trying to break it") lists them."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto import Example, Score
from gepetto.cli import app
from gepetto.config import ConfigError
from gepetto.engine.events import StopReason
from gepetto.lm.base import Completion, LMError, LMUnavailable
from gepetto.lm.openai import OpenAILM
from gepetto.report import write_report
from gepetto.store.snapshot import run_snapshot
from gepetto.store.sqlite import RunInUse, RunStore, process_started
from gepetto.testing import FakeOpenAIServer, ScriptedLM, sim, sim_responder
from gepetto.testing.sim import SimReflectionLM, SimTaskLM
from gepetto.types import NoCanonicalForm

SRC = str(Path(__file__).resolve().parents[1] / "src")
SIM = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


def _python(code: str, *args: str, env: dict[str, str] | None = None, **kw) -> subprocess.Popen:
    """`python -c code args` with this checkout's gepetto first on the path."""
    path = os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-c", code, *args], env={**os.environ, "PYTHONPATH": path, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(path: Path, proc: subprocess.Popen, limit: float = 240) -> None:
    """Until `path` exists (the child got there), or fail with what the child said."""
    deadline = time.monotonic() + limit
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the child never got there: {out}\n{err[-2000:]}")
        time.sleep(0.05)


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args):
        res = runner.invoke(app, [str(a) for a in args])
        assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
        return res

    return invoke


def _sim(**config):
    task = sim.task(n_train=6, n_val=6, kinds=3)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=config.pop("program", task.program), task_lm=config.pop("task_lm", "sim:task"),
                            reflection_lm=config.pop("reflection_lm", "sim:reflection"), **config)


# ---- F1: one run, one live process ------------------------------------------------------------------------------

HELD_RUN = """
import sys, time, pathlib
import gepetto
from gepetto.testing import sim
storage, here = sys.argv[1], pathlib.Path(sys.argv[2])
t = sim.task(n_train=6, n_val=6, kinds=3)
def program(candidate, example, ctx):
    (here / "started").touch()
    while not (here / "go").exists():
        time.sleep(0.02)
    return ctx.lm("instruction", example.inputs["q"])
res = gepetto.optimize(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=program, task_lm="sim:task",
                       reflection_lm="sim:reflection", budget=30, storage=storage, run="r")
print("done", res.rollouts_used)
"""


def test_f1_a_second_process_on_a_running_run_is_refused_naming_the_owner(tmp_path, cli):
    # repros/concurrent/repro_same_run.sh: two processes ran one stored run at once (357 calls for a budget of 200)
    storage = tmp_path / "s.sqlite"
    owner = _python(HELD_RUN, str(storage), str(tmp_path))
    _wait_for(tmp_path / "started", owner)
    with pytest.raises(RunInUse, match=f"run 'r' is running in process {owner.pid}"):
        _sim(budget=30, storage=storage, run="r")
    res = cli("optimize", *SIM, "--budget", 30, "--storage", storage, "--run", "r", "-q")
    assert res.exit_code == 2 and f"run 'r' is running in process {owner.pid}" in res.output
    (tmp_path / "go").touch()
    _, err = owner.communicate(timeout=240)
    assert owner.returncode == 0, err
    store = RunStore(storage)
    assert len(store.events("r", "start")) == 1  # the refused ones started no session
    assert store.count_rollouts("r") <= 30 and store.get_run("r").status == "finished"


def test_f1_the_run_of_a_killed_process_is_taken_over(tmp_path):
    storage = tmp_path / "s.sqlite"
    owner = _python(HELD_RUN, str(storage), str(tmp_path))
    _wait_for(tmp_path / "started", owner)
    owner.kill()
    owner.wait()
    assert RunStore(storage).get_run("r").shown_status == "stopped (killed?)"
    (tmp_path / "go").touch()
    again = _python(HELD_RUN, str(storage), str(tmp_path))  # resumes it: the dead owner is no owner
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0 and out.startswith("done"), err
    store = RunStore(storage)
    assert store.get_run("r").status == "finished" and len(store.events("r", "start")) == 2


def test_f1_a_pid_reused_by_another_process_is_no_owner(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    store.create_run("r", {"task": "sim"}, seed=0)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = process_started(other.pid)
        with store._tx() as db:  # the run's owner: that live process ...
            db.execute("UPDATE runs SET pid=?, pid_started=? WHERE name='r'", (other.pid, started))
        with pytest.raises(RunInUse, match=f"running in process {other.pid}"):
            store.mark_running("r")
        if started is not None:  # ... or a process that had its pid before (another start time): taken over
            with store._tx() as db:
                db.execute("UPDATE runs SET pid_started=? WHERE name='r'", (started - 1,))
            store.mark_running("r")
            assert store.get_run("r").pid == os.getpid()
    finally:
        other.kill()
        other.wait()


RACE = """
import sys, time, pathlib
import gepetto
from gepetto.store.sqlite import RunInUse
from gepetto.testing import sim
storage, here, me = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
t = sim.task(n_train=6, n_val=6, kinds=3)
def program(candidate, example, ctx):  # the run is held until the other process has been answered
    while not (here / "release").exists():
        time.sleep(0.01)
    return t.program(candidate, example, ctx)
(here / f"ready-{me}").touch()
while not (here / "go").exists():
    time.sleep(0.005)
try:
    res = gepetto.optimize(t.seed_candidate, t.trainset, t.metric, valset=t.valset, program=program,
                           task_lm="sim:task", reflection_lm="sim:reflection", budget=40, storage=storage, run="same")
    print("ran", res.rollouts_used)
except RunInUse as exc:
    print("refused:", exc)
"""


def test_f1_two_processes_starting_one_new_run_at_once_one_runs_one_is_refused(tmp_path):
    # the loser died with a raw "IntegrityError: UNIQUE constraint failed: runs.name"
    storage = tmp_path / "s.sqlite"
    procs = [_python(RACE, str(storage), str(tmp_path), me) for me in "ab"]
    for me, proc in zip("ab", procs, strict=True):
        _wait_for(tmp_path / f"ready-{me}", proc)
    (tmp_path / "go").touch()
    deadline = time.monotonic() + 240
    while all(p.poll() is None for p in procs):  # one of them is refused and ends; the other holds the run
        assert time.monotonic() < deadline, "neither process ended"
        time.sleep(0.02)
    (tmp_path / "release").touch()
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    said = sorted(o.strip().split(" ")[0] for o, _ in outs)
    assert said == ["ran", "refused:"], outs
    assert "running in process" in next(o for o, _ in outs if o.startswith("refused"))
    assert RunStore(storage).count_rollouts("same") <= 40


# ---- F2: text enters as valid UTF-8, once -----------------------------------------------------------------------

HALF_EMOJI = "\ud83d"  # what json.loads gives for a body holding "\ud83d": an emoji cut in half by a token limit


@pytest.mark.parametrize("cache", ["off", "auto"])
def test_f2_a_lone_surrogate_in_a_task_answer_is_stored_and_resumed(tmp_path, cache):
    # repros/surrogate/repro_python.sh: cache off, the stored run crashed at that rollout on every resume
    def answer(messages, params):
        return f"answer-1 {HALF_EMOJI}" if "question 1 " in messages[-1]["content"] else "no idea"

    for budget in (20, 40):  # then resumed
        result = _sim(task_lm=ScriptedLM(answer, name="t"), budget=budget, storage=tmp_path / "s.sqlite", run="r",
                      cache=cache)
        assert result.rollouts_used > 6
    outputs = [r.output for r in RunStore(tmp_path / "s.sqlite").rollouts("r").values()]
    assert "answer-1 \ufffd" in outputs  # the half emoji became U+FFFD, at the edge


def test_f2_a_lone_surrogate_in_an_example_is_made_valid_where_it_enters(tmp_path):
    # repros/data/hostile.py input_surrogate: UnicodeEncodeError when the stored run wrote its examples
    train = [Example({"q": f"question {i} kind {i % 2} \udcff"}, gold=f"answer-{i}") for i in range(4)]
    assert train[0].inputs["q"].endswith("\ufffd")
    data = {"q": "question 0 kind 0"}
    assert Example(data).inputs is data  # valid data is kept as given
    result = gepetto.optimize("Answer the question.", train, sim.metric, task_lm="sim:task",
                              reflection_lm="sim:reflection", budget=24, storage=tmp_path / "s.sqlite", run="r")
    assert result.best_score == 1.0


def _reflection_adding(text: str):
    inner = SimReflectionLM()

    class Refl:
        name = "refl"

        async def complete(self, messages, **params):
            out = await inner.complete(messages, **params)
            return Completion(out.text.replace("</new_instruction>", f" ok{text}</new_instruction>"), out.usage)

    return Refl()


@pytest.mark.parametrize("stored", [False, True])
def test_f2_a_lone_surrogate_in_a_reflection_answer_gives_valid_candidates(tmp_path, stored):
    # repros/surrogate/refl_surrogate_nostore.py: optimize() raised, the run was lost
    where = {"storage": tmp_path / "s.sqlite", "run": "r"} if stored else {}
    result = _sim(reflection_lm=_reflection_adding(HALF_EMOJI), budget=60, **where)
    assert result.best_score == 1.0 and len(result.candidates) > 1
    for rec in result.candidates:
        rec.candidate["instruction"].encode("utf-8")  # valid UTF-8 everywhere
    assert "ok\ufffd" in result.best_candidate["instruction"]
    assert result.ledger.roles["reflection"].output_tokens > 0  # counted, not lost


def test_f2_nul_and_control_characters_never_enter_a_candidate():
    # repros/surrogate/refl_surrogate.py nul: "ok\x00" was accepted into candidates
    result = _sim(reflection_lm=_reflection_adding("\x00\x1b[31m\x07"), budget=60)
    assert len(result.candidates) > 1
    for rec in result.candidates:
        text = rec.candidate["instruction"]
        assert not any(ord(ch) < 32 and ch not in "\t\n\r" for ch in text), repr(text)
    assert gepetto.Candidate(a="tab\tand\nnewline\x00") == gepetto.Candidate(a="tab\tand\nnewline")


# ---- F3: one input the endpoint always fails on ------------------------------------------------------------------

def _poisoned_server() -> FakeOpenAIServer:
    inner = sim_responder()

    def respond(messages, body):
        if "question 7 " in messages[-1]["content"]:
            raise ConnectionResetError("poisoned input")  # the handler dies: the client sees the connection drop
        return inner(messages, body)

    return FakeOpenAIServer(respond).start()


def test_f3_an_input_the_endpoint_always_fails_on_is_a_failed_rollout_and_the_run_finishes(tmp_path):
    # repros/poison/repro.sh: every resume stopped at the same rollout ("one LM call failed 5 times")
    srv = _poisoned_server()
    try:
        task = sim.task(n_train=12, n_val=12, kinds=6)
        results = []
        for budget in (60, 120):  # then resumed
            task_lm = OpenAILM("task", base_url=srv.url, max_retries=1, backoff=0.01, timeout=30)
            results.append(gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                            program=task.program, task_lm=task_lm, reflection_lm="sim:reflection",
                                            budget=budget, lm_retry_pause=0, max_lm_failures=3,
                                            storage=tmp_path / "s.sqlite", run="r"))
    finally:
        srv.stop()
    for result in results:
        assert result.stop_reason is not StopReason.LM_UNAVAILABLE, result.stop_message
    assert results[-1].rollouts_used > 60
    poisoned = [r for (_, eid), r in RunStore(tmp_path / "s.sqlite").rollouts("r").items() if eid.endswith("-7")]
    assert poisoned and all(r.score.value == 0 and r.error.startswith("LMUnavailable") for r in poisoned)
    assert "while it answered the others" in poisoned[0].score.feedback


class _Dies:
    """A task LM that answers `answers` calls, then none (a dead endpoint)."""

    name = "dies"

    def __init__(self, answers: int) -> None:
        self.inner, self.answers, self.calls = SimTaskLM(), answers, 0

    async def complete(self, messages, **params):
        self.calls += 1
        if self.calls > self.answers:
            raise LMUnavailable("dies: gave up after 2 attempts; last error: connection refused")
        return await self.inner.complete(messages, **params)


@pytest.mark.parametrize("concurrency", [1, 8])
def test_f3_an_outage_of_every_call_still_stops_the_run(tmp_path, concurrency):
    task = sim.task()
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=_Dies(30), reflection_lm=SimReflectionLM(), budget=150,
                              max_lm_failures=3, lm_retry_pause=0, max_concurrency=concurrency,
                              storage=tmp_path / "s.sqlite", run="r")
    assert result.stop_reason is StopReason.LM_UNAVAILABLE and result.rollouts_used >= 12
    # calls made one at a time cannot tell an outage from one bad input at first: one rollout at most is failed
    failed = [r for r in RunStore(tmp_path / "s.sqlite").rollouts("r").values() if r.error]
    assert len(failed) <= 1


class _OddServer:
    """An OpenAI-compatible server on loopback with the sim LMs inside that answers `question 7` with HTTP 200 and an
    error body (mode "error200"), or every task call with tool calls only ("toolcall")."""

    def __init__(self, mode: str) -> None:
        inner = sim_responder()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, code, payload):
                body = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.send(200, {"object": "list", "data": []})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                msgs, task = body["messages"], "reflection" not in body["model"]
                if mode == "error200" and "question 7 " in msgs[-1]["content"]:
                    return self.send(200, {"error": {"message": "This model's maximum context length is 4096 tokens",
                                                     "code": 400}})
                msg = {"role": "assistant", "content": inner(msgs, body)}
                if mode == "toolcall" and task:
                    msg = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "t1", "type": "function", "function": {"name": "answer", "arguments": "{}"}}]}
                self.send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_f3_an_error_body_answered_with_200_is_a_failed_rollout_with_the_servers_words():
    # repros/oddserver/run_modes.sh error200: retried as a malformed body, then the run stopped
    with _OddServer("error200") as srv:
        task = sim.task(n_train=12, n_val=12, kinds=6)
        ev = gepetto.evaluate(task.seed_candidate, task.valset, task.metric, program=task.program,
                              task_lm=OpenAILM("task", base_url=srv.url, max_retries=3, backoff=0.01))
    failed = {r.example_id: r for r in ev.rollouts if r.error}
    assert list(failed) == ["val-7"]
    assert "maximum context length is 4096 tokens" in failed["val-7"].error
    assert failed["val-7"].error.startswith("LMError")  # the request's failure: no retries, no outage


def test_f3_a_tool_call_only_answer_fails_with_a_hint():
    # repros/oddserver/run_modes.sh toolcall: "the LM gave an empty answer", with no hint
    with _OddServer("toolcall") as srv:
        task = sim.task(n_train=4, n_val=4, kinds=2)
        ev = gepetto.evaluate(task.seed_candidate, task.valset, task.metric, program=task.program,
                              task_lm=OpenAILM("task", base_url=srv.url))
    assert all("with tool calls only, no text" in r.error for r in ev.rollouts)


def test_f3_a_run_stopped_before_the_seed_was_scored_never_prints_nan(cli, monkeypatch):
    # repros/poison: "validation: seed nan -> best nan"
    from gepetto.lm import names

    real = names.BACKENDS["sim"]
    dead = dataclasses.replace(real, build=lambda spec: _Dies(0) if spec.model == "task" else real.builder()(spec))
    monkeypatch.setitem(names.BACKENDS, "sim", dead)
    res = cli("optimize", *SIM, "--budget", 40, "--max-lm-failures", 2, "--lm-retry-pause", 0, "--run", "r",
              "--storage", "s.sqlite", "-q")
    assert res.exit_code == 3 and "no candidate validated" in res.output
    shown = cli("show", "r", "--storage", "s.sqlite")
    assert "nan" not in res.output.lower() and "nan" not in shown.output.lower()


# ---- F4: a shorter limit never replaces a better stored result ---------------------------------------------------

def test_f4_a_lower_budget_on_a_finished_run_is_refused_and_its_result_kept(tmp_path, cli):
    # repros/budget_resume/repro.sh: best 1.000 silently replaced by 0.333 (and `export` gave the worse candidate)
    opts = [*SIM[:4], "--reflection-lm", "sim:reflection?noise=0.3", "--task-option", "kinds=6", "--storage",
            "b.sqlite", "--run", "r", "-q"]
    first = cli("optimize", *opts, "--budget", 150)
    assert first.exit_code == 0, first.output
    best = cli("export", "r", "--storage", "b.sqlite").output
    lower = cli("optimize", *opts, "--budget", 60)
    assert lower.exit_code == 2 and "has used" in lower.output and "a budget of 60" in lower.output
    assert cli("export", "r", "--storage", "b.sqlite").output == best


def test_f4_a_resume_stopped_short_by_another_limit_keeps_the_stored_result(tmp_path):
    where = {"storage": tmp_path / "s.sqlite", "run": "r", "reflection_lm": "sim:reflection?noise=0.3"}
    first = _sim(budget=100, **where)
    assert first.best_score > first.seed_score
    with pytest.warns(RuntimeWarning, match="had got further before"):
        short = _sim(budget=100, target_score=first.seed_score, **where)  # reached at once: stops at the seed
    assert short.rollouts_used < first.rollouts_used
    stored = RunStore(tmp_path / "s.sqlite").get_run("r")
    assert stored.result["best_score"] == first.best_score and stored.status == "finished"
    assert stored.result["best_candidate"] == first.best_candidate.to_dict()


# ---- F5: redaction of everything written or shown, never of what the program receives ----------------------------

def _scan(storage: Path, secret: str) -> dict[str, int]:
    """Rows holding `secret`, per table, plus the raw bytes of the store and its WAL."""
    db = sqlite3.connect(storage)
    hits = {t: sum(secret in str(r) for r in db.execute(f"SELECT * FROM {t}"))
            for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    raw = b"".join(Path(f"{storage}{s}").read_bytes() for s in ("", "-wal") if Path(f"{storage}{s}").exists())
    hits["file bytes"] = int(secret.encode() in raw)
    return hits


def test_f5_reflection_answers_quoting_a_key_are_stored_redacted(tmp_path, monkeypatch):
    # repros/secrets/refl_secret.py: an echoed key sat in 2 rows of lm_answers
    secret = "zq9Xw2LmT4vB7nKp1RdY"
    monkeypatch.setenv("MY_SERVICE_API_KEY", secret)
    inner = SimReflectionLM()

    class Echoing:
        name = "refl"

        async def complete(self, messages, **params):
            out = await inner.complete(messages, **params)
            return Completion(out.text + f"\n(debug: my key is {secret})", out.usage)

    _sim(reflection_lm=Echoing(), budget=40, storage=tmp_path / "s.sqlite", run="r")
    hits = _scan(tmp_path / "s.sqlite", secret)
    assert RunStore(tmp_path / "s.sqlite").events("r")  # the run is there ...
    assert not any(hits.values()), hits  # ... and the key in no table, nor in the file


def test_f5_a_task_answer_shaped_like_a_key_reaches_the_program_as_said(tmp_path):
    # repros/secrets/redact_task_output.py: "primary key: 9f86d0..." reached the program as "[REDACTED]", score 0
    ids = ["9f86d081884c7d659a2feaa0c55ad015", "60303ae22b998861bce3b28f33eec1be"]
    train = [Example({"text": f"Row {i}: primary key: {h}"}, gold=f"primary key: {h}") for i, h in enumerate(ids)]
    perfect = ScriptedLM(lambda m, p: m[-1]["content"].split(": ", 1)[1], name="perfect")
    ev = gepetto.evaluate("Copy the primary key.", train, lambda e, o, t: float(o == e.gold), task_lm=perfect)
    assert [r.score.value for r in ev.rollouts] == [1.0, 1.0]
    result = gepetto.optimize("Copy the primary key.", train, lambda e, o, t: float(o == e.gold), task_lm=perfect,
                              reflection_lm="sim:reflection", budget=4, storage=tmp_path / "s.sqlite", run="r",
                              cache="auto")
    assert result.seed_score == 1.0  # the program got the answer as the model said it ...
    for h in ids:  # ... and what was written of it is redacted (rollouts, traces, the response cache)
        assert not any(_scan(tmp_path / "s.sqlite", h).values())


def test_f5_a_password_in_a_base_url_is_never_written_or_shown(tmp_path, cli):
    # repros/keys/userinfo.py: the password showed in `show`, errors, the store and the report (written 0644)
    password = "Hunter2-Passw0rd-XYZ"
    with FakeOpenAIServer(sim_responder()) as srv:
        lm = srv.url.replace("http://", f"http://alice:{password}@")
        opts = ["--task", "sim", "--reflection-lm", "sim:reflection", "--storage", "ui.sqlite", "--run", "r", "-q"]
        run = cli("optimize", *opts, "--task-lm", f"openai:task@{lm}", "--budget", 30)
        assert run.exit_code == 0, run.output
        shown = [cli(*c, "--storage", "ui.sqlite").output for c in (["show", "r"], ["runs"], ["export", "r"])]
        assert cli("report", "r", "--storage", "ui.sqlite", "-o", "ui.html").exit_code == 0
        resumed = cli("optimize", *opts, "--task-lm", f"openai:task@{lm}", "--budget", 40)  # given again: resumes
        assert resumed.exit_code == 0, resumed.output
        forgotten = cli("optimize", *opts, "--budget", 50)  # not given: the store never had it
        assert forgotten.exit_code == 2 and "task_lm held a secret" in forgotten.output
    down = cli("optimize", *opts, "--task-lm", f"openai:task@{lm}", "--budget", 60)  # the server is gone
    assert down.exit_code == 2 and "cannot reach" in down.output
    for text in [run.output, *shown, resumed.output, forgotten.output, down.output, Path("ui.html").read_text()]:
        assert password not in text
    assert "alice:[REDACTED]@" in shown[0]
    assert not any(_scan(tmp_path / "ui.sqlite", password).values())
    assert stat.S_IMODE(os.stat("ui.html").st_mode) == 0o600


# ---- F6: example ids from a canonical form -----------------------------------------------------------------------

SET_IDS = """
from gepetto import Example
print(Example({"q": "question 1", "tags": {"alpha", "beta", "gamma", "t1"}}, gold={"a", "b"}).id)
"""


def test_f6_examples_holding_a_set_have_the_same_id_in_every_process():
    # repros/data/repro_set.sh: another id under another PYTHONHASHSEED, so the run could not be resumed
    ids = set()
    for seed in ("1", "2", "3"):
        proc = _python(SET_IDS, env={"PYTHONHASHSEED": seed})
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ids.add(out.strip())
    assert len(ids) == 1


def test_f6_data_with_no_canonical_form_is_refused_with_a_clear_error():
    # repros/data/hostile.py input_mixed_keys: a bare TypeError ("'<' not supported between 'int' and 'str'")
    with pytest.raises(NoCanonicalForm, match=r"mapping keys of types int, str.*give the example an id"):
        Example({"q": "question", 1: "one"}, gold="a")

    class Opaque:
        pass

    with pytest.raises(NoCanonicalForm, match="Opaque object, whose text shows its memory address"):
        Example({"q": Opaque()})
    assert Example({"q": "question", 1: "one"}, id="mine").id == "mine"  # an id given: no form needed
    assert isinstance(NoCanonicalForm("x"), TypeError)


# ---- F7: program outputs rendered once -------------------------------------------------------------------------

@dataclasses.dataclass
class Answer:
    text: str


def _answer_program(candidate, example, ctx):
    i, k = example.inputs["q"].split()[1], example.inputs["q"].split()[3]
    return Answer(f"answer-{i}" if f"rule-{k}" in candidate["instruction"] else "no idea")


def _answer_metric(example, output, trace):
    if output.text == example.gold:  # the metric gets the output itself
        return Score(1.0, "Correct.")
    k = example.inputs["q"].split()[3]
    return Score(0.0, f"Wrong: expected {example.gold}. Questions of kind {k} need rule-{k}.")


class _PromptTagged:
    """The sim reflection LM, with a tag in each rewrite that depends on its whole prompt: a prompt rendered
    otherwise on resume gives other candidates (as a sampling LM would)."""

    name = "tagged"

    def __init__(self):
        self.inner = SimReflectionLM(noise=0.3, seed=5)

    async def complete(self, messages, **params):
        import hashlib

        out = await self.inner.complete(messages, **params)
        tag = hashlib.sha256(json.dumps(messages).encode()).hexdigest()[:6]
        return Completion(out.text.replace("</new_instruction>", f" v{tag}</new_instruction>"), out.usage)


def _f7_run(storage: Path, budget: int):
    task = sim.task(n_train=12, n_val=12, kinds=6)
    return gepetto.optimize("Answer the question.", task.trainset, _answer_metric, valset=task.valset,
                            program=_answer_program, task_lm="sim:task", reflection_lm=_PromptTagged(),
                            budget=budget, seed=3, storage=storage, run="r")


def test_f7_an_output_that_is_no_json_is_rendered_the_same_when_resumed(tmp_path):
    # repros/resume_output/repro.sh: a dataclass output rendered one way, then another on resume (25 of 40 stored
    # rollouts unused, 105 new ones paid)
    whole = _f7_run(tmp_path / "whole.sqlite", 150)
    _f7_run(tmp_path / "cut.sqlite", 50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a resume that left its stored path would warn (RuntimeWarning)
        resumed = _f7_run(tmp_path / "cut.sqlite", 150)
    keep = ("best_candidate", "best_score", "candidates", "rollouts_used", "history", "proposals")
    assert {k: resumed.to_dict()[k] for k in keep} == {k: whole.to_dict()[k] for k in keep}
    assert len(whole.candidates) > 2
    assert not RunStore(tmp_path / "cut.sqlite").events("r", "diverged")


def test_f7_the_run_keeps_an_output_as_the_store_gives_it_back(tmp_path):
    from gepetto.program import run_rollout, settled

    weird = {"when": Answer("x"), 1: {"b", "a"}, "t": (1, 2.5, None)}
    assert settled(weird) == json.loads(json.dumps(settled(weird))) == {"when": "Answer(text='x')", "1": ["a", "b"],
                                                                         "t": [1, 2.5, None]}
    ex = Example({"q": "question 1 kind 0"}, gold="answer-1", id="e")
    seen = []

    def metric(example, output, trace):
        seen.append(output)
        return 1.0

    run = asyncio.run(run_rollout(lambda c, e, ctx: weird, metric, gepetto.Candidate(instruction="i"), ex,
                                  SimTaskLM()))
    assert seen == [weird] and run.output == settled(weird)  # the metric got the object, the run its stored form


# ---- F8: report writes are atomic and private ------------------------------------------------------------------

def test_f8_a_failed_report_write_leaves_the_previous_report(tmp_path, monkeypatch):
    # repros/bigreport/repro_atomic.sh: write_text truncated the old report first
    _sim(budget=30, storage=tmp_path / "s.sqlite", run="r")
    snap = run_snapshot(RunStore(tmp_path / "s.sqlite"), "r")
    out = tmp_path / "report.html"
    out.write_text("the previous report")
    out.chmod(0o644)

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", full_disk)
        with pytest.raises(OSError, match="No space left"):
            write_report(snap, out)
    assert out.read_text() == "the previous report"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".report")] == []  # no temporary file left
    write_report(snap, out)
    assert out.read_text().startswith("<!DOCTYPE html>") and stat.S_IMODE(out.stat().st_mode) == 0o600


# ---- F9: a cut program stops, examples stay as given, a newer store says so ---------------------------------------

def test_f9_a_sync_program_cut_by_the_timeout_stops_calling_the_lm():
    # repros/timeout/sync_timeout.py: each cut program went on calling (and paying) the LM in its thread for as long
    # as the run went on
    calls = []

    class Counting:
        name = "counting"

        async def complete(self, messages, **params):
            calls.append(1)
            return Completion("no idea")

    def agent(candidate, example, ctx):  # an agent loop that never ends by itself
        while True:
            ctx.lm("instruction", example.inputs["q"])
            time.sleep(0.05)

    def programs() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("gepetto-program")]

    async def main():
        task = sim.task(n_train=6, n_val=6, kinds=3)
        ev = await gepetto.evaluate_async(task.seed_candidate, task.valset, task.metric, program=agent,
                                          task_lm=Counting(), rollout_timeout=0.3)
        deadline = time.monotonic() + 60
        while programs():  # the event loop goes on (as a run does): the cut programs must end by themselves
            assert time.monotonic() < deadline, "the cut programs went on calling the LM"
            await asyncio.sleep(0.05)
        return ev

    ev = asyncio.run(main())
    assert len(ev.rollouts) == 6 and all("rollout_timeout" in r.error for r in ev.rollouts)
    assert not programs() and len(calls) >= 6


def test_f9_a_program_cannot_change_the_examples_of_later_rollouts():
    # repros/mutate/mutate.py: a program that popped a field took it from every later rollout
    task = sim.task(n_train=6, n_val=6, kinds=3)

    def prog(candidate, example, ctx):
        return ctx.lm("instruction", example.inputs.pop("q"))

    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=prog,
                              task_lm="sim:task", reflection_lm="sim:reflection", budget=60)
    assert task.valset[0].inputs == {"q": "question 0 kind 0"}
    assert result.best_score == 1.0


def test_f9_a_stored_config_from_a_newer_version_says_it_came_from_the_store(tmp_path):
    # repros: "invalid configuration: future_option: unknown option", not saying where it came from
    _sim(budget=20, storage=tmp_path / "s.sqlite", run="r")
    db = sqlite3.connect(tmp_path / "s.sqlite")
    config = json.loads(db.execute("SELECT config FROM runs WHERE name='r'").fetchone()[0])
    db.execute("UPDATE runs SET config=? WHERE name='r'", (json.dumps({**config, "future_option": 1}),))
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match=r"(?s)run 'r' in .*s\.sqlite: its stored configuration does not load.*"
                                          r"another version.*future_option"):
        _sim(budget=40, storage=tmp_path / "s.sqlite", run="r")


# ---- F10: the endpoint and the key checked before the first paid call ---------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_f10_a_dead_endpoint_is_a_configuration_error_before_anything_is_paid(tmp_path, cli):
    # repros: `openai:m@http://127.0.0.1:9/v1` took 48.7 s to stop, after the run had started
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    with pytest.raises(ConfigError, match=f"cannot reach {url}"):
        _sim(task_lm=f"openai:m@{url}", budget=20, storage=tmp_path / "s.sqlite", run="r")
    assert RunStore(tmp_path / "s.sqlite").get_run("r") is None  # nothing written: no run to clean up
    res = cli("optimize", *SIM[:2], "--task-lm", f"openai:m@{url}", "--reflection-lm", "sim:reflection",
              "--max-lm-failures", 2, "--lm-retry-pause", 0.1, "-q")
    assert res.exit_code == 2 and "cannot reach" in res.output


def test_f10_a_missing_api_key_is_a_configuration_error(cli, monkeypatch):
    # repros: exit 1 "the run failed" once the run had started
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    res = cli("optimize", *SIM[:2], "--task-lm", "openai:gpt-4.1-mini", "--reflection-lm", "sim:reflection", "-q")
    assert res.exit_code == 2 and "set the API key in the environment variable OPENAI_API_KEY" in res.output


def test_f10_a_refused_key_is_a_configuration_error(monkeypatch):
    class Refusing(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("F10_KEY", "sk-not-the-right-one-0123456789")
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        with pytest.raises(ConfigError, match=r"refused the API key \(HTTP 401.*F10_KEY") as info:
            _sim(task_lm=f"openai:m@{url}?api_key_env=F10_KEY", budget=20)
        assert "sk-not-the-right-one" not in str(info.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(LMError):  # (the checks raise LMConfigError, an LMError and a ValueError, under the API)
        OpenAILM("m", base_url=url, api_key_env="F10_KEY").check_endpoint()
