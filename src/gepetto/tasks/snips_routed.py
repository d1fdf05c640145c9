"""A two-step program on SNIPS (`snips-routed`): a router names the kind of request (7 intents), then an extractor
writes the request's slots as JSON, given the slot names of the intent the router named. A compound system in the
small: two components, each with its own instruction; the program's answer is the extractor's JSON (no closed
answer set), so the extractor is rewritten whole and the router, whose own answers are a closed set the feedback
names, gets rules (docs/pipeline.md); the metric's feedback says which step went wrong.

Metric: F1 over (slot, value) pairs against the gold spans (`gepetto.tasks.slots`; the gold: the intent and its
slots), 0 for a reply that is no JSON object; when the router named another intent, the feedback says so first.
The trivial baseline is `{}`.

Splits: train and validation from SNIPS' `train_<Intent>.json` (the same number per intent), the dev test from
`validate_<Intent>.json`, the locked test from training-file utterances that train and validation do not use.
The plain seed of each step states its task, its names and the answer format; the expert adds one hand-written
definition line per intent (router) and per slot (extractor), written before any run.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from gepetto.program import Task
from gepetto.tasks.common import parse_json_object
from gepetto.tasks.intents import normalize_label
from gepetto.tasks.slots import SLOTS, data_folder, read_intent, slot_pairs
from gepetto.types import Candidate, Example, Score

# hand-written, before any run: what each intent covers
INTENTS: dict[str, str] = {
    "add_to_playlist": "adding a song, an artist or an album to a playlist",
    "book_restaurant": "booking a table at a restaurant, bar or cafe",
    "get_weather": "the weather or the forecast somewhere, at some time",
    "play_music": "playing music: a song, an artist, an album, a genre, on a service",
    "rate_book": "giving a rating (points or stars) to a book, a novel, a textbook or a series",
    "search_creative_work": "finding a creative work by its name: a song, a book, a film, a TV show, a game",
    "search_screening_event": "movie times, or what films are showing at a cinema or nearby",
}
SNIPS_NAMES = {"add_to_playlist": "AddToPlaylist", "book_restaurant": "BookRestaurant", "get_weather": "GetWeather",
               "play_music": "PlayMusic", "rate_book": "RateBook", "search_creative_work": "SearchCreativeWork",
               "search_screening_event": "SearchScreeningEvent"}
# hand-written slot definitions of the intents `gepetto.tasks.slots` does not define (from the slot names and a
# look at a few training messages, before any run)
MORE_SLOTS: dict[str, dict[str, str]] = {
    "AddToPlaylist": {
        "playlist": "the name of the playlist",
        "playlist_owner": "whose playlist: 'my', 'Jim's'",
        "music_item": "the kind of thing added: song, tune, album, track, artist",
        "artist": "the name of a singer or band",
        "entity_name": "the name of the song or album being added",
    },
    "PlayMusic": {
        "artist": "the name of a singer or band",
        "music_item": "the kind of thing played: song, album, track, music, soundtrack",
        "service": "the music service: Spotify, Deezer, Google Music, Last.fm...",
        "year": "a year or decade: '1986', 'the seventies'",
        "sort": "a preference: 'popular', 'new', 'top', 'latest'",
        "track": "the name of a song",
        "album": "the name of an album",
        "genre": "a kind of music: jazz, post-punk, pop...",
        "playlist": "the name of a playlist to play",
    },
    "RateBook": {
        "rating_value": "the rating given, a number or number word",
        "rating_unit": "the unit of the rating: points, stars",
        "best_rating": "the top of the scale, the number after 'out of'",
        "object_select": "which one: 'this', 'this current', 'the previous'",
        "object_name": "the title of the book or series",
        "object_type": "the kind of thing rated: book, novel, textbook, album, essay",
        "object_part_of_series_type": "'series' or 'saga' when a series is rated",
    },
    "SearchCreativeWork": {
        "object_name": "the title searched for",
        "object_type": "the kind of work: song, book, movie, TV show, soundtrack, game, album, painting",
    },
    "SearchScreeningEvent": {
        "movie_name": "the title of a film",
        "object_type": "'movie times' or 'movie schedules' when those are asked for",
        "spatial_relation": "where relative to the user: 'nearby', 'closest', 'in the neighbourhood'",
        "location_name": "the name of a cinema or cinema chain",
        "movie_type": "'movies', 'films', 'animated movies': the kind of films asked about",
        "object_location_type": "the kind of place: 'movie theatre', 'cinema', 'movie house'",
        "timeRange": "when: a date, day, time or period",
    },
}
ALL_SLOTS: dict[str, dict[str, str]] = {**MORE_SLOTS, **{k: SLOTS[k] for k in ("BookRestaurant", "GetWeather")}}


def slots_of(intent: str) -> list[str]:
    """The slot names of an intent (by its router name); all of them for a name that is no intent."""
    if intent in SNIPS_NAMES:
        return sorted(ALL_SLOTS[SNIPS_NAMES[intent]])
    return sorted({s for slots in ALL_SLOTS.values() for s in slots})


def routed_seed() -> Candidate:
    """The plain seed of each step: the task, the names to choose from, the answer format."""
    return Candidate(
        router=(f"Say which kind of request the user's message is: {', '.join(INTENTS)}. Reply with only the name."),
        extractor=("Extract the slots from the user's request; the possible slot names are listed after it. Reply "
                   "with only a JSON object that maps each slot found in the message to the exact words from the "
                   'message, e.g. {"city": "Paris"}; leave out slots that are not mentioned.'))


def routed_expert() -> Candidate:
    """The hand-written expert of each step: its seed and one definition line per intent, or per slot."""
    seed = routed_seed()
    intents = [f"- If the message is about {what}, answer {name}." for name, what in INTENTS.items()]
    slots = sorted({(s, d) for defs in ALL_SLOTS.values() for s, d in defs.items()})
    merged: dict[str, list[str]] = {}
    for name, what in slots:
        merged.setdefault(name, []).append(what)
    lines = [f"- {name}: {'; or '.join(whats)}" for name, whats in merged.items()]
    return Candidate(router=seed["router"] + "\n" + "\n".join(intents),
                     extractor=seed["extractor"] + "\nThe slots:\n" + "\n".join(lines) +
                     "\nCopy each value exactly as it is written in the message (the words only, not a sentence).")


async def routed_program(candidate: Candidate, example: Example, ctx: Any) -> str:
    """Router, then extractor: the extractor is shown the slot names of the intent the router named (all of them
    when it named none)."""
    intent = normalize_label(await ctx.lm("router", example.inputs["message"], max_tokens=12))
    text: str = await ctx.lm("extractor", f"Request: {example.inputs['message']}\n"
                                          f"Slot names: {', '.join(slots_of(intent))}", max_tokens=80)
    return text


def routed_metric(example: Example, output: Any, trace: list[Any] | None = None) -> Score:
    """Slot F1 of the extractor's JSON; the feedback says which step went wrong (the router's intent, from the
    trace)."""
    gold_intent, gold = example.gold["intent"], example.gold["slots"]
    want = json.dumps(gold, ensure_ascii=False)
    said = next((t.output for t in trace or [] if t.component == "router"), "")
    router = ("" if normalize_label(said) == gold_intent else
              f"The router answered {str(said).strip()[:40]!r}, but the request is {gold_intent}, so the extractor "
              f"was given the wrong slot names. ")
    data = parse_json_object(output)
    if data is None:
        return Score(0.0, f"{router}The extractor's reply is not a JSON object; the right answer: {want}.")
    pred, right = slot_pairs(data), slot_pairs(gold)
    hits = right & pred
    f1 = 2 * len(hits) / (len(pred) + len(right)) if hits else (1.0 if not pred and not right else 0.0)
    if f1 == 1.0:
        return Score(1.0, "Correct.")
    missed = sorted(f'{k} = "{v}"' for k, v in right - hits)
    extra = sorted(f'{k} = "{v}"' for k, v in pred - hits)
    said_slots = (f"missed {', '.join(missed)}" if missed else "") + ("; " if missed and extra else "") + \
        (f"wrong or invented {', '.join(extra)}" if extra else "")
    step = "" if router else "The router was right; the extractor "
    return Score(round(f1, 4), f"{router}{step}{said_slots}. Slot F1 {f1:.2f}; the right answer: {want}.")


def load(data_dir: Any = None, *, seed: int = 0, n_train: int = 6, n_val: int = 6, n_test: int = 20,
         n_locked: int = 30, test_split: str = "dev", **_: Any) -> Task:
    """`snips-routed`: per intent `n_train` train, `n_val` validation and `n_test` dev test (or `n_locked` locked
    test) messages."""
    if test_split not in ("dev", "locked"):
        raise ValueError(f"test_split must be 'dev' or 'locked', got {test_split!r}")
    folder = data_folder(data_dir)
    parts: dict[str, list[Example]] = {"train": [], "val": [], "test": []}
    for name, snips in SNIPS_NAMES.items():
        pool = read_intent(folder / f"train_{snips}.json", snips)
        held = read_intent(folder / f"validate_{snips}.json", snips)
        rng = random.Random(f"snips-routed:{snips}:{seed}")
        rng.shuffle(pool)
        rng.shuffle(held)
        unique: dict[str, tuple[str, dict[str, Any]]] = {}
        for text, slots in pool:
            unique.setdefault(text.lower(), (text, slots))
        pool = list(unique.values())
        held = [r for r in held if r[0].lower() not in unique]

        def ex(part: str, text: str, slots: dict[str, Any], intent: str = name) -> Example:
            return Example({"message": text}, gold={"intent": intent, "slots": slots},
                           id=f"snipsr-{part}-{hashlib.sha256(text.encode()).hexdigest()[:10]}")

        parts["train"] += [ex("train", *r) for r in pool[:n_train]]
        parts["val"] += [ex("val", *r) for r in pool[n_train:n_train + n_val]]
        parts["test"] += ([ex("test", *r) for r in held[:n_test]] if test_split == "dev" else
                          [ex("locked", *r) for r in pool[n_train + n_val:n_train + n_val + n_locked]])
    return Task(
        name="snips-routed", program=routed_program, metric=routed_metric, seed_candidate=routed_seed(),
        trainset=parts["train"], valset=parts["val"], testset=parts["test"],
        description="SNIPS, a router (7 intents) then a slot extractor (the intent's slots): message -> JSON.",
        expert_candidate=routed_expert(), baseline="{}",
    )
