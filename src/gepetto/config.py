"""One typed configuration: `EngineConfig` (the loop's options) and `RunConfig` (a stored run: the engine's options
plus the task, the LMs and the store's). The Python API's keyword arguments, the config files and the CLI options
(`--max-concurrency` for `max_concurrency`, ...) all derive from these two models, with the same names (the engine
keywords' types: gepetto/_engine_options.py, generated from `EngineConfig` by `python -m gepetto._gen_options`).

Each field says what it is (`description`) and where the CLI shows it (`group`); an invalid value or an unknown
name raises one `ConfigError` that names the field and what it accepts.
"""

from __future__ import annotations

import copy
import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

# (the modules that define the built-in strategies register them: the options' help is written from them)
from gepetto.engine import executors, merge, minibatch, racing, strategies  # noqa: F401
from gepetto.engine.proposers import REWRITE_TEMPERATURES, RULE_TEMPERATURES
from gepetto.program import Executor
from gepetto.specs import PYTHON, ConfigError, canonical, format_spec, is_builtin, parse_spec, strategies_help

ProposerName = Literal["auto", "edit", "rewrite"]
AUTO = "auto"  # a strategy the run's route chooses (engine/route.py)
CacheMode = Literal["auto", "always", "off"]
TrackingName = Literal["mlflow"]  # experiment trackers (gepetto.tracking)
DEFAULT_TASK_LM = "local:qwen2.5-coder-0.5b"  # the embedded default (docs/lm.md)
DEFAULT_REFLECTION_LM = "local:qwen2.5-coder-1.5b"
# how a stored run's options are written and its proposals' random numbers drawn: a run stored in another format
# would take another path if resumed, so runner.py refuses it (2: strategies named with their parameters)
RUN_FORMAT = 2

# the groups the CLI shows options in (`gepetto optimize --help`)
RUN, STOP, SEARCH, PROPOSALS, TASK = "Run", "Budget and stopping", "Search", "Proposals", "Task and data"

# options that may change when a stored run is resumed (they do not alter the path the run has taken so far)
RESUMABLE_CHANGES = frozenset({"budget", "time_limit", "patience", "target_score", "max_concurrency", "prices",
                               "max_cost_usd", "max_lm_failures", "lm_retry_pause", "executor"})
# options of one session, never stored with a run (a stop file stops this session only; each session of a tracked
# run is tracked as its own run, and only when asked for)
SESSION_ONLY = frozenset({"stop_file", "tracking"})
FEWSHOT = 4  # the built-in proposers' demonstrations per component when the few-shot spec does not set k


def implicit_defaults() -> dict[str, Any]:
    """What the options left unset stand for in this gepetto, by option, and the run format. Kept with a stored
    run: defaults change as they are measured, and a run resumed by a gepetto that reads an unset option otherwise
    would not continue the same run (runner.py refuses it)."""
    return {"fewshot": FEWSHOT,
            "reflection_temperatures": {"rewrite": list(REWRITE_TEMPERATURES), "rule": list(RULE_TEMPERATURES)},
            "format": RUN_FORMAT}

# the options that name a strategy (`NAME` or `NAME(knob=value, ...)`: gepetto.specs), by their built-in names (the
# first is the default); those of STRATEGIES also take an object of one's own given to gepetto.optimize(), stored
# as python:MODULE:QUALNAME
STRATEGIES: dict[str, tuple[str, ...]] = {
    "parent_selector": ("auto", "pareto", "current-best", "epsilon-greedy"),
    "component_selector": ("round-robin", "all"),
    "minibatch_sampler": ("epoch-shuffled",),
    "proposer": ("auto", "rewrite", "edit"),
    "accept": ("strict", "non-decreasing", "paired"),
}
SPECS: dict[str, tuple[str, ...]] = {**STRATEGIES, "fewshot": ("fewshot", "off"), "merge": ("merge", "off"),
                                     "validation": ("full", "racing"), "executor": ("local", "ray")}


class UnknownOptionError(ConfigError, TypeError):
    """A keyword argument no function of the API takes (a TypeError too, as Python's own would be)."""


def _field(default: Any, description: str, group: str, *, spec: bool = False, cli_aliases: tuple[str, ...] = (),
           python_types: tuple[str, ...] = (), **constraints: Any) -> Any:
    """A field with its description and its CLI group (and other flags for its CLI option, if any); `spec`: it
    names a strategy (gepetto.specs), a SPEC on the command line; `python_types`: what its keyword also takes in
    Python (`gepetto.optimize(...)`), types written as they are into gepetto/_engine_options.py, which
    `python -m gepetto._gen_options` generates from these fields."""
    extra: dict[str, Any] = {"group": group, **({"metavar": "SPEC"} if spec else {})}
    if cli_aliases:
        extra["cli_aliases"] = list(cli_aliases)
    if python_types:
        extra["python_types"] = list(python_types)
    if isinstance(default, (dict, list)):  # a fresh copy for each config
        return Field(default_factory=lambda: copy.deepcopy(default), description=description,
                     json_schema_extra=extra, **constraints)
    return Field(default, description=description, json_schema_extra=extra, **constraints)


def _strategy(option: str, intro: str, group: str, python_types: tuple[str, ...] = ()) -> Any:
    """A field naming a strategy (default: its first built-in), its help written from the built-ins' classes:
    `intro`, then each one's spec with its parameters' defaults and what it does (gepetto.specs)."""
    return _field(SPECS[option][0], strategies_help(option, intro, SPECS[option]), group, spec=True,
                  python_types=python_types)


class _Options(BaseModel):
    """Validated on construction; an error is one ConfigError naming each bad field."""

    # arbitrary types: an Executor object (EngineConfig.executor) is checked with isinstance
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, type(self))) from None


class EngineConfig(_Options):
    """The options of the loop, one validated field each, under the same names as the keyword arguments of
    `gepetto.optimize`, the keys of a config file and the CLI options (`--max-concurrency` for `max_concurrency`).

    Each field documents itself through its `Field(description=...)`
    (`EngineConfig.model_fields["budget"].description`), which the options table of these docs and
    `gepetto optimize --help` show. Defaults follow the paper where it says, and what works with small LMs
    otherwise. An option that names a strategy takes a spec: its built-in name with its parameters, if any
    (`proposer="edit(rules=3)"`; gepetto.specs), or the same as a mapping (`{"edit": {"rules": 3}}`).

    Build one with keyword arguments by field name; every value is checked on construction. `optimize(config=...)`
    (likewise `optimize_async` and `build_engine`) takes one, or a mapping of its options, and runs with its
    values, each engine option also given as a keyword (not None) taking the place of the config's; without
    `config`, it starts from `EngineConfig()`. Of a `RunConfig` given as `config`, only the engine's options are
    read.

    Args:
        **data: The options by field name; an option left out keeps its default.

    Raises:
        ConfigError: An unknown option (with the closest name), an invalid value, or options that do not fit
            together (`component_selector="all"` with the edit proposer); one error naming each bad field and
            what it accepts.

    Example:
        ```python
        import gepetto
        from gepetto.testing import sim

        config = gepetto.EngineConfig(budget=60, minibatch_size=4, parent_selector="epsilon-greedy(epsilon=0.2)")
        print(config.parent_selector, config.proposer)

        task = sim.task(n_train=6, n_val=6)
        result = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm="sim:task", reflection_lm="sim:reflection",
                                  config=config, seed=1, progress=False)  # seed=1 in place of config.seed
        print(result.best_score)
        ```
    """

    budget: int = _field(200, "Rollout budget (one program run on one example).", RUN, ge=1)
    seed: int = _field(0, "Random seed (sampling; built-in tasks: their splits too).", RUN, ge=-(2**63),
                       le=2**63 - 1)
    max_concurrency: int = _field(8, "Rollouts run at once.", RUN, ge=1)
    task_lm_params: dict[str, Any] = _field(
        {"temperature": 0.0}, "Parameters of every task LM call (YAML mapping), e.g. '{temperature: 0.2}'.", RUN)
    # stop conditions
    time_limit: float | None = _field(None, "Stop after this many seconds.", STOP, gt=0)
    patience: int | None = _field(None, "Stop after this many iterations without a better best.", STOP, ge=1)
    target_score: float | None = _field(None, "Stop when the best validation score reaches this.", STOP, ge=0, le=1)
    perfect_score: float = _field(1.0, "A validation score this high counts as perfect (the run stops).", STOP)
    stop_file: str | None = _field(None, "Stop gracefully when this file appears (this session only).", STOP)
    max_idle_iterations: int = _field(10, "Stop when this many iterations in a row spend no rollout.", STOP, ge=1)
    max_cost_usd: float | None = _field(
        None, "Stop when the LM calls have cost this many dollars (checked between iterations; needs prices).", STOP,
        gt=0)
    # an LM call that fails for infrastructure reasons (LMUnavailable, after the backend's own retries) is no
    # result: it is made again after `lm_retry_pause` seconds; this many failures in a row stop the run (an
    # LMSetupError such as HTTP 401 stops it at once), keeping everything paid so far
    max_lm_failures: int = _field(5, "LM outages in a row (or of one call) that stop the run (resumable).", STOP,
                                  ge=1)
    lm_retry_pause: float = _field(5.0, "Seconds before a call the LM gave no answer to is made again.", STOP, ge=0)
    # a rollout (program and metric) that takes longer scores 0 with the timeout as feedback, and the run goes on.
    # Set it above the slowest normal rollout, LM retries included (a sync metric cannot be cut short)
    rollout_timeout: float | None = _field(
        None, "Seconds one rollout (program and metric) may take; a longer one scores 0 with the timeout as "
        "feedback (default: no limit).", RUN, gt=0)
    # where rollouts run (engine/executors.py): in this process, or as Ray tasks on a cluster; in Python also an
    # Executor object. The run is the same either way
    executor: str | Executor = _strategy("executor", "Where rollouts run (in Python also an Executor object).", RUN,
                                         python_types=("Knobs",))
    # the search
    minibatch_size: int = _field(3, "Training examples per reflection minibatch.", SEARCH, ge=1)
    seek_failures: int = _field(0, "Up to this many more training examples a parent runs when its minibatch has "
                                "solved ones, so that reflection sees mistakes (its own component's) in their "
                                "place; 0: off.", SEARCH, ge=0)
    # the strategies (engine/strategies.py, docs/strategies.md): a built-in spec, or python:MODULE:QUALNAME for an
    # object given to gepetto.optimize()
    parent_selector: str = _strategy("parent_selector", "How the parent of a proposal is chosen.", SEARCH,
                                     python_types=("ParentSelector", "Mapping[str, Any]"))
    component_selector: str = _strategy("component_selector", "Which components a proposal changes.", SEARCH,
                                        python_types=("ComponentSelector",))
    minibatch_sampler: str = _strategy("minibatch_sampler", "Which training examples a parent runs on before "
                                       "reflection.", SEARCH, python_types=("MinibatchSampler",))
    accept: str = _strategy("accept", "When a child passes its minibatch test against its parent.", SEARCH,
                            python_types=("Acceptance", "Callable[[Sequence[float], Sequence[float]], bool | None]",
                                          "Mapping[str, Any]"))
    proposals_per_round: int = _field(1, "Proposals tried at once (faster against slow parallel LM APIs).",
                                      SEARCH, ge=1)
    # racing validation (engine/racing.py): an accepted child runs the validation set in chunks and stops as soon
    # as it provably cannot enter the Pareto front nor become the best (exact: same front and best as a full pass)
    validation: str = _strategy("validation", "How an accepted child is validated.", SEARCH,
                                python_types=("Knobs", "Mapping[str, Any]"))
    merge: str = _strategy("merge", "Whether lineages that share an ancestor are merged.", SEARCH,
                           python_types=("Knobs", "Mapping[str, Any]"))
    components: tuple[str, ...] | None = _field(
        None, "Components to evolve (YAML list); default: all of the seed's.", SEARCH)
    # component -> what kind of text it is ("a Python regular expression that ..."). A described component is an
    # artifact, not an instruction: reflection is told the description and keeps that kind of text, vetting
    # takes it verbatim, and the edit proposer rewrites it whole instead of appending a rule line
    component_descriptions: dict[str, str] | None = _field(
        None, "What kind of text a component is (YAML mapping component: description); a described component "
        "is an artifact, rewritten whole and kept verbatim.", SEARCH)
    # proposing: "rewrite" is the paper's full rewrite of the component from a minibatch (engine/reflect.py);
    # "edit" proposes rules for frequent mistakes, gated on failures and solved cases (engine/edits.py); "auto"
    # takes the run's route, chosen from the examples and the seed's first rollouts (engine/route.py)
    proposer: str = _strategy("proposer", "How children are proposed (docs/strategies.md).", PROPOSALS,
                              python_types=("Proposer", "Mapping[str, Any]"))
    # few-shot demonstrations (engine/demos.py): solved training examples written into a component's text; on by
    # default with the built-in proposers (docs/design-notes.md), with a proposer of one's own only when k is set,
    # and never in a run with no valset apart (it has no example to show)
    fewshot: str = _strategy("fewshot", "Few-shot demonstrations (solved training examples) in a component's text, "
                             f"at most k per component (unset: {FEWSHOT} with a built-in proposer); a number is k.",
                             PROPOSALS, python_types=("Knobs", "int", "Mapping[str, Any]"))
    reflection_attempts: int = _field(3, "Reflection calls per proposal (a rejected answer is retried; a rule "
                                      "the instruction already has is not).", PROPOSALS, ge=1)
    # None: each kind of request has its own schedule (REWRITE_TEMPERATURES, RULE_TEMPERATURES)
    reflection_temperatures: tuple[float, ...] | None = _field(
        None, "Temperature of each reflection attempt (YAML list; the last one repeats); default: 1.0 for every "
        "rewrite, 0, 0.7, 1.0 for the edit proposer's rules.", PROPOSALS)
    max_component_chars: int | None = _field(
        None, "Length budget of each instruction (characters; default none): reflection is told it and longer "
        "proposals are rejected before any rollout.", PROPOSALS, ge=1)
    # price table: LM name -> [dollars per million input tokens, per million output tokens]
    prices: dict[str, tuple[float, float]] = _field(
        {}, "Prices per million tokens (YAML mapping LM name: [input, output]), for the cost ledger.", RUN)

    @field_validator(*SPECS, mode="before")
    @classmethod
    def _spec(cls, v: Any, info: ValidationInfo) -> Any:
        option = str(info.field_name)
        if option in STRATEGIES and isinstance(v, str) and v.startswith(PYTHON) and len(v) > len(PYTHON):
            return v  # an object given to gepetto.optimize()
        if option in ("fewshot", "merge") and v is False:
            v = "off"  # (YAML reads `off` as false)
        number = isinstance(v, int) and not isinstance(v, bool)
        if option == "fewshot" and (number or (isinstance(v, str) and v.strip().isdigit())):
            v = f"fewshot(k={int(v)})"  # a number: k
        if option == "executor" and not isinstance(v, (str, Mapping)) and not is_builtin(option, v):
            if not cls._executor_objects:
                raise ValueError(f"a stored run takes an executor by name ({', '.join(SPECS['executor'])}), not an "
                                 f"object ({type(v).__name__}): run without storage= to use it")
            if not isinstance(v, Executor):
                raise ValueError(f"one of {', '.join(SPECS['executor'])} or an Executor object (async run(...) and "
                                 f"aclose()), got {type(v).__name__}")
            return v
        return canonical(option, v)

    @model_validator(mode="after")
    def _strategies_fit(self) -> EngineConfig:
        if self.component_selector == "all" and self.proposer_name == "edit":
            raise ValueError("component_selector 'all' needs proposer 'rewrite': the edit proposer changes one "
                             "component per proposal")
        return self

    @property
    def proposer_name(self) -> str:
        """The proposer's name without its parameters ("edit" for "edit(rules=3)")."""
        return self.proposer if self.proposer.startswith(PYTHON) else parse_spec(self.proposer)[0]

    @property
    def fewshot_k(self) -> int | None:
        """The few-shot spec's `k`: the most demonstrations per component (0 when off), None when not set."""
        name, params = parse_spec(self.fewshot)
        return 0 if name == "off" else params.get("k")

    @property
    def demonstrations(self) -> int:
        """Most demonstrations per component with a built-in proposer: the few-shot spec's k, else FEWSHOT."""
        k = self.fewshot_k
        return FEWSHOT if k is None else k

    _executor_objects: ClassVar[bool] = True  # an Executor object is an option of one process, never stored

    @field_validator("rollout_timeout", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        # strict: a flag or a text is a mistake, not a number of seconds to guess from
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ValueError("must be a number of seconds above 0 (or None)")
        return v


ENGINE_FIELDS = frozenset(EngineConfig.model_fields)


class RunConfig(EngineConfig):
    """Everything that defines a stored run: the engine's options, the task, the LMs and the store's options.

    A config file (YAML or TOML) holds these fields by name, flat.
    """

    # a built-in task name, a task target (path/to/file.py:make_task, package.module:make_task), or
    # python:MODULE:QUALNAME for a program given to gepetto.optimize() in Python
    task: str = _field("demo", "Built-in task (demo, clinc-banking, ...: docs/tasks.md), or your own program: "
                       "path/to/file.py:make_task or package.module:make_task.", TASK)
    task_lm: str = _field(DEFAULT_TASK_LM, "Task LM, e.g. local:qwen2.5-coder-0.5b, openai:MODEL@URL.", RUN)
    reflection_lm: str = _field(DEFAULT_REFLECTION_LM, "Reflection LM name.", RUN)
    cache: CacheMode = _field("auto", "LM response cache: auto (temperature 0), always, off.", RUN)
    data_dir: str | None = _field(None, "Benchmark data directory (default ../shared/data).", TASK)
    n_train: int | None = _field(None, "Training examples (built-in tasks).", TASK, ge=1)
    n_val: int | None = _field(None, "Validation examples (built-in tasks).", TASK, ge=1)
    n_test: int | None = _field(None, "Test examples (built-in tasks).", TASK, ge=0)
    task_options: dict[str, Any] = _field(
        {}, "Task options KEY=VALUE, e.g. judge_lm=openai:gpt-4.1-mini; for your own make_task, its keyword "
        "arguments.", TASK)
    # a stored run names its executor (an object is EngineConfig's only); it may change on resume
    executor: str = _strategy("executor", "Where rollouts run.", RUN)

    # where else the run is logged (gepetto.tracking): given for each session, never stored
    tracking: TrackingName | None = _field(
        None, "Also log the run to an experiment tracker: mlflow (where: MLFLOW_TRACKING_URI, "
        "MLFLOW_EXPERIMENT_NAME; extra gepetto[mlflow]; docs/integrations.md).", RUN, cli_aliases=("--track",))

    _executor_objects: ClassVar[bool] = False

    @field_validator("tracking", mode="before")
    @classmethod
    def _known_tracker(cls, v: Any) -> Any:
        accepted = get_args(TrackingName)
        if isinstance(v, str) and v not in accepted:
            raise ValueError(f"unknown tracking {v!r}; accepted: {', '.join(accepted)}")
        return v

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        from gepetto.tasks import TASKS
        from gepetto.usertask import FORMS, is_target, normalize_target

        if v in TASKS or v.startswith(PYTHON):
            return v
        if is_target(v):
            return normalize_target(v)
        raise ValueError(f"unknown task {v!r}; accepted: {', '.join(sorted(TASKS))}, or your own as {FORMS}")

    @field_validator("task_lm", "reflection_lm")
    @classmethod
    def _lm_name(cls, v: str) -> str:
        from gepetto.lm.names import parse_lm_name

        if not v.startswith(PYTHON):  # an LM object given to gepetto.optimize() is checked with the task below
            parse_lm_name(v)  # raises ValueError listing the accepted forms
        return v

    @field_validator("task_lm_params", "task_options")
    @classmethod
    def _plain_data(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:
            return json.loads(json.dumps(v))  # as stored (tuples become lists), so a resume compares like with like
        except (TypeError, ValueError) as exc:
            raise ValueError(f"must be plain data (JSON): {exc}") from None

    @model_validator(mode="after")
    def _objects_only_from_python(self) -> RunConfig:
        for key in ("task_lm", "reflection_lm", *STRATEGIES):
            if getattr(self, key).startswith(PYTHON) and not self.task.startswith(PYTHON):
                what = "an LM" if key.endswith("_lm") else "a strategy"
                raise ValueError(f"{key} {getattr(self, key)!r} stands for {what} object given to gepetto.optimize(); "
                                 f"here give {'an LM name' if key.endswith('_lm') else 'a built-in name'}")
        return self

    def engine_config(self, **changes: Any) -> EngineConfig:
        """The engine's part of this run config (with `changes`)."""
        return EngineConfig(**{**self.model_dump(include=set(ENGINE_FIELDS)), **changes})

    def stored(self) -> dict[str, Any]:
        """What the run store keeps: every option but those of one session."""
        return self.model_dump(exclude=set(SESSION_ONLY))


# the options of a run stored in format 1, whose strategies' parameters were options of their own
_FORMAT_1 = {"epsilon", "accept_tolerance", "racing", "racing_chunk", "racing_confidence", "ray_address",
             "evidence_size", "gate_solved", "rule_max_tokens", "edit_rules", "definitions", "fewshot_share",
             "adaptive_fewshot", "use_merge", "max_merges", "adaptive_merge", "reflection_max_tokens",
             "reflection_chars"}


def stored_config(name: str, where: Any, config: Mapping[str, Any], *, resume: bool = True) -> RunConfig:
    """The configuration stored with run `name` (in the store at `where`); one this gepetto cannot load is a
    ConfigError saying that it came from the store, written by another version."""
    try:
        return RunConfig(**(config if resume else stored_options(config)))
    except ConfigError as exc:
        then = ("Resume it with the gepetto version that started it, or start a new run" if resume else
                "Use the gepetto version that wrote it")
        raise ConfigError(f"run {name!r} in {where}: its stored configuration does not load in this gepetto "
                          f"(it was written by another version, a newer one if an option is unknown here): {exc}\n"
                          f"{then}") from None


def stored_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored run's options in this gepetto's names: those of a run stored in format 1 (before strategies were
    named with their parameters) written as specs, for reading it (`gepetto evaluate`, `check`); such a run is not
    resumed (runner.py)."""
    if not _FORMAT_1 & set(config):
        return dict(config)
    old = {"adaptive_fewshot": False, **config}  # (a run stored before it existed had a fixed share)
    out = {k: v for k, v in old.items() if k not in _FORMAT_1}

    def spec(name: str, **params: Any) -> str:
        return format_spec(name, {k: v for k, v in params.items() if v is not None})

    if out.get("parent_selector") == "epsilon-greedy":
        out["parent_selector"] = spec("epsilon-greedy", epsilon=old.get("epsilon"))
    if out.get("accept") == "paired":
        out["accept"] = spec("paired", tolerance=old.get("accept_tolerance"))
    edit = {"rules": old.get("edit_rules"), "definitions": old.get("definitions"), "evidence": old.get("evidence_size"),
            "gate_solved": old.get("gate_solved"), "rule_max_tokens": old.get("rule_max_tokens")}
    rewrite = {"max_tokens": old.get("reflection_max_tokens"), "prompt_chars": old.get("reflection_chars")}
    proposer = out.get("proposer", AUTO)
    if proposer in (AUTO, "edit", "rewrite"):
        out["proposer"] = spec(proposer, **rewrite, **({} if proposer == "rewrite" else edit))
    out["validation"] = spec("racing", chunk=old.get("racing_chunk"), confidence=old.get("racing_confidence")) \
        if old.get("racing") else "full"
    out["merge"] = spec("merge", max=old.get("max_merges"), adaptive=old.get("adaptive_merge")) \
        if old.get("use_merge", True) else "off"
    out["fewshot"] = spec("fewshot", k=old.get("fewshot"), share=old.get("fewshot_share"),
                          adaptive=old.get("adaptive_fewshot"), gate_solved=old.get("gate_solved"))
    if out.get("executor") == "ray":
        out["executor"] = spec("ray", address=old.get("ray_address"))
    return out


def did_you_mean(name: str, accepted: list[str] | tuple[str, ...]) -> str:
    """` (did you mean 'budget'?)` for a name close to an accepted one (a typo), else ""."""
    close = difflib.get_close_matches(name, accepted, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def format_validation_error(exc: ValidationError, model: type[BaseModel] = RunConfig) -> str:
    """One line per bad field: its name, what is wrong (with the closest accepted name for an unknown one), what
    was given."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(x) for x in err["loc"]) or "config"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            hint = did_you_mean(str(err["loc"][-1]), list(model.model_fields)) if err["loc"] else ""
            msg = f"unknown option{hint}; accepted: {', '.join(model.model_fields)}"
        lines.append(f"{field}: {msg} (got {err.get('input')!r})")
    what = "engine option" if model is EngineConfig else "configuration"
    return f"invalid {what}:\n  " + "\n  ".join(lines)


MAX_CONFIG_BYTES = 1_000_000  # a config file of options is a few hundred bytes; a larger one is no config


def yaml_value(text: str) -> Any:
    """YAML's safe subset without anchors and aliases (`*name`): an alias bomb (aliases of aliases, nine deep) is
    a few lines that expand to billions of nodes; options need no aliases."""
    import yaml

    class Loader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"line {mark.line + 1}: an alias (*{self.peek_event().anchor}); config files "
                                     "take no anchors or aliases: write the value out")
            return super().compose_node(parent, index)

    loader = Loader(text)  # (a SafeLoader: plain data only, never a Python object)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The options in a YAML or TOML file, as a mapping (not validated yet)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {p} is {p.stat().st_size:,} bytes; a config file of options is at most "
                          f"{MAX_CONFIG_BYTES:,}")
    text = p.read_text()
    try:
        if p.suffix in (".toml", ".tml"):
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
        else:
            data = yaml_value(text) or {}
    except RecursionError:
        raise ConfigError(f"config file {p} cannot be parsed: its values are nested too deep") from None
    except Exception as exc:
        raise ConfigError(f"config file {p} cannot be parsed: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {p} must hold a mapping of options, got {type(data).__name__}")
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> RunConfig:
    """A RunConfig from a YAML or TOML file (optional) plus overrides (None: not given); one ConfigError if wrong."""
    data = read_config_file(path) if path is not None else {}
    given = {k: v for k, v in overrides.items() if v is not None}
    return RunConfig(**{**data, **given})

