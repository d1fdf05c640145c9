"""The default configuration's route, chosen once per run from the examples and the seed's validation rollouts.

- **labels**: the task has a closed set of short answers (`engine/answers.py`) and the program's answers are
  those of one or more of its components. Their instructions get a first draft of rules (one "If ..., answer Y."
  line per answer), then rule edits aimed at the frequent confusions, and demonstrations; parents are the current
  best, so the rules accumulate in one lineage.
- **rewrite**: anything else (free text, numbers, records, reasoning). Whole rewrites from the minibatch's traces
  and feedback (the paper's proposer) and demonstrations; parents drawn from the Pareto front.

Only strategies left at "auto" take the route's: one given explicitly wins, and a parameter given to the auto
proposer (`auto(rules=5)`) wins over the route's. The choice is a function of the examples and the seed's
rollouts, so a resumed run, which replays them, takes it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gepetto.engine.answers import AnswerSet, normal
from gepetto.program import Rollout

SHORT_SHARE = 0.6  # the share of the seed's outputs that must be answers of the set for the labels route


@dataclass(frozen=True)
class Route:
    """The route of a run: its name, why, and the options it set (those left to it)."""

    name: str
    reason: str
    settings: Mapping[str, Any] = field(default_factory=dict)


def answering(components: Sequence[str], runs: Sequence[Rollout]) -> tuple[str, ...]:
    """The components whose last call's answer is the program's output in most of `runs` (for a one-call program,
    its component): where rules that say which answer to give belong."""
    found = []
    for component in components:
        hits = 0
        for run in runs:
            calls = [t for t in run.trace if t.component == component]
            if calls and run.output is not None and normal(calls[-1].output) == normal(run.output):
                hits += 1
        if runs and hits >= SHORT_SHARE * len(runs):
            found.append(component)
    return tuple(found)


GIVEN = Route("given", "the proposer was given")


def choose(answers: AnswerSet | None, components: tuple[str, ...], runs: Sequence[Rollout], *,
           one_component: bool = True) -> Route:
    """The labels route when there is an answer set, some component gives the program's answers and most of the
    seed's outputs are answers of the set (short answers, not reasoning that ends in one); rewrite otherwise (also
    when proposals change every component at once: `one_component` False, component_selector "all")."""
    if not one_component:
        return Route("rewrite", "component_selector 'all' changes every component at once (rules change one)")
    if answers is None:
        return Route("rewrite", "no closed set of short answers in the golds or the seed's solved outputs")
    given = sum(bool(answers.exact(r.output)) for r in runs if r.output is not None)
    if runs and given < SHORT_SHARE * len(runs):
        return Route("rewrite", f"{answers.describe()}, but only {given} of the seed's {len(runs)} validation "
                                "outputs are one of them (longer answers)")
    if not components:
        return Route("rewrite", f"{answers.describe()}, but no component's answer is the program's output")
    return Route("labels", f"{answers.describe()}; rules for {', '.join(components)}")
