"""The swappable decisions of the loop: which parent, which components, which minibatch, whether a child passes.

Each decision is a small protocol with built-in implementations, named in `EngineConfig` by a spec, the name with
its parameters if any (`epsilon-greedy(epsilon=0.2)`: gepetto.specs), or given as an object to
`gepetto.optimize(...)` (a built-in one, `EpsilonGreedy(0.2)`, is stored by its spec):

    parent_selector     auto | pareto | current-best | epsilon-greedy(epsilon)     (ParentSelector)
    component_selector  round-robin | all                                          (ComponentSelector)
    minibatch_sampler   epoch-shuffled                                             (MinibatchSampler)
    accept              strict | non-decreasing | paired(tolerance, retests)       (Acceptance)
    proposer            auto | rewrite | edit, with few-shot demonstrations        (engine/proposers.py)
    stop conditions     (engine/stopping.py)

The contract every strategy keeps, so that a stored run resumes exactly: a resumed run replays every decision
from the start over its stored rollouts and LM answers, so a decision must be a function of what the strategy is
given. Draw randomness only from the `rng` you get (seeded by the run's seed and the iteration; strategies of one
iteration draw from it in a fixed order: parent, components, minibatch); never read the clock, the global
`random`, or the order of a set of strings (it changes with each process). Keep memory that must outlive a call
in the run state (`state.next_component`, `state.train_cursor`, `state.memory`), which replay rebuilds, not in the
object: the same object may serve a run and then its resume.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gepetto.engine.minibatch import EpochShuffled
from gepetto.engine.proposers import Proposer
from gepetto.engine.state import RunState
from gepetto.specs import PYTHON, REGISTRY, Knobs, builtin, is_builtin, knob
from gepetto.types import Candidate, Example


class ParentSelector(Protocol):
    """Chooses the parent of the next proposal.

    Gets the run state (`state.records`: the pool, each with its lineage and validation scores; `state.archive`:
    the score matrix, the Pareto front and its votes, the best candidate) and this iteration's rng. Returns the
    index of a candidate in `state.records`. Called once per proposal, in plan order.
    """

    def __call__(self, state: RunState, rng: random.Random) -> int: ...


class ComponentSelector(Protocol):
    """Chooses which components of the parent a proposal changes.

    Gets the run state, the parent's index, the components that may evolve (in the seed's order) and this
    iteration's rng (after the parent selector drew from it). Returns a non-empty sequence of them.
    """

    def __call__(self, state: RunState, parent: int, components: Sequence[str], rng: random.Random
                 ) -> Sequence[str]: ...


class MinibatchSampler(Protocol):
    """Chooses the training examples the parent runs on before reflection (the child is tested on them too).

    Gets the run state (`state.known(parent, example_id)`: a rollout already paid for, free to reuse), the
    parent, the training set and this iteration's rng (after the component selector drew). Returns a non-empty
    list of distinct training examples; each one the parent has not run yet costs a rollout. With `seek_failures`
    it is called again in the same iteration for the reserve (examples run in place of solved ones) until that is
    full or a call brings no new example.
    """

    def __call__(self, state: RunState, parent: Candidate, trainset: Sequence[Example], rng: random.Random
                 ) -> list[Example]: ...


class Acceptance:
    """Whether a child passes its test: called with the parent's and the child's scores on the same examples (in
    the same order), returns True to validate the child (pay for its full validation pass), False to reject it.

    None asks for more evidence, at most `retests` times (the base's 0: never). For each, the engine runs parent
    and child on as many fresh training examples as the test had (ones not yet in this comparison; their rollouts
    are set aside when the proposal is planned, so the budget holds) and asks again with the scores pooled (the
    earlier ones first). None with no re-test left, or no fresh example left, is a rejection. A plain function is
    an acceptance that never re-tests; derive from this class to declare `retests`.
    """

    retests: int = 0

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool | None:
        raise NotImplementedError


@dataclass(frozen=True)
class FunctionAcceptance(Acceptance):
    """An acceptance given as a plain function: it never re-tests."""

    function: Any

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool | None:
        verdict: bool | None = self.function(before, after)
        return verdict


# ---- parent selection ----------------------------------------------------------------------------------------
@builtin("parent_selector", "pareto")
@dataclass(frozen=True)
class Pareto(Knobs):
    """The paper's rule: a candidate of the Pareto front, in proportion to the validation examples it is best on.

    The best mean gets at least one vote (engine/pareto.py)."""

    def __call__(self, state: RunState, rng: random.Random) -> int:
        return state.archive.sample(rng)


@builtin("parent_selector", "auto")
@dataclass(frozen=True)
class RouteParent(Pareto):
    """The run's route chooses: current-best on the labels route, else pareto.

    The route is chosen from the seed's validation (engine/route.py); until then, the paper's (pareto)."""


@builtin("parent_selector", "current-best")
@dataclass(frozen=True)
class CurrentBest(Knobs):
    """Always the leader: the highest mean validation score, the earliest of ties.

    `ParetoArchive.leader`; the candidate a run returns must also beat the seed on evidence, and the best before it
    unless it is its child. Draws nothing."""

    def __call__(self, state: RunState, rng: random.Random) -> int:
        return state.archive.leader()


@builtin("parent_selector", "epsilon-greedy")
@dataclass(frozen=True)
class EpsilonGreedy(Knobs):
    """The leader (as current-best), or with probability `epsilon` any candidate of the pool (uniformly).

    Args:
        epsilon: The probability of a random parent.
    """

    epsilon: float = knob(0.1, ge=0, le=1)

    def __call__(self, state: RunState, rng: random.Random) -> int:
        if rng.random() < self.epsilon:
            return rng.randrange(len(state.records))
        return state.archive.leader()


# ---- component selection -------------------------------------------------------------------------------------
@builtin("component_selector", "round-robin")
@dataclass(frozen=True)
class RoundRobin(Knobs):
    """One component per proposal, each parent going through the components in turn (`state.next_component`)."""

    def __call__(self, state: RunState, parent: int, components: Sequence[str], rng: random.Random
                 ) -> Sequence[str]:
        turn = state.next_component.get(parent, 0)
        state.next_component[parent] = turn + 1
        return (components[turn % len(components)],)


@builtin("component_selector", "all")
@dataclass(frozen=True)
class AllComponents(Knobs):
    """Every component at once: one proposal rewrites each of them (one reflection call per component)."""

    def __call__(self, state: RunState, parent: int, components: Sequence[str], rng: random.Random
                 ) -> Sequence[str]:
        return tuple(components)


# ---- acceptance ----------------------------------------------------------------------------------------------
@builtin("accept", "strict")
@dataclass(frozen=True)
class Strict(Knobs, Acceptance):
    """The child scores higher in total than its parent."""

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool:
        return sum(after) > sum(before)


@builtin("accept", "non-decreasing")
@dataclass(frozen=True)
class NonDecreasing(Knobs, Acceptance):
    """The child scores at least as high in total as its parent."""

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool:
        return sum(after) >= sum(before)


@builtin("accept", "paired")
@dataclass(frozen=True)
class Paired(Knobs, Acceptance):
    """For a noisy task LM or judge: the child's mean paired gain over its parent must exceed `tolerance`.

    The gain is the mean difference, child minus parent, example by example; below -`tolerance` the child fails;
    in between (a tie within the noise) parent and child are tested again on fresh examples and the pooled pairs
    decide (a tie after the last is a rejection).

    Args:
        tolerance: A mean gain per example within this of 0 is a tie, tested again.
        retests: How many times a tie is tested again on fresh examples.
    """

    tolerance: float = knob(0.0, ge=0, le=1)
    retests: int = knob(1, ge=0)

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool | None:
        if not after:
            return None
        diff = sum(a - b for a, b in zip(after, before, strict=True)) / len(after)
        if diff > self.tolerance:
            return True
        if diff < -self.tolerance:
            return False
        return None


def retest_examples(trainset: Sequence[Example], used: set[str], n: int, rng: random.Random) -> list[Example]:
    """Up to `n` training examples not in `used` (ids), drawn with `rng`: the fresh examples of a re-test.

    Fresh, not the same ones again: a rollout is kept by (candidate, example) and replayed, never paid twice,
    and at temperature 0 the response cache answers alike, so only new examples bring new evidence. Drawn
    uniformly, not for being the parent's failures (as a minibatch's examples tend to be), so a parent's score
    reused there is no failure picked on purpose that a child would beat by chance."""
    pool = [e for e in trainset if e.id not in used]
    return rng.sample(pool, min(n, len(pool)))


# ---- the strategies of one engine ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Strategies:
    """The strategies of one engine (`gepetto.parts.build_strategies` builds them from the config's specs and the
    objects given)."""

    parent_selector: ParentSelector
    component_selector: ComponentSelector
    minibatch_sampler: MinibatchSampler
    proposer: Proposer
    accept: Acceptance


def builtin_spec(obj: Any) -> str | None:
    """The spec of a built-in strategy object (`EpsilonGreedy(0.2)`: "epsilon-greedy(epsilon=0.2)"), None for
    any other object (a subclass of one's own too)."""
    return obj.spec if any(is_builtin(option, obj) for option in REGISTRY) else None


def label(obj: Any) -> str:
    """How a strategy object (or an LM object, a program) is named in a stored run's config: its spec when it is
    a string or a built-in, else python:MODULE:QUALNAME of its function or class."""
    if isinstance(obj, str):
        return obj
    spec = builtin_spec(obj)
    if spec is not None:
        return spec
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{PYTHON}{getattr(target, '__module__', '?')}:{target.__qualname__}"


__all__ = [
    "Acceptance",
    "AllComponents",
    "ComponentSelector",
    "CurrentBest",
    "EpochShuffled",
    "EpsilonGreedy",
    "FunctionAcceptance",
    "MinibatchSampler",
    "NonDecreasing",
    "Paired",
    "ParentSelector",
    "Pareto",
    "RoundRobin",
    "RouteParent",
    "Strategies",
    "Strict",
    "builtin_spec",
    "label",
    "retest_examples",
]
