"""The LM protocol every backend implements, its errors, and the wrappers that meter and redact calls."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gepetto.ledger import Ledger
from gepetto.secrets import redact, redact_exception
from gepetto.types import valid_text

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}


@dataclass(frozen=True)
class Usage:
    """The tokens one LM call used, as the backend reported them (or estimated).

    Attributes:
        input_tokens: Tokens of the messages sent.
        output_tokens: Tokens of the answer.
        estimated: True when the backend gave no usage and the tokens were counted as ~4 characters each.
        cached_input_tokens: Of `input_tokens`, those the backend did not read again because their state was in its
            prompt cache (the embedded backend's kept prefixes, an OpenAI-compatible server's `cached_tokens`).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cached_input_tokens: int = 0


@dataclass(frozen=True)
class Completion:
    """One LM answer: its text, the tokens it used and why it ended; what `LM.complete` returns.

    Attributes:
        text: The answer's text (kept as valid Unicode: a lone surrogate becomes U+FFFD).
        usage: The tokens the call used.
        finish_reason: Why the answer ended: "stop", "length" (truncated), "error" (the text says what failed),
            "tool_calls", ...
        cached: True when the answer was replayed (from the response cache or a run store): it costs nothing.
        attempts: HTTP backends: 1 + the number of retries it took.

    Example:
        ```python
        from gepetto import Completion, Usage

        out = Completion("Paris", Usage(input_tokens=12, output_tokens=1))
        print(out.text, out.finish_reason, out.usage.output_tokens)  # Paris stop 1
        ```
    """

    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    cached: bool = False
    attempts: int = 1

    def __post_init__(self) -> None:
        # every answer, whichever LM made it, enters gepetto as valid Unicode (the store, hashes and prompts need it)
        if isinstance(self.text, str):
            object.__setattr__(self, "text", valid_text(self.text))


class LMError(RuntimeError):
    """An LM call failed for good (after the backend's own retries, counted in `attempts`).

    The tree says who failed. A plain LMError is the model's or the request's fault (an empty answer, invalid
    JSON, a prompt too long, a request the server refuses): inside a rollout it is the program's failure and
    scores 0. `LMUnavailable` and its subclasses are the infrastructure's fault: no answer at all, so no score.
    The message is redacted (gepetto.secrets): provider error texts become feedback, reports and logs.

    Args:
        message: What failed (redacted before it is kept).
        attempts: How many attempts the call took, retries included (kept as `attempts`).
    """

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(redact(message))
        self.attempts = attempts


class LMUnavailable(LMError):
    """The LM could not be reached or would not serve (429/5xx/timeouts past the retries, connection refused).

    Not a score: the engine retries the rollout (or reflection call) later, and stops the run, keeping all
    that was paid, when calls keep failing (`EngineConfig.max_lm_failures` in a row).
    """


class LMSetupError(LMUnavailable):
    """Retrying cannot help until someone fixes the setup (a missing or corrupt model, a missing package, a
    wrong model name or URL): the engine stops the run at once."""


class AuthenticationError(LMSetupError):
    """The endpoint refused the credentials (HTTP 401/403): a bad or missing API key, or no access."""


@dataclass(frozen=True)
class LMName:
    """An LM name `KIND:MODEL[@BASE_URL][?OPTIONS]` parsed (gepetto.lm.names); what a backend builds an LM from."""

    kind: str
    model: str
    base_url: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    text: str = ""  # the name as written


class LMConfigError(LMSetupError, ValueError):
    """The LM is set up wrong, found before anything is paid: a missing API key, an endpoint that cannot be reached
    or that refuses the key (`check_endpoints`). A configuration error: the command line exits 2."""


def check_endpoints(*lms: Any) -> None:
    """Ask each LM, through its wrappers (`.lm`), whether its endpoint answers and takes its key, before a run pays
    for anything: backends with a `check_endpoint()` method (the HTTP ones) raise LMConfigError if not."""
    seen: set[int] = set()
    for lm in lms:
        while lm is not None and id(lm) not in seen:
            seen.add(id(lm))
            check = getattr(type(lm), "check_endpoint", None)
            if callable(check):
                check(lm)
            lm = vars(lm).get("lm") if hasattr(lm, "__dict__") else None


@runtime_checkable
class LM(Protocol):
    """Anything that completes a chat. `name` identifies the model (used for caching and prices).

    A protocol: any object with a `name` and this `complete` method is an LM (no base class to inherit); pass it
    as `task_lm=` or `reflection_lm=` in place of a name.

    Attributes:
        name: The model's name: the key of the response cache and of `prices`.

    Example:
        ```python
        import gepetto
        from gepetto import Completion

        class Echo:
            name = "echo"

            async def complete(self, messages, **params):
                return Completion(messages[-1]["content"].upper())

        assert isinstance(Echo(), gepetto.LM)
        ev = gepetto.evaluate("Repeat the input.", [gepetto.Example({"q": "hi"}, gold="HI")],
                              lambda ex, out, trace: out == ex.gold, task_lm=Echo())
        print(ev.mean)  # 1.0
        ```
    """

    name: str

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        """Complete a chat: the answer to `messages`.

        Args:
            messages: The chat so far, `{"role": "system" | "user" | "assistant", "content": str}` dicts.
            **params: Parameters of the call (temperature, max_tokens, response_format, ...).

        Returns:
            The answer, with its token usage and finish reason.

        Raises:
            LMError: The call failed for good; `LMUnavailable` (a subclass) when the LM gave no answer at all
                (unreachable, rate-limited, timed out past the retries), which is no score.
        """


class PerLoop:
    """One object per event loop: a Lock, Semaphore or HTTP client binds to the loop it was made in, and an LM
    object may serve several loops in turn (each `gepetto.optimize` or `evaluate` call runs its own).

    Loops run one after another, so only the current loop's object is kept. The loop is held by a weak
    reference and compared by identity: a new loop at the address of a dead one is still a new loop.
    """

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._loop: Callable[[], Any] | None = None
        self._item: Any = None

    def get(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:
            self._loop, self._item = _ref(loop), self._factory()
        return self._item

    def pop(self) -> Any:
        """Forget the running loop's object and return it (None if it has none)."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:
            return None
        item, self._loop, self._item = self._item, None, None
        return item


def _ref(obj: Any) -> Callable[[], Any]:
    """A weak reference, or a strong one for objects that take none (some loop implementations)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


async def aclose_lm(lm: Any) -> None:
    """Release what an LM holds in the running event loop (HTTP clients), through wrappers that keep it in `.lm`."""
    seen: set[int] = set()
    while lm is not None and id(lm) not in seen:
        seen.add(id(lm))
        close = getattr(lm, "aclose", None)
        if close is not None and inspect.iscoroutinefunction(close):
            await close()
        lm = getattr(lm, "lm", None)


def json_schema_of(response_format: Any) -> dict[str, Any]:
    """The JSON schema in a `response_format` param: a bare schema, or {"schema": ...} / {"json_schema": ...}."""
    if not isinstance(response_format, dict):
        raise TypeError(f"response_format must be a JSON schema (dict), got {type(response_format).__name__}")
    if isinstance(response_format.get("json_schema"), dict):
        return response_format["json_schema"].get("schema", {})
    return response_format.get("schema", response_format)


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def estimated_usage(messages: Sequence[Message], text: str) -> Usage:
    return Usage(sum(estimate_tokens(m.get("content", "")) for m in messages), estimate_tokens(text), True)


class MeteredLM:
    """Wraps an LM so every call is recorded in a ledger under one role (task, reflection, judge)."""

    def __init__(self, lm: LM, ledger: Ledger, role: str) -> None:
        self.lm, self.ledger, self.role = lm, ledger, role
        self.name = lm.name

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        t0 = time.perf_counter()
        try:
            out = await self.lm.complete(messages, **params)
        except Exception as exc:
            self.ledger.record(self.role, model=self.name, seconds=time.perf_counter() - t0, error=True,
                               retries=max(0, getattr(exc, "attempts", 1) - 1))
            raise
        self.ledger.record(
            self.role,
            model=self.name,
            input_tokens=out.usage.input_tokens,
            output_tokens=out.usage.output_tokens,
            cached_input_tokens=out.usage.cached_input_tokens,
            seconds=time.perf_counter() - t0,
            estimated=out.usage.estimated,
            cached=out.cached,
            error=out.finish_reason == "error",
            retries=out.attempts - 1,
        )
        return out


class RedactingLM:
    """Wraps an LM so no secret passes through it (gepetto.secrets): its errors are redacted, and with
    `inputs=True` (the reflection LM) its messages and answers too: it is shown feedback, which may quote a provider
    error, and its answers become candidates. A task LM's answers are left as they are: the program receives
    what the model said, and what is written or shown of it is redacted there (store, events, reports).
    """

    def __init__(self, lm: LM, *, inputs: bool = False) -> None:
        self.lm, self.inputs, self.name = lm, inputs, lm.name

    def __getattr__(self, attr: str) -> Any:  # transparent: the wrapped LM's own attributes stay reachable
        if attr.startswith("__") or attr == "lm":
            raise AttributeError(attr)
        return getattr(self.lm, attr)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        if self.inputs:
            messages = [{**m, "content": redact(m["content"])} if isinstance(m.get("content"), str) else m
                        for m in messages]
        try:
            out = await self.lm.complete(messages, **params)
        except Exception as exc:
            clean = redact_exception(exc)
            if clean is exc:
                raise
            raise clean from None
        if not self.inputs:
            return out
        text = redact(out.text)
        return out if text == out.text else dataclasses.replace(out, text=text)

