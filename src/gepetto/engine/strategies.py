"""The swappable decisions of the loop: which parent, which components, which minibatch, whether a child passes.

Each decision is a small Protocol with built-in implementations, named by a string in `EngineConfig` (the first is
the default, the paper's GEPA) or given as an object to `gepetto.optimize(...)`:

    parent_selector     "auto" | "pareto" | "current-best" | "epsilon-greedy"     (ParentSelector)
    component_selector  "round-robin" | "all"                           (ComponentSelector)
    minibatch_sampler   "epoch-shuffled"                                (MinibatchSampler)
    accept              "strict" | "non_decreasing" | "paired"          (Acceptance)
    proposer            "auto" | "rewrite" | "edit"                     (engine/proposers.py)
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gepetto.config import PYTHON, STRATEGIES, ConfigError, EngineConfig
from gepetto.engine.minibatch import EpochShuffled
from gepetto.engine.state import RunState
from gepetto.types import Candidate, Example

if TYPE_CHECKING:
    from gepetto.engine.proposers import Proposer


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


class Acceptance(Protocol):
    """Whether a child passes its test: gets the parent's and the child's scores on the same examples (in the
    same order) and returns True to validate the child (pay for its full validation pass), False to reject it.

    None asks for more evidence. A strategy that may answer None says how many times at most in an attribute
    `retests` (an int; none: 0). For each, the engine runs parent and child on as many fresh training examples
    as the test had (ones not yet in this comparison; their rollouts are set aside when the proposal is
    planned, so the budget holds) and asks again with the scores pooled (the earlier ones first). None with no
    re-test left, or no fresh example left, is a rejection.
    """

    def __call__(self, before: Sequence[float], after: Sequence[float]) -> bool | None: ...


# ---- parent selection ----------------------------------------------------------------------------------------
class Pareto:
    """The paper's rule: a candidate of the Pareto front, drawn in proportion to the validation examples on which
    it has the best score (the best mean gets at least one vote: engine/pareto.py)."""

    def __call__(self, state: RunState, rng: random.Random) -> int:
        return state.archive.sample(rng)


class CurrentBest:
    """Always the leader: the highest mean, the earliest of ties (`ParetoArchive.leader`; the candidate a run
    returns must also beat the seed on evidence). Draws nothing."""

    def __call__(self, state: RunState, rng: random.Random) -> int:
        return state.archive.leader()


@dataclass(frozen=True)
class EpsilonGreedy:
    """The leader (as CurrentBest), or with probability `epsilon` any candidate of the pool (uniformly)."""

    epsilon: float = 0.1

    def __call__(self, state: RunState, rng: random.Random) -> int:
        if rng.random() < self.epsilon:
            return rng.randrange(len(state.records))
        return state.archive.leader()


# ---- component selection -------------------------------------------------------------------------------------
class RoundRobin:
    """One component per proposal: each parent goes through the components in turn (`state.next_component`)."""

    def __call__(self, state: RunState, parent: int, components: Sequence[str], rng: random.Random
                 ) -> Sequence[str]:
        turn = state.next_component.get(parent, 0)
        state.next_component[parent] = turn + 1
        return (components[turn % len(components)],)


class AllComponents:
    """Every component at once: one proposal rewrites each of them (one reflection call per component)."""

    def __call__(self, state: RunState, parent: int, components: Sequence[str], rng: random.Random
                 ) -> Sequence[str]:
        return tuple(components)


# ---- acceptance ----------------------------------------------------------------------------------------------
def strict(before: Sequence[float], after: Sequence[float]) -> bool:
    """The child scores higher in total than its parent."""
    return sum(after) > sum(before)


def non_decreasing(before: Sequence[float], after: Sequence[float]) -> bool:
    """The child scores at least as high in total as its parent."""
    return sum(after) >= sum(before)


@dataclass(frozen=True)
class Paired:
    """For a noisy task LM or judge: the mean paired difference (child minus parent, example by example) must
    exceed `tolerance` to pass and fall below -`tolerance` to fail; in between (a tie within the noise) parent and
    child are tested once more on fresh examples and the pooled pairs decide (a tie again is a rejection)."""

    tolerance: float = 0.0
    retests: int = 1

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


# ---- the built-ins by name -----------------------------------------------------------------------------------
def _proposer(name: str) -> Callable[[EngineConfig], Any]:
    def build(cfg: EngineConfig) -> Any:
        from gepetto.engine.proposers import Edit, FewShot, Rewrite

        proposer = Edit(cfg) if name == "edit" else Rewrite()
        return FewShot(proposer, cfg) if cfg.demonstrations else proposer

    return build


BUILTINS: dict[str, dict[str, Callable[[EngineConfig], Any]]] = {
    # "auto" stands for the route's choice (engine/route.py); until the route is settled, the paper's
    "parent_selector": {"auto": lambda cfg: Pareto(), "pareto": lambda cfg: Pareto(),
                        "current-best": lambda cfg: CurrentBest(),
                        "epsilon-greedy": lambda cfg: EpsilonGreedy(cfg.epsilon)},
    "component_selector": {"round-robin": lambda cfg: RoundRobin(), "all": lambda cfg: AllComponents()},
    "minibatch_sampler": {"epoch-shuffled": lambda cfg: EpochShuffled(cfg.minibatch_size, cfg.seed,
                                                                      cfg.perfect_score)},
    "proposer": {"auto": _proposer("rewrite"), "rewrite": _proposer("rewrite"), "edit": _proposer("edit")},
    "accept": {"strict": lambda cfg: strict, "non_decreasing": lambda cfg: non_decreasing,
               "paired": lambda cfg: Paired(cfg.accept_tolerance)},
}
assert {k: tuple(v) for k, v in BUILTINS.items()} == STRATEGIES  # config.py names them, for the CLI and files


@dataclass(frozen=True)
class Strategies:
    """The strategies of one engine, resolved from the config's names and the objects given."""

    parent_selector: ParentSelector
    component_selector: ComponentSelector
    minibatch_sampler: MinibatchSampler
    proposer: Proposer
    accept: Acceptance

    @classmethod
    def resolve(cls, cfg: EngineConfig, given: Mapping[str, Any] | None = None) -> Strategies:
        """Each strategy: the object in `given` (by option name), else the built-in `cfg` names."""
        return cls(**{option: resolve(option, (given or {}).get(option), cfg) for option in BUILTINS})


def resolve(option: str, spec: Any, cfg: EngineConfig) -> Any:
    """The strategy for `option`: `spec` itself (an object), or the built-in named by `spec` or by the config."""
    if spec is not None and not isinstance(spec, str):
        needs = "an async propose(request) method" if option == "proposer" else "to be callable"
        if not (callable(getattr(spec, "propose", None)) if option == "proposer" else callable(spec)):
            raise ConfigError(f"{option}: {type(spec).__name__} is no {option.replace('_', ' ')} ({needs})")
        if option == "proposer" and cfg.fewshot:  # demonstrations beside a proposer of one's own: when asked for
            from gepetto.engine.proposers import FewShot

            return FewShot(spec, cfg)
        return spec
    name = spec or getattr(cfg, option)
    if name.startswith(PYTHON):
        raise ConfigError(f"{option} {name!r} stands for an object given to gepetto.optimize(); pass that object "
                          f"again ({option}=...), or a built-in: {', '.join(BUILTINS[option])}")
    if name not in BUILTINS[option]:
        raise ConfigError(f"{option}: unknown {name!r}; accepted: {', '.join(BUILTINS[option])}")
    return BUILTINS[option][name](cfg)


def label(obj: Any) -> str:
    """How a strategy object (or an LM object, a program) is named in a stored run's config: its built-in name
    when it is a string, else python:MODULE:QUALNAME of its function or class."""
    if isinstance(obj, str):
        return obj
    target = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{PYTHON}{getattr(target, '__module__', '?')}:{target.__qualname__}"
