"""Modules where they belong: the LM backend table, the testing package, one version, the package's files."""

import ast
from pathlib import Path

import pytest

import gepetto
from gepetto.lm.base import Completion, Usage
from gepetto.lm.names import BACKENDS, Backend, make_lm, parse_lm_name, register_backend

SRC = Path(gepetto.__file__).parent


def imported_modules(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_nothing_in_lm_imports_the_simulator_or_a_task():
    for path in (SRC / "lm").glob("*.py"):
        mods = imported_modules(path)
        bad = {m for m in mods if m.startswith(("gepetto.sim", "gepetto.testing.sim", "gepetto.tasks"))}
        assert not bad, f"{path.name} imports {bad}"


class EchoLM:
    def __init__(self, model: str, shout: bool = False) -> None:
        self.name, self.shout = f"echo:{model}", shout

    async def complete(self, messages, **params):
        text = messages[-1]["content"]
        return Completion(text.upper() if self.shout else text, Usage(1, 1))


def test_a_registered_backend_works_wherever_an_lm_name_does(tmp_path):
    register_backend("echo", Backend(lambda n: EchoLM(n.model, **n.options), "echo:MODEL", {"shout": bool}))
    try:
        assert parse_lm_name("echo:any?shout=1").options == {"shout": True}
        assert isinstance(make_lm("echo:x"), EchoLM)
        with pytest.raises(ValueError, match="unknown option 'loud'"):
            parse_lm_name("echo:x?loud=1")
        with pytest.raises(ValueError, match="exists"):
            register_backend("echo", BACKENDS["echo"])
        ev = gepetto.evaluate("Repeat.", [{"q": "hi", "gold": "HI"}], lambda e, o, t: float(o.endswith(e.gold)),
                              task_lm="echo:x?shout=true")
        assert ev.mean == 1.0
        with pytest.raises(ValueError, match="echo:MODEL"):  # listed among the accepted forms
            parse_lm_name("nope:x")
    finally:
        BACKENDS.pop("echo")


def test_the_simulated_lms_live_in_gepetto_testing():
    from gepetto import sim as old_name
    from gepetto.testing import ScriptedLM, sim

    assert old_name is sim  # the old import path is the same module
    assert isinstance(make_lm("sim:reflection?noise=0.2"), sim.SimReflectionLM)
    assert make_lm("sim:task?latency=0.5").name == "sim:task?latency=0.5"  # the name as written (cache keys)
    assert gepetto.ScriptedLM is ScriptedLM


def test_one_version_and_the_package_files():
    from importlib import resources

    assert gepetto.__version__ and all(part.isdigit() for part in gepetto.__version__.split(".")[:2])
    assert (SRC / "py.typed").is_file()
    report = resources.files("gepetto.report")
    assert report.joinpath("report.css").read_text().strip() and report.joinpath("report.js").read_text().strip()


def test_task_helpers_live_in_one_module():
    for name in ("math.py", "pupa.py"):
        mods = imported_modules(SRC / "tasks" / name)
        assert "gepetto.tasks.hotpotqa" not in mods, f"{name} imports hotpotqa for its helpers"


def test_ci_installs_what_the_readme_says_with_the_integration_extras():
    """The README's test set-up command and .ci/run install the same thing, with the extras the integration tests
    need (so they run in CI instead of skipping); every extra named there exists in pyproject.toml."""
    import re

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    root = Path(__file__).resolve().parent.parent  # the repository (tests/ is at its root)
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    installs = re.findall(r'pip install -e "\.\[([a-z,]+)\]" && pip install --no-deps (\S+)', readme)
    test_setup = next(i for i in installs if "dev" in i[0].split(","))
    assert f'pip install -e ".[{test_setup[0]}]" && pip install --no-deps {test_setup[1]}' in ci
    extras = set(test_setup[0].split(","))
    assert {"dev", "ray", "mlflow", "dspy"} <= extras
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras <= set(declared)
