"""Cost ledger: calls, tokens and seconds per role (task, reflection, judge), and money from a price table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

ROLES = ("task", "reflection", "judge")


@dataclass
class RoleUsage:
    """What one role's LM calls used, summed (`Ledger.roles`, `Ledger.total()`).

    Attributes:
        calls: LM calls made, answered from the cache or not, failed or not.
        input_tokens: Tokens sent (cached calls not counted).
        cached_input_tokens: Of `input_tokens`, those the backend took from its prompt cache instead of reading them.
        output_tokens: Tokens answered (cached calls not counted).
        seconds: Time spent waiting for answers (cached calls not counted).
        errors: Calls that failed or answered with an error.
        retries: Extra attempts HTTP backends made (429, 5xx, timeouts, dropped connections).
        cached_calls: Calls answered from the response cache (they cost nothing).
        estimated_tokens: True when some call had no usage and its tokens were estimated.
        cost: Money spent, by the ledger's prices (0 for models without a price).
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    errors: int = 0
    retries: int = 0
    cached_calls: int = 0
    estimated_tokens: bool = False
    cost: float = 0.0
    cached_input_tokens: int = 0


@dataclass
class Ledger:
    """What every LM role used. Prices are per million tokens: {model: (input, output)}.

    A run keeps one (`Result.ledger`): every LM call is recorded under its role as it returns.

    Attributes:
        roles: The usage of each role ("task", "reflection", "judge") that made a call.
        prices: Dollars per million tokens by model name: {model: (input, output)} (EngineConfig's `prices`).

    Example:
        ```python
        from gepetto import Ledger

        ledger = Ledger(prices={"my-model": (0.15, 0.60)})
        ledger.record("task", model="my-model", input_tokens=1000, output_tokens=200)
        print(f"${ledger.total().cost:.5f}")  # $0.00027
        ```
    """

    roles: dict[str, RoleUsage] = field(default_factory=dict)
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def record(
        self,
        role: str,
        *,
        model: str = "",
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        seconds: float = 0.0,
        estimated: bool = False,
        cached: bool = False,
        error: bool = False,
        retries: int = 0,
    ) -> None:
        """Count one LM call under `role`, and its cost by `prices`.

        Args:
            role: Who made the call: "task", "reflection" or "judge".
            model: The LM's name, to find its price.
            input_tokens: Tokens sent.
            output_tokens: Tokens answered.
            cached_input_tokens: Of `input_tokens`, those the backend took from its prompt cache.
            seconds: How long the call took.
            estimated: The tokens were estimated (the backend gave no usage).
            cached: The answer was replayed from the cache: counted as a call, it costs nothing.
            error: The call failed.
            retries: Extra attempts the backend made.
        """
        u = self.roles.setdefault(role, RoleUsage())
        u.calls += 1
        u.errors += int(error)
        u.retries += retries
        u.cached_calls += int(cached)
        if cached:  # a replayed answer costs nothing
            return
        u.input_tokens += input_tokens
        u.output_tokens += output_tokens
        u.cached_input_tokens += cached_input_tokens
        u.seconds += seconds
        u.estimated_tokens |= estimated
        price = self.prices.get(model)
        if price is not None:
            u.cost += (input_tokens * price[0] + output_tokens * price[1]) / 1e6

    def total(self) -> RoleUsage:
        """All roles together.

        Returns:
            The sums over the roles (a new RoleUsage).
        """
        t = RoleUsage()
        for u in self.roles.values():
            for k in ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "seconds", "errors", "retries",
                      "cached_calls", "cost"):
                setattr(t, k, getattr(t, k) + getattr(u, k))
            t.estimated_tokens |= u.estimated_tokens
        return t

    def to_dict(self) -> dict[str, dict]:
        """The usage per role as JSON data (the prices are not kept).

        Returns:
            {role: {"calls": ..., "input_tokens": ..., ...}}, as `from_dict` reads it.
        """
        return {role: asdict(u) for role, u in self.roles.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping]) -> Ledger:
        """The ledger `to_dict` wrote.

        Args:
            data: {role: usage fields}, as `to_dict` gives.

        Returns:
            A new Ledger with those roles and no prices.
        """
        return cls(roles={role: RoleUsage(**dict(u)) for role, u in data.items()})
