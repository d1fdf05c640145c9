"""Presets named for what users want (light, medium, heavy): a budget sized to the task, as dspy.GEPA's `auto`;
an explicit budget always wins."""

from __future__ import annotations

import pytest

import gepetto
from gepetto.config import EngineConfig
from gepetto.presets import PRESETS, describe, preset_budget
from gepetto.testing import sim


def test_a_preset_budget_pays_for_its_proposals_and_validations():
    # the seed's validation, then per component: proposals (parent minibatch + child test) and full validations
    assert preset_budget("light", n_val=10, n_components=1) == 10 + 8 * (3 + 3) + 3 * 10
    assert preset_budget("light", n_val=10, n_components=2) == 10 + 2 * (8 * 6 + 3 * 10)
    budgets = [preset_budget(name, n_val=30, n_components=1) for name in ("light", "medium", "heavy")]
    assert budgets == sorted(budgets) and len(set(budgets)) == 3
    assert preset_budget("medium", n_val=60, n_components=1) > preset_budget("medium", n_val=30, n_components=1)
    edit = EngineConfig(proposer="edit(gate_solved=3)")  # its child test adds solved examples
    assert preset_budget("light", n_val=10, n_components=1, config=edit) == 10 + 8 * 9 + 3 * 10
    said = describe("medium", 357, n_val=9, n_components=2)
    assert "budget 357 rollouts, sized for about 20 proposals and 6 validated candidates per component" in said
    assert set(PRESETS) == {"light", "medium", "heavy"}


def _optimize(task, **kw):
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                            program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(), **kw)


def test_optimize_preset_sets_the_budget_unless_one_is_given():
    task = sim.task(n_train=8, n_val=6, components=2)
    assert _optimize(task, preset="light").budget == preset_budget("light", n_val=6, n_components=2)
    assert _optimize(task, preset="light", components=["a"]).budget == preset_budget("light", n_val=6, n_components=1)
    assert _optimize(task, preset="heavy", budget=30).budget == 30
    assert _optimize(task, preset="heavy", config=EngineConfig(budget=25)).budget == 25
    assert _optimize(task, preset="light", config={"minibatch_size": 2}).budget == \
        preset_budget("light", n_val=6, n_components=2, config=EngineConfig(minibatch_size=2))
    with pytest.raises(gepetto.ConfigError, match="unknown preset 'extreme'; accepted: light, medium, heavy"):
        _optimize(task, preset="extreme", budget=30)


def test_a_stored_run_keeps_the_budget_its_preset_gave(tmp_path):
    task = sim.task()
    first = _optimize(task, preset="light", storage=tmp_path / "s.sqlite", run="p")
    again = _optimize(task, preset="light", storage=tmp_path / "s.sqlite", run="p")  # the same call: resumes
    assert first.budget == again.budget == preset_budget("light", n_val=12, n_components=1)
    assert again.rollouts_used == first.rollouts_used
