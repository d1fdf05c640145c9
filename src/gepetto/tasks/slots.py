"""SNIPS slot extraction for one intent: utterance -> JSON object {slot name: the words of the utterance}.

Program: one instruction, the utterance as the user message, the answer a JSON object. Metric: F1 over
(slot, value) pairs against the gold spans (values compared lowercased, without punctuation and extra
spaces). An utterance with slots scores 0 for an empty extraction (`{}`), for anything that is not a JSON
object, and for slots named outside the intent's slot list; an utterance without slots scores 1 only for `{}`.
The feedback lists the missing, wrong and invented slots; `Score.pattern` names the first problem
("missed party_size_number", "invented cuisine", ...).

Splits: train and validation from SNIPS' `train_<Intent>.json`, test from `validate_<Intent>.json` (the
benchmark's held-out file), with utterances seen in train/val removed from test.

Candidates: the *plain seed* (the task, the slot names and the output format) and an *expert* prompt written by
hand from the slot names before any optimisation (one line per slot). The trivial baseline is `{}`.

Data: `snips/` (sonos/nlu-benchmark, 2017-06-custom-intent-engines, CC0 1.0).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path
from typing import Any

from gepetto.program import Task, TraceEntry, single_instruction
from gepetto.tasks.common import parse_json_object
from gepetto.types import Candidate, Example, Score

FOLDER = "snips"

# Hand-written slot definitions per intent (from the slot names and the intent, before any optimisation run).
SLOTS: dict[str, dict[str, str]] = {
    "BookRestaurant": {
        "restaurant_name": "the name of a specific restaurant",
        "restaurant_type": "the kind of place: restaurant, bar, pub, cafe, bistro, diner, brasserie, food truck...",
        "cuisine": "a type of food or cooking: Italian, sushi, vegan, barbecue...",
        "served_dish": "a specific dish the place should serve: pizza, dumplings, steak...",
        "party_size_number": "how many people, as a number or number word (e.g. 'four', '3')",
        "party_size_description": "who the booking is for, described in words (e.g. 'me and my wife', 'my team')",
        "timeRange": "when: a date, day, time or period (e.g. 'tomorrow at 8 pm', 'next Friday')",
        "city": "a city or town",
        "state": "a state or region (e.g. 'CA', 'Texas')",
        "country": "a country",
        "poi": "a point of interest or address the place should be near",
        "spatial_relation": "where relative to a place: 'near', 'close to', 'within walking distance'...",
        "sort": "a preference for the best or most popular: 'top-rated', 'best', 'popular'",
        "facility": "a facility the place must have: 'parking', 'wifi', 'outdoor seating'...",
    },
    "GetWeather": {
        "timeRange": "when: a date, day, time or period (e.g. 'tomorrow', 'at noon', 'next week')",
        "city": "a city or town",
        "state": "a state or region",
        "country": "a country",
        "geographic_poi": "a named natural or geographic place: a park, mountain, lake, forest...",
        "current_location": "the user's own location in words: 'here', 'my current location', 'around me'",
        "spatial_relation": "where relative to a place: 'near', 'in the area of', 'faraway from'...",
        "condition_description": "a weather condition asked about: rain, snow, fog, sunny, storm...",
        "condition_temperature": "a temperature word asked about: hot, cold, chilly, freezing, warm...",
    },
}


def slot_names(intent: str) -> list[str]:
    return sorted(SLOTS[intent])


def _describe(intent: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", intent).lower()


def seed_instruction(intent: str) -> str:
    """The plain seed: the task, the slot names and the output format."""
    return (f"Extract the slots from the user's {_describe(intent)} request. Possible slots: "
            f"{', '.join(slot_names(intent))}. Reply with only a JSON object that maps each slot found in the "
            'message to the exact words from the message, e.g. {"city": "Paris"}; leave out slots that are '
            "not mentioned.")


# Hand-written worked examples per intent (invented messages, not from the data), for the expert's examples form.
EXAMPLES: dict[str, list[tuple[str, dict[str, str]]]] = {
    "GetWeather": [
        ("Will it snow in Denver tomorrow?", {"condition_description": "snow", "city": "Denver",
                                              "timeRange": "tomorrow"}),
        ("is it going to be chilly around here tonight", {"condition_temperature": "chilly",
                                                          "current_location": "here", "timeRange": "tonight"}),
        ("What's the forecast for Kenya", {"country": "Kenya"}),
        ("weather at Yosemite National Park in June", {"geographic_poi": "Yosemite National Park",
                                                       "timeRange": "in June"}),
        ("Will it be hot in Austin Texas next week", {"condition_temperature": "hot", "city": "Austin",
                                                      "state": "Texas", "timeRange": "next week"}),
    ],
}


def expert_instruction(intent: str, form: str = "definitions") -> str:
    """The hand-written expert prompt: the seed's task and format plus one line per slot (`form="definitions"`),
    and with `form="examples"` worked examples too (intents with `EXAMPLES`)."""
    if form == "examples":
        shown = "\n".join(f'"{text}" -> {json.dumps(slots)}' for text, slots in EXAMPLES[intent])
        return (f"{expert_instruction(intent)}\nMost messages mention only one to three slots: never list a slot "
                f"whose words are not in the message. Examples:\n{shown}")
    if form != "definitions":
        raise ValueError(f"unknown expert form {form!r}: definitions or examples")
    lines = "\n".join(f"- {name}: {SLOTS[intent][name]}" for name in slot_names(intent))
    return (f"Extract the slots from the user's {_describe(intent)} request. The slots:\n{lines}\n"
            "Copy each value exactly as it is written in the message (the words only, not a whole sentence). "
            "Leave out slots that are not mentioned. Reply with only a JSON object, e.g. "
            '{"city": "Paris", "timeRange": "tomorrow"}.')


def normalize_value(text: Any) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", str(text).lower()).split())


def slot_pairs(obj: Any) -> set[tuple[str, str]]:
    """The (slot, normalised value) pairs of a slots mapping (a list value gives one pair per item)."""
    out: set[tuple[str, str]] = set()
    for key, value in obj.items():
        for v in value if isinstance(value, list) else [value]:
            if v is not None and normalize_value(v):
                out.add((str(key), normalize_value(v)))
    return out


def make_metric(intent: str) -> Any:
    allowed = set(SLOTS[intent])
    listed = ", ".join(slot_names(intent))

    def metric(example: Example, output: Any, trace: list[TraceEntry] | None = None) -> Score:
        gold = slot_pairs(example.gold)
        want = json.dumps(example.gold, ensure_ascii=False)
        data = parse_json_object(output)
        if data is None:
            if trace and trace[-1].finish_reason == "length":
                return Score(0.0, "The reply was cut off before the JSON object was closed: it was too long (it "
                                  f"listed slots that are not in the message). The right answer is short: {want}.",
                             pattern="reply too long, JSON cut off")
            return Score(0.0, f"The reply is not a JSON object. Reply with only a JSON object; here: {want}.",
                         pattern="not a JSON object")
        pred = slot_pairs(data)
        unknown = sorted({k for k, _ in pred} - allowed)
        if not gold:
            if not pred:
                return Score(1.0, "Correct: no slot in this message.")
            return Score(0.0, f"This message has no slots; the answer should be {{}}, not {json.dumps(data)}.",
                         pattern="slots invented where there are none")
        if unknown:
            return Score(0.0, f"{', '.join(unknown)} is not a slot name. Use only: {listed}. Here: {want}.",
                         pattern="unknown slot name")
        hits = gold & pred
        precision = len(hits) / len(pred) if pred else 0.0
        recall = len(hits) / len(gold)
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        if f1 == 1.0:
            return Score(1.0, "Correct.")
        gold_by_slot = {k: v for k, v in gold}
        pred_by_slot = {k: v for k, v in pred}
        problems, patterns = [], []
        for slot, value in sorted(gold - hits):
            if slot in pred_by_slot:
                problems.append(f'{slot} should be "{value}", not "{pred_by_slot[slot]}"')
                patterns.append(f"wrong words for {slot}")
            else:
                problems.append(f'missed {slot} = "{value}"')
                patterns.append(f"missed {slot}")
        for slot, value in sorted(pred - hits):
            if slot not in gold_by_slot:
                problems.append(f'"{value}" is not a {slot} here')
                patterns.append(f"invented {slot}")
        return Score(round(f1, 4), f"Slot F1 {f1:.2f}: " + "; ".join(problems) + f". The right answer: {want}.",
                     pattern=patterns[0] if patterns else "")

    return metric


def read_intent(path: Path, intent: str) -> list[tuple[str, dict[str, Any]]]:
    """The (utterance, slots) of one intent in a SNIPS file."""
    rows = json.loads(path.read_text(encoding="utf-8"))[intent]
    out = []
    for row in rows:
        text = "".join(part["text"] for part in row["data"])
        slots: dict[str, Any] = {}
        for part in row["data"]:
            if part.get("entity"):
                value = part["text"].strip()
                if part["entity"] in slots:  # a slot twice: keep both values
                    prev = slots[part["entity"]]
                    slots[part["entity"]] = [*(prev if isinstance(prev, list) else [prev]), value]
                else:
                    slots[part["entity"]] = value
        out.append((" ".join(text.split()), slots))
    return out


def data_folder(data_dir: Any) -> Path:
    from gepetto.tasks import default_data_dir

    base = Path(data_dir) if data_dir is not None else default_data_dir()
    for folder in (base / FOLDER, base):
        if any(folder.glob("train_*.json")):
            return folder
    raise FileNotFoundError(f"SNIPS files not found under {base / FOLDER} (set data_dir or GEPETTO_DATA_DIR)")


def load(
    data_dir: Any = None, *, seed: int = 0, intent: str = "BookRestaurant",
    n_train: int = 60, n_val: int = 30, n_test: int = 100, expert_form: str = "definitions", test_split: str = "dev",
    n_locked: int = 300, **_: Any,
) -> Task:
    """A SNIPS slot-filling task for one intent (BookRestaurant or GetWeather); test has at most `n_test`
    examples (the held-out file has 100 per intent, less the utterances that also occur in train).
    `test_split="locked"` gives `n_locked` utterances of the training file that train and val do not use, kept to
    be scored once, when a result is reported."""
    if test_split not in ("dev", "locked"):
        raise ValueError(f"test_split must be 'dev' or 'locked', got {test_split!r}")
    if intent not in SLOTS:
        raise ValueError(f"no hand-written slot definitions for intent {intent!r}; intents: {sorted(SLOTS)}")
    folder = data_folder(data_dir)
    pool = read_intent(folder / f"train_{intent}.json", intent)
    held = read_intent(folder / f"validate_{intent}.json", intent)
    rng = random.Random(f"snips:{intent}:{seed}")
    rng.shuffle(pool)
    seen: set[str] = set()
    train_val: list[tuple[str, dict[str, Any]]] = []
    for text, slots in pool:
        if text.lower() not in seen:
            seen.add(text.lower())
            train_val.append((text, slots))
    test = []
    for text, slots in held:
        if text.lower() not in seen:
            seen.add(text.lower())
            test.append((text, slots))
    if n_train + n_val > len(train_val) or not test:
        raise ValueError(f"SNIPS {intent}: asked for {n_train}+{n_val} train/val examples; {len(train_val)} exist")
    rng.shuffle(test)

    def ex(part: str, text: str, slots: dict[str, Any]) -> Example:
        return Example({"message": text}, gold=slots,
                       id=f"snips-{part}-{hashlib.sha256(text.encode()).hexdigest()[:10]}")

    return Task(
        name=f"snips-{intent}",
        program=single_instruction("instruction", max_tokens=80),
        metric=make_metric(intent),
        seed_candidate=Candidate(instruction=seed_instruction(intent)),
        trainset=[ex("train", *r) for r in train_val[:n_train]],
        valset=[ex("val", *r) for r in train_val[n_train:n_train + n_val]],
        testset=[ex("test", *r) for r in test[:n_test]] if test_split == "dev" else
        [ex("locked", *r) for r in train_val[n_train + n_val:n_train + n_val + n_locked]],
        description=f"SNIPS {intent}: utterance -> JSON of slots ({len(SLOTS[intent])} slot types), F1 over slots.",
        expert_candidate=Candidate(instruction=expert_instruction(intent, expert_form)),
        baseline="{}",
    )
