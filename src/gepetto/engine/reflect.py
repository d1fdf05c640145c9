"""Reflection: show the reflection LM one component's traces and feedback, parse and vet its proposal.

Small reflection models fail in a few typical ways: they answer the examples instead of writing an
instruction, talk to the user ("Certainly! Please provide..."), copy an example as the "new" instruction, or
hand back the old text. Every proposal is vetted here, before a single rollout is spent on it.

A component need not be an instruction: one with a description (`EngineConfig.component_descriptions`, e.g.
"a Python regular expression that ...") is an *artifact*: the prompt names what kind of text it is and asks to
keep it that kind, and vetting judges it as text used verbatim (a 5-character regex is not "empty", a
one-character fix to code is not "unchanged", quotes and case matter).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from gepetto.engine.events import Outcome
from gepetto.lm.base import Message
from gepetto.program import Rollout, TraceEntry, format_inputs, render_value
from gepetto.types import Example

OPEN_TAG, CLOSE_TAG = "<new_instruction>", "</new_instruction>"

# The job comes first (in the system message) and is the same text in every request of a run, so a backend that
# keeps prompt prefixes reads it once; what changes (the current text, the examples) follows, then the answer's form.
ROLE = (
    "You improve the instructions given to an AI assistant. You read the instruction it followed and examples of its "
    "work with feedback, and you write a better instruction. You never answer the examples yourself and you never "
    "talk to the user."
)

SYSTEM_PROMPT = ROLE + """

Your job: write a new, complete instruction for the assistant so that it does better on inputs like those of the
examples.
- Work out what the task really is from the examples and the feedback.
- State every rule, required format and domain fact that the feedback reveals, in general terms: they must
  help on new inputs, not only on these examples.
- If the feedback states the allowed answers or the required answer format, copy those requirements into
  the instruction word for word.
- Keep what already works in the current instruction.
- The assistant will not see these examples or this feedback: spell out everything it needs to know.
- Address the assistant directly ("You ..."). Do not copy the examples, do not answer them."""

ANSWER_PROMPT = """\
First write "Lessons:" and, in a few short bullet points, what the feedback says went wrong and the rules
or facts it reveals. Then write the new instruction between {open} and {close}, and nothing after {close}."""

# For a component with a description: any text a program uses (a regex, code, a tool description, a config).
ARTIFACT_SYSTEM_PROMPT = """\
You improve a text that a program uses. You read the current text and examples of the program's work with \
feedback, and you write a better version of that text, of the same kind. You never answer the examples yourself \
and you never talk to the user.

Your job: write a new, complete version of the text so that the program does better on inputs like those of the
examples.
- Work out from the examples and the feedback what the text must do, and what went wrong.
- Fix every mistake the feedback names, in general terms: the text must work on new inputs, not only on
  these examples.
- Keep what already works in the current text.
- The text you are editing is: {description}. Keep it that kind of text: write it exactly as the program
  will use it, with no explanation or commentary inside it."""

ARTIFACT_ANSWER_PROMPT = """\
First write "Lessons:" and, in a few short bullet points, what the feedback says went wrong. Then write the
new text between {open} and {close}, and nothing after {close}."""


# Said to the reflection LM after a rejected answer, so the retry does not repeat the same mistake.
RETRY_HINTS = {
    Outcome.EMPTY: "I found no instruction in your answer. Write the complete new instruction between {open} and "
    "{close}.",
    Outcome.UNCHANGED: "That is (nearly) the same as the current instruction. Write a clearly different, improved "
    "instruction that fixes the failures described in the feedback, between {open} and {close}.",
    Outcome.CHAT_REPLY: "Do not talk to me or ask for inputs. Write the instruction for the assistant itself, between "
    "{open} and {close}.",
    Outcome.SCAFFOLDING: "That contains markers from my message (example headers, tags or cut marks). "
    "Write only the instruction itself, in plain words, between {open} and {close}.",
    Outcome.ECHO: "That copies the examples. Write general instructions for the task instead (rules, "
    "format, facts), between {open} and {close}.",
    Outcome.ALREADY_TRIED: "That instruction was proposed before. Write a different, improved instruction that "
    "fixes the failures described in the feedback, between {open} and {close}.",
}


# The same, for an artifact (a component with a description): it is "the text", never "the instruction".
ARTIFACT_RETRY_HINTS = {
    Outcome.EMPTY: "I found no text in your answer. Write the complete new text between {open} and {close}.",
    Outcome.UNCHANGED: "That is the same as the current text. Write an improved text that fixes the mistakes the "
    "feedback names, between {open} and {close}.",
    Outcome.CHAT_REPLY: "Do not talk to me or ask for inputs. Write only the new text itself, between {open} and "
    "{close}.",
    Outcome.SCAFFOLDING: "That contains markers from my message (example headers, tags or cut marks). "
    "Write only the new text itself, between {open} and {close}.",
    Outcome.ECHO: "That copies the examples. Write a text that works in general, between {open} and "
    "{close}.",
    Outcome.ALREADY_TRIED: "That text was proposed before. Write a different, improved text that fixes the "
    "mistakes the feedback names, between {open} and {close}.",
}


def _said(description: str) -> str:
    """A description as it reads inside a sentence of ours (no doubled full stop)."""
    return description.strip().rstrip(".")


def lessons(raw: str) -> list[str]:
    """The bullet points of the 'Lessons:' block the reflection LM was asked to write first."""
    head = raw.split(OPEN_TAG, 1)[0]
    start = head.lower().find("lessons")
    if start < 0:
        return []
    return [_BULLET.sub("", line).strip() for line in head[start:].splitlines()[1:] if _BULLET.match(line)]


def retry_messages(messages: list[Message], raw: str, reason: Outcome, *, artifact: bool = False) -> list[Message]:
    """The conversation for the next attempt: the rejected answer and why it was rejected.

    A model that wrote good lessons and then copied the old instruction is asked to turn its own lessons
    into rules: small models often see what went wrong but do not act on it unprompted.
    """
    hint = (ARTIFACT_RETRY_HINTS if artifact else RETRY_HINTS).get(reason)
    if hint is None:  # truncated: same request, more tokens
        return messages
    text = hint.format(open=OPEN_TAG, close=CLOSE_TAG)
    found = lessons(raw)
    if reason is Outcome.UNCHANGED and found and not artifact:
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
    whole_run: bool = False  # the component left no trace: `inputs`/`output` are the program's own


@dataclass(frozen=True)
class ReflectionProposal:
    """A parsed answer of the reflection LM; `rejected` says why it is unusable, or is None."""

    text: str
    rejected: Outcome | None = None
    raw: str = ""


def clip(text: str, limit: int) -> str:
    """Shorten text to about `limit` characters, keeping its head and tail."""
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 20)
    head, tail = text[: keep * 2 // 3], text[-(keep // 3) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} characters cut ...]\n{tail}"


def reflective_examples(
    rollouts: Sequence[Rollout], component: str, examples: Sequence[Example] = ()
) -> list[ReflectionExample]:
    """One entry per rollout, most instructive first: `component`'s own trace entries (its `ctx.lm` calls and
    `ctx.record`s) where it has some, else the whole run (the example's inputs from `examples`, the program's
    output or error), since a component read anywhere in the program still shaped that run."""
    by_id = {e.id: e for e in examples}
    out: list[ReflectionExample] = []
    for r in rollouts:
        calls = [t for t in r.trace if t.component == component]
        if calls:
            out.append(ReflectionExample("\n---\n".join(t.inputs for t in calls),
                                         "\n---\n".join(t.output for t in calls),
                                         with_gold(component_feedback(r, calls), r, by_id.get(r.example_id)),
                                         r.score.value))
        else:
            out.append(whole_run(r, by_id.get(r.example_id)))
    # failures first: they carry the lessons; at equal score the component's own trace before a whole run
    return sorted(out, key=lambda e: (e.score, e.whole_run))


def with_gold(feedback: str, rollout: Rollout, example: Example | None, limit: int = 300) -> str:
    """The feedback of a failed rollout, with the example's gold after it when the feedback does not already show
    it (a bare-float metric's automatic line says nothing of what was expected)."""
    if example is None or example.gold is None or rollout.score.value >= 1.0:
        return feedback
    gold = render_value(example.gold).strip()
    if not gold or gold in feedback or (isinstance(example.gold, str) and example.gold.strip() in feedback):
        return feedback
    return f"{feedback}\nExpected: {clip(gold, limit)}"


def component_feedback(rollout: Rollout, calls: Sequence[TraceEntry]) -> str:
    """The feedback reflection shows for a component's trace entries: their own feedback where the program
    recorded one (each distinct text once, in order), else the metric's feedback on the whole rollout."""
    own = list(dict.fromkeys(t.feedback for t in calls if t.feedback))
    return "\n".join(own) if own else rollout.score.feedback


def whole_run(rollout: Rollout, example: Example | None) -> ReflectionExample:
    """What reflection sees of a run in which the component left no trace: the program's input and output."""
    inputs = format_inputs(example.inputs) if example is not None else f"(example {rollout.example_id})"
    if rollout.output is not None:
        output = render_value(rollout.output)
    elif rollout.error:
        output = f"(no output: the {rollout.stage or 'program'} raised {rollout.error})"
    else:
        output = "(no output)"
    return ReflectionExample(inputs, output, with_gold(rollout.score.feedback, rollout, example), rollout.score.value,
                             whole_run=True)


def shorten_messages(text: str, limit: int) -> list[Message]:
    """A new request for an instruction over the length budget: shorten it. A fresh conversation, not a retry of
    the one it came from, where a small model writes its own long answer back (docs/design-notes.md). The limit is
    said in words too: small models count words."""
    user = (f"This instruction is too long: it has {len(text)} characters.\n"
            f"<current_instruction>\n{text}\n</current_instruction>\n\n"
            f"Rewrite it in at most {limit} characters (about {max(limit // 6, 1)} words). Keep every rule and "
            f"the output format; drop repetitions, examples and explanations; use short lines. Write only the "
            f"shorter instruction between {OPEN_TAG} and {CLOSE_TAG}.")
    return [{"role": "system", "content": ROLE}, {"role": "user", "content": user}]


def length_note(limit: int | None) -> str:
    """What the reflection LM is told of the length budget (EngineConfig.max_component_chars), if any."""
    return f"\nThe new text must be at most {limit} characters long." if limit else ""


def build_prompt(
    current: str, examples: Sequence[ReflectionExample], *, max_chars: int = 6000, description: str | None = None,
    limit: int | None = None,
) -> list[Message]:
    """The reflection request: the current text in full, then as many examples as fit in `max_chars` in all
    (at least one, each clipped to its share; failures come first in `examples`). With a `description` the
    component is an artifact: the prompt says what kind of text it is instead of calling it an instruction."""
    room = max(max_chars - len(current), 400)
    examples = list(examples)[: max(1, room // 400)]
    per_example = max(room // max(len(examples), 1), 400) - 100  # 100: headers and clip marks of one block
    blocks = []
    for i, ex in enumerate(examples, 1):
        answer = "[Program output]" if ex.whole_run else "[Output]" if description else "[Assistant's answer]"
        body = (
            f"[Input]\n{clip(ex.inputs, per_example // 2)}\n\n"
            f"{answer}\n{clip(ex.output, per_example // 4)}\n\n"
            f"[Feedback] (score {ex.score:.2f})\n{clip(ex.feedback, per_example // 4)}"
        )
        blocks.append(f"=== Example {i} ===\n{body}")
    if description:
        user = (
            f"A program uses this text. The text you are editing is: {_said(description)}.\n"
            f"<current_instruction>\n{current}\n</current_instruction>\n\n"
            "Here is how the program did on some inputs. These are examples only: do not answer them.\n\n"
            + "\n\n".join(blocks)
            + "\n\n=== End of examples ===\n\n"
            + ARTIFACT_ANSWER_PROMPT.format(open=OPEN_TAG, close=CLOSE_TAG)
            + length_note(limit)
        )
        system = ARTIFACT_SYSTEM_PROMPT.format(description=_said(description))
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    user = (
        "The assistant was given this instruction (its system prompt):\n"
        f"<current_instruction>\n{current}\n</current_instruction>\n\n"
        "Here is how it did on some inputs. These are examples only: do not answer them.\n\n"
        + "\n\n".join(blocks)
        + "\n\n=== End of examples ===\n\n"
        + ANSWER_PROMPT.format(open=OPEN_TAG, close=CLOSE_TAG)
        + length_note(limit)
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.S)
_PREAMBLE = re.compile(
    r"^\s*(?:\*\*)?(?:here(?:'s| is)|below is|the )?[^\n]{0,60}(?:new|improved|updated|revised)"
    r" (?:instruction|prompt|system prompt)[^\n]{0,40}:\s*(?:\*\*)?\s*\n",
    re.I,
)
# _PREAMBLE's stricter twin, anywhere in the text: a line that is only a "New instruction:" heading; what precedes
# it (the lessons we asked for outside the tags, a copied example) is not part of the instruction.
_HEADING = re.compile(
    r"^\s*(?:\*\*)?(?:new|improved|updated|revised) (?:instruction|prompt|system prompt)\s*:\s*(?:\*\*)?\s*$",
    re.I | re.M,
)


def _after_heading(text: str) -> str:
    """The text after the last line that is only a "New instruction:" heading, when something follows it."""
    heads = list(_HEADING.finditer(text))
    rest = text[heads[-1].end():].strip() if heads else ""
    return rest or text


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


def between_tags(raw: str, open_tag: str, close_tag: str) -> str | None:
    """The text after `open_tag` up to `close_tag` (or the end, when unclosed), tags matched in any case; None
    when the answer has no opening tag."""
    lower = raw.lower()
    start = lower.find(open_tag)
    if start < 0:
        return None
    end = lower.find(close_tag, start)
    return raw[start + len(open_tag) : end if end >= 0 else len(raw)]


def parse_proposal(raw: str, *, artifact: bool = False) -> str:
    """The new instruction inside the answer: tagged text, else the longest fenced block, else all of it; what
    precedes a "New instruction:" heading line is taken off.

    An artifact is used verbatim: a fence or backticks around the whole text are taken off, quotes are kept."""
    text = between_tags(raw, OPEN_TAG, CLOSE_TAG)
    if text is None:
        fences = _FENCE.findall(raw)
        text = max(fences, key=len) if fences else _drop_lessons(raw)
    text = text.replace(OPEN_TAG, "").replace(CLOSE_TAG, "").strip()
    text = _PREAMBLE.sub("", text, count=1).strip()
    if artifact:
        whole = _WHOLE_FENCE.fullmatch(text) or _WHOLE_TICKS.fullmatch(text)
        return whole.group(1).strip("\n") if whole else text
    return _after_heading(text).strip('"').strip()


_WHOLE_FENCE = re.compile(r"```[^\n`]*\n(.*?)\n?```", re.S)
_WHOLE_TICKS = re.compile(r"`([^`\n]+)`")


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
    """Without markers, keep what follows the 'Lessons:' block we asked for (its heading and bullet lines), also
    when the model wrote something before it (a copied example, its feedback); what precedes it when nothing
    follows."""
    lines = text.strip().splitlines()
    heads = [k for k, line in enumerate(lines) if line.strip().lower().startswith("lessons")]
    if not heads:
        return text
    i = heads[-1] + 1
    while i < len(lines) and (not lines[i].strip() or _BULLET.match(lines[i])):
        i += 1
    return "\n".join(lines[i:] if i < len(lines) else lines[: heads[-1]])


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
    artifact: bool = False,
) -> ReflectionProposal:
    """Parse the reflection answer and say whether the proposal is worth a rollout.

    A cut-off answer is unusable, unless it was cut because the model looped: then the repeats are dropped
    and what remains is judged like any other proposal. An `artifact` (a regex, code, a config: a component
    with a description) is judged as text used verbatim: see `vet_artifact`.
    """
    if artifact:
        return vet_artifact(raw, finish_reason, current, examples, max_echo=max_echo)
    text = parse_proposal(raw)
    if finish_reason == "length":
        text, looped = drop_repeats(text)
        if not looped:
            return ReflectionProposal("", Outcome.TRUNCATED, raw)
    if len(text) < min_chars:
        return ReflectionProposal(text, Outcome.EMPTY, raw)
    if _normal(text) == _normal(current) or (
        difflib.SequenceMatcher(None, _normal(text), _normal(current)).ratio() >= max_similarity
    ):
        return ReflectionProposal(text, Outcome.UNCHANGED, raw)
    if _CHAT_OPENERS.match(text) or (_CHAT_ASKS.search(text) and len(text) < 400):
        return ReflectionProposal(text, Outcome.CHAT_REPLY, raw)
    if has_scaffolding(text) or _copies_blocks(text, current):
        return ReflectionProposal(text, Outcome.SCAFFOLDING, raw)
    if echo_fraction(text, examples) > max_echo:
        return ReflectionProposal(text, Outcome.ECHO, raw)
    return ReflectionProposal(text, None, raw)


# A chat reply in prose ("Certainly! ...", "Sure, here is ..."), not a regex or code that starts with "hi\b".
_CHAT_PROSE = re.compile(_CHAT_OPENERS.pattern + r"[A-Za-z' ]{0,40}[,!.](?:\s|$)", re.I)


def vet_artifact(raw: str, finish_reason: str, current: str, examples: Sequence[ReflectionExample], *,
                 max_echo: float = 0.5) -> ReflectionProposal:
    """`vet` for a text used verbatim: any non-empty text may be valid (`\\d{5}`), only an identical text is
    unchanged (one character can fix a regex), a cut-off text is broken (repeated lines are normal in code),
    and only prose-like chat replies and our own markers are refused."""
    if finish_reason == "length":
        return ReflectionProposal("", Outcome.TRUNCATED, raw)
    text = parse_proposal(raw, artifact=True)
    if not text.strip():
        return ReflectionProposal(text, Outcome.EMPTY, raw)
    if text.strip() == current.strip():
        return ReflectionProposal(text, Outcome.UNCHANGED, raw)
    if _CHAT_PROSE.match(text):
        return ReflectionProposal(text, Outcome.CHAT_REPLY, raw)
    if _ARTIFACT_SCAFFOLDING.search(text):
        return ReflectionProposal(text, Outcome.SCAFFOLDING, raw)
    if echo_fraction(text, examples) > max_echo:
        return ReflectionProposal(text, Outcome.ECHO, raw)
    return ReflectionProposal(text, None, raw)


# Text of ours that must never end up inside a candidate (small models copy what they see).
# An instruction that names our tags even without brackets ('Use the "current_instruction" field') copies them.
_SCAFFOLDING = re.compile(
    r"\[\.\.\. \d+ characters cut \.\.\.\]|</?rule>|\b(?:new|current)_instruction\b|^=== |"
    r"\bExample \d+\b|\[Assistant's answer\]|\[Feedback\]|\[Input\]|\[Program output\]",
    re.I | re.M,
)
# For artifacts: without "Example N" (a tool description or docstring may well say "Example 1:")
_ARTIFACT_SCAFFOLDING = re.compile(
    r"\[\.\.\. \d+ characters cut \.\.\.\]|</?(?:rule|new_instruction|current_instruction)>|^=== |"
    r"\[Assistant's answer\]|\[Feedback\]|\[(?:Program )?Output\]",
    re.M,
)


# Our example blocks as a small model rewrites them without the brackets: a "Feedback:" heading line, the score as
# we print it. Counted only where the current instruction does not have them itself (a task may well ask for a
# "Feedback:" line in its answers). A "Lessons:" list inside the instruction is kept: it states rules.
_BLOCK_LINES = re.compile(r"^\s*feedback\s*:|\(score \d\.\d\d\)", re.I | re.M)


def _copies_blocks(text: str, current: str) -> bool:
    """Whether `text` has a line of our example blocks that `current` does not have."""
    found = {m.group(0).strip().lower() for m in _BLOCK_LINES.finditer(text)}
    return bool(found - {m.group(0).strip().lower() for m in _BLOCK_LINES.finditer(current)})


def has_scaffolding(text: str) -> bool:
    """Whether `text` carries our prompt scaffolding (clip markers, our tags, example headers)."""
    return bool(_SCAFFOLDING.search(text))
