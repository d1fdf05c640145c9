"""A user's own program as a task: `path/to/file.py:make_task` or `package.module:make_task`.

The target is a `gepetto.Task` or a function returning one; task options are passed to the function as
keyword arguments. A target that cannot be found or used (no such file, module or attribute, not a Task, options
the function does not take) raises one `TargetError` that says which and how to fix it; an exception raised by the
user's own code (importing the file, calling `make_task`) is a `UserCodeError` that keeps it, and names the user's
file, line and function it came from (`user_frame`).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from gepetto.program import Task

FORMS = "path/to/file.py:make_task or package.module:make_task"


class TargetError(ValueError):
    """A task target that cannot be loaded; the message names the target and what is wrong with it."""


# where code that is not the user's lives: gepetto itself, the standard library, installed packages
_NOT_USER = tuple(str(Path(p).resolve()) for p in {
    str(Path(__file__).resolve().parent), *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib",
                                                                                "platlib"))})


def _is_user_file(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    try:
        path = str(Path(filename).resolve())
    except OSError:
        return False
    return not path.startswith(_NOT_USER)


def user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of `exc`'s traceback in the user's own code (not gepetto, the standard library or an
    installed package): where to look. A SyntaxError points at its own file and line."""
    if isinstance(exc, SyntaxError) and exc.filename and _is_user_file(exc.filename):
        return traceback.FrameSummary(exc.filename, exc.lineno or 0, "<module>", line=(exc.text or "").strip())
    frames = traceback.extract_tb(exc.__traceback__)
    return next((f for f in reversed(frames) if _is_user_file(f.filename)), None)


def describe_frame(frame: traceback.FrameSummary) -> str:
    """`File "x.py", line 7, in make_task` and the source line under it, as a traceback shows them."""
    text = f'File "{frame.filename}", line {frame.lineno}, in {frame.name}'
    return text + (f"\n    {frame.line.strip()}" if frame.line else "")


class UserCodeError(Exception):
    """The user's own code raised while gepetto ran it outside a rollout (importing a task file, `make_task`, the
    program or the metric on a check). `error` is what it raised (also the `__cause__`), `frame` where, in the
    user's files."""

    def __init__(self, message: str, error: BaseException, stage: str = "") -> None:
        super().__init__(message)
        self.error, self.stage = error, stage

    @property
    def frame(self) -> traceback.FrameSummary | None:
        return user_frame(self.error)


def is_target(spec: str) -> bool:
    """Whether `spec` has the form of a task target (`WHERE:ATTR`) rather than a built-in task name."""
    where, colon, attr = spec.rpartition(":")
    return bool(colon and where.strip() and attr.strip()) and not spec.startswith("python:")


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def normalize_target(spec: str) -> str:
    """A file target with its path made absolute (so a resumed run finds it from any directory); else as is."""
    where, _, attr = spec.rpartition(":")
    if _is_file(where):
        return f"{Path(where).expanduser().resolve()}:{attr}"
    return spec


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise TargetError(f"task file {path} does not exist (expected {FORMS})")
    # one module name per file, so two files called tasks.py do not replace each other in sys.modules
    name = f"gepetto_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TargetError(f"task file {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling-free introspection look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UserCodeError(f"task file {path} failed to import: {type(exc).__name__}: {exc}", exc,
                            "import") from exc
    return module


def _import_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise TargetError(f"cannot import module {name!r} ({exc}); give {FORMS}, with the package importable "
                          "(installed, or on PYTHONPATH)") from exc
    except Exception as exc:
        raise TargetError(f"module {name!r} failed to import: {type(exc).__name__}: {exc}") from exc


def load_target(spec: str, **options: Any) -> Task:
    """The Task at `spec`: the attribute itself if it is a Task, else the result of calling it with `options`."""
    if not is_target(spec):
        raise TargetError(f"task target {spec!r} is not of the form {FORMS}")
    where, _, attr = spec.rpartition(":")
    module = _import_file(Path(where).expanduser()) if _is_file(where) else _import_module(where)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise TargetError(f"{where} has no attribute {attr!r} (it has: {', '.join(public) or 'nothing callable'})")
        obj = getattr(obj, part)
    if isinstance(obj, Task):
        if options:
            raise TargetError(f"{spec} is a Task, not a function: it takes no task options (got {sorted(options)})")
        return obj
    if not callable(obj):
        raise TargetError(f"{spec} is a {type(obj).__name__}; it must be a gepetto.Task or a function returning one")
    try:
        signature = inspect.signature(obj)
        signature.bind(**options)
    except TypeError as exc:
        accepted = [n for n, p in signature.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        hints = [f"{k!r} (did you mean {close[0]!r}?)" for k in options if k not in signature.parameters
                 for close in [difflib.get_close_matches(k, accepted, n=1)] if close]
        hint = f"; {', '.join(hints)}" if hints else ""
        raise TargetError(f"{spec} cannot be called with the task options {sorted(options)}: {exc}{hint}") from None
    except ValueError:  # no signature to check (some builtins): let the call say
        pass
    try:
        task = obj(**options)
    except Exception as exc:
        raise UserCodeError(f"{spec} raised {type(exc).__name__}: {exc}", exc, "make_task") from exc
    if not isinstance(task, Task):
        raise TargetError(f"{spec} returned a {type(task).__name__}; it must return a gepetto.Task")
    return task
