"""System-aware merge: combine two lineages by taking, per component, the text that moved away from a
common ancestor. Useful when different components improved along different branches. When both lineages
only appended lines to the same component (as edit reflection does, one rule per line), the merge keeps
both sets of lines: rules found on different branches come together.

With `Merge(adaptive=True)`, how often a due merge is tried is learnt from how the run's merges fared
(`merge_chance`)."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gepetto.specs import Knobs, builtin, knob
from gepetto.types import Candidate


@builtin("merge", "merge")
@dataclass(frozen=True)
class Merge(Knobs):
    """System-aware merge of two lineages that share an ancestor, due after each accepted proposal.

    Args:
        max: Merges at most.
        adaptive: Try a due merge with probability (merges accepted + 2) / (merges tried + 2), learnt as the run
            goes; a skipped merge, or one with no pair to merge, makes room for a proposal in the same iteration.
    """

    max: int = knob(30, ge=0)
    adaptive: bool = knob(False)


def merge_chance(accepted: int, tried: int) -> float:
    """The probability that a due merge is tried (`Merge.adaptive`): (accepted + 2) / (tried + 2), the share of
    merges accepted so far counting two imagined accepted ones first. It starts at 1 (every due merge is tried,
    as without it), falls as merges are rejected (2/3 after one rejection, 1/2 after two, 1/3 after
    four) and climbs back as they are accepted, so a run whose lineages do not combine stops paying for merge
    tests while one whose merges work keeps them all."""
    if not 0 <= accepted <= tried:
        raise ValueError(f"accepted merges ({accepted}) must be between 0 and the merges tried ({tried})")
    return (accepted + 2) / (tried + 2)


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
    return Candidate(_merged(a, b, ancestor, mean_a, mean_b, rng))


def _merged(
    a: Candidate, b: Candidate, ancestor: Candidate, mean_a: float, mean_b: float, rng: random.Random
) -> dict[str, str]:
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
    return texts


def find_merge(
    front: Sequence[int],
    candidates: Sequence[Candidate],
    parents: Sequence[Sequence[int]],
    means: Sequence[float],
    tried: set[tuple[int, int]],
    rng: random.Random,
    also_known: Collection[str] = (),
) -> tuple[int, int, Candidate] | None:
    """A pair on the front with a common ancestor whose merge is new (not a parent, not in the pool, not one of
    `also_known`: ids of candidates outside the pool, e.g. raced out, that a full validation would have added)."""
    known = {c.id for c in candidates} | set(also_known)
    pairs = [(i, j) for k, i in enumerate(front) for j in front[k + 1 :] if ((i, j) if i < j else (j, i)) not in tried]
    rng.shuffle(pairs)  # O(front²), like the pair list: which pair comes first depends on the whole shuffle
    # each front member's ancestors, walked once (not once per pair), and in order of preference: the best shared
    # ancestor of a pair (highest mean, then the earliest) is the first of i's that j shares too
    lineage: dict[int, set[int]] = {}
    preferred: dict[int, list[int]] = {}
    rank = [(m, -k) for k, m in enumerate(means)]

    def ancestors_of(k: int) -> set[int]:
        if k not in lineage:
            lineage[k] = ancestors(k, parents)
            preferred[k] = sorted(lineage[k], key=rank.__getitem__, reverse=True)
        return lineage[k]

    for i, j in pairs:
        tried.add((i, j) if i < j else (j, i))
        ai, aj = ancestors_of(i), ancestors_of(j)
        if i in aj or j in ai:
            continue
        anc = next((k for k in preferred[i] if k in aj), None)
        if anc is None:  # no common ancestor
            continue
        a, b = candidates[i], candidates[j]
        texts = _merged(a, b, candidates[anc], means[i], means[j], rng)
        if all(texts[k] == a[k] for k in texts) or all(texts[k] == b[k] for k in texts):
            continue  # one of the parents again (the usual case with one component): known, no need to hash it
        child = Candidate(texts)
        if child.id not in known:
            return i, j, child
    return None
