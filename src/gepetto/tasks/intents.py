"""CLINC150 intent classification inside one domain: 15 confusable intents, optionally with out-of-scope.

Program: one instruction (system prompt), the customer's message as the user message, the answer is one
intent name. Metric: exact label after light normalisation (case, quotes, a trailing period, spaces or
hyphens for underscores, a leading "intent:"); an answer that is not exactly one label scores 0 (an empty
answer, `{}`, the message echoed back or a list of labels included). The feedback names the right label and,
for a wrong label, the confusion (`Score.pattern` is "answered X, expected Y", so reflection can see which
confusions are frequent).

Splits come from CLINC150's own train / val / test files (so they never overlap): `n_train` training
messages, `n_val` validation and `n_test` test messages, balanced over the intents (and, with
`oos=True`, an out-of-scope share drawn from CLINC's oos_train / oos_val / oos_test).

Two candidates per domain are given: the *plain seed* (the task, the labels and the answer format, stated
plainly) and an *expert* prompt written by hand from the intent names before any optimisation (one line of
definition per intent), not tuned on any split. The trivial baseline is the most frequent training label.

Data: `clinc150/data_full.json` and `clinc150/domains.json` (clinc/oos-eval, CC BY 3.0).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

from gepetto.program import Task, TraceEntry, single_instruction
from gepetto.types import Candidate, Example, Score

FOLDER = "clinc150"
OOS = "out_of_scope"

# Hand-written definitions, one line per intent (written from the intent names and the domain,
# before any optimisation run; never tuned on data).
DEFINITIONS: dict[str, dict[str, str]] = {
    "banking": {
        "balance": "asks how much money is in their own bank account (checking or savings balance)",
        "bill_balance": "asks how much they owe on a bill (electricity, water, phone, cable, rent...)",
        "bill_due": "asks when a bill is due (the due date of a bill)",
        "pay_bill": "wants to pay a bill now or set up a bill payment",
        "min_payment": "asks for the minimum payment due (usually on a credit card)",
        "transfer": "wants to move money between accounts or send money to someone",
        "transactions": "asks to see recent transactions or whether a specific charge or payment went through",
        "spending_history": "asks how much they spent on something or in a period (spending over time)",
        "interest_rate": "asks what interest rate an account pays or charges",
        "routing": "asks for the bank's routing number",
        "order_checks": "wants to order new paper checks (a checkbook)",
        "freeze_account": "wants to freeze or lock their account themselves",
        "account_blocked": "says their account is blocked, locked or frozen and asks why or how to unblock it",
        "report_fraud": "reports fraud, an unauthorised charge or suspicious activity on their account",
        "pin_change": "wants to change or reset their PIN",
    },
    "credit_cards": {
        "credit_score": "asks what their current credit score is",
        "improve_credit_score": "asks how to raise or improve their credit score",
        "credit_limit": "asks what their credit card's spending limit is",
        "credit_limit_change": "asks to raise or lower their credit limit",
        "apr": "asks for the APR (annual percentage rate) of a card",
        "rewards_balance": "asks how many reward points or how much cash back they have",
        "redeem_rewards": "asks how to use or cash in reward points",
        "new_card": "wants to apply for or get a new credit card",
        "application_status": "asks whether a card application was approved or where it stands",
        "report_lost_card": "reports a lost or stolen card",
        "damaged_card": "says their card is damaged, broken or not readable",
        "replacement_card_duration": "asks how long it takes to get a replacement card",
        "expiration_date": "asks when their card expires",
        "card_declined": "says their card was declined or asks why a payment was refused",
        "international_fees": "asks about fees for using the card abroad or in a foreign currency",
    },
    "kitchen_and_dining": {
        "food_last": "asks how long a food keeps or stays good (in the fridge, freezer...)",
        "confirm_reservation": "wants to check or confirm a restaurant reservation they already made",
        "how_busy": "asks how busy or crowded a restaurant is, or how long the wait is",
        "ingredients_list": "asks which ingredients a dish or recipe needs",
        "calories": "asks how many calories a food has",
        "nutrition_info": "asks about the nutrition facts of a food (protein, fat, vitamins, sugar...)",
        "recipe": "asks how to make or cook a dish (a recipe)",
        "restaurant_reviews": "asks what people say about a restaurant (reviews, ratings)",
        "restaurant_reservation": "wants to book a table at a restaurant",
        "meal_suggestion": "asks what to cook or eat (ideas for a meal at home)",
        "restaurant_suggestion": "asks for a restaurant to go to (a recommendation of a place)",
        "cancel_reservation": "wants to cancel a restaurant reservation",
        "ingredient_substitution": "asks what to use instead of an ingredient",
        "cook_time": "asks how long to cook or bake something",
        "accept_reservations": "asks whether a restaurant takes reservations",
    },
    "home": {
        "what_song": "asks what song is playing right now (the name of the current song)",
        "play_music": "wants music played (a song, an artist, a genre or a playlist)",
        "todo_list_update": "wants to add something to their to-do list or remove something from it",
        "reminder": "asks what reminders they have (to hear or check their reminders)",
        "reminder_update": "wants to set a new reminder, or change or delete one",
        "calendar_update": "wants to add, move or remove an event on their calendar",
        "order_status": "asks where an order they placed is or when it will arrive",
        "update_playlist": "wants to add a song to a playlist or remove one from it",
        "shopping_list": "asks what is on their shopping list",
        "calendar": "asks what is on their calendar (their events or plans on a day)",
        "next_song": "wants to skip to the next song",
        "order": "wants to order or buy something (to place a new order)",
        "todo_list": "asks what is on their to-do list",
        "shopping_list_update": "wants to add items to their shopping list or remove items from it",
        "smart_home": "wants to control a device in their home (lights, thermostat, doors, appliances)",
    },
    "auto_and_commute": {
        "current_location": "asks where they are right now (their current location)",
        "oil_change_when": "asks when their car needs its next oil change",
        "oil_change_how": "asks how to change the oil of a car themselves",
        "uber": "wants to book a ride (an Uber, a Lyft, a taxi)",
        "traffic": "asks how the traffic is on a road or on their way",
        "tire_pressure": "asks about the air pressure of their tires",
        "schedule_maintenance": "wants to book a service or maintenance appointment for their car",
        "gas": "asks how much fuel is left in the tank or whether they need to fill up",
        "mpg": "asks about their car's fuel economy (miles per gallon)",
        "distance": "asks how far away a place is or how long it takes to get there",
        "directions": "asks for the way to a place (directions, the route to take)",
        "last_maintenance": "asks when their car last had maintenance or a service",
        "gas_type": "asks what kind of fuel their car takes",
        "tire_change": "asks how or when to change a tire",
        "jump_start": "asks how to jump-start a car (a dead battery)",
    },
    # travel, utility and meta: written from the intent names alone, before any run or look at their messages;
    # their tasks are locked-only
    "travel": {
        "plug_type": "asks what kind of power plug or adapter they need in a country",
        "travel_notification": "wants to tell their bank that they will travel (a travel notice on their card)",
        "translate": "asks how to say a word or a phrase in another language",
        "flight_status": "asks whether a flight is on time or delayed, or when it leaves or lands",
        "international_visa": "asks whether they need a visa to visit a country",
        "timezone": "asks what time zone a place is in",
        "exchange_rate": "asks for the exchange rate between two currencies",
        "travel_suggestion": "asks for things to do or places to see on a trip",
        "travel_alert": "asks whether it is safe to travel to a place (travel warnings)",
        "vaccines": "asks which vaccinations they need for a trip",
        "lost_luggage": "says their luggage is lost or asks about a missing bag",
        "book_flight": "wants a flight booked",
        "book_hotel": "wants a hotel room booked",
        "carry_on": "asks what they may take as carry-on baggage",
        "car_rental": "wants to rent a car",
    },
    "utility": {
        "weather": "asks about the weather",
        "alarm": "wants an alarm set",
        "date": "asks what the date is, or what day of the week a date is",
        "find_phone": "wants help finding their phone",
        "share_location": "wants their location shared with someone",
        "timer": "wants a timer set",
        "make_call": "wants to call someone",
        "calculator": "asks for a calculation (arithmetic)",
        "definition": "asks what a word means",
        "measurement_conversion": "asks to convert a measurement from one unit to another",
        "flip_coin": "wants a coin flipped",
        "spelling": "asks how a word is spelled",
        "time": "asks what time it is",
        "roll_dice": "wants dice rolled",
        "text": "wants to send a text message",
    },
    "meta": {
        "change_speed": "asks the assistant to speak faster or slower",
        "user_name": "asks what their own name is, or what the assistant calls them",
        "whisper_mode": "asks the assistant to whisper or to speak quietly (whisper mode on or off)",
        "yes": "says yes or agrees",
        "change_volume": "asks the assistant to speak louder or more softly (its volume)",
        "no": "says no or disagrees",
        "change_language": "asks the assistant to speak in another language",
        "repeat": "asks the assistant to say again what it just said",
        "change_accent": "asks the assistant to speak with another accent",
        "cancel": "wants the current request cancelled or to stop it (never mind, forget it)",
        "sync_device": "wants the assistant synced or paired with their phone or another device",
        "change_user_name": "wants the assistant to call them by another name",
        "change_ai_name": "wants to give the assistant a new name",
        "reset_settings": "wants the assistant's settings reset to their defaults",
        "maybe": "says maybe or that they are not sure",
    },
    "small_talk": {
        "greeting": "says hello or greets the assistant",
        "goodbye": "says goodbye or ends the conversation",
        "thank_you": "thanks the assistant",
        "tell_joke": "asks to be told a joke",
        "fun_fact": "asks to be told a fun or interesting fact",
        "meaning_of_life": "asks what the meaning or purpose of life is",
        "what_is_your_name": "asks what the assistant's name is",
        "how_old_are_you": "asks how old the assistant is",
        "where_are_you_from": "asks where the assistant comes from or was made",
        "who_made_you": "asks who made, built or created the assistant",
        "who_do_you_work_for": "asks who the assistant works for or who its boss is",
        "are_you_a_bot": "asks whether the assistant is a bot, a computer or a real person",
        "what_are_your_hobbies": "asks what the assistant likes to do for fun (its hobbies)",
        "do_you_have_pets": "asks whether the assistant has any pets",
        "what_can_i_ask_you": "asks what the assistant can do or what they can ask it",
    },
    "work": {
        "pto_request_status": "asks whether their time-off request was approved",
        "next_holiday": "asks when the next holiday is",
        "insurance_change": "wants to change their insurance plan",
        "insurance": "asks what insurance or benefits plan they have",
        "meeting_schedule": "asks what meetings they have or when a meeting is",
        "payday": "asks when they get paid next",
        "taxes": "asks about their taxes (filing, owing, refund)",
        "income": "asks how much they earn (salary, income)",
        "rollover_401k": "asks how to move (roll over) their 401k to another plan or employer",
        "pto_balance": "asks how many vacation or time-off days they have left",
        "pto_request": "wants to request time off (vacation days)",
        "w2": "asks about their W-2 tax form (where to get it, what it says)",
        "schedule_meeting": "wants to set up a new meeting",
        "direct_deposit": "asks how to set up or change direct deposit of their pay",
        "pto_used": "asks how many vacation or time-off days they have already used",
    },
}
OOS_DEFINITION = "anything that matches none of the intents above (another topic)"


# Subsets of a domain's intents: the ones the plain seed confuses most (a harder, smaller label set).
SUBSETS: dict[str, tuple[str, ...]] = {
    "banking8": ("account_blocked", "balance", "bill_balance", "bill_due", "freeze_account", "min_payment",
                 "pay_bill", "transactions"),
    # eight questions about the assistant whose names share words ("you", "your", "who", "what"), sized as a user's
    # family (24 train, 40 validation, 80 test): issue 59's unseen-family check, named before any run
    "smalltalk8": ("are_you_a_bot", "how_old_are_you", "what_are_your_hobbies", "what_can_i_ask_you",
                   "what_is_your_name", "where_are_you_from", "who_do_you_work_for", "who_made_you"),
}


def labels(domain: str, oos: bool = False, subset: str | None = None) -> list[str]:
    """The label set of a domain (sorted), or of one of its `SUBSETS`, with `out_of_scope` last when `oos`."""
    names = SUBSETS[subset] if subset else DEFINITIONS[domain]
    return sorted(names) + ([OOS] if oos else [])


def seed_instruction(domain: str, oos: bool = False, subset: str | None = None) -> str:
    """The plain seed: the task, the labels and the answer format, nothing more."""
    scope = (f" If the message matches none of them, answer {OOS}." if oos else "")
    return (f"Classify the customer's message into one of these {domain.replace('_', ' ')} intents: "
            f"{', '.join(labels(domain, subset=subset))}.{scope} Reply with only the intent name.")


def expert_instruction(domain: str, oos: bool = False, subset: str | None = None, *, form: str = "rules") -> str:
    """The hand-written expert prompt: the seed plus the same one-line definitions, in one of two forms.

    `form="rules"` (the default) appends one "If the customer <definition>, answer <intent>." line per intent
    to the plain seed: the form a 0.5B model follows. `form="definitions"` lists "<intent>: the customer
    <definition>" lines, a form the 0.5B barely follows (docs/design-notes.md).
    """
    names = labels(domain, subset=subset)
    if form == "rules":
        lines = [f"- If the customer {DEFINITIONS[domain][name]}, answer {name}." for name in names]
        if oos:
            lines.append(f"- If the message is about something that matches none of the intents above, answer {OOS}.")
        return seed_instruction(domain, oos, subset) + "\n" + "\n".join(lines)
    if form != "definitions":
        raise ValueError(f"unknown expert form {form!r}: rules or definitions")
    lines = [f"- {name}: the customer {DEFINITIONS[domain][name]}" for name in names]
    if oos:
        lines.append(f"- {OOS}: {OOS_DEFINITION}")
    return (f"Classify the customer's message into exactly one {domain.replace('_', ' ')} intent. The intents:\n"
            + "\n".join(lines) + "\nReply with only the intent name, exactly as written above.")


_PREFIX = re.compile(r"^(?:the\s+)?(?:intent|label|answer|category)\s*(?:is)?\s*[:=-]?\s*", re.I)


def normalize_label(text: Any) -> str:
    """Lowercase, trim quotes/backticks/a trailing period and a leading 'intent:'; spaces and hyphens -> '_'."""
    s = str(text if text is not None else "").strip().strip("`\"'*").strip()
    s = _PREFIX.sub("", s).strip().strip("`\"'*").rstrip(".").strip()
    return re.sub(r"[\s\-]+", "_", s.lower())


def make_metric(label_set: list[str]) -> Any:
    allowed = ", ".join(label_set)
    known = set(label_set)

    def metric(example: Example, output: Any, trace: list[TraceEntry] | None = None) -> Score:
        gold = example.gold
        got = normalize_label(output)
        if got == gold:
            return Score(1.0, f"Correct: {gold}.")
        if got in known:
            return Score(0.0, f"Wrong intent: answered {got}, but this message is {gold}.",
                         pattern=f"answered {got}, expected {gold}")
        shown = str(output or "").strip().replace("\n", " ")[:80] or "(empty)"
        return Score(0.0, f"The answer {shown!r} is not one of the intents. Reply with exactly one intent name "
                          f"from: {allowed}. Here the right intent is {gold}.", pattern="not a valid intent name")

    return metric


def _read(data_dir: Any) -> tuple[dict[str, list[list[str]]], dict[str, list[str]]]:
    from gepetto.tasks import default_data_dir

    base = Path(data_dir) if data_dir is not None else default_data_dir()
    for folder in (base / FOLDER, base):
        if (folder / "data_full.json").is_file():
            data = json.loads((folder / "data_full.json").read_text(encoding="utf-8"))
            domains_file = folder / "domains.json"
            domains = json.loads(domains_file.read_text(encoding="utf-8")) if domains_file.is_file() else {}
            return data, domains
    raise FileNotFoundError(f"data_full.json not found under {base / FOLDER} (set data_dir or GEPETTO_DATA_DIR)")


def _balanced(rows: list[tuple[str, str]], label_set: list[str], n: int, rng: random.Random) -> list[tuple[str, str]]:
    """`n` rows spread as evenly as possible over the labels (round-robin over per-label shuffled lists)."""
    by_label: dict[str, list[tuple[str, str]]] = {lab: [] for lab in label_set}
    for row in rows:
        if row[1] in by_label:
            by_label[row[1]].append(row)
    for items in by_label.values():
        rng.shuffle(items)
    out: list[tuple[str, str]] = []
    depth = 0
    while len(out) < n and any(len(v) > depth for v in by_label.values()):
        for lab in label_set:
            if len(out) < n and len(by_label[lab]) > depth:
                out.append(by_label[lab][depth])
        depth += 1
    rng.shuffle(out)
    return out


def load(
    data_dir: Any = None, *, seed: int = 0, domain: str = "banking", oos: bool = False, subset: str | None = None,
    n_train: int = 60, n_val: int = 30, n_test: int = 150, oos_share: float = 0.2, test_split: str = "dev",
    **_: Any,
) -> Task:
    """A CLINC150 single-domain task (or a `SUBSETS` entry of a domain's intents).

    Each split is drawn from CLINC's split of the same name. `test_split="dev"` gives the `n_test` test messages
    every decision is made on; `"locked"` gives the domain's other test messages (about 300, plus an out-of-scope
    share with `oos`), kept to be scored once, when a result is reported.
    """
    if test_split not in ("dev", "locked"):
        raise ValueError(f"test_split must be 'dev' or 'locked', got {test_split!r}")
    if domain not in DEFINITIONS:
        raise ValueError(f"no hand-written definitions for domain {domain!r}; domains: {sorted(DEFINITIONS)}")
    if subset is not None and (subset not in SUBSETS or not set(SUBSETS[subset]) <= set(DEFINITIONS[domain])):
        raise ValueError(f"unknown intent subset {subset!r} for domain {domain!r}; subsets: {sorted(SUBSETS)}")
    data, domains = _read(data_dir)
    if domains and sorted(domains.get(domain, [])) != sorted(DEFINITIONS[domain]):
        raise ValueError(f"domain {domain!r} in domains.json does not match the built-in intent list")
    rng = random.Random(f"clinc:{domain}:{oos}:{seed}")
    label_set = labels(domain, oos, subset)
    splits: dict[str, list[Example]] = {}
    for part, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        n_oos = round(n * oos_share) if oos else 0
        rows = _balanced([(t, lab) for t, lab in data[part]], labels(domain, subset=subset), n - n_oos, rng)
        oos_rows = list(data[f"oos_{part}"])
        rng.shuffle(oos_rows)
        rows += [(t, OOS) for t, _ in oos_rows[:n_oos]]
        rng.shuffle(rows)
        splits[part] = [Example({"message": t}, gold=lab, id=f"clinc-{part}-{_key(t, lab)}") for t, lab in rows]
        if part == "test" and test_split == "locked":
            splits[part] = _locked(data, labels(domain, subset=subset), rows, oos_rows[n_oos:], oos_share if oos else 0,
                                   rng)
    majority = Counter(e.gold for e in splits["train"]).most_common(1)[0][0]
    name = f"clinc-{subset or domain}" + ("-oos" if oos else "")
    return Task(
        name=name,
        program=single_instruction("instruction", max_tokens=16),
        metric=make_metric(label_set),
        seed_candidate=Candidate(instruction=seed_instruction(domain, oos, subset)),
        trainset=splits["train"], valset=splits["val"], testset=splits["test"],
        description=f"CLINC150 intents of the {domain} domain ({len(label_set)} labels): message -> intent name.",
        expert_candidate=Candidate(instruction=expert_instruction(domain, oos, subset)),
        baseline=majority,
    )


def _locked(data: dict[str, list[list[str]]], label_set: list[str], dev: list[tuple[str, str]],
            oos_rest: list[Any], oos_share: float, rng: random.Random) -> list[Example]:
    """The test messages of the label set that the dev test split does not hold, with an out-of-scope share drawn
    from the out-of-scope test messages it does not hold."""
    used = set(map(tuple, dev))
    rows = [(t, lab) for t, lab in data["test"] if lab in label_set and (t, lab) not in used]
    n_oos = round(len(rows) * oos_share / (1 - oos_share)) if oos_share else 0
    rows += [(t, OOS) for t, _ in oos_rest[:n_oos]]
    rng.shuffle(rows)
    return [Example({"message": t}, gold=lab, id=f"clinc-locked-{_key(t, lab)}") for t, lab in rows]


def _key(text: str, label: str) -> str:
    import hashlib

    return hashlib.sha256(f"{text}\t{label}".encode()).hexdigest()[:10]
