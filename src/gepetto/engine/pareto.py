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
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

# A candidate becomes the best only on evidence that it beats the seed and (unless the best is its parent) the best
# before it: a one-sided paired test over the validation examples (`flip_test`; for right/wrong scores the sign
# test), at this level (a gain of one example is never enough, a gain of two only while few examples differ:
# benchmarks/results/evidence_level.md); with fewer validation examples than EVIDENCE_MIN no gain could show
# evidence, and a higher mean is enough.
EVIDENCE_LEVEL = 0.4
EVIDENCE_MIN = 10
FLIP_GRID = 1000  # the test's differences are rounded to 1/FLIP_GRID, where its distribution is exact


def flip_test(diffs: np.ndarray) -> float:
    """How likely a gain this large is by luck alone: the probability that the per-example score differences,
    each given a random sign, sum to at least their observed sum (a one-sided paired sign-flip test, exact on
    differences rounded to 1/FLIP_GRID). For right/wrong scores it is the sign test: P(at least `wins` heads in
    `wins + losses` fair coin flips); for graded scores, a large gain counts for more than a small one."""
    signed = np.rint(np.asarray(diffs, dtype=float) * FLIP_GRID).astype(np.int64)
    sizes = np.abs(signed[signed != 0])
    total = int(sizes.sum())
    dist = np.zeros(total + 1)  # dist[t]: P(the differences signed + sum to t), built one difference at a time
    dist[0] = 1.0
    for x in sizes:
        shifted = np.zeros_like(dist)
        shifted[x:] = dist[: total + 1 - x]
        dist = 0.5 * (dist + shifted)
    # a signing sums to 2t - total (t: the sum of its + signs), so it reaches the observed sum from this t on
    return float(dist[(int(signed.sum()) + total) // 2:].sum())


def beats(row: np.ndarray, base: np.ndarray, level: float = EVIDENCE_LEVEL) -> bool:
    """Whether score vector `row` beats `base` on evidence: a higher mean, by a margin the paired test puts at
    or below `level` (on fewer than EVIDENCE_MIN examples, a higher mean)."""
    if row.mean() <= base.mean():
        return False
    return len(base) < EVIDENCE_MIN or flip_test(row - base) <= level


def evidence(val_scores: Sequence[Mapping[str, float] | None],
             parents: Sequence[Sequence[int]] | None = None, confirmed: Sequence[bool] | None = None) -> list[bool]:
    """For stored candidates, in the order they joined (their validation scores by example id, the first the
    seed's; their parents' indices; whether more evidence made them the best right after they joined,
    `ParetoArchive.confirm`): which ones became the best, as the engine decided (`ParetoArchive.evident`)."""
    if not val_scores or not val_scores[0]:
        return [True] * len(val_scores)
    ids = sorted(val_scores[0])
    archive, out = ParetoArchive(len(ids)), []
    index: dict[int, int] = {}  # stored index -> archive row
    for k, scores in enumerate(val_scores):
        full = scores is not None and all(i in scores for i in ids)
        if full:
            index[k] = archive.add([scores[i] for i in ids],  # type: ignore[index]
                                   parents=[index[j] for j in (parents[k] if parents else ()) if j in index])
            if confirmed and confirmed[k]:
                archive.promote(index[k])
        out.append(full and archive.evident[index[k]])
    return out


def best_index(means: Sequence[float | None] | np.ndarray, evident: Sequence[bool] | np.ndarray | None = None
               ) -> int | None:
    """The one rule for "the best candidate", used by the engine, `Result`, the stored-run snapshot, `gepetto
    runs/show/export` and the report: the highest mean validation score among fully evaluated candidates (a
    candidate whose validation was cut short is never in the pool, so never in `means`) that are `evident`
    (those that became the best when they joined, `ParetoArchive.evident`: the last of them, as their means rise;
    all when not given); on a tie the earliest candidate (lowest index) wins. A missing (None) or NaN mean never
    wins. None when nothing qualifies."""
    if isinstance(means, np.ndarray):  # the engine's archive: the same rule, vectorised (argmax: first of ties)
        masked = np.where(np.isnan(means), -np.inf, means)
        if evident is not None:
            masked = np.where(np.asarray(evident, dtype=bool), masked, -np.inf)
        i = int(np.argmax(masked)) if masked.size else -1
        return i if i >= 0 and masked[i] > -np.inf else None
    best, top = None, -math.inf
    for i, m in enumerate(means):
        # strictly greater: the earliest keeps a tie; NaN compares False
        if m is not None and m > top and (evident is None or evident[i]):
            best, top = i, m
    return best


def stored_best(cands: Sequence[Mapping[str, Any]], result: Mapping[str, Any] | None = None) -> int | None:
    """Position in `cands` of the run's best: the candidate a finished run returned (`result`, as the engine then
    chose it, whatever the evidence rule is today), else the rule's choice among the stored candidates."""
    returned = (result or {}).get("best_candidate")
    if returned:
        same = [i for i, c in enumerate(cands) if c.get("texts") == returned]
        if same:
            return max(same, key=lambda i: (cands[i].get("mean") or 0.0, -i))
    return best_index([c.get("mean") for c in cands], evidence([c.get("val_scores") or None for c in cands],
                                                              [c.get("parents") or () for c in cands],
                                                              [bool(c.get("confirmed")) for c in cands]))


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
    are kept up to date, so sampling costs one more pass. Row i is candidate i; row 0 is the seed.

    The best is chosen as rows join: the seed first, then a row that joins the front, `beats` the seed, and
    either is a child of the best with a higher mean (it already beat the best on its own test) or `beats` the
    best too: between two lineages a gain of one example is luck (the highest of many close means is the likeliest
    to be lucky). A row dominated when it joins is never the best (racing relies on it: engine/racing.py cuts only
    such rows).
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
        self.evident: list[bool] = []  # row i became the best when it joined (row 0 itself: True)
        self._best = 0

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

    def add(self, row: Sequence[float], parents: Sequence[int] = (), also_beat: Sequence[float] | None = None) -> int:
        """Add a fully evaluated candidate's score vector (and its parents' indices); returns its index. With
        `also_beat` (a baseline's scores on the same examples), it becomes the best only if it beats that too."""
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
                self.evident.append(False)
                return idx  # dominated: the front does not change (nor the best)
            beaten = lower & ~higher
            if beaten.any():
                keep = np.flatnonzero(~beaten)  # positions (in the front) of the members that stay
                self._front = [self._front[j] for j in keep]
                self._fbuf[: len(self._front)] = fs[keep]
        self._fbuf = self._grow(self._fbuf, len(self._front))
        self._fbuf[len(self._front)] = vec
        self._front.append(idx)
        base, best = self._scores[0], self._scores[self._best]
        heir = self._best in parents and bool(vec.mean() > best.mean())
        baseline = None if also_beat is None else np.asarray(also_beat, dtype=float)
        self.evident.append(idx == 0 or (beats(vec, base) and (self._best == 0 or heir or beats(vec, best))
                                         and (baseline is None or beats(vec, baseline))))
        if self.evident[-1]:
            self._best = idx
        np.maximum(self._col_best, vec, out=self._col_best)  # beaten rows were <= vec: the best stays right
        self._weights = None
        return idx

    def confirm(self, idx: int, extra: Mapping[int, Sequence[float]], parents: Sequence[int] = ()) -> bool:
        """More evidence for row `idx` (its `parents`), a leader held back from the best: scores of it, the seed (row
        0) and the best on more examples (`extra`, by row, in one order), examples that shaped none of them. It
        becomes the best when it is on the front and, over the validation and these examples together, `beats` the
        seed and, unless it is the best's child, the best: the rule rows follow when they join. True when it did."""
        best = self._best
        if idx in (0, best) or idx not in self._front or not {idx, 0, best} <= set(extra):
            return False

        def joined(row: int) -> np.ndarray:
            return np.concatenate([self._scores[row], np.asarray(extra[row], dtype=float)])

        vec = joined(idx)
        if not beats(vec, joined(0)) or (best not in (0, *parents) and not beats(vec, joined(best))):
            return False
        self.promote(idx)
        return True

    def promote(self, idx: int) -> None:
        """Make row `idx` the best (`confirm` decided it; a stored run's replay repeats it)."""
        self.evident[idx], self._best = True, idx

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

    def leader(self) -> int:
        """Index of the candidate with the highest mean (the earliest of ties), evidence or not: what a search
        that follows the best so far builds on (a small gain may be real; it must show evidence to be returned)."""
        leader = best_index(self._sums[: self._n])
        if leader is None:
            raise ValueError("the archive is empty")
        return leader

    def best(self) -> int:
        """Index of the best candidate (the last row that became the best when it joined; `best_index` agrees)."""
        if not self._n:
            raise ValueError("the archive is empty")
        return self._best
