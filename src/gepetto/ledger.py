"""Cost ledger: calls, tokens and seconds per role (task, reflection, judge), and money from a price table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

ROLES = ("task", "reflection", "judge")


@dataclass
class RoleUsage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    errors: int = 0
    retries: int = 0  # extra attempts HTTP backends made (429, 5xx, timeouts, dropped connections)
    cached_calls: int = 0
    estimated_tokens: bool = False  # True when some call had no usage and its tokens were estimated
    cost: float = 0.0


@dataclass
class Ledger:
    """What every LM role used. Prices are per million tokens: {model: (input, output)}."""

    roles: dict[str, RoleUsage] = field(default_factory=dict)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def record(
        self,
        role: str,
        *,
        model: str = "",
        input_tokens: int = 0,
        output_tokens: int = 0,
        seconds: float = 0.0,
        estimated: bool = False,
        cached: bool = False,
        error: bool = False,
        retries: int = 0,
    ) -> None:
        u = self.roles.setdefault(role, RoleUsage())
        u.calls += 1
        u.errors += int(error)
        u.retries += retries
        u.cached_calls += int(cached)
        if cached:  # a replayed answer costs nothing
            return
        u.input_tokens += input_tokens
        u.output_tokens += output_tokens
        u.seconds += seconds
        u.estimated_tokens |= estimated
        price = self.prices.get(model)
        if price is not None:
            u.cost += (input_tokens * price[0] + output_tokens * price[1]) / 1e6

    def total(self) -> RoleUsage:
        t = RoleUsage()
        for u in self.roles.values():
            for k in ("calls", "input_tokens", "output_tokens", "seconds", "errors", "retries", "cached_calls",
                      "cost"):
                setattr(t, k, getattr(t, k) + getattr(u, k))
            t.estimated_tokens |= u.estimated_tokens
        return t

    def to_dict(self) -> dict[str, dict]:
        return {role: asdict(u) for role, u in self.roles.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping]) -> Ledger:
        return cls(roles={role: RoleUsage(**dict(u)) for role, u in data.items()})
