"""DSPy is optional: gepetto imports without it, never imports it unasked, and the integration says how to get it."""

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

BLOCK_DSPY = """
import sys

class NoDSPy:
    def find_spec(self, name, path=None, target=None):
        if name == "dspy" or name.startswith("dspy."):
            raise ImportError("No module named 'dspy'")

sys.meta_path.insert(0, NoDSPy())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_gepetto_imports_without_dspy_and_the_integration_names_the_extra():
    out = _run(BLOCK_DSPY + """
import gepetto, gepetto.cli, gepetto.integrations
try:
    import gepetto.integrations.dspy
except ImportError as exc:
    print("refused:", exc)
""")
    assert out.returncode == 0, out.stderr
    # gepetto is not on PyPI yet: the hint works from a clone, or names the extra's packages
    assert 'refused: gepetto.integrations.dspy needs DSPy: pip install -e ".[dspy]" in the gepetto repository, or ' \
           'pip install "dspy' in out.stdout


def test_gepetto_never_imports_dspy_unasked():
    out = _run("import sys, gepetto, gepetto.cli, gepetto.runner, gepetto.integrations; print('dspy' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
