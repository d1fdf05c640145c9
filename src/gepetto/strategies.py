"""Everything needed to swap a decision of the loop for one's own (docs/strategies.md): the protocols, the built-ins
and the stop conditions, in one place.

    import gepetto
    from gepetto.strategies import RunStatus

    def newest(state, rng):                 # a ParentSelector: always the latest candidate
        return len(state.records) - 1

    def good_enough(status: RunStatus):     # a StopCondition
        return "0.9 reached" if status.best_score >= 0.9 else None

    gepetto.optimize(seed, trainset, metric, parent_selector=newest, stop=good_enough, ...)
"""

from gepetto.engine.proposers import Edit, Proposal, ProposalRequest, Proposer, Rewrite
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
    ParentSelector,
    Pareto,
    RoundRobin,
    non_decreasing,
    strict,
)
from gepetto.events import Stop, StopReason

__all__ = [
    "Acceptance", "AllComponents", "AllOf", "AnyOf", "BudgetSpent", "CandidateRecord", "ComponentSelector",
    "CostLimit", "CurrentBest", "Edit", "EpochShuffled", "EpsilonGreedy", "MinibatchSampler", "NoImprovement",
    "OnSignal", "ParentSelector", "Pareto", "PerfectScore", "Proposal", "ProposalRequest", "Proposer", "Rewrite",
    "RoundRobin", "RunState", "RunStatus", "Stalled", "Stop", "StopCondition", "StopFile", "StopReason",
    "TargetScore", "TimeLimit", "all_of", "any_of", "non_decreasing", "strict",
]
