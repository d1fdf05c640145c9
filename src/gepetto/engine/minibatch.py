"""The built-in minibatch sampler: the training order, shuffled anew each epoch, walked from a cursor in the state.

Its own module so that the strategies (engine/strategies.py) and the proposers that walk the training order
themselves (engine/proposers.py) both use it without importing each other.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gepetto.engine.state import RunState
from gepetto.specs import Knobs, builtin
from gepetto.types import Candidate, Example


@builtin("minibatch_sampler", "epoch-shuffled")
@dataclass
class EpochShuffled(Knobs):
    """The next minibatch of a seeded order shuffled anew each epoch, skipping examples the parent already solves.

    A minibatch is `size` examples; a solved one teaches nothing, and is skipped unless too few are left.

    The order of epoch k comes from `random.Random(f"{seed}:epoch:{k}")`, not from the iteration's rng, so that
    an epoch is one fixed permutation whatever the iterations draw; the position is `state.train_cursor`. A run
    sets `size`, `seed` and `perfect_score` from its options (`minibatch_size`, `seed`, `perfect_score`).
    """

    size: int = 3
    seed: int = 0
    perfect_score: float = 1.0
    # (epoch, its order): a cache, derived from the seed alone
    _order: tuple[int, list[int]] = field(default=(-1, []), init=False, repr=False)

    def bind(self, config: Any) -> EpochShuffled:
        return EpochShuffled(config.minibatch_size, config.seed, config.perfect_score)

    def next_example(self, state: RunState, trainset: Sequence[Example]) -> Example:
        """The example at the training cursor, and advance the cursor."""
        epoch, pos = divmod(state.train_cursor, len(trainset))
        if self._order[0] != epoch:
            order = list(range(len(trainset)))
            random.Random(f"{self.seed}:epoch:{epoch}").shuffle(order)
            self._order = (epoch, order)
        state.train_cursor += 1
        return trainset[self._order[1][pos]]

    def __call__(self, state: RunState, parent: Candidate, trainset: Sequence[Example], rng: random.Random
                 ) -> list[Example]:
        b = min(self.size, len(trainset))
        chosen: list[Example] = []
        solved: list[Example] = []
        for _ in range(len(trainset)):
            ex = self.next_example(state, trainset)
            if any(ex.id == c.id for c in chosen):
                continue
            known = state.known(parent, ex.id)
            if known is not None and known.score.value >= self.perfect_score:
                solved.append(ex)
                continue
            chosen.append(ex)
            if len(chosen) == b:
                break
        return (chosen + solved)[:b]
