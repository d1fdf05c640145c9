"""The default configuration's route, chosen once per run from the examples and the seed's validation rollouts.

- **labels**: the task has a closed set of short answers (`engine/answers.py`) and the program's answers are
  those of one or more of its components. Their instructions get a first draft of rules (one "If ..., answer Y."
  line per answer), then rule edits aimed at the frequent confusions, and demonstrations; parents are the current
  best, so the rules accumulate in one lineage.
- **rewrite**: anything else (free text, numbers, records, reasoning). Whole rewrites from the minibatch's traces
  and feedback (the paper's proposer) and demonstrations; parents drawn from the Pareto front.

An inner step of a program of several (a router whose answer the program uses but does not return) whose own
answers are a closed set of short texts gets rules too, its right answer read from the feedback ("the router
answered calendar, but the message is about alarm"): then the route is labels for it even when the program's
answers are open (a router, then a slot extractor), and the other components are rewritten whole.

Only strategies left at "auto" take the route's: one given explicitly wins, and a parameter given to the auto
proposer (`auto(rules=5)`) wins over the route's. The choice is a function of the examples and the seed's
rollouts, so a resumed run, which replays them, takes it again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gepetto.engine.answers import AnswerSet, normal, of_step
from gepetto.program import Rollout

SHORT_SHARE = 0.6  # the share of the seed's outputs that must be answers of the set for the labels route


@dataclass(frozen=True)
class Route:
    """The route of a run: its name, why, and the options it set (those left to it)."""

    name: str
    reason: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    ruled: tuple[str, ...] = ()  # the components that get rules (labels route)


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


def inner_steps(seed: Mapping[str, str], runs: Sequence[Rollout]) -> dict[str, AnswerSet]:
    """The inner steps of a program of several components (`seed`: their texts) whose own answers form a closed set
    (answers.of_step): those that do not give the program's answer (a router, a classifier feeding a later step),
    by component."""
    if len(seed) < 2:
        return {}
    found = {}
    for component, text in seed.items():
        if component in answering([component], runs):
            continue
        step = of_step(runs, component, text)
        if step is not None:
            found[component] = step
    return found


def choose(answers: AnswerSet | None, components: tuple[str, ...], runs: Sequence[Rollout], *,
           steps: Mapping[str, AnswerSet] | None = None, one_component: bool = True) -> Route:
    """The labels route when there is an answer set, some component gives the program's answers and most of the
    seed's outputs are answers of the set (short answers, not reasoning that ends in one), or when an inner step
    answers from a closed set of its own (`steps`): rules for those; rewrite otherwise (also when proposals change
    every component at once: `one_component` False, component_selector "all")."""
    if not one_component:
        return Route("rewrite", "component_selector 'all' changes every component at once (rules change one)")
    inner = tuple(steps or {})
    said = "; ".join(f"rules for {c} ({s.describe()})" for c, s in (steps or {}).items())
    if answers is None:
        why = "no closed set of short answers in the golds or the seed's solved outputs"
    else:
        given = sum(bool(answers.exact(r.output)) for r in runs if r.output is not None)
        if runs and given < SHORT_SHARE * len(runs):
            why = (f"{answers.describe()}, but only {given} of the seed's {len(runs)} validation outputs are one of "
                   "them (longer answers)")
        elif not components:
            why = f"{answers.describe()}, but no component's answer is the program's output"
        else:
            return Route("labels", "; ".join([f"{answers.describe()}; rules for {', '.join(components)}",
                                              *([said] if said else [])]), ruled=(*components, *inner))
    if inner:
        return Route("labels", f"{said}; the program's answers: {why}, so the other components are rewritten",
                     ruled=inner)
    return Route("rewrite", why)
