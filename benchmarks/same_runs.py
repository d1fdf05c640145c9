"""Do two builds of gepetto take the same runs? Runs a few configurations on simulated tasks (gepetto.testing: the
simulated task and LMs, and a scripted labels task) and writes each run's result and event stream as JSON, with
wall-clock fields dropped, so that two builds can be compared byte for byte.

    python benchmarks/same_runs.py dump OUT_DIR          # one JSON file per configuration, and digests.txt
    python benchmarks/same_runs.py compare DIR_A DIR_B   # which files differ, and the first difference of each
    python benchmarks/same_runs.py compare DIR_A DIR_B --route-as-specs   # the route's settings and the idle-option
        # warning written as after issue 39 item 1 (strategy specs) on both sides, then compared

The options are spelt for the build at hand: strategy parameters as specs (`edit(rules=2)`) where the build has
them, as flat options (`edit_rules=2`) where it does not. `--proposal-rng TEMPLATE` sets the seed string of the
proposals' random generator (engine/loop.py `PROPOSAL_RNG`) where the build has one, e.g. the old
"{seed}:{iteration}:edit", to compare runs across a change of that name.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import tempfile
import warnings
from enum import Enum
from pathlib import Path
from typing import Any

import gepetto
from gepetto.config import EngineConfig
from gepetto.engine import events as ev
from gepetto.testing import ScriptedLM, sim
from gepetto.types import Example

SPECS = "edit_rules" not in EngineConfig.model_fields  # strategies own their knobs (issue 39, item 1)

LABELS = ["balance", "bill_due", "card_declined", "pin_change", "transfer", "freeze", "rates", "travel"]
TOPIC = {"balance": "money", "bill_due": "electricity", "card_declined": "shop", "pin_change": "code",
         "transfer": "sending", "freeze": "lock", "rates": "interest", "travel": "abroad"}


def labels_examples(n: int, prefix: str) -> list[Example]:
    return [Example({"message": f"{prefix} {i}: about my {TOPIC[LABELS[i % 8]]}"}, gold=LABELS[i % 8],
                    id=f"{prefix}-{i}") for i in range(n)]


def classifier(messages: Any, params: Any) -> str:
    """A task LM that answers a label when the instruction has a rule naming the message's topic word."""
    system, user = messages[0]["content"], messages[-1]["content"]
    for label, word in TOPIC.items():
        if word in user and re.search(rf"{word}\b.*answer {label}", system):
            return label
    return "balance"


def rule_writer(messages: Any, params: Any) -> str:
    """Writes the rule for the answer it is asked about; about half of its answers (by a hash of the request)
    name another answer's topic word, so that a run needs several proposals."""
    user = messages[-1]["content"]
    label = re.search(r"answer (\w+)\.\" Describe", user) or re.search(r"say when to answer (\w+)", user)
    if label is None:
        return "<rule></rule>"
    digest = hashlib.sha256(repr((messages, sorted(params.items()))).encode()).digest()
    word = TOPIC.get(label.group(1), "thing") if digest[0] % 2 else TOPIC[LABELS[digest[1] % 8]]
    return f"<rule>If the message is about the {word}, answer {label.group(1)}.</rule>"


def labels_metric(example: Example, output: Any, trace: Any) -> gepetto.Score:
    if str(output).strip() == example.gold:
        return gepetto.Score(1.0, f"Correct: the intent is '{example.gold}'.")
    return gepetto.Score(0.0, f"Incorrect: answered '{output}', the correct intent is '{example.gold}'.")


def options(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    return new if SPECS else old


# name -> (task, options); every run has seed 0 and its own budget
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "sim-default": ("sim", {"budget": 300}),
    "sim-noisy-default": ("sim-noisy", {"budget": 400}),
    "sim-two-components": ("sim-2", {"budget": 400}),
    "labels-default": ("labels", {"budget": 300}),
    "labels-round-of-two": ("labels", {"budget": 400, "proposals_per_round": 2}),
    "labels-edit-given": ("labels", options({"proposer": "edit", "edit_rules": 2}, {"proposer": "edit(rules=2)"})),
    "labels-auto-rules-5": ("labels", options({"edit_rules": 5}, {"proposer": "auto(rules=5)"})),
    "sim-auto-rules-5": ("sim", options({"edit_rules": 5}, {"proposer": "auto(rules=5)"})),  # warns once
    "sim-strategies": ("sim-noisy", {"budget": 400, "proposals_per_round": 2, **options(
        {"parent_selector": "epsilon-greedy", "epsilon": 0.3, "accept": "paired", "accept_tolerance": 0.1,
         "racing": True, "racing_chunk": 4},
        {"parent_selector": "epsilon-greedy(epsilon=0.3)", "accept": "paired(tolerance=0.1)",
         "validation": "racing(chunk=4)"})}),
    "sim-fewshot-fixed": ("sim-noisy", {"budget": 400, **options(
        {"fewshot": 2, "fewshot_share": 0.7, "adaptive_fewshot": False},
        {"fewshot": "fewshot(k=2, share=0.7, adaptive=False)"})}),
    "sim-merge-seek": ("sim-2", {"budget": 400, "seek_failures": 2, **options(
        {"adaptive_merge": True, "max_merges": 3}, {"merge": "merge(max=3, adaptive=True)"})}),
    "sim-rewrite-knobs": ("sim-noisy", {"budget": 300, **options(
        {"proposer": "rewrite", "reflection_max_tokens": 300, "reflection_chars": 3000},
        {"proposer": "rewrite(max_tokens=300, prompt_chars=3000)"})}),
}
for _name, (_task, _opts) in CONFIGS.items():
    _opts.setdefault("budget", 300)


def task_args(task: str) -> dict[str, Any]:
    if task == "labels":
        return {"seed_candidate": f"Classify the message: {', '.join(LABELS)}.",
                "trainset": labels_examples(48, "train"), "metric": labels_metric,
                "valset": labels_examples(16, "val"), "task_lm": ScriptedLM(classifier),
                "reflection_lm": ScriptedLM(rule_writer)}
    t = sim.task(n_train=30, n_val=16, kinds=8, components=2 if task == "sim-2" else 1)
    noise = 0.3 if task == "sim-noisy" else 0.0
    return {"seed_candidate": t.seed_candidate, "trainset": t.trainset, "metric": t.metric, "valset": t.valset,
            "program": t.program, "task_lm": sim.SimTaskLM(),
            "reflection_lm": sim.SimReflectionLM(noise=noise, max_rules=1, seed=3)}


def plain(obj: Any) -> Any:
    """An event's fields as JSON data (records and results by their to_dict, enums by value)."""
    if isinstance(obj, Enum):
        return obj.value
    if hasattr(obj, "to_dict") and not isinstance(obj, ev.Event):
        return plain(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def steady(data: Any) -> Any:
    """`data` without what the clock decides: wall time and the LM seconds of the ledger."""
    if isinstance(data, dict):
        return {k: steady(v) for k, v in data.items() if k not in ("wall_seconds", "seconds")}
    if isinstance(data, list):
        return [steady(v) for v in data]
    return data


def run(name: str, storage: Path | None = None) -> dict[str, Any]:
    task, opts = CONFIGS[name]
    events: list[dict[str, Any]] = []

    def record(event: ev.Event) -> None:
        events.append({"kind": event.kind, **plain(event.to_dict())})

    args = task_args(task)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = gepetto.optimize(**args, seed=0, callbacks=record, progress=False, **opts,
                                  **({"storage": storage, "run": name} if storage else {}))
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    return steady({"result": result.to_dict(), "events": events, "warnings": said})


def dump(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for name in CONFIGS:
        text = json.dumps(run(name), indent=1, sort_keys=True)
        (out / f"{name}.json").write_text(text + "\n")
        lines.append(f"{hashlib.sha256(text.encode()).hexdigest()[:16]}  {name}")
        print(lines[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:  # a stored run, stopped and resumed with a larger budget
        storage = Path(tmp) / "s.sqlite"
        CONFIGS["labels-default"][1]["budget"] = 100
        first = run("labels-default", storage)
        CONFIGS["labels-default"][1]["budget"] = 300
        again = run("labels-default", storage)
        text = json.dumps({"first": first, "resumed": again}, indent=1, sort_keys=True)
        (out / "stored-labels-resumed.json").write_text(text + "\n")
        lines.append(f"{hashlib.sha256(text.encode()).hexdigest()[:16]}  stored-labels-resumed")
        print(lines[-1], flush=True)
    (out / "digests.txt").write_text("\n".join(lines) + "\n")


# the route's settings as flat options (before strategy specs) -> as specs (after)
FLAT_SETTINGS = {
    (("definitions", 60), ("edit_rules", 3), ("parent_selector", "current-best"), ("proposer", "edit")):
        {"parent_selector": "current-best", "proposer": "edit(rules=3, definitions=60)"},
    (("definitions", 60), ("parent_selector", "current-best"), ("proposer", "edit")):  # auto(rules=5)
        {"parent_selector": "current-best", "proposer": "edit(rules=5, definitions=60)"},
    (("definitions", 0), ("edit_rules", 1), ("parent_selector", "pareto"), ("proposer", "rewrite")):
        {"parent_selector": "pareto", "proposer": "rewrite"},
    (("definitions", 0), ("parent_selector", "pareto"), ("proposer", "rewrite")):  # auto(rules=5)
        {"parent_selector": "pareto", "proposer": "rewrite"},
    (("definitions", 0), ("edit_rules", 1), ("proposer", "rewrite")): {"proposer": "rewrite"},
}


def as_specs(data: Any) -> Any:
    """A dump with the route's settings and the idle-option warning in the words of strategy specs."""
    if isinstance(data, dict):
        if data.get("kind") == "route":
            flat = tuple(sorted(data["settings"].items()))
            data = {**data, "settings": FLAT_SETTINGS.get(flat, data["settings"])}
        return {k: as_specs(v) for k, v in data.items()}
    if isinstance(data, list):
        return [as_specs(v) for v in data]
    if isinstance(data, str):
        return data.replace("edit_rules has no effect", "rules has no effect")
    return data


def lines(path: Path, route_as_specs: bool) -> list[str]:
    data = json.loads(path.read_text())
    return json.dumps(as_specs(data) if route_as_specs else data, indent=1, sort_keys=True).splitlines()


def compare(a: Path, b: Path, route_as_specs: bool = False) -> int:
    differ = 0
    for path in sorted(a.glob("*.json")):
        other = b / path.name
        if not other.exists():
            print(f"{path.name}: only in {a}")
            differ += 1
            continue
        left, right = lines(path, route_as_specs), lines(other, route_as_specs)
        if left == right:
            print(f"{path.name}: identical")
            continue
        differ += 1
        first = next(i for i, (x, y) in enumerate(zip(left, right, strict=False)) if x != y) \
            if any(x != y for x, y in zip(left, right, strict=False)) else min(len(left), len(right))
        print(f"{path.name}: differs from line {first + 1}:\n  {a.name}: {left[first:first + 1]}\n"
              f"  {b.name}: {right[first:first + 1]}")
    return differ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("--proposal-rng", default=None)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--route-as-specs", action="store_true")
    args = ap.parse_args()
    if args.cmd == "dump":
        if args.proposal_rng is not None:
            from gepetto.engine import loop

            if not hasattr(loop, "PROPOSAL_RNG"):
                sys.exit("this build has no PROPOSAL_RNG to set")
            loop.PROPOSAL_RNG = args.proposal_rng  # type: ignore[attr-defined]
        dump(args.out)
    else:
        sys.exit(1 if compare(args.a, args.b, args.route_as_specs) else 0)


if __name__ == "__main__":
    main()
