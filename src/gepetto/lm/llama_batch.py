"""Continuous batching on one llama.cpp model: concurrent requests decode together and share prompt prefixes.

One worker thread owns a llama.cpp context whose KV cache holds up to `parallel` sequences, one per request in
flight. Each step builds one `llama_batch` (the next token of every sequence that is writing, and chunks of the
prompts still to be read), calls `llama_decode` once, and samples each sequence from its own logits row with
its own sampler chain, so temperature, seed, top_k/top_p and a JSON grammar are per request. A request that
arrives while others decode joins at the next step.

Prefixes: the cache is unified (one buffer for all sequences), where `llama_memory_seq_cp` tags the cells of a
prefix with another sequence id instead of copying them. A prompt that starts like one whose cells are in the
cache (a candidate's system prompt, the same for all its rollouts) starts from those cells; requests that arrive
together and share a prefix wait one step so that the first reads it for all. When a request ends, its cells
(its prompt, and the answer it wrote) stay in the cache under a spare sequence id, a few of them, least recently
used first out, so that the next round of the same candidate pays its prompt once, and a retry that
quotes the answer reads only what follows it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import ctypes
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count, pairwise
from typing import Any

from gepetto.lm.base import LMError

MIN_SHARE = 16  # prompt tokens in common worth waiting a step for, or keeping in the cache after a request
IDLE_EXIT = 1.0  # seconds without work after which the worker thread ends


@dataclass
class Sampling:
    """A request's sampling parameters (the defaults are llama-cpp-python's `create_chat_completion`'s)."""

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int = 0
    grammar: str | None = None  # GBNF text, e.g. from a JSON schema
    grammar_root: str = "root"


def make_sampler(model: Any, s: Sampling, penalty_last_n: int = 64) -> Any:
    """A sampler chain built the way llama-cpp-python's `Llama._init_sampler` builds it (pinned 0.3.36)."""
    import llama_cpp
    from llama_cpp._internals import LlamaSampler

    chain = LlamaSampler()
    chain.add_penalties(n_vocab=model.n_vocab(), penalty_last_n=penalty_last_n, penalty_repeat=s.repeat_penalty,
                        penalty_freq=s.frequency_penalty, penalty_present=s.presence_penalty)
    if s.grammar is not None:
        grammar = llama_cpp.llama_sampler_init_grammar(model.vocab, s.grammar.encode("utf-8"),
                                                       s.grammar_root.encode("utf-8"))
        if not grammar:
            chain.close()
            raise LMError("llama.cpp rejected the grammar made from the response_format schema")
        llama_cpp.llama_sampler_chain_add(chain.sampler, grammar)
    if s.temperature == 0.0:
        chain.add_greedy()
    else:
        chain.add_top_k(s.top_k)
        chain.add_typical(s.typical_p, 1)
        chain.add_top_p(s.top_p, 1)
        chain.add_min_p(s.min_p, 1)
        chain.add_temp(s.temperature)
        chain.add_dist(s.seed & 0xFFFFFFFF if s.seed & 0xFFFFFFFF != 0xFFFFFFFF else 0)  # all ones: a random seed
    return chain


def flash_attn_type(flash_attn: bool | None) -> int:
    """llama.cpp's context setting for `flash_attn`: on, off, or (None) llama.cpp's choice for the device."""
    import llama_cpp

    return {None: llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, True: llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}[flash_attn]


@dataclass
class Job:
    """One request: a tokenized prompt and how to end its answer."""

    prompt: list[int]
    max_tokens: int
    sampler: Any  # a llama_cpp._internals.LlamaSampler, owned by the job (closed when it ends)
    stops: Sequence[bytes] = ()  # stop strings: the answer ends before the first one
    watch: Callable[[str], bool] | None = None  # called on the text at each sentence end: True stops (as "length")
    future: concurrent.futures.Future[Answer] = field(default_factory=concurrent.futures.Future)


@dataclass(frozen=True)
class Answer:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" or "length"
    reused_tokens: int = 0  # prompt tokens whose cells came from the cache (read once for several requests)


@dataclass(eq=False)
class _Seq:
    """A sequence id in the KV cache: a request in flight, or a prompt prefix kept for later (job None)."""

    sid: int
    tokens: list[int] = field(default_factory=list)  # the tokens whose cells it holds, at positions 0..len-1
    job: Job | None = None
    todo: list[int] = field(default_factory=list)  # prompt tokens still to read
    next: int | None = None  # the sampled token, read at the next step
    out: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    reused: int = 0
    order: int = 0  # admission order (prompts are read first come, first served)
    used: int = 0  # for prefixes kept: when last used (least recently used goes first)


@dataclass
class Stats:
    """Counters since the decoder started (tests and benchmarks read them)."""

    steps: int = 0
    batch_tokens: int = 0  # tokens decoded, prompts included
    prompt_tokens: int = 0  # prompt tokens of finished requests
    reused_tokens: int = 0  # of which taken from the cache rather than read
    max_in_flight: int = 0
    requests: int = 0
    decode_seconds: float = 0.0  # wall time inside llama_decode (the model's compute)


class BatchDecoder:
    """Decodes concurrent requests on one model in shared llama.cpp batches (see the module docstring).

    `llama` is a loaded `llama_cpp.Llama`: its model weights, vocabulary and context parameters (threads) are
    used, not its own context; the decoder makes one more context, with `parallel` + `keep` sequences in a unified
    KV cache of `n_ctx` cells, and flash attention as `flash_attn` says (None: llama.cpp's choice for the device).
    `submit` is thread-safe; the answer arrives in the job's future.
    """

    def __init__(self, llama: Any, *, parallel: int, n_ctx: int, n_batch: int = 512, keep: int = 8,
                 flash_attn: bool | None = None) -> None:
        import llama_cpp
        from llama_cpp._internals import LlamaContext

        if parallel < 1:
            raise ValueError("parallel must be >= 1")
        self._lib = llama_cpp
        self._llama = llama  # keeps the weights alive while this decoder (and its worker) lives
        self._model = llama._model
        self._vocab = llama._model.vocab
        self.parallel, self.keep = parallel, max(0, min(keep, llama_cpp.llama_max_parallel_sequences() - parallel))
        params = llama_cpp.llama_context_params.from_buffer_copy(llama.context_params)
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_seq_max = parallel + self.keep
        params.kv_unified = True  # one buffer: a shared prefix is one set of cells, tagged with several sequence ids
        # fused attention where the device has it (None: llama.cpp decides; on a CPU it does): a step then costs
        # less, and no more when other sequences and kept prefixes hold many cells (benchmarks/results/local_batch.md)
        params.flash_attn_type = flash_attn_type(flash_attn)
        self._ctx = LlamaContext(model=llama._model, params=params, verbose=False)
        self.n_ctx = llama_cpp.llama_n_ctx(self._ctx.ctx)
        self.n_batch = n_batch
        self._mem = llama_cpp.llama_get_memory(self._ctx.ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._piece = ctypes.create_string_buffer(256)
        self._free = list(range(parallel))  # sequence ids for requests
        self._spare = list(range(parallel, parallel + self.keep))  # sequence ids for kept prefixes
        self._active: list[_Seq] = []
        self._kept: list[_Seq] = []
        self._pending: deque[Job] = deque()  # the worker's own queue
        self._inbox: deque[Job] = deque()  # submitted, not yet seen by the worker
        self._room_wait = False  # the cache was full: admit nothing new until a request ends
        self._clock = count(1)
        self.stats = Stats()
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        _LIVE.add(self)

    # ---- the caller's side ----------------------------------------------------------------------
    def submit(self, job: Job) -> concurrent.futures.Future[Answer]:
        if len(job.prompt) >= self.n_ctx:
            raise LMError(f"the prompt has {len(job.prompt)} tokens; the context holds {self.n_ctx} (n_ctx)")
        if not job.prompt:
            raise LMError("empty prompt")
        with self._cond:
            if self._closed:
                raise LMError("the model was closed")
            self._inbox.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gepetto-llama-batch", daemon=True)
                self._thread.start()
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Stop the worker (requests in flight fail) and free the context."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        self._ctx.close()
        _LIVE.discard(self)

    def __del__(self) -> None:
        if getattr(self, "_batch", None) is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None

    # ---- the worker -----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._inbox and not self._active and not self._pending:
                    if not self._cond.wait(IDLE_EXIT) and not self._inbox:
                        self._thread = None  # idle: the thread ends (a new one starts with the next request), so
                        return  # an LM nobody holds any more can be freed with its model
                if self._closed:
                    break
                self._pending.extend(self._inbox)
                self._inbox.clear()
            try:
                self._step()
            except Exception as exc:  # a bug or a broken context: fail what is in flight, keep serving
                self._fail_all(LMError(f"llama.cpp batch decoding failed: {type(exc).__name__}: {exc}"))
        self._fail_all(LMError("the model was closed"))

    def _fail_all(self, exc: Exception) -> None:
        with self._cond:
            waiting = [*self._pending, *self._inbox]
            self._pending.clear()
            self._inbox.clear()
        for seq in list(self._active):
            self._end(seq, error=exc)
        for job in waiting:
            _settle(job, error=exc)

    def _step(self) -> None:
        for seq in [s for s in self._active if s.job is not None and s.job.future.cancelled()]:
            self._end(seq)  # given up by its caller: its sequence is free at once
        self._pending = deque(j for j in self._pending if not j.future.cancelled() or _settle(j))
        self._admit()
        if not self._active:
            return
        plan = self._plan()
        self._fit(sum(len(toks) for _, toks, _ in plan))
        while plan:
            ret = self._decode(plan)
            if ret == 0:
                break
            if ret != 1 or not self._make_room(plan):
                err = LMError(f"llama_decode returned {ret}" if ret != 1 else
                              f"the KV cache is full (n_ctx={self.n_ctx} cells shared by the requests in flight)")
                for seq, _, _ in plan:
                    self._end(seq, error=err)
                return
            plan = [p for p in plan if p[0] in self._active]
        self.stats.steps += 1
        self.stats.batch_tokens += sum(len(toks) for _, toks, _ in plan)
        for seq, toks, last_index in plan:
            seq.tokens.extend(toks)
            if seq.next is not None:
                seq.next = None
            else:
                del seq.todo[: len(toks)]
            if last_index >= 0:
                self._sample(seq, last_index)

    def _plan(self) -> list[tuple[_Seq, list[int], int]]:
        """This step's batch: (sequence, tokens at its next positions, batch index of the logits to sample or -1)."""
        plan: list[tuple[_Seq, list[int], int]] = []
        room, index = self.n_batch, 0
        for seq in self._active:
            if seq.next is not None:
                plan.append((seq, [seq.next], index))
                room, index = room - 1, index + 1
        for seq in sorted((s for s in self._active if s.todo), key=lambda s: s.order):
            if room <= 0:
                break
            chunk = seq.todo[:room]
            done = len(chunk) == len(seq.todo)
            plan.append((seq, chunk, index + len(chunk) - 1 if done else -1))
            room, index = room - len(chunk), index + len(chunk)
        return plan

    def _decode(self, plan: list[tuple[_Seq, list[int], int]]) -> int:
        b, i = self._batch, 0
        for seq, toks, last_index in plan:
            start = len(seq.tokens)
            for k, tok in enumerate(toks):
                b.token[i] = tok
                b.pos[i] = start + k
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = seq.sid
                b.logits[i] = 1 if (last_index >= 0 and k == len(toks) - 1) else 0
                i += 1
        b.n_tokens = i
        t0 = time.perf_counter()
        try:
            return int(self._lib.llama_decode(self._ctx.ctx, b))
        finally:
            self.stats.decode_seconds += time.perf_counter() - t0

    def _cells_used(self) -> int:
        """The cells the sequences hold, counting a shared prefix once (the size of the trie of their tokens)."""
        held = sorted(tuple(s.tokens) for s in (*self._active, *self._kept) if s.tokens)
        return sum(map(len, held)) - sum(_common(a, b) for a, b in pairwise(held))

    def _fit(self, n: int) -> None:
        """Drop kept prefixes, least recently used first, until `n` more cells fit in the cache."""
        if sum(len(s.tokens) for s in (*self._active, *self._kept)) + n <= self.n_ctx:
            return  # fits even if nothing were shared
        while self._kept and self._cells_used() + n > self.n_ctx:
            self._drop(min(self._kept, key=lambda s: s.used))

    def _make_room(self, plan: list[tuple[_Seq, list[int], int]]) -> bool:
        """After a decode found no room in the cache: free some (a kept prefix; else put the newest prompt back in
        the queue; else fail the newest request). False when nothing can be freed."""
        if self._kept:
            self._drop(min(self._kept, key=lambda s: s.used))
            return True
        reading = [seq for seq, _, _ in plan if seq.todo and seq.job is not None]
        if reading:
            seq = max(reading, key=lambda s: s.order)
            job = seq.job
            seq.job = None
            self._release(seq)
            assert job is not None
            self._pending.appendleft(job)
            self._room_wait = True  # until a request ends
            return True
        writing = [seq for seq, _, _ in plan]
        if len(writing) > 1:
            self._end(max(writing, key=lambda s: s.order),
                      error=LMError(f"the KV cache is full (n_ctx={self.n_ctx} cells shared by the requests in "
                                    f"flight); use a larger n_ctx or a smaller parallel"))
            return True
        return False

    # ---- admission and prefixes -------------------------------------------------------------------
    def _admit(self) -> None:
        if self._room_wait:
            return
        deferred: list[Job] = []
        while self._pending and self._free:
            job = self._pending.popleft()
            source, shared = self._best_source(job.prompt)
            if self._reading_soon(job.prompt, shared):
                deferred.append(job)  # another request is reading this prefix now: copy it next step
                continue
            seq = _Seq(self._free.pop(), job=job, order=next(self._clock))
            if source is not None and shared:
                self._lib.llama_memory_seq_cp(self._mem, source.sid, seq.sid, 0, shared)
                seq.tokens = list(job.prompt[:shared])
                source.used = next(self._clock)
            seq.todo = list(job.prompt[shared:])
            seq.reused = shared
            self._active.append(seq)
        self._pending.extendleft(reversed(deferred))
        self.stats.max_in_flight = max(self.stats.max_in_flight, len(self._active))

    def _best_source(self, prompt: list[int]) -> tuple[_Seq | None, int]:
        """The sequence whose cells share the longest prefix with `prompt` (at most all but its last token, whose
        logits are needed), and that length."""
        best, most = None, 0
        for seq in (*self._active, *self._kept):
            n = _common(seq.tokens, prompt)
            if n > most:
                best, most = seq, n
        return best, min(most, len(prompt) - 1)

    def _reading_soon(self, prompt: list[int], shared: int) -> bool:
        """Whether a request now reading its prompt will hold cells of MIN_SHARE more tokens of this one."""
        return any(seq.todo and _common(seq.tokens + seq.todo, prompt) >= shared + MIN_SHARE for seq in self._active)

    def _keep(self, seq: _Seq) -> None:
        """Keep the cells of an ended request (its prompt and the answer it wrote) under a spare sequence id:
        the next request that starts like it (another rollout of the candidate, or a retry that quotes the
        answer) reads only what follows."""
        tokens = seq.tokens
        if not self.keep or len(tokens) < MIN_SHARE:
            return
        for kept in self._kept:
            if _common(kept.tokens, tokens) == len(tokens):
                kept.used = next(self._clock)  # already kept (as long or longer)
                return
        for kept in [k for k in self._kept if _common(k.tokens, tokens) == len(k.tokens)]:
            self._drop(kept)  # a shorter piece of the same tokens: the new one holds its cells too
        if not self._spare:
            self._drop(min(self._kept, key=lambda s: s.used))
        kept = _Seq(self._spare.pop(), tokens=list(tokens), used=next(self._clock))
        self._lib.llama_memory_seq_cp(self._mem, seq.sid, kept.sid, 0, len(tokens))
        self._kept.append(kept)

    def _drop(self, kept: _Seq) -> None:
        self._lib.llama_memory_seq_rm(self._mem, kept.sid, -1, -1)
        self._kept.remove(kept)
        self._spare.append(kept.sid)

    def _release(self, seq: _Seq) -> None:
        self._lib.llama_memory_seq_rm(self._mem, seq.sid, -1, -1)
        self._active.remove(seq)
        self._free.append(seq.sid)
        self._room_wait = False

    # ---- sampling and ending ----------------------------------------------------------------------
    def _sample(self, seq: _Seq, index: int) -> None:
        job = seq.job
        assert job is not None
        tok = int(self._lib.llama_sampler_sample(job.sampler.sampler, self._ctx.ctx, index))
        if self._lib.llama_vocab_is_eog(self._vocab, tok):
            self._end(seq, "stop")
            return
        seq.out.append(tok)
        n = self._lib.llama_token_to_piece(self._vocab, tok, self._piece, len(self._piece), 0, False)
        piece = self._piece.raw[:n] if n >= 0 else b""
        start = max(0, len(seq.text) - max((len(s) for s in job.stops), default=0))
        seq.text += piece
        found = [at for stop in job.stops if (at := seq.text.find(stop, start)) >= 0]
        if found:
            del seq.text[min(found):]
            self._end(seq, "stop")
            return
        if len(seq.out) >= job.max_tokens:
            self._end(seq, "length")
            return
        if job.watch is not None and (b"." in piece or b"\n" in piece) and \
                job.watch(seq.text.decode("utf-8", errors="ignore")):
            self._end(seq, "length")  # cut like a length limit: the caller may salvage the text before the loop
            return
        seq.next = tok

    def _end(self, seq: _Seq, finish: str = "stop", error: Exception | None = None) -> None:
        job = seq.job
        if job is None:
            return
        answer = None
        if error is None and not job.future.cancelled():
            answer = Answer(seq.text.decode("utf-8", errors="ignore"), len(job.prompt), len(seq.out), finish,
                            seq.reused)
            self.stats.requests += 1
            self.stats.prompt_tokens += len(job.prompt)
            self.stats.reused_tokens += seq.reused
            self._keep(seq)
        seq.job = None
        self._release(seq)  # before the caller hears: its sequence is free when its answer arrives
        _settle(job, answer, error)


def _settle(job: Job, answer: Answer | None = None, error: Exception | None = None) -> bool:
    """Give a job its answer or error (nothing if its caller gave it up) and free its sampler; False (filters)."""
    try:
        if not job.future.cancelled():
            if error is not None:
                job.future.set_exception(error)
            else:
                job.future.set_result(answer)  # type: ignore[arg-type]
    except concurrent.futures.InvalidStateError:
        pass  # cancelled meanwhile
    job.sampler.close()
    return False


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


_LIVE: weakref.WeakSet[BatchDecoder] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """Stop the workers before the interpreter frees the models under them."""
    for decoder in list(_LIVE):
        decoder.close()
