"""The `gepetto` command: a thin shell over gepetto.optimize (Typer + Rich)."""

from __future__ import annotations

import time

import typer
from rich.console import Console
from rich.panel import Panel

from gepetto.api import build_engine, run_engine
from gepetto.progress import ProgressDisplay

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Reflective prompt evolution (GEPA) for LLM programs."
)
console = Console()


@app.command()
def demo(
    budget: int = typer.Option(120, help="Rollout budget (one program run on one example)."),
    seed: int = typer.Option(0, help="Random seed (splits and sampling)."),
    task_lm: str = typer.Option("local:qwen2.5-coder-0.5b", help="Task LM name."),
    reflection_lm: str = typer.Option("local:qwen2.5-coder-1.5b", help="Reflection LM name."),
    time_limit: float = typer.Option(780.0, help="Stop after this many seconds (the demo fits in 15 minutes)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show rejected proposals."),
) -> None:
    """Improve a support-ticket routing prompt on the embedded local LLMs and show before/after."""
    from gepetto.tasks import load_task

    task = load_task("demo", seed=seed)
    console.print(Panel.fit(
        f"[bold]gepetto demo[/bold]: {task.description}\n"
        f"task LM {task_lm}, reflection LM {reflection_lm}; {len(task.trainset)} train, "
        f"{len(task.valset)} validation, {len(task.testset)} test examples\n"
        f"seed instruction: {task.seed_candidate['instruction']!r}"))
    t0 = time.monotonic()
    with ProgressDisplay(quiet=quiet, verbose=verbose) as progress:
        engine = build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                              program=task.program, task_lm=task_lm, reflection_lm=reflection_lm,
                              budget=budget, seed=seed, time_limit=time_limit, on_event=progress)
        result = run_engine(engine)
    console.print(result.summary())
    console.print(Panel(result.best_candidate["instruction"], title="evolved instruction"))
    console.print(f"validation: seed {result.seed_score:.3f} -> best {result.best_score:.3f}; "
                  f"{result.rollouts_used} rollouts; wall time {time.monotonic() - t0:.0f}s")


def main() -> None:
    app()
