"""Reflection: show the reflection LM one component's traces and feedback, parse and vet its proposal.

Small reflection models fail in a few typical ways: they answer the examples instead of writing an
instruction, talk to the user ("Certainly! Please provide..."), copy an example as the "new" instruction, or
hand back the old text. Every proposal is vetted here, before a single rollout is spent on it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gepetto.lm.base import Message
from gepetto.program import Rollout

OPEN_TAG, CLOSE_TAG = "<new_instruction>", "</new_instruction>"

SYSTEM_PROMPT = (
    "You improve the instructions given to an AI assistant. You read the instruction it followed and "
    "examples of its work with feedback, and you write a better instruction. You never answer the "
    "examples yourself and you never talk to the user."
)

TASK_PROMPT = """\
Your job: write a new, complete instruction for the assistant so that it does better on inputs like these.
- Work out what the task really is from the examples and the feedback.
- State every rule, required format and domain fact that the feedback reveals, in general terms: they must
  help on new inputs, not only on these examples.
- If the feedback states the allowed answers or the required answer format, copy those requirements into
  the instruction word for word.
- Keep what already works in the current instruction.
- The assistant will not see these examples or this feedback: spell out everything it needs to know.
- Address the assistant directly ("You ..."). Do not copy the examples, do not answer them.

First write "Lessons:" and, in a few short bullet points, what the feedback says went wrong and the rules
or facts it reveals. Then write the new instruction between {open} and {close}, and nothing after {close}."""


# Said to the reflection LM after a rejected answer, so the retry does not repeat the same mistake.
RETRY_HINTS = {
    "empty": "I found no instruction in your answer. Write the complete new instruction between {open} and {close}.",
    "unchanged": "That is (nearly) the same as the current instruction. Write a clearly different, improved "
    "instruction that fixes the failures described in the feedback, between {open} and {close}.",
    "chat reply": "Do not talk to me or ask for inputs. Write the instruction for the assistant itself, between "
    "{open} and {close}.",
    "copies our prompt markers": "That contains markers from my message (example headers, tags or cut marks). "
    "Write only the instruction itself, in plain words, between {open} and {close}.",
    "echoes the examples": "That copies the examples. Write general instructions for the task instead (rules, "
    "format, facts), between {open} and {close}.",
}


def lessons(raw: str) -> list[str]:
    """The bullet points of the 'Lessons:' block the reflection LM was asked to write first."""
    head = raw.split(OPEN_TAG, 1)[0]
    start = head.lower().find("lessons")
    if start < 0:
        return []
    return [_BULLET.sub("", line).strip() for line in head[start:].splitlines()[1:] if _BULLET.match(line)]


def retry_messages(messages: list[Message], raw: str, reason: str) -> list[Message]:
    """The conversation for the next attempt: the rejected answer and why it was rejected.

    A model that wrote good lessons and then copied the old instruction is asked to turn its own lessons
    into rules: small models often see what went wrong but do not act on it unprompted.
    """
    hint = RETRY_HINTS.get(reason)
    if hint is None:  # truncated: same request, more tokens
        return messages
    text = hint.format(open=OPEN_TAG, close=CLOSE_TAG)
    found = lessons(raw)
    if reason == "unchanged" and found:
        listed = "\n".join(f"- {x}" for x in found)
        text = ("That is (nearly) the same as the current instruction, so the assistant would fail again in the "
                f"same way. Write the instruction again, and this time turn your lessons into explicit rules in "
                f"it (in general terms, not about these examples only):\n{listed}\n"
                f"Put the new instruction between {OPEN_TAG} and {CLOSE_TAG}.")
    return [*messages, {"role": "assistant", "content": clip(raw, 1500) or "(empty)"},
            {"role": "user", "content": text}]


@dataclass(frozen=True)
class ReflectionExample:
    """What the reflection LM sees of one rollout, for one component."""

    inputs: str
    output: str
    feedback: str
    score: float


@dataclass(frozen=True)
class ReflectionProposal:
    """A parsed answer of the reflection LM; `rejected` names why it is unusable, or is empty."""

    text: str
    rejected: str = ""
    raw: str = ""


def clip(text: str, limit: int) -> str:
    """Shorten text to about `limit` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 20)
    head, tail = text[: keep * 2 // 3], text[-(keep // 3) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def reflective_examples(rollouts: Sequence[Rollout], component: str) -> list[ReflectionExample]:
    """One entry per rollout that called `component` (or failed before it could), most instructive first."""
    out: list[ReflectionExample] = []
    for r in rollouts:
        calls = [t for t in r.trace if t.component == component]
        if calls:
            inputs = "\n---\n".join(t.inputs for t in calls)
            output = "\n---\n".join(t.output for t in calls)
        elif r.error:
            inputs, output = "(the program failed before this component answered)", ""
        else:
            continue
        out.append(ReflectionExample(inputs, output, r.score.feedback, r.score.value))
    return sorted(out, key=lambda e: e.score)  # failures first: they carry the lessons


def build_prompt(
    current: str, examples: Sequence[ReflectionExample], *, max_chars: int = 6000
) -> list[Message]:
    """The reflection request: the current text in full, then as many examples as fit in `max_chars` in all
    (at least one, each clipped to its share; failures come first in `examples`)."""
    room = max(max_chars - len(current), 400)
    examples = list(examples)[: max(1, room // 400)]
    per_example = max(room // max(len(examples), 1), 400) - 100  # 100: headers and clip marks of one block
    blocks = []
    for i, ex in enumerate(examples, 1):
        body = (
            f"[Input]\n{clip(ex.inputs, per_example // 2)}\n\n"
            f"[Assistant's answer]\n{clip(ex.output, per_example // 4)}\n\n"
            f"[Feedback] (score {ex.score:.2f})\n{clip(ex.feedback, per_example // 4)}"
        )
        blocks.append(f"=== Example {i} ===\n{body}")
    user = (
        "The assistant was given this instruction (its system prompt):\n"
        f"<current_instruction>\n{current}\n</current_instruction>\n\n"
        "Here is how it did on some inputs. These are examples only: do not answer them.\n\n"
        + "\n\n".join(blocks)
        + "\n\n=== End of examples ===\n\n"
        + TASK_PROMPT.format(open=OPEN_TAG, close=CLOSE_TAG)
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_PREAMBLE = re.compile(
    r"^\s*(?:\*\*)?(?:here(?:'s| is)|below is|the )?[^\n]{0,60}(?:new|improved|updated|revised)"
    r" (?:instruction|prompt|system prompt)[^\n]{0,40}:\s*(?:\*\*)?\s*\n",
    re.I,
)
_CHAT_OPENERS = re.compile(
    r"^\s*(certainly|sure|of course|absolutely|i'd be happy|i would be happy|i can help|i'm sorry|"
    r"i am sorry|great question|thank you|hello|hi\b)",
    re.I,
)
_CHAT_ASKS = re.compile(
    r"(please provide|could you (please )?(provide|share|give)|provide (me )?(with )?the (inputs?|text|details)|"
    r"let me know if)",
    re.I,
)


def parse_proposal(raw: str) -> str:
    """The new instruction inside the answer: tagged text, else the longest fenced block, else all of it."""
    lower = raw.lower()
    start = lower.find(OPEN_TAG)
    if start >= 0:
        end = lower.find(CLOSE_TAG, start)
        text = raw[start + len(OPEN_TAG) : end if end >= 0 else len(raw)]
    else:
        fences = _FENCE.findall(raw)
        text = max(fences, key=len) if fences else _drop_lessons(raw)
    text = text.replace(OPEN_TAG, "").replace(CLOSE_TAG, "").strip()
    text = _PREAMBLE.sub("", text, count=1).strip()
    return text.strip('"').strip()


_SENTENCE = re.compile(r"(?<=[.!?:])\s+|\n+")


def drop_repeats(text: str) -> tuple[str, bool]:
    """Remove sentences a looping model repeated, and a cut-off last sentence; says whether it looped."""
    seen: set[str] = set()
    kept: list[str] = []
    looped = False
    for sentence in _SENTENCE.split(text.strip()):
        key = _normal(sentence)
        if not key:
            continue
        if key in seen:
            looped = True
            continue
        seen.add(key)
        kept.append(sentence.strip())
    if looped and kept and not kept[-1].endswith((".", "!", "?", ":")):
        kept.pop()
    return "\n".join(kept) if looped else text, looped


_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s")


def _drop_lessons(text: str) -> str:
    """Without markers, skip the 'Lessons:' block we asked for (its heading and bullet lines)."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip().lower().startswith("lessons"):
        return text
    i = 1
    while i < len(lines) and (not lines[i].strip() or _BULLET.match(lines[i])):
        i += 1
    return "\n".join(lines[i:])


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def _ngrams(words: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def echo_fraction(proposal: str, examples: Sequence[ReflectionExample], n: int = 6) -> float:
    """Share of the proposal's word n-grams that appear verbatim in the examples' inputs and answers."""
    words = _normal(proposal).split()
    grams = _ngrams(words, n)
    if not grams:
        return 0.0
    shown = set()
    for ex in examples:
        shown |= _ngrams(_normal(ex.inputs + " " + ex.output).split(), n)
    return len(grams & shown) / len(grams)


def vet(
    raw: str,
    finish_reason: str,
    current: str,
    examples: Sequence[ReflectionExample],
    *,
    min_chars: int = 12,
    max_echo: float = 0.5,
    max_similarity: float = 0.97,
) -> ReflectionProposal:
    """Parse the reflection answer and say whether the proposal is worth a rollout.

    A cut-off answer is unusable, unless it was cut because the model looped: then the repeats are dropped
    and what remains is judged like any other proposal.
    """
    text = parse_proposal(raw)
    if finish_reason == "length":
        text, looped = drop_repeats(text)
        if not looped:
            return ReflectionProposal("", "truncated", raw)
    if len(text) < min_chars:
        return ReflectionProposal(text, "empty", raw)
    if _normal(text) == _normal(current) or (
        difflib.SequenceMatcher(None, _normal(text), _normal(current)).ratio() >= max_similarity
    ):
        return ReflectionProposal(text, "unchanged", raw)
    if _CHAT_OPENERS.match(text) or (_CHAT_ASKS.search(text) and len(text) < 400):
        return ReflectionProposal(text, "chat reply", raw)
    if has_scaffolding(text):
        return ReflectionProposal(text, "copies our prompt markers", raw)
    if echo_fraction(text, examples) > max_echo:
        return ReflectionProposal(text, "echoes the examples", raw)
    return ReflectionProposal(text, "", raw)


# Text of ours that must never end up inside a candidate (small models copy what they see).
_SCAFFOLDING = re.compile(
    r"\[\.\.\. \d+ characters cut \.\.\.\]|</?(?:rule|new_instruction|current_instruction)>|^=== |"
    r"\bExample \d+\b|\[Assistant's answer\]|\[Feedback\]|\[Input\]",
    re.I | re.M,
)


def has_scaffolding(text: str) -> bool:
    """Whether `text` carries our prompt scaffolding (clip markers, our tags, example headers)."""
    return bool(_SCAFFOLDING.search(text))
