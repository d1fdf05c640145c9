"""Per-example Pareto fronts, true dominance and parent sampling.

A candidate's score vector has one entry per validation example. Candidate A dominates B when A is at least
as good on every example and better on one. Parents are drawn among the non-dominated candidates, in
proportion to the number of examples on which they reach the best score (ties count for every tied
candidate). The best-mean candidate is never dominated (a dominator would have a higher mean), and we give it
at least one vote, so it can never be starved, not even when it is best on no single example.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np


def best_index(means: Sequence[float | None] | np.ndarray) -> int | None:
    """The one rule for "the best candidate", used by the engine, `Result`, the stored-run snapshot, `gepetto
    runs/show/export` and the report: the highest mean validation score among fully evaluated candidates (a
    candidate whose validation was cut short is never in the pool, so never in `means`); on a tie the earliest
    candidate (lowest index) wins. A missing (None) or NaN mean never wins. None when nothing qualifies."""
    if isinstance(means, np.ndarray):  # the engine's archive: the same rule, vectorised (argmax: first of ties)
        masked = np.where(np.isnan(means), -np.inf, means)
        i = int(np.argmax(masked)) if masked.size else -1
        return i if i >= 0 and masked[i] > -np.inf else None
    best, top = None, -math.inf
    for i, m in enumerate(means):
        if m is not None and m > top:  # strictly greater: the earliest keeps a tie; NaN compares False
            best, top = i, m
    return best


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """True when score vector `a` is >= `b` everywhere and > somewhere."""
    return bool(np.all(a >= b) and np.any(a > b))


def nondominated(scores: np.ndarray) -> list[int]:
    """Indices of rows no other row dominates (quadratic; the reference for the incremental archive)."""
    n = len(scores)
    return [i for i in range(n) if not any(dominates(scores[j], scores[i]) for j in range(n) if j != i)]


class ParetoArchive:
    """Score matrix of all candidates plus the incrementally maintained non-dominated set.

    Adding a candidate costs two comparisons of its row against the front, and the per-example best scores
    are kept up to date, so sampling costs one more pass. Row i is candidate i.
    """

    def __init__(self, n_examples: int, capacity: int = 64) -> None:
        self.n_examples = n_examples
        self._scores = np.zeros((max(capacity, 1), n_examples))
        self._sums = np.zeros(max(capacity, 1))
        self._n = 0
        self._front: list[int] = []
        self._fbuf = np.zeros((max(capacity, 1), n_examples))  # rows of the front, first len(_front) used
        self._col_best = np.full(n_examples, -np.inf)
        self._weights: np.ndarray | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def scores(self) -> np.ndarray:
        return self._scores[: self._n]

    @property
    def front(self) -> list[int]:
        """Indices of the non-dominated candidates, in insertion order."""
        return list(self._front)

    @property
    def front_scores(self) -> np.ndarray:
        return self._fbuf[: len(self._front)]

    @staticmethod
    def _grow(buf: np.ndarray, used: int) -> np.ndarray:
        if used < len(buf):
            return buf
        bigger = np.zeros((2 * len(buf), buf.shape[1]))
        bigger[:used] = buf[:used]
        return bigger

    def add(self, row: Sequence[float]) -> int:
        """Add a fully evaluated candidate's score vector; returns its index."""
        vec = np.asarray(row, dtype=float)
        if vec.shape != (self.n_examples,):
            raise ValueError(f"expected {self.n_examples} scores, got shape {vec.shape}")
        if self._n == len(self._scores):
            self._scores = self._grow(self._scores, self._n)
            self._sums = np.concatenate([self._sums, np.zeros(len(self._sums))])
        idx = self._n
        self._scores[idx] = vec
        self._sums[idx] = vec.sum()
        self._n += 1
        fs = self.front_scores
        if len(fs):
            higher = (fs > vec).any(axis=1)  # member better somewhere
            lower = (fs < vec).any(axis=1)  # member worse somewhere
            if bool((higher & ~lower).any()):
                return idx  # dominated: the front does not change
            beaten = lower & ~higher
            if beaten.any():
                keep = np.flatnonzero(~beaten)  # positions (in the front) of the members that stay
                self._front = [self._front[j] for j in keep]
                self._fbuf[: len(self._front)] = fs[keep]
        self._fbuf = self._grow(self._fbuf, len(self._front))
        self._fbuf[len(self._front)] = vec
        self._front.append(idx)
        np.maximum(self._col_best, vec, out=self._col_best)  # beaten rows were <= vec: the best stays right
        self._weights = None
        return idx

    def weights(self) -> np.ndarray:
        """Selection votes aligned with `front`: examples won (ties count for all), best mean gets >= 1."""
        if self._weights is None:
            fs = self.front_scores
            if self.n_examples == 0:
                self._weights = np.ones(len(fs))
            else:
                wins = (fs == self._col_best).sum(axis=1).astype(float)
                sums = self._sums[self._front]
                best = np.flatnonzero(sums == sums.max())
                wins[best] = np.maximum(wins[best], 1.0)
                self._weights = wins
        return self._weights

    def sample(self, rng: random.Random) -> int:
        """Draw a parent index among the front, in proportion to its votes."""
        if not self._front:
            raise ValueError("the archive is empty")
        w = self.weights()
        return rng.choices(self._front, weights=w.tolist(), k=1)[0]

    def means(self) -> np.ndarray:
        return self._sums[: self._n] / max(self.n_examples, 1)

    def best(self) -> int:
        """Index of the best candidate by `best_index` (every row covers all examples: sums order as means)."""
        best = best_index(self._sums[: self._n])
        if best is None:
            raise ValueError("the archive is empty")
        return best
