"""HWU64 intent classification inside one scenario: fine-grained intents whose names share words.

HWU64 (Liu et al., 2019) holds 11,036 utterances to a home assistant, 64 intents in 18 scenarios. Inside a
scenario the intents are close and their names share words (`iot_hue_lightdim` / `iot_hue_lightup` /
`iot_hue_lightoff`, `email_query` / `email_querycontact`): the development family for the default's checks, which
were first written on CLINC150's answer names. One task per scenario with at least four intents.

Program: one instruction (system prompt), the utterance as the user message, the answer is one intent name.
Metric: CLINC's (`tasks.intents.make_metric`): the exact intent after light normalisation; anything else scores 0.

Splits come from the dataset's own ten folds, so they never overlap: train from fold 1, validation from fold 2,
the **dev test** from folds 3-4 and the **locked test** from folds 5-10, each balanced over the intents. The
default sizes (24 / 40 / 120, locked 240) are those of a new user's few dozen examples.

`hwu-qa` and `hwu-transport` are **locked-only**: named before any run, nothing is ever decided on them; they are
scored once, on their locked split, when an issue closes (`benchmarks/usertrack.py`). So is `hwu-leisure`, a family
of three small scenarios taken together (music, recommendation, takeaway: 8 intents, 24 / 40 / 80), added later as
a family nobody here had run, and so is `hwu-daily` (cooking, datetime, news, social, weather: 7 intents, 24 / 40 / 80),
named after leisure had been run.

Two candidates per scenario: the plain seed (the task, the intent names, the answer format) and an expert prompt
written by hand from the intent names and HWU64's scenario descriptions before any run, one definition line per
intent, never tuned on any split. The trivial baseline is the most frequent training intent.

Data: `hwu64/hwu64.jsonl` (xliuhw/NLU-Evaluation-Data, CC BY 4.0).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from gepetto.program import Task, single_instruction
from gepetto.tasks.intents import _balanced, _key, make_metric
from gepetto.types import Candidate, Example

FOLDER = "hwu64"
FOLDS = {"train": (1,), "val": (2,), "dev": (3, 4), "locked": (5, 6, 7, 8, 9, 10)}
LOCKED_ONLY = ("qa", "transport", "leisure", "daily")  # scored on their locked split only (named before any run)

# Hand-written definitions, one line per intent: written from the intent names before any run, never tuned.
DEFINITIONS: dict[str, dict[str, str]] = {
    "iot": {
        "iot_cleaning": "wants a cleaning device (a robot vacuum, a cleaner) started or stopped",
        "iot_coffee": "wants the coffee machine to make a coffee",
        "iot_hue_lightchange": "wants the colour of the lights (or a light scene) changed",
        "iot_hue_lightdim": "wants the lights dimmed (made less bright)",
        "iot_hue_lightoff": "wants the lights turned off",
        "iot_hue_lighton": "wants the lights turned on",
        "iot_hue_lightup": "wants the lights made brighter",
        "iot_wemo_off": "wants a smart plug or socket, or the appliance on it, switched off",
        "iot_wemo_on": "wants a smart plug or socket, or the appliance on it, switched on",
    },
    "general": {
        "general_affirm": "says yes or agrees",
        "general_commandstop": "tells the assistant to stop what it is doing or to be quiet",
        "general_confirm": "asks the assistant to confirm that something is done or is right",
        "general_dontcare": "says they do not mind or have no preference",
        "general_explain": "asks the assistant to explain what it said or meant",
        "general_joke": "asks for a joke",
        "general_negate": "says no or disagrees",
        "general_praise": "praises or thanks the assistant",
        "general_quirky": "makes small talk or asks something odd that is no request for a task",
        "general_repeat": "asks the assistant to say again what it just said",
    },
    "play": {
        "play_audiobook": "wants an audiobook played or resumed",
        "play_game": "wants to play a game",
        "play_music": "wants music played (a song, an artist, a genre or a playlist)",
        "play_podcasts": "wants a podcast or a podcast episode played",
        "play_radio": "wants a radio station played",
    },
    "email": {
        "email_addcontact": "wants a new contact or an email address saved in their contacts",
        "email_query": "asks about their emails (new ones, ones from someone, to have them read out)",
        "email_querycontact": "asks for a contact's details (phone number, email address, birthday)",
        "email_sendemail": "wants to send, write or reply to an email",
    },
    "qa": {
        "qa_currency": "asks for an exchange rate or to convert money from one currency to another",
        "qa_definition": "asks what a word means or for its definition",
        "qa_factoid": "asks a question of fact about the world (who, what, where, when)",
        "qa_maths": "asks for a calculation (a sum, a product, a square root)",
        "qa_stock": "asks about a share price or how a stock is doing",
    },
    # (the scenarios of the two-step program `hwu-routed`, written before any run like the others)
    "alarm": {
        "alarm_query": "asks which alarms are set or when an alarm will go off",
        "alarm_remove": "wants an alarm cancelled or deleted",
        "alarm_set": "wants an alarm set for a time",
    },
    "audio": {
        "audio_volume_down": "wants the volume lowered",
        "audio_volume_mute": "wants the sound muted or silenced",
        "audio_volume_up": "wants the volume raised",
    },
    "calendar": {
        "calendar_query": "asks what is on their calendar (events, meetings, appointments)",
        "calendar_remove": "wants an event or reminder taken off their calendar",
        "calendar_set": "wants an event, meeting or reminder put on their calendar",
    },
    "lists": {
        "lists_createoradd": "wants a new list made or an item added to a list",
        "lists_query": "asks what lists they have or what is on a list",
        "lists_remove": "wants a list deleted or an item taken off a list",
    },
    # (an unseen family for issue 59's last check, written before any run: three small scenarios taken together)
    "music": {
        "music_likeness": "says they like a song, an artist or a kind of music, or asks the assistant to remember it",
        "music_query": "asks what song, artist or album is playing, or about a piece of music",
        "music_settings": "wants a music setting changed (shuffle, repeat, the order of a playlist)",
    },
    "recommendation": {
        "recommendation_events": "asks for events to go to (concerts, shows, what is on nearby)",
        "recommendation_locations": "asks for a place to go (a restaurant, a shop or a bar nearby)",
        "recommendation_movies": "asks for a film to watch",
    },
    "takeaway": {
        "takeaway_order": "wants food ordered for delivery or to take away",
        "takeaway_query": "asks about a takeaway order or place (its status, whether it delivers, what it serves)",
    },
    # (a second unseen family, written before any run: five one- and two-intent scenarios taken together)
    "cooking": {"cooking_recipe": "asks how to cook or make a dish, or for a recipe"},
    "datetime": {
        "datetime_convert": "wants a time or date converted (to another time zone or another format)",
        "datetime_query": "asks what time or date it is, or the date of a day",
    },
    "news": {"news_query": "asks for the news, or the latest news on a topic"},
    "social": {
        "social_post": "wants something posted on social media, or a complaint sent to a company there",
        "social_query": "asks what is new on social media (their friends' posts, updates)",
    },
    "weather": {"weather_query": "asks about the weather or the forecast"},
    "transport": {
        "transport_query": "asks about trains or other public transport (times, routes, delays)",
        "transport_taxi": "wants a taxi or a ride booked",
        "transport_ticket": "wants a ticket booked or bought (train, bus, plane)",
        "transport_traffic": "asks how the traffic is on a road or on their way",
    },
}


# Tasks that take several small scenarios together: 7-8 intents, some of whose names share words across scenarios
# (`music_query`, `takeaway_query`), the size of a user's family
FAMILIES: dict[str, tuple[str, ...]] = {"leisure": ("music", "recommendation", "takeaway"),
                                        "daily": ("cooking", "datetime", "news", "social", "weather")}


def _definitions(scenario: str) -> dict[str, str]:
    """Each intent's definition line, of a scenario or of a family of scenarios."""
    return {k: v for sc in FAMILIES.get(scenario, (scenario,)) for k, v in DEFINITIONS[sc].items()}


def labels(scenario: str) -> list[str]:
    """The intents of a scenario (or a family of scenarios), sorted."""
    return sorted(_definitions(scenario))


def seed_instruction(scenario: str) -> str:
    """The plain seed: the task, the intent names and the answer format, nothing more."""
    return (f"Classify the user's message to a home assistant into one of these {scenario} intents: "
            f"{', '.join(labels(scenario))}. Reply with only the intent name.")


def expert_instruction(scenario: str, *, form: str = "rules") -> str:
    """The hand-written expert prompt: the seed and one line per intent, as rules ("- If the user <definition>,
    answer <intent>.", the form a 0.5B follows) or as definitions ("- <intent>: the user <definition>")."""
    defs = _definitions(scenario)
    if form == "rules":
        lines = [f"- If the user {defs[name]}, answer {name}." for name in sorted(defs)]
    elif form == "definitions":
        lines = [f"- {name}: the user {defs[name]}" for name in sorted(defs)]
    else:
        raise ValueError(f"unknown expert form {form!r}: rules or definitions")
    return seed_instruction(scenario) + "\n" + "\n".join(lines)


def _read(data_dir: Any) -> list[dict[str, Any]]:
    from gepetto.tasks import default_data_dir

    base = Path(data_dir) if data_dir is not None else default_data_dir()
    for folder in (base / FOLDER, base):
        path = folder / "hwu64.jsonl"
        if path.is_file():
            return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    raise FileNotFoundError(f"hwu64.jsonl not found under {base / FOLDER} (set data_dir or GEPETTO_DATA_DIR)")


def load(
    data_dir: Any = None, *, seed: int = 0, scenario: str = "iot", n_train: int = 24, n_val: int = 40,
    n_test: int = 120, n_locked: int = 240, test_split: str = "dev", expert_form: str = "rules", **_: Any,
) -> Task:
    """An HWU64 task of one scenario (or of a family of them, `FAMILIES`). `test_split="dev"` gives `n_test`
    messages of folds 3-4 (every decision is made on them); `"locked"` gives `n_locked` of folds 5-10, scored once,
    when a result is reported."""
    if scenario not in DEFINITIONS and scenario not in FAMILIES:
        raise ValueError(f"no hand-written definitions for scenario {scenario!r}; scenarios: "
                         f"{sorted([*DEFINITIONS, *FAMILIES])}")
    label_set = labels(scenario)
    splits = _splits(data_dir, FAMILIES.get(scenario, (scenario,)), f"hwu64:{scenario}:{seed}", n_train, n_val,
                     n_test if test_split == "dev" else n_locked, test_split)
    majority = Counter(e.gold for e in splits["train"]).most_common(1)[0][0]
    return Task(
        name=f"hwu-{scenario}",
        program=single_instruction("instruction", max_tokens=16),
        metric=make_metric(label_set),
        seed_candidate=Candidate(instruction=seed_instruction(scenario)),
        trainset=splits["train"], valset=splits["val"], testset=splits["test"],
        description=f"HWU64 intents of the {scenario} scenario ({len(label_set)} labels): message -> intent name.",
        expert_candidate=Candidate(instruction=expert_instruction(scenario, form=expert_form)),
        baseline=majority,
    )


def _splits(data_dir: Any, scenarios: tuple[str, ...], rng_seed: str, n_train: int, n_val: int, n_test: int,
            test_split: str) -> dict[str, list[Example]]:
    """Train, validation and test examples of `scenarios` from their folds (FOLDS), balanced over the intents, each
    text in one split only."""
    if test_split not in ("dev", "locked"):
        raise ValueError(f"test_split must be 'dev' or 'locked', got {test_split!r}")
    label_set = sorted(i for sc in scenarios for i in DEFINITIONS[sc])
    rows = [r for r in _read(data_dir) if r["scenario"] in scenarios]
    if sorted({r["intent"] for r in rows}) != label_set:
        raise ValueError(f"scenarios {scenarios} in hwu64.jsonl do not match the built-in intent lists")
    rng = random.Random(rng_seed)
    splits: dict[str, list[Example]] = {}
    seen: set[str] = set()  # HWU64 repeats some short texts ("stop", "yes") across folds: each in one split only
    for part, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        folds = FOLDS[test_split if part == "test" else part]
        if part == "test" and test_split == "locked":  # nor a text of the dev test
            seen |= {_norm(r["text"]) for r in rows if r["fold"] in FOLDS["dev"]}
        pool = list({_norm(r["text"]): (r["text"], r["intent"]) for r in rows
                     if r["fold"] in folds and _norm(r["text"]) not in seen}.values())
        picked = _balanced(pool, label_set, n, rng)
        seen |= {_norm(t) for t, _ in pool}
        splits[part] = [Example({"message": t}, gold=lab, id=f"hwu-{part}-{_key(t, lab)}") for t, lab in picked]
    return splits


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


