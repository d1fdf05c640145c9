"""Hidden-rules tasks with a known optimum, and the scripted task and reflection LMs both optimisers get.

Each example is a support ticket about one topic; the right answer is that topic's routing code, a fact the
task LM cannot guess. The scripted task LM answers a ticket with its code only when the instruction states
that topic's rule ("- Tickets about billing get code QX-41."), else "GENERAL" (and, with `error_rate`, it
slips on some (instruction, ticket) pairs, fixed by a hash). The metric's feedback on a wrong answer states
the rule, so a reflection LM that copies rules from the feedback into the instruction makes progress.

The scripted reflection LM does that imperfectly, like a small model: it adds at most `max_add` new rules
per edit, sometimes drops one it had (`drop_prob`), keeps at most `max_rules` (the oldest go first), and a
share `noise` of its answers are useless in the ways small models fail (empty, a chat reply, the unchanged
instruction, an echo of an example). With several components (topic k is routed to component k mod c),
each component needs its own rules, so lineages that fixed different components are worth merging.

The LM reads both optimisers' reflection prompts (gepetto's `<current_instruction>` tags, gepa's ``` blocks)
and answers in the format each asks for. It logs the kind of every answer ("edit", "unchanged", "empty",
"chat", "echo") so the harness knows which proposals were useless. Everything is deterministic per seed and
costs microseconds per call.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gepetto.lm.base import Completion, Message, Usage
from gepetto.program import Context, Task, TraceEntry
from gepetto.types import Candidate, Example, Score

TOPICS = ("billing", "shipping", "returns", "warranty", "login", "privacy", "invoices", "coupons", "giftcards",
          "subscriptions", "repairs", "loyalty", "refunds", "passwords", "deliveries", "accessibility")
DEFAULT_ANSWER = "GENERAL"
SEED_INSTRUCTION = "Read the customer's support ticket and reply with its routing code only."
CHAT_REPLY = "Certainly! Please provide the support tickets you would like me to route, and I will help."
_RULE = re.compile(r"[Tt]ickets about ([a-z]+) get code ([A-Z]{2}-\d{2})")
_TICKET = re.compile(r"Ticket \d+: [^\n]*")
_OPENERS = ("I have a question about", "Something is wrong with my", "Please help me with", "I need help with",
            "There is a problem with", "Can someone look at my")
_FILLERS = ("It started yesterday.", "This is urgent.", "Thanks in advance.", "I tried twice already.",
            "My account is under my work email.", "Nothing in the FAQ helped.")


@dataclass(frozen=True)
class Setting:
    """One difficulty setting: the task's shape, the LMs' imperfections and the budget we run it at."""

    name: str
    topics: int
    components: int = 1
    n_train: int = 60
    n_val: int = 30
    n_test: int = 200
    zipf: float = 0.8  # topic k has weight 1 / (k + 1) ** zipf: a few frequent topics, a long tail
    error_rate: float = 0.0  # task LM slips (hash of instruction and ticket)
    max_add: int = 2
    drop_prob: float = 0.0
    max_rules: int = 16
    noise: float = 0.0
    budget: int = 1000
    note: str = ""


SETTINGS: dict[str, Setting] = {
    "easy": Setting("easy", topics=4, max_add=2, budget=500,
                    note="4 topics, one instruction, a careful reflection LM"),
    "noisy": Setting("noisy", topics=8, max_add=2, drop_prob=0.2, noise=0.4, error_rate=0.05, budget=1500,
                     note="8 topics; 40% useless reflection answers, drops a rule 20% of the time, task LM slips 5%"),
    "multi": Setting("multi", topics=12, components=3, max_add=1, drop_prob=0.25, max_rules=4, noise=0.3,
                     error_rate=0.03, budget=2500,
                     note="12 topics over 3 components (4 each), 1 rule per edit, at most 4 rules kept, drops "
                          "25%, 30% useless answers, task LM slips 3%"),
    "tight": Setting("tight", topics=10, max_add=2, drop_prob=0.1, max_rules=6, noise=0.2, budget=1500,
                     note="10 topics, one instruction, at most 6 rules kept: the full optimum is out of reach; "
                          "the best reachable keeps the 6 most frequent topics"),
    # not run by default (DEFAULT_SETTINGS): a noisy task LM or judge, for noise-aware acceptance (accept "paired")
    "noisy-lm": Setting("noisy-lm", topics=8, max_add=2, drop_prob=0.1, noise=0.2, error_rate=0.2, budget=1500,
                        note="8 topics; the task LM slips on 20% of (instruction, ticket) pairs (a sampled LM or a "
                             "noisy judge), 20% useless reflection answers, drops a rule 10% of the time"),
}
DEFAULT_SETTINGS = ("easy", "noisy", "multi", "tight")  # what `run.py sim` runs unless told otherwise


def parse_rules(text: str) -> list[tuple[str, str]]:
    """The (topic, code) rules stated in a text, in order, first statement of a topic wins."""
    seen: dict[str, str] = {}
    for topic, code in _RULE.findall(text):
        seen.setdefault(topic, code)
    return list(seen.items())


def render_rule(topic: str, code: str) -> str:
    return f"- Tickets about {topic} get code {code}."


def _unit_hash(*parts: object) -> float:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _usage(messages: Sequence[Message], text: str) -> Usage:
    return Usage(sum(len(m.get("content", "")) for m in messages) // 4 + 1, len(text) // 4 + 1, estimated=True)


def _content(message: Message) -> str:
    content: Any = message.get("content", "")
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


class ScriptedTaskLM:
    """Answers a ticket with its topic's code when the system prompt states that topic's rule, else GENERAL."""

    def __init__(self, topics: Sequence[str] = TOPICS, error_rate: float = 0.0, seed: int = 0,
                 name: str = "rules-task") -> None:
        self.name, self.error_rate, self.seed = name, error_rate, seed
        self._topic = re.compile(r"\b(" + "|".join(map(re.escape, topics)) + r")\b")

    def respond(self, messages: Sequence[Message], **params: Any) -> Completion:
        system = _content(messages[0]) if messages and messages[0].get("role") == "system" else ""
        user = _content(messages[-1]) if messages else ""
        found = self._topic.search(user)
        rules = dict(parse_rules(system))
        answer = DEFAULT_ANSWER
        if found and found.group(1) in rules:
            slipped = self.error_rate > 0 and _unit_hash(self.seed, system, user) < self.error_rate
            answer = DEFAULT_ANSWER if slipped else rules[found.group(1)]
        return Completion(answer, _usage(messages, answer))

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.respond(messages, **params)


def read_request(messages: Sequence[Message]) -> tuple[str, str, str]:
    """(current instruction, the evidence after it, answer style) from either optimiser's reflection prompt."""
    texts = [_content(m) for m in messages]
    for text in texts:  # gepetto: <current_instruction> ... </current_instruction>, answer in <new_instruction>
        if "<current_instruction>" in text:
            _, _, rest = text.partition("<current_instruction>")
            current, _, evidence = rest.partition("</current_instruction>")
            return current.strip(), evidence, "tags"
    for text in texts:  # gepa: the instruction in the first ``` block, answer in a ``` block
        start = text.find("```")
        if start >= 0:
            end = text.find("```", start + 3)
            if end > start:
                return text[start + 3 : end].strip(), text[end + 3 :], "fence"
    return "", "\n".join(texts), "fence"


def _format(text: str, style: str) -> str:
    if style == "tags":
        return f"Lessons:\n- The feedback states routing codes.\n<new_instruction>\n{text}\n</new_instruction>"
    return f"```\n{text}\n```"


class ScriptedReflectionLM:
    """Edits the current instruction with rules read in the feedback, imperfectly (see the module doc)."""

    KINDS = ("edit", "unchanged", "empty", "chat", "echo")

    def __init__(self, *, max_add: int = 2, drop_prob: float = 0.0, max_rules: int = 16, noise: float = 0.0,
                 seed: int = 0, name: str = "rules-reflection") -> None:
        self.name, self.max_add, self.drop_prob, self.max_rules = name, max_add, drop_prob, max_rules
        self.noise, self.seed = noise, seed
        self.log: list[str] = []  # kind of each answer, in call order

    def edit(self, current: str, evidence: str, rng: random.Random) -> str:
        """The new instruction: current rules (one maybe dropped) plus new ones seen, within the length limit."""
        rules = parse_rules(current)
        header = "\n".join(line for line in current.splitlines() if not _RULE.search(line)).strip()
        have = {t for t, _ in rules}
        seen = [(t, c) for t, c in parse_rules(evidence) if t not in have]
        if rules and rng.random() < self.drop_prob:
            rules.pop(rng.randrange(len(rules)))
        rules += seen[: self.max_add]
        rules = rules[-self.max_rules :] if self.max_rules > 0 else []
        return "\n".join([header or SEED_INSTRUCTION, *(render_rule(t, c) for t, c in rules)])

    def respond(self, messages: Sequence[Message], **params: Any) -> Completion:
        current, evidence, style = read_request(messages)
        rng = random.Random(f"{self.seed}:{len(self.log)}")
        if rng.random() < self.noise:
            kind = rng.choice(self.KINDS[1:])
            if kind == "empty":
                text = ""
            elif kind == "chat":
                text = CHAT_REPLY
            elif kind == "unchanged":
                text = _format(current, style)
            else:
                m = _TICKET.search(evidence)
                text = _format(m.group(0) if m else evidence.strip()[:200], style)
        else:
            new = self.edit(current, evidence, rng)
            kind = "unchanged" if new == current else "edit"
            text = _format(new, style)
        self.log.append(kind)
        return Completion(text, _usage(messages, text))

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        return self.respond(messages, **params)


def metric(example: Example, output: Any, trace: list[TraceEntry]) -> Score:
    """1 for exactly the topic's code; otherwise 0 and feedback that states the topic's rule."""
    answer = output.strip() if isinstance(output, str) else ""
    if answer == example.gold:
        return Score(1.0, "Correct.")
    topic = example.metadata["topic"]
    shown = answer[:40] if answer else "(nothing)"
    return Score(0.0, f"Wrong: answered {shown!r}. Tickets about {topic} get code {example.gold}.")


def component_for(topic_index: int, components: int) -> str:
    return "instruction" if components == 1 else f"route_{topic_index % components}"


@dataclass
class RulesWorld:
    """A setting made concrete: topics, codes, weights, data splits, the seed and oracle candidates."""

    setting: Setting
    data_seed: int = 0
    topics: list[str] = field(init=False)
    codes: dict[str, str] = field(init=False)
    weights: list[float] = field(init=False)

    def __post_init__(self) -> None:
        s = self.setting
        if not 1 <= s.topics <= len(TOPICS):
            raise ValueError(f"topics must be 1..{len(TOPICS)}")
        rng = random.Random(f"rules:{s.name}:{self.data_seed}")
        self.topics = list(TOPICS[: s.topics])
        codes: list[str] = []
        while len(codes) < s.topics:
            letters = "ABCDEFHJKLMNPQRTUVWXYZ"
            code = f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randrange(10, 100)}"
            if code not in codes:
                codes.append(code)
        self.codes = dict(zip(self.topics, codes, strict=True))
        self.weights = [1 / (k + 1) ** s.zipf for k in range(s.topics)]

    def examples(self, n: int, split: str) -> list[Example]:
        rng = random.Random(f"rules:{self.setting.name}:{self.data_seed}:{split}")
        out = []
        for i in range(n):
            k = rng.choices(range(len(self.topics)), self.weights)[0]
            topic = self.topics[k]
            text = f"Ticket {i}: {rng.choice(_OPENERS)} {topic}. {rng.choice(_FILLERS)}"
            out.append(Example({"ticket": text}, gold=self.codes[topic], metadata={"topic": topic, "k": k},
                               id=f"{split}-{i}"))
        return out

    @property
    def component_names(self) -> list[str]:
        return [component_for(k, self.setting.components) for k in range(self.setting.components)]

    def seed_candidate(self) -> Candidate:
        return Candidate({c: SEED_INSTRUCTION for c in self.component_names})

    def oracle(self, topics: Sequence[str] | None = None) -> Candidate:
        """The instruction(s) stating every rule (or those of `topics`), each in its component."""
        chosen = set(self.topics if topics is None else topics)
        texts = {c: [SEED_INSTRUCTION] for c in self.component_names}
        for k, t in enumerate(self.topics):
            if t in chosen:
                texts[component_for(k, self.setting.components)].append(render_rule(t, self.codes[t]))
        return Candidate({c: "\n".join(lines) for c, lines in texts.items()})

    def reachable_oracle(self) -> Candidate:
        """The best candidate within the reflection LM's length limit: each component keeps its most frequent
        topics (by training frequency)."""
        s = self.setting
        freq = Counter(e.metadata["topic"] for e in self.examples(s.n_train, "train"))
        keep: list[str] = []
        for comp in range(s.components):
            mine = [t for k, t in enumerate(self.topics) if k % s.components == comp]
            mine.sort(key=lambda t: (-freq[t], self.topics.index(t)))
            keep += mine[: s.max_rules]
        return self.oracle(keep)

    def task(self) -> Task:
        s = self.setting
        components = s.components

        async def program(candidate: Candidate, example: Example, ctx: Context) -> str:
            return await ctx.lm(component_for(example.metadata["k"], components), example.inputs["ticket"])

        program.__name__ = f"rules_router[{components}]"
        return Task(f"rules-{s.name}", program, metric, self.seed_candidate(), self.examples(s.n_train, "train"),
                    self.examples(s.n_val, "val"), self.examples(s.n_test, "test"),
                    f"hidden-rules ticket routing ({s.note})")

    def task_lm(self, seed: int = 0) -> ScriptedTaskLM:
        return ScriptedTaskLM(self.topics, self.setting.error_rate, seed=seed)

    def reflection_lm(self, seed: int = 0) -> ScriptedReflectionLM:
        s = self.setting
        return ScriptedReflectionLM(max_add=s.max_add, drop_prob=s.drop_prob, max_rules=s.max_rules,
                                    noise=s.noise, seed=seed)


def world(name: str, data_seed: int = 0) -> RulesWorld:
    """The world of a named setting (see SETTINGS)."""
    if name not in SETTINGS:
        raise ValueError(f"unknown setting {name!r}; settings: {', '.join(SETTINGS)}")
    return RulesWorld(SETTINGS[name], data_seed)
