"""Strategies named with their parameters: one written form (the spec) for files, the CLI and a stored run, the
strategy object in Python, each parameter declared once, on the strategy."""

import asyncio
import re

import pytest

import gepetto
from gepetto.config import SPECS, ConfigError, EngineConfig, load_config
from gepetto.engine.proposers import Edit, FewShot
from gepetto.engine.racing import Racing
from gepetto.engine.strategies import EpsilonGreedy, Paired
from gepetto.specs import REGISTRY, canonical, knob_fields, parse_spec
from gepetto.testing import ScriptedLM, sim


def test_a_spec_is_a_name_with_parameters_or_a_table_of_one_key():
    assert parse_spec("pareto") == ("pareto", {})
    assert parse_spec(" edit( rules = 3, definitions=60 ) ") == ("edit", {"rules": 3, "definitions": 60})
    assert parse_spec("epsilon-greedy(epsilon=0.2)") == ("epsilon-greedy", {"epsilon": 0.2})
    assert parse_spec("racing(confidence=null)") == ("racing", {"confidence": None})  # as YAML and JSON write it
    assert parse_spec("fewshot(adaptive=false, k=2)") == ("fewshot", {"adaptive": False, "k": 2})
    assert parse_spec("ray(address='ray://head:10001')") == ("ray", {"address": "ray://head:10001"})
    assert parse_spec({"edit": {"rules": 3}}) == parse_spec("edit(rules=3)") == ("edit", {"rules": 3})
    assert parse_spec({"pareto": None}) == ("pareto", {})
    for bad in ("edit(3)", "edit(rules=)", "edit(rules=3", "1edit", "edit(rules=open('x'))", "edit(**x)"):
        with pytest.raises(ValueError, match="is not a strategy"):
            parse_spec(bad)
    with pytest.raises(ValueError, match="one key, its name"):
        parse_spec({"edit": {}, "rewrite": {}})


def test_a_spec_is_stored_in_one_written_form():
    # the parameters in the order the strategy declares them, those at their defaults left out
    assert canonical("proposer", "edit(definitions=60, rules=3, gate_solved=3)") == "edit(rules=3, definitions=60)"
    assert canonical("proposer", Edit(rules=3, definitions=60)) == "edit(rules=3, definitions=60)"
    assert canonical("accept", {"paired": {"tolerance": 0}}) == "paired" == Paired().spec
    assert EngineConfig(parent_selector=EpsilonGreedy(0.25)).parent_selector == "epsilon-greedy(epsilon=0.25)"
    assert EngineConfig(validation=Racing(chunk=5, confidence=0.9)).validation == "racing(confidence=0.9)"
    assert Edit(rules=3) == Edit(rules=3) and Edit(rules=3) != Edit(rules=4)
    with pytest.raises(ConfigError, match="edit: rules=0: Input should be greater than or equal to 1"):
        Edit(rules=0)


def test_every_option_naming_a_strategy_lists_the_registered_classes():
    """The config names each option's built-ins (for the CLI's help); the strategy classes register themselves
    under those names, with their parameters declared once on them."""
    assert {option: set(REGISTRY[option]) for option in SPECS} == {o: set(n) for o, n in SPECS.items()}
    assert set(REGISTRY) == set(SPECS)
    assert [f.name for f in knob_fields(REGISTRY["proposer"]["edit"])] == [
        "rules", "definitions", "evidence", "gate_solved", "rule_max_tokens", "max_tokens", "prompt_chars"]
    # the auto proposer takes the edit proposer's parameters (and so rewrite's) and rewrite's trim, each unset
    auto = REGISTRY["proposer"]["auto"]()
    assert list(auto.knobs()) == [f.name for f in knob_fields(Edit)] + ["trim"]
    assert set(auto.knobs().values()) == {None}


def test_each_strategys_help_is_written_from_its_class():
    """A built-in strategy's parameters, their defaults and what each does are declared once, on its class (its
    knobs and its docstring's `Args:`): the option's help (the CLI's, the docs' options table), the config errors
    and the docs' tables are written from it, and drifted when they were copies (accept's help had no `retests`,
    edit's nowhere had `max_tokens` and `prompt_chars`)."""
    from gepetto.specs import described, signature

    hooks = docs_hooks()
    tables = hooks.on_page_markdown(f"# Strategies\n\n{hooks.SPECS_MARKER}\n")
    for option, named in REGISTRY.items():
        help_ = EngineConfig.model_fields[option].description or ""
        for name, cls in named.items():
            summary, args = described(cls)
            knobs = [f.name for f in knob_fields(cls)]
            assert list(args) == knobs, f"{cls.__name__}: its docstring's Args: {list(args)}, its knobs {knobs}"
            assert summary and f"{signature(cls)}: {summary[:1].lower()}{summary[1:]}" in help_, (option, name)
            assert f"| `{signature(cls)}` | {summary}" in tables
            assert all(f"`{k}`: {args[k]}" in tables for k in knobs)
    assert signature(Paired) == "paired(tolerance=0.0, retests=1)"
    assert signature(REGISTRY["accept"]["strict"]) == "strict"
    assert "paired(tolerance=0.0, retests=1): for a noisy task LM" in EngineConfig.model_fields["accept"].description
    with pytest.raises(ConfigError, match=r"accepted: tolerance \(default 0\.0\): A mean gain per example within "
                                          r"this of 0 is a tie, tested again\.; retests \(default 1\): How many"):
        EngineConfig(accept="paired(tolerence=0.1)")
    with pytest.raises(ConfigError, match=r"paired: retests=-1: .*greater than or equal to 0 \(retests: How many"):
        Paired(retests=-1)


def test_every_spec_the_docs_write_is_one_a_strategy_takes():
    """Where the docs and the README write a built-in with parameters (`edit(rules=3)`, as an example), each
    parameter is one of the strategy's, its value within bounds: a renamed or removed parameter fails here."""
    from pathlib import Path

    root = Path(__file__).parents[1]
    # (docs/history.md keeps the measured history verbatim, in the names of its day)
    pages = [root / "README.md", *sorted(p for p in (root / "docs").glob("*.md") if p.name != "history.md")]
    options: dict[str, list[str]] = {}
    for option, named in REGISTRY.items():
        for name in named:
            options.setdefault(name, []).append(option)  # ("auto" and "off" serve two options)
    written, wrong = [], []
    for page in pages:
        for spec in re.findall(r"(?<![\w.-])([a-z][a-z-]*\([^()`]*\))", page.read_text()):
            name = spec.split("(")[0]
            if name not in options or "=" not in spec:
                continue
            written.append(spec)
            errors = []
            for option in options[name]:
                takes = {f.name for f in knob_fields(REGISTRY[option][name])}
                unknown = set(re.findall(r"(\w+)\s*=", spec)) - takes
                try:
                    if unknown:
                        raise ConfigError(f"{spec}: {name} takes no {sorted(unknown)}")
                    if Ellipsis in parse_spec(spec)[1].values():  # a placeholder value: `rules=k`, `address=...`
                        continue
                except ValueError as exc:
                    if isinstance(exc, ConfigError):
                        errors.append(f"{page.name}: {exc}")
                    continue
                try:
                    canonical(option, spec)
                except ConfigError as exc:
                    errors.append(f"{page.name}: {exc}")
            if len(errors) == len(options[name]):
                wrong += errors
    assert len(written) > 20 and not wrong, wrong


def docs_hooks():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("docs_hooks", Path(__file__).parents[1] / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_a_toml_file_names_a_strategy_with_a_table(tmp_path):
    (tmp_path / "run.toml").write_text('task = "sim"\nmerge = false\n[proposer.edit]\nrules = 3\n'
                                       '[parent_selector.epsilon-greedy]\nepsilon = 0.3\n')
    cfg = load_config(tmp_path / "run.toml")
    assert (cfg.proposer, cfg.parent_selector, cfg.merge) == ("edit(rules=3)", "epsilon-greedy(epsilon=0.3)", "off")


def test_a_built_in_object_given_to_an_engine_is_made_for_its_run():
    """A strategy object of the built-ins (not a spec) given to the engine is bound to the run's options, as the
    one its spec names would be: its test size follows the run's minibatch."""
    task = sim.task(kinds=4)
    engine = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                  program=task.program, task_lm=sim.SimTaskLM(),
                                  reflection_lm=ScriptedLM(lambda m, p: "<rule></rule>"),
                                  config=EngineConfig(budget=60, minibatch_size=4, fewshot=0),
                                  proposer=Edit(rules=2, gate_solved=1), parent_selector=EpsilonGreedy(0.0))
    proposer = engine.strategies.proposer
    assert isinstance(proposer, Edit) and proposer.test_size == 4 + 1 and engine.plan.child_test == 5
    result = asyncio.run(engine.run())
    assert result.rollouts_used <= 60
    wrapped = gepetto.build_engine(task.seed_candidate, task.trainset, task.metric, valset=task.valset,
                                   program=task.program, task_lm=sim.SimTaskLM(), reflection_lm=sim.SimReflectionLM(),
                                   config=EngineConfig(budget=60, fewshot=2), proposer=Edit())
    assert isinstance(wrapped.strategies.proposer, FewShot) and wrapped.strategies.proposer.test_size == 3 + 3
