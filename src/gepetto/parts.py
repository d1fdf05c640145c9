"""The engine's parts built from an `EngineConfig`: the strategies its specs name (or the objects given), the
executor, the stop conditions, merge and racing, and what the route the engine chooses makes of them.

The engine takes these built (`gepetto.engine.loop.Parts`) and reads no configuration of its own; the route's
decision (`engine/route.py`, from the seed's validation) is the engine's, what each route sets is here.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gepetto.config import AUTO, STRATEGIES, EngineConfig
from gepetto.engine import stopping
from gepetto.engine.executors import make_executor
from gepetto.engine.loop import Parts
from gepetto.engine.merge import Merge
from gepetto.engine.proposers import FewShot, as_proposer
from gepetto.engine.racing import Racing
from gepetto.engine.route import GIVEN, Route
from gepetto.engine.strategies import Acceptance, FunctionAcceptance, Strategies
from gepetto.specs import (
    PYTHON,
    ConfigError,
    build,
    canonical,
    format_spec,
    is_builtin,
    knob_fields,
    parse_spec,
    strategy_class,
)
from gepetto.types import Example

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


def build_parts(cfg: EngineConfig, given: Mapping[str, Any], trainset: Sequence[Example],
                valset: Sequence[Example], stop: stopping.StopSpec | Sequence[stopping.StopSpec] | None = None,
                ) -> tuple[EngineConfig, Parts]:
    """The options the engine reads and its parts, for a run of `cfg` on these examples; `given`: strategy objects
    of one's own (by option), in place of those the config names; `stop`: conditions besides the config's."""
    cfg = fewshot_set(cfg, trainset, valset)
    # "auto" strategies follow the route the seed's validation shows; a proposer given explicitly settles the
    # options left to the route as they were before routes existed
    routed = cfg.proposer_name == AUTO and given.get("proposer") is None
    if not routed:
        cfg = settle(cfg, GIVEN)[0]
    asked = cfg

    def settle_route(chosen: Route) -> tuple[EngineConfig, Strategies, Route]:
        settled, route = settle(asked, chosen)
        idle = idle_options(asked, settled)
        if idle:
            warnings.warn(f"{', '.join(idle)} {'has' if len(idle) == 1 else 'have'} no effect with the "
                          f"{settled.proposer_name} proposer the route chose", RuntimeWarning, stacklevel=3)
        return settled, build_strategies(settled, given), route

    merge, racing = build("merge", cfg.merge), build("validation", cfg.validation)
    parts = Parts(strategies=build_strategies(cfg, given), executor=make_executor(cfg.executor, cfg),
                  stop_conditions=[*stop_conditions(cfg, len(trainset)), *stopping.as_conditions(stop)],
                  merge=merge if isinstance(merge, Merge) else None,
                  racing=racing if isinstance(racing, Racing) else None,
                  settle=settle_route if routed else None)
    return cfg, parts


def fewshot_set(cfg: EngineConfig, trainset: Sequence[Example], valset: Sequence[Example]) -> EngineConfig:
    """The few-shot spec's `k` not set: the built-in proposers show demonstrations (config.FEWSHOT) when some
    training example is not also a validation example, none otherwise (one would be scored with its own answer in
    its prompt); only an explicit `k` warns about that (FewShot._sources)."""
    if cfg.fewshot_k is not None or {e.id for e in trainset} - {e.id for e in valset}:
        return cfg
    return cfg.model_copy(update={"fewshot": "off"})


def build_strategies(cfg: EngineConfig, given: Mapping[str, Any] | None = None) -> Strategies:
    """Each strategy: the object in `given` (by option name), else the built-in the config's spec names; the
    proposer with few-shot demonstrations around it when the config asks for them."""
    return Strategies(**{option: resolve(option, (given or {}).get(option), cfg) for option in STRATEGIES})


def resolve(option: str, obj: Any, cfg: EngineConfig) -> Any:
    """The strategy for `option`: `obj` itself (an object of one's own), or the built-in it is or the config
    names (made for this run: `Knobs.bind`)."""
    if obj is not None and not isinstance(obj, str) and not is_builtin(option, obj):
        if option == "proposer":
            proposer = as_proposer(obj)
            fewshot = build("fewshot", cfg.fewshot)  # beside a proposer of one's own: when k is set
            return fewshot.around(proposer).bind(cfg) if isinstance(fewshot, FewShot) and cfg.fewshot_k else proposer
        if not callable(obj):
            raise ConfigError(f"{option}: {type(obj).__name__} is no {option.replace('_', ' ')} (it must be callable)")
        if option == "accept" and not isinstance(obj, Acceptance):
            if hasattr(obj, "retests"):
                raise ConfigError(f"accept: {type(obj).__name__} has `retests`: derive it from "
                                  "gepetto.strategies.Acceptance, which declares it (a plain callable never re-tests)")
            return FunctionAcceptance(obj)
        return obj
    spec = obj or getattr(cfg, option)
    if isinstance(spec, str) and spec.startswith(PYTHON):
        raise ConfigError(f"{option} {spec!r} stands for an object given to gepetto.optimize(); pass that object "
                          f"again ({option}=...), or a built-in: {', '.join(STRATEGIES[option])}")
    strategy = build(option, spec).bind(cfg)
    if option == "proposer" and cfg.demonstrations:
        fewshot = build("fewshot", cfg.fewshot)
        if isinstance(fewshot, FewShot):
            return fewshot.around(strategy).bind(cfg)
    return strategy


def stop_conditions(cfg: EngineConfig, n_train: int) -> list[stopping.StopCondition]:
    """The conditions the config's options ask for, in the order they are asked."""
    out: list[stopping.StopCondition] = []
    if cfg.target_score is not None:
        out.append(stopping.TargetScore(cfg.target_score))
    out.append(stopping.PerfectScore(cfg.perfect_score))
    if cfg.stop_file:
        out.append(stopping.StopFile(cfg.stop_file))
    if cfg.patience is not None:
        out.append(stopping.NoImprovement(cfg.patience))
    out += [stopping.Stalled(cfg.max_idle_iterations), stopping.BudgetSpent(min(cfg.minibatch_size, n_train))]
    if cfg.time_limit:
        out.append(stopping.TimeLimit(cfg.time_limit))
    if cfg.max_cost_usd is not None:
        out.append(stopping.CostLimit(cfg.max_cost_usd))
    return out


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
    return settled, replace(route, settings=left)


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
