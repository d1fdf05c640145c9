"""One typed configuration: `EngineConfig` (the loop's options) and `RunConfig` (a stored run: the engine's options
plus the task, the LMs and the store's). The Python API's keyword arguments, the config files and the CLI options
(`--max-concurrency` for `max_concurrency`, ...) all derive from these two models, with the same names.

Each field says what it is (`description`) and where the CLI shows it (`group`); an invalid value or an unknown
name raises one `ConfigError` that names the field and what it accepts.
"""

from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from gepetto.program import Executor

Accept = Literal["strict", "non_decreasing", "paired"]
ProposerName = Literal["auto", "edit", "rewrite"]
AUTO = "auto"  # a strategy the run's route chooses (engine/route.py)
CacheMode = Literal["auto", "always", "off"]
ExecutorName = Literal["local", "ray"]  # the names of engine/executors.py's EXECUTORS
EXECUTOR_NAMES: tuple[str, ...] = get_args(ExecutorName)
TrackingName = Literal["mlflow"]  # experiment trackers (gepetto.tracking)
DEFAULT_TASK_LM = "local:qwen2.5-coder-0.5b"  # the embedded default (docs/lm.md)
DEFAULT_REFLECTION_LM = "local:qwen2.5-coder-1.5b"

# the groups the CLI shows options in (`gepetto optimize --help`)
RUN, STOP, SEARCH, REFLECTION, EDIT, MERGE, TASK = (
    "Run", "Budget and stopping", "Search", "Reflection", "Edit proposer", "Merge", "Task and data")

# options that may change when a stored run is resumed (they do not alter the path the run has taken so far)
RESUMABLE_CHANGES = frozenset({"budget", "time_limit", "patience", "target_score", "max_concurrency", "prices",
                               "max_cost_usd", "max_lm_failures", "lm_retry_pause", "executor", "ray_address"})
# options of one session, never stored with a run (a stop file stops this session only; each session of a tracked
# run is tracked as its own run, and only when asked for)
SESSION_ONLY = frozenset({"stop_file", "tracking"})
# prefix of a task, an LM or a strategy that is a Python object given to gepetto.optimize() (not loadable from a
# name): `python:MODULE:QUALNAME`
PYTHON = "python:"
FEWSHOT = 4  # the built-in proposers' demonstrations per component when `fewshot` is not set
# the default `reflection_temperatures` of each kind of request (engine/proposers.py): a whole rewrite sampled,
# since a small model answering greedily copies the seed back, and a rule greedy first (docs/design-notes.md)
REWRITE_TEMPERATURES, RULE_TEMPERATURES = (1.0,), (0.0, 0.7, 1.0)


def implicit_defaults() -> dict[str, Any]:
    """What the options left unset stand for in this gepetto, by option. Kept with a stored run: defaults change as
    they are measured, and a run resumed by a gepetto that reads an unset option otherwise would not continue the
    same run (runner.py refuses it)."""
    return {"fewshot": FEWSHOT,
            "reflection_temperatures": {"rewrite": list(REWRITE_TEMPERATURES), "rule": list(RULE_TEMPERATURES)}}

# the swappable strategies of the loop (engine/strategies.py): option -> its built-in names (the first is the
# default); each option also takes an object given to gepetto.optimize(), stored as python:MODULE:QUALNAME
STRATEGIES: dict[str, tuple[str, ...]] = {
    "parent_selector": ("auto", "pareto", "current-best", "epsilon-greedy"),
    "component_selector": ("round-robin", "all"),
    "minibatch_sampler": ("epoch-shuffled",),
    "proposer": ("auto", "rewrite", "edit"),
    "accept": ("strict", "non_decreasing", "paired"),
}


class ConfigError(ValueError):
    """A configuration a user wrote is wrong; the message names the field and what is accepted."""


class UnknownOptionError(ConfigError, TypeError):
    """A keyword argument no function of the API takes (a TypeError too, as Python's own would be)."""


def _field(default: Any, description: str, group: str, choices: tuple[str, ...] = (), *,
           cli_aliases: tuple[str, ...] = (), **constraints: Any) -> Any:
    """A field with its description and its CLI group (and other flags for its CLI option, if any)."""
    extra: dict[str, Any] = {"group": group, **({"choices": list(choices)} if choices else {})}
    if cli_aliases:
        extra["cli_aliases"] = list(cli_aliases)
    if isinstance(default, (dict, list)):  # a fresh copy for each config
        return Field(default_factory=lambda: copy.deepcopy(default), description=description,
                     json_schema_extra=extra, **constraints)
    return Field(default, description=description, json_schema_extra=extra, **constraints)


def _one_of(names: tuple[str, ...]) -> str:
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


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
    """Options of the loop. Defaults follow the paper where it says, and what works with small LMs otherwise."""

    budget: int = _field(200, "Rollout budget (one program run on one example).", RUN, ge=1)
    seed: int = _field(0, "Random seed (sampling; built-in tasks: their splits too).", RUN)
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
    # where rollouts run (engine/executors.py): in this process, or as Ray tasks on the cluster at `ray_address`
    # (or a local Ray started for the run); in Python also an Executor object. The run is the same either way
    executor: ExecutorName | Executor = _field(
        "local", "Where rollouts run: local (this process) or ray (Ray tasks, extra gepetto[ray]; "
        "docs/integrations.md); in Python also an Executor object.", RUN)
    ray_address: str | None = _field(None, "With executor ray: the Ray cluster to join (default: $RAY_ADDRESS, "
                                     "else a local Ray started for the run).", RUN)
    # the search
    minibatch_size: int = _field(3, "Training examples per reflection minibatch.", SEARCH, ge=1)
    seek_failures: int = _field(0, "Up to this many more training examples a parent runs when its minibatch has "
                                "solved ones, so that reflection sees mistakes (its own component's) in their "
                                "place; 0: off.", SEARCH, ge=0)
    # the strategies (engine/strategies.py, docs/strategies.md): a built-in name, or python:MODULE:QUALNAME for an
    # object given to gepetto.optimize()
    parent_selector: str = _field("auto", "How the parent of a proposal is chosen: auto (the run's route: current-best "
                                  "on the labels route, else pareto), pareto (in proportion to the examples it is "
                                  "best on), current-best, epsilon-greedy (current-best, or with probability epsilon "
                                  "any candidate).", SEARCH, choices=STRATEGIES["parent_selector"])
    epsilon: float = _field(0.1, "epsilon-greedy: probability of a random parent.", SEARCH, ge=0, le=1)
    component_selector: str = _field("round-robin", "Which components a proposal changes: round-robin (one, "
                                     "each parent in turn) or all.", SEARCH, choices=STRATEGIES["component_selector"])
    minibatch_sampler: str = _field("epoch-shuffled", "Which training examples a parent runs on before reflection: "
                                    "epoch-shuffled (the next ones of a seeded order shuffled each epoch, skipping "
                                    "solved ones).", SEARCH, choices=STRATEGIES["minibatch_sampler"])
    accept: str = _field("strict", "A child passes its minibatch test when it scores higher (strict) or "
                         "at least as high (non_decreasing) as its parent, or (paired, for a noisy task LM or "
                         "judge) when its mean paired gain exceeds accept_tolerance, a tie being tested again on "
                         "fresh examples.", SEARCH, choices=STRATEGIES["accept"])
    accept_tolerance: float = _field(0.0, "accept paired: a mean gain per example within this of 0 is a tie "
                                     "(tested again once).", SEARCH, ge=0, le=1)
    proposals_per_round: int = _field(1, "Proposals tried at once (faster against slow parallel LM APIs).",
                                      SEARCH, ge=1)
    # racing validation (engine/racing.py): an accepted child runs the validation set in chunks and stops as soon
    # as it provably cannot enter the Pareto front nor become the best (exact: same front and best as a full pass)
    racing: bool = _field(False, "Validate an accepted child in chunks and stop once it provably can neither "
                          "enter the Pareto front nor become the best (exact; saves validation rollouts); the "
                          "budget's tail is spent on a last proposal whose child may end partial.", SEARCH)
    racing_chunk: int = _field(5, "With racing: validation examples run between two checks.", SEARCH, ge=1)
    racing_confidence: float | None = _field(
        None, "With racing: also cut a child once a one-sided sign test says, at this confidence, that a front "
        "member is better (never below the child, above it on enough examples run; 5 at 0.95). Not exact: "
        "default none (proof only).", SEARCH, gt=0.5, lt=1)
    components: tuple[str, ...] | None = _field(
        None, "Components to evolve (YAML list); default: all of the seed's.", SEARCH)
    # component -> what kind of text it is ("a Python regular expression that ..."). A described component is an
    # artifact, not an instruction: reflection is told the description and keeps that kind of text, vetting
    # takes it verbatim, and the edit proposer rewrites it whole instead of appending a rule line
    component_descriptions: dict[str, str] | None = _field(
        None, "What kind of text a component is (YAML mapping component: description); a described component "
        "is an artifact, rewritten whole and kept verbatim.", SEARCH)
    # proposing: "rewrite" is the paper's full rewrite of the component from a minibatch (engine/reflect.py);
    # "edit" proposes one rule for one frequent mistake, gated on failures and solved cases (engine/edits.py);
    # "auto" takes the run's route, chosen from the examples and the seed's first rollouts (engine/route.py)
    proposer: str = _field("auto", "How children are proposed: auto (chosen from the seed's first rollouts: edit "
                           "with a first draft of rules when the answers are a closed set of labels, else "
                           "rewrite), rewrite (a whole new text) or edit (one rule per proposal).", REFLECTION,
                           choices=STRATEGIES["proposer"])
    reflection_attempts: int = _field(3, "Reflection calls per proposal (a rejected answer is retried).",
                                      REFLECTION, ge=1)
    # None: each kind of request has its own schedule (REWRITE_TEMPERATURES, RULE_TEMPERATURES)
    reflection_temperatures: tuple[float, ...] | None = _field(
        None, "Temperature of each reflection attempt (YAML list; the last one repeats); default: 1.0 for every "
        "rewrite, 0, 0.7, 1.0 for the edit proposer's rules.", REFLECTION)
    reflection_max_tokens: int = _field(700, "Longest reflection answer (tokens).", REFLECTION, ge=1)
    max_component_chars: int | None = _field(
        None, "Length budget of each instruction (characters; default none): reflection is told it and longer "
        "proposals are rejected before any rollout.", REFLECTION, ge=1)
    reflection_chars: int = _field(6000, "Longest reflection prompt (characters; long traces are cut).",
                                   REFLECTION, ge=1)
    evidence_size: int = _field(8, "Paid training rollouts a parent needs before its mistakes are grouped.",
                                EDIT, ge=0)
    gate_solved: int = _field(3, "Solved examples added to a child's test, so rules that break them fail.",
                              EDIT, ge=0)
    rule_max_tokens: int = _field(90, "Longest rule answer (tokens).", EDIT, ge=1)
    edit_rules: int | None = _field(None, "Rules per edit proposal, each for another failure pattern; the child is "
                                    "tested on every pattern's failures and on solved cases, and validated once for "
                                    "all. Default: 3 on the labels route, else 1.", EDIT, ge=1)
    definitions: int | None = _field(None, "Edit proposer: the run's first proposal on a component runs the parent on "
                                     "up to this many training examples and drafts one rule per right answer seen "
                                     "there (from up to 4 of its inputs), all in one child; 0: off. Default: 60 on the "
                                     "labels route, else 0.", EDIT, ge=0)
    # few-shot demonstrations (engine/demos.py): solved training examples written into a component's text; on by
    # default with the built-in proposers (docs/design-notes.md), with a proposer of one's own only when asked, and
    # never in a run with no valset apart (it has no example to show)
    fewshot: int | None = _field(None, "Most demonstrations (solved training examples) per component; 0: none. A "
                                 f"share of proposals adds one instead of asking reflection. Default: {FEWSHOT} with "
                                 "a built-in proposer (none when every training example is also a validation "
                                 "example).", EDIT, ge=0)
    fewshot_share: float = _field(0.5, "With fewshot: the share of proposals that add a demonstration.", EDIT,
                                  ge=0, le=1)
    # on by default: fewer demonstrations are wasted where they do not help (docs/design-notes.md)
    adaptive_fewshot: bool = _field(True, "With fewshot: learn the share as the run goes, fewshot_share weighted "
                                    "by how often demonstrations and other proposals passed their tests.", EDIT)
    use_merge: bool = _field(True, "System-aware merge of lineages that share an ancestor.", MERGE)
    max_merges: int = _field(30, "Merges at most.", MERGE, ge=0)
    # how often a due merge is tried, learnt from this run's merges (engine/merge.py `merge_chance`); an iteration
    # whose merge is skipped, or finds no pair to merge, makes a proposal instead of passing idle
    adaptive_merge: bool = _field(False, "Try a due merge with probability (merges accepted + 2) / (merges tried + "
                                  "2), learnt as the run goes; a skipped merge, or one with no pair to merge, "
                                  "makes room for a proposal in the same iteration.", MERGE)
    # price table: LM name -> [dollars per million input tokens, per million output tokens]
    prices: dict[str, tuple[float, float]] = _field(
        {}, "Prices per million tokens (YAML mapping LM name: [input, output]), for the cost ledger.", RUN)

    @field_validator(*STRATEGIES)
    @classmethod
    def _strategy_name(cls, v: str, info: ValidationInfo) -> str:
        names = STRATEGIES[str(info.field_name)]
        if v in names or (v.startswith(PYTHON) and len(v) > len(PYTHON)):
            return v
        raise ValueError(f"Input should be {_one_of(names)} (or an object given to gepetto.optimize())")

    @model_validator(mode="after")
    def _strategies_fit(self) -> EngineConfig:
        if self.component_selector == "all" and self.proposer == "edit":
            raise ValueError("component_selector 'all' needs proposer 'rewrite': the edit proposer changes one "
                             "component per proposal")
        if self.racing_confidence is not None and not self.racing:
            raise ValueError("racing_confidence needs racing=True (it is a cut rule of racing validation)")
        return self

    @property
    def demonstrations(self) -> int:
        """Most demonstrations per component with a built-in proposer: `fewshot`, or FEWSHOT when it is not set."""
        return FEWSHOT if self.fewshot is None else self.fewshot

    _executor_objects: ClassVar[bool] = True  # an Executor object is an option of one process, never stored

    @field_validator("rollout_timeout", mode="before")
    @classmethod
    def _seconds(cls, v: Any) -> Any:
        # strict: a flag or a text is a mistake, not a number of seconds to guess from
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            raise ValueError("must be a number of seconds above 0 (or None)")
        return v

    @field_validator("executor", mode="before")
    @classmethod
    def _known_executor(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in EXECUTOR_NAMES:
                raise ValueError(f"unknown executor {v!r}; accepted: {', '.join(EXECUTOR_NAMES)}")
        elif not cls._executor_objects:
            raise ValueError(f"a stored run takes an executor by name ({', '.join(EXECUTOR_NAMES)}), not an object "
                             f"({type(v).__name__}): run without storage= to use it")
        elif not isinstance(v, Executor):
            raise ValueError(f"one of {', '.join(EXECUTOR_NAMES)} or an Executor object (async run(...) and aclose()), "
                             f"got {type(v).__name__}")
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
    executor: ExecutorName = _field(
        "local", "Where rollouts run: local (this process) or ray (Ray tasks, extra gepetto[ray]; "
        "docs/integrations.md).", RUN)

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


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The options in a YAML or TOML file, as a mapping (not validated yet)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist")
    text = p.read_text()
    try:
        if p.suffix in (".toml", ".tml"):
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text) or {}
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

