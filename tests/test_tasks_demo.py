"""The demo task's metric: an item counts in singular or plural form, and no word is mangled."""

from __future__ import annotations

import json

import pytest

from gepetto.tasks import demo


def plural(word: str) -> str:
    if word == "sunglasses":
        return word
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


ITEMS = sorted({item for _, item, _, _ in demo.ORDERS})


@pytest.mark.parametrize("item", ITEMS)
def test_every_demo_item_scores_in_singular_and_plural(item: str) -> None:
    for ex in demo.examples():
        if ex.gold["item"] != item:
            continue
        for form in (item, plural(item), item.upper(), f" {plural(item)}."):
            score = demo.metric(ex, json.dumps({"item": form, "quantity": ex.gold["quantity"]}), [])
            assert score.value == 1.0, (form, score.feedback)


@pytest.mark.parametrize("singular, plural_form", [
    ("candle", "candles"), ("plate", "plates"), ("bottle", "bottles"), ("glove", "gloves"),
    ("envelope", "envelopes"), ("rose", "roses"), ("cookie", "cookies"), ("kettle", "kettles"),
    ("box", "boxes"), ("glass", "glasses"), ("lunch", "lunches"), ("dish", "dishes"), ("berry", "berries"),
    ("mattress", "mattresses"), ("horse", "horses"), ("bus", "buses"),
])
def test_singular_and_plural_name_the_same_item(singular: str, plural_form: str) -> None:
    assert demo.same_item(plural_form, singular) and demo.same_item(singular, plural_form)
    assert demo.same_item(singular, singular) and demo.same_item(plural_form, plural_form)


@pytest.mark.parametrize("answer, gold", [
    ("candl", "candle"), ("egg", "eggnog"), ("cup", "cupcake"), ("lamp", "lamb"), ("box", "fox"),
    ("sock", "socket"), ("plate", "plat"), ("chair", "chairman"),
])
def test_other_items_do_not_match(answer: str, gold: str) -> None:
    assert not demo.same_item(answer, gold)
