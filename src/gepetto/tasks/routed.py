"""A two-step program on HWU64 (`hwu-routed`): a router names the area of a message to a home assistant, then an
intent step picks the intent among that area's intents. A compound system in the small: two components, each with
its own instruction; the program's answer is the intent step's, so the labels route's rules go to it, and to the
router too, whose own answers are a closed set the feedback names (docs/pipeline.md); the metric's feedback says
which step went wrong.

Areas: alarm, audio, calendar, email and lists (16 intents; none of HWU64's locked-only scenarios). Splits as
`gepetto.tasks.hwu64`'s (the dataset's folds): 40 train, 40 validation, 120 dev test, 240 locked test. The plain seed
of each step states its task, its names and the answer format; the expert adds one hand-written definition line
per area (router) and per intent (intent step), written before any run. The trivial baseline is the most frequent
training intent.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gepetto.program import Task
from gepetto.tasks.hwu64 import DEFINITIONS, _splits, labels
from gepetto.tasks.intents import normalize_label
from gepetto.types import Candidate, Example, Score

ROUTED = ("alarm", "audio", "calendar", "email", "lists")  # (none of them locked-only)
# hand-written, before any run: what each area covers
AREAS: dict[str, str] = {
    "alarm": "alarms: setting, checking or removing one",
    "audio": "the volume of the sound: louder, quieter or muted",
    "calendar": "events, meetings, appointments and reminders on their calendar",
    "email": "emails and email contacts",
    "lists": "lists: to-do lists, shopping lists and the like",
}


def routed_seed() -> Candidate:
    """The plain seed of each step: the task, the names to choose from, the answer format."""
    return Candidate(
        router=(f"Say which of these areas the user's message to a home assistant is about: {', '.join(ROUTED)}. "
                "Reply with only the area's name."),
        intent="Classify the user's message into one of the intents listed after it. Reply with only the intent name.")


def routed_expert() -> Candidate:
    """The hand-written expert of each step: its seed and one definition line per area, or per intent."""
    seed = routed_seed()
    areas = [f"- If the message is about {AREAS[a]}, answer {a}." for a in ROUTED]
    intents = [f"- If the user {DEFINITIONS[a][i]}, answer {i}." for a in ROUTED for i in labels(a)]
    return Candidate(router=seed["router"] + "\n" + "\n".join(areas), intent=seed["intent"] + "\n" + "\n".join(intents))


def _area_of(intent: str) -> str:
    return next(a for a in ROUTED if intent in DEFINITIONS[a])


async def routed_program(candidate: Candidate, example: Example, ctx: Any) -> str:
    """Router, then intent: the intent step is shown the intents of the area the router named (all of them when it
    named none)."""
    area = normalize_label(await ctx.lm("router", example.inputs["message"], max_tokens=8))
    intents = labels(area) if area in ROUTED else [i for a in ROUTED for i in labels(a)]
    text: str = await ctx.lm("intent", f"Message: {example.inputs['message']}\nIntents: {', '.join(intents)}",
                             max_tokens=16)
    return text


def routed_metric(example: Example, output: Any, trace: list[Any] | None = None) -> Score:
    """The exact intent; the feedback says which step went wrong (the router's area, from the trace)."""
    gold, got = example.gold, normalize_label(output)
    if got == gold:
        return Score(1.0, f"Correct: {gold}.")
    area, said = _area_of(gold), next((t.output for t in trace or [] if t.component == "router"), "")
    if normalize_label(said) != area:
        return Score(0.0, f"The router answered {str(said).strip()[:40]!r}, but the message is about {area}, so the "
                          f"intent step chose among the wrong intents; the correct intent is {gold}.")
    return Score(0.0, f"The router was right ({area}); the intent step answered {str(output).strip()[:40]!r}, the "
                      f"correct intent is {gold}.")


def load(data_dir: Any = None, *, seed: int = 0, n_train: int = 40, n_val: int = 40, n_test: int = 120,
                n_locked: int = 240, test_split: str = "dev", **_: Any) -> Task:
    """`hwu-routed`: the two-step program on the messages of the ROUTED areas (16 intents), splits as `load`'s."""
    splits = _splits(data_dir, ROUTED, f"hwu64:routed:{seed}", n_train, n_val,
                     n_test if test_split == "dev" else n_locked, test_split)
    return Task(
        name="hwu-routed", program=routed_program, metric=routed_metric, seed_candidate=routed_seed(),
        trainset=splits["train"], valset=splits["val"], testset=splits["test"],
        description="HWU64, a router (5 areas) then an intent step (the area's intents): message -> intent name.",
        expert_candidate=routed_expert(), baseline=Counter(e.gold for e in splits["train"]).most_common(1)[0][0],
    )
