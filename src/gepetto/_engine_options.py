# Generated from gepetto.config.EngineConfig by `python -m gepetto._gen_options`: do not edit.
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

from gepetto.engine.proposers import Proposer
from gepetto.engine.strategies import Acceptance, ComponentSelector, MinibatchSampler, ParentSelector
from gepetto.program import Executor
from gepetto.specs import Knobs


class EngineOptions(TypedDict, total=False):
    """The loop's options as keyword arguments, one per `EngineConfig` field (which documents each); None, or a
    keyword left out, is the config's value. A strategy takes its spec or, in Python, an object: a built-in one
    (`gepetto.strategies.Edit(rules=3)`) or one of your own (docs/strategies.md)."""

    budget: int | None
    seed: int | None
    max_concurrency: int | None
    task_lm_params: Mapping[str, Any] | None
    time_limit: float | None
    patience: int | None
    target_score: float | None
    perfect_score: float | None
    stop_file: str | None
    max_idle_iterations: int | None
    max_cost_usd: float | None
    max_lm_failures: int | None
    lm_retry_pause: float | None
    rollout_timeout: float | None
    executor: str | Executor | Knobs | None
    minibatch_size: int | None
    seek_failures: int | None
    parent_selector: str | ParentSelector | Mapping[str, Any] | None
    component_selector: str | ComponentSelector | None
    minibatch_sampler: str | MinibatchSampler | None
    accept: str | Acceptance | Callable[[Sequence[float], Sequence[float]], bool | None] | Mapping[str, Any] | None
    proposals_per_round: int | None
    validation: str | Knobs | Mapping[str, Any] | None
    merge: str | Knobs | Mapping[str, Any] | None
    components: Sequence[str] | None
    component_descriptions: Mapping[str, str] | None
    proposer: str | Proposer | Mapping[str, Any] | None
    fewshot: str | Knobs | int | Mapping[str, Any] | None
    reflection_attempts: int | None
    reflection_temperatures: Sequence[float] | None
    max_component_chars: int | None
    prices: Mapping[str, tuple[float, float]] | None
