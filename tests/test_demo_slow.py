"""The demo on the embedded Qwen models, end to end (slow: minutes on 2 cores). Run with `pytest -m slow`."""

import re

import pytest
from typer.testing import CliRunner

from gepetto.cli import app
from gepetto.lm.base import LMError
from gepetto.lm.local import model_path

pytestmark = [pytest.mark.slow, pytest.mark.real_model]


def test_demo_runs_on_the_embedded_models(tmp_path, monkeypatch):
    try:
        model_path("qwen2.5-coder-0.5b"), model_path("qwen2.5-coder-1.5b")
    except LMError as exc:
        pytest.skip(str(exc))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["demo", "--budget", "40", "--time-limit", "600", "--storage", "demo.sqlite"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    m = re.search(r"validation: seed ([\d.]+) -> best ([\d.]+); (\d+)/40 rollouts", res.output)
    assert m is not None, res.output
    seed, best, used = float(m.group(1)), float(m.group(2)), int(m.group(3))
    assert best >= seed and used <= 40
    assert re.search(r"test: seed [\d.]+ -> best [\d.]+", res.output)
