"""The `gepetto` command: a thin shell over the runner and the run store (Typer + Rich).

Exit codes: 0 ok (also when Ctrl-C or SIGTERM stopped a run: the best so far is shown, the run resumable),
1 the run failed, 2 usage or configuration error, 3 the run stopped because the LM endpoint kept failing
(StopReason.LM_UNAVAILABLE: everything paid is kept; fix the LM and resume with the same --run).
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, cast, get_args, get_origin

import typer
import yaml
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Column, Table
from rich.text import Text

from gepetto.config import RUN, TASK, ConfigError, RunConfig, load_config
from gepetto.engine.pareto import best_index
from gepetto.progress import ProgressDisplay
from gepetto.runner import DEFAULT_STORAGE, start_or_resume
from gepetto.secrets import redact
from gepetto.store.sqlite import StoreError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Reflective prompt evolution (GEPA) for LLM programs."
)
# piped output (scripts, logs) gets wide lines instead of Rich's default 80 columns
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True)

StorageOpt = typer.Option(DEFAULT_STORAGE, "--storage", help="Run store (SQLite file).", envvar="GEPETTO_STORAGE")


def _t(value: Any) -> str:
    """User or LM text for a Rich markup string: redacted, and escaped so `[bold]` or `[/INST]` print as such."""
    return escape(redact(str(value)))


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/red] {_t(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _open_store(storage: str) -> Any:
    from gepetto.store.sqlite import RunStore

    if not Path(storage).exists():
        raise _fail(f"no run store at {storage} (run `gepetto optimize` first, or pass --storage)", 2)
    try:
        return RunStore(storage, readonly=True)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None


def _snapshot(storage: str, run: str) -> dict[str, Any]:
    from gepetto.store.snapshot import run_snapshot

    try:
        return run_snapshot(_open_store(storage), run)
    except KeyError as exc:
        raise _fail(str(exc.args[0]), 2) from None
    except StoreError as exc:  # e.g. a damaged page found while reading
        raise _fail(str(exc), 2) from None


def _task_options(items: list[str] | None) -> dict[str, Any] | None:
    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise _fail(f"--task-option takes KEY=VALUE, got {item!r}", 2)
        out[key.strip()] = yaml.safe_load(value) if value.strip() else ""  # numbers and booleans as such
    return out


EXIT_LM_UNAVAILABLE = 3


def _report_result(name: str, result: Any, started: float) -> None:
    console.print(redact(result.summary()), highlight=False, markup=False)
    for component, text in result.best_candidate.items():
        console.print(Panel(Text(redact(text)), title=f"best: {_t(component)}", expand=False))
    scores = (f"seed {result.seed_score:.3f} -> best {result.best_score:.3f}" if result.candidates
              else "no candidate validated yet")  # (a run stopped inside the seed's validation: no score to show)
    console.print(f"validation: {scores}; {result.rollouts_used}/{result.budget} rollouts; wall time "
                  f"{time.monotonic() - started:.0f}s")
    total = result.ledger.total()
    if total.cached_calls:
        console.print(f"{total.cached_calls} of {total.calls} LM answers were replayed from the response cache "
                      f"(no cost, no time); `--cache off` asks the LMs again")
    console.print(f"[dim]run {_t(repr(name))} stored; see it with `gepetto show {_t(name)}` or "
                  f"`gepetto report {_t(name)} -o report.html`[/dim]")
    if result.stop_reason.failed:  # the best so far is shown above, but the run did not end well: say so
        raise _fail(f"the run stopped early: {result.stop_message}; to resume: gepetto optimize --run {name}",
                    EXIT_LM_UNAVAILABLE)


# `gepetto optimize` takes one option per RunConfig field, named like the field (`--max-concurrency` for
# `max_concurrency`), with its description as help, in its group; the command's signature is built from the model
# below, so a new field is a new option with nothing to copy by hand. Complex values (lists, mappings) are YAML.
DEPRECATED = {"--concurrency": "max_concurrency", "--target": "target_score", "--merge": "use_merge"}
_SPECIAL = {"task_options"}  # given as --task-option KEY=VALUE (repeatable)


def _scalar(annotation: Any) -> type | None:
    """The CLI type of a field (int, float, str, bool), or None for a list or mapping (given as YAML)."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return str
    if annotation in (int, float, str, bool):
        return cast(type, annotation)
    if len(args) == 1 and get_origin(annotation) in (Union, UnionType):
        return _scalar(args[0])
    return None


def _help(field: FieldInfo, annotation: Any) -> str:
    text = field.description or ""
    literal = next((a for a in (annotation, *get_args(annotation)) if get_origin(a) is Literal), None)
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    choices = get_args(literal) if literal is not None else extra.get("choices")
    if choices:
        text += " One of: " + ", ".join(map(str, cast(list, choices))) + "."
    default = field.get_default(call_default_factory=True)
    if default not in (None, {}, ()):
        shown = json.dumps(list(default) if isinstance(default, tuple) else default)
        text += f" [default: {shown}]"
    return escape(text)  # help is Rich markup: "[input, output]" is text


def _config_parameters() -> list[inspect.Parameter]:
    params = []
    for name, field in RunConfig.model_fields.items():
        if name in _SPECIAL:
            continue
        kind = _scalar(field.annotation)
        flag = "--" + name.replace("_", "-")
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        panel = str(extra.get("group", "Options"))
        aliases = [str(a) for a in cast(list, extra.get("cli_aliases") or [])]  # e.g. --track for --tracking
        decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag, *aliases]
        option = typer.Option(None, *decls, help=_help(field, field.annotation), rich_help_panel=panel,
                              show_default=False, metavar=None if kind is not None else "YAML")
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                        annotation=(kind or str) | None))
    for flag, target in DEPRECATED.items():
        kind = _scalar(RunConfig.model_fields[target].annotation)
        decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag]
        params.append(inspect.Parameter(f"deprecated_{flag[2:]}", inspect.Parameter.KEYWORD_ONLY,
                                        default=typer.Option(None, *decls, hidden=True),
                                        annotation=(kind or str) | None))
    return params


def optimize(
    *,
    config: Path | None = typer.Option(None, "--config", "-c", help="YAML or TOML file with run options.",
                                       rich_help_panel=RUN),
    task_option: list[str] | None = typer.Option(
        None, "--task-option", help="Task option KEY=VALUE (repeatable), e.g. judge_lm=openai:gpt-4.1-mini; for your "
        "own make_task, its keyword arguments.", rich_help_panel=TASK),
    storage: str = StorageOpt,
    run: str | None = typer.Option(None, "--run", help="Run name; an existing run is resumed."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show rejected proposals."),
    **options: Any,
) -> None:
    """Optimise a task's prompts within a rollout budget; `--run NAME` resumes a stored run.

    Every option of a run (docs/runs.md) is an option here, named like its field in a config file.
    """
    for flag, target in DEPRECATED.items():
        value = options.pop(f"deprecated_{flag[2:]}", None)
        if value is not None:
            new = "--" + target.replace("_", "-")
            err.print(f"[yellow]warning:[/yellow] {flag} is deprecated; use {new}", highlight=False)
            if options.get(target) is None:
                options[target] = value
    given: dict[str, Any] = {}
    for name, value in options.items():
        if value is not None and _scalar(RunConfig.model_fields[name].annotation) is None:
            try:
                value = yaml.safe_load(value)
            except yaml.YAMLError as exc:
                raise _fail(f"--{name.replace('_', '-')}: not a YAML value ({exc})", 2) from None
        given[name] = value
    given["task_options"] = _task_options(task_option)
    try:
        cfg = load_config(config, **given)
        explicit = {k for k, v in given.items() if v is not None}
        if config is not None:
            explicit |= set(load_config(config).model_dump(exclude_unset=True))
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    started = time.monotonic()
    try:
        with ProgressDisplay(quiet=quiet, verbose=verbose) as progress:
            name, result = start_or_resume(cfg, storage=storage, run=run, callbacks=progress, explicit=explicit)
    except (ConfigError, StoreError) as exc:
        raise _fail(str(exc), 2) from None
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        raise _fail(f"{type(exc).__name__}: {exc}", 2) from None
    except Exception as exc:
        raise _fail(f"the run failed: {type(exc).__name__}: {exc}", 1) from None
    _report_result(name, result, started)


def _with_config_options(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn` with a signature Typer reads: its own options, then one per RunConfig field (**options)."""
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
    signature = inspect.Signature([*own, *_config_parameters()])
    fn.__signature__ = signature  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return fn


app.command()(_with_config_options(optimize))


@app.command()
def runs(storage: str = StorageOpt) -> None:
    """List stored runs: name, status, best score, rollouts, cost, age."""
    store = _open_store(storage)
    table = Table("status", "task", "best", "seed score", "rollouts", "cost", "age")
    table.columns.insert(0, Column("name", no_wrap=True))  # names are what users type: never cut them
    try:
        rows = [(info, *_run_row(store, info)) for info in store.list_runs()]
    except StoreError as exc:  # e.g. a damaged page found while reading
        raise _fail(str(exc), 2) from None
    for info, res, best, cost, used in rows:
        table.add_row(_t(info.name), info.shown_status, _t(info.config.get("task", "")),
                      "-" if best is None else f"{best:.3f}",
                      "-" if res.get("seed_score") is None else f"{res['seed_score']:.3f}",
                      f"{used}/{info.config.get('budget', '?')}", f"${cost:.4f}", _age(info.updated))
    console.print(table)


def _run_row(store: Any, info: Any) -> tuple[dict[str, Any], float | None, float, int]:
    """A stored run's result, best score, cost and rollouts, for `gepetto runs`."""
    res = info.result or {}
    best = res.get("best_score")
    if best is None:
        means = [c["mean"] for c in store.candidates(info.name)]
        i = best_index(means)
        best = None if i is None else means[i]
    ledger = res.get("ledger") or store.ledger(info.name)
    cost = sum(u.get("cost", 0.0) for u in ledger.values())
    return res, best, cost, res.get("rollouts_used", store.count_rollouts(info.name))


def _age(t: float) -> str:
    s = max(time.time() - t, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


@app.command()
def show(run: str, storage: str = StorageOpt) -> None:
    """Show a run: best candidate, Pareto front and cost ledger."""
    snap = _snapshot(storage, run)
    res, info = snap["result"], snap["run"]
    console.print(f"[bold]{_t(info['name'])}[/bold] ({_t(info['status'])}), task {_t(info['task'])}, "
                  f"task LM {_t(info['task_lm'])}, reflection LM {_t(info['reflection_lm'])}", highlight=False)
    if res["best_score"] is None or not res["candidates"]:
        console.print("no candidate has been validated yet")
        return
    console.print(f"validation: seed {res['seed_score']:.3f} -> best {res['best_score']:.3f}; "
                  f"{res['rollouts_used']}/{res['budget']} rollouts; stopped: {_t(res['stop_message'])}")
    raced = res.get("raced_out") or []
    if raced:  # racing (EngineConfig.racing)
        n = len(res["candidates"][0]["val_scores"]) if res["candidates"] else 0
        paid = sum(len(c.get("val_scores") or {}) for c in raced)
        console.print(f"racing: {len(raced)} validations cut short, {len(raced) * n - paid} validation rollouts "
                      "saved")
    for component, text in res["best_candidate"].items():
        console.print(Panel(Text(redact(text)), title=f"best: {_t(component)}", expand=False))
    front = Table("candidate", "origin", "parents", "validation", title="Pareto front")
    for i in res["pareto_front"]:
        c = res["candidates"][i]
        front.add_row(str(i), _t(c["origin"]), ",".join(map(str, c["parents"])) or "-", f"{c['mean']:.3f}")
    console.print(front)
    ledger = Table("role", "calls", "cached", "errors", "retries", "tokens in", "tokens out", "seconds", "cost",
                   title="ledger")
    for role, u in res["ledger"].items():
        est = " (est.)" if u.get("estimated_tokens") else ""
        ledger.add_row(_t(role), str(u["calls"]), str(u.get("cached_calls", 0)), str(u.get("errors", 0)),
                       str(u.get("retries", 0)), f"{u['input_tokens']}{est}", f"{u['output_tokens']}{est}",
                       f"{u['seconds']:.1f}", f"${u['cost']:.4f}")
    console.print(ledger)


@app.command()
def report(run: str, output: Path = typer.Option(..., "-o", "--output", help="HTML file to write."),
           storage: str = StorageOpt) -> None:
    """Write a self-contained HTML report of a run (lineage, scores, front, diffs, ledger, sample outputs)."""
    from gepetto.report import write_report

    snapshot = _snapshot(storage, run)
    try:
        write_report(snapshot, output)
    except OSError as exc:
        raise _fail(f"cannot write the report to {output}: {exc.strerror or exc}", 2) from None
    console.print(f"report written to {_t(output)}")


@app.command()
def export(run: str, storage: str = StorageOpt) -> None:
    """Print the best candidate of a run as JSON (component -> text)."""
    res = _snapshot(storage, run)["result"]
    if not res["best_candidate"]:
        raise _fail(f"run {run!r} has no validated candidate yet", 1)
    typer.echo(redact(json.dumps(res["best_candidate"], ensure_ascii=False, indent=2)))


@app.command()
def demo(
    budget: int = typer.Option(120, help="Rollout budget (one program run on one example)."),
    seed: int = typer.Option(0, help="Random seed (splits and sampling)."),
    task_lm: str = typer.Option("local:qwen2.5-coder-0.5b", help="Task LM name."),
    reflection_lm: str = typer.Option("local:qwen2.5-coder-1.5b", help="Reflection LM name."),
    time_limit: float = typer.Option(780.0, help="Stop after this many seconds (the demo fits in 15 minutes)."),
    cache: str = typer.Option("auto", help="LM response cache: auto (temperature 0), always, off."),
    storage: str = StorageOpt,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show rejected proposals."),
) -> None:
    """Improve an order-extraction prompt on the embedded local LLMs and show before/after."""
    from gepetto.tasks import load_task

    task = load_task("demo", seed=seed)
    console.print(Panel.fit(
        f"[bold]gepetto demo[/bold]: {_t(task.description)}\n"
        f"task LM {_t(task_lm)}, reflection LM {_t(reflection_lm)}; {len(task.trainset)} train, "
        f"{len(task.valset)} validation examples; budget {budget} rollouts\n"
        f"seed instruction: {_t(repr(task.seed_candidate['instruction']))}"))
    try:
        cfg = load_config(task="demo", task_lm=task_lm, reflection_lm=reflection_lm, budget=budget, seed=seed,
                          time_limit=time_limit, cache=cache)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    started = time.monotonic()
    try:
        with ProgressDisplay(quiet=quiet, verbose=verbose) as progress:
            name, result = start_or_resume(cfg, storage=storage, callbacks=progress)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None
    except Exception as exc:
        raise _fail(f"the demo failed: {type(exc).__name__}: {exc}", 1) from None
    _report_result(name, result, started)
    if task.testset and not quiet:  # held-out check: the optimiser never saw these examples
        from gepetto.api import evaluate
        from gepetto.lm.cache import CachedLM
        from gepetto.lm.names import make_lm

        console.print(f"scoring seed and best on {len(task.testset)} held-out test examples ...")
        lm = make_lm(task_lm) if cfg.cache == "off" else CachedLM(make_lm(task_lm), storage)
        seed_test = evaluate(task.seed_candidate, task.testset, task.metric, program=task.program, task_lm=lm)
        best_test = evaluate(result.best_candidate, task.testset, task.metric, program=task.program, task_lm=lm)
        console.print(f"[bold]test[/bold]: seed {seed_test.mean:.3f} -> best {best_test.mean:.3f}")


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """Python's warnings, in the command line's words: `warning: ...` on stderr, without a source location."""
    err.print(f"[yellow]warning:[/yellow] {_t(message)}", highlight=False, soft_wrap=True)


def main() -> None:
    warnings.showwarning = _show_warning
    app()
