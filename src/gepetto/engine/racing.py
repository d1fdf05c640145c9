"""Racing validation (`validation: racing(chunk=5)`, `Racing`): validate a child in chunks and stop as soon as
the examples already run prove it can neither enter the Pareto front nor become the best candidate.

The bound is exact. Scores are in [0, 1], so on an example not run yet the child scores at most 1.0: call
`optimistic` the child's score vector with 1.0 on every example left. A front member that dominates the
optimistic vector (at least as good everywhere, better somewhere) dominates every vector the child can still
end with, so the child, fully validated, would be dominated: kept out of the front (engine/pareto.py adds a
dominated row to the pool without changing the front; dominance by the pool never goes away, since a member
leaves the front only for one that dominates it) and never the best (a row dominated when it joins never
becomes the best: engine/pareto.py). Conversely, when no front member dominates the optimistic vector, scoring
1.0 on the rest would put the child on the front, so it is validated further. Cutting on the best mean alone
would add nothing: a child that could still become the best cannot be dominated.

A member can only dominate the optimistic vector if it scores 1.0 on every example left, so the examples run
first are those where few front members are perfect ("thin" ones), then those where the parent scores lowest,
ties broken by the run's seeded rng. Rollouts already paid for (free) come first of all. Pure functions;
the loop (engine/loop.py) pays for the rollouts.

Optionally (`Racing(confidence=...)`) a child is also cut on evidence instead of proof: a one-sided sign
test. If a front member scores at least as well as the child on every example run and strictly better on k of
them, then under the hypothesis "the child is at least as good as that member" (a differing example goes the
child's way with probability at least 1/2) seeing k losses and no win has probability at most 0.5**k; the
child is cut once that is at most 1 - confidence (k >= 5 at 0.95). The test needs examples in no particular
order, so with a confidence the examples not paid for run in the seeded random order (the informed order above
would pick the member's weak spots first and bias the test). Not exact: a child cut this way might have beaten
the member on an example not run and entered the front; it is never the best from a handful of examples, since
a cut child is never added to the pool.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from gepetto.specs import Knobs, builtin, knob


@builtin("validation", "full")
@dataclass(frozen=True)
class Full(Knobs):
    """Every accepted child runs the whole validation set (the paper's)."""


@builtin("validation", "racing")
@dataclass(frozen=True)
class Racing(Knobs):
    """In chunks, stopped once the child provably can neither enter the Pareto front nor become the best.

    Exact: the same front and best as a full pass, fewer rollouts; the budget's tail is spent on a last proposal
    whose child may end partial. With `confidence`, also cut on a one-sided sign test (not exact).

    Args:
        chunk: Validation examples run between two checks.
        confidence: Also cut a child once a one-sided sign test says, at this confidence, that a front member is
            better (never below the child, above it on enough examples run; 5 at 0.95); none: proof only.
    """

    chunk: int = knob(5, ge=1)
    confidence: float | None = knob(None, gt=0.5, lt=1)


def validation_order(val_ids: Sequence[str], front_scores: np.ndarray, parent_scores: Sequence[float],
                     free: Collection[str], rng: random.Random, *, informed: bool = True) -> list[str]:
    """The order a child runs the validation examples in: free ones (rollouts known), then by how few front
    members score 1.0 on the example, then by the parent's score (lowest first), then at random (`rng`); with
    `informed=False` (for the sign test), free ones and then at random.

    `front_scores`: one row per front member, one column per example of `val_ids`; `parent_scores`: the
    parent's validation scores in the same order (a merge child: its parents' mean)."""
    perfect = (front_scores >= 1.0).sum(axis=0) if len(front_scores) and informed else np.zeros(len(val_ids))
    parent = list(parent_scores) if informed else [0.0] * len(val_ids)
    keys = [(eid not in free, int(perfect[j]), parent[j], rng.random(), j) for j, eid in enumerate(val_ids)]
    return [val_ids[k[-1]] for k in sorted(keys)]


@dataclass(frozen=True)
class Verdict:
    """After a chunk: "cut" (proved out: stop), "open" (go on chunk by chunk) or "sure" (no front member can
    dominate it any more whatever it scores: validate the rest at once, racing cannot cut it)."""

    decision: Literal["cut", "open", "sure"]
    by: int | None = None  # cut: the position in the front of a member that dominates the optimistic vector
    losses: int = 0  # a cut by the sign test (racing_confidence): examples run where member `by` is better; 0: proved


def losses_needed(confidence: float) -> int:
    """Losses without a win a child needs against one member for the sign test to cut it at `confidence`: the
    least k with 0.5**k <= 1 - confidence."""
    return max(1, math.ceil(math.log(1.0 - confidence) / math.log(0.5) - 1e-9))


def verdict(front_scores: np.ndarray, run: np.ndarray, scores: np.ndarray, confidence: float | None = None
            ) -> Verdict:
    """Whether a child can be cut. `run`: a mask of the examples run so far; `scores`: the child's scores on them
    (anything elsewhere); `front_scores`: the front's rows, on the same examples; `confidence`: also cut by the
    sign test (see the module's docstring) at this confidence."""
    if not len(front_scores) or not run.any():
        return Verdict("open" if len(front_scores) else "sure")
    optimistic = np.where(run, scores, 1.0)
    dominating = (front_scores >= optimistic).all(axis=1) & (front_scores > optimistic).any(axis=1)
    if dominating.any():
        return Verdict("cut", int(np.flatnonzero(dominating)[0]))
    # a member that is below the child somewhere on the examples run can never dominate it
    still = (front_scores[:, run] >= scores[run]).all(axis=1)
    if confidence is not None and still.any():
        losses = np.where(still, (front_scores[:, run] > scores[run]).sum(axis=1), 0)
        if losses.max() >= losses_needed(confidence):
            by = int(np.argmax(losses))
            return Verdict("cut", by, int(losses[by]))
    return Verdict("open" if still.any() else "sure")


def next_chunk(todo: Sequence[int], front_scores: np.ndarray, run: np.ndarray, scores: np.ndarray, size: int
               ) -> list[int]:
    """The next `size` examples (positions, taken from `todo` in its order): first those the likeliest dominator
    is below 1.0 on (it must be run on all of them before that member can dominate the optimistic vector): the
    front member still at least as good as the child on every example run with the fewest such examples left."""
    still = (front_scores[:, run] >= scores[run]).all(axis=1) if len(front_scores) else np.zeros(0, bool)
    if not still.any():
        return list(todo[:size])
    gaps = np.where(still, ((front_scores < 1.0) & ~run).sum(axis=1), run.size + 1)
    need = front_scores[int(np.argmin(gaps))] < 1.0
    return ([j for j in todo if need[j]] + [j for j in todo if not need[j]])[:size]
