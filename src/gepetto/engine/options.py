"""The run's options as the loop and the built-in strategies read them (`gepetto.parts` gives the engine an
`EngineConfig`, which has them all, with the parts it builds from it; the engine reads no configuration of its
own)."""

from __future__ import annotations

from typing import Any, Protocol


class Options(Protocol):
    """The options the loop and the built-in strategies read (an `EngineConfig` has them all)."""

    budget: int
    seed: int
    max_concurrency: int
    task_lm_params: dict[str, Any]
    perfect_score: float
    max_cost_usd: float | None
    max_lm_failures: int
    lm_retry_pause: float
    rollout_timeout: float | None
    minibatch_size: int
    seek_failures: int
    component_selector: str
    proposals_per_round: int
    components: tuple[str, ...] | None
    component_descriptions: dict[str, str] | None
    reflection_attempts: int
    reflection_temperatures: tuple[float, ...] | None
    max_component_chars: int | None
    prices: dict[str, tuple[float, float]]

    @property
    def demonstrations(self) -> int:
        """Most demonstrations per component a built-in proposer writes."""
