"""The LM protocol every backend implements, plus a metering wrapper and a scripted LM for tests."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gepetto.ledger import Ledger

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False  # True when the backend gave no usage and we counted ~4 chars per token


@dataclass(frozen=True)
class Completion:
    text: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"  # "stop", "length" (truncated), "error", ...
    cached: bool = False
    attempts: int = 1  # HTTP backends: 1 + the number of retries it took


class LMError(RuntimeError):
    """An LM call failed for good (after the backend's own retries, counted in `attempts`).

    The tree says who failed. A plain LMError is the model's or the request's fault (an empty answer, invalid
    JSON, a prompt too long, a request the server refuses): inside a rollout it is the program's failure and
    scores 0. `LMUnavailable` and its subclasses are the infrastructure's fault: no answer at all, so no score.
    """

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
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


@runtime_checkable
class LM(Protocol):
    """Anything that completes a chat. `name` identifies the model (used for caching and prices)."""

    name: str

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion: ...


class PerLoop:
    """One asyncio primitive per event loop: a Lock or Semaphore binds to the loop that first waits on it, and an
    LM object may serve several loops in turn (each `gepetto.optimize` or `evaluate` call runs its own)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory, self._items = factory, {}  # type: dict[int, Any]

    def get(self) -> Any:
        import asyncio

        loop_id = id(asyncio.get_running_loop())
        if loop_id not in self._items:
            self._items = {loop_id: self._factory()}  # loops run one after another: keep only the current one
        return self._items[loop_id]


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
            seconds=time.perf_counter() - t0,
            estimated=out.usage.estimated,
            cached=out.cached,
            error=out.finish_reason == "error",
            retries=out.attempts - 1,
        )
        return out


Responder = Callable[[Sequence[Message], dict[str, Any]], "str | Completion"]


class ScriptedLM:
    """A deterministic LM for tests: answers from a function of (messages, params) or a fixed list.

    A list is consumed in order (and an exhausted list raises); a function may return a str or a Completion.
    Every call is kept in `calls` so tests can check what the LM was shown.
    """

    def __init__(self, responder: Responder | Iterable[str | Completion], name: str = "scripted") -> None:
        self.name = name
        self.calls: list[tuple[list[Message], dict[str, Any]]] = []
        if callable(responder):
            self._fn: Responder | None = responder
            self._queue: list[str | Completion] = []
        else:
            self._fn, self._queue = None, list(responder)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        self.calls.append(([dict(m) for m in messages], dict(params)))
        if self._fn is not None:
            out = self._fn(messages, params)
            if inspect.isawaitable(out):
                out = await out
        elif self._queue:
            out = self._queue.pop(0)
        else:
            raise LMError(f"{self.name}: scripted responses exhausted after {len(self.calls) - 1} calls")
        if isinstance(out, Completion):
            return out
        return Completion(str(out), estimated_usage(messages, str(out)))
