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

from gepetto.config import AUTO, EngineConfig
from gepetto.engine.answers import AnswerSet, normal
from gepetto.program import Rollout
from gepetto.specs import canonical, format_spec, knob_fields, parse_spec, strategy_class

# what each route sets among the strategies left to it (specs)
ROUTES: dict[str, dict[str, str]] = {
    "labels": {"proposer": "edit(rules=3, definitions=60)", "parent_selector": "current-best"},
    "rewrite": {"proposer": "rewrite", "parent_selector": "pareto"},
    # a proposer given explicitly (no route): the rest as it was before routes existed
    "given": {"parent_selector": "pareto"},
}
# the auto proposer's parameters that only the edit proposer reads (they do nothing on the rewrite route)
EDIT_ONLY = ("rules", "definitions", "evidence", "gate_solved", "rule_max_tokens")
REWRITE_ONLY = ("trim",)  # and the one only the rewrite proposer reads (the edit proposer never trims)
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


def settle(cfg: EngineConfig, route: Route) -> tuple[EngineConfig, Route]:
    """The config with the route's strategies for those left to it (the auto proposer's parameters in the chosen
    proposer's spec), and the route, saying which specs it set."""
    left: dict[str, Any] = {}
    for option, spec in ROUTES[route.name].items():
        if option == "proposer" and cfg.proposer_name == AUTO:
            name, params = parse_spec(spec)
            takes = {f.name for f in knob_fields(strategy_class("proposer", name))}
            given = {k: v for k, v in parse_spec(cfg.proposer)[1].items() if v is not None and k in takes}
            left[option] = canonical(option, format_spec(name, {**params, **given}))
        elif option != "proposer" and getattr(cfg, option) == AUTO:
            left[option] = spec
    settled = cfg.model_copy(update=left)
    return settled, Route(route.name, route.reason, left)


def idle_options(asked: EngineConfig, settled: EngineConfig) -> list[str]:
    """Parameters given to the auto proposer (`asked`) that cannot act with the proposer the route chose
    (`settled`): the edit proposer's, other than its defaults, with the rewrite proposer, and rewrite's `trim`
    with the edit proposer; for a warning."""
    if asked.proposer_name != AUTO:
        return []
    given = parse_spec(asked.proposer)[1]
    if settled.proposer_name == "edit":
        return [k for k in REWRITE_ONLY if given.get(k) is not None]
    if settled.proposer_name != "rewrite":
        return []
    defaults = {f.name: f.default for f in knob_fields(strategy_class("proposer", "edit"))}
    return [k for k in EDIT_ONLY if given.get(k) is not None and given[k] != defaults[k]]
