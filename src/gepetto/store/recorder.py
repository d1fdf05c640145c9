"""What a stored run keeps of its events: one callback that turns the engine's events into store writes.

Candidates go to their table as they join; the reflection answers (with the key under which their prompt and whole
answer are kept in `lm_answers`), reflection errors, proposal and merge tests, validations cut short, the budget
plan, the route and the best made by evidence bought go to the event log, tagged with the session and the proposal
they belong to; the ledger is saved after every LM call, so a kill loses no cost already paid.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from gepetto.engine import events as ev
from gepetto.ledger import Ledger
from gepetto.store.sqlite import LAST_ANSWER, RunStore


class RunRecorder:
    """The event callback of run `name` in `store`, session `session` (its ledger saved as it grows).

    The proposals of a round run in asyncio tasks of their own: each task's proposal (an id, its parent and its
    component, from the PhaseStarted event that begins it) tags the reflection events the task emits, so the report
    can show each proposal's transcript."""

    def __init__(self, store: RunStore, name: str, ledger: Ledger, session: int) -> None:
        self.store, self.name, self.ledger, self.session = store, name, ledger, session
        self._proposing: dict[int, dict[str, Any]] = {}
        self._counter = itertools.count()

    def _proposal(self) -> dict[str, Any]:
        return self._proposing.get(id(asyncio.current_task()), {})

    def _add(self, kind: str, data: dict[str, Any]) -> None:
        self.store.add_event(self.name, kind, {"session": self.session, **data})

    def __call__(self, event: ev.Event) -> None:
        if isinstance(event, (ev.RolloutFinished, ev.ReflectionAnswered, ev.ReflectionFailed, ev.LMFailed)):
            self.store.save_ledger(self.name, self.ledger.to_dict())  # a kill loses no cost already incurred
        match event:
            case ev.CandidateAdded(record=rec):
                self.store.put_candidate(self.name, rec)
            case ev.PhaseStarted(phase="minibatch", candidate=parent, component=component):
                self._proposing[id(asyncio.current_task())] = {
                    "proposal": f"{self.session}.{next(self._counter)}", "parent": parent, "component": component}
            case ev.ReflectionAnswered(attempt=attempt, rejected=rejected):
                # the prompt and the whole answer are kept with the answer (lm_answers, under `key`)
                self._add(event.kind, {**self._proposal(), "key": LAST_ANSWER.get(), "attempt": attempt,
                                       "rejected": None if rejected is None else rejected.value})
            case ev.ReflectionFailed(error=error):
                self._add(event.kind, {**self._proposal(), "key": LAST_ANSWER.get(), "error": error})
            case ev.ValidationCut(record=rec):  # not in the pool: kept as an event (snapshot, report)
                self._add(event.kind, {**rec.to_dict(), "evaluated": event.evaluated, "total": event.total,
                                       "dominated_by": event.dominated_by, "reason": event.reason})
            case ev.ProposalTested():
                self._add(event.kind, {**{k: v for k, v in event.to_dict().items() if v is not None},
                                       "proposal": self._proposal().get("proposal")})
            case ev.MergeTested():
                self._add(event.kind, {k: v for k, v in event.to_dict().items() if v is not None})
            case ev.PlanMade():
                self._add(event.kind, {"text": event.text})
            case ev.RouteChosen():
                self._add(event.kind, {"text": event.describe(), **event.to_dict()})
            case ev.BestConfirmed(index=index, examples=examples):  # (store.candidates says which)
                self._add(event.kind, {"index": index, "examples": examples})
