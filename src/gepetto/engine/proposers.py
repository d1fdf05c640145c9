"""Proposers: how a child's new texts are written from its parent's rollouts.

The engine runs the parent on a minibatch, hands the rollouts (outputs, traces, feedback) to the proposer, and
takes back new texts; it then makes the child, tests it against the parent on the same examples (or on those
the proposal names), and validates it if the acceptance rule passes it. Built in: `Rewrite` ("rewrite", the
paper's reflective rewrite: engine/reflect.py) and `Edit` ("edit", one rule per proposal: engine/edits.py).

A proposer of your own is any object with `async def propose(self, request) -> Proposal | dict | None`:

    class Shout:
        async def propose(self, request: ProposalRequest) -> dict[str, str] | None:
            (component,) = request.components
            return {component: request.parent[component] + "\\nAnswer in capitals."}

It keeps the strategies' contract (engine/strategies.py): randomness only from `request.rng`, memory in
`request.state.memory` (written through `request.later` while proposing, so that a round of concurrent
proposals does not hang on their timing), and LM calls through `request.reflect(...)`, the run's reflection LM,
whose answers are metered, stored with a run and replayed on resume (an LM of its own would make resume inexact).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from gepetto import events as ev
from gepetto.config import REWRITE_TEMPERATURES, RULE_TEMPERATURES, EngineConfig
from gepetto.engine import demos, edits
from gepetto.engine.answers import Diagnosis
from gepetto.engine.minibatch import EpochShuffled
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
from gepetto.events import Outcome
from gepetto.lm.base import Completion, Message
from gepetto.program import Rollout
from gepetto.types import Candidate, Example

# what the built-in proposers remember in `state.memory`
# {(candidate id, component): {failure pattern: the rules tried for it that did not help}}
RULES_TRIED: MemoryKey[dict[tuple[str, str], dict[str, list[str]]]] = MemoryKey("edit.rules_tried", dict)
# {(candidate id, component): the failure patterns no usable rule came for}
UNANSWERED: MemoryKey[dict[tuple[str, str], set[str]]] = MemoryKey("edit.unanswered", dict)
# {component: the iteration of the proposal that makes its first draft of the rules}
DRAFTED: MemoryKey[dict[str, int]] = MemoryKey("edit.drafted", dict)
# {"demo" | "other": [passed, tested]}: the minibatch tests of each kind of proposal (adaptive few-shot)
DEMO_TESTS: MemoryKey[dict[str, list[int]]] = MemoryKey("fewshot.tests", lambda: {"demo": [0, 0], "other": [0, 0]})


@dataclass(frozen=True)
class ProposalRequest:
    """What a proposer gets for one proposal: the parent, what to change, its rollouts, and the engine's services."""

    parent: Candidate
    parent_index: int
    components: tuple[str, ...]  # the components to change (the component selector's choice)
    examples: list[Example]  # the minibatch
    runs: list[Rollout]  # the parent's rollouts on `examples`, in the same order
    iteration: int
    rng: random.Random  # this proposal's own, seeded by the run's seed and the iteration
    config: EngineConfig
    state: RunState  # read it; write only `state.memory`
    trainset: Sequence[Example]
    # the run's reflection LM: metered, stored with a run and replayed on resume; None when the call failed (it
    # cost an attempt, counted as Outcome.REFLECTION_ERROR); LM outages are retried and may stop the run
    reflect: Callable[[list[Message], dict[str, Any]], Awaitable[Completion | None]]
    tried: Callable[[Candidate], bool]  # whether this child was proposed before (it would not be paid for again)
    count: Callable[[Outcome], None]  # count an outcome in Result.proposals (e.g. a rejected answer)
    emit: Callable[[ev.Event], None]  # tell the callbacks (PhaseStarted, ReflectionAnswered, ...)
    # the most rollouts the child's test may take (Proposal.test_on, the parent's new rollouts there included): the
    # proposer's `test_size`, or the minibatch's size at the budget's tail (see Proposer); None: no limit given
    test_room: int | None = None
    # later(fn): call fn once this proposal is decided, with the round's other proposals in plan order (its verdict
    # comes after): for a write to `state.memory` that a proposal running beside this one must not see
    later: Callable[[Callable[[], None]], None] = lambda fn: fn()

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


class Proposer(Protocol):
    """Writes a child's new texts. Returns a `Proposal`, a mapping {component: new text}, or None (nothing worth
    testing; count why with `request.count`).

    Optional: `test_size` (int), the most rollouts a child's test takes when the proposer picks its own examples,
    and `minibatch(state, parent, components, trainset)` returning the examples the parent runs on (None: the
    minibatch sampler's); a test may then take up to `test_size` rollouts. A proposer with `test_size` and no
    `minibatch` that sets `fits_test_room = True` keeps its test within `request.test_room`: at the budget's tail,
    where `test_size` no longer fits, it still gets a last proposal, whose room is the minibatch's size."""

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None: ...


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


def diagnose(request: ProposalRequest) -> Diagnosis:
    """How this proposal reads its training rollouts' failures (engine/answers.py)."""
    return Diagnosis(request.state.answers, {e.id: e for e in request.trainset})


def parts(cfg: EngineConfig, text: str) -> tuple[str, list[demos.Demo]]:
    """(instruction, demonstrations) of a component's text: reflection sees and changes only the instruction
    (with no demonstrations, the whole text is the instruction)."""
    return demos.split(text) if cfg.demonstrations else (text, [])


def over_length(cfg: EngineConfig, candidate: Candidate) -> bool:
    """Whether an instruction part of `candidate` is longer than `max_component_chars` (described components,
    artifacts, are not instructions and have no length budget)."""
    limit, described = cfg.max_component_chars, cfg.component_descriptions or {}
    if not limit:
        return False
    return any(len(parts(cfg, text)[0]) > limit for name, text in candidate.items() if name not in described)


def temperature(cfg: EngineConfig, attempt: int, default: Sequence[float]) -> float:
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
    if check_tried and request.tried(request.parent.replace(component, demos.join(text, kept))):
        return Outcome.ALREADY_TRIED
    return None


class Rewrite:
    """The paper's proposer: show the reflection LM the minibatch rollouts of one component with their feedback
    and ask for a whole new text; vet each answer (engine/reflect.py) and ask again, told why, a bounded number of
    times. With several components, one rewrite each. A described component is an artifact, kept verbatim."""

    async def propose(self, request: ProposalRequest) -> dict[str, str] | None:
        if all(r.score.value >= request.config.perfect_score for r in request.runs):
            request.count(Outcome.PARENT_PERFECT)
            return None
        texts = {}
        for component in request.components:
            examples = reflective_examples(request.runs, component, request.examples)
            text = await self.rewrite(request, component, examples)
            if text is not None:
                texts[component] = text
        return texts or None

    async def rewrite(self, request: ProposalRequest, component: str, examples: list[ReflectionExample]
                      ) -> str | None:
        cfg, description = request.config, request.description(component)
        artifact = description is not None
        current, kept = parts(cfg, request.parent[component]) if not artifact else (request.parent[component], [])
        request.emit(ev.PhaseStarted("reflection"))
        limit = None if artifact else cfg.max_component_chars  # an artifact has no length budget
        messages = build_prompt(current, examples, max_chars=cfg.reflection_chars, description=description,
                                limit=limit)
        max_tokens = cfg.reflection_max_tokens
        for attempt in range(cfg.reflection_attempts):
            params = reflection_params(request, attempt, REWRITE_TEMPERATURES, max_tokens=max_tokens, stop=CLOSE_TAG)
            out = await request.reflect(messages, params)
            if out is None:
                continue
            proposal = vet(out.text, out.finish_reason, current, examples, artifact=artifact)
            rejected = proposal.rejected or refusal(  # (several components: their combination is not checked here)
                request, component, proposal.text, kept, limit=limit, check_tried=len(request.components) == 1)
            request.emit(ev.ReflectionAnswered(attempt, rejected, proposal.text, out.text))
            if rejected is None:
                return demos.join(proposal.text, kept)
            request.count(rejected)
            if rejected is Outcome.TRUNCATED:
                max_tokens *= 2
            if rejected is Outcome.OVER_LENGTH and limit:  # a new request: shorten it
                messages = shorten_messages(proposal.text, limit)
            else:
                messages = retry_messages(messages, out.text, rejected, artifact=artifact)
        return None


class Edit:
    """One rule for one frequent mistake of the parent (engine/edits.py), tested on that mistake's failures and
    on solved cases. The parent first runs on training examples it has not run yet (its evidence grows); a
    described component (an artifact) is rewritten whole instead, on the sampler's minibatch. Rules that did not
    help, and patterns no usable rule came for (every attempt refused), are remembered per parent and component
    (in `state.memory`) and inherited by an accepted child: neither is asked for again.
    With `edit_rules` = k > 1, one proposal asks for k rules, each for another pattern (and another right answer),
    and the child is tested on ceil(minibatch_size / k) failures of each pattern plus the solved cases: one
    validation pass for k rules.
    With `definitions` = n > 0, the run's first proposal on a component drafts the whole rules list instead: the
    parent runs on up to n training examples, and every answer seen in a confusion there ("answered X, expected
    Y": X and Y) gets one rule written from up to 4 inputs whose right answer it is
    (`edits.build_definition_prompt`); one child, validated without a test. Later proposals sharpen those lines
    one answer at a time."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.rules, self.definitions = cfg.edit_rules or 1, cfg.definitions or 0  # (None: settled by the route)
        self.per_focus = -(-cfg.minibatch_size // self.rules)  # failures of each rule's pattern in the test
        self.test_size = max(cfg.minibatch_size, self.per_focus * self.rules) + cfg.gate_solved
        self.whole = Rewrite()
        self.walker = EpochShuffled(cfg.minibatch_size, cfg.seed, cfg.perfect_score)

    def _edits(self, state: RunState, components: Sequence[str]) -> bool:
        """Whether the proposal is an edit (a rule line appended): only to an instruction, never to an artifact,
        and, when the task has a closed answer set, only to a component whose answers are the program's."""
        if len(components) != 1:
            raise ValueError("the edit proposer changes one component per proposal: use component_selector "
                             "'round-robin' with it")
        if (self.cfg.component_descriptions or {}).get(components[0]):
            return False
        return state.answers is None or not state.answering or components[0] in state.answering

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
        parent has fewer than `evidence_size` known training rollouts, or than `definitions` before the first
        draft (None for an artifact: the sampler's)."""
        cfg = self.cfg
        if not self._edits(state, components):
            return None
        n = len(trainset)
        known = sum(state.known(parent, e.id) is not None for e in trainset)
        evidence = cfg.evidence_size
        # this plan makes the first draft (state.iteration: the plan's); a plan the loop then drops at the budget's
        # tail takes the draft with it
        if self._undrafted(state, components):
            state.memory.of(DRAFTED)[components[0]] = state.iteration
            evidence = max(evidence, self.definitions)
        want = min(max(cfg.minibatch_size, evidence - known), n - known)
        chosen: list[Example] = []
        for _ in range(n):
            if len(chosen) >= want:
                break
            ex = self.walker.next_example(state, trainset)
            if state.known(parent, ex.id) is None and all(ex.id != c.id for c in chosen):
                chosen.append(ex)
        return chosen

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        cfg, st, parent, rng = request.config, request.state, request.parent, request.rng
        if not self._edits(st, request.components):
            return await self.whole.propose(request)
        (component,) = request.components
        if self.drafts(request):
            return await self._draft(request, component)
        evidence = [r for e in request.trainset if (r := st.known(parent, e.id)) is not None]
        memory = st.memory.of(RULES_TRIED)
        tried = memory.setdefault((parent.id, component), {})
        # patterns no usable rule came for on this parent (every attempt refused): not asked again, from the next
        # round on (`request.later`: a proposal running beside this one on the same parent does not see them)
        skipped = st.memory.of(UNANSWERED)
        unanswered, refused = skipped.setdefault((parent.id, component), set()), set()
        diagnosis = diagnose(request)
        patterns = sorted({edits.pattern_of(r, diagnosis) for r in evidence if r.score.value < cfg.perfect_score})
        known: list[Rollout] = []  # every candidate's paid training rollouts (the parent's first), read once
        if any(edits.expected_answer(p) for p in patterns):
            train_ids = {e.id for e in request.trainset}
            known = [*evidence, *(r for (_, ex_id), r in sorted(st.rollouts.items()) if ex_id in train_ids)]
        instruction, kept = parts(cfg, parent[component])
        text = instruction
        asked: list[tuple[edits.Focus, str]] = []  # (focus, rule) of each rule in the child
        for _ in range(self.rules):  # each rule for another pattern, and another right answer
            chosen = {f.pattern for f, _ in asked}
            answers = {edits.expected_answer(p) for p in chosen} - {""}
            skip = [p for p in patterns if p in chosen or p in unanswered or p in refused
                    or edits.expected_answer(p) in answers]
            focus = edits.choose_focus(evidence, cfg.perfect_score, tried, rng, max_failures=max(cfg.minibatch_size, 4),
                                       max_contrast=cfg.gate_solved, skip=skip, diagnosis=diagnosis)
            if focus is None:
                if not asked:
                    request.count(Outcome.NO_OPEN_MISTAKE)
                break
            answer = edits.expected_answer(focus.pattern)
            if answer:  # other inputs with that right answer: no rollout to pay
                focus = replace(focus, positives=edits.positives(
                    known, answer, {r.example_id for r in focus.failures}, cfg.perfect_score, rng,
                    diagnosis=diagnosis))
            rule = await self._ask_rule(request, component, focus, tried.get(focus.pattern, []))
            if rule is None:
                refused.add(focus.pattern)
            else:
                text = edits.apply_rule(text, rule, answer)
                asked.append((focus, rule))
        if refused:
            request.later(lambda: unanswered.update(refused))
        if not asked:
            return None
        by_id = {e.id: e for e in request.trainset}
        gate = [by_id[i] for i in edits.gate_batch([f for f, _ in asked], evidence, cfg.perfect_score,
                                                   self.per_focus, cfg.gate_solved, rng)]

        def verdict(child: Candidate, accepted: bool) -> None:
            if accepted:  # rules that failed on the parent would fail on the child too: it inherits the memory
                memory[(child.id, component)] = {p: list(r) for p, r in tried.items()}
                skipped[(child.id, component)] = set(unanswered)
            else:
                for focus, rule in asked:
                    tried.setdefault(focus.pattern, []).append(rule)

        return Proposal({component: demos.join(text, kept)}, gate, "\n".join(r for _, r in asked),
                        "; ".join(f.pattern for f, _ in asked), verdict)

    async def _draft(self, request: ProposalRequest, component: str) -> Proposal | None:
        """The first draft of the rules list: one rule per answer seen in the training rollouts' confusions
        ("answered X, expected Y": X and Y), each from up to 4 inputs whose right answer it is (any candidate's
        rollouts: the right answer belongs to the example). The child is validated without a test: a dozen new
        lines at once, whose gain the few examples of a test cannot show (on the real track it tied or lost its
        6-example test in 2 of 6 runs while every draft probed gained on test)."""
        cfg, st, parent, rng = request.config, request.state, request.parent, request.rng
        by_id = {e.id: e for e in request.trainset}
        known = [r for (_, ex_id), r in sorted(st.rollouts.items()) if ex_id in by_id]
        diagnosis = diagnose(request)
        confusions = [edits.pattern_of(r, diagnosis) for r in known if r.score.value < cfg.perfect_score]
        answers = sorted({a for p in confusions for a in (edits.expected_answer(p), edits.wrong_answer(p))} - {""})
        if st.answers is not None:  # the set's own spelling; a wrong answer outside the set gets no rule
            answers = sorted({st.answers.match(a) for a in answers} - {""})
        current, kept = parts(cfg, parent[component])
        text, written = current, {}
        for answer in answers:
            inputs = edits.positives(known, answer, set(), cfg.perfect_score, rng, diagnosis=diagnosis)
            if len(inputs) < 2:  # one input says little of what the answer's inputs have in common
                continue
            shown = [edits.shown(r, component, 300, by_id.get(r.example_id)) for r in inputs]
            messages = edits.build_definition_prompt(current, answer, [ex.inputs for ex in shown])
            rule = await self._vetted(request, messages, current, shown, answer=answer, others=answers)
            if rule is not None:
                text = edits.apply_rule(text, rule, answer)
                written[answer] = rule
        if not written:
            request.count(Outcome.NO_OPEN_MISTAKE)
            return None
        return Proposal({component: demos.join(text, kept)}, (), "\n".join(written.values()),
                        "first draft of the rules")

    async def _vetted(self, request: ProposalRequest, messages: list[Message], current: str,
                      shown: list[ReflectionExample], *, answer: str, others: Sequence[str]) -> str | None:
        """A drafted rule for `answer`, vetted like an edit's rule. Its wording as a whole is checked against the
        parent's rule lines only (a loose line for every answer helps more than none: benchmarks/draft_probe.py);
        each condition it joins with "or" also against the draft's `others` answers, so that one line does not
        send two kinds of request to one answer."""
        request.emit(ev.PhaseStarted("reflection"))
        return await self._ask(request, messages,
                               lambda out: edits.vet_rule(out.text, out.finish_reason, current, shown, answer=answer,
                                                          split_against=others),
                               lambda why: edits.retry_hint(why, "", answer=answer))

    async def _ask_rule(self, request: ProposalRequest, component: str, focus: edits.Focus, tried_rules: list[str]
                        ) -> str | None:
        """Ask the reflection LM for one rule for `focus`. A rule whose child was already tried is refused here too,
        so a repeated answer costs a retry, not the proposal."""
        cfg, parent = request.config, request.parent
        current, kept = parts(cfg, parent[component])
        request.emit(ev.PhaseStarted("reflection"))
        by_id = {e.id: e for e in request.trainset}
        limit = cfg.max_component_chars
        if limit and len(current) + 20 > limit:  # no room left for a rule: not worth a reflection call
            request.count(Outcome.OVER_LENGTH)
            return None
        messages = edits.build_edit_prompt(current, focus, component, tried_rules, by_id, limit=limit)
        shown = [edits.shown(r, component, example=by_id.get(r.example_id)) for r in focus.failures + focus.contrast]

        def vet(out: Completion) -> tuple[str, Outcome | None]:
            rule, why = edits.vet_rule(out.text, out.finish_reason, current, shown, focus.pattern)
            child_text = edits.apply_rule(current, rule, edits.expected_answer(focus.pattern))
            return rule, why or refusal(request, component, child_text, kept, limit=limit)

        return await self._ask(request, messages, vet, lambda why: edits.retry_hint(why, focus.pattern))

    async def _ask(self, request: ProposalRequest, messages: list[Message],
                   vet: Callable[[Completion], tuple[str, Outcome | None]], hint: Callable[[Outcome], str]
                   ) -> str | None:
        """Ask the reflection LM for a rule; `vet` each answer (rule, why refused) and ask again, told `hint(why)`,
        a bounded number of times."""
        cfg = request.config
        for attempt in range(cfg.reflection_attempts):
            params = reflection_params(request, attempt, RULE_TEMPERATURES, max_tokens=cfg.rule_max_tokens,
                                       stop=edits.RULE_CLOSE)
            out = await request.reflect(messages, params)
            if out is None:
                continue
            rule, rejected = vet(out)
            request.emit(ev.ReflectionAnswered(attempt, rejected, rule, out.text))
            if rejected is None:
                return rule
            request.count(rejected)
            messages = [*messages, {"role": "assistant", "content": out.text[:600] or "(empty)"},
                        {"role": "user", "content": hint(rejected)}]
        return None


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


class FewShot:
    """Few-shot demonstrations (engine/demos.py) next to another proposer: with probability `fewshot_share` a
    proposal adds one solved training example to a component's demonstrations (at most `fewshot`, see
    `demos.add` for which one goes), chosen to show the right answer of one of the parent's frequent mistakes
    and to look like the inputs it got wrong; it costs no reflection call and is tested like an edit, on that
    mistake's failures and on solved cases. Otherwise, or when no mistake or usable solved example is known, the
    other proposer proposes (the built-ins see only the instruction part). Its children have origin "demo".
    With `adaptive_fewshot` the share is learnt from how each kind's tests went in this run (`demo_share`)."""

    def __init__(self, inner: Any, cfg: EngineConfig) -> None:
        self.inner, self.cfg = inner, cfg
        self.test_size = max(getattr(inner, "test_size", None) or cfg.minibatch_size,
                             cfg.minibatch_size + cfg.gate_solved)
        if hasattr(inner, "minibatch"):
            self.minibatch = inner.minibatch
        self.fits_test_room = True  # at the budget's tail, where a demonstration's test no longer fits, none is added
        self._warned = False

    async def propose(self, request: ProposalRequest) -> Proposal | Mapping[str, str] | None:
        cfg = self.cfg
        described = [c for c in request.components if request.description(c)]
        drafts = getattr(self.inner, "drafts", None)  # the edit proposer's first draft of the rules goes first
        first_draft = drafts is not None and drafts(request)
        share, tests = cfg.fewshot_share, None
        if cfg.adaptive_fewshot:
            tests = request.state.memory.of(DEMO_TESTS)
            share = demo_share(share, tests)
        # (the draw comes before the test room's check: the rest of the proposal is the same whether a demonstration
        # fits or not, so a resume with a larger budget, where it fits, takes the path of a run given it from the start)
        room = request.test_room is None or request.test_room >= self.test_size
        if len(request.components) == 1 and not described and not first_draft and request.rng.random() < share \
                and room:
            proposal = self._demo(request, request.components[0])
            if proposal is not None:
                return counted(proposal, tests["demo"]) if tests is not None else proposal
        answer = await self.inner.propose(request)
        other = as_proposal(answer, request) if tests is not None else None
        return counted(other, tests["other"]) if tests is not None and other is not None else answer

    def _sources(self, request: ProposalRequest) -> set[str]:
        """The training examples a demonstration may come from: never a validation example (it would be scored
        with its own answer in the prompt). Warns once when that leaves none (the valset is the trainset)."""
        sources = {e.id for e in request.trainset} - set(request.state.val_ids)
        if not sources and not self._warned:
            self._warned = True
            warnings.warn("fewshot: every training example is also a validation example (no valset given?), so no "
                          "demonstration can be shown without being scored on validation: none is proposed; give "
                          "a valset apart from the trainset", RuntimeWarning, stacklevel=2)
        return sources

    def _demo(self, request: ProposalRequest, component: str) -> Proposal | None:
        cfg, st, parent, rng = self.cfg, request.state, request.parent, request.rng
        sources = self._sources(request)
        if not sources:
            return None
        evidence = [r for e in request.trainset if (r := st.known(parent, e.id)) is not None]
        focus = edits.choose_focus(evidence, cfg.perfect_score, {}, rng, max_failures=cfg.minibatch_size,
                                   max_contrast=cfg.gate_solved, diagnosis=diagnose(request))
        if focus is None:
            return None
        gate_ids = edits.gate_batch(focus, evidence, cfg.perfect_score, cfg.minibatch_size, cfg.gate_solved, rng)
        # solved training examples of any candidate: what the task LM answered there is a right answer
        solved = [r for (_, ex_id), r in sorted(st.rollouts.items())
                  if ex_id in sources and r.score.value >= cfg.perfect_score]
        _, current = demos.split(parent[component])
        calls = (next((t for t in r.trace if t.component == component), None) for r in focus.failures)
        missed = [t.inputs for t in calls if t is not None]  # what the demonstration should look like
        demo = demos.choose(solved, component, current, edits.expected_answer(focus.pattern), set(gate_ids), rng,
                            like=missed)
        if demo is None:
            return None
        text = demos.add(parent[component], demo, cfg.demonstrations)
        if request.tried(parent.replace(component, text)):
            return None
        by_id = {e.id: e for e in request.trainset}
        memory = st.memory.peek(RULES_TRIED) or {}

        def verdict(child: Candidate, accepted: bool) -> None:
            # the rules that failed on the parent (edit proposer) are remembered for its demo child too
            if accepted and (parent.id, component) in memory:
                memory[(child.id, component)] = {p: list(r) for p, r in memory[(parent.id, component)].items()}

        return Proposal({component: text}, [by_id[i] for i in gate_ids], f"example {demo.example_id}: "
                        f"{demo.render()}", focus.pattern, verdict, origin="demo")
