"""Modules where they belong: the LM backend table, the testing package, one version, the package's files."""

import ast
import os
import subprocess
import sys
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
    from gepetto.testing import ScriptedLM, sim

    assert isinstance(make_lm("sim:reflection?noise=0.2"), sim.SimReflectionLM)
    assert make_lm("sim:task?latency=0.5").name == "sim:task?latency=0.5"  # the name as written (cache keys)
    assert gepetto.ScriptedLM is ScriptedLM
    assert not (SRC / "sim.py").exists()  # one place for them


def test_import_gepetto_loads_no_test_double():
    """`import gepetto` loads neither the test doubles nor the fault-injecting server; a `sim:` name loads them."""
    code = ("import sys, gepetto; print(sorted(m for m in sys.modules if m.startswith('gepetto.testing'))); "
            "gepetto.evaluate('Answer.', [{'q': 'question 1 kind 0'}], lambda e, o, t: 1.0, task_lm='sim:task'); "
            "print('gepetto.testing.sim' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.split("\n")[:2] == ["[]", "True"]


# ---- layers: each module imports from its own layer and those below it, and no import cycle -------------------
# Bottom first. A module belongs to the layer of the longest prefix naming it; `import gepetto` (the package) is on
# top. Every import counts: at module level, inside a function, and under TYPE_CHECKING.
LAYERS = [
    # gepetto.db: the store's connection (SQLite or PostgreSQL), which the response cache (lm) shares
    ("types", ["gepetto.types", "gepetto.secrets", "gepetto.ledger", "gepetto._install", "gepetto.db"]),
    ("lm", ["gepetto.lm"]),
    ("program", ["gepetto.program"]),
    ("tasks and test doubles", ["gepetto.tasks", "gepetto.usertask", "gepetto.testing"]),
    ("specs", ["gepetto.specs"]),
    ("engine", ["gepetto.engine", "gepetto.strategies"]),
    ("config", ["gepetto.config", "gepetto.presets"]),
    ("services", ["gepetto.store", "gepetto.report", "gepetto.progress", "gepetto.tracking",
                  "gepetto.integrations.mlflow", "gepetto.integrations.ray"]),
    ("assembly", ["gepetto.assembly", "gepetto.parts"]),
    ("runner", ["gepetto.runner"]),
    ("api", ["gepetto.api", "gepetto.evaluation"]),
    ("cli and adapters", ["gepetto.cli", "gepetto.check", "gepetto.integrations.dspy",
                          "gepetto.integrations.gepa_adapter"]),
    ("package", ["gepetto", "gepetto.integrations"]),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def dependencies(name: str) -> set[str]:
    """The gepetto modules `name` imports: `from P import m` of a module m is P.m; a dunder such as __version__
    read from a package the module is in adds nothing (that package is loaded before the module)."""
    path = MODULES[name]
    deps: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            deps.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                target = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            if target not in MODULES:
                continue
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:
                    deps.add(f"{target}.{alias.name}")
                elif not (alias.name.startswith("__") and name.startswith(target + ".")):
                    deps.add(target)
    return deps - {name}


def layer(name: str) -> int:
    ranks = [(len(prefix), rank) for rank, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
             if name == prefix or name.startswith(prefix + ".")]
    return max(ranks)[1]


def test_each_module_has_a_layer_and_the_order_is_the_design():
    names = [title for title, _ in LAYERS]
    order = ["cli and adapters", "api", "runner", "assembly", "config", "engine", "specs", "program", "lm", "types"]
    assert sorted(order, key=names.index, reverse=True) == order  # cli -> api -> runner -> ... -> types
    unplaced = sorted(m for m in MODULES if LAYERS[layer(m)][0] == "package" and m not in LAYERS[-1][1])
    assert not unplaced, f"put these modules in a layer of LAYERS: {unplaced}"


# a folder of optional extras: each module in the layer of what it serves (the README's drawing says so)
MIXED = {"gepetto.integrations"}


def test_each_folder_is_one_layer():
    """A folder of the package holds one layer's modules, so that where a module sits says what it may import:
    LAYERS names folders and top-level modules, never a module inside a folder (the store's connection, which the
    response cache shares, is `gepetto/db.py`, not in `store/`; the events the engine emits are `engine/events.py`)."""
    folders = {m for m, p in MODULES.items() if p.name == "__init__.py" and m != "gepetto"} - MIXED
    mixed = {}
    for folder in sorted(folders):
        layers = {LAYERS[layer(m)][0] for m in MODULES if m == folder or m.startswith(folder + ".")}
        if len(layers) > 1:
            mixed[folder] = sorted(layers)
    assert not mixed, f"folders holding modules of several layers: {mixed}"
    inside = [p for _, prefixes in LAYERS for p in prefixes
              if p.count(".") > 1 and not any(p.startswith(m + ".") for m in MIXED)]
    assert not inside, f"LAYERS places modules inside a folder apart from it: {inside}"
    assert len(folders) >= 7


def test_imports_go_down_the_layers():
    upward = sorted(f"{m} ({LAYERS[layer(m)][0]}) imports {d} ({LAYERS[layer(d)][0]})"
                    for m in MODULES for d in dependencies(m) if layer(d) > layer(m))
    assert not upward, "\n".join(upward)


def test_no_import_cycle():
    graph = {m: dependencies(m) for m in MODULES}
    cycles = []
    # Tarjan's strongly connected components; a component of more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in graph:
        if m not in index:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_engine_takes_built_parts_and_reads_no_configuration():
    """The engine imports nothing from the configuration layer (options, CLI groups, help, default LM names):
    `gepetto.parts` builds its parts from an EngineConfig and it reads the options through `engine.options`."""
    engine = [m for m in MODULES if m.startswith("gepetto.engine.")]
    assert len(engine) > 10
    reads = sorted(f"{m} imports {d}" for m in engine for d in dependencies(m) if layer(d) >= layer("gepetto.config"))
    assert not reads, reads


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


def test_the_readme_draws_the_layers_in_their_order():
    """The README's layout lists the package's modules top layer first, as LAYERS has them (each line's first
    name: a module `x.py` or a folder `x/`); a module moved to another layer moves in the drawing too."""
    readme = (SRC.parent.parent / "README.md").read_text()
    block = readme.split("src/gepetto/      layers", 1)[1].split("\nexamples/", 1)[0]
    ranks = []
    for line in block.splitlines()[1:]:
        first = line.split()[0] if line.startswith("  ") and not line.startswith("   ") else ""
        name = first.removesuffix(".py").removesuffix("/")
        if name and name != "integrations":  # (optional extras: each in the layer of what it serves)
            module = f"gepetto.{name}"
            assert module in MODULES, f"the README draws {first}, which is no module of src/gepetto"
            ranks.append((layer(module), first))
    assert len(ranks) >= 12
    assert [r for r, _ in ranks] == sorted((r for r, _ in ranks), reverse=True), ranks


def test_the_event_types_are_public_as_gepetto_events():
    """Callbacks written against `from gepetto import events as ev` keep working wherever the module lives."""
    from gepetto import events as ev
    from gepetto.engine import events

    assert ev is events and gepetto.events.CandidateAdded is events.CandidateAdded
