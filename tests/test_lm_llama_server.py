"""The OpenAI-compatible backend against a real server: llama-cpp-python's server running SmolLM2 on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

import gepetto
from gepetto.ledger import Ledger
from gepetto.lm.base import LMError, MeteredLM
from gepetto.lm.names import make_lm

pytestmark = pytest.mark.real_model


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed")
    from gepetto.lm.local import model_path

    try:
        path = model_path("smollm2-135m")
    except LMError as exc:
        pytest.skip(str(exc))
    port = _free_port()
    log = open(tmp_path_factory.mktemp("llama") / "server.log", "w+")  # noqa: SIM115 (a pipe would fill and block it)
    proc = subprocess.Popen(
        # (gepetto.lm.cpu: llama_cpp.server, with llama.cpp's fast paths only where they run on this CPU)
        [sys.executable, "-m", "gepetto.lm.cpu", "serve", "--model", str(path), "--host", "127.0.0.1", "--port",
         str(port), "--n_threads", "2", "--n_ctx", "2048", "--seed", "0"],
        stdout=log, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            log.seek(0)
            pytest.fail(f"llama server did not start: {log.read()[-2000:]}")
        time.sleep(0.3)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


async def test_chat_over_loopback(llama_server) -> None:
    lm = make_lm(f"openai:smollm2@{llama_server}")
    ledger = Ledger()
    out = await MeteredLM(lm, ledger, "task").complete(
        [{"role": "system", "content": "You are a helpful assistant."},
         {"role": "user", "content": "What is the capital of France? Answer in one word."}], max_tokens=12)
    assert out.text.strip() and out.finish_reason in ("stop", "length")
    assert out.usage.input_tokens > 5 and not out.usage.estimated  # usage from the server
    u = ledger.roles["task"]
    assert u.calls == 1 and u.output_tokens == out.usage.output_tokens and u.errors == 0


async def test_structured_output_through_a_grammar(llama_server) -> None:
    lm = make_lm(f"openai:smollm2@{llama_server}?structured=json_object")
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
              "required": ["city", "population"]}
    out = await lm.complete([{"role": "user", "content": "Give a city and its population as JSON."}],
                            max_tokens=60, response_format=schema)
    data = json.loads(out.text)
    assert set(data) == {"city", "population"} and isinstance(data["population"], int)


def test_optimize_runs_against_the_server(llama_server) -> None:
    """A tiny optimisation with both roles served over HTTP: it completes and stays within budget."""
    examples = [{"q": f"Say the word {w}.", "gold": w} for w in ("apple", "river", "stone", "cloud")]

    def metric(example, output, trace):
        ok = example.gold in output.lower()
        return gepetto.Score(1.0 if ok else 0.0, "Correct." if ok else f"The answer must contain '{example.gold}'.")

    result = gepetto.optimize("Answer briefly.", examples[:2], metric, valset=examples[2:],
                              task_lm=f"openai:smollm2@{llama_server}", reflection_lm=f"openai:smollm2@{llama_server}",
                              budget=10, seed=0, task_lm_params={"temperature": 0.0, "max_tokens": 16},
                              proposer="rewrite(max_tokens=120)")
    assert result.rollouts_used <= 10 and result.ledger.roles["task"].calls >= 2
