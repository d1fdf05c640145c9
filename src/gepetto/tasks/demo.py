"""The quick demo task: turn a customer's order message into a JSON record.

The seed instruction states the task and the output format plainly (`{"item": ..., "quantity": N}`); it does
not state the house facts the metric knows ("a dozen" is 12, "a couple" is 2, a size, a date, an age or an
order number is not the quantity, a container ordered is the item). The metric's feedback names the fact that
applies to each message, so a reflective optimiser can write them into the instruction. `EXPERT_INSTRUCTION`
is the prompt a person writes from that definition (the headroom: `benchmarks/results/tasks.md`). The
messages are written for this project.
"""

from __future__ import annotations

import random
import re
from typing import Any

from gepetto.program import Task, TraceEntry, single_instruction
from gepetto.tasks.common import parse_json_object
from gepetto.types import Candidate, Example, Score

FORMAT = 'Reply with only a JSON object: {"item": "<what is ordered>", "quantity": <integer>}.'
SEED_INSTRUCTION = f"Extract the order from the customer's message. {FORMAT}"
# written by hand from the task's definition (the house facts above) before any optimisation, with examples that
# are not in the dataset: the form that scored best on validation (docs/design-notes.md)
EXPERT_INSTRUCTION = (
    f"{SEED_INSTRUCTION}\n"
    "The quantity is a number, never in quotes; the item is the thing ordered, in one word, without the number. "
    "Examples:\n"
    '"A dozen oranges, please." -> {"item": "orange", "quantity": 12}\n'
    '"Could I get a couple of forks?" -> {"item": "fork", "quantity": 2}\n'
    '"Half a dozen tulips for room 12." -> {"item": "tulip", "quantity": 6}\n'
    '"Two crates of apples." -> {"item": "crate", "quantity": 2}\n'
    '"A pair of slippers, size 40." -> {"item": "slipper", "quantity": 2}'
)

# (message, item, quantity, note): note explains a trap, shown in the feedback when it is missed
ORDERS: list[tuple[str, str, int, str]] = [
    ("Hi, could I get a dozen eggs delivered tomorrow?", "egg", 12, "'a dozen' means 12"),
    ("I'd like to order three notebooks for my kids.", "notebook", 3, ""),
    ("Please send a pair of socks, size 42.", "sock", 2, "'a pair of' means 2; the size is not the quantity"),
    ("We need 40 chairs for the wedding hall.", "chair", 40, ""),
    ("Can you add a couple of lamps to my basket?", "lamp", 2, "'a couple of' means 2"),
    ("One umbrella please, the big black one.", "umbrella", 1, "'one' means 1"),
    ("Half a dozen bagels for the office, thanks!", "bagel", 6, "'half a dozen' means 6"),
    ("I want to buy five towels.", "towel", 5, ""),
    ("Two dozen roses for my mother's 60th birthday.", "rose", 24, "'two dozen' means 24; the age is not the quantity"),
    ("Send me 12 pencils.", "pencil", 12, ""),
    ("Could you deliver a sofa on March 3?", "sofa", 1, "'a' means 1; the date is not the quantity"),
    ("I need seven candles for the cake.", "candle", 7, ""),
    ("A pair of gloves, please.", "glove", 2, "'a pair of' means 2"),
    ("Order 250 envelopes for invoice 7781.", "envelope", 250, "the invoice number is not the quantity"),
    ("Can I have a couple of pillows?", "pillow", 2, "'a couple of' means 2"),
    ("Ten mugs with our logo, please.", "mug", 10, ""),
    ("Just a single kettle.", "kettle", 1, "'a single' means 1"),
    ("We'd like a dozen donuts for 9 people.", "donut", 12,
     "'a dozen' means 12; the number of people is not the quantity"),
    ("Four backpacks for the school trip.", "backpack", 4, ""),
    ("Please ship 3 monitors to room 204.", "monitor", 3, "the room number is not the quantity"),
    ("An office desk, as soon as possible.", "desk", 1, "'an' means 1"),
    ("I'll take eight spoons.", "spoon", 8, ""),
    ("Half a dozen lemons, organic if you have them.", "lemon", 6, "'half a dozen' means 6"),
    ("A couple of blankets for the guest room.", "blanket", 2, "'a couple of' means 2"),
    ("Send 15 folders before Friday the 13th.", "folder", 15, "the date is not the quantity"),
    ("Could I order nine plates?", "plate", 9, ""),
    ("One printer for the 3rd floor.", "printer", 1, "'one' means 1; the floor is not the quantity"),
    ("A pair of boots in size 38.", "boot", 2, "'a pair of' means 2; the size is not the quantity"),
    ("We need 100 balloons for the party.", "balloon", 100, ""),
    ("Six jars of honey, please.", "jar", 6, "the item is the container ordered (jar)"),
    ("Twenty bottles of water for the team.", "bottle", 20, "the item is the container ordered (bottle)"),
    ("A dozen muffins for 2 o'clock.", "muffin", 12, "'a dozen' means 12; the time is not the quantity"),
    ("I'd like a lamp for my 5-year-old's room.", "lamp", 1, "'a' means 1; the age is not the quantity"),
    ("Three boxes of tea.", "box", 3, "the item is the container ordered (box)"),
    ("Can you send a couple of chargers?", "charger", 2, "'a couple of' means 2"),
    ("Eleven shirts for the football team.", "shirt", 11, ""),
    ("Two dozen cookies, please.", "cookie", 24, "'two dozen' means 24"),
    ("A single mattress, 90 cm wide.", "mattress", 1, "'a single' means 1; the width is not the quantity"),
    ("Please add 30 cups to order 5521.", "cup", 30, "the order number is not the quantity"),
    ("One pair of sunglasses.", "sunglasses", 1, "'one pair of sunglasses' is 1 item"),
    ("I need two keyboards.", "keyboard", 2, ""),
    ("A dozen towels for the 4 bathrooms.", "towel", 12, "'a dozen' means 12; the number of rooms is not the quantity"),
    ("Fifty stickers, please.", "sticker", 50, ""),
    ("Send a couple of tents for the camping trip.", "tent", 2, "'a couple of' means 2"),
    ("A chair for my desk.", "chair", 1, "'a' means 1"),
    ("Half a dozen candles, vanilla scent.", "candle", 6, "'half a dozen' means 6"),
    ("I'd like 6 bowls and nothing else.", "bowl", 6, ""),
    ("A pair of earrings for my wife's 40th.", "earring", 2, "'a pair of' means 2; the age is not the quantity"),
]


def _norm_item(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[^a-z ]", "", str(text).lower())).strip()


def _item_forms(text: str) -> set[str]:
    """The item as written plus the singulars it may stand for: "boxes" -> box, "cookies" -> cookie or
    cooky, "candles" -> candle (never "candl"): "es" goes only after s/x/z/ch/sh, "ies" may be "y"."""
    t = _norm_item(text)
    forms = {t}
    if len(t) > 3 and t.endswith("s") and not t.endswith("ss"):
        forms.add(t[:-1])  # candles -> candle, horses -> horse, cookies -> cookie
        if t.endswith("ies") and len(t) > 4:
            forms.add(t[:-3] + "y")  # berries -> berry
        elif t.endswith("es") and t[:-2].endswith(("s", "x", "z", "ch", "sh")):
            forms.add(t[:-2])  # boxes -> box, glasses -> glass, lunches -> lunch
    return forms


def same_item(answer: Any, gold: str) -> bool:
    """Whether the answer names the gold item, singular or plural."""
    return bool(_item_forms(str(answer)) & _item_forms(gold))


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """0.2 for a JSON object with the right keys, 0.4 for the item (singular or plural), 0.4 for the quantity."""
    gold_item, gold_qty, note = example.gold["item"], example.gold["quantity"], example.gold["note"]
    text = str(output or "").strip()
    data = parse_json_object(text)
    if data is None or not {"item", "quantity"} <= set(data):
        return Score(0.0, f"The reply is not the required JSON. {FORMAT} Here the answer is "
                          f'{{"item": "{gold_item}", "quantity": {gold_qty}}}.' + (f" Note: {note}." if note else ""))
    score, problems = 0.2, []
    if same_item(data["item"], gold_item):
        score += 0.4
    else:
        problems.append(f'"item" should be "{gold_item}" (the thing ordered, one or two words), not {data["item"]!r}')
    qty = data["quantity"]
    if isinstance(qty, int) and not isinstance(qty, bool) and qty == gold_qty:
        score += 0.4
    else:
        why = f" ({note})" if note else ""
        problems.append(f'"quantity" should be the integer {gold_qty}{why}, not {qty!r}')
    if not problems:
        return Score(1.0, "Correct.")
    return Score(round(score, 2), "Valid JSON, but " + "; ".join(problems) + ".")


def examples() -> list[Example]:
    """All demo orders as examples, with stable ids."""
    return [
        Example({"message": msg}, gold={"item": item, "quantity": qty, "note": note}, id=f"demo-{i:02d}")
        for i, (msg, item, qty, note) in enumerate(ORDERS)
    ]


def load(
    data_dir: Any = None, *, seed: int = 0, n_train: int = 14, n_val: int = 14, n_test: int = 20, **_: Any
) -> Task:
    """Shuffle the orders with `seed` and split them into train / val / test."""
    items = examples()
    random.Random(f"demo:{seed}").shuffle(items)
    if n_train + n_val + n_test > len(items):
        raise ValueError(f"the demo task has {len(items)} examples; asked for {n_train + n_val + n_test}")
    return Task(
        name="demo",
        program=single_instruction("instruction", max_tokens=60),
        metric=metric,
        seed_candidate=Candidate(instruction=SEED_INSTRUCTION),
        trainset=items[:n_train],
        valset=items[n_train : n_train + n_val],
        testset=items[n_train + n_val : n_train + n_val + n_test],
        description="Turn customer order messages into JSON {item, quantity} (written for gepetto).",
    )
