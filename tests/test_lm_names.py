"""LiteLLM's and DSPy's `PROVIDER/MODEL` LM names, accepted wherever a gepetto LM name is (issue 40, part 6)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gepetto
from gepetto.config import load_config
from gepetto.lm.litellm import LiteLLMLM
from gepetto.lm.names import litellm_style, make_lm, parse_lm_name
from gepetto.lm.openai import OpenAILM

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.parametrize(("name", "kind", "model", "url", "opts"), [
    ("openai/gpt-4.1-mini", "openai", "gpt-4.1-mini", None, {}),
    ("openai/qwen@http://127.0.0.1:8000/v1?timeout=5", "openai", "qwen", "http://127.0.0.1:8000/v1", {"timeout": 5.0}),
    ("anthropic/claude-sonnet-4", "litellm", "anthropic/claude-sonnet-4", None, {}),
    ("Anthropic/claude-sonnet-4?max_retries=2", "litellm", "anthropic/claude-sonnet-4", None, {"max_retries": 2}),
    ("ollama/llama3:8b", "litellm", "ollama/llama3:8b", None, {}),  # a ':' after the '/' is the model's tag
    ("huggingface/meta-llama/Llama-3.1-8B-Instruct", "litellm", "huggingface/meta-llama/Llama-3.1-8B-Instruct",
     None, {}),
    ("openai:qwen@http://127.0.0.1:8000/v1", "openai", "qwen", "http://127.0.0.1:8000/v1", {}),  # a '/' after ':'
])
def test_provider_slash_model_names_map_onto_the_backends(name, kind, model, url, opts):
    spec = parse_lm_name(name)
    assert (spec.kind, spec.model, spec.base_url, spec.options, spec.text) == (kind, model, url, opts, name)
    assert litellm_style(name) == (not name.startswith("openai:"))


def test_openai_models_need_no_extra_and_other_providers_go_through_litellm(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    lm = make_lm("openai/gpt-4.1-mini?max_concurrency=4")
    assert isinstance(lm, OpenAILM) and lm.name == "openai:gpt-4.1-mini" and lm.max_concurrency == 4
    assert lm.source_name == "openai/gpt-4.1-mini?max_concurrency=4"  # rebuilt from the name as written
    other = make_lm("anthropic/claude-sonnet-4")
    assert isinstance(other, LiteLLMLM) and other.model == "anthropic/claude-sonnet-4"


@pytest.mark.parametrize(("name", "fragment"), [
    ("gpt-4.1-mini", "name its provider too, e.g. openai/gpt-4.1-mini"),
    ("anthropic/", "PROVIDER/MODEL, e.g. openai/gpt-4.1-mini"),
    ("/claude", "PROVIDER/MODEL"),
    ("anthropic/x?bogus=1", "unknown option 'bogus'"),
    ("nope:x", "PROVIDER/MODEL as in LiteLLM and DSPy"),  # listed among the accepted forms
])
def test_bad_names_say_what_is_accepted(name, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace("?", r"\?")):
        parse_lm_name(name)


def test_a_config_file_and_the_command_line_take_them():
    cfg = load_config(task="sim", task_lm="openai/gpt-4.1-mini", reflection_lm="anthropic/claude-sonnet-4")
    assert (cfg.task_lm, cfg.reflection_lm) == ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4")
    with pytest.raises(gepetto.ConfigError, match="reflection_lm"):
        load_config(task="sim", reflection_lm="anthropic/")


BLOCK_LITELLM = """
import sys

class NoLiteLLM:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm" or name.startswith("litellm."):
            raise ImportError("No module named 'litellm'")

sys.meta_path.insert(0, NoLiteLLM())
"""


def test_without_litellm_the_first_call_says_how_to_install_it():
    code = BLOCK_LITELLM + """
import asyncio
from gepetto.lm.names import make_lm
for name in ("anthropic/claude-sonnet-4", "ollama/llama3:8b"):
    try:
        asyncio.run(make_lm(name).complete([{"role": "user", "content": "hi"}]))
    except Exception as exc:
        print(type(exc).__name__, exc)
"""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    anthropic, ollama = out.stdout.strip().splitlines()
    # a setup error: the run stops at once rather than retrying
    assert anthropic.startswith("LMSetupError anthropic/claude-sonnet-4: the provider 'anthropic' is reached "
                                "through LiteLLM, which is not installed")
    assert 'pip install -e ".[litellm]" in the gepetto repository' in anthropic
    assert "openai:llama3:8b@http://localhost:11434/v1" in ollama
