"""HTTP backends against a fault-injecting OpenAI-compatible server on loopback; LM names; the response cache."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

import gepetto
from gepetto.ledger import Ledger
from gepetto.lm.base import AuthenticationError, LMError, LMSetupError, LMUnavailable, MeteredLM
from gepetto.lm.cache import CachedLM
from gepetto.lm.names import make_lm, parse_lm_name
from gepetto.lm.openai import OpenAILM
from gepetto.lm.remote import RateLimiter, parse_retry_after
from gepetto.program import run_rollout, single_instruction
from gepetto.testing import FAULT_KINDS, FakeOpenAIServer, ScriptedLM
from gepetto.types import Example, Score

MSG = [{"role": "user", "content": "hello"}]


class RecordingLM(OpenAILM):
    """Records the waits between attempts instead of trusting the clock."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        d = super()._delay(attempt, retry_after)
        self.waits.append(d if retry_after is None else retry_after)
        return 0.0 if retry_after is None else min(d, 0.05)  # keep the test fast, remember the wish


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def lm_for(server: FakeOpenAIServer, model: str = "m", **kw) -> RecordingLM:
    kw.setdefault("backoff", 0.001)
    return RecordingLM(model, base_url=server.url, **kw)


async def test_plain_call_returns_text_usage_and_finish_reason(server) -> None:
    out = await lm_for(server).complete(MSG, max_tokens=20)
    assert out.text == "echo: hello" and out.finish_reason == "stop" and out.attempts == 1
    assert out.usage.input_tokens > 0 and not out.usage.estimated
    body = server.requests[-1]
    assert body["max_tokens"] == 20 and body["temperature"] == 0.0  # deterministic by default


async def test_prompt_tokens_the_server_had_cached_are_counted_in_the_ledger() -> None:
    ledger = Ledger()
    long = [{"role": "user", "content": "hello there " * 10}]  # 30 tokens by the server's count
    with FakeOpenAIServer(cached_tokens=3) as srv:
        out = await MeteredLM(lm_for(srv), ledger, "reflection").complete(long)
        again = await MeteredLM(lm_for(srv), ledger, "reflection").complete(long)
    assert out.usage.cached_input_tokens == 3 and again.usage.cached_input_tokens == 3
    u = ledger.roles["reflection"]
    assert u.cached_input_tokens == 6 and u.input_tokens == 2 * out.usage.input_tokens > 6
    assert ledger.total().cached_input_tokens == 6
    # a ledger stored before this count existed reads back with none
    old = {k: v for k, v in ledger.to_dict()["reflection"].items() if k != "cached_input_tokens"}
    assert Ledger.from_dict({"reflection": old}).roles["reflection"].cached_input_tokens == 0


async def test_missing_usage_is_estimated_and_marked() -> None:
    with FakeOpenAIServer(usage=False) as srv:
        out = await lm_for(srv).complete(MSG)
    assert out.usage.estimated and out.usage.output_tokens > 0


async def test_429_honours_retry_after_then_succeeds(server) -> None:
    server.faults["m"] = ["429:7", "429:3"]
    lm = lm_for(server)
    ledger = Ledger()
    out = await MeteredLM(lm, ledger, "task").complete(MSG)
    assert out.text == "echo: hello" and out.attempts == 3
    assert lm.waits == [7.0, 3.0]  # the server's wishes, in order
    u = ledger.roles["task"]
    assert (u.calls, u.retries, u.errors) == (1, 2, 0)


@pytest.mark.parametrize("fault", ["500", "503", "reset", "malformed", "empty", "no_choices"])
async def test_transient_faults_are_retried(server, fault: str) -> None:
    server.faults["m"] = [fault, fault]
    lm = lm_for(server)
    out = await lm.complete(MSG)
    assert out.text == "echo: hello" and out.attempts == 3
    assert len(lm.waits) == 2


async def test_random_faults_are_seeded_by_the_request_not_the_timing() -> None:
    """`random_faults`: a share of a model's requests fail, the same ones on every run (a retry draws anew)."""
    async def one_run(order):
        with FakeOpenAIServer() as srv:
            # no "timeout" kind here: a client timeout on a busy machine would be a retry the seed did not draw
            srv.random_faults("m", 0.3, seed=4, retry_after="0", kinds=("429", "500", "reset", "empty", "malformed"))
            lm = lm_for(srv, timeout=30)
            ledger = Ledger()
            metered = MeteredLM(lm, ledger, "task")
            outs = await asyncio.gather(*(metered.complete([{"role": "user", "content": f"q{i}"}]) for i in order))
            return srv.injected, ledger.roles["task"], sorted(o.text for o in outs), srv.requests

    injected, usage, texts, requests = await one_run(range(40))
    again = await one_run(reversed(range(40)))
    assert injected == again[0] and texts == again[2]  # same faults whatever the order of the requests
    assert sum(injected.values()) == usage.retries == len(requests) - 40 and 4 <= usage.retries <= 30
    assert {k for _, k in injected} <= set(FAULT_KINDS) - {"timeout"} and len({k for _, k in injected}) >= 3
    assert usage.errors == 0 and texts == sorted(f"echo: q{i}" for i in range(40))


async def test_backoff_grows_exponentially_with_jitter(server) -> None:
    lm = lm_for(server, backoff=1.0, max_backoff=100)
    delays = [OpenAILM._delay(lm, a, None) for a in range(5)]
    for a, d in enumerate(delays):
        assert 0.5 * 2**a <= d <= 2**a


async def test_timeout_is_retried_then_recorded_as_error(server) -> None:
    server.faults["m"] = ["slow:3", "slow:3"]
    lm = lm_for(server, timeout=0.3, max_retries=1)
    ledger = Ledger()
    with pytest.raises(LMError, match="gave up after 2 attempts"):
        await MeteredLM(lm, ledger, "task").complete(MSG)
    u = ledger.roles["task"]
    assert (u.calls, u.errors, u.retries) == (1, 1, 1)


async def test_client_errors_are_not_retried(server) -> None:
    server.faults["m"] = ["400"]
    lm = lm_for(server)
    with pytest.raises(LMError, match="HTTP 400"):
        await lm.complete(MSG)
    assert lm.waits == [] and len(server.requests) == 1


async def test_an_unreachable_lm_is_not_a_score_but_a_refused_request_is(server) -> None:
    # a burst of 500s past the retries: the infrastructure failed, no verdict on the candidate
    server.faults["m"] = ["500"] * 3
    lm = lm_for(server, max_retries=2)
    cand, ex = gepetto.Candidate(instruction="Say hi."), Example({"q": "hi"}, gold="x", id="e1")
    with pytest.raises(LMUnavailable, match=r"gave up after 3 attempts.*HTTP 500"):
        await run_rollout(single_instruction(), lambda e, o, t: 1.0, cand, ex, lm)
    server.faults["m"] = ["401"]  # a bad key: it cannot heal by retrying
    with pytest.raises(AuthenticationError, match="HTTP 401"):
        await run_rollout(single_instruction(), lambda e, o, t: 1.0, cand, ex, lm)
    server.faults["m"] = ["404"]
    with pytest.raises(LMSetupError, match="HTTP 404"):
        await lm.complete(MSG)
    server.faults["m"] = ["400"]  # the server refused this request (e.g. too long): the program failed
    r = await run_rollout(single_instruction(), lambda e, o, t: 1.0, cand, ex, lm)
    assert r.score.value == 0.0 and "HTTP 400" in r.score.feedback and r.stage == "program"


async def test_an_lm_failure_wrapped_by_the_metric_is_still_unavailable() -> None:
    async def judge_metric(example, output, trace):
        try:
            await ScriptedLM(lambda m, p: (_ for _ in ()).throw(LMUnavailable("judge down"))).complete(MSG)
        except LMError as exc:
            raise RuntimeError("the judge failed") from exc

    with pytest.raises(LMUnavailable, match="judge down"):
        await run_rollout(single_instruction(), judge_metric, gepetto.Candidate(instruction="x"),
                          Example({"q": "x"}, id="e"), ScriptedLM(["fine"]))


async def test_concurrency_limit_is_respected() -> None:
    # the first 3 requests are held until all 3 are in (no timing involved): never more than 3 at once
    with FakeOpenAIServer().hold(3, timeout=60) as srv:
        lm = lm_for(srv, max_concurrency=3, timeout=300)
        outs = await asyncio.gather(*(lm.complete([{"role": "user", "content": str(i)}]) for i in range(12)))
    assert [o.text for o in outs] == [f"echo: {i}" for i in range(12)]
    assert srv.max_in_flight == 3 and srv.hold_timeouts == 0


async def test_many_calls_run_in_parallel() -> None:
    """16 calls with max_concurrency=16 are all in flight at once. The server holds every request until 16 have
    arrived, so the test does not depend on the machine's speed: a client that kept fewer out at once would
    only get its answers after the hold's timeout (counted), never a false pass or a flaky failure."""
    with FakeOpenAIServer().hold(16, timeout=60) as srv:
        lm = lm_for(srv, max_concurrency=16, timeout=300)
        outs = await asyncio.gather(*(lm.complete([{"role": "user", "content": str(i)}]) for i in range(16)))
    assert [o.text for o in outs] == [f"echo: {i}" for i in range(16)]
    assert srv.hold_timeouts == 0 and srv.max_in_flight == 16 and len(srv.requests) == 16


async def test_structured_output_is_sent_as_json_schema(server) -> None:
    schema = {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}
    await lm_for(server).complete(MSG, response_format=schema)
    fmt = server.requests[-1]["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == schema


async def test_invalid_json_where_json_was_asked_is_a_failed_rollout(server) -> None:
    schema = {"type": "object"}

    async def program(cand, ex, ctx):
        return await ctx.lm("instruction", "give json", response_format=schema)

    r = await run_rollout(program, lambda e, o, t: 1.0, gepetto.Candidate(instruction="x"),
                          Example({"q": "x"}, id="e"), lm_for(server))
    assert r.score.value == 0.0 and "invalid JSON" in r.score.feedback


async def test_empty_answer_is_a_failed_rollout() -> None:
    r = await run_rollout(single_instruction(), lambda e, o, t: Score(1.0, "ok"), gepetto.Candidate(instruction="x"),
                          Example({"q": "x"}, id="e"), ScriptedLM(["  "]))
    assert r.score.value == 0.0 and "empty answer" in r.score.feedback


async def test_api_key_comes_from_env_and_is_never_shown(server, monkeypatch) -> None:
    secret = "sk-test-DO-NOT-LEAK-123456"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.faults["m"] = ["401"]
    lm = lm_for(server)
    with pytest.raises(LMError) as info:
        await lm.complete(MSG)
    assert secret not in str(info.value) and secret not in repr(lm.__dict__.get("name"))
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(LMError, match="OPENAI_API_KEY"):
        OpenAILM("gpt-4.1-mini")  # hosted OpenAI without a key fails at start


def test_retry_after_parsing() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert parse_retry_after({"retry-after": "soon"}) is None and parse_retry_after({}) is None


async def test_rate_limiter_spaces_requests(monkeypatch) -> None:
    clock = [0.0]
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr("gepetto.lm.remote.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("gepetto.lm.remote.asyncio.sleep", fake_sleep)
    lim = RateLimiter(rpm=60)  # one per second, a burst of 60 allowed
    for _ in range(61):
        await lim.acquire()
    assert slept and abs(sum(slept) - 1.0) < 1e-6
    tok = RateLimiter(tpm=600)  # 10 tokens per second
    await tok.acquire(600)
    slept.clear()
    await tok.acquire(100)
    assert abs(sum(slept) - 10.0) < 1e-6


# ---- names ----

@pytest.mark.parametrize("name, kind, model, url, opts", [
    ("local:qwen2.5-coder-0.5b", "local", "qwen2.5-coder-0.5b", None, {}),
    ("openai:gpt-4.1-mini", "openai", "gpt-4.1-mini", None, {}),
    ("openai:qwen@http://127.0.0.1:8000/v1", "openai", "qwen", "http://127.0.0.1:8000/v1", {}),
    ("openai:m@http://h:1/v1?max_concurrency=32&rpm=500", "openai", "m", "http://h:1/v1",
     {"max_concurrency": 32, "rpm": 500.0}),
    ("litellm:anthropic/claude-sonnet-4", "litellm", "anthropic/claude-sonnet-4", None, {}),
    ("sim:reflection?noise=0.3&seed=2&forget=1", "sim", "reflection", None, {"noise": 0.3, "seed": 2, "forget": True}),
])
def test_lm_names_parse(name, kind, model, url, opts) -> None:
    spec = parse_lm_name(name)
    assert (spec.kind, spec.model, spec.base_url, spec.options) == (kind, model, url, opts)


@pytest.mark.parametrize("name, fragment", [
    ("gpt-4", "accepted forms"),
    ("foo:bar", "unknown backend 'foo'"),
    ("local:llama-70b", "unknown local model"),
    ("openai:", "has no model"),
    ("openai:m@ftp://x", "must start with http"),
    ("openai:m?bogus=1", "unknown option 'bogus'"),
    ("openai:m?rpm=fast", "not a valid float"),
    ("litellm:claude", "PROVIDER/MODEL"),
])
def test_bad_lm_names_say_what_is_accepted(name, fragment) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        parse_lm_name(name)


def test_make_lm_builds_each_backend(monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert make_lm("local:smollm2-135m").name == "local:smollm2-135m"
    lm = make_lm("openai:m@http://127.0.0.1:9/v1?max_concurrency=4&timeout=5")
    assert isinstance(lm, OpenAILM) and lm.max_concurrency == 4 and lm.timeout == 5
    assert make_lm("litellm:anthropic/x").name == "litellm:anthropic/x"  # imported lazily, only when called


# ---- cache ----

async def test_cache_replays_deterministic_calls(tmp_path) -> None:
    inner = ScriptedLM(lambda m, p: "answer " + m[-1]["content"])
    lm = CachedLM(inner, tmp_path / "c.sqlite")
    a = await lm.complete(MSG, temperature=0.0)
    b = await lm.complete(MSG, temperature=0.0)
    assert a.text == b.text and not a.cached and b.cached and len(inner.calls) == 1
    await lm.complete(MSG, temperature=0.7)
    await lm.complete(MSG, temperature=0.7)
    assert len(inner.calls) == 3  # sampled calls are not cached in auto mode
    again = CachedLM(ScriptedLM([]), tmp_path / "c.sqlite")  # a new process sees the same answers
    assert (await again.complete(MSG, temperature=0.0)).text == a.text
    always = CachedLM(inner, tmp_path / "c.sqlite", mode="always")
    await always.complete(MSG, temperature=0.7, seed=1)
    await always.complete(MSG, temperature=0.7, seed=1)
    await always.complete(MSG, temperature=0.7, seed=2)
    assert len(inner.calls) == 5


def test_second_identical_run_makes_zero_lm_calls(tmp_path) -> None:
    from gepetto.lm.base import Completion
    from gepetto.testing import sim

    task = sim.task(n_train=8, n_val=8, kinds=4)
    calls = {"task": 0, "reflection": 0}

    def counting(lm, role):
        class Counting:
            name = lm.name

            async def complete(self, messages, **params) -> Completion:
                calls[role] += 1
                return await lm.complete(messages, **params)
        return Counting()

    def run():
        t = CachedLM(counting(sim.SimTaskLM(), "task"), tmp_path / "cache.sqlite")
        r = CachedLM(counting(sim.SimReflectionLM(noise=0.3, seed=1), "reflection"), tmp_path / "cache.sqlite",
                     mode="always")
        return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                program=task.program, task_lm=t, reflection_lm=r, budget=60, seed=3)

    first = run()
    assert calls["task"] > 0 and calls["reflection"] > 0
    calls.update(task=0, reflection=0)
    second = run()
    assert calls == {"task": 0, "reflection": 0}
    assert json.dumps(first.to_dict()["candidates"], sort_keys=True) == \
        json.dumps(second.to_dict()["candidates"], sort_keys=True)
    assert second.best_score == first.best_score and second.ledger.total().cached_calls > 0
    assert second.ledger.total().input_tokens == 0  # replayed answers cost nothing


async def test_server_answers_with_sim_lms() -> None:
    from gepetto.testing import sim_responder

    with FakeOpenAIServer(sim_responder()) as srv:
        lm = OpenAILM("sim-task", base_url=srv.url)
        out = await lm.complete([{"role": "system", "content": "Apply rule-1."},
                                 {"role": "user", "content": "question 5 kind 1"}])
    assert out.text == "answer-5"


def test_no_key_needed_for_self_hosted(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    lm = OpenAILM("m", base_url="http://127.0.0.1:9/v1")
    assert lm.name == "openai:m@http://127.0.0.1:9/v1"
    assert "OPENAI_API_KEY" not in os.environ


async def test_litellm_backend_maps_errors_and_retries(monkeypatch) -> None:
    """LiteLLM itself is an optional extra: a stand-in module checks our wiring (errors, retries, usage)."""
    import importlib
    import importlib.util
    import sys
    import types

    import openai
    from openai.types.chat import ChatCompletion

    httpx = importlib.import_module("httpx2" if importlib.util.find_spec("httpx2") else "httpx")  # openai's HTTP lib
    calls: list[dict] = []

    async def acompletion(**kw):
        calls.append(kw)
        if len(calls) == 1:
            resp = httpx.Response(429, headers={"retry-after": "2"}, request=httpx.Request("POST", "http://x"))
            raise openai.RateLimitError("slow down", response=resp, body=None)
        return ChatCompletion.model_validate({
            "id": "c", "object": "chat.completion", "created": 0, "model": kw["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8}})

    monkeypatch.setitem(sys.modules, "litellm", types.SimpleNamespace(acompletion=acompletion))
    monkeypatch.delenv("LITELLM_LOCAL_MODEL_COST_MAP", raising=False)
    lm = make_lm("litellm:anthropic/some-model?max_retries=2")
    waits: list[float] = []
    lm._delay = lambda attempt, retry_after: waits.append(retry_after) or 0.0
    out = await lm.complete(MSG, max_tokens=5)
    assert out.text == "hi" and out.attempts == 2 and waits == [2.0]
    assert out.usage.input_tokens == 7 and calls[-1]["model"] == "anthropic/some-model"
    assert calls[-1]["num_retries"] == 0 and calls[-1]["max_tokens"] == 5
    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # no price list fetched from GitHub on import


def test_lms_on_one_endpoint_share_its_rate_limit() -> None:
    a = OpenAILM("task-model", base_url="http://127.0.0.1:9/v1", rpm=60)
    b = OpenAILM("reflection-model", base_url="http://127.0.0.1:9/v1", rpm=60)
    c = OpenAILM("other", base_url="http://127.0.0.1:10/v1", rpm=60)
    assert a.limiter is b.limiter and a.limiter is not c.limiter


# ---- event loops ----

TWO_LOOPS = """
import asyncio, gc
import gepetto
from gepetto.testing import sim
from gepetto.lm.openai import OpenAILM
from gepetto.testing import FakeOpenAIServer, sim_responder

with FakeOpenAIServer(sim_responder()) as srv:
    lm = OpenAILM("sim-task", base_url=srv.url, backoff=0.001)
    srv.faults["sim-task"] = ["500", "reset"]  # retried connections too
    for i in range(2):  # the same LM object in two event loops, one after the other
        print(asyncio.run(lm.complete([{"role": "user", "content": f"question {i} kind 0"}])).text)
    task = sim.task(n_train=6, n_val=6, kinds=2)
    refl = OpenAILM("sim-reflection", base_url=srv.url)
    r = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                         task_lm=lm, reflection_lm=refl, budget=30, seed=0)
    ev = gepetto.evaluate(r.best_candidate, task.valset, task.metric, program=task.program, task_lm=lm)
    gc.collect()
print("done", len(srv.requests) > 30)
"""


def test_one_lm_in_several_event_loops_closes_each_client_in_its_loop() -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", TWO_LOOPS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "done True" in proc.stdout
    assert "Event loop is closed" not in proc.stderr and "never retrieved" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_each_event_loop_gets_its_own_client_closed_when_the_loop_ends(server) -> None:
    lm = lm_for(server)

    async def use() -> object:
        await lm.complete(MSG)
        client = await lm._get_client()
        assert client is await lm._get_client()  # one client per loop, shared by its calls
        return client

    first, second = asyncio.run(use()), asyncio.run(use())
    assert first is not second and first.is_closed() and second.is_closed()

    async def explicit() -> None:
        await lm.complete(MSG)
        client = await lm._get_client()
        await lm.aclose()
        assert client.is_closed() and await lm._get_client() is not client
        await lm.complete(MSG)  # a later call in the same loop makes a new client

    asyncio.run(explicit())


async def test_a_slow_client_setup_is_not_counted_against_the_request_timeout() -> None:
    """The first call imports the client library and makes the HTTP client (seconds on a busy machine): that
    must not time out the requests waiting behind it, nor show up as retries in the ledger."""
    import time

    class SlowSetup(OpenAILM):
        def _new_client(self):
            time.sleep(2.5)  # like `import openai` under load: blocks the event loop, longer than the timeout
            return super()._new_client()

    with FakeOpenAIServer() as srv:  # (a timeout a loaded machine's fake request fits in: 0.3 s did not always)
        lm = SlowSetup("m", base_url=srv.url, timeout=2.0, backoff=0.001)
        outs = await asyncio.gather(*(lm.complete([{"role": "user", "content": f"hi {i}"}]) for i in range(6)))
    assert [o.attempts for o in outs] == [1] * 6
    assert len(srv.requests) == 6


def test_an_openai_run_needs_no_http_library_but_openais_own(monkeypatch, tmp_path) -> None:
    """Repro a01 (round 2): openai 3.x depends on httpx2, not httpx, so a fresh install has no httpx; the endpoint
    check and a whole `openai:` run must work without it (`sys.modules["httpx"] = None` makes its import fail)."""
    import http.server
    import sys
    import threading

    from typer.testing import CliRunner

    from gepetto.cli import app
    from gepetto.lm.base import LMConfigError
    from gepetto.testing import sim_responder

    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ImportError):
        import httpx  # noqa: F401
    with FakeOpenAIServer(sim_responder()) as srv:
        OpenAILM("task", base_url=srv.url).check_endpoint()  # it answers: no error
        res = CliRunner().invoke(app, ["optimize", "--task", "sim", "--task-lm", f"openai:task@{srv.url}",
                                       "--reflection-lm", "sim:reflection", "--budget", "30",
                                       "--storage", str(tmp_path / "a01.sqlite"), "--run", "r", "-q"])
    assert res.exit_code == 0, res.output
    assert "30/30 rollouts" in res.output
    with pytest.raises(LMConfigError, match=r"cannot reach .*Connection refused"):
        OpenAILM("m", base_url="http://127.0.0.1:9/v1").check_endpoint()

    class Refusing(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(403)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"no")

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(LMConfigError, match=r"refused the API key \(HTTP 403: no\)"):
            OpenAILM("m", base_url=f"http://127.0.0.1:{httpd.server_address[1]}/v1").check_endpoint()
    finally:
        httpd.shutdown()
        httpd.server_close()
