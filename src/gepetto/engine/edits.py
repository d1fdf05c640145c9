"""Edit reflection: one small, checkable change per proposal, aimed at one frequent mistake.

Small reflection models (1-2B) rarely improve a prompt by rewriting it whole: their rewrites come back
truncated, unchanged, or lose what worked. What they can do is write one rule for one mistake when they are
shown that mistake several times, next to cases that must not change. So an edit proposal:

1. gathers evidence for free: every rollout the parent already paid for on training examples;
2. groups the failures into patterns (`Score.pattern`, else the feedback's first sentence) and picks one,
   weighted by how often it occurs, skipping patterns whose rules already failed twice on this parent;
3. asks for ONE rule that fixes it, showing a few of its failures, a few solved contrast cases and the
   rules already tried for it; the answer is a sentence or two, fast to decode even on a CPU;
   when the pattern names the right answer ("answered X, expected Y"), it also shows other inputs whose right
   answer is Y (from any candidate's paid training rollouts) and asks for a rule that describes them all:
   a definition of when to answer Y, not a patch for the few inputs it failed on;
4. appends the rule to the component's text (the child), or replaces the rule line that already names Y (one
   rule per answer, sharpened instead of piled up), and gates it on the focus failures *and* on solved
   examples (cases of X and of Y), so a rule that breaks easy cases is rejected before validation is paid.

Pure functions here; the loop (engine/loop.py) pays for rollouts and asks the reflection LM.

With `definitions` (EngineConfig), the first proposal drafts the whole list at once instead: one rule per right
answer seen in the training rollouts, each asked from up to 4 inputs whose right answer it is
(`build_definition_prompt`), vetted the same way; later edits sharpen those lines one answer at a time.

Appending a rule line suits an instruction, not a regex or code: a component with a description
(`EngineConfig.component_descriptions`) is an artifact, and the loop rewrites it whole (engine/reflect.py).
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest

from gepetto.engine.answers import NO_ANSWER, Diagnosis, confusion, names
from gepetto.engine.events import Outcome
from gepetto.engine.reflect import (
    _CHAT_ASKS,
    _CHAT_OPENERS,
    _normal,
    between_tags,
    clip,
    component_feedback,
    drop_repeats,
    echo_fraction,
    has_scaffolding,
    whole_run,
    with_gold,
)
from gepetto.engine.reflect import ReflectionExample as Shown
from gepetto.lm.base import Message
from gepetto.program import Rollout
from gepetto.types import Example

RULE_OPEN, RULE_CLOSE = "<rule>", "</rule>"
MAX_RULE_CHARS = 400

SYSTEM_PROMPT = (
    "You improve the instruction of an AI assistant one rule at a time. You read a mistake it keeps making "
    "and write one short, general rule that fixes it. You never answer the examples yourself and you never "
    "talk to the user."
)

def pattern_of(rollout: Rollout, diagnosis: Diagnosis | None = None) -> str:
    """The failure's pattern (`Diagnosis.pattern`): the metric's `Score.pattern`, else the confusion or the masked
    feedback the diagnosis derives; without a diagnosis, the masked first sentence of the feedback."""
    return (diagnosis or Diagnosis(None, {})).pattern(rollout)


@dataclass(frozen=True)
class Focus:
    """The mistake an edit targets: its pattern, how often it was seen, the failures and contrast cases."""

    pattern: str
    count: int
    failures: list[Rollout]
    contrast: list[Rollout]
    positives: list[Rollout] = field(default_factory=list)  # other inputs whose right answer is the pattern's


def positives(rollouts: Iterable[Rollout], answer: str, exclude: set[str], perfect: float, rng: random.Random,
              k: int = 4, diagnosis: Diagnosis | None = None) -> list[Rollout]:
    """Up to `k` rollouts, one per example outside `exclude`, whose right answer is `answer`: solved with an
    output naming it, or failed with a pattern "answered X, expected <answer>" (the right answer is a property of
    the example, so any candidate's rollout shows it). Solved ones come first; the draw depends on `rng` only."""
    solved: dict[str, Rollout] = {}
    missed: dict[str, Rollout] = {}
    for r in rollouts:
        if r.example_id in exclude:
            continue
        if r.score.value >= perfect and names_answer(_text(r.output), answer):
            solved.setdefault(r.example_id, r)
        elif r.score.value < perfect and expected_answer(pattern_of(r, diagnosis)).lower() == answer.lower():
            missed.setdefault(r.example_id, r)
    firsts = [solved[i] for i in sorted(solved)]
    rests = [missed[i] for i in sorted(missed) if i not in solved]
    rng.shuffle(firsts)
    rng.shuffle(rests)
    return (firsts + rests)[:k]


def choose_focus(
    evidence: Sequence[Rollout], perfect: float, tried: dict[str, list[str]], rng: random.Random,
    *, max_failures: int = 4, max_contrast: int = 3, max_tries: int = 2, skip: Sequence[str] = (),
    diagnosis: Diagnosis | None = None,
) -> Focus | None:
    """Pick a failure pattern (weighted by frequency, skipping exhausted ones and those in `skip`) and the
    examples to show."""
    failures = [r for r in evidence if r.score.value < perfect]
    solved = [r for r in evidence if r.score.value >= perfect]
    groups: dict[str, list[Rollout]] = {}
    for r in failures:
        groups.setdefault(pattern_of(r, diagnosis), []).append(r)
    open_groups = {p: rs for p, rs in groups.items() if len(tried.get(p, [])) < max_tries and p not in skip}
    if not open_groups:
        return None
    names = sorted(open_groups)  # sorted: the draw depends on the rng only, never on dict order
    pattern = rng.choices(names, weights=[len(open_groups[p]) for p in names])[0]
    chosen = sorted(open_groups[pattern], key=lambda r: r.example_id)
    rng.shuffle(chosen)
    # contrast: solved cases whose answers the failures gave wrongly first (a rule must not break them)
    wrong_outputs = {_text(r.output) for r in chosen}
    ranked = sorted(solved, key=lambda r: (_text(r.output) not in wrong_outputs, rng.random()))
    return Focus(pattern, len(open_groups[pattern]), chosen[:max_failures], ranked[:max_contrast])


def _text(output: object) -> str:
    return " ".join(str(output if output is not None else "").lower().split())


def shown(rollout: Rollout, component: str, limit: int = 600, example: Example | None = None) -> Shown:
    """What the reflection LM sees of one rollout, for one component: its own trace entries, else the whole
    run (the example's inputs, the program's output or error)."""
    calls = [t for t in rollout.trace if t.component == component]
    if calls:
        inputs = "\n".join(t.inputs for t in calls)
        output = "\n".join(t.output for t in calls)
        feedback = with_gold(component_feedback(rollout, calls), rollout, example)
    else:
        run = whole_run(rollout, example)
        inputs, output, feedback = run.inputs, run.output, run.feedback
    return Shown(clip(inputs, limit), clip(output, limit // 2), clip(feedback, limit // 2),
                 rollout.score.value, whole_run=not calls)


def build_edit_prompt(current: str, focus: Focus, component: str, tried_rules: Sequence[str],
                      examples: Mapping[str, Example] | None = None, limit: int | None = None) -> list[Message]:
    """The request for one rule. Our markers never surround text the model should copy into its rule.
    `examples` (by id) give the inputs of runs in which the component left no trace."""
    by_id = examples or {}
    fails = [shown(r, component, example=by_id.get(r.example_id)) for r in focus.failures]
    goods = [shown(r, component, 300, by_id.get(r.example_id)) for r in focus.contrast]
    parts = [
        f"The assistant follows this instruction:\n<current_instruction>\n{current}\n</current_instruction>\n",
        f"On some inputs it makes this mistake: {focus.pattern} ({focus.count} times in the cases we checked). "
        "For example:\n",
    ]
    for ex in fails:
        parts.append(f"Input: {ex.inputs}\n{_answer(ex)}: {ex.output}\nFeedback: {ex.feedback}\n")
    answer = expected_answer(focus.pattern)
    if answer and focus.positives:
        parts.append(f"These inputs also have the right answer {answer}:\n")
        for r in focus.positives:
            parts.append(f"Input: {shown(r, component, 300, by_id.get(r.example_id)).inputs}\n")
    if goods:
        parts.append("It already answers these correctly, and they must stay right:\n")
        for ex in goods:
            parts.append(f"Input: {ex.inputs}\n{_answer(ex)}: {ex.output}\n")
    if tried_rules:
        parts.append("Rules already tried for this mistake that did not help (write a different one):\n"
                     + "\n".join(f"- {r}" for r in tried_rules) + "\n")
    if answer:
        parts.append(
            f"Write ONE short rule (one sentence, at most 40 words) that says when to answer {answer}. Use the "
            f'form "If <what such an input says or asks>, answer {answer}." Describe in general words what the '
            f"inputs whose right answer is {answer} have in common and what sets them apart from the others; do "
            f"not copy the inputs. Write only the rule, between {RULE_OPEN} and {RULE_CLOSE}."
        )
        if rule_line(current, answer) is not None:
            parts.append(f"Your rule replaces the instruction's rule line for {answer}: make it cover those cases too.")
    else:
        parts.append(
            f"Write ONE short rule (one sentence, at most 40 words) that fixes this mistake: {focus.pattern}. "
            'Use the form "If <what such an input says or asks>, <what to answer or do>." Describe that kind of '
            "input in general words; do not copy the inputs and do not repeat rules the instruction already has. "
            f"Write only the rule, between {RULE_OPEN} and {RULE_CLOSE}."
        )
    if limit:
        room = max(limit - len(current) - 3, 0)
        parts.append(f"The instruction may be at most {limit} characters long with the rule: keep the rule under "
                     f"{room} characters.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(parts)}]


def build_definition_prompt(current: str, answer: str, inputs: Sequence[str]) -> list[Message]:
    """The request for the rule line of one answer in a first draft of the rules (EngineConfig.definitions):
    inputs whose right answer it is, and the question what they have in common."""
    shown = "".join(f"Input: {clip(text, 300)}\n" for text in inputs)
    user = (
        f"The assistant follows this instruction:\n<current_instruction>\n{current}\n</current_instruction>\n\n"
        f"These inputs have the right answer {answer}:\n{shown}\n"
        f"Write ONE short rule (one sentence, at most 40 words) that says when to answer {answer}. Use the form "
        f'"If <what such an input says or asks>, answer {answer}." Describe in general words what the inputs whose '
        f"right answer is {answer} have in common and what sets them apart from the others; do not copy the "
        f"inputs. Write only the rule, between {RULE_OPEN} and {RULE_CLOSE}."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def _answer(ex: Shown) -> str:
    return "Program's output" if ex.whole_run else "Assistant's answer"


def parse_rule(raw: str) -> str:
    """The rule inside the answer (tags, else the first non-empty paragraph), as one line."""
    text = between_tags(raw, RULE_OPEN, RULE_CLOSE)
    if text is None:
        paragraphs = [p for p in re.split(r"\n\s*\n", raw.strip()) if p.strip()]
        text = paragraphs[0] if paragraphs else ""
        text = re.sub(r"^\s*(?:\*\*)?(?:new )?rule(?:\*\*)?\s*:\s*", "", text, flags=re.I)
    text = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s+", "", text.strip())
    return " ".join(text.replace(RULE_OPEN, " ").replace(RULE_CLOSE, " ").split()).strip('"').strip()


def copies_pattern(rule: str, pattern: str) -> bool:
    """Whether the rule quotes a clause of the failure pattern's label (e.g. "answered apr" from the pattern
    "answered apr, expected out_of_scope"): the label names the mistake for us; copied into a rule it is noise
    the task LM reads as an answer ("answer apr instead of 'answered apr'")."""
    text = " ".join(rule.lower().split())
    clauses = [" ".join(c.lower().split()) for c in re.split(r"[,;]", pattern)]
    return any(len(c.split()) >= 2 and c in text for c in clauses)


def wrong_answer(pattern: str) -> str:
    """The answer the task LM gave in a confusion pattern "answered X, expected Y" (X, unless its output named no
    answer), else ""."""
    given = confusion(pattern)[0]
    return "" if given == NO_ANSWER else given


def expected_answer(pattern: str) -> str:
    """The right answer a confusion pattern "answered X, expected Y" names (Y: a metric's `Score.pattern`, or the
    confusion a `Diagnosis` derives); any other pattern gives ""."""
    return confusion(pattern)[1]


names_answer = names  # whether a rule names an answer as a whole word (answers.names)


_ANSWER_NAMED = re.compile(r"\banswer(?:\s+with)?\s+[\"'`]?(\w+(?:[.-]\w+)*)", re.I)
# a rule's condition and consequent: "If <condition>, <consequent>." (also "When ...")
_IF_THEN = re.compile(r"^\s*(?:if|when(?:ever)?)\s+(.+),\s*(?:then\s+)?(.+?)\s*$", re.I | re.S)
PASTED_WORDS = 4  # an input of at least this many words, found whole in a rule, was pasted into it


def answers_named(text: str) -> list[str]:
    """The answers the instruction's rule lines give ("- If ..., answer Z.")."""
    return [m[-1] for line in text.split("\n") if line.startswith("- ") and (m := _ANSWER_NAMED.findall(line))]


def pasted_inputs(rule: str, shown_examples: Sequence[Shown]) -> list[str]:
    """The shown inputs (of at least PASTED_WORDS words) that the rule holds whole, word for word: a rule made of
    pasted messages fits the examples it was shown, not the kind of request they are (short messages slip past
    `echo_fraction`'s six-word runs)."""
    text = f" {' '.join(re.findall(r'[a-z0-9]+', rule.lower()))} "
    found = []
    for ex in shown_examples:
        words = re.findall(r"[a-z0-9]+", ex.inputs.lower())
        if len(words) >= PASTED_WORDS and f" {' '.join(words)} " in text and ex.inputs not in found:
            found.append(ex.inputs)
    return found


def with_answer(rule: str, answer: str, rivals: Iterable[str] = ()) -> str:
    """A rule "If <condition>, <consequent>." whose consequent names no answer ("..., prepare it.") given the
    answer it was asked for ("..., answer <answer>."): the condition is the part reflection writes for us; the
    consequent is fixed by the request. Any other rule as it is (one that names a rival answer stays wrong)."""
    m = _IF_THEN.match(rule)
    if not answer or m is None or names_answer(rule, answer) or any(names_answer(m[2], r) for r in rivals if r):
        return rule
    return f"If {m[1].strip()}, answer {answer}."


def vet_rule(raw: str, finish_reason: str, current: str, shown_examples: Sequence[Shown],
             pattern: str = "", *, answer: str | None = None) -> tuple[str, Outcome | None]:
    """(rule, why rejected or None): a rule worth a rollout is short, new, general and free of our markers
    (tags, headers, and the failure pattern's own label); when the pattern names the right answer
    ("answered X, expected Y", or `answer` given), the rule must name Y: small models often write the rule
    towards the wrong answer X ("if the customer asks about the card's validity, answer credit_limit_change"); a
    rule whose consequent names no answer at all gets Y's (`with_answer`). A rule that holds several shown inputs
    whole, or is mostly their words, echoes them. Whether a rule describes the right inputs is left to its test:
    a check on the words of the answers' names read rules for intents whose names share words as written for
    another (issue 59)."""
    rule = parse_rule(raw)
    if finish_reason == "length":
        rule, _ = drop_repeats(rule)
        sentences = re.split(r"(?<=[.!?])\s+", rule)
        complete = [s for s in sentences if s.endswith((".", "!", "?"))]
        if not complete:
            return "", Outcome.TRUNCATED
        rule = " ".join(complete)
    if len(rule) < 12:
        return rule, Outcome.EMPTY
    if len(rule) > MAX_RULE_CHARS:
        sentences = re.split(r"(?<=[.!?])\s+", rule)
        rule = " ".join(sentences[:2])[:MAX_RULE_CHARS]
    answer = expected_answer(pattern) if answer is None else answer
    rule = with_answer(rule, answer, [wrong_answer(pattern), *answers_named(current)])
    if _normal(rule) in _normal(current):
        return rule, Outcome.UNCHANGED
    if _CHAT_OPENERS.match(rule) or _CHAT_ASKS.search(rule):
        return rule, Outcome.CHAT_REPLY
    if has_scaffolding(rule) or (pattern and copies_pattern(rule, pattern)):
        return rule, Outcome.SCAFFOLDING
    if answer and not names_answer(rule, answer):
        return rule, Outcome.MISSES_ANSWER
    if len(pasted_inputs(rule, shown_examples)) > 1 or echo_fraction(rule, shown_examples) > 0.5:
        return rule, Outcome.ECHO
    return rule, None


def retry_hint(why: Outcome, pattern: str, *, answer: str | None = None) -> str:
    """What the reflection LM is told after a refused rule, so the next attempt does not repeat it (`answer`: the
    answer the rule is for when no pattern names it, as in a first draft of the rules)."""
    answer = expected_answer(pattern) if answer is None else answer
    ask = (f"Write a different rule for this mistake ({pattern}), one sentence in the form \"If <what such an "
           f"input says or asks>, <what to answer or do>.\", between {RULE_OPEN} and {RULE_CLOSE}." if pattern else
           f"Write a different rule, one sentence in the form \"If <what such an input says or asks>, answer "
           f"{answer}.\", between {RULE_OPEN} and {RULE_CLOSE}.")
    reasons = {
        Outcome.ALREADY_TRIED: "That rule was already tried and did not help.",
        Outcome.ECHO: "That copies the inputs; say in general words what kind of request they are instead.",
        Outcome.SCAFFOLDING: ("That contains headers, tags or the mistake's label from my message; write "
                                      "only the rule itself, naming the right answer."),
        Outcome.CHAT_REPLY: "Do not talk to me; write the rule for the assistant.",
        Outcome.MISSES_ANSWER: f"The right answer here is {answer}; the rule must say when to answer it.",
        Outcome.OVER_LENGTH: "That rule makes the instruction too long; write a shorter one.",
    }
    return f"{reasons.get(why, f'That answer was not usable ({why.reason}).')} {ask}"


def apply_rule(current: str, rule: str, answer: str = "") -> str:
    """The child's text: the rule as a bullet line, in place of the first bullet line that names `answer` (or,
    with no `answer`, the answer the rule gives: "..., answer Z."), so there is one rule per answer, sharpened;
    else appended (a rules list grows at the end)."""
    lines = current.rstrip().split("\n")
    at = rule_line(current, answer or next(iter(answers_named(f"- {rule}")), ""))
    if at is None:
        return "\n".join([*lines, f"- {rule}"])
    lines[at] = f"- {rule}"
    return "\n".join(lines)


def rule_line(current: str, answer: str) -> int | None:
    """The index of the bullet line of `current` that gives `answer` ("..., answer Z."), else of the first one that
    names it (None: none, or no answer)."""
    if not answer:
        return None
    lines = current.rstrip().split("\n")
    bullets = [i for i, line in enumerate(lines) if line.startswith("- ")]
    gives = [i for i in bullets if answers_named(lines[i])[-1:] == [answer]]
    return next(iter(gives + [i for i in bullets if names_answer(lines[i], answer)]), None)


def gate_batch(focus: Focus | Sequence[Focus], evidence: Sequence[Rollout], perfect: float, n_fail: int,
               n_solved: int, rng: random.Random) -> list[str]:
    """Example ids the child is tested on: each focus' failures (`n_fail` each), then `n_solved` solved cases
    (each focus' contrast and solved positives in turn, so a rule must keep both the wrongly given answer's cases
    and the right answer's)."""
    foci = [focus] if isinstance(focus, Focus) else list(focus)
    ids = list(dict.fromkeys(r.example_id for f in foci for r in f.failures[:n_fail]))
    solved_here = {r.example_id for r in evidence if r.score.value >= perfect}  # known: no parent rollout to pay
    sources = [ids_ for f in foci for ids_ in ([r.example_id for r in f.contrast],
                                                [r.example_id for r in f.positives if r.example_id in solved_here])]
    solved = [i for i in dict.fromkeys(i for turn in zip_longest(*sources) for i in turn if i is not None)
              if i not in ids]
    rest = sorted(r.example_id for r in evidence if r.score.value >= perfect and r.example_id not in solved)
    rng.shuffle(rest)
    ids += [i for i in solved + rest if i not in ids][:n_solved]
    want = n_fail * len(foci) + n_solved
    if len(ids) < want:  # few solved cases: fill with other failures
        others = sorted(r.example_id for r in evidence if r.example_id not in ids)
        rng.shuffle(others)
        ids += others[: want - len(ids)]
    return ids
