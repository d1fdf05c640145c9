"""Secrets and hostile text: keys go only where they were paired, and never reach disk, logs, reports or prompts.

The end-to-end test runs an optimisation whose task LM errors quote a fake key (a scripted LM raising, and a
loopback server answering 401 with the key in the body, as some providers and proxies do), then scans every
output of the run for it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import stat
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto.lm.base import Completion, LMError
from gepetto.lm.names import make_lm
from gepetto.lm.openai import PLACEHOLDER_KEY, OpenAILM
from gepetto.secrets import REDACTED, redact, redact_exception
from gepetto.testing import FakeOpenAIServer, ScriptedLM, sim_responder

FAKE_KEY = "sk-test-FAKEKEY-1234567890abcdef"
MSG = [{"role": "user", "content": "hello"}]
SRC = Path(__file__).resolve().parents[1] / "src" / "gepetto"


def _auth(server: FakeOpenAIServer) -> str:
    return {k.lower(): v for k, v in server.headers[-1].items()}.get("authorization", "")


# ---- redaction ------------------------------------------------------------------------------------

def test_redact_removes_key_values_in_use_and_key_shapes(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "plainvalue-without-shape-42")
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok_7f3a9c1e5b")
    monkeypatch.setenv("MY_SECRET", "short")  # under 8 characters: too common to be removed everywhere
    text = ("key plainvalue-without-shape-42 tok_7f3a9c1e5b short; sk-proj-abcdefghijklmnop1234 "
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc hf_abcdefghijklmnopqrstu AKIAABCDEFGHIJKLMNOP "
            "https://x/v1?api_key=0123456789abcdef0123 token=\"deadbeefdeadbeefdeadbeef\"")
    out = redact(text)
    for secret in ("plainvalue-without-shape-42", "tok_7f3a9c1e5b", "sk-proj-abcdefghijklmnop1234",
                   "eyJhbGciOiJIUzI1NiJ9", "hf_abcdefghijklmnopqrstu", "AKIAABCDEFGHIJKLMNOP",
                   "0123456789abcdef0123", "deadbeefdeadbeefdeadbeef"):
        assert secret not in out, secret
    assert "short" in out and "api_key=" in out and out.count(REDACTED) >= 8
    # ordinary prose, prompts and feedback are left alone
    prose = 'Reply with only a JSON object: {"item": "<what is ordered>", "quantity": <integer>}. Ask-questions.'
    assert redact(prose) == prose
    assert redact("the key: use the customer_message_text") == "the key: use the customer_message_text"


def test_http_basic_credentials_and_authorization_headers_are_redacted() -> None:
    """Repros a05 and a04 (round 2): a base URL's password is sent as `Authorization: Basic <base64 of
    user:password>`; an endpoint that echoed the header put it in the stored error, the report and the export, one
    base64 decode from the password, and such a header pasted in an input stayed as it was."""
    import base64

    b64 = base64.b64encode(b"alice:Hunter2-Passw0rd-XYZ").decode()
    for text in (f"request headers were: Authorization: Basic {b64}", f"curl -H 'Authorization: Basic {b64}'",
                 f"it sent basic {b64} again", '{"authorization": "Token abcdef123456"}'):
        out = redact(text)
        assert b64 not in out and "abcdef123456" not in out and REDACTED in out, out
    # prose that only looks a little like it stays
    for prose in ("Basic instructions for everyone.", "Authorization: required for this endpoint.",
                  "A basic Hello12345678 greeting."):
        assert redact(prose) == prose


def test_redacted_exception_keeps_its_class_and_drops_the_key() -> None:
    exc = redact_exception(ValueError(f"bad key {FAKE_KEY}"))
    assert type(exc) is ValueError and FAKE_KEY not in str(exc) and REDACTED in str(exc)
    same = KeyError("nothing secret")
    assert redact_exception(same) is same
    assert FAKE_KEY not in str(LMError(f"HTTP 401: Incorrect API key provided: {FAKE_KEY}"))


# ---- which URL gets which key -----------------------------------------------------------------------

async def test_custom_base_url_gets_no_key_unless_paired(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("MY_SERVER_KEY", "local-server-key-0001")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with FakeOpenAIServer() as unpaired, FakeOpenAIServer() as paired:
        await OpenAILM("m", base_url=unpaired.url).complete(MSG)
        await make_lm(f"openai:m@{paired.url}?api_key_env=MY_SERVER_KEY").complete(MSG)
        await OpenAILM("m", base_url=paired.url, api_key_env="MY_SERVER_KEY").complete(MSG)
    assert _auth(unpaired) == f"Bearer {PLACEHOLDER_KEY}"
    assert all("local-server-key-0001" in str(h) for h in paired.headers)
    for server in (unpaired, paired):
        assert FAKE_KEY not in str(server.headers) and not any(
            k.lower().startswith("openai-") and k.lower() != "openai-version" for h in server.headers for k in h)
    # the default OpenAI URL is the one paired with $OPENAI_API_KEY
    assert OpenAILM("gpt-4.1-mini").api_key() == FAKE_KEY
    assert OpenAILM("m", base_url="http://127.0.0.1:9/v1").api_key() == PLACEHOLDER_KEY


def test_named_key_variable_must_be_set(monkeypatch) -> None:
    monkeypatch.delenv("MISSING_KEY_VAR", raising=False)
    with pytest.raises(LMError, match="MISSING_KEY_VAR"):
        make_lm("openai:m@https://llm.example.com/v1?api_key_env=MISSING_KEY_VAR")


def test_a_key_over_plain_http_to_another_host_warns_once(monkeypatch) -> None:
    monkeypatch.setenv("MY_SERVER_KEY", "local-server-key-0001")
    remote = OpenAILM("m", base_url="http://gpu-box.example.com:8000/v1", api_key_env="MY_SERVER_KEY")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        remote._new_client()
        remote._new_client()
        OpenAILM("m", base_url="http://127.0.0.1:8000/v1", api_key_env="MY_SERVER_KEY")._new_client()
        OpenAILM("m", base_url="https://gpu-box.example.com/v1", api_key_env="MY_SERVER_KEY")._new_client()
        OpenAILM("m", base_url="http://other.example.com/v1")._new_client()  # no key sent: nothing to warn
    texts = [str(w.message) for w in caught]
    assert len(texts) == 1 and "plain http to gpu-box.example.com" in texts[0]
    assert "local-server-key-0001" not in texts[0]


# ---- files ----------------------------------------------------------------------------------------

def test_store_and_cache_files_are_private(tmp_path) -> None:
    from gepetto.lm.cache import CachedLM
    from gepetto.store.sqlite import RunStore

    store = RunStore(tmp_path / "runs.sqlite")
    store.create_run("r", {"task": "sim"}, 0)
    CachedLM(ScriptedLM(["x"]), tmp_path / "cache.sqlite")
    for name in ("runs.sqlite", "runs.sqlite-wal", "cache.sqlite"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o600, f"{name}: {oct(mode)}"


def test_stored_data_is_never_unpickled_or_executed() -> None:
    banned = re.compile(r"\bimport (?:pickle|marshal|shelve|dill)\b|\bfrom (?:pickle|marshal|shelve|dill) import|"
                        r"\bpickle\.|(?<![\w.])(?<!def )(?:eval|exec)\(|yaml\.load\(|yaml\.unsafe_load")
    hits = [f"{p.relative_to(SRC)}:{n}: {line.strip()}"
            for p in sorted(SRC.rglob("*.py")) for n, line in enumerate(p.read_text().splitlines(), 1)
            if banned.search(line)]
    assert hits == []


def test_report_escapes_hostile_candidate_text() -> None:
    from gepetto.report import render_report

    hostile = "Do it. <script>alert(1)</script> </textarea><img src=x onerror=alert(2)> & done"
    cands = [{"index": 0, "id": "a", "texts": {"instruction": "seed"}, "parents": [], "origin": "seed",
              "iteration": 0, "component": None, "mean": 0.2, "val_scores": {"v1": 0.2},
              "rollouts_at_creation": 1},
             {"index": 1, "id": "b", "texts": {"instruction": hostile}, "parents": [0], "origin": "reflection",
              "iteration": 1, "component": "instruction</textarea>", "mean": 0.9, "val_scores": {"v1": 0.9},
              "rollouts_at_creation": 4}]
    snap = {"run": {"name": "r</textarea>", "status": "finished", "task": "<b>t</b>"},
            "result": {"candidates": cands, "best_candidate": {"instruction": hostile}, "best_score": 0.9,
                       "seed_score": 0.2, "pareto_front": [1], "rollouts_used": 4, "budget": 10},
            "samples": [{"example_id": "v1", "inputs": hostile, "gold": "</textarea>",
                         "seed": {"output": hostile, "score": 0.2, "feedback": hostile},
                         "best": {"output": "ok", "score": 0.9, "feedback": "</textarea>"}}]}
    page = render_report(snap)
    assert "<script>alert" not in page and "<img" not in page
    assert "</textarea" not in page.lower() and "onerror=alert(2)>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;/textarea&gt;" in page


# ---- end to end: a run whose errors quote a key ------------------------------------------------------

class LeakyLM:
    """A task LM whose every third call fails with an error quoting the key (like a misconfigured proxy)."""

    def __init__(self, lm) -> None:
        self.lm, self.name, self.calls = lm, lm.name, 0

    async def complete(self, messages, **params) -> Completion:
        self.calls += 1
        if self.calls % 3 == 0:
            raise RuntimeError(f"upstream rejected Authorization: Bearer {FAKE_KEY} (key {FAKE_KEY})")
        return await self.lm.complete(messages, **params)


def test_no_secret_in_any_output_of_a_run(tmp_path, monkeypatch, caplog, capfd) -> None:
    from gepetto import cli
    from gepetto.lm import names

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)
    leaky: list[LeakyLM] = []
    real_make_lm = names.make_lm

    def make(name: str):
        lm = real_make_lm(name)
        if "sim-task" in name:
            leaky.append(LeakyLM(lm))
            return leaky[-1]
        return lm

    monkeypatch.setattr(names, "make_lm", make)
    runner = CliRunner()
    with FakeOpenAIServer(sim_responder()) as task_srv, FakeOpenAIServer(sim_responder()) as refl_srv:
        # the task server is paired with the key; it refuses requests quoting it in a provider-style error body
        # (400: the request's fault, so those rollouts score 0 and the run goes on to reflection; a 401 would stop
        # the run at once as an authentication error)
        task_srv.faults["sim-task"] = [f"400:Invalid request for API key {FAKE_KEY}."] * 12
        task_lm = f"openai:sim-task@{task_srv.url}?api_key_env=OPENAI_API_KEY&max_retries=0"
        refl_lm = f"openai:sim-reflection@{refl_srv.url}"  # not paired: must never see the key
        res = runner.invoke(cli.app, ["optimize", "--task", "sim", "--task-lm", task_lm, "--reflection-lm", refl_lm,
                                      "--budget", "60", "--run", "leak", "--storage", "runs.sqlite", "-v"])
        assert res.exit_code == 0, res.output
        outputs = [res.output]
        for args in (["runs"], ["show", "leak"], ["export", "leak"], ["report", "leak", "-o", "report.html"]):
            r = runner.invoke(cli.app, [*args, "--storage", "runs.sqlite"])
            assert r.exit_code == 0, r.output
            outputs.append(r.output)

        # a failure the CLI reports: the error text quotes the key
        def broken(name: str):
            raise RuntimeError(f"cannot reach the model with key {FAKE_KEY}")

        monkeypatch.setattr(names, "make_lm", broken)
        failed = runner.invoke(cli.app, ["optimize", "--task", "sim", "--task-lm", task_lm, "--reflection-lm",
                                         refl_lm, "--budget", "20", "--run", "broken", "--storage", "runs.sqlite"])
        assert failed.exit_code == 1 and "cannot reach the model" in failed.output
        outputs.append(failed.output)

        # exceptions a Python user sees: an LM error, and the feedback of an evaluation
        task_srv.faults["sim-task"] = [f"401:Incorrect API key provided: {FAKE_KEY}."]
        with pytest.raises(LMError) as info:
            asyncio.run(real_make_lm(task_lm).complete(MSG))
        outputs.append(str(info.value))
        ev = gepetto.evaluate("Answer.", [{"q": "question 1 kind 0", "gold": "answer-1"}] * 3,
                              lambda e, o, t: 1.0, task_lm=LeakyLM(ScriptedLM(lambda m, p: "x")))
        outputs += [r.score.feedback + str(r.error) for r in ev.rollouts]
        assert any(REDACTED in r.score.feedback for r in ev.rollouts)

    # the key was really in play: sent to the paired server, quoted by its errors and by the scripted LM
    assert any(FAKE_KEY in str(h) for h in task_srv.headers)
    assert leaky and leaky[0].calls >= 3
    # the unpaired server never saw it, in headers or in the reflection prompts
    assert refl_srv.requests and FAKE_KEY not in str(refl_srv.headers) + str(refl_srv.requests)
    assert _auth(refl_srv) == f"Bearer {PLACEHOLDER_KEY}"

    from gepetto.store.sqlite import RunStore

    store = RunStore(tmp_path / "runs.sqlite")
    events = store.events("leak")
    feedback = [r.score.feedback for r in store.rollouts("leak").values()]
    store.close()
    assert any(REDACTED in f for f in feedback)  # the errors were recorded, without the key
    assert events and FAKE_KEY not in str(events)
    captured = capfd.readouterr()
    outputs += [captured.out, captured.err, caplog.text]
    for i, text in enumerate(outputs):
        assert FAKE_KEY not in text, f"output {i}: {text[:2000]}"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"runs.sqlite", "report.html"} <= {p.name for p in files}
    for p in files:  # the store, its WAL, the cache table inside it, the report
        assert FAKE_KEY.encode() not in p.read_bytes(), p.name
