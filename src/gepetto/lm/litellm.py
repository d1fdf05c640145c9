"""Other providers through LiteLLM (extra `litellm`, imported only when such an LM is used).

LiteLLM maps provider errors onto the `openai` exception classes, so the same retry rules apply. Keys come
from the provider's usual environment variables (ANTHROPIC_API_KEY, ...), read by LiteLLM itself.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gepetto._install import install_hint
from gepetto.lm.base import Completion, LMSetupError, Message
from gepetto.lm.openai import _completion, response_format_for_openai, translate_error
from gepetto.lm.remote import RemoteLM

if TYPE_CHECKING:
    from gepetto.lm.names import LMName


class LiteLLMLM(RemoteLM):
    def __init__(self, model: str, **options: Any) -> None:
        self.model, self.name = model, f"litellm:{model}"
        super().__init__(**options)
        self._litellm: Any = None

    def endpoint(self) -> str:
        return f"litellm:{self.model.split('/', 1)[0]}"  # the provider

    def _module(self) -> Any:
        if self._litellm is None:
            # LiteLLM fetches its price list from GitHub on import unless told not to; gepetto prices calls itself
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                import litellm
            except ImportError:
                raise LMSetupError(missing_litellm(self.model)) from None
            self._litellm = litellm
        return self._litellm

    async def _prepare(self) -> None:
        self._module()

    async def _request(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        import openai

        litellm = self._module()
        kw = dict(params)
        if kw.get("response_format") is not None:
            kw["response_format"] = response_format_for_openai(kw["response_format"])
        try:
            resp = await litellm.acompletion(model=self.model, messages=messages, num_retries=0,
                                             timeout=self.timeout, **kw)
        except openai.OpenAIError as exc:
            raise translate_error(exc, self.name) from None
        return _completion(resp, messages)


def missing_litellm(model: str) -> str:
    """What to do when LiteLLM is missing for `model` (PROVIDER/MODEL); Ollama has an OpenAI-compatible way too."""
    provider, _, name = model.partition("/")
    message = f"{model}: the provider {provider!r} is reached through LiteLLM, which is not installed: " + install_hint(
        "litellm")
    if provider == "ollama":
        message += f"; or use Ollama's OpenAI-compatible endpoint: openai:{name}@http://localhost:11434/v1"
    return message


def from_name(name: LMName) -> LiteLLMLM:
    """The LM a name `litellm:...` stands for (the `litellm` row of gepetto.lm.names.BACKENDS)."""
    return LiteLLMLM(name.model, **name.options)
