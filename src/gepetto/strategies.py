"""Everything needed to swap a decision of the loop for one's own (docs/strategies.md): the protocols, the built-ins
with their parameters (`EpsilonGreedy(0.2)`, `Edit(rules=3)`, named `epsilon-greedy(epsilon=0.2)`, `edit(rules=3)`
in files) and the stop conditions, in one place.

    import gepetto
    from gepetto.strategies import RunStatus

    def newest(state, rng):                 # a ParentSelector: always the latest candidate
        return len(state.records) - 1

    def good_enough(status: RunStatus):     # a StopCondition
        return "0.9 reached" if status.best_score >= 0.9 else None

    gepetto.optimize(seed, trainset, metric, parent_selector=newest, stop=good_enough, ...)
"""

from gepetto.engine.events import Stop, StopReason
from gepetto.engine.executors import LocalExecutor, Ray
from gepetto.engine.merge import Merge
from gepetto.engine.proposers import (
    Auto,
    Edit,
    FewShot,
    Proposal,
    ProposalRequest,
    ProposalServices,
    Proposer,
    Rewrite,
)
from gepetto.engine.racing import Full, Racing
from gepetto.engine.state import CandidateRecord, RunState
from gepetto.engine.stopping import (
    AllOf,
    AnyOf,
    BudgetSpent,
    CostLimit,
    NoImprovement,
    OnSignal,
    PerfectScore,
    RunStatus,
    Stalled,
    StopCondition,
    StopFile,
    TargetScore,
    TimeLimit,
    all_of,
    any_of,
)
from gepetto.engine.strategies import (
    Acceptance,
    AllComponents,
    ComponentSelector,
    CurrentBest,
    EpochShuffled,
    EpsilonGreedy,
    MinibatchSampler,
    NonDecreasing,
    Paired,
    ParentSelector,
    Pareto,
    RoundRobin,
    RouteParent,
    Strict,
)
from gepetto.specs import Off

__all__ = [
    "Acceptance", "AllComponents", "AllOf", "AnyOf", "Auto", "BudgetSpent", "CandidateRecord", "ComponentSelector",
    "CostLimit", "CurrentBest", "Edit", "EpochShuffled", "EpsilonGreedy", "FewShot", "Full", "LocalExecutor",
    "Merge", "MinibatchSampler", "NoImprovement", "NonDecreasing", "Off", "OnSignal", "Paired", "ParentSelector",
    "Pareto", "PerfectScore", "Proposal", "ProposalRequest", "ProposalServices", "Proposer", "Racing", "Ray",
    "Rewrite", "RoundRobin", "RouteParent", "RunState", "RunStatus", "Stalled", "Stop", "StopCondition", "StopFile",
    "StopReason", "Strict", "TargetScore", "TimeLimit", "all_of", "any_of",
]
