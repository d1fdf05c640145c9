"""A deterministic LM for tests and examples: answers from a function or a list, and keeps every call."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from gepetto.lm.base import Completion, LMError, Message, estimated_usage

Responder = Callable[[Sequence[Message], dict[str, Any]], "str | Completion"]


class ScriptedLM:
    """A deterministic LM for tests: answers from a function of (messages, params) or a fixed list.

    A list is consumed in order (and an exhausted list raises); a function may return a str or a Completion.
    Every call is kept in `calls` so tests can check what the LM was shown.

    Args:
        responder: A function `(messages, params) -> str | Completion` (it may be async), or the answers in order.
        name: The LM's name (the response cache's key and the price table's).

    Attributes:
        calls: Every call so far, in order: (a copy of its messages, a copy of its params).

    Example:
        ```python
        import asyncio

        from gepetto import ScriptedLM

        lm = ScriptedLM(["Paris", "Rome"])
        out = asyncio.run(lm.complete([{"role": "user", "content": "Capital of France?"}], temperature=0.0))
        print(out.text, lm.calls[0][1])  # Paris {'temperature': 0.0}

        shout = ScriptedLM(lambda messages, params: messages[-1]["content"].upper())
        print(asyncio.run(shout.complete([{"role": "user", "content": "hi"}])).text)  # HI
        ```
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
        """The scripted answer to `messages` (`LM.complete`); the call is kept in `calls`.

        Args:
            messages: The chat, as any LM is given it.
            **params: The call's parameters, passed to the function (and kept).

        Returns:
            The answer: a Completion as the function or the list gave it, or their str in a Completion with
            estimated token usage.

        Raises:
            LMError: The list of answers is exhausted.
        """
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
