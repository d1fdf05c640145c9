"""The `gepetto` command: a thin shell over the runner and the run store (Typer + Rich).

Exit codes (docs/runs.md): 0 ok, also when Ctrl-C or SIGTERM stopped a run (the best so far is shown, the run is
resumable); 1 the user's code failed (a task file, `make_task`, the program or the metric: its file and line are
shown, the whole traceback with --debug), or the run failed for another reason; 2 usage or configuration error
(options, config file, task target, run store); 3 an LM is unavailable or refuses to serve (a key, an endpoint, a
model; also a run stopped because its endpoint kept failing: everything paid is kept, resume it with --run).
What decides the code is where an error came from, not its class: a TypeError in `make_task` is 1, in gepetto's
own check of an option 2.
"""

from __future__ import annotations

import contextlib
import csv
import inspect
import io
import json
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, cast, get_args, get_origin

import typer
import typer.core
import yaml
from pydantic.fields import FieldInfo
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Column, Table
from rich.text import Text

from gepetto import __version__
from gepetto.config import ConfigError, RunConfig, load_config, read_config_file, stored_options, yaml_value
from gepetto.engine.events import StopReason
from gepetto.engine.pareto import stored_best
from gepetto.lm.base import LMError
from gepetto.program import MetricError
from gepetto.progress import ProgressDisplay
from gepetto.runner import DEFAULT_STORAGE, start_or_resume
from gepetto.secrets import redact
from gepetto.store.sqlite import StoreError
from gepetto.usertask import TargetError, UserCodeError, describe_frame, user_frame


class _PlainFlags:
    """Flags are shown as `--quiet`, not `--quiet <bool>`: a flag takes no value."""

    def get_params(self, ctx: Any) -> list[Any]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class _Command(_PlainFlags, typer.core.TyperCommand):
    pass


class _Group(_PlainFlags, typer.core.TyperGroup):
    pass


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Group,
                  help="Reflective prompt evolution (GEPA) for LLM programs.")
# piped output (scripts, logs) gets wide lines instead of Rich's default 80 columns
console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 160)
err = Console(stderr=True)

StorageOpt = typer.Option(DEFAULT_STORAGE, "--storage", help="Run store: a SQLite file, or a database URL "
                          "(postgresql://user@host/db) that a team shares.", envvar="GEPETTO_STORAGE")
DebugOpt = typer.Option(False, "--debug", help="On an error, show the whole Python traceback.",
                        envvar="GEPETTO_DEBUG")
_debug = False  # `gepetto --debug COMMAND`: for every command


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"gepetto {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = DebugOpt,
) -> None:
    """Reflective prompt evolution (GEPA) for LLM programs."""
    global _debug
    _debug = debug


def _t(value: Any, *, one_line: bool = False) -> str:
    """User or LM text for a Rich markup string: redacted, escaped so `[bold]` or `[/INST]` print as such, and with
    control characters shown as escapes (a run name holding a terminal escape sequence, on a shared store someone
    else's, must not reach the terminal); with `one_line` newlines too (a name in a table)."""
    text = redact(str(value))
    keep = "" if one_line else "\n"
    if not text.isprintable():
        text = "".join(c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii") for c in text)
    return escape(text)


def _fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]error:[/red] {_t(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


EXIT_USER_CODE, EXIT_USAGE, EXIT_LM_UNAVAILABLE = 1, 2, 3


def _classify(exc: BaseException) -> tuple[int, str]:
    """The exit code of an error and its message, by where it came from (module docstring)."""
    if isinstance(exc, UserCodeError):
        return EXIT_USER_CODE, str(exc)
    if isinstance(exc, MetricError):
        return EXIT_USER_CODE, (f"MetricError: {exc} (`gepetto check` with the same options runs the seed on one "
                                "example and shows where the metric fails)")
    if isinstance(exc, (ConfigError, StoreError, TargetError)):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, LMError):  # outside a rollout: the LM cannot be built or reached (a key, a package, a model)
        return EXIT_LM_UNAVAILABLE, f"{type(exc).__name__}: {exc}"
    if user_frame(exc) is not None:  # raised in the user's code (a strategy, a callback, ...)
        return EXIT_USER_CODE, f"your code raised {type(exc).__name__}: {exc}"
    if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError)):  # gepetto's checks of the setup
        return EXIT_USAGE, f"{type(exc).__name__}: {exc}"
    return EXIT_USER_CODE, f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _errors(debug: bool, prefix: str = "") -> Iterator[None]:
    """Errors as one message and an exit code (`_classify`); the user's frame under an error of their code, the
    whole traceback with --debug."""
    try:
        yield
    except typer.Exit:
        raise
    except Exception as exc:
        code, message = _classify(exc)
        err.print(f"[red]error:[/red] {_t(prefix + message)}", highlight=False, soft_wrap=True)
        cause = exc.error if isinstance(exc, UserCodeError) else exc
        frame = user_frame(cause) if code == EXIT_USER_CODE else None
        if debug or _debug:
            trace = "".join(traceback.format_exception(cause))
            err.print(Text(redact(trace.rstrip()), style="dim"), highlight=False, soft_wrap=True)
        elif frame is not None:
            err.print(Text(redact("  " + describe_frame(frame).replace("\n", "\n  "))), highlight=False,
                      soft_wrap=True)  # a path and a line of code are copied as they are: never cut
            err.print("[dim](--debug shows the whole traceback)[/dim]", highlight=False)
        elif code == EXIT_USER_CODE:
            err.print("[dim](--debug shows the traceback)[/dim]", highlight=False)
        raise typer.Exit(code) from None


def _store_exists(storage: str) -> bool:
    """Whether the run store exists (a file; a database holding gepetto's tables); one that cannot be reached
    (a database server away, a URL of another kind) is an error."""
    from gepetto.store.sqlite import store_exists

    try:
        return store_exists(storage)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None


def _where(storage: str) -> str:
    """The store as messages show it: a URL without its password."""
    from gepetto.db import shown

    return shown(storage)


def _open_store(storage: str) -> Any:
    from gepetto.store.sqlite import RunStore

    if not _store_exists(storage):
        raise _fail(f"no run store at {_where(storage)} (run `gepetto optimize` first, or pass --storage)", 2)
    try:
        return RunStore(storage, readonly=True)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None


def _snapshot(storage: str, run: str, *, transcripts: bool = False) -> dict[str, Any]:
    from gepetto.store.snapshot import run_snapshot

    try:
        return run_snapshot(_open_store(storage), run, transcripts=transcripts)
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
        out[key.strip()] = yaml_value(value) if value.strip() else ""  # numbers and booleans as such
    return out


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
    shown = _t(name, one_line=True)
    console.print(f"[dim]run {_t(repr(name))} stored; see it with `gepetto show {shown}`, score it on held-out "
                  f"examples with `gepetto evaluate {shown}`, or `gepetto report {shown}`[/dim]")
    if result.stop_reason.failed:  # the best so far is shown above, but the run did not end well: say so
        raise _fail(f"the run stopped early: {result.stop_message}; to resume: gepetto optimize --run {name}",
                    EXIT_LM_UNAVAILABLE)


# `gepetto optimize` and `gepetto check` take one option per RunConfig field, named like the field
# (`--max-concurrency` for `max_concurrency`), with its description as help, in its group; the command's signature
# is built from the model below, so a new field is a new option with nothing to copy by hand. Complex values
# (lists, mappings) are YAML. The options most runs set come first, in the default panel (`COMMON`).
_SPECIAL = {"task_options"}  # given as --task-option KEY=VALUE (repeatable)
COMMON = ["config", "task", "task_option", "task_lm", "reflection_lm", "budget", "preset", "run", "storage", "seed",
          "dry_run", "ping", "example", "quiet", "verbose", "debug"]


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
    if literal is not None:
        text += " One of: " + ", ".join(map(str, get_args(literal))) + "."
    default = field.get_default(call_default_factory=True)
    if default not in (None, {}, ()):
        shown = json.dumps(list(default) if isinstance(default, tuple) else default)
        text += f" [default: {shown}]"
    return escape(text)  # help is Rich markup: "[input, output]" is text


def _config_parameters() -> dict[str, inspect.Parameter]:
    params = {}
    for name, field in RunConfig.model_fields.items():
        if name in _SPECIAL:
            continue
        kind = _scalar(field.annotation)
        flag = "--" + name.replace("_", "-")
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        panel = None if name in COMMON else str(extra.get("group", "Options"))
        aliases = [str(a) for a in cast(list, extra.get("cli_aliases") or [])]  # e.g. --track for --tracking
        decls = [f"{flag}/--no-{flag[2:]}"] if kind is bool else [flag, *aliases]
        shown = extra.get("metavar")  # e.g. SPEC for an option naming a strategy
        metavar = ("" if kind is bool else None if shown is None else str(shown)) if kind is not None else "YAML"
        option = typer.Option(None, *decls, help=_help(field, field.annotation), rich_help_panel=panel,
                              show_default=False, metavar=metavar)
        params[name] = inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                         annotation=(kind or str) | None)
    return params


def _with_config_options(fn: Callable[..., None]) -> Callable[..., None]:
    """`fn` with a signature Typer reads: the common options first (its own and RunConfig's, in `COMMON` order),
    then its other options, then one per other RunConfig field (**options), by group."""
    own = {p.name: p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD}
    fields = _config_parameters()
    first = [n for n in COMMON if n in own or n in fields]
    ordered = [own.get(n) or fields[n] for n in first]
    ordered += [p for n, p in own.items() if n not in first]
    ordered += [p for n, p in fields.items() if n not in first]
    signature = inspect.Signature(ordered)
    fn.__signature__ = signature  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
    return fn


def _run_config(config: Path | None, task_option: list[str] | None, preset: str | None, options: dict[str, Any]
                ) -> tuple[RunConfig, set[str], str | None]:
    """The run configuration of `optimize`/`check`: the config file, with the options given on the command line
    in its place; which options the user gave (file or flags); and the preset (flag, else the file's `preset:`)."""
    given: dict[str, Any] = {}
    for name, value in options.items():
        if value is not None and _scalar(RunConfig.model_fields[name].annotation) is None:
            try:
                value = yaml_value(value)
            except yaml.YAMLError as exc:
                raise _fail(f"--{name.replace('_', '-')}: not a YAML value ({exc})", 2) from None
        given[name] = value
    given["task_options"] = _task_options(task_option)
    given = {k: v for k, v in given.items() if v is not None}
    try:
        data = read_config_file(config) if config is not None else {}
        from_file = data.pop("preset", None)
        merged = {**data, **given}
        cfg = load_config(None, **merged)
        preset = preset if preset is not None else from_file
        if preset is not None:
            from gepetto.presets import get_preset

            get_preset(str(preset))
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    return cfg, set(merged), None if preset is None else str(preset)


PresetOpt = typer.Option(None, "--preset", metavar="<name>",
                         help="Size the budget to the task: light (a first try), medium, heavy (a thorough search); "
                         "an explicit --budget wins (docs/runs.md).")
ConfigOpt = typer.Option(None, "--config", "-c", help="YAML or TOML file with run options (same names).")
TaskOptionOpt = typer.Option(None, "--task-option", metavar="KEY=VALUE",
                             help="Task option KEY=VALUE (repeatable), e.g. judge_lm=openai:gpt-4.1-mini; for your "
                             "own make_task, its keyword arguments.")
RunOpt = typer.Option(None, "--run", help="Run name; an existing run is resumed.")


def optimize(
    *,
    config: Path | None = ConfigOpt,
    task_option: list[str] | None = TaskOptionOpt,
    preset: str | None = PresetOpt,
    storage: str = StorageOpt,
    run: str | None = RunOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Check everything and print the budget plan; pay nothing "
                                 "but the seed's run on one example (what `gepetto check` does)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show rejected proposals."),
    debug: bool = DebugOpt,
    **options: Any,
) -> None:
    """Optimise a task's prompts within a rollout budget; `--run NAME` resumes a stored run.

    Every option of a run (docs/runs.md) is an option here, named like its field in a config file.

    The common ones come first; `gepetto check` (or --dry-run) tries the setup before anything is paid.
    """
    cfg, explicit, preset = _run_config(config, task_option, preset, options)
    if dry_run:
        _check(cfg, explicit, preset, storage=storage, run=run, ping=False, example=None, debug=debug)
        return
    started = time.monotonic()
    with _errors(debug), ProgressDisplay(quiet=quiet, verbose=verbose) as progress:
        name, result = start_or_resume(cfg, storage=storage, run=run, callbacks=progress, explicit=explicit,
                                       preset=preset)
    _report_result(name, result, started)


def check(
    *,
    config: Path | None = ConfigOpt,
    task_option: list[str] | None = TaskOptionOpt,
    preset: str | None = PresetOpt,
    storage: str = StorageOpt,
    run: str | None = RunOpt,
    ping: bool = typer.Option(False, "--ping", help="Also make one cheap call to each LM (a model list where the "
                              "endpoint has one, else a 1-token answer)."),
    example: str | None = typer.Option(None, "--example", help="Run the seed on this example id (default: the first "
                                       "validation example)."),
    debug: bool = DebugOpt,
    **options: Any,
) -> None:
    """Check a run before paying for it: the task, the LMs, the seed on one example, what the budget buys.

    Loads the task, checks the LMs (keys, models, endpoints; a call only with --ping), runs the seed on one example
    and prints the budget plan. It takes the options of `gepetto optimize`. Nothing is stored, and only the seed's
    run on one example is paid (in an existing run store, its answers go to the response cache the run reuses).
    """
    cfg, explicit, preset = _run_config(config, task_option, preset, options)
    _check(cfg, explicit, preset, storage=storage, run=run, ping=ping, example=example, debug=debug)


def _line(label: str, text: str, style: str = "") -> None:
    console.print(Text.assemble((f"{label:<11}", "bold"), (redact(text), style)), highlight=False, soft_wrap=True)


def _check(cfg: RunConfig, explicit: set[str], preset: str | None, *, storage: str, run: str | None, ping: bool,
           example: str | None, debug: bool) -> None:
    from gepetto import check as ck
    from gepetto.ledger import Ledger
    from gepetto.lm.names import make_lm
    from gepetto.runner import load_run_task

    with _errors(debug):
        stored = _stored_run(storage, run)
        if stored is not None:
            options = stored_options(stored.config)
            cfg = RunConfig(**options)
            resumes = (f"`gepetto optimize --run {run}` resumes it" if options == stored.config else
                       "stored by an earlier gepetto (run format 1), it is not resumed")
            _line("run", f"{run!r} exists in {_where(storage)} ({stored.shown_status}): {resumes}; its stored "
                  "options are checked below")
            if preset is not None:
                raise ConfigError(f"run {run!r} exists and keeps its budget; a preset sizes a new run only")
        task = load_run_task(ck.stored_config(cfg), Ledger())
        _line("task", f"{task.name} ({cfg.task})" + (f": {task.description}" if task.description else ""))
        components = list(cfg.components or task.seed_candidate)
        _line("", f"{len(task.trainset)} train, {len(task.valset)} validation, {len(task.testset)} test examples; "
              f"components: {', '.join(components)}")
        for role, name in (("task LM", cfg.task_lm), ("reflection", cfg.reflection_lm)):
            status = ck.lm_status(role, name)
            _line(role, f"{name}: {status.note}")
            if status.simulated and cfg.task != "sim":
                _line("", f"warning: {name} is simulated and this is not the simulated task: it will refuse it",
                      "yellow")
            if ping:
                _line("", ck.ping(name))
        lm = ck.task_lm_for(cfg, storage)
        seed = ck.run_seed(task, cfg, lm, example)
        calls = f"{seed.usage.calls} task LM call{'s' if seed.usage.calls != 1 else ''}"
        tokens = f", {seed.usage.input_tokens}+{seed.usage.output_tokens} tokens" if seed.usage.calls else ""
        cached = f" ({seed.usage.cached_calls} from the cache)" if seed.usage.cached_calls else ""
        _line("seed run", f"example {seed.example.id} ({seed.split}): score {seed.score.value:.3f} in "
              f"{seed.seconds:.1f}s, {calls}{tokens}{cached}")
        output = seed.output if isinstance(seed.output, str) else json.dumps(seed.output, ensure_ascii=False,
                                                                              default=str)
        _line("", f"output: {output[:300]}", "dim")
        if seed.score.feedback:
            _line("", f"feedback: {seed.score.feedback[:300]}", "dim")
        for warning in seed.warnings:
            _line("", f"warning: {warning}", "yellow")
        if preset is not None and stored is None and "budget" not in explicit:
            from gepetto.presets import describe, preset_budget

            budget = preset_budget(preset, n_val=len(task.valset), n_components=len(components),
                                   config=cfg.engine_config())
            cfg = cfg.model_copy(update={"budget": budget})
            _line("preset", describe(preset, budget, n_val=len(task.valset), n_components=len(components)))
        plan = ck.budget_plan(task, cfg, make_lm(cfg.task_lm), make_lm(cfg.reflection_lm))
        _line("budget", plan.describe())
        if stored is None:
            _line("run", f"a new run{f' {run!r}' if run else ''} in {_where(storage)}; nothing was stored")
    console.print("[green]ready[/green]: only the seed's run on one example was paid for. Start the run with the same "
                  "options: `gepetto optimize ...`", highlight=False, soft_wrap=True)


def _stored_run(storage: str, run: str | None) -> Any:
    """The stored run `run`, if the store and the run exist (read only; nothing is created)."""
    if run is None or not _store_exists(storage):
        return None
    store = _open_store(storage)
    try:
        return store.get_run(run)
    finally:
        store.close()


app.command(cls=_Command)(_with_config_options(optimize))
app.command(cls=_Command)(_with_config_options(check))


@app.command(cls=_Command)
def runs(storage: str = StorageOpt) -> None:
    """List stored runs: name, status, best score (validation and test), rollouts, cost, age."""
    table = Table("status", "task", "best", "seed score", "test", "rollouts", "cost", "age")
    table.columns.insert(0, Column("name", no_wrap=True))  # names are what users type: never cut them
    if not _store_exists(storage):  # nothing stored yet: an empty list, not an error
        console.print(table)
        console.print(f"[dim]no runs in {_t(_where(storage))} yet; `gepetto optimize` stores one (`--storage` for "
                      "another store)[/dim]")
        return
    store = _open_store(storage)
    try:
        from gepetto.store.snapshot import latest_evaluations

        rows = [(info, *_run_row(store, info), latest_evaluations(store.events(info.name, "evaluation")))
                for info in store.list_runs()]
    except StoreError as exc:  # e.g. a damaged page found while reading
        raise _fail(str(exc), 2) from None
    for info, res, best, cost, used, evaluations in rows:
        test = next((c.get("mean") for c in (evaluations.get("test") or {}).get("candidates") or []
                     if c.get("label") == "best"), None)
        table.add_row(_t(info.name, one_line=True), info.shown_status, _t(info.config.get("task", "")),
                      "-" if best is None else f"{best:.3f}",
                      "-" if res.get("seed_score") is None else f"{res['seed_score']:.3f}",
                      "-" if test is None else f"{test:.3f}",
                      f"{used}/{info.config.get('budget', '?')}", f"${cost:.4f}", _age(info.updated))
    console.print(table)


def _run_row(store: Any, info: Any) -> tuple[dict[str, Any], float | None, float, int]:
    """A stored run's result, best score, cost and rollouts, for `gepetto runs`."""
    res = info.result or {}
    best = res.get("best_score")
    if best is None:
        cands = store.candidates(info.name)
        i = stored_best(cands)
        best = None if i is None else cands[i]["mean"]
    ledger = res.get("ledger") or store.ledger(info.name)
    cost = sum(u.get("cost", 0.0) for u in ledger.values())
    return res, best, cost, res.get("rollouts_used", store.count_rollouts(info.name))


def _age(t: float) -> str:
    s = max(time.time() - t, 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def _test_line(evaluation: dict[str, Any]) -> str:
    """`test (12 examples): seed 0.250 -> best 0.917 (candidate #3)` from a stored evaluation."""
    cands = evaluation.get("candidates") or []
    seed = next((c for c in cands if c.get("index") == 0), None)
    best = next((c for c in cands if c.get("label") == "best"), None)
    parts = []
    if seed is not None and seed is not best:
        parts.append(f"seed {seed['mean']:.3f}")
    if best is not None:
        parts.append(f"best {best['mean']:.3f} (candidate #{best['index']})")
    others = [f"#{c['index']} {c['mean']:.3f}" for c in cands if c is not seed and c is not best]
    text = f"{evaluation.get('split', 'test')} ({evaluation.get('examples')} examples): " + " -> ".join(parts)
    text += "".join(f"; {o}" for o in others)
    if evaluation.get("overlap"):
        text += f"; warning: {evaluation['overlap']} of them were also used to optimise"
    return text


@app.command(cls=_Command)
def show(run: str, storage: str = StorageOpt) -> None:
    """Show a run: best candidate, test score, Pareto front and cost ledger."""
    snap = _snapshot(storage, run)
    res, info = snap["result"], snap["run"]
    console.print(f"[bold]{_t(info['name'])}[/bold] ({_t(info['status'])}), task {_t(info['task'])}, "
                  f"task LM {_t(info['task_lm'])}, reflection LM {_t(info['reflection_lm'])}", highlight=False)
    if res["best_score"] is None or not res["candidates"]:
        console.print("no candidate has been validated yet")
        return
    if snap.get("route"):
        console.print(_t(snap["route"]), highlight=False)
    console.print(f"validation: seed {res['seed_score']:.3f} -> best {res['best_score']:.3f}; "
                  f"{res['rollouts_used']}/{res['budget']} rollouts; stopped: {_t(res['stop_message'])}")
    for evaluation in snap.get("evaluations", {}).values():
        console.print(_t(_test_line(evaluation)), highlight=False)
    if "test" not in snap.get("evaluations", {}):
        console.print(f"[dim]test: not scored yet (`gepetto evaluate {_t(run)}` scores it on the held-out "
                      "examples)[/dim]")
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
    ledger = Table("role", "calls", "cached", "errors", "retries", "tokens in", "prompt cache", "tokens out",
                   "seconds", "cost", title="ledger")
    for role, u in res["ledger"].items():
        est = " (est.)" if u.get("estimated_tokens") else ""
        ledger.add_row(_t(role), str(u["calls"]), str(u.get("cached_calls", 0)), str(u.get("errors", 0)),
                       str(u.get("retries", 0)), f"{u['input_tokens']}{est}", str(u.get("cached_input_tokens", 0)),
                       f"{u['output_tokens']}{est}", f"{u['seconds']:.1f}", f"${u['cost']:.4f}")
    console.print(ledger)


def _default_path(run: str, suffix: str) -> Path:
    """A file name for a run's report or export: its name with anything unusual in a file name replaced."""
    return Path(re.sub(r"[^\w.\-]+", "_", run).strip("._") or "run").with_suffix(suffix)


def _open_in_browser(path: Path) -> None:
    import webbrowser

    if not webbrowser.open(path.resolve().as_uri()):
        err.print(f"[yellow]warning:[/yellow] no browser to open {_t(path)}; open it yourself", highlight=False)


@app.command(cls=_Command)
def report(run: str,
           output: Path | None = typer.Option(None, "-o", "--output", help="HTML file to write [default: RUN.html]."),
           open_: bool = typer.Option(False, "--open", help="Open the report in the web browser."),
           storage: str = StorageOpt) -> None:
    """Write a self-contained HTML report of a run: scores, lineage, reflection transcripts, costs.

    Also the test score (`gepetto evaluate`), the Pareto front per example, diffs and sample outputs.
    """
    from gepetto.report import write_report

    snapshot = _snapshot(storage, run, transcripts=True)
    path = output or _default_path(run, ".html")
    try:
        write_report(snapshot, path)
    except OSError as exc:
        raise _fail(f"cannot write the report to {path}: {exc.strerror or exc}", 2) from None
    console.print(f"report written to {_t(path)}")
    if open_:
        _open_in_browser(path)


_ROLLOUT_FIELDS = ["run", "split", "candidate", "candidate_id", "example_id", "score", "feedback", "output", "error"]


def _rollout_rows(storage: str, run: str) -> Iterator[dict[str, Any]]:
    """One row per rollout of a run (training, validation and, from `gepetto evaluate`, test), oldest first."""
    store = _open_store(storage)
    try:
        if store.get_run(run) is None:
            known = ", ".join(r.name for r in store.list_runs()) or "none"
            raise _fail(f"no run named {run!r} in {_where(storage)} (runs: {known})", 2)
        index = {c["id"]: c["index"] for c in store.candidates(run)}
        splits = {eid: split for split in ("train", "val") for eid in store.examples(run, split)}
        for (cid, eid), r in store.rollouts(run).items():
            yield {"run": run, "split": splits.get(eid, ""), "candidate": index.get(cid, ""), "candidate_id": cid,
                   "example_id": eid, "score": r.score.value, "feedback": r.score.feedback, "output": r.output,
                   "error": r.error}
        for e in store.events(run, "evaluation"):
            for r in e["data"].get("rollouts") or []:
                yield {"run": run, "split": e["data"].get("split", "test"), **{k: r.get(k) for k in _ROLLOUT_FIELDS
                                                                              if k not in ("run", "split")}}
    except StoreError as exc:
        raise _fail(str(exc), 2) from None
    finally:
        store.close()


def _as_cell(value: Any) -> Any:
    """A CSV cell: numbers as they are, text as it is but for a leading ' before text a spreadsheet would read as
    a formula (=, +, -, @, tab, CR: an LM output or a feedback may be one), anything else (an output dict) as JSON."""
    if value is None or isinstance(value, (int, float)):
        return "" if value is None else value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@app.command(cls=_Command)
def export(
    run: str,
    rollouts: bool = typer.Option(False, "--rollouts", help="Export every rollout (candidate, example, score, "
                                  "feedback, output) instead of the best candidate."),
    output: Path | None = typer.Option(None, "-o", "--output", help="File to write (default: standard output); "
                                       ".csv or .jsonl decides the format of --rollouts."),
    fmt: str | None = typer.Option(None, "--format", metavar="jsonl|csv",
                                   help="Format of --rollouts [default: from the file name, else jsonl]."),
    storage: str = StorageOpt,
) -> None:
    """Print the best candidate as JSON, or with --rollouts every rollout as JSON lines or CSV.

    A rollout row: run, split, candidate (index; empty for a child that never entered the pool), candidate_id,
    example_id, score, feedback, output, error; test rollouts come from `gepetto evaluate`.
    """
    if not rollouts:
        res = _snapshot(storage, run)["result"]
        if not res["best_candidate"]:
            raise _fail(f"run {run!r} has no validated candidate yet", 1)
        text = redact(json.dumps(res["best_candidate"], ensure_ascii=False, indent=2))
    else:
        kind = fmt or ("csv" if output is not None and output.suffix.lower() == ".csv" else "jsonl")
        if kind not in ("jsonl", "csv"):
            raise _fail(f"--format: jsonl or csv, got {kind!r}", 2)
        buffer = io.StringIO()
        if kind == "csv":
            writer = csv.DictWriter(buffer, fieldnames=_ROLLOUT_FIELDS)
            writer.writeheader()
            for row in _rollout_rows(storage, run):
                writer.writerow({k: _as_cell(v) for k, v in row.items()})
        else:
            for row in _rollout_rows(storage, run):
                buffer.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
        text = redact(buffer.getvalue()).rstrip("\n")
    if output is None:
        typer.echo(text)
        return
    try:
        output.write_text(text + "\n", encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write {output}: {exc.strerror or exc}", 2) from None
    err.print(f"written to {_t(output)}", highlight=False)


@app.command(cls=_Command)
def evaluate(
    run: str,
    split: str = typer.Option("test", "--split", metavar="test|val|train", help="Which examples of the run's task: "
                              "test (held out: never seen while optimising), val or train."),
    candidate: list[str] | None = typer.Option(None, "--candidate", metavar="INDEX|seed|best",
                                               help="Candidate to score (repeatable) [default: seed and best]."),
    max_concurrency: int | None = typer.Option(None, "--max-concurrency", help="Rollouts run at once [default: the "
                                               "run's]."),
    storage: str = StorageOpt,
    debug: bool = DebugOpt,
) -> None:
    """Score a run's seed and best candidates on held-out test examples; kept with the run.

    `gepetto show`, the report and `gepetto compare` show the scores.
    """
    from gepetto.api import evaluate_run

    if not _store_exists(storage):
        raise _fail(f"no run store at {_where(storage)} (run `gepetto optimize` first, or pass --storage)", 2)
    with _errors(debug):
        result = evaluate_run(run, storage=storage, split=split, candidates=candidate,
                              max_concurrency=max_concurrency)
    table = Table("candidate", "what", f"{split} score", "examples", "errors", title=f"{run}: {split}")
    for c in result.candidates:
        errors = sum(1 for r in c.rollouts if r.error)
        table.add_row(f"#{c.index}", c.label, f"{c.mean:.3f}", str(len(c.rollouts)), str(errors))
    console.print(table)
    if result.overlap:
        err.print(f"[yellow]warning:[/yellow] {result.overlap} of the {result.examples} {split} examples were also "
                  "used to optimise (train or validation): not a held-out score", highlight=False)
    cost = sum(u.get("cost", 0.0) for u in result.ledger.values())
    calls = sum(u.get("calls", 0) for u in result.ledger.values())
    console.print(f"[dim]{calls} task LM calls" + (f", ${cost:.4f}" if cost else "") + "; kept with the run: "
                  f"`gepetto show {_t(run)}`[/dim]")


@app.command(cls=_Command)
def compare(
    runs_: list[str] = typer.Argument(..., metavar="RUN...", help="Two or more runs."),
    output: Path | None = typer.Option(None, "-o", "--output", help="Also write the comparison as an HTML page."),
    open_: bool = typer.Option(False, "--open", help="Open the HTML page in the web browser."),
    storage: str = StorageOpt,
) -> None:
    """Compare runs: scores, costs, the options that differ, and best score against rollouts."""
    from gepetto.report.compare import differing_options, run_row, text_chart, write_compare

    names = list(dict.fromkeys(runs_))
    if len(names) < 2:
        raise _fail("compare takes two runs or more", 2)
    snapshots = [_snapshot(storage, name) for name in names]
    rows = [run_row(s) for s in snapshots]
    table = Table("validation", "test", "rollouts", "cands", "accepted", "cost", "wall")
    table.columns.insert(0, Column("run", no_wrap=True))

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    for r in rows:
        test = f"{f(r['seed_test'])} -> {f(r['best_test'])}" if r["best_test"] is not None else "-"
        table.add_row(_t(r["name"], one_line=True), f"{f(r['seed_val'])} -> {f(r['best_val'])}", test,
                      f"{int(r['rollouts'] or 0)}/{int(r['budget'] or 0)}", str(r["candidates"]),
                      f"{r['accepted']}/{r['tested']}", f"${r['cost']:.4f}",
                      "-" if r["wall"] is None else f"{r['wall']:.0f}s")
    console.print(table)
    differing = differing_options(snapshots)
    if differing:
        opts = Table("option", *[_t(r["name"], one_line=True) for r in rows], title="options that differ")
        for key, values in differing.items():
            opts.add_row(key, *[_t(json.dumps(v, ensure_ascii=False, default=str)) for v in values])
        console.print(opts)
    console.print(Text("best validation score over rollouts", style="bold"))
    console.print(text_chart(rows, width=max(30, min(80, (console.width or 80) - 12))), highlight=False)
    if output is not None or open_:
        path = output or Path("compare.html")
        try:
            write_compare(snapshots, path)
        except OSError as exc:
            raise _fail(f"cannot write {path}: {exc.strerror or exc}", 2) from None
        console.print(f"comparison written to {_t(path)}")
        if open_:
            _open_in_browser(path)


@app.command(cls=_Command)
def delete(run: str, yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask."),
           storage: str = StorageOpt) -> None:
    """Delete a stored run: its candidates, rollouts, reflection answers and events (asks first)."""
    from gepetto.store.sqlite import RunStore

    if not _store_exists(storage):
        raise _fail(f"no run store at {_where(storage)}", 2)
    try:
        store = RunStore(storage)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None
    try:
        info = store.get_run(run)
        if info is None:
            known = ", ".join(r.name for r in store.list_runs()) or "none"
            raise _fail(f"no run named {run!r} in {_where(storage)} (runs: {known})", 2)
        if info.alive:
            raise _fail(f"run {run!r} is running (process {info.owner}): stop it first", 2)
        what = (f"run {run!r} ({info.shown_status}, {store.count_rollouts(run)} rollouts, "
                f"{len(store.candidates(run))} candidates) from {_where(storage)}")
        if not yes and not typer.confirm(f"Delete {what}?", default=False):
            err.print("nothing deleted")
            raise typer.Exit(1)
        store.delete_run(run)
    except StoreError as exc:
        raise _fail(str(exc), 2) from None
    finally:
        store.close()
    console.print(f"deleted {_t(what)}")


# The demo's rollouts are short (one message in, a JSON line out): 16 decoded at once fit the embedded model's
# context and cost fewer CPU seconds a token than 8 (benchmarks/results/commodity_cpu.md)
DEMO_ROLLOUTS_AT_ONCE = 16


@app.command(cls=_Command)
def demo(
    budget: int = typer.Option(80, help="Rollout budget (one program run on one example)."),
    seed: int = typer.Option(0, help="Random seed (splits and sampling)."),
    task_lm: str = typer.Option(f"local:qwen2.5-coder-0.5b?parallel={DEMO_ROLLOUTS_AT_ONCE}", help="Task LM name."),
    reflection_lm: str = typer.Option("local:qwen2.5-coder-1.5b", help="Reflection LM name."),
    time_limit: float = typer.Option(600.0, help="Stop after this many seconds (the demo takes about 3 minutes on "
                                     "2 cores; the held-out test after it is not counted)."),
    cache: str = typer.Option("auto", help="LM response cache: auto (temperature 0), always, off."),
    storage: str = StorageOpt,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show rejected proposals."),
    debug: bool = DebugOpt,
) -> None:
    """Improve an order-extraction prompt on the embedded local LLMs; show before/after, and on test."""
    from gepetto.tasks import load_task

    task = load_task("demo", seed=seed)
    console.print(Panel.fit(
        f"[bold]gepetto demo[/bold]: {_t(task.description)}\n"
        f"task LM {_t(task_lm)}, reflection LM {_t(reflection_lm)}; {len(task.trainset)} train, "
        f"{len(task.valset)} validation examples; budget {budget} rollouts\n"
        f"seed instruction: {_t(repr(task.seed_candidate['instruction']))}"))
    try:
        cfg = load_config(task="demo", task_lm=task_lm, reflection_lm=reflection_lm, budget=budget, seed=seed,
                          time_limit=time_limit, cache=cache, max_concurrency=DEMO_ROLLOUTS_AT_ONCE)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    started = time.monotonic()
    with _errors(debug, "the demo failed: "), ProgressDisplay(quiet=quiet, verbose=verbose) as progress:
        name, result = start_or_resume(cfg, storage=storage, callbacks=progress)
    _report_result(name, result, started)
    if result.stop_reason == StopReason.TIME_LIMIT:  # half a run: say so, and how to finish it
        console.print(f"[yellow]the demo stopped at its time limit ({time_limit:.0f} s) after {result.rollouts_used} "
                      f"of {result.budget} rollouts[/yellow]: this machine is slower than the demo is sized for (2 "
                      f"cores, about 3 minutes) or busy with other work; the best so far is shown. Resume it to "
                      f"finish (the time limit counts again from the resume): gepetto optimize --run "
                      f"{_t(name, one_line=True)} --storage {_t(storage, one_line=True)}")
    if task.testset and not quiet:  # held-out check: the optimiser never saw these examples
        from gepetto.api import evaluate_run

        console.print(f"scoring seed and best on {len(task.testset)} held-out test examples ...")
        with _errors(debug):
            scores = evaluate_run(name, storage=storage)
        seed_test = scores.seed.mean if scores.seed is not None else float("nan")
        best_test = scores.best.mean if scores.best is not None else seed_test
        console.print(f"[bold]test[/bold]: seed {seed_test:.3f} -> best {best_test:.3f}")


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None) -> None:
    """Python's warnings, in the command line's words: `warning: ...` on stderr, without a source location."""
    err.print(f"[yellow]warning:[/yellow] {_t(message)}", highlight=False, soft_wrap=True)


def main() -> None:
    warnings.showwarning = _show_warning
    app()
