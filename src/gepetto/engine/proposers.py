"""Proposers: how a child's new texts are written from its parent's rollouts.

The engine runs the parent on a minibatch, hands the rollouts (outputs, traces, feedback) to the proposer, and
takes back new texts; it then makes the child, tests it against the parent on the same examples (or on those
the proposal names), and validates it if the acceptance rule passes it. Built in: `Rewrite` ("rewrite", the
paper's reflective rewrite: engine/reflect.py) and `Edit` ("edit", one rule per proposal: engine/edits.py).

A proposer of your own derives from `Proposer` (which declares what the loop asks of a proposer, with defaults) or
is any object with `async def propose(self, request) -> Proposal | dict | None`:

    class Shout(Proposer):
        async def propose(self, request: ProposalRequest) -> dict[str, str] | None:
            (component,) = request.components
            return {component: request.parent[component] + "\\nAnswer in capitals."}

It keeps the strategies' contract (engine/strategies.py): randomness only from `request.rng`, memory in
`request.state.memory` (written through `request.services.later` while proposing, so that a round of concurrent
proposals does not hang on their timing), and LM calls through `request.services.reflect(...)`, the run's
reflection LM, whose answers are metered, stored with a run and replayed on resume (an LM of its own would make
resume inexact).
"""

from __future__ import annotations

import asyncio
import random
import re
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from gepetto.engine import demos, edits
from gepetto.engine import events as ev
from gepetto.engine.answers import Diagnosis, step_output, step_view
from gepetto.engine.events import Outcome
from gepetto.engine.minibatch import EpochShuffled
from gepetto.engine.options import Options
from gepetto.engine.reflect import (
    CLOSE_TAG,
    ReflectionExample,
    build_prompt,
    reflective_examples,
    retry_messages,
    shorten_messages,
    vet,
)
from gepetto.engine.state import MemoryKey, RunState
from gepetto.lm.base import Completion, Message
from gepetto.program import Rollout, TraceEntry
from gepetto.specs import ConfigError, Knobs, builtin, knob
from gepetto.types import Candidate, Example, Score

# the default `reflection_temperatures` of each kind of request: a whole rewrite sampled, since a small model
# answering greedily copies the seed back, and a rule greedy first (docs/design-notes.md)
REWRITE_TEMPERATURES, RULE_TEMPERATURES = (1.0,), (0.0, 0.7, 1.0)
# what the built-in proposers remember in `state.memory`
# {(candidate id, component): {failure pattern: the rules tried for it that did not help}}
RULES_TRIED: MemoryKey[dict[tuple[str, str], dict[str, list[str]]]] = MemoryKey("edit.rules_tried", dict)
# {(candidate id, component): the failure patterns no usable rule came for (asked again once the others are tried)}
UNANSWERED: MemoryKey[dict[tuple[str, str], Counter[str]]] = MemoryKey("edit.unanswered", dict)
# a failure pattern is asked for again while some have been tried fewer than twice; then up to this many times
LATE_TRIES = 4
# {component: the iteration of the proposal that makes its first draft of the rules}
DRAFTED: MemoryKey[dict[str, int]] = MemoryKey("edit.drafted", dict)
# {"demo" | "other": [passed, tested]}: the minibatch tests of each kind of proposal (adaptive few-shot)
DEMO_TESTS: MemoryKey[dict[str, list[int]]] = MemoryKey("fewshot.tests", lambda: {"demo": [0, 0], "other": [0, 0]})


class ProposalServices(Protocol):
    """What the engine does for a proposer while it proposes (`ProposalRequest.services`)."""

    async def reflect(self, messages: list[Message], params: dict[str, Any]) -> Completion | None:
        """One call of the run's reflection LM: metered, stored with a run and replayed on resume; None when the
        call failed (it cost an attempt, counted as Outcome.REFLECTION_ERROR). LM outages are retried and may
        stop the run."""

    def tried(self, candidate: Candidate) -> bool:
        """Whether this child was proposed before (it would not be paid for again)."""

    async def score(self, example: Example, output: Any, trace: list[TraceEntry]) -> Score | None:
        """The run's metric on an output the proposer made up for `example` (a demonstration written from its
        gold); None when the metric raised."""

    def count(self, outcome: Outcome) -> None:
        """Count an outcome in Result.proposals (e.g. a rejected answer)."""

    def emit(self, event: ev.Event) -> None:
        """Tell the run's callbacks (PhaseStarted, ReflectionAnswered, ...)."""

    def later(self, fn: Callable[[], None]) -> None:
        """Call `fn` once this proposal is decided, with the round's other proposals in plan order (its verdict
        comes after): for a write to `state.memory` that a proposal running beside this one must not see."""


@dataclass(frozen=True)
class ProposalRequest:
    """What a proposer gets for one proposal: the parent, what to change, its rollouts and the run's state, and
    `services`, what the engine does for it."""

    parent: Candidate
    parent_index: int
    components: tuple[str, ...]  # the components to change (the component selector's choice)
    examples: list[Example]  # the minibatch
    runs: list[Rollout]  # the parent's rollouts on `examples`, in the same order
    iteration: int
    rng: random.Random  # this proposal's own, seeded by the run's seed and the iteration
    config: Options
    state: RunState  # read it; write only `state.memory`
    trainset: Sequence[Example]
    services: ProposalServices
    # the most rollouts the child's test may take (Proposal.test_on, the parent's new rollouts there included): the
    # proposer's `test_size`, or the minibatch's size at the budget's tail (see Proposer); None: no limit given
    test_room: int | None = None

    def description(self, component: str) -> str | None:
        """What kind of text `component` is, if the config describes it (an artifact, not an instruction)."""
        return (self.config.component_descriptions or {}).get(component) or None


@dataclass(frozen=True)
class Proposal:
    """New texts for some of the components; the rest of the child is the parent's.

    `test_on`: the examples the child is tested on (default: the minibatch); the parent's rollouts on them must
    be known or fit the rollouts set aside (`Proposer.test_size`). `rule`/`pattern` go into the ProposalTested
    event. `verdict(child, accepted)` is called once the test has decided. `origin` names how the child was
    made, in its ProposalTested event and CandidateRecord ("demo" for a demonstration; None: "reflection").
    An empty `test_on` means no test: the child goes straight to validation (a large change whose gain a few
    examples cannot show, such as the edit proposer's first draft of the rules).
    """

    texts: Mapping[str, str]
    test_on: Sequence[Example] | None = None
    rule: str | None = None
    pattern: str | None = None
    verdict: Callable[[Candidate, bool], None] | None = None
    origin: str | None = None  # how the child was made, as its CandidateRecord says (None: "reflection")
    # the training examples whose inputs reflection saw for it (None: the minibatch); with `test_on`, they shaped
    # the child, and the run's other training examples are fresh evidence for it (engine/loop.py `_confirm`)
    shown: Sequence[str] | None = None


class Proposer:
    """Writes a child's new texts (`propose`), and declares what the loop asks of a proposer before a proposal; the
    defaults are those of a proposer that only proposes. `propose` returns a `Proposal`, a mapping {component: new
    text}, or None (nothing worth testing; count why with `request.services.count`)."""

    @property
    def test_size(self) -> int | None:
        """The most rollouts a child's test takes when the proposer picks its own test examples
        (`Proposal.test_on`); they are set aside when a proposal is planned. None: the minibatch's."""
        return None

    @property
    def fits_test_room(self) -> bool:
        """True: the proposer keeps its test within `request.test_room`, so at the budget's tail, where `test_size`
        no longer fits, it still gets a last proposal, whose room is the minibatch's size."""
        return False

    def minibatch(self, state: RunState, parent: Candidate, components: Sequence[str], trainset: Sequence[Example]
                  ) -> list[Example] | None:
        """The training examples the parent runs on before this proposal, chosen by the proposer (its test may then
        take up to `test_size` rollouts); None: the minibatch sampler's."""
        return None

    def drafts(self, request: ProposalRequest) -> bool:
        """Whether this proposal drafts a component's text anew (the edit proposer's first draft of the rules), so
        that a proposer around it (few-shot's) leaves it to this one."""
        return False

    def openings(self, seed: Candidate, components: Sequence[str], config: Options, rng: random.Random
                 ) -> list[Proposal]:
        """Children of the seed to try before the search, written with no LM call (the rewrite proposer's trims).
        The loop runs each on the validation examples in chunks, cuts it once it is behind the seed and adds it to
        the pool when it is ahead on all of them; they take no iteration and none of the search's random draws, so
        the search after them goes as it would have gone without them, less their rollouts (and from a better pool,
        when one passed). `rng`: theirs alone."""
        return []

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        raise NotImplementedError


@dataclass(frozen=True)
class _Given(Proposer):
    """A proposer of one's own that does not derive from Proposer: its `propose`, and the base's defaults."""

    proposer: Any

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        answer: Proposal | Mapping[str, str] | None = await self.proposer.propose(request)
        return answer


def as_proposer(obj: Any) -> Proposer:
    """A proposer object as the loop uses it: one deriving from Proposer as is, another with an async `propose`
    with the base's defaults (one that also has what Proposer declares must derive from it, or it would be lost)."""
    if isinstance(obj, Proposer):
        return obj
    if not callable(getattr(obj, "propose", None)):
        raise ConfigError(f"proposer: {type(obj).__name__} is no proposer (an async propose(request) method)")
    declared = [name for name in ("test_size", "fits_test_room", "minibatch", "drafts", "openings")
                if hasattr(obj, name)]
    if declared:
        raise ConfigError(f"proposer: {type(obj).__name__} has {', '.join(declared)}: derive it from "
                          "gepetto.strategies.Proposer, which declares them (an object that does not only proposes)")
    return _Given(obj)


def as_proposal(answer: Proposal | Mapping[str, str] | None, request: ProposalRequest) -> Proposal | None:
    """A proposer's answer as a Proposal, checked: known components, texts that are strings, something new."""
    if answer is None:
        return None
    proposal = answer if isinstance(answer, Proposal) else Proposal(dict(answer))
    unknown = [c for c in proposal.texts if c not in request.parent]
    if unknown or not all(isinstance(t, str) for t in proposal.texts.values()):
        raise ValueError(f"the proposer returned texts for {unknown or list(proposal.texts)}: give strings for "
                         f"components of the candidate ({list(request.parent)})")
    return proposal if proposal.texts else None


def diagnose(request: ProposalRequest, component: str | None = None) -> Diagnosis:
    """How this proposal reads its training rollouts' failures (engine/answers.py); for an inner step
    (`state.steps`), by that step's own answers, its right answer read from the feedback (its rollouts seen
    through `step_rollouts`)."""
    step = request.state.steps.get(component or "")
    if step is not None:
        return Diagnosis(step, {})
    return Diagnosis(request.state.answers, {e.id: e for e in request.trainset})


def step_rollouts(state: RunState, component: str, rollouts: Sequence[Rollout], perfect: float) -> list[Rollout]:
    """`rollouts` as the component's own (`answers.step_view`) when it is an inner step: those that called it, the
    failures among them only where the feedback names the step's right answer and it gave another (the other
    failures are a later step's); as they are for any other component."""
    step = state.steps.get(component)
    if step is None:
        return list(rollouts)
    diagnosis = Diagnosis(step, {})
    viewed = [step_view(r, component) for r in rollouts if step_output(r, component) is not None]
    return [r for r in viewed if r.score.value >= perfect or edits.expected_answer(diagnosis.pattern(r))]


def parts(cfg: Options, text: str) -> tuple[str, list[demos.Demo]]:
    """(instruction, demonstrations) of a component's text: reflection sees and changes only the instruction
    (with no demonstrations, the whole text is the instruction)."""
    return demos.split(text) if cfg.demonstrations else (text, [])


def over_length(cfg: Options, candidate: Candidate) -> bool:
    """Whether an instruction part of `candidate` is longer than `max_component_chars` (described components,
    artifacts, are not instructions and have no length budget)."""
    limit, described = cfg.max_component_chars, cfg.component_descriptions or {}
    if not limit:
        return False
    return any(len(parts(cfg, text)[0]) > limit for name, text in candidate.items() if name not in described)


def temperature(cfg: Options, attempt: int, default: Sequence[float]) -> float:
    """The temperature of reflection attempt `attempt` (from 0): `reflection_temperatures`, else `default`; the
    last one repeats."""
    temps = list(cfg.reflection_temperatures if cfg.reflection_temperatures is not None else default) or [0.0]
    return temps[min(attempt, len(temps) - 1)]


def reflection_params(request: ProposalRequest, attempt: int, temperatures: Sequence[float], *, max_tokens: int,
                      stop: str) -> dict[str, Any]:
    """The sampling params of reflection attempt `attempt` of this proposal: its temperature, and a seed of its own
    (the run's seed, the iteration and the attempt), so a resumed run asks the very same question."""
    cfg = request.config
    return {"temperature": temperature(cfg, attempt, temperatures), "max_tokens": max_tokens,
            "seed": cfg.seed * 100_003 + request.iteration * 10 + attempt, "stop": [stop]}


def refusal(request: ProposalRequest, component: str, text: str, kept: list[demos.Demo], *, limit: int | None,
            check_tried: bool = True) -> Outcome | None:
    """Why a vetted instruction `text` for `component` is still refused before any rollout (None if it is not): longer
    than `limit`, or its child (the parent with `text` and the demonstrations `kept`) was proposed before, so the
    reflection LM is asked again rather than the proposal ending."""
    if limit and len(text) > limit:
        return Outcome.OVER_LENGTH
    if check_tried and request.services.tried(request.parent.replace(component, demos.join(text, kept))):
        return Outcome.ALREADY_TRIED
    return None


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^\s.!?])")
# a piece that ends no sentence: an abbreviation ("e.g.") or a list marker ("1.")
_NO_END = re.compile(r"(?:\b(?:e\.g|i\.e|vs|cf|etc|approx|no|mr|mrs|dr)\.|^\(?\w{1,3}[.)])$", re.I)


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for piece in _SENTENCE_END.split(text.strip()):
        if out and _NO_END.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        elif piece.strip():
            out.append(piece.strip())
    return out


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def instruction_units(text: str) -> list[str]:
    """The units a trim may drop: the non-empty lines of a text of several lines, else its sentences."""
    lines = _lines(text)
    return list(dict.fromkeys(lines if len(lines) > 1 else _sentences(text)))


def drop_unit(text: str, unit: str) -> str:
    """`text` without `unit` (a line of it, or a sentence), the rest of its layout kept."""
    if len(_lines(text)) > 1:
        return "\n".join(line for line in text.splitlines() if line.strip() != unit).strip()
    return " ".join(u for u in _sentences(text) if u != unit)


@builtin("proposer", "rewrite")
@dataclass(frozen=True)
class Rewrite(Knobs, Proposer):
    """The paper's proposer: a whole new text, written from a component's minibatch rollouts and their feedback.

    The reflection LM is shown the minibatch rollouts of one component with their feedback and asked for a whole
    new text; each answer is vetted (engine/reflect.py) and asked again, told why, a bounded number of times. With
    several components, one rewrite each. A described component is an artifact, kept verbatim. Before the search,
    `trim` openings ask no LM: each is the seed without one sentence or line of its instruction (origin "trim").

    Args:
        max_tokens: Longest reflection answer (tokens); doubled after an answer cut off.
        prompt_chars: Longest reflection prompt (characters; long traces are cut).
        trim: Before the search, try the seed without one of its sentences (or lines), for up to this many of
            them, with no reflection call (0: none).
    """

    max_tokens: int = knob(700, ge=1)
    prompt_chars: int = knob(6000, ge=1)
    trim: int = knob(4, ge=0)

    async def propose(self, request: ProposalRequest) -> Proposal | dict[str, str] | None:
        if all(r.score.value >= request.config.perfect_score for r in request.runs):
            request.services.count(Outcome.PARENT_PERFECT)
            return None
        texts = {}
        for component in request.components:
            examples = reflective_examples(request.runs, component, request.examples)
            text = await self.rewrite(request, component, examples)
            if text is not None:
                texts[component] = text
        return texts or None

    def openings(self, seed: Candidate, components: Sequence[str], config: Options, rng: random.Random
                 ) -> list[Proposal]:
        """Trims: per component, the seed's instruction without one of its units, for up to `trim` units drawn by
        `rng` (none for an artifact or a one-unit instruction). A user's seed is short and may say something that
        hurts a small task model (an answer format that cuts its reasoning short, say), and no reflection LM writes
        the shorter text: it rewrites and adds."""
        trims = []
        for component in components if self.trim else ():
            if (config.component_descriptions or {}).get(component):
                continue
            current, kept = parts(config, seed[component])
            units = instruction_units(current)
            if len(units) < 2:
                continue
            for unit in rng.sample(units, min(self.trim, len(units))):
                trims.append(Proposal({component: demos.join(drop_unit(current, unit), kept)}, rule=f"dropped: {unit}",
                                      origin="trim"))
        return trims

    async def rewrite(self, request: ProposalRequest, component: str, examples: list[ReflectionExample]
                      ) -> str | None:
        cfg, description = request.config, request.description(component)
        artifact = description is not None
        current, kept = parts(cfg, request.parent[component]) if not artifact else (request.parent[component], [])
        request.services.emit(ev.PhaseStarted("reflection"))
        limit = None if artifact else cfg.max_component_chars  # an artifact has no length budget
        messages = build_prompt(current, examples, max_chars=self.prompt_chars, description=description,
                                limit=limit)
        max_tokens = self.max_tokens
        for attempt in range(cfg.reflection_attempts):
            params = reflection_params(request, attempt, REWRITE_TEMPERATURES, max_tokens=max_tokens, stop=CLOSE_TAG)
            out = await request.services.reflect(messages, params)
            if out is None:
                continue
            proposal = vet(out.text, out.finish_reason, current, examples, artifact=artifact)
            rejected = proposal.rejected or refusal(  # (several components: their combination is not checked here)
                request, component, proposal.text, kept, limit=limit, check_tried=len(request.components) == 1)
            request.services.emit(ev.ReflectionAnswered(attempt, rejected, proposal.text, out.text))
            if rejected is None:
                return demos.join(proposal.text, kept)
            request.services.count(rejected)
            if rejected is Outcome.TRUNCATED:
                max_tokens *= 2
            if rejected is Outcome.OVER_LENGTH and limit:  # a new request: shorten it
                messages = shorten_messages(proposal.text, limit)
            else:
                messages = retry_messages(messages, out.text, rejected, artifact=artifact)
        return None


@builtin("proposer", "edit")
@dataclass(frozen=True)
class Edit(Knobs, Proposer):
    """Rules for the parent's frequent mistakes, each tested on its mistake's failures and on solved cases.

    One rule for one frequent mistake of the parent (engine/edits.py), tested on that mistake's failures and
    on solved cases. The parent first runs on training examples it has not run yet (its evidence grows); a
    described component (an artifact) is rewritten whole instead (as `Rewrite`, with `max_tokens` and
    `prompt_chars`), on the sampler's minibatch. Rules that did not help, and patterns no usable rule came for
    (every attempt refused), are remembered per parent and component (in `state.memory`) and inherited by an
    accepted child: neither is asked for again.
    With `rules` = k > 1, one proposal asks for k rules, each for another pattern (and another right answer), and
    the child is tested on ceil(minibatch_size / k) failures of each pattern plus the solved cases: one validation
    pass for k rules.
    With `definitions` = n > 0, the run's first proposal on a component drafts the whole rules list instead: the
    parent runs on up to n training examples, and every answer seen in a confusion there ("answered X, expected
    Y": X and Y) gets one rule written from up to 4 inputs whose right answer it is
    (`edits.build_definition_prompt`); one child, validated without a test. Later proposals sharpen those lines
    one answer at a time.

    Args:
        rules: Rules per proposal, each for another failure pattern; the child is tested on every pattern's
            failures and on solved cases, and validated once for all.
        definitions: The run's first proposal on a component runs the parent on up to this many training examples
            and drafts one rule per right answer seen there (from up to 4 of its inputs), all in one child; 0: off.
        evidence: Paid training rollouts a parent needs before its mistakes are grouped.
        gate_solved: Solved examples added to a child's test, so rules that break them fail.
        rule_max_tokens: Longest rule answer (tokens).
        max_tokens: An artifact's whole rewrite: its longest answer (tokens).
        prompt_chars: An artifact's whole rewrite: its longest prompt (characters).
    """

    rules: int = knob(1, ge=1)
    definitions: int = knob(0, ge=0)
    evidence: int = knob(8, ge=0)
    gate_solved: int = knob(3, ge=0)
    rule_max_tokens: int = knob(90, ge=1)
    max_tokens: int = knob(700, ge=1)
    prompt_chars: int = knob(6000, ge=1)
    config: Any = field(default=None, repr=False, compare=False)  # the run's options (`bind`)

    def bind(self, config: Any) -> Edit:
        return replace(self, config=config)

    @property
    def per_focus(self) -> int:
        """Failures of each rule's pattern in a child's test."""
        return -(-self.config.minibatch_size // self.rules)

    @property
    def test_size(self) -> int:
        return max(self.config.minibatch_size, self.per_focus * self.rules) + self.gate_solved

    def _edits(self, state: RunState, components: Sequence[str]) -> bool:
        """Whether the proposal is an edit (a rule line appended): only to an instruction, never to an artifact,
        and, when the task has a closed answer set, only to a component whose answers are the program's."""
        if len(components) != 1:
            raise ValueError("the edit proposer changes one component per proposal: use component_selector "
                             "'round-robin' with it")
        component = components[0]
        if (self.config.component_descriptions or {}).get(component):
            return False
        if component in state.steps:
            return True
        if state.ruled is not None:  # the route's choice
            return component in state.ruled
        return state.answers is None or not state.answering or component in state.answering

    @staticmethod
    def _aimless(state: RunState, parent: Candidate, component: str, trainset: Sequence[Example], perfect: float
                 ) -> bool:
        """Whether `component` is an inner step none of whose known mistakes on `parent`'s training rollouts has
        feedback naming its right answer: its rules have nothing to aim at, and it is rewritten whole, from the
        program's rollouts on the sampler's minibatch."""
        if component not in state.steps:
            return False
        known = [r for e in trainset if (r := state.known(parent, e.id)) is not None]
        return bool(known) and all(r.score.value >= perfect for r in step_rollouts(state, component, known, perfect))

    def _undrafted(self, state: RunState, components: Sequence[str]) -> bool:
        """Whether no proposal on `components` has been planned to make the first draft of the rules yet."""
        return bool(self.definitions) and self._edits(state, components) and (
            components[0] not in (state.memory.peek(DRAFTED) or {}))

    def drafts(self, request: ProposalRequest) -> bool:
        """Whether this proposal makes the first draft of the rules (`definitions`): the first one planned on its
        component (chosen when planned, so the proposals of a round never race for it)."""
        return self._edits(request.state, request.components) and (
            (request.state.memory.peek(DRAFTED) or {}).get(request.components[0]) == request.iteration)

    def minibatch(self, state: RunState, parent: Candidate, components: Sequence[str], trainset: Sequence[Example]
                  ) -> list[Example] | None:
        """Training examples the parent has not run yet, in epoch order: `minibatch_size` of them, more while the
        parent has fewer than `evidence` known training rollouts, or than `definitions` before the first draft
        (None for an artifact: the sampler's)."""
        cfg = self.config
        if not self._edits(state, components) or (
                not self._undrafted(state, components)
                and self._aimless(state, parent, components[0], trainset, cfg.perfect_score)):
            return None
        n = len(trainset)
        known = sum(state.known(parent, e.id) is not None for e in trainset)
        evidence = self.evidence
        # this plan makes the first draft (state.iteration: the plan's); a plan the loop then drops at the budget's
        # tail takes the draft with it
        if self._undrafted(state, components):
            state.memory.of(DRAFTED)[components[0]] = state.iteration
            evidence = max(evidence, self.definitions)
        want = min(max(cfg.minibatch_size, evidence - known), n - known)
        walker = EpochShuffled(cfg.minibatch_size, cfg.seed, cfg.perfect_score)
        chosen: list[Example] = []
        for _ in range(n):
            if len(chosen) >= want:
                break
            ex = walker.next_example(state, trainset)
            if state.known(parent, ex.id) is None and all(ex.id != c.id for c in chosen):
                chosen.append(ex)
        return chosen

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        cfg, st, parent, rng = request.config, request.state, request.parent, request.rng
        if not self._edits(st, request.components):
            return await Rewrite(self.max_tokens, self.prompt_chars).propose(request)
        (component,) = request.components
        if self.drafts(request):
            return await self._draft(request, component)
        if self._aimless(st, parent, component, request.trainset, cfg.perfect_score):
            return await Rewrite(self.max_tokens, self.prompt_chars).propose(request)
        evidence = step_rollouts(st, component, [r for e in request.trainset
                                                 if (r := st.known(parent, e.id)) is not None], cfg.perfect_score)
        memory = st.memory.of(RULES_TRIED)
        tried = memory.setdefault((parent.id, component), {})
        # patterns no usable rule came for on this parent (every attempt refused): not asked again while others are
        # open, from the next round on (`request.later`: a proposal running beside this one does not see them)
        skipped = st.memory.of(UNANSWERED)
        unanswered, refused = skipped.setdefault((parent.id, component), Counter()), set()
        diagnosis = diagnose(request, component)
        patterns = sorted({edits.pattern_of(r, diagnosis) for r in evidence if r.score.value < cfg.perfect_score})
        known: list[Rollout] = []  # every candidate's paid training rollouts (the parent's first), read once
        if any(edits.expected_answer(p) for p in patterns):
            train_ids = {e.id for e in request.trainset}
            known = [*evidence, *step_rollouts(st, component, [
                r for (_, ex_id), r in sorted(st.rollouts.items()) if ex_id in train_ids], cfg.perfect_score)]
        instruction, kept = parts(cfg, parent[component])
        text = instruction
        asked: list[tuple[edits.Focus, str]] = []  # (focus, rule) of each rule in the child
        kept_rules: dict[str, str] = {}  # pattern -> the rule line it already has, written back unchanged
        for _ in range(self.rules):  # each rule for another pattern, and another right answer
            chosen = {f.pattern for f, _ in asked}
            answers = {edits.expected_answer(p) for p in chosen} - {""}
            skip = [p for p in patterns if p in chosen or p in refused or p in kept_rules
                    or edits.expected_answer(p) in answers]
            focus = None
            # first the patterns tried fewer than twice that got a usable rule; once none is left, those tried fewer
            # than LATE_TRIES times and those refused before, asked again with the rules tried shown: a run does not
            # stall with budget left while training examples still fail (issue 59)
            # (an ask every attempt of which was refused counts as a try there)
            late = {p: [*tried.get(p, []), *[""] * unanswered[p]] for p in patterns}
            for tries, closed, asks in ((2, set(unanswered), tried), (LATE_TRIES, set(), late)):
                focus = edits.choose_focus(evidence, cfg.perfect_score, asks, rng, max_tries=tries,
                                           max_failures=max(cfg.minibatch_size, 4), max_contrast=self.gate_solved,
                                           skip=[*skip, *closed], diagnosis=diagnosis)
                if focus is not None:
                    break
            if focus is None:
                if not asked:
                    request.services.count(Outcome.NO_OPEN_MISTAKE)
                break
            answer = edits.expected_answer(focus.pattern)
            if answer:  # other inputs with that right answer: no rollout to pay
                focus = replace(focus, positives=edits.positives(
                    known, answer, {r.example_id for r in focus.failures}, cfg.perfect_score, rng,
                    diagnosis=diagnosis))
            rule, why = await self._ask_rule(request, component, focus, tried.get(focus.pattern, []))
            if why is None:
                text = edits.apply_rule(text, rule, answer)
                asked.append((focus, rule))
            elif why is Outcome.UNCHANGED and rule:  # a try that did not help: shown as such when asked again
                kept_rules[focus.pattern] = rule
            else:
                refused.add(focus.pattern)
        if kept_rules:
            def keep() -> None:
                for p, r in kept_rules.items():
                    tried.setdefault(p, []).append(r)

            request.services.later(keep)
        if refused:
            request.services.later(lambda: unanswered.update(refused))  # (a Counter: one more refused ask each)
        if not asked:
            return None
        by_id = {e.id: e for e in request.trainset}
        gate = [by_id[i] for i in edits.gate_batch([f for f, _ in asked], evidence, cfg.perfect_score,
                                                   self.per_focus, self.gate_solved, rng)]

        def verdict(child: Candidate, accepted: bool) -> None:
            if accepted:  # rules that failed on the parent would fail on the child too: it inherits the memory
                memory[(child.id, component)] = {p: list(r) for p, r in tried.items()}
                skipped[(child.id, component)] = Counter(unanswered)
            else:
                for focus, rule in asked:
                    tried.setdefault(focus.pattern, []).append(rule)

        shown = sorted({r.example_id for f, _ in asked for r in (*f.failures, *f.contrast, *f.positives)})
        return Proposal({component: demos.join(text, kept)}, gate, "\n".join(r for _, r in asked),
                        "; ".join(f.pattern for f, _ in asked), verdict, shown=shown)

    async def _draft(self, request: ProposalRequest, component: str) -> Proposal | None:
        """The first draft of the rules list: one rule per answer seen in the training rollouts' confusions
        ("answered X, expected Y": X and Y), each from up to 4 inputs whose right answer it is (any candidate's
        rollouts: the right answer belongs to the example), all asked at once (a batching backend decodes them
        together). The child is validated without a test: a dozen new lines at once, whose gain the few examples of
        a test cannot show (docs/design-notes.md)."""
        cfg, st, parent, rng = request.config, request.state, request.parent, request.rng
        by_id = {e.id: e for e in request.trainset}
        known = step_rollouts(st, component, [r for (_, ex_id), r in sorted(st.rollouts.items())
                                                   if ex_id in by_id], cfg.perfect_score)
        if component in st.steps:
            by_id = {}  # a step's feedback is shown as it is: the program's gold is not the step's answer
        diagnosis = diagnose(request, component)
        confusions = [edits.pattern_of(r, diagnosis) for r in known if r.score.value < cfg.perfect_score]
        answers = sorted({a for p in confusions for a in (edits.expected_answer(p), edits.wrong_answer(p))} - {""})
        if diagnosis.answers is not None:  # the set's own spelling; a wrong answer outside the set gets no rule
            answers = sorted({diagnosis.answers.match(a) for a in answers} - {""})
        current, kept = parts(cfg, parent[component])
        asks = []  # each answer's request reads the parent's text only: all are in flight at once
        for answer in answers:
            inputs = edits.positives(known, answer, set(), cfg.perfect_score, rng, diagnosis=diagnosis)
            if len(inputs) < 2:  # one input says little of what the answer's inputs have in common
                continue
            shown = [edits.shown(r, component, 300, by_id.get(r.example_id)) for r in inputs]
            messages = edits.build_definition_prompt(current, answer, [ex.inputs for ex in shown])
            asks.append((answer, self._vetted(request, messages, current, shown, answer=answer),
                         [r.example_id for r in inputs]))
        rules = await asyncio.gather(*(ask for _, ask, _ in asks))
        text, written, seen = current, {}, set()
        for (answer, _, ids), rule in zip(asks, rules, strict=True):
            if rule is not None:
                text = edits.apply_rule(text, rule, answer)
                written[answer] = rule
                seen |= set(ids)
        if not written:
            request.services.count(Outcome.NO_OPEN_MISTAKE)
            return None
        return Proposal({component: demos.join(text, kept)}, (), "\n".join(written.values()),
                        "first draft of the rules", shown=sorted(seen))

    async def _vetted(self, request: ProposalRequest, messages: list[Message], current: str,
                      shown: list[ReflectionExample], *, answer: str) -> str | None:
        """A drafted rule for `answer`, vetted like an edit's rule."""
        request.services.emit(ev.PhaseStarted("reflection"))
        rule, why = await self._ask(request, messages,
                                    lambda out: edits.vet_rule(out.text, out.finish_reason, current, shown,
                                                               answer=answer),
                                    lambda why: edits.retry_hint(why, "", answer=answer))
        return rule if why is None else None

    async def _ask_rule(self, request: ProposalRequest, component: str, focus: edits.Focus, tried_rules: list[str]
                        ) -> tuple[str, Outcome | None]:
        """Ask the reflection LM for one rule for `focus`: (rule, None), or the last answer's rule and why it was
        refused. A rule whose child was already tried is refused here too, so a repeated answer costs a retry, not
        the proposal."""
        cfg, parent = request.config, request.parent
        current, kept = parts(cfg, parent[component])
        request.services.emit(ev.PhaseStarted("reflection"))
        # (a step's feedback is shown as it is: the program's gold is not the step's answer)
        by_id = {} if component in request.state.steps else {e.id: e for e in request.trainset}
        limit = cfg.max_component_chars
        if limit and len(current) + 20 > limit:  # no room left for a rule: not worth a reflection call
            request.services.count(Outcome.OVER_LENGTH)
            return "", Outcome.OVER_LENGTH
        messages = edits.build_edit_prompt(current, focus, component, tried_rules, by_id, limit=limit)
        # every input the prompt shows, its positives too: a rule that pastes any of them is refused as an echo
        shown = [edits.shown(r, component, example=by_id.get(r.example_id))
                 for r in focus.failures + focus.contrast + focus.positives]

        def vet(out: Completion) -> tuple[str, Outcome | None]:
            rule, why = edits.vet_rule(out.text, out.finish_reason, current, shown, focus.pattern)
            child_text = edits.apply_rule(current, rule, edits.expected_answer(focus.pattern))
            return rule, why or refusal(request, component, child_text, kept, limit=limit)

        # a pattern asked for again starts further along the temperature schedule: greedy, it wrote what it wrote
        return await self._ask(request, messages, vet, lambda why: edits.retry_hint(why, focus.pattern),
                               start=len(tried_rules))

    async def _ask(self, request: ProposalRequest, messages: list[Message],
                   vet: Callable[[Completion], tuple[str, Outcome | None]], hint: Callable[[Outcome], str],
                   start: int = 0) -> tuple[str, Outcome | None]:
        """Ask the reflection LM for a rule; `vet` each answer (rule, why refused) and ask again, told `hint(why)`,
        a bounded number of times, from attempt `start` of the temperature schedule: (rule, None), or the last
        answer's rule and why it was refused."""
        cfg = request.config
        last: tuple[str, Outcome | None] = ("", Outcome.REFLECTION_ERROR)
        for attempt in range(cfg.reflection_attempts):
            params = reflection_params(request, start + attempt, RULE_TEMPERATURES, max_tokens=self.rule_max_tokens,
                                       stop=edits.RULE_CLOSE)
            out = await request.services.reflect(messages, params)
            if out is None:
                continue
            rule, rejected = vet(out)
            request.services.emit(ev.ReflectionAnswered(attempt, rejected, rule, out.text))
            last = (rule, rejected)
            if rejected is None:
                return last
            request.services.count(rejected)
            if rejected is Outcome.UNCHANGED:  # it rewrote the rule the instruction has: asked again, it mostly does
                return last
            messages = [*messages, {"role": "assistant", "content": out.text[:600] or "(empty)"},
                        {"role": "user", "content": hint(rejected)}]
        return last


@builtin("proposer", "auto")
@dataclass(frozen=True)
class Auto(Knobs):
    """The run's route chooses, from the seed's first rollouts: edit(rules=3, definitions=60) when the answers are
    a closed set of labels, else rewrite; a parameter given here is the chosen proposer's.

    The route is chosen in engine/route.py. A parameter given here (edit's, or rewrite's `max_tokens`,
    `prompt_chars` and `trim`) is the chosen proposer's in place of the route's; edit's on the rewrite route cannot
    act, and warn. Until the route is settled, the paper's rewrite.

    Args:
        rules: edit's rules.
        definitions: edit's definitions.
        evidence: edit's evidence.
        gate_solved: edit's gate_solved.
        rule_max_tokens: edit's rule_max_tokens.
        max_tokens: rewrite's (and edit's) max_tokens.
        prompt_chars: rewrite's (and edit's) prompt_chars.
        trim: rewrite's trim.
    """

    rules: int | None = knob(None, ge=1)
    definitions: int | None = knob(None, ge=0)
    evidence: int | None = knob(None, ge=0)
    gate_solved: int | None = knob(None, ge=0)
    rule_max_tokens: int | None = knob(None, ge=1)
    max_tokens: int | None = knob(None, ge=1)
    prompt_chars: int | None = knob(None, ge=1)
    trim: int | None = knob(None, ge=0)

    def bind(self, config: Any) -> Rewrite:
        rewrite = {k: v for k, v in self.knobs().items()
                   if k in ("max_tokens", "prompt_chars", "trim") and v is not None}
        return Rewrite(**rewrite)


def demo_share(base: float, tests: Mapping[str, Sequence[int]]) -> float:
    """The share of proposals that add a demonstration (adaptive_fewshot): `base` (fewshot_share) weighted by how
    often each kind of proposal passed its test so far, (passed + 1) / (tested + 2) each; before any test, `base`.
    Where demonstrations do not help the task model their tests fail and the share falls; where they help more than
    rewrites it rises."""
    (demo_passed, demo_tested), (other_passed, other_tested) = tests["demo"], tests["other"]
    demo = base * (demo_passed + 1) / (demo_tested + 2)
    other = (1 - base) * (other_passed + 1) / (other_tested + 2)
    return demo / (demo + other)


def counted(proposal: Proposal, tally: list[int]) -> Proposal:
    """`proposal`, with its test's verdict added to `tally` ([passed, tested]) before its own verdict is told."""
    told = proposal.verdict

    def verdict(child: Candidate, accepted: bool) -> None:
        tally[0] += accepted
        tally[1] += 1
        if told is not None:
            told(child, accepted)

    return replace(proposal, verdict=verdict)


@builtin("fewshot", "fewshot")
@dataclass(frozen=True)
class FewShot(Knobs, Proposer):
    """Few-shot demonstrations: a share of proposals adds a solved training example to a component's text.

    Next to another proposer (`around`; engine/demos.py): with probability `share` a proposal adds one solved
    training example to a component's demonstrations (at most `k`, see `demos.add` for which one goes), chosen to
    show the right answer of one of the parent's frequent mistakes and to look like the inputs it got wrong; it
    costs no reflection call and is tested like an edit, on that mistake's failures and on `gate_solved` solved
    cases. Otherwise, or when no mistake or usable solved example is known, the other proposer proposes (the
    built-ins see only the instruction part). Its children have origin "demo". With `adaptive` the share is learnt
    from how each kind's tests went in this run (`demo_share`).

    Args:
        k: Most demonstrations per component (0: none); unset: the configuration's default with a built-in
            proposer (none when every training example is also a validation example), none with one's own.
        share: The share of proposals that add a demonstration.
        adaptive: Learn the share as the run goes: `share` weighted by how often demonstrations and other
            proposals passed their tests.
        gate_solved: Solved examples added to a demonstration's test.
        gold: Also demonstrate training examples no candidate has solved, with their gold written as the answer
            (where the program returns its one LM call's answer as is and the metric scores that answer perfect);
            unset: with whole rewrites (open answers), not with rule edits (labels, which the task LM's solved
            answers show).
    """

    k: int | None = knob(None, ge=0)
    share: float = knob(0.5, ge=0, le=1)
    adaptive: bool = knob(True)
    gate_solved: int = knob(3, ge=0)
    gold: bool | None = knob(None)
    inner: Proposer | None = field(default=None, repr=False, compare=False)  # the other proposer (`around`)
    config: Any = field(default=None, repr=False, compare=False)  # the run's options (`bind`)
    _warned: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _verdicts: dict[tuple[str, str], bool] = field(default_factory=dict, init=False, repr=False, compare=False)

    def around(self, inner: Proposer) -> FewShot:
        """These demonstrations next to the proposer `inner`."""
        return replace(self, inner=inner)

    def bind(self, config: Any) -> FewShot:
        return replace(self, config=config)

    @property
    def _inner(self) -> Proposer:
        if self.inner is None:
            raise ValueError("FewShot proposes next to another proposer: FewShot(...).around(proposer)")
        return self.inner

    @property
    def test_size(self) -> int:
        mb = self.config.minibatch_size
        return max(self._inner.test_size or mb, mb + self.gate_solved)

    @property
    def fits_test_room(self) -> bool:
        # at the budget's tail, where a demonstration's test no longer fits, none is added; but a proposer that picks
        # its own minibatch has its test planned with it
        return type(self._inner).minibatch is Proposer.minibatch

    def minibatch(self, state: RunState, parent: Candidate, components: Sequence[str], trainset: Sequence[Example]
                  ) -> list[Example] | None:
        return self._inner.minibatch(state, parent, components, trainset)

    def drafts(self, request: ProposalRequest) -> bool:
        return self._inner.drafts(request)

    def openings(self, seed: Candidate, components: Sequence[str], config: Options, rng: random.Random
                 ) -> list[Proposal]:
        return self._inner.openings(seed, components, config, rng)

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        described = [c for c in request.components if request.description(c)]
        first_draft = self._inner.drafts(request)  # the edit proposer's first draft of the rules goes first
        share, tests = self.share, None
        if self.adaptive:
            tests = request.state.memory.of(DEMO_TESTS)
            share = demo_share(share, tests)
        # (the draw comes before the test room's check: the rest of the proposal is the same whether a demonstration
        # fits or not, so a resume with a larger budget, where it fits, takes the path of a run given it from the start)
        room = request.test_room is None or request.test_room >= self.test_size
        if len(request.components) == 1 and not described and not first_draft and request.rng.random() < share \
                and room:
            proposal = await self._demo(request, request.components[0])
            if proposal is not None:
                return counted(proposal, tests["demo"]) if tests is not None else proposal
        answer = await self._inner.propose(request)
        other = as_proposal(answer, request) if tests is not None else None
        if tests is None or other is None:
            return answer
        return counted(other, tests["other"])

    def _sources(self, request: ProposalRequest) -> set[str]:
        """The training examples a demonstration may come from: never a validation example (it would be scored
        with its own answer in the prompt). Warns once when that leaves none (the valset is the trainset)."""
        sources = {e.id for e in request.trainset} - set(request.state.val_ids)
        if not sources and not self._warned:
            self._warned.append("sources")
            warnings.warn("fewshot: every training example is also a validation example (no valset given?), so no "
                          "demonstration can be shown without being scored on validation: none is proposed; give "
                          "a valset apart from the trainset", RuntimeWarning, stacklevel=2)
        return sources

    async def _golds(self, request: ProposalRequest, component: str, sources: set[str], solved: set[str]
                     ) -> list[demos.Demo]:
        """Demonstrations written from the golds of the training examples in `sources` that no candidate solved,
        each on the parent's own rollout there, kept when the metric scores its output perfect; a mapping gold
        loses, one at a time, the fields the metric does not need (a note, an id) to score it perfect."""
        out = []
        for e in request.trainset:
            r = request.state.known(request.parent, e.id) if e.id in sources and e.id not in solved else None
            demo = await self._checked(request, e, r, component, e.gold) if r is not None else None
            if r is None or demo is None:
                continue
            if isinstance(e.gold, Mapping):
                gold = e.gold
                for key in list(gold):
                    fewer = {k: v for k, v in gold.items() if k != key}
                    shorter = await self._checked(request, e, r, component, fewer) if fewer else None
                    if shorter is not None:
                        gold, demo = fewer, shorter
            out.append(demo)
        return out

    async def _checked(self, request: ProposalRequest, example: Example, rollout: Rollout, component: str,
                       gold: Any) -> demos.Demo | None:
        """The demonstration `gold` gives on `rollout` when the metric scores it perfect (each text judged once)."""
        demo = demos.from_gold(rollout, component, gold) if gold is not None else None
        if demo is None:
            return None
        if (example.id, demo.output) not in self._verdicts:
            call = replace(rollout.trace[0], output=demo.output, finish_reason="stop")
            score = await request.services.score(example, demo.output, [call])
            self._verdicts[example.id, demo.output] = score is not None and score.value >= request.config.perfect_score
        return demo if self._verdicts[example.id, demo.output] else None

    async def _demo(self, request: ProposalRequest, component: str) -> Proposal | None:
        cfg, st, parent, rng = request.config, request.state, request.parent, request.rng
        sources = self._sources(request)
        if not sources:
            return None
        # an inner step's demonstration is for a mistake of its own (`step_rollouts`), not the program's answer's
        evidence = step_rollouts(st, component, [r for e in request.trainset
                                                 if (r := st.known(parent, e.id)) is not None], cfg.perfect_score)
        focus = edits.choose_focus(evidence, cfg.perfect_score, {}, rng, max_failures=cfg.minibatch_size,
                                   max_contrast=self.gate_solved, diagnosis=diagnose(request, component))
        if focus is None:
            return None
        gate_ids = edits.gate_batch(focus, evidence, cfg.perfect_score, cfg.minibatch_size, self.gate_solved, rng)
        # solved training examples of any candidate: what the task LM answered there is a right answer
        solved = [r for (_, ex_id), r in sorted(st.rollouts.items())
                  if ex_id in sources and r.score.value >= cfg.perfect_score]
        _, current = demos.split(parent[component])
        calls = (next((t for t in r.trace if t.component == component), None) for r in focus.failures)
        missed = [t.inputs for t in calls if t is not None]  # what the demonstration should look like
        # (a program's gold is not an inner step's answer)
        gold = component not in st.steps and (self.gold if self.gold is not None else isinstance(self._inner, Rewrite))
        golds = await self._golds(request, component, sources, {r.example_id for r in solved}) if gold else []
        demo = demos.choose(solved, component, current, edits.expected_answer(focus.pattern), set(gate_ids), rng,
                            like=missed, golds=golds)
        if demo is None:
            return None
        text = demos.add(parent[component], demo, cfg.demonstrations)
        if request.services.tried(parent.replace(component, text)):
            return None
        by_id = {e.id: e for e in request.trainset}
        found = st.memory.peek(RULES_TRIED)
        memory = found if found is not None else {}

        def verdict(child: Candidate, accepted: bool) -> None:
            # the rules that failed on the parent (edit proposer) are remembered for its demo child too
            if accepted and (parent.id, component) in memory:
                memory[(child.id, component)] = {p: list(r) for p, r in memory[(parent.id, component)].items()}

        return Proposal({component: text}, [by_id[i] for i in gate_ids], f"example {demo.example_id}: "
                        f"{demo.render()}", focus.pattern, verdict, origin="demo")
