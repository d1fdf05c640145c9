"""Per-example Pareto fronts, true dominance and parent sampling.

A candidate's score vector has one entry per validation example. Candidate A dominates B when A is at least
as good on every example and better on one. Parents are drawn among the non-dominated candidates, in
proportion to the number of examples on which they reach the best score (ties count for every tied
candidate). The best-mean candidate is never dominated (a dominator would have a higher mean), and we give it
at least one vote, so it can never be starved, not even when it is best on no single example.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np


def dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """True when score vector `a` is >= `b` everywhere and > somewhere."""
    return bool(np.all(a >= b) and np.any(a > b))


def nondominated(scores: np.ndarray) -> list[int]:
    """Indices of rows no other row dominates (quadratic; the reference for the incremental archive)."""
    n = len(scores)
    return [i for i in range(n) if not any(dominates(scores[j], scores[i]) for j in range(n) if j != i)]


def selection_weights(front_scores: np.ndarray) -> np.ndarray:
    """Votes of each non-dominated row: examples won (ties count for all), best mean gets at least 1."""
    if len(front_scores) == 0:
        return np.zeros(0)
    if front_scores.shape[1] == 0:
        return np.ones(len(front_scores))
    col_best = front_scores.max(axis=0)
    wins = (front_scores == col_best).sum(axis=1).astype(float)
    means = front_scores.mean(axis=1)
    best = np.flatnonzero(means == means.max())
    wins[best] = np.maximum(wins[best], 1.0)
    return wins


class ParetoArchive:
    """Score matrix of all candidates plus the incrementally maintained non-dominated set.

    Adding a candidate costs O(front size x examples); sampling costs the same. Row i is candidate i.
    """

    def __init__(self, n_examples: int, capacity: int = 64) -> None:
        self.n_examples = n_examples
        self._scores = np.zeros((max(capacity, 1), n_examples))
        self._n = 0
        self._front: list[int] = []
        self._front_scores = np.zeros((0, n_examples))
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

    def add(self, row: Sequence[float]) -> int:
        """Add a fully evaluated candidate's score vector; returns its index."""
        vec = np.asarray(row, dtype=float)
        if vec.shape != (self.n_examples,):
            raise ValueError(f"expected {self.n_examples} scores, got shape {vec.shape}")
        if self._n == len(self._scores):
            self._scores = np.vstack([self._scores, np.zeros_like(self._scores)])
        idx = self._n
        self._scores[idx] = vec
        self._n += 1
        fs = self._front_scores
        if len(fs):
            ge, gt = (fs >= vec).all(axis=1), (fs > vec).any(axis=1)
            if bool((ge & gt).any()):
                return idx  # dominated: the front does not change
            beaten = (vec >= fs).all(axis=1) & (vec > fs).any(axis=1)
            keep = ~beaten
            self._front = [i for i, k in zip(self._front, keep, strict=True) if k]
            fs = fs[keep]
        self._front.append(idx)
        self._front_scores = np.vstack([fs, vec[None, :]])
        self._weights = None
        return idx

    def weights(self) -> np.ndarray:
        """Selection votes aligned with `front`."""
        if self._weights is None:
            self._weights = selection_weights(self._front_scores)
        return self._weights

    def sample(self, rng: random.Random) -> int:
        """Draw a parent index among the front, in proportion to its votes."""
        if not self._front:
            raise ValueError("the archive is empty")
        w = self.weights()
        return rng.choices(self._front, weights=w.tolist(), k=1)[0]

    def means(self) -> np.ndarray:
        return self.scores.mean(axis=1) if self.n_examples else np.zeros(self._n)

    def best(self) -> int:
        """Index of the best-mean candidate (the earliest one on ties)."""
        return int(np.argmax(self.means()))
