"""The quick demo task: route customer-support messages to a team.

The seed instruction does not say which teams exist, how to answer, or the house rules (a refund is
`billing` even when it mentions a parcel; a broken item on arrival is `shipping`). The feedback on each
answer reveals them, so a reflective optimiser can write them into the instruction, and a small model
following a better instruction scores measurably better. The messages are written for this project.
"""

from __future__ import annotations

import random
from typing import Any

from gepetto.program import Task, TraceEntry, single_instruction
from gepetto.types import Candidate, Example, Score

LABELS = ("account", "billing", "shipping", "technical")

SEED_INSTRUCTION = "Read the customer's message and say what it is about."

# Why each team owns its messages; the feedback quotes the rule that applies.
RULES = {
    "account": "login, password, email address, two-factor codes and closing or changing an account go to account",
    "billing": "charges, invoices, payment methods and every refund request go to billing, even when the refund "
    "is for a returned or lost parcel",
    "shipping": "delivery dates, tracking, lost parcels, wrong addresses and items damaged on arrival go to shipping",
    "technical": "app crashes, error messages, bugs and features that do not work go to technical",
}

MESSAGES: dict[str, list[str]] = {
    "account": [
        "I forgot my password and the reset email never arrives.",
        "How do I change the email address on my profile?",
        "My two-factor code is always rejected when I try to sign in.",
        "Please close my account and delete my data.",
        "Someone else logged into my account from another country.",
        "I want to change my username, is that possible?",
        "My account got locked after three wrong passwords.",
        "Can I merge my two accounts into one?",
        "I no longer have access to the phone number linked to my login.",
        "The sign-in page says my email is not registered, but I have ordered before.",
        "How can I add a second user to my family account?",
        "I'd like to update the name shown on my profile.",
        "I never asked for an account, please remove it.",
        "Why do I get logged out every few minutes?",
        "I can't remember which email I used to sign up.",
    ],
    "billing": [
        "I was charged twice for the same order.",
        "I returned the shoes two weeks ago and still have no refund.",
        "Can you send me an invoice with my company's VAT number?",
        "My credit card expired, how do I add a new one?",
        "The parcel never arrived, I want my money back.",
        "Why is there a monthly fee on my statement?",
        "The discount code was not applied to my total.",
        "Please refund the broken lamp, I already sent it back.",
        "Can I pay in three instalments?",
        "I cancelled my subscription but was billed again.",
        "The price went up after I placed the order.",
        "I need a receipt for my expense report.",
        "My payment failed but the money left my bank account.",
        "Do you accept bank transfers?",
        "I got a refund for the wrong amount.",
    ],
    "shipping": [
        "My parcel has said 'in transit' for ten days.",
        "The tracking number you sent does not work.",
        "The vase arrived smashed into pieces.",
        "Can I change the delivery address of my order?",
        "The courier left my package at the wrong house.",
        "When will my order be delivered?",
        "Do you ship to Norway?",
        "I received someone else's order.",
        "One of the three items is missing from the box.",
        "Can the delivery come on Saturday instead?",
        "The box was soaking wet and the book inside is ruined.",
        "My order shows delivered but nothing is here.",
        "How much does express delivery cost and how fast is it?",
        "I need the parcel before Friday, can you speed it up?",
        "The driver did not ring and took the package back.",
    ],
    "technical": [
        "The app crashes every time I open the cart.",
        "I get 'error 503' when I try to check out.",
        "The search bar returns nothing, even for products I can see.",
        "Pictures on the product pages don't load.",
        "The website is stuck on a blank page in my browser.",
        "Push notifications stopped working after the update.",
        "The size filter does nothing when I click it.",
        "The app shows prices in the wrong currency after the update.",
        "I can't upload a photo for my review, it just spins.",
        "The checkout button is greyed out and can't be clicked.",
        "Dark mode makes the text invisible on the order page.",
        "The barcode scanner in the app freezes my phone.",
        "Links in your newsletter lead to a 404 page.",
        "The wishlist loses its items whenever I close the app.",
        "The page keeps reloading when I enter my postcode.",
    ],
}


def _answer_label(output: str) -> str:
    return output.strip().strip(".!\"'`*").strip().lower()


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """1 for exactly the right team name; 0.3 if the right name is there among other words; else 0."""
    gold = example.gold
    text = str(output or "")
    answer = _answer_label(text)
    fmt = f"Reply with only the team name, one of: {', '.join(LABELS)} (lowercase, no other words)."
    if answer == gold:
        return Score(1.0, f"Correct: '{gold}'.")
    mentioned = [label for label in LABELS if label in text.lower()]
    if mentioned == [gold]:
        return Score(0.3, f"Right team ('{gold}') but the reply has other words. {fmt}")
    if not text.strip():
        return Score(0.0, f"The reply is empty. The expected answer is '{gold}'. {fmt}")
    return Score(0.0, f"Wrong: expected '{gold}'. Rule: {RULES[gold]}. {fmt}")


def examples() -> list[Example]:
    """All demo messages as examples, ids stable (label + position)."""
    return [
        Example({"message": msg}, gold=label, id=f"demo-{label}-{i:02d}")
        for label, msgs in MESSAGES.items()
        for i, msg in enumerate(msgs)
    ]


def load(
    data_dir: Any = None, *, seed: int = 0, n_train: int = 16, n_val: int = 16, n_test: int = 28, **_: Any
) -> Task:
    """Shuffle the 60 messages with `seed` and split them into train / val / test (balanced by team)."""
    rng = random.Random(f"demo:{seed}")
    by_label = {label: [e for e in examples() if e.gold == label] for label in LABELS}
    for items in by_label.values():
        rng.shuffle(items)
    # deal the examples round-robin across teams so every split sees all teams
    dealt = [e for group in zip(*by_label.values(), strict=True) for e in group]
    if n_train + n_val + n_test > len(dealt):
        raise ValueError(f"the demo task has {len(dealt)} examples; asked for {n_train + n_val + n_test}")
    train = dealt[:n_train]
    val = dealt[n_train : n_train + n_val]
    test = dealt[n_train + n_val : n_train + n_val + n_test]
    return Task(
        name="demo",
        program=single_instruction("instruction", max_tokens=48),
        metric=metric,
        seed_candidate=Candidate(instruction=SEED_INSTRUCTION),
        trainset=train,
        valset=val,
        testset=test,
        description="Route customer-support messages to one of four teams (written for gepetto).",
    )
