"""Presets named for what a user wants from a run: `light` (a first try), `medium`, `heavy` (a thorough search).

Like dspy.GEPA's `auto`, a preset sizes the rollout budget to the task: what one validation pass costs (the
validation set) and how many components there are. It buys the seed's validation, then per component a number
of proposals (each the parent's minibatch and the child's test) and of full validations of accepted children.
It sets `budget` only, and only when the user did not: an option given explicitly always wins. The budget it
chose is stored with the run like any other, so a resumed run keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from gepetto.config import ConfigError, EngineConfig
from gepetto.specs import build

PresetName = Literal["light", "medium", "heavy"]


@dataclass(frozen=True)
class Preset:
    """How much search a preset pays for, per component: proposals tried, and accepted children validated."""

    name: str
    proposals: int
    validations: int
    summary: str


PRESETS: dict[str, Preset] = {
    "light": Preset("light", 8, 3, "a first try: a few proposals per component, minutes on a small task"),
    "medium": Preset("medium", 20, 6, "a usual run: enough proposals for the search to branch out"),
    "heavy": Preset("heavy", 40, 12, "a thorough search: many proposals and validations per component"),
}
assert set(PRESETS) == set(get_args(PresetName))


def get_preset(name: str) -> Preset:
    """The preset called `name`; another name raises a ConfigError listing the presets."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; accepted: {', '.join(PRESETS)}")
    return PRESETS[name]


def proposal_cost(config: EngineConfig) -> int:
    """Rollouts one proposal costs at most before its validation: the parent's minibatch (with `seek_failures`)
    and the child's test (the edit proposer adds solved examples to it)."""
    test = config.minibatch_size + (build("proposer", config.proposer).knobs()["gate_solved"]
                                    if config.proposer_name == "edit" else 0)
    return config.minibatch_size + config.seek_failures + test


def preset_budget(name: str, *, n_val: int, n_components: int, config: EngineConfig | None = None) -> int:
    """The budget preset `name` gives a task with `n_val` validation examples and `n_components` components to
    evolve: the seed's validation, then per component its proposals and its validations."""
    preset = get_preset(name)
    per_proposal = proposal_cost(config or EngineConfig())
    per_component = preset.proposals * per_proposal + preset.validations * n_val
    return n_val + max(n_components, 1) * per_component


def describe(name: str, budget: int, *, n_val: int, n_components: int) -> str:
    """One line for people: what the preset chose and why."""
    preset = get_preset(name)
    per = "per component, " if n_components > 1 else ""
    return (f"preset {name} ({preset.summary}): budget {budget} rollouts, sized for about {preset.proposals} "
            f"proposals and {preset.validations} validated candidates {per}on {n_val} validation examples")


__all__ = ["PRESETS", "Preset", "PresetName", "describe", "get_preset", "preset_budget", "proposal_cost"]
