"""How a user's system runs: a function (candidate, example, ctx) -> output, and the metric that judges it.

A program makes its LM calls through `ctx.lm(component, ...)`, which uses that component's current text as
the system prompt and records a trace entry, so reflection on component C can be shown only C's calls.
In an async program write `await ctx.lm(...)`; in a plain (sync) program `ctx.lm(...)` returns the text.
A component that is not a prompt (a regex, a tool description, a code snippet, a JSON config) is read from
`candidate[name]` anywhere in the program; `ctx.record(name, inputs=..., output=...)` then says what it did,
as a trace entry like those of `ctx.lm`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import copy
import dataclasses
import inspect
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from gepetto.lm.base import LM, Completion, LMError, LMUnavailable, Message
from gepetto.types import Candidate, Example, Score, ScoreRangeError, valid_text

Program = Callable[[Candidate, Example, "Context"], Any]  # may be sync or async
Metric = Callable[[Example, Any, "list[TraceEntry]"], "Score | float | Awaitable[Score | float]"]


@dataclass
class TraceEntry:
    """One LM call made by a program: which component, what it was given, what it answered.

    `ctx.lm` records one per call, `ctx.record` one per use of a component outside an LM call; the metric is given
    the rollout's list of them.

    Attributes:
        component: The component whose text was the system prompt (or which `ctx.record` named).
        inputs: The non-system messages, rendered as text (or the recorded inputs).
        output: The LM's answer (or the recorded output, as text).
        finish_reason: Why the answer ended, as the LM said: "stop", "length" (truncated), "error", ...
        feedback: Feedback on this component's part in the run, when the program knows it (a gepa adapter's
            reflective dataset, a DSPy per-predictor feedback); reflection on the component shows it instead of
            the rollout's. None: none.
    """

    component: str
    inputs: str
    output: str
    finish_reason: str = "stop"
    feedback: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"component": self.component, "inputs": self.inputs, "output": self.output,
               "finish_reason": self.finish_reason}
        if self.feedback is not None:
            out["feedback"] = self.feedback
        return out


def render_value(value: Any) -> str:
    """Text of a recorded value: a string as is, anything else as JSON (non-JSON objects via `str`)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # e.g. a circular structure
        return str(value)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def settled(value: Any) -> Any:
    """A program's output as a run keeps it: JSON data, the same whether the rollout was just run or read back from
    the run store on resume (so reflection is shown the same text either way). Sets are sorted, tuples become
    lists, mapping keys strings, and other objects (a dataclass, a datetime) their `str`, without memory addresses.
    The metric is given the output itself, before this."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, Mapping):
        return {_key(k): settled(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [settled(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((settled(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    return valid_text(_ADDRESS.sub("", str(value)))


def _key(key: Any) -> str:
    """A mapping key as JSON makes it (1 -> "1", True -> "true", None -> "null"); others by their `str`."""
    if isinstance(key, str):
        return valid_text(key)
    if key is None or isinstance(key, (bool, int, float)):
        return json.dumps(key)
    return valid_text(_ADDRESS.sub("", str(key)))


def render_messages(messages: Sequence[Message]) -> str:
    if len(messages) == 1:
        return messages[0].get("content", "")
    return "\n".join(f"[{m.get('role', 'user')}] {m.get('content', '')}" for m in messages)


@dataclass
class Context:
    """Given to a program on each run: the candidate's texts, the task LM and the trace being recorded.

    gepetto makes one per rollout; a program calls `ctx.lm(...)` for its LM calls and `ctx.record(...)` for a
    component it uses otherwise.

    Attributes:
        candidate: The candidate being run: its texts by component name.
        task_lm: The task LM, which `ctx.lm` calls.
        lm_params: Parameters of every `ctx.lm` call (the run's `task_lm_params`); those given to `ctx.lm` win.
        trace: The trace entries recorded so far, in call order.

    Example:
        ```python
        import re

        from gepetto import Candidate, Example, ScriptedLM, evaluate

        async def program(candidate, example, ctx):
            answer = await ctx.lm("instruction", example["question"], temperature=0.0)
            found = re.search(candidate["extract"], answer)
            return ctx.record("extract", inputs=answer, output=found.group(1) if found else "")

        seed = Candidate(instruction="Answer as 'Answer: X'.", extract=r"Answer: (.+)")
        lm = ScriptedLM(lambda messages, params: "Answer: Paris")
        ev = evaluate(seed, [Example({"question": "Capital of France?"}, gold="Paris")],
                      lambda ex, out, trace: out == ex.gold, program=program, task_lm=lm)
        print(ev.mean, [t.component for t in ev.rollouts[0].trace])  # 1.0 ['instruction', 'extract']
        ```
    """

    candidate: Candidate
    task_lm: LM
    lm_params: Mapping[str, Any] = field(default_factory=dict)
    trace: list[TraceEntry] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop | None = None
    _cut: threading.Event = field(default_factory=threading.Event)  # the rollout is over: no more LM calls
    _pending: set[concurrent.futures.Future] = field(default_factory=set)  # a sync program's calls in flight

    def lm(self, component: str, user: str | Sequence[Message], **params: Any) -> Any:
        """Call the task LM with `component`'s text as system prompt; records a trace entry.

        `user` is the user message text, or a list of non-system messages. Returns an awaitable of the
        answer text inside the event loop (async programs), and the text itself from a sync program.

        Args:
            component: The name of the candidate's component whose text is the system prompt.
            user: The user message, or the non-system messages (`{"role": ..., "content": ...}` dicts).
            **params: Parameters of this call (temperature, max_tokens, response_format, ...), over `lm_params`.

        Returns:
            The answer's text (in an async program, an awaitable of it).

        Raises:
            KeyError: `component` is not one of the candidate's.
            LMError: The LM answered with an error, nothing (or tool calls only), or invalid JSON when
                `response_format` asked for JSON: the rollout fails and scores 0.
            RuntimeError: Called outside a gepetto run, or after the rollout ended (cut by `rollout_timeout`).
        """
        coro = self._call(component, user, params)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None:
            return coro
        if self._loop is None:
            coro.close()
            raise RuntimeError("ctx.lm called outside a gepetto run")
        if self._cut.is_set():  # a sync program abandoned by rollout_timeout: it pays for nothing more
            coro.close()
            raise RolloutCut("this rollout is over (cut by rollout_timeout, or the run stopped): no more LM calls")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RolloutCut("this rollout is over (cut by rollout_timeout, or the run stopped)") from None
        finally:
            self._pending.discard(future)

    def _close(self) -> None:
        """End the rollout for the program's thread too: its LM calls in flight are cancelled, later ones refused."""
        self._cut.set()
        for future in list(self._pending):
            future.cancel()

    def record(self, component: str, *, inputs: Any, output: Any, feedback: str | None = None) -> Any:
        """Record what `component` did on this run when it is used outside `ctx.lm` (a regex applied, a tool
        described, a config read): a trace entry for reflection on that component. Returns `output`.

        `inputs` and `output` may be any JSON-able value; they are rendered as text. Same call in sync and async
        programs (nothing to await). Record the data the component worked on, not the component's own text:
        reflection already shows that text. `feedback`: what went right or wrong in this component's part, when
        the program knows it; reflection on the component then shows it instead of the metric's feedback.

        Args:
            component: The name of the candidate's component that was used.
            inputs: What it worked on.
            output: What it gave.
            feedback: What went right or wrong in its part (None: the metric's feedback is shown).

        Returns:
            `output`, unchanged (so `return ctx.record(...)` ends a program).

        Raises:
            KeyError: `component` is not one of the candidate's.
        """
        if component not in self.candidate:
            raise KeyError(f"program recorded component {component!r}; candidate has {list(self.candidate)}")
        self.trace.append(TraceEntry(component, render_value(inputs), render_value(output),
                                     feedback=None if feedback is None else str(feedback)))
        return output

    async def _call(self, component: str, user: str | Sequence[Message], params: Mapping[str, Any]) -> str:
        if component not in self.candidate:
            raise KeyError(f"program asked for component {component!r}; candidate has {list(self.candidate)}")
        rest: list[Message] = [{"role": "user", "content": user}] if isinstance(user, str) else list(user)
        messages: list[Message] = [{"role": "system", "content": self.candidate[component]}, *rest]
        out: Completion = await self.task_lm.complete(messages, **{**self.lm_params, **params})
        self.trace.append(TraceEntry(component, render_messages(rest), out.text, out.finish_reason))
        if out.finish_reason == "error":
            raise LMError(out.text or "the LM returned an error")
        check_answer(component, out.text, {**self.lm_params, **params}, out.finish_reason)
        return out.text


class RolloutCut(RuntimeError):
    """A program's LM call after its rollout ended (a sync program left running by `rollout_timeout`)."""


def check_answer(component: str, text: str, params: Mapping[str, Any], finish_reason: str = "stop") -> None:
    """Garbage from the LM fails the rollout with a clear line: an empty answer, or invalid JSON when JSON was asked."""
    if not text.strip() and finish_reason == "tool_calls":
        raise LMError(f"the LM answered component {component!r} with tool calls only, no text: ctx.lm returns the "
                      "text of an answer and runs no tools; ask for a text answer (say so in the instruction, or "
                      "offer no tools), or call a tool-using client yourself and record it with ctx.record")
    if not text.strip():
        raise LMError(f"the LM gave an empty answer for component {component!r}")
    if params.get("response_format") is not None:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise LMError(f"component {component!r} asked for JSON but the LM answered invalid JSON ({exc.msg} at "
                          f"char {exc.pos}): {text[:120]!r}") from None


class MetricError(ValueError):
    """The metric is unusable: it failed the same way on every validation example of the seed.

    Also raised for a metric that returns a score outside [0, 1] on a validation example of the seed: a
    misconfigured metric whatever the candidate. The message names an example and the error.
    """


@dataclass
class Rollout:
    """One program run on one example, judged by the metric.

    Attributes:
        example_id: The example's id (`Example.id`).
        score: The metric's Score; a rollout whose program or metric raised, or that ran out of time, scores 0
            with the error as feedback.
        output: The program's output as the run keeps it: JSON data (sets sorted, tuples as lists, other objects
            by their `str`); None when the rollout failed.
        trace: The trace entries recorded during the run (`ctx.lm`, `ctx.record`).
        error: The error of a failed rollout, as "TypeName: message"; None when it ran to the end.
        stage: Where `error` happened: "program" or "metric".
    """

    example_id: str
    score: Score
    output: Any = None
    trace: list[TraceEntry] = field(default_factory=list)
    error: str | None = None
    stage: str | None = None


def check_metric(runs: Sequence[Rollout]) -> None:
    """Raise MetricError when every rollout failed in the metric with the same kind of error (a broken metric
    would otherwise score 0 everywhere and burn the whole budget)."""
    failed = [r for r in runs if r.stage == "metric"]
    # a score outside [0, 1] is a misconfigured metric on any example, not a verdict on this one
    ranged = [r for r in failed if (r.error or "").startswith(ScoreRangeError.__name__)]
    if ranged:
        first = ranged[0]
        raise MetricError(
            f"the metric returned a score outside [0, 1] on {len(ranged)} of {len(runs)} validation examples of the "
            f"seed, e.g. on {first.example_id!r}: {first.error}. Scores must be in [0, 1]; fix the metric and run "
            "again")
    kinds = {(r.error or "").split(":", 1)[0] for r in failed}
    if runs and len(failed) == len(runs) and len(kinds) == 1:
        first = failed[0]
        raise MetricError(
            f"the metric failed on all {len(runs)} validation examples of the seed with {kinds.pop()}, e.g. on "
            f"{first.example_id!r}: {first.error}. A metric must return a gepetto.Score or a number in [0, 1] "
            f"(float, int, bool or a numpy scalar); fix it and run again")


async def run_rollout(
    program: Program,
    metric: Metric,
    candidate: Candidate,
    example: Example,
    task_lm: LM,
    lm_params: Mapping[str, Any] | None = None,
    timeout: float | None = None,
) -> Rollout:
    """Run the program and the metric; an exception in either becomes score 0 with the error as feedback, and so
    does a rollout that takes longer than `timeout` seconds (program and metric together; None: no limit).

    Except when the LM infrastructure failed (LMUnavailable, also wrapped by the program or metric as the cause
    of its own error): that is no verdict on the candidate, so it is raised for the caller to retry later.
    """
    ctx = Context(candidate, task_lm, dict(lm_params or {}), _loop=asyncio.get_running_loop())
    stage = "program"
    given = example  # the program and the metric get copies of their own: a change to one stays there

    async def judged() -> Rollout:
        nonlocal stage
        example = _own_copy(given)
        if is_async(program):
            output = await program(candidate, example, ctx)
        else:
            # sync programs run in a worker thread so their ctx.lm calls can wait on the event loop; under a
            # timeout, a thread of its own that may be left behind (a hung program cannot be stopped, only
            # abandoned, and must not hold up the end of the run)
            to_thread = asyncio.to_thread if timeout is None else _in_daemon_thread
            output = await to_thread(_run_sync, program, candidate, example, ctx)
            if inspect.isawaitable(output):
                output = await output
        stage = "metric"
        result = await verdict(metric, given, output, ctx.trace)
        return Rollout(given.id, Score.coerce(result), settled(output), ctx.trace)

    started = time.monotonic()
    try:
        return await (judged() if timeout is None else asyncio.wait_for(judged(), timeout))
    except asyncio.CancelledError:
        raise
    except (Exception, SystemExit) as exc:  # a failed rollout, not a failed run (sys.exit() in a metric too)
        unavailable = cause_of(exc, LMUnavailable)
        if unavailable is not None:
            raise unavailable from None
        if timeout is not None and isinstance(exc, asyncio.TimeoutError) and time.monotonic() - started >= timeout:
            msg = f"TimeoutError: no result within {timeout:g} s (rollout_timeout)"
            feedback = (f"The {stage} took longer than the {timeout:g} s allowed per rollout on this example, so it "
                        "scored 0.")
        else:
            msg = f"{type(exc).__name__}: {exc}"
            feedback = f"The {stage} raised an error on this example, so it scored 0. Error: {msg}"
        return Rollout(given.id, Score(0.0, feedback), None, ctx.trace, error=msg, stage=stage)
    finally:
        ctx._close()


async def verdict(metric: Metric, example: Example, output: Any, trace: list[TraceEntry]) -> Any:
    """What `metric` returns for `output` on its own copy of `example`, awaited when the metric is async (a Score
    or a number, not checked yet)."""
    result = metric(_own_copy(example), output, trace)
    return await result if inspect.isawaitable(result) else result


def _own_copy(example: Example) -> Example:
    """`example` with inputs and gold of its own: what one rollout's program and metric may change as they like."""
    try:
        inputs, gold = copy.deepcopy((dict(example.inputs), example.gold))
    except Exception:  # an object that cannot be copied (a lock, a client): the mapping at least is the rollout's
        inputs, gold = dict(example.inputs), example.gold
    return dataclasses.replace(example, inputs=inputs, gold=gold)


def _in_daemon_thread(fn: Callable[..., Any], *args: Any) -> asyncio.Future:
    """`fn(*args)` in a new daemon thread, as a future of the running loop (like asyncio.to_thread, but a thread
    that never returns does not keep the process alive)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, exc: BaseException | None) -> None:
        if not future.done():  # it may have been cancelled (timed out) meanwhile
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def work() -> None:
        try:
            result, exc = context.run(fn, *args), None
        except BaseException as err:  # handed to the awaiting coroutine
            result, exc = None, err
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, result, exc)

    threading.Thread(target=work, daemon=True, name="gepetto-program").start()
    return future


_E = TypeVar("_E", bound=BaseException)


def cause_of(exc: BaseException | None, kind: type[_E]) -> _E | None:
    """The first exception of type `kind` in `exc`'s chain of causes (itself included), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def is_async(fn: Any) -> bool:
    """Whether calling `fn` (a function or a callable object) gives a coroutine."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _run_sync(program: Program, candidate: Candidate, example: Example, ctx: Context) -> Any:
    threading.current_thread().name = f"gepetto-program-{example.id}"
    return program(candidate, example, ctx)


def format_inputs(inputs: Mapping[str, Any]) -> str:
    """Render an example's inputs as the user message: the value alone if there is one, else `key: value`."""
    if len(inputs) == 1:
        return str(next(iter(inputs.values())))
    return "\n".join(f"{k}: {v}" for k, v in inputs.items())


def single_instruction(component: str = "instruction", **lm_params: Any) -> Program:
    """The one-instruction program: system prompt = the component, user message = the example's input.

    The user message is the example's one input value, or `key: value` lines when it has several. This is the
    program `optimize` and `evaluate` run for a one-component candidate when no program is given.

    Args:
        component: The name of the component that is the system prompt.
        **lm_params: Parameters of every LM call it makes (temperature, max_tokens, ...).

    Returns:
        An async program `(candidate, example, ctx) -> str`, the LM's answer.

    Example:
        ```python
        from gepetto import Example, ScriptedLM, evaluate, single_instruction

        lm = ScriptedLM(lambda messages, params: "4")
        ev = evaluate("Answer with the number only.", [Example({"question": "2 + 2?"}, gold="4")],
                      lambda ex, out, trace: out == ex.gold, program=single_instruction(temperature=0.0),
                      task_lm=lm)
        print(ev.mean, lm.calls[0][1])  # 1.0 {'temperature': 0.0}
        ```
    """

    async def program(candidate: Candidate, example: Example, ctx: Context) -> str:
        return await ctx.lm(component, format_inputs(example.inputs), **lm_params)

    program.__name__ = f"single_instruction[{component}]"
    return program


@dataclass
class Task:
    """A ready optimisation problem: program, metric, seed candidate and data splits.

    What `gepetto optimize --task file.py:make_task` loads (a Task, or a function returning one), and what
    `evaluate_run(task=...)` scores a stored run's candidates on.

    Attributes:
        name: A short name for the task (shown in runs and reports).
        program: The program `(candidate, example, ctx) -> output`, sync or async.
        metric: `(example, output, trace) -> Score | float`, a score in [0, 1].
        seed_candidate: The texts the optimisation starts from.
        trainset: The examples reflection learns from.
        valset: The examples candidates are validated (and the best chosen) on.
        testset: Held-out examples, for `evaluate_run` and `gepetto evaluate` after the run.
        description: What the task is, in a sentence or two.
        expert_candidate: A hand-written strong prompt, to measure the headroom (None: none).
        baseline: A trivial constant output (e.g. the majority label), scored by the metric (None: none).

    Example:
        ```python
        from gepetto import Candidate, Example, Task, single_instruction

        def make_task() -> Task:
            data = [Example({"question": f"{i} + {i}?"}, gold=str(2 * i)) for i in range(12)]
            return Task("doubling", single_instruction(), lambda ex, out, trace: out.strip() == ex.gold,
                        Candidate(instruction="Answer with the number only."),
                        trainset=data[:4], valset=data[4:8], testset=data[8:])

        print(make_task().seed_candidate)  # Candidate({'instruction': 'Answer with the number only.'})
        ```
    """

    name: str
    program: Program
    metric: Metric
    seed_candidate: Candidate
    trainset: list[Example]
    valset: list[Example]
    testset: list[Example] = field(default_factory=list)
    description: str = ""
    expert_candidate: Candidate | None = None
    baseline: Any = None


@runtime_checkable
class Executor(Protocol):
    """Runs rollouts: the program on one example for one candidate, judged by the metric.

    Contract (what the engine relies on, so that every executor gives the same run):
    - `run(...)` returns what `gepetto.program.run_rollout(...)` returns for the same arguments: a `Rollout`, in
      which an error of the program or the metric is a score-0 rollout with the error as feedback, as is a rollout
      that took longer than `timeout` seconds (the engine's `rollout_timeout`; None: no limit); and it raises
      `LMUnavailable` (or a subclass) when the LM infrastructure gave no answer, so the engine retries later and
      nothing is counted.
    - Every LM call is accounted as if made through `task_lm`: when `task_lm` is a `MeteredLM`, its calls end in
      that ledger under that role. An executor that calls a copy of the LM elsewhere replays its calls there.
    - It keeps no result of its own: the engine counts each returned rollout once against the budget and stores
      it (the run store lives with the engine), so the budget contract and exact resume do not depend on it.
    - Cancelling the awaiting task gives the rollout up (remote work may be cancelled); it is neither counted
      nor stored. Calls arrive concurrently, at most `max_concurrency` at a time.
    - `aclose()` releases what the executor itself started (not what it was given); it may be called twice.
    """

    async def run(self, program: Program, metric: Metric, candidate: Candidate, example: Example, task_lm: LM,
                  lm_params: Mapping[str, Any] | None = None, *, timeout: float | None = None) -> Rollout: ...

    async def aclose(self) -> None: ...
