"""One way to name an LM, used by the Python API, config files and the CLI: `KIND:MODEL[@BASE_URL][?OPTIONS]`.

    local:qwen2.5-coder-0.5b                      the embedded llama.cpp backend (models from PyPI parts)
    openai:gpt-4.1-mini                           OpenAI (or $OPENAI_BASE_URL), key from $OPENAI_API_KEY
    openai:MODEL@http://127.0.0.1:8000/v1         any OpenAI-compatible server (vLLM, llama.cpp, Ollama, ...);
                                                  no key is sent to it ("EMPTY"), $OPENAI_API_KEY least of all
    openai:MODEL@https://host/v1?api_key_env=VAR  a server that needs a key: sends $VAR, to this URL only
    litellm:anthropic/claude-sonnet-4             any provider LiteLLM knows (extra `litellm`)
    sim:task, sim:reflection                      simulated LMs with a known optimum (gepetto.testing.sim)

LiteLLM's and DSPy's `PROVIDER/MODEL` names work too: `openai/gpt-4.1-mini` is `openai:gpt-4.1-mini` (the
OpenAI backend, no extra needed), any other provider (`anthropic/claude-sonnet-4`, `ollama/llama3`,
`gemini/...`) is `litellm:PROVIDER/MODEL`, so LiteLLM routes it as it does for DSPy. A name is of this form when
the text before its first `:` (if any) holds a `/`, e.g. `ollama/llama3:8b`.

Options follow a `?` as `key=value` pairs joined by `&`, e.g.
`openai:gpt-4.1-mini?max_concurrency=32&rpm=500&timeout=30`. For a llama-cpp-python server add
`structured=json_object` (its form of JSON-schema output).

Each KIND is a row of the backend table `BACKENDS`; `register_backend` adds one (e.g. a client of your own
service), after which its names work everywhere an LM name does.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from gepetto.lm.base import LM, LMName

Builder = Callable[[LMName], LM]


@dataclass(frozen=True)
class Backend:
    """How names `KIND:MODEL...` become LMs: the builder and what a valid name of this kind looks like."""

    build: Builder | str  # a function of the parsed name, or "module:function" (imported on first use)
    form: str  # how its names look, for error messages: "openai:MODEL, openai:MODEL@BASE_URL"
    options: Mapping[str, type] = field(default_factory=dict)  # `?key=value` options, with their types
    models: Sequence[str] | Callable[[], Sequence[str]] | None = None  # the only models it has (None: any)
    base_url: bool = False  # whether MODEL@BASE_URL is allowed
    check: Callable[[LMName], str | None] | None = None  # what is wrong with a parsed name (None: nothing)

    def known_models(self) -> Sequence[str] | None:
        return self.models() if callable(self.models) else self.models

    def builder(self) -> Builder:
        if callable(self.build):
            return self.build
        module, _, attr = self.build.partition(":")
        return getattr(importlib.import_module(module), attr)


BACKENDS: dict[str, Backend] = {}


def register_backend(kind: str, backend: Backend, *, replace: bool = False) -> None:
    """Make names `KIND:...` build LMs with `backend` (a kind that exists needs `replace=True`)."""
    kind = kind.strip().lower()
    if not kind or not kind.isidentifier():
        raise ValueError(f"backend kind {kind!r}: use a short word such as 'myservice'")
    if kind in BACKENDS and not replace:
        raise ValueError(f"backend {kind!r} exists; pass replace=True to replace it")
    BACKENDS[kind] = backend


def _local_models() -> Sequence[str]:
    from gepetto.lm.local import MODELS

    return list(MODELS)


def _litellm_check(name: LMName) -> str | None:
    return None if "/" in name.model else "LiteLLM models are named PROVIDER/MODEL, e.g. litellm:anthropic/..."


_REMOTE = {"max_concurrency": int, "rpm": float, "tpm": float, "timeout": float, "max_retries": int}
_LOCAL = {"n_ctx": int, "n_threads": int, "parallel": int}
register_backend("local", Backend("gepetto.lm.local:from_name", "local:MODEL", _LOCAL, models=_local_models))
register_backend("openai", Backend("gepetto.lm.openai:from_name", "openai:MODEL, openai:MODEL@BASE_URL (e.g. "
                                   "openai:qwen@http://127.0.0.1:8000/v1)",
                                   {**_REMOTE, "api_key_env": str, "structured": str}, base_url=True))
register_backend("litellm", Backend("gepetto.lm.litellm:from_name", "litellm:PROVIDER/MODEL", _REMOTE,
                                    check=_litellm_check))
# simulated LMs with a known optimum, for tests and benchmarks: imported on first use, so `import gepetto` stays light
register_backend("sim", Backend("gepetto.testing.sim:lm_from_name", "sim:task or sim:reflection",
                                {"latency": float, "noise": float, "seed": int, "max_rules": int, "forget": bool,
                                 "strict": bool},
                                models=("task", "reflection")))


def _accepted() -> str:
    forms = ["PROVIDER/MODEL as in LiteLLM and DSPy (openai/gpt-4.1-mini; other providers through litellm)"]
    for backend in BACKENDS.values():
        models = backend.known_models()
        forms.append(f"{backend.form} (MODEL one of {', '.join(models)})" if models and "MODEL" in backend.form
                     else backend.form)
    return (", ".join(forms) + "; options may follow after '?', e.g. openai:gpt-4.1-mini?max_concurrency=16&rpm=500")


def _convert(backend: Backend, key: str, value: str, name: str) -> Any:
    allowed = backend.options
    if key not in allowed:
        raise ValueError(f"LM name {name!r}: unknown option {key!r}; accepted: {', '.join(allowed) or 'none'}")
    typ = allowed[key]
    try:
        if typ is bool:
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        return typ(value)
    except ValueError:
        raise ValueError(f"LM name {name!r}: option {key}={value!r} is not a valid {typ.__name__}") from None


def litellm_style(name: str) -> bool:
    """Whether `name` is a LiteLLM/DSPy name `PROVIDER/MODEL` (a `/` before any `:`) rather than `KIND:MODEL`."""
    return "/" in name.split(":", 1)[0]


def _kind_and_rest(name: str) -> tuple[str, str]:
    """The backend kind of a name and what follows it; `PROVIDER/MODEL` names are mapped onto a backend here."""
    if litellm_style(name):
        provider, _, model = name.partition("/")
        provider = provider.strip().lower()
        if not provider or not model.strip():
            raise ValueError(f"LM name {name!r}: a LiteLLM-style name is PROVIDER/MODEL, e.g. openai/gpt-4.1-mini")
        # OpenAI's own models need no extra; every other provider is LiteLLM's, as for DSPy
        return ("openai", model) if provider == "openai" else ("litellm", f"{provider}/{model}")
    if ":" not in name:
        hint = f" (name its provider too, e.g. openai/{name})" if name.strip() else ""
        raise ValueError(f"LM name {name!r} is not understood{hint}; accepted forms: {_accepted()}")
    kind, rest = name.split(":", 1)
    return kind.strip().lower(), rest


def parse_lm_name(name: str) -> LMName:
    """Parse an LM name; a malformed or unknown one raises ValueError listing the accepted forms."""
    if not isinstance(name, str):
        raise ValueError(f"LM name {name!r} is not understood; accepted forms: {_accepted()}")
    kind, rest = _kind_and_rest(name)
    backend = BACKENDS.get(kind)
    if backend is None:
        raise ValueError(f"LM name {name!r}: unknown backend {kind!r}; accepted forms: {_accepted()}")
    rest, _, query = rest.partition("?")
    options = {k: _convert(backend, k, v, name)
               for k, v in parse_qsl(query, keep_blank_values=True, strict_parsing=False)}
    if query and not options:
        raise ValueError(f"LM name {name!r}: options must look like ?key=value&key=value")
    base_url = None
    if backend.base_url and "@" in rest:
        rest, base_url = rest.split("@", 1)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"LM name {name!r}: the base URL after '@' must start with http:// or https://")
    model = rest.strip()
    if not model:
        raise ValueError(f"LM name {name!r} has no model; accepted forms: {_accepted()}")
    models = backend.known_models()
    if models is not None and model not in models:
        raise ValueError(f"LM name {name!r}: unknown {kind} model {model!r}; known: {', '.join(models)}")
    spec = LMName(kind, model, base_url, options, name)
    problem = backend.check(spec) if backend.check is not None else None
    if problem:
        raise ValueError(f"LM name {name!r}: {problem}")
    return spec


def make_lm(name: str) -> LM:
    """Build the LM a name stands for (nothing is loaded or connected until its first call)."""
    lm = _build(name)
    lm.source_name = name  # type: ignore[attr-defined]  # how to build it again elsewhere (e.g. in a Ray worker)
    return lm


def _build(name: str) -> LM:
    spec = parse_lm_name(name)
    return BACKENDS[spec.kind].builder()(spec)
