"""A live progress display for long runs, fed by the engine's events (Rich).

LM and user text (proposals, component names, errors) is data, never Rich markup: it is printed as `Text`
(a proposal saying `[/INST]` must not crash the run), and redacted (gepetto.secrets) first.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from gepetto.secrets import redact


def _data(value: Any) -> str:
    """LM or user text as it may be shown: redacted (the caller prints it as Text, never as markup)."""
    return redact(str(value))


class ProgressDisplay:
    """Rollouts used / budget with ETA, best validation score, front size and phase; one line per new candidate.

    `quiet=True` prints nothing (for scripts); `verbose=True` also prints each rejected proposal.
    """

    def __init__(self, console: Console | None = None, *, quiet: bool = False, verbose: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet, self.verbose = quiet, verbose
        self._progress: Progress | None = None
        self._task: Any = None
        self._fields: dict[str, Any] = {"phase": "starting", "best": "-", "front": 0}

    def __enter__(self) -> ProgressDisplay:
        if not self.quiet:
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
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def _print(self, *parts: str | tuple[str, str]) -> None:
        """Print plain strings and (string, style) pairs as one line of Text: no markup is parsed."""
        if not self.quiet:
            self.console.print(Text.assemble(*parts), highlight=False)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "plan":
            self._print((_data(data["text"]), "dim"))
            if self._progress is not None:
                self._task = self._progress.add_task("run", total=data["plan"].budget, **self._fields)
        elif kind == "rollout":
            self._update(completed=data["used"])
        elif kind == "phase":
            self._update(phase=data["phase"])
        elif kind == "candidate":
            rec = data["record"]
            how = rec.origin if rec.component is None else f"{rec.origin} of {rec.component!r}"
            self._print(_data(f"candidate {rec.index} ({how}, parents {list(rec.parents)}): validation {rec.mean:.3f}"))
            self._update(best=f"{data['best']:.3f}", front=len(data["front"]))
        elif kind == "reflection" and data["rejected"] and self.verbose:
            self._print((f"proposal rejected ({_data(data['rejected'])})", "yellow"), f": {_data(data['text'])[:80]!r}")
        elif kind == "proposal" and self.verbose:
            verdict = "accepted" if data["accepted"] else "rejected"
            before, after = data["minibatch_before"], data["minibatch_after"]
            self._print(f"proposal {verdict} on minibatch: {before:.2f} -> {after:.2f}")
        elif kind == "done":
            self._update(phase="done")

    def _update(self, **fields: Any) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, **fields)
