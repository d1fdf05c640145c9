"""What every LM behind a network needs: a concurrency limit, a rate limiter and retries with backoff.

`RemoteLM.complete` waits for a slot and for the rate limiter, then calls `_request` (one HTTP request, given
by the backend); transient failures (429, 5xx, timeouts, dropped connections, malformed bodies) are retried
with exponential backoff and jitter, honouring the server's Retry-After. A call that still fails raises
LMUnavailable (the infrastructure failed: no answer, not a score) carrying the number of attempts, so the
ledger counts retries and errors.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Sequence
from typing import Any

from gepetto.lm.base import Completion, LMUnavailable, Message, PerLoop, estimate_tokens


class Transient(Exception):
    """A failure worth retrying; `retry_after` is the server's wish in seconds, if it said one."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms` or `retry-after` (seconds or an HTTP date); None if absent."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
    except Exception:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RateLimiter:
    """Requests-per-minute and tokens-per-minute as token buckets; `acquire(tokens)` waits until both allow."""

    def __init__(self, rpm: float | None = None, tpm: float | None = None) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._req = rpm or 0.0
        self._tok = tpm or 0.0
        self._t = time.monotonic()
        self._lock = PerLoop(asyncio.Lock)

    def _refill(self) -> None:
        now = time.monotonic()
        dt, self._t = now - self._t, now
        if self.rpm:
            self._req = min(self.rpm, self._req + dt * self.rpm / 60)
        if self.tpm:
            self._tok = min(self.tpm, self._tok + dt * self.tpm / 60)

    async def acquire(self, tokens: int = 0) -> None:
        if not self.rpm and not self.tpm:
            return
        async with self._lock.get():  # first come, first served
            tokens = min(tokens, int(self.tpm)) if self.tpm else 0
            while True:
                self._refill()
                wait = 0.0
                if self.rpm and self._req < 1:
                    wait = max(wait, (1 - self._req) * 60 / self.rpm)
                if self.tpm and self._tok < tokens:
                    wait = max(wait, (tokens - self._tok) * 60 / self.tpm)
                if wait <= 0:
                    break
                await asyncio.sleep(wait)
            if self.rpm:
                self._req -= 1
            if self.tpm:
                self._tok -= tokens


_LIMITERS: dict[tuple[str, float | None, float | None], RateLimiter] = {}


def shared_limiter(endpoint: str, rpm: float | None, tpm: float | None) -> RateLimiter:
    """One limiter per endpoint and limits: a run's task and reflection LMs on one API share its quota."""
    key = (endpoint, rpm, tpm)
    if key not in _LIMITERS:
        _LIMITERS[key] = RateLimiter(rpm, tpm)
    return _LIMITERS[key]


class RemoteLM:
    """Base of the HTTP backends. Subclasses set `name` and implement `_request(messages, params)`."""

    name: str

    def __init__(
        self,
        *,
        max_concurrency: int = 16,
        rpm: float | None = None,
        tpm: float | None = None,
        timeout: float = 120.0,
        max_retries: int = 6,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency, self.timeout, self.max_retries = max_concurrency, timeout, max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self.defaults = {"temperature": 0.0, **(defaults or {})}
        self.limiter = shared_limiter(self.endpoint(), rpm, tpm)
        self._slots = PerLoop(lambda: asyncio.Semaphore(self.max_concurrency))
        self._rng = random.Random()

    def endpoint(self) -> str:
        """What a rate limit applies to (an API and its key), shared by every LM object that names it."""
        return type(self).__name__

    async def _request(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        raise NotImplementedError

    async def _prepare(self) -> None:
        """Set up what requests need (import the client library, make the HTTP client), before any request's
        timeout starts: an import that takes seconds on a busy machine is no slow answer to retry."""

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff)
        # full jitter on an exponential ceiling: spreads the retries of many concurrent calls
        return self._rng.uniform(0.5, 1.0) * min(self.max_backoff, self.backoff * 2**attempt)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        msgs = [dict(m) for m in messages]
        merged = {**self.defaults, **{k: v for k, v in params.items() if v is not None}}
        tokens = sum(estimate_tokens(m.get("content", "")) for m in msgs) + int(merged.get("max_tokens") or 256)
        last = ""
        await self._prepare()
        for attempt in range(self.max_retries + 1):
            async with self._slots.get():
                await self.limiter.acquire(tokens)
                try:
                    out = await asyncio.wait_for(self._request(msgs, merged), self.timeout)
                except Transient as exc:
                    last, retry_after = str(exc), exc.retry_after
                except asyncio.TimeoutError:
                    last, retry_after = f"no answer within {self.timeout:g} s", None
                else:
                    return Completion(out.text, out.usage, out.finish_reason, out.cached, attempts=attempt + 1)
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise LMUnavailable(f"{self.name}: gave up after {self.max_retries + 1} attempts; last error: {last}",
                            attempts=self.max_retries + 1)
