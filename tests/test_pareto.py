"""Pareto front, dominance and parent sampling, property-tested against a brute-force reference."""

import itertools
import math
import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gepetto.engine.pareto import ParetoArchive, dominates, nondominated

score = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])  # coarse values make ties and duplicates common


@st.composite
def matrices(draw, max_rows=12, max_cols=8):
    rows = draw(st.integers(1, max_rows))
    cols = draw(st.integers(1, max_cols))
    return np.array(draw(st.lists(st.lists(score, min_size=cols, max_size=cols), min_size=rows, max_size=rows)))


def build(scores):
    archive = ParetoArchive(scores.shape[1], capacity=2)  # small capacity exercises growth
    for row in scores:
        archive.add(row)
    return archive


@given(matrices())
@settings(max_examples=300, deadline=None)
def test_incremental_front_equals_brute_force(scores):
    assert sorted(build(scores).front) == nondominated(scores)


@given(matrices())
@settings(max_examples=300, deadline=None)
def test_best_mean_candidate_always_has_a_chance(scores):
    archive = build(scores)
    weights = dict(zip(archive.front, archive.weights(), strict=True))
    best_mean = scores.mean(axis=1).max()
    for i in np.flatnonzero(scores.mean(axis=1) == best_mean):
        assert weights.get(int(i), 0) > 0


@given(matrices())
@settings(max_examples=200, deadline=None)
def test_dominated_candidates_are_never_sampled(scores):
    archive = build(scores)
    rng = random.Random(0)
    drawn = {archive.sample(rng) for _ in range(50)}
    for i in drawn:
        assert not any(dominates(scores[j], scores[i]) for j in range(len(scores)))


@given(matrices())
@settings(max_examples=200, deadline=None)
def test_weights_count_examples_won(scores):
    archive = build(scores)
    front = np.array(archive.front)
    w = archive.weights()
    wins = (scores[front] == scores.max(axis=0)).sum(axis=1)
    assert np.all(w >= wins) and np.all(w <= np.maximum(wins, 1))


def test_best_mean_that_wins_no_example_still_gets_a_vote():
    # each specialist wins one example; the generalist has the best mean but wins none
    scores = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0.9, 0.9, 0.9]])
    archive = build(scores)
    assert sorted(archive.front) == [0, 1, 2, 3]
    assert dict(zip(archive.front, archive.weights(), strict=True))[3] == 1
    assert archive.best() == 3  # (on 3 examples no gain could show evidence: the highest mean is the best)


def test_sampling_is_proportional_to_wins():
    scores = np.array([[1, 1, 1, 0], [0, 0, 0, 1]])
    archive = build(scores)
    rng = random.Random(1)
    draws = [archive.sample(rng) for _ in range(4000)]
    assert 0.70 < draws.count(0) / len(draws) < 0.80


def test_identical_candidates_share_the_front():
    archive = build(np.array([[0.5, 0.5], [0.5, 0.5], [0.2, 0.5]]))
    assert archive.front == [0, 1]


# ---- the best on evidence ---------------------------------------------------------------------------------------
@given(st.integers(0, 25), st.integers(0, 25), st.integers(0, 10))
def test_on_right_wrong_scores_the_flip_test_is_the_sign_test(wins, losses, ties):
    from gepetto.engine.pareto import flip_test

    diffs = np.array([1.0] * wins + [-1.0] * losses + [0.0] * ties)
    n = wins + losses
    binomial_tail = sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n  # P(>= wins heads in n fair flips)
    assert abs(flip_test(diffs) - binomial_tail) < 1e-9
    assert flip_test(np.array([1.0, 1.0, 1.0])) == 0.125 and flip_test(np.zeros(4)) == 1.0


def test_on_graded_scores_a_large_gain_outweighs_many_small_losses():
    from gepetto.engine.pareto import beats, flip_test

    base = np.full(30, 0.5)
    row = base.copy()
    row[:10] = 1.0  # ten examples gained by 0.5
    row[10:23] = 0.45  # thirteen lost by 0.05: more losses than wins, yet a clear gain
    assert flip_test(row - base) < 0.01 and beats(row, base)
    assert not beats(base, row)


def test_a_gain_of_one_example_or_two_among_many_differing_does_not_make_the_best():
    from gepetto.engine.pareto import best_index, evidence

    seed = np.array([1.0] * 12 + [0.0] * 18)

    def child(wins: int, losses: int) -> np.ndarray:
        row = seed.copy()
        row[12:12 + wins], row[:losses] = 1.0, 0.0
        return row

    one, two_of_many, two_of_few = child(6, 5), child(9, 7), child(5, 3)  # p = 0.5, 0.402, 0.363
    archive = build(np.array([seed, one, two_of_many]))
    assert archive.evident == [True, False, False] and archive.best() == 0
    archive.add(two_of_few)
    assert archive.best() == 3
    # the stored-run view (cli, report, snapshot) agrees with the engine
    rows = [{f"v{i}": float(x) for i, x in enumerate(r)} for r in (seed, one, two_of_many, two_of_few)]
    assert best_index([r.mean() for r in (seed, one, two_of_many, two_of_few)], evidence(rows)) == 3


@given(matrices(max_rows=8, max_cols=12))
@settings(max_examples=300, deadline=None)
def test_the_best_beats_the_seed_and_every_earlier_best_and_was_never_dominated(scores):
    from gepetto.engine.pareto import beats, best_index, evidence

    archive = build(scores)
    chain = [i for i, e in enumerate(archive.evident) if e]
    assert chain[0] == 0 and archive.best() == chain[-1]
    for before, after in itertools.pairwise(chain):  # each new best beat the seed and the best before it
        assert beats(scores[after], scores[0]) and beats(scores[after], scores[before])
    for i in range(1, len(scores)):  # a row dominated by an earlier one never becomes the best (racing relies on it)
        if any(dominates(scores[j], scores[i]) for j in range(i)):
            assert not archive.evident[i]
    # the one rule of `best_index`, and the stored-run view, agree with the engine
    assert best_index(archive.means(), archive.evident) == archive.best()
    rows = [{f"v{k}": float(x) for k, x in enumerate(r)} for r in scores]
    assert evidence(rows) == archive.evident


def test_a_gain_of_one_example_over_the_best_does_not_replace_it():
    seed = np.array([1.0] * 2 + [0.0] * 28)
    first = seed.copy()
    first[2:7] = 1.0  # 7 of 30, five more than the seed: the best
    lucky = first.copy()
    lucky[7] = 1.0  # one more: likelier luck than a better prompt
    archive = build(np.array([seed, first, lucky]))
    assert archive.best() == 1 and archive.evident == [True, True, False]
    clear = first.copy()
    clear[8:12] = 1.0  # four more than the best: a new best
    archive.add(clear)
    assert archive.best() == 3


def test_a_child_of_the_best_replaces_it_on_a_higher_mean_another_lineage_needs_evidence():
    from gepetto.engine.pareto import evidence

    seed = np.array([1.0] * 2 + [0.0] * 28)
    first = seed.copy()
    first[2:7] = 1.0
    cousin, heir = first.copy(), first.copy()
    cousin[7] = 1.0  # one example more, from another lineage (the seed's child): luck is likelier
    heir[8] = 1.0  # one example more, the best's own child: it already beat the best on its test
    archive = ParetoArchive(30)
    for row, parents in ((seed, ()), (first, (0,)), (cousin, (0,)), (heir, (1,))):
        archive.add(row, parents)
    assert archive.evident == [True, True, False, True] and archive.best() == 3
    rows = [{f"v{i}": float(x) for i, x in enumerate(r)} for r in (seed, first, cousin, heir)]
    assert evidence(rows, [(), (0,), (0,), (1,)]) == archive.evident
    assert evidence(rows) == [True, True, False, False]  # without parents, every gain needs evidence


def test_a_float_row_that_wins_more_examples_but_a_lower_mean_never_beats():
    from gepetto.engine.pareto import beats

    base = np.array([0.5] * 12)
    row = np.array([0.6] * 8 + [0.0] * 4)  # wins 8, loses 4, mean 0.4 < 0.5
    assert not beats(row, base)


def test_on_a_handful_of_validation_examples_the_highest_mean_is_the_best():
    from gepetto.engine.pareto import EVIDENCE_MIN, beats

    seed, better = np.zeros(EVIDENCE_MIN - 1), np.zeros(EVIDENCE_MIN - 1)
    better[0] = 1.0  # one example won: no sign test could show evidence on so few, so none is asked for
    assert beats(better, seed) and build(np.array([seed, better])).best() == 1
    assert not beats(seed, seed)  # a higher mean, not an equal one


def test_a_finished_runs_best_is_the_one_it_returned_whatever_the_rule_is_today():
    from gepetto.engine.pareto import stored_best

    ids = [f"v{i}" for i in range(30)]
    seed = {i: float(k < 12) for k, i in enumerate(ids)}
    one_ahead = {**seed, "v12": 1.0}  # one example won: no evidence today
    cands = [{"texts": {"p": t}, "mean": sum(v.values()) / 30, "val_scores": v}
             for t, v in (("seed", seed), ("child", one_ahead))]
    assert stored_best(cands) == 0  # the rule's choice
    # a run that returned the child (an earlier rule let it through) keeps it in every stored view
    assert stored_best(cands, {"best_candidate": {"p": "child"}}) == 1
    assert stored_best(cands, {"best_candidate": {"p": "gone"}}) == 0  # no stored candidate has those texts
