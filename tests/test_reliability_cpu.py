"""The embedded backend on any CPU (issue 37): where llama.cpp's extra buffer types (AMX, weight repacking) die of
SIGILL, models load without them. The decision is made by probes in subprocesses, once per machine and build, and
kept; these tests give the decision stand-in probes (one that dies of SIGILL, one that runs), since this machine's
CPU runs both paths. The last tests load a real model (SmolLM2) both ways."""

from __future__ import annotations

import json
import sys

import pytest

from gepetto.lm import cpu
from gepetto.lm.base import LMConfigError, LMSetupError

OK = [sys.executable, "-c", "pass"]
SIGILL = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
FAILS = [sys.executable, "-c", "raise SystemExit('no model here')"]


class Probes:
    """A stand-in probe command per path (extra buffer types on / off), counting the probes run."""

    def __init__(self, on: list[str], off: list[str]) -> None:
        self.on, self.off = on, off
        self.asked: list[bool] = []

    def __call__(self, extra: bool) -> list[str]:
        self.asked.append(extra)
        return self.on if extra else self.off


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(cpu.ENV, raising=False)


def test_a_fast_path_that_dies_of_sigill_falls_back_and_the_decision_is_kept(tmp_path):
    cache = tmp_path / "llama-cpu.json"
    probes = Probes(on=SIGILL, off=OK)
    decision = cpu.decide(probes, key="machine-a", cache=cache)
    assert decision.extra_bufts is False and decision.source == "probe"
    assert "SIGILL" in decision.reason and probes.asked == [True, False]
    kept = json.loads(cache.read_text())["machine-a"]
    assert kept["extra_bufts"] is False and "SIGILL" in kept["reason"]
    # the next process on this machine and build does not probe again
    again = Probes(on=OK, off=OK)
    assert cpu.decide(again, key="machine-a", cache=cache).extra_bufts is False and again.asked == []
    assert cpu.decide(again, key="machine-a", cache=cache).source == "cache"
    # another build (or CPU) is another key: probed afresh
    assert cpu.decide(again, key="machine-b", cache=cache).extra_bufts is True and again.asked == [True]


def test_a_fast_path_that_runs_is_kept_and_probed_once(tmp_path):
    cache = tmp_path / "llama-cpu.json"
    probes = Probes(on=OK, off=SIGILL)
    assert cpu.decide(probes, key="k", cache=cache).extra_bufts is True
    assert probes.asked == [True]  # the slower path is never tried when the fast one runs
    assert json.loads(cache.read_text())["k"]["extra_bufts"] is True


def test_a_probe_that_fails_without_a_signal_decides_nothing(tmp_path):
    cache = tmp_path / "llama-cpu.json"
    decision = cpu.decide(Probes(on=FAILS, off=OK), key="k", cache=cache)
    assert decision.extra_bufts is True and "exit 1" in decision.reason  # llama.cpp's default, and not kept
    assert not cache.exists()


def test_llama_cpp_dying_on_both_paths_is_one_clear_setup_error(tmp_path):
    cache = tmp_path / "llama-cpu.json"
    with pytest.raises(LMSetupError, match=r"cannot run on this CPU.*SIGILL.*GGML_NATIVE=OFF"):
        cpu.decide(Probes(on=SIGILL, off=SIGILL), key="k", cache=cache)
    never = Probes(on=OK, off=OK)
    with pytest.raises(LMSetupError, match="cannot run on this CPU"):  # kept: no probe until the build changes
        cpu.decide(never, key="k", cache=cache)
    assert never.asked == []


@pytest.mark.parametrize("value, extra", [("0", False), ("off", False), ("1", True), ("true", True)])
def test_the_environment_variable_overrides_without_a_probe(tmp_path, monkeypatch, value, extra):
    monkeypatch.setenv(cpu.ENV, value)
    probes = Probes(on=SIGILL, off=SIGILL)
    decision = cpu.decide(probes, key="k", cache=tmp_path / "c.json")
    assert (decision.extra_bufts, decision.source, probes.asked) == (extra, "env", [])


def test_a_bad_value_of_the_environment_variable_is_a_configuration_error(tmp_path, monkeypatch):
    monkeypatch.setenv(cpu.ENV, "maybe")
    with pytest.raises(LMConfigError, match="GEPETTO_LLAMA_EXTRA_BUFTS='maybe'"):
        cpu.decide(Probes(on=OK, off=OK), key="k", cache=tmp_path / "c.json")


def test_a_damaged_cache_file_is_probed_again_and_rewritten(tmp_path):
    cache = tmp_path / "llama-cpu.json"
    cache.write_text("{not json")
    assert cpu.decide(Probes(on=SIGILL, off=OK), key="k", cache=cache).extra_bufts is False
    assert json.loads(cache.read_text())["k"]["extra_bufts"] is False


def test_the_key_names_the_cpu_and_the_llama_cpp_build(monkeypatch):
    a = cpu.build_key()
    assert cpu.build_key() == a
    monkeypatch.setattr(cpu, "_cpu_flags", lambda: "GenuineIntel | a VM | fpu avx512f amx_tile amx_int8")
    assert cpu.build_key() != a


def test_the_fallback_is_said_in_one_line_once_per_process(monkeypatch, capsys, caplog):
    calls = []

    def decided(command, **kw):
        calls.append(command)
        return cpu.Decision(False, "probe", "a model loaded with them died of SIGILL, without them it ran")

    monkeypatch.setattr(cpu, "decide", decided)
    monkeypatch.setattr(cpu, "_decided", None)
    for _ in range(3):
        assert cpu.decision_for(cpu.Path("model.gguf")).extra_bufts is False
    # on stderr, or through logging where the application set logging up (pytest does)
    said = capsys.readouterr().err.splitlines() + [r.getMessage() for r in caplog.records if r.name == cpu.log.name]
    assert len(calls) == 1 and len(said) == 1
    assert "without its extra buffer types" in said[0] and "SIGILL" in said[0] and cpu.ENV in said[0]


# ---- a real model, both paths ----------------------------------------------------------------------------------

def _smollm2():
    pytest.importorskip("llama_cpp")
    from gepetto.lm.local import model_path

    try:
        return model_path("smollm2-135m")
    except LMSetupError as exc:
        pytest.skip(str(exc))


@pytest.mark.real_model
def test_a_model_loads_and_answers_without_the_extra_buffer_types():
    import llama_cpp

    path = _smollm2()
    with cpu.extra_bufts(False):
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, verbose=False, seed=0)
    assert llm.model_params.use_extra_bufts is False
    assert llama_cpp.llama_model_default_params().use_extra_bufts is True  # the default is back after the block
    out = llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
    assert out["choices"][0]["text"].strip()


@pytest.mark.real_model
def test_the_probe_runs_a_real_model_without_the_extra_buffer_types():
    path = _smollm2()
    command = cpu.probe_command(path)
    with_them = cpu.run_probe(command(True))
    assert with_them.ok or with_them.crashed  # a CPU with AMX advertised and not enabled: SIGILL, in the subprocess
    assert cpu.run_probe(command(False)).ok


@pytest.mark.real_model
def test_the_local_backend_loads_with_the_decided_params(monkeypatch):
    import asyncio

    from gepetto.lm.local import LocalLM

    _smollm2()
    monkeypatch.setenv(cpu.ENV, "0")
    monkeypatch.setattr(cpu, "_decided", None)
    lm = LocalLM("smollm2-135m", n_ctx=512, n_threads=1)
    out = asyncio.run(lm.complete([{"role": "user", "content": "Say hi"}], max_tokens=8))
    assert out.text.strip() and lm._llama.model_params.use_extra_bufts is False
