"""System-aware merge: combine two lineages by taking, per component, the text that moved away from a
common ancestor. Useful when different components improved along different branches. When both lineages
only appended lines to the same component (as edit reflection does, one rule per line), the merge keeps
both sets of lines: rules found on different branches come together."""

from __future__ import annotations

import random
from collections.abc import Sequence

from gepetto.types import Candidate


def ancestors(idx: int, parents: Sequence[Sequence[int]]) -> set[int]:
    """All ancestors of candidate `idx` (not including itself)."""
    seen: set[int] = set()
    stack = list(parents[idx])
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.add(p)
            stack.extend(parents[p])
    return seen


def union_of_appends(ta: str, tb: str, t0: str) -> str | None:
    """`t0` plus the lines `ta` and `tb` each appended to it (b's new lines after a's), or None when either
    text changed more than appending lines."""
    base, la, lb = t0.rstrip().splitlines(), ta.rstrip().splitlines(), tb.rstrip().splitlines()
    if la[: len(base)] != base or lb[: len(base)] != base:
        return None
    added_a = la[len(base):]
    added = added_a + [line for line in lb[len(base):] if line not in added_a]
    return "\n".join(base + added)


def merge_texts(
    a: Candidate, b: Candidate, ancestor: Candidate, mean_a: float, mean_b: float, rng: random.Random
) -> Candidate:
    """Per component: keep a text both share; else the one that changed; if both only appended lines, both
    sets of lines; otherwise the better parent's."""
    texts: dict[str, str] = {}
    for name in ancestor:
        ta, tb, t0 = a[name], b[name], ancestor[name]
        if ta == tb or tb == t0:
            texts[name] = ta
        elif ta == t0:
            texts[name] = tb
        elif (union := union_of_appends(ta, tb, t0)) is not None:
            texts[name] = union
        elif mean_a != mean_b:
            texts[name] = ta if mean_a > mean_b else tb
        else:
            texts[name] = rng.choice((ta, tb))
    return Candidate(texts)


def find_merge(
    front: Sequence[int],
    candidates: Sequence[Candidate],
    parents: Sequence[Sequence[int]],
    means: Sequence[float],
    tried: set[tuple[int, int]],
    rng: random.Random,
) -> tuple[int, int, Candidate] | None:
    """A pair on the front with a common ancestor whose merge is new (not a parent, not in the pool)."""
    known = {c.id for c in candidates}
    pairs = [(i, j) for k, i in enumerate(front) for j in front[k + 1 :] if (min(i, j), max(i, j)) not in tried]
    rng.shuffle(pairs)
    for i, j in pairs:
        tried.add((min(i, j), max(i, j)))
        common = ancestors(i, parents) & ancestors(j, parents)
        if not common or i in ancestors(j, parents) or j in ancestors(i, parents):
            continue
        anc = max(common, key=lambda k: (means[k], -k))  # the best shared ancestor
        child = merge_texts(candidates[i], candidates[j], candidates[anc], means[i], means[j], rng)
        if child.id not in known:
            return i, j, child
    return None
