"""One typed configuration: EngineConfig and RunConfig are the source of the Python API's keywords, the config
files and the CLI options, under the same names; a stored run resumes under the options it was started with."""

import inspect
import json
import sqlite3
import types
import typing
from collections.abc import Mapping, Sequence

import pytest
from typer.testing import CliRunner

import gepetto
from gepetto.cli import app
from gepetto.config import (
    ENGINE_FIELDS,
    SESSION_ONLY,
    ConfigError,
    EngineConfig,
    RunConfig,
    load_config,
    stored_options,
)
from gepetto.store.sqlite import RunStore
from gepetto.testing import sim

SIM = ["--task", "sim", "--task-lm", "sim:task", "--reflection-lm", "sim:reflection"]


def keywords(fn):
    return {n for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}


@pytest.mark.parametrize(("fn", "options"), [(gepetto.optimize, "OptimizeOptions"),
                                              (gepetto.optimize_async, "OptimizeOptions"),
                                              (gepetto.build_engine, "BuildOptions")])
def test_the_options_are_written_once_as_typed_keywords_of_the_api(fn, options):
    """The engine options are one typed dictionary, EngineOptions, in EngineConfig's order; optimize,
    optimize_async and build_engine unpack it (with the run's own options), so an editor and a type checker see
    every keyword with its type, and nothing travels through locals()."""
    from gepetto import api

    assert tuple(api.EngineOptions.__annotations__) == tuple(EngineConfig.model_fields)
    params = inspect.signature(fn).parameters
    assert [n for n, p in params.items() if p.kind is not p.VAR_KEYWORD] == ["seed_candidate", "trainset", "metric"]
    (unpacked,) = [p for p in params.values() if p.kind is p.VAR_KEYWORD]
    assert unpacked.annotation == f"Unpack[{options}]"
    keys = set(getattr(api, options).__annotations__)
    assert keys >= ENGINE_FIELDS | {"config", "valset", "program", "task_lm", "reflection_lm", "callbacks", "stop"}
    assert "locals()" not in inspect.getsource(api)


def members(annotation) -> set:
    """The types a value of `annotation` may have: the members of a union, each as the abstract type a caller
    may pass (a tuple[X, ...] as Sequence[X], a dict as a Mapping)."""
    out = set()
    for t in typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
            else (annotation,):
        origin, args = typing.get_origin(t), typing.get_args(t)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            t = Sequence[args[0]]
        elif origin is dict:
            t = Mapping[args]
        out.add(t)
    return out


def test_each_keyword_is_typed_once_as_a_config_field():
    """`EngineOptions` (what a call may pass) is generated from `EngineConfig`'s fields (what a config holds), so
    each keyword is typed once: Python's typing derives neither from the other for mypy (no mapped or indexed
    types; a TypedDict built at run time is Any to mypy), hence a generated module, which must be what the
    generator writes from the fields as they are. Each keyword takes at least what its field holds, and None."""
    from gepetto import _engine_options, _gen_options, api
    from gepetto.strategies import ParentSelector

    assert _gen_options.TARGET.read_text() == _gen_options.render(), (
        f"src/gepetto/_engine_options.py is not what EngineConfig's fields make: run `{_gen_options.COMMAND}`")
    assert api.EngineOptions is _engine_options.EngineOptions
    given = typing.get_type_hints(api.EngineOptions)
    narrower = []
    for name, field in EngineConfig.model_fields.items():
        held, taken = members(field.annotation) | {type(None)}, members(given[name])
        if not held <= taken:
            narrower.append(f"{name}: {given[name]} does not take {held - taken} ({field.annotation})")
    assert not narrower, narrower
    assert members(given["parent_selector"]) >= {str, ParentSelector, Mapping[str, typing.Any]}
    assert members(given["components"]) == {Sequence[str], type(None)}  # a tuple field takes any sequence


def test_evaluate_takes_the_engine_options_it_uses():
    """evaluate and evaluate_async unpack one typed dictionary (the sync one wraps the async one), which holds
    the engine options an evaluation uses; an unknown keyword is named."""
    from gepetto import api

    for fn in (gepetto.evaluate, gepetto.evaluate_async):
        (unpacked,) = [p for p in inspect.signature(fn).parameters.values() if p.kind is p.VAR_KEYWORD]
        assert unpacked.annotation == "Unpack[EvaluateOptions]"
    assert {"config", "max_concurrency", "task_lm_params", "rollout_timeout"} <= set(
        api.EvaluateOptions.__annotations__)
    with pytest.raises(ConfigError, match=r"max_concurency.*did you mean 'max_concurrency'"):
        gepetto.evaluate("x", [], lambda e, o, t: 1.0, max_concurency=2)
    assert inspect.iscoroutinefunction(gepetto.optimize_async) and inspect.iscoroutinefunction(gepetto.evaluate_async)


def test_every_run_option_is_a_cli_option_named_like_the_field():
    runner = CliRunner()
    res = runner.invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"})
    shown = res.output
    for name in RunConfig.model_fields:
        flag = "--task-option" if name == "task_options" else "--" + name.replace("_", "-")
        assert flag in shown, flag
    for old in ("--concurrency", "--target ", "--no-merge"):  # spellings of a version never released: gone
        assert old not in shown


def test_keywords_override_the_config_and_unknown_names_are_config_errors():
    task = sim.task()
    kw = {"program": task.program, "valset": task.valset, "task_lm": sim.SimTaskLM(),
          "reflection_lm": sim.SimReflectionLM()}
    cfg = EngineConfig(budget=90, seed=3, merge="off")
    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, config=cfg, budget=70, **kw)
    assert (engine.config.budget, engine.config.seed, engine.config.merge, engine.merge) == (70, 3, "off", None)
    assert cfg.budget == 90  # the given config is not changed
    a = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, config=cfg, **kw)
    b = gepetto.optimize(task.seed_candidate, task.trainset, task.metric, budget=90, seed=3, merge="off", **kw)
    assert a.to_dict() | {"wall_seconds": 0, "ledger": 0} == b.to_dict() | {"wall_seconds": 0, "ledger": 0}
    with pytest.raises(ConfigError, match=r"unknown option 'minibatch' \(did you mean 'minibatch_size'\?\)"):
        gepetto.optimize(task.seed_candidate, task.trainset, task.metric, minibatch=2, **kw)
    with pytest.raises(TypeError, match="unknown option 'concurrency'"):  # a TypeError too, as Python's would be
        gepetto.evaluate(task.seed_candidate, task.valset, task.metric, concurrency=2)
    with pytest.raises(ConfigError, match="budget: Input should be greater than or equal to 1"):
        gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, budget=0, **kw)
    with pytest.raises(ConfigError, match="accept: unknown accept 'sometimes'; accepted: non-decreasing, paired, "
                                          "strict"):
        EngineConfig(accept="sometimes")
    with pytest.raises(ConfigError, match="did you mean 'non-decreasing'"):  # the name before names took one style
        EngineConfig(accept="non_decreasing")


def test_a_run_config_is_flat(tmp_path):
    flat = load_config(reflection_attempts=2, accept="non-decreasing", components=["instruction"])
    assert flat.components == ("instruction",)
    (tmp_path / "run.yaml").write_text("task: sim\nreflection_attempts: 2\naccept: non-decreasing\n"
                                       "components: [instruction]\n")
    assert load_config(tmp_path / "run.yaml").model_dump() == flat.model_copy(update={"task": "sim"}).model_dump()
    assert load_config(tmp_path / "run.yaml", reflection_attempts=4).reflection_attempts == 4  # overrides win
    with pytest.raises(ConfigError, match="engine: unknown option"):  # no nested `engine:` table
        load_config(engine={"accept": "strict"})
    # what the store keeps: every option but a stop file (it stops one session only)
    stored = load_config(stop_file="STOP").stored()
    assert set(stored) == set(RunConfig.model_fields) - SESSION_ONLY
    assert RunConfig(**json.loads(json.dumps(stored))) == load_config()  # JSON round trip compares equal


@pytest.fixture
def cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_loop_options_from_the_cli_and_from_a_file(cli, tmp_path):
    res = cli("optimize", *SIM, "--budget", 60, "--max-concurrency", 2, "--accept", "non-decreasing",
              "--reflection-attempts", 2, "--reflection-temperatures", "[0, 0.5]", "--merge", "off",
              "--task-lm-params", "{temperature: 0}", "--proposer", "edit(evidence=4)", "--run", "a", "--storage",
              "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    config = RunStore("s.sqlite").get_run("a").config
    assert (config["max_concurrency"], config["accept"], config["reflection_attempts"], config["merge"],
            config["proposer"]) == (2, "non-decreasing", 2, "off", "edit(evidence=4)")
    assert config["reflection_temperatures"] == [0, 0.5] and config["task_lm_params"] == {"temperature": 0}
    (tmp_path / "run.yaml").write_text("task: sim\ntask_lm: sim:task\nreflection_lm: sim:reflection\nbudget: 60\n"
                                       "max_concurrency: 2\naccept: non-decreasing\nreflection_attempts: 2\n"
                                       "reflection_temperatures: [0, 0.5]\nmerge: off\n"
                                       "proposer: {edit: {evidence: 4}}\ntask_lm_params: {temperature: 0}\n")
    res = cli("optimize", "-c", tmp_path / "run.yaml", "--run", "b", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    assert RunStore("s.sqlite").get_run("b").config == config
    res = cli("optimize", *SIM, "--components", "[nope]", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2 and "components ['nope'] are not in the seed candidate" in res.output
    res = cli("optimize", *SIM, "--task-lm-params", "{unclosed", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2 and "--task-lm-params: not a YAML value" in res.output


def test_the_spellings_of_a_version_never_released_are_gone(cli):
    for old, new in (("--concurrency", "--max-concurrency"), ("--target", "--target-score")):
        res = cli("optimize", *SIM, old, "1", "--storage", "s.sqlite", "-q")
        assert res.exit_code == 2 and f"No such option: {old}" in res.output and new in res.output
    res = cli("optimize", *SIM, "--no-merge", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 2 and "No such option: --no-merge" in res.output


def test_a_stored_run_with_options_this_gepetto_does_not_know_is_refused_by_name(cli):
    """A run whose stored config has an option this gepetto does not read (here a nested `engine:` table) is
    refused on resume with the option's name, before anything is paid; the run is left as it was."""
    res = cli("optimize", *SIM, "--budget", 60, "--run", "r", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    store = RunStore("s.sqlite")
    config = store.get_run("r").config
    store.update_config("r", {k: v for k, v in config.items() if k != "reflection_attempts"}
                        | {"engine": {"reflection_attempts": config["reflection_attempts"]}})
    paid = store.count_rollouts("r")
    again = cli("optimize", "--run", "r", "--storage", "s.sqlite", "--budget", 80, "-q")
    assert again.exit_code == 2 and "engine: unknown option" in again.output
    assert RunStore("s.sqlite").count_rollouts("r") == paid
    assert "engine" in RunStore("s.sqlite").get_run("r").config  # not rewritten
    # repro f9 (round 2): evaluate said a bare "invalid configuration"; it says where the configuration came from
    scored = cli("evaluate", "r", "--storage", "s.sqlite")
    assert scored.exit_code == 2 and "its stored configuration does not load in this gepetto (it was written by " \
        "another version" in scored.output and "Use the gepetto version that wrote it" in scored.output


FORMAT_1 = {  # what a run of the sim task stored by gepetto before strategies had specs (2026-11-27) kept
    "parent_selector": "epsilon-greedy", "epsilon": 0.3, "accept": "paired", "accept_tolerance": 0.2, "racing": True,
    "racing_chunk": 4, "racing_confidence": None, "ray_address": None, "proposer": "edit", "evidence_size": 8,
    "gate_solved": 3, "rule_max_tokens": 90, "edit_rules": 2, "definitions": None, "fewshot": 2,
    "fewshot_share": 0.5, "use_merge": True, "max_merges": 5, "adaptive_merge": False,
    "reflection_max_tokens": 700, "reflection_chars": 6000}


def test_a_run_stored_in_the_format_before_specs_is_refused_on_resume_and_still_read(cli):
    """A run stored by the gepetto before strategies were named with their parameters (its options flat, its
    proposals' random numbers drawn from another seed string) is refused on resume with a message that says why,
    before anything is paid or written; evaluate and check read its options as specs."""
    res = cli("optimize", *SIM, "--budget", 60, "--run", "r", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    store = RunStore("s.sqlite")
    config = store.get_run("r").config
    old = {k: v for k, v in config.items() if k not in ("validation", "merge")} | FORMAT_1  # adaptive_fewshot too
    store.update_config("r", old)
    with sqlite3.connect("s.sqlite") as db:  # what such a run kept: no run format with its defaults
        (seq, data), = db.execute("SELECT seq, data FROM events WHERE run = 'r' AND kind = 'start'")
        start = json.loads(data)
        db.execute("UPDATE events SET data = ? WHERE seq = ?",
                   (json.dumps({**start, "defaults": {k: v for k, v in start["defaults"].items() if k != "format"}}),
                    seq))
    before = (store.count_rollouts("r"), len(store.events("r")))
    again = cli("optimize", "--run", "r", "--storage", "s.sqlite", "--budget", 80, "-q")
    assert again.exit_code == 2
    assert "run 'r' was stored by an earlier gepetto (run format 1, this one writes 2" in again.output
    assert "is not resumed" in again.output and "`evaluate` still read it" in again.output
    assert (RunStore("s.sqlite").count_rollouts("r"), len(RunStore("s.sqlite").events("r"))) == before
    assert RunStore("s.sqlite").get_run("r").config == old  # not rewritten
    read = RunConfig(**stored_options(old))
    assert (read.parent_selector, read.accept, read.validation, read.proposer, read.merge, read.fewshot) == (
        "epsilon-greedy(epsilon=0.3)", "paired(tolerance=0.2)", "racing(chunk=4)", "edit(rules=2)", "merge(max=5)",
        "fewshot(k=2, adaptive=False)")  # (a run stored before adaptive_fewshot existed had a fixed share)
    checked = cli("check", "--run", "r", "--storage", "s.sqlite")
    assert checked.exit_code == 0 and "stored by an earlier gepetto (run format 1)" in checked.output, checked.output


def test_a_run_started_under_other_defaults_is_refused_on_resume(cli, monkeypatch):
    """An unset option stands for the default of the gepetto that started the run (kept with its first session);
    a gepetto whose default changed since refuses to resume it, before anything is written, rather than continue
    it on another path. A run that set the option itself resumes."""
    import gepetto.config as config
    from gepetto.config import implicit_defaults

    for run, options in (("unset", []), ("set", ["--fewshot", 2, "--reflection-temperatures", "[0.5]"])):
        res = cli("optimize", *SIM, *options, "--budget", 60, "--run", run, "--storage", "s.sqlite", "-q")
        assert res.exit_code == 0, res.output
    store = RunStore("s.sqlite")
    assert store.events("unset", "start")[0]["data"]["defaults"] == implicit_defaults()
    before = (store.count_rollouts("unset"), len(store.events("unset")))
    monkeypatch.setattr(config, "FEWSHOT", 5)  # a later gepetto, whose defaults were measured again
    monkeypatch.setattr(config, "REWRITE_TEMPERATURES", (0.7,))
    res = cli("optimize", "--run", "unset", "--storage", "s.sqlite", "--budget", 80, "-q")
    assert res.exit_code == 2
    assert "fewshot: 4 then, 5 now" in res.output and "'rewrite': [1.0]" in res.output
    assert (RunStore("s.sqlite").count_rollouts("unset"), len(RunStore("s.sqlite").events("unset"))) == before
    res = cli("optimize", "--run", "set", "--storage", "s.sqlite", "--budget", 80, "-q")
    assert res.exit_code == 0, res.output
    assert [e["data"]["resumed"] for e in RunStore("s.sqlite").events("set", "start")] == [False, True]


def test_a_run_stored_without_demonstrations_resumes_without_them(cli):
    res = cli("optimize", *SIM, "--budget", 60, "--run", "r", "--storage", "s.sqlite", "-q")
    assert res.exit_code == 0, res.output
    store = RunStore("s.sqlite")
    config = store.get_run("r").config
    assert config["fewshot"] == "fewshot"  # k not set: the built-ins' default (config.FEWSHOT) where a valset is apart
    store.update_config("r", {**config, "fewshot": "off"})
    more = cli("optimize", "--run", "r", "--storage", "s.sqlite", "--budget", 80, "-q")
    assert more.exit_code == 0, more.output
    assert RunStore("s.sqlite").get_run("r").config["fewshot"] == "off"
    from gepetto.engine.proposers import FewShot
    from gepetto.parts import resolve

    assert EngineConfig(fewshot=0).fewshot == EngineConfig(fewshot="0").fewshot == "fewshot(k=0)"
    assert EngineConfig(fewshot=False).fewshot == "off"  # (YAML reads `fewshot: off` as false)
    assert not isinstance(resolve("proposer", None, EngineConfig(fewshot=0)), FewShot)
    assert not isinstance(resolve("proposer", None, EngineConfig(fewshot="off")), FewShot)
    assert isinstance(resolve("proposer", None, EngineConfig()), FewShot)


def test_a_run_stored_before_defaults_were_kept_is_refused_on_resume(tmp_path):
    """Such a run (format 1 too) cannot be told apart from one started under today's defaults: it is refused."""
    import sqlite3

    import gepetto
    from gepetto.testing import sim

    task = sim.task(kinds=6, components=1)

    def session(budget):
        return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                                budget=budget, seed=3, fewshot=0, storage=tmp_path / "s.sqlite", run="r")

    session(90)
    with sqlite3.connect(tmp_path / "s.sqlite") as db:  # what such a run has: no defaults kept with it
        (seq, data), = db.execute("SELECT seq, data FROM events WHERE run = 'r' AND kind = 'start'")
        db.execute("UPDATE events SET data = ? WHERE seq = ?",
                   (json.dumps({k: v for k, v in json.loads(data).items() if k != "defaults"}), seq))
    with pytest.raises(ConfigError, match=r"run 'r' was stored by an earlier gepetto \(run format 1"):
        session(180)


def test_hostile_config_files_are_one_line_config_errors_in_no_time(cli, tmp_path):
    """Repro a13 (round 2): a YAML alias bomb hung `gepetto optimize -c`, a 50 MB file took minutes to parse, a
    20-digit seed exited 1 with a raw OverflowError."""
    import time

    bomb = "".join(f"{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n"
                   for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True))
    files = {
        "bomb.yaml": ("task: sim\n" + bomb, "an alias (*a); config files take no anchors or aliases"),
        "huge.yaml": ("task: sim\nx: '" + "a" * 1_100_000 + "'\n", "a config file of options is at most 1,000,000"),
        "deep.yaml": ("task: sim\nx: " + "[" * 20000 + "]" * 20000 + "\n", "nested too deep"),
        "seed.yaml": ("task: sim\nbudget: 30\nseed: 99999999999999999999999999999\n", "seed"),
    }
    for name, (text, said) in files.items():
        (tmp_path / name).write_text(text)
        t0 = time.monotonic()
        res = cli("optimize", "-c", str(tmp_path / name), "--task-lm", "sim:task", "--reflection-lm",
                  "sim:reflection", "--storage", str(tmp_path / "c.sqlite"), "--run", name, "-q")
        assert res.exit_code == 2 and said in res.output, (name, res.output)
        assert "Traceback" not in res.output and time.monotonic() - t0 < 20, name
