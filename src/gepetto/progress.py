"""A live progress display for long runs, fed by the engine's events (Rich).

LM and user text (proposals, component names, errors) is data, never Rich markup: it is printed as `Text`
(a proposal saying `[/INST]` must not crash the run), and redacted (gepetto.secrets) first.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from gepetto.engine import events as ev
from gepetto.secrets import redact


def _data(value: Any) -> str:
    """LM or user text as it may be shown: redacted (the caller prints it as Text, never as markup)."""
    return redact(str(value))


class ProgressDisplay:
    """Rollouts used / budget with ETA, best validation score, front size and phase; one line per new candidate,
    and one per LM call that gave no answer (the endpoint is failing: retrying, or stopping the run).

    A callback (gepetto.engine.events): pass it in `callbacks=`. `quiet=True` prints nothing (for scripts);
    `verbose=True` also prints each rejected proposal and reflection error.

    `optimize` shows one by default when stderr is a terminal (`progress=`); give your own to choose its console
    or its verbosity. As a context manager it closes the bar on exit.

    Args:
        console: The Rich console to print on (default: a new one on stderr).
        quiet: Print nothing.
        verbose: Also print each rejected proposal, reflection error and minibatch test.

    Example:
        ```python
        import gepetto
        from gepetto import ProgressDisplay
        from gepetto.testing import sim

        task = sim.task(n_train=6, n_val=6)
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                         task_lm="sim:task", reflection_lm="sim:reflection", budget=60,
                         callbacks=[ProgressDisplay(verbose=True)])
        ```
    """

    def __init__(self, console: Console | None = None, *, quiet: bool = False, verbose: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet, self.verbose = quiet, verbose
        self._progress: Progress | None = None
        self._task: Any = None
        self._fields: dict[str, Any] = {"phase": "starting", "best": "-", "front": 0}

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def _start(self) -> None:
        """Show the bar, once the run has a plan: a run refused while it loads leaves no empty display behind."""
        if self.quiet or self._progress is not None:
            return
        self._progress = Progress(
            TextColumn("[bold]{task.fields[phase]:<10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("rollouts  best {task.fields[best]}  front {task.fields[front]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._progress.__enter__()

    def _print(self, *parts: str | tuple[str, str]) -> None:
        """Print plain strings and (string, style) pairs as one line of Text: no markup is parsed."""
        if not self.quiet:
            self.console.print(Text.assemble(*parts), highlight=False)

    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.PlanMade(plan=plan):
                self._print((_data(event.text), "dim"))
                self._start()
                if self._progress is not None and self._task is None:
                    self._task = self._progress.add_task("run", total=plan.budget, **self._fields)
            case ev.RouteChosen():
                self._print((_data(event.describe()), "dim"))
            case ev.RolloutFinished(used=used):
                self._update(completed=used)
            case ev.PhaseStarted(phase=phase):
                self._update(phase=phase)
            case ev.CandidateAdded(record=rec, best=best, front=front):
                how = rec.origin if rec.component is None else f"{rec.origin} of {rec.component!r}"
                self._print(_data(f"candidate {rec.index} ({how}, parents {list(rec.parents)}): validation "
                                  f"{rec.mean:.3f}"))
                self._update(best=f"{best:.3f}", front=len(front))
            case ev.ValidationCut(record=rec, evaluated=k, total=n, dominated_by=by):
                how = rec.origin if rec.component is None else f"{rec.origin} of {rec.component!r}"
                self._print((_data(f"child ({how}, parents {list(rec.parents)}) raced out after {k}/{n} validation "
                                   f"examples: candidate {by} dominates it"), "dim"))
            case ev.LMFailed(error=error, in_a_row=n, retry_in=pause):
                # always shown: the user must see that the endpoint is failing, and what happens next
                then = f"retrying in {pause:g}s" if pause is not None else "stopping the run (resumable)"
                self._print(("LM unavailable", "bold red"), f" ({n} in a row): {_data(error)}; {then}")
                self._update(phase="LM retry" if pause is not None else "LM down")
            case ev.ReflectionAnswered(rejected=rejected, text=text) if rejected is not None and self.verbose:
                self._print((f"proposal rejected ({rejected.reason})", "yellow"), f": {_data(text)[:80]!r}")
            case ev.ReflectionFailed(error=error) if self.verbose:
                self._print(("reflection failed", "yellow"), f": {_data(error)}")
            case ev.ProposalTested(accepted=accepted, minibatch_before=before, minibatch_after=after) if self.verbose:
                verdict = "accepted" if accepted else "rejected"
                self._print(f"proposal {verdict} on minibatch: {before:.2f} -> {after:.2f}")
            case ev.RunEnded():
                self._update(phase="done")

    def _update(self, **fields: Any) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)
