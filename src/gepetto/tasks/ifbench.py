"""IFBench: out-of-distribution verifiable constraints; the same two-stage program as ifeval (answer, rewrite).

Data: test = `<data_dir>/ifbench/IFBench_test.jsonl` (allenai/IFBench, 300 prompts, 58 constraint types; fields
key, prompt, instruction_id_list, kwargs with many None values, which are ignored). Train / val come from the
IFEval files and are exactly the ifeval task's train / val for the same seed and sizes (see
gepetto.tasks.ifeval); no IFBench prompt is used for training.

Splits: n_train / n_val default 50 / 50; n_test defaults to 100 prompts drawn with a seeded shuffle
(`n_test=None` or `0` means every usable prompt: 294 of the 300). A prompt is dropped only when none of its
constraints can be checked; ids are `ifbench-<key>`.

Differences from the paper (GEPA, Agrawal et al. 2025): the paper builds its IFBench train/val sets from
IFEval-like training data that is not among this project's data files; here they come from the IFEval files,
whose 25 constraint types are all different from IFBench's 58, so the test measures transfer to unseen
constraint types. The checkers are our own
(gepetto.tasks.constraints), written from the meaning of each constraint, not the official IFBench verifiers;
where the benchmark leaves a rule open we chose one and state it in the checker's feedback (e.g. trigram overlap
is measured over the reference text's trigrams; "balanced" sentence types means counts within 1; syllables are
estimated; custom CSV / list tasks check the format, not world facts). Not covered (reported as not scored):
words:start_verb (needs a part-of-speech tagger) and custom:european_capitals_sort (needs geographic
knowledge); see constraints.UNSUPPORTED. The paper's test set is the full IFBench test; our default 100 is a
cost-bounded sample. Calls are bounded to 400 tokens each.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from gepetto.program import Task
from gepetto.tasks import _instruct, ifeval
from gepetto.types import Example

TEST_FILE = "IFBench_test.jsonl"


def read_test(data_dir: Any = None) -> list[Example]:
    """Every IFBench test prompt with at least one checkable constraint, in file order."""
    from gepetto.tasks import default_data_dir

    root = Path(data_dir) if data_dir is not None else default_data_dir()
    path = root / "ifbench" / TEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"IFBench data not found: {path} (set data_dir or GEPETTO_DATA_DIR)")
    out: list[Example] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            if r["prompt"] in seen:
                continue
            seen.add(r["prompt"])
            ex = _instruct.make_example(f"ifbench-{r['key']}", r["prompt"], r["instruction_id_list"],
                                        r.get("kwargs") or [], source=TEST_FILE, key=r["key"])
            if ex is not None:
                out.append(ex)
    return out


def load(
    data_dir: Any = None, *, seed: int = 0, n_train: int = 50, n_val: int = 50, n_test: int | None = 100, **_: Any
) -> Task:
    """IFBench task: test from IFBench_test.jsonl, train/val from the IFEval files (as in the ifeval task)."""
    train, val, _unused = ifeval.split_examples(ifeval.read_examples(data_dir), seed=seed, n_train=n_train,
                                                n_val=n_val, n_test=0)
    test = read_test(data_dir)
    if n_test:
        if n_test > len(test):
            raise ValueError(f"IFBench has {len(test)} usable test prompts; asked for n_test={n_test}")
        random.Random(f"ifbench:{seed}").shuffle(test)
        test = test[:n_test]
    return _instruct.make_task("ifbench", train, val, test,
                               "IFBench test prompts (unseen constraint types), trained on IFEval prompts; answer "
                               "then rewrite; score = share of constraints met (gepetto's own checkers).")
