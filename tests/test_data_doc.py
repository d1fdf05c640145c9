"""Benchmark data is not shipped: a task whose files are missing names docs/data.md, which covers every such task."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gepetto.cli import app
from gepetto.tasks import DATA_DOC, TASKS, load_task

DOC = Path(__file__).resolve().parents[1] / "docs" / "data.md"
WITH_DATA = sorted(set(TASKS) - {"demo", "sim"})  # the demo's messages are in the package; sim is simulated


@pytest.mark.parametrize("task", WITH_DATA)
def test_a_task_without_its_files_names_the_data_doc(task, tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        load_task(task, data_dir=tmp_path)
    message = str(caught.value)
    assert str(tmp_path) in message  # where it looked
    assert DATA_DOC in message and f"task {task!r}" in message
    assert message.count(DATA_DOC) == 1


def test_the_data_doc_covers_every_task_that_reads_files():
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Which files", 1)[1].split("## Pointing", 1)[0]
    named = set(re.findall(r"`([a-z0-9-]+)`", table))
    assert set(WITH_DATA) <= named, set(WITH_DATA) - named
    for licence in ("CC BY-SA 4.0", "ODC-BY 1.0", "CC BY 3.0", "CC0 1.0", "MIT", "Apache-2.0"):
        assert licence in table
    assert "GEPETTO_DATA_DIR" in text and "--data-dir" in text


def test_the_command_line_says_it_in_one_line_with_exit_code_2(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEPETTO_DATA_DIR", str(tmp_path / "nowhere"))
    res = CliRunner().invoke(app, ["optimize", "--task", "clinc-banking", "--task-lm", "sim:task",
                                   "--reflection-lm", "sim:reflection", "-q"])
    assert res.exit_code == 2, res.output
    assert "data_full.json not found" in res.output and DATA_DOC in res.output
