"""One way to name an LM, used by the Python API, config files and the CLI.

    local:qwen2.5-coder-0.5b                      the embedded llama.cpp backend (models from PyPI parts)
    openai:gpt-4.1-mini                           OpenAI (or $OPENAI_BASE_URL), key from $OPENAI_API_KEY
    openai:MODEL@http://127.0.0.1:8000/v1         any OpenAI-compatible server (vLLM, llama.cpp, Ollama, ...);
                                                  no key is sent to it ("EMPTY"), $OPENAI_API_KEY least of all
    openai:MODEL@https://host/v1?api_key_env=VAR  a server that needs a key: sends $VAR, to this URL only
    litellm:anthropic/claude-sonnet-4             any provider LiteLLM knows (extra `gepetto[litellm]`)
    sim:task, sim:reflection                      simulated LMs with a known optimum (tests, benchmarks)

Options follow a `?` as `key=value` pairs joined by `&`, e.g.
`openai:gpt-4.1-mini?max_concurrency=32&rpm=500&timeout=30`. For a llama-cpp-python server add
`structured=json_object` (its form of JSON-schema output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from gepetto.lm.base import LM

ACCEPTED_FORMS = (
    "local:MODEL (MODEL one of {local}), "
    "openai:MODEL, openai:MODEL@BASE_URL (e.g. openai:qwen@http://127.0.0.1:8000/v1), "
    "litellm:PROVIDER/MODEL, sim:task or sim:reflection; options may follow after '?', "
    "e.g. openai:gpt-4.1-mini?max_concurrency=16&rpm=500"
)

# options each kind accepts, with the type they are converted to
_OPTIONS: dict[str, dict[str, type]] = {
    "local": {"n_ctx": int, "n_threads": int},
    "openai": {"max_concurrency": int, "rpm": float, "tpm": float, "timeout": float, "max_retries": int,
               "api_key_env": str, "structured": str},
    "litellm": {"max_concurrency": int, "rpm": float, "tpm": float, "timeout": float, "max_retries": int},
    "sim": {"latency": float, "noise": float, "seed": int, "max_rules": int, "forget": bool},
}


@dataclass(frozen=True)
class LMName:
    kind: str
    model: str
    base_url: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


def _accepted() -> str:
    from gepetto.lm.local import MODELS

    return ACCEPTED_FORMS.format(local=", ".join(MODELS))


def _convert(kind: str, key: str, value: str, name: str) -> Any:
    allowed = _OPTIONS[kind]
    if key not in allowed:
        raise ValueError(f"LM name {name!r}: unknown option {key!r} for {kind}; accepted: {', '.join(allowed)}")
    typ = allowed[key]
    try:
        if typ is bool:
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        return typ(value)
    except ValueError:
        raise ValueError(f"LM name {name!r}: option {key}={value!r} is not a valid {typ.__name__}") from None


def parse_lm_name(name: str) -> LMName:
    """Parse an LM name; a malformed or unknown one raises ValueError listing the accepted forms."""
    if not isinstance(name, str) or ":" not in name:
        raise ValueError(f"LM name {name!r} is not understood; accepted forms: {_accepted()}")
    kind, rest = name.split(":", 1)
    kind = kind.strip().lower()
    if kind not in _OPTIONS:
        raise ValueError(f"LM name {name!r}: unknown backend {kind!r}; accepted forms: {_accepted()}")
    rest, _, query = rest.partition("?")
    options = {k: _convert(kind, k, v, name) for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=False)}
    if query and not options:
        raise ValueError(f"LM name {name!r}: options must look like ?key=value&key=value")
    base_url = None
    if kind == "openai" and "@" in rest:
        rest, base_url = rest.split("@", 1)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"LM name {name!r}: the base URL after '@' must start with http:// or https://")
    model = rest.strip()
    if not model:
        raise ValueError(f"LM name {name!r} has no model; accepted forms: {_accepted()}")
    if kind == "local":
        from gepetto.lm.local import MODELS

        if model not in MODELS:
            raise ValueError(f"LM name {name!r}: unknown local model {model!r}; known: {', '.join(MODELS)}")
    if kind == "sim" and model not in ("task", "reflection"):
        raise ValueError(f"LM name {name!r}: simulated LMs are sim:task and sim:reflection")
    if kind == "litellm" and "/" not in model:
        raise ValueError(f"LM name {name!r}: LiteLLM models are named PROVIDER/MODEL, e.g. litellm:anthropic/...")
    return LMName(kind, model, base_url, options)


def make_lm(name: str) -> LM:
    """Build the LM a name stands for (nothing is loaded or connected until its first call)."""
    lm = _build(name)
    lm.source_name = name  # type: ignore[attr-defined]  # how to build it again elsewhere (e.g. in a Ray worker)
    return lm


def _build(name: str) -> LM:
    spec = parse_lm_name(name)
    opts = dict(spec.options)
    if spec.kind == "local":
        from gepetto.lm.local import LocalLM

        return LocalLM(spec.model, **opts)
    if spec.kind == "openai":
        from gepetto.lm.openai import OpenAILM

        return OpenAILM(spec.model, base_url=spec.base_url, **opts)
    if spec.kind == "litellm":
        from gepetto.lm.litellm import LiteLLMLM

        return LiteLLMLM(spec.model, **opts)
    from gepetto.sim import SimReflectionLM, SimTaskLM

    if spec.model == "task":
        return SimTaskLM(latency=opts.get("latency", 0.0), name=name)
    return SimReflectionLM(name=name, **opts)
