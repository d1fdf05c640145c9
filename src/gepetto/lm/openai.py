"""Any OpenAI-compatible chat endpoint (OpenAI, vLLM, llama.cpp server, Ollama, ...) on the `openai` async client.

The API key comes only from the environment and goes only where the user paired it: OpenAI's own URL gets
`$OPENAI_API_KEY`; a custom base URL gets the variable named by `api_key_env`, or the placeholder "EMPTY".
It is never written anywhere, and error texts are redacted (gepetto.secrets). The client's own retries are
off: `RemoteLM` retries with backoff and a shared limit.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import warnings
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gepetto.lm.base import (
    AuthenticationError,
    Completion,
    LMConfigError,
    LMError,
    LMSetupError,
    Message,
    PerLoop,
    Usage,
    estimated_usage,
    json_schema_of,
)
from gepetto.lm.remote import RemoteLM, Transient, parse_retry_after
from gepetto.secrets import redact, register_secret_env

if TYPE_CHECKING:
    from gepetto.lm.names import LMName

# parameters the chat completions API takes; others (top_k, repeat_penalty) go to self-hosted servers only
_OPENAI_PARAMS = {"temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty", "logit_bias",
                  "n", "user", "reasoning_effort"}
_RETRY_STATUS = {408, 409, 425, 429}
# what the HTTP library (httpx, or httpx2 under openai 3.x) raises when no server answered the connection
_UNREACHABLE = {"ConnectError", "ConnectTimeout", "UnsupportedProtocol", "InvalidURL"}


def response_format_for_openai(value: Any, style: str = "json_schema") -> dict[str, Any] | None:
    """Our `response_format` (a JSON schema, or an OpenAI response_format dict) as the server wants it.

    `style="json_schema"` is OpenAI's (and vLLM's) form; `"json_object"` sends {"type": "json_object",
    "schema": ...}, the form llama-cpp-python's server turns into a grammar.
    """
    if value is None:
        return None
    if isinstance(value, dict) and value.get("type") in ("json_object", "json_schema", "text"):
        return value
    schema = json_schema_of(value)
    if style == "json_object":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}


PLACEHOLDER_KEY = "EMPTY"  # what a server not paired with a key gets: local servers accept any value
_warned_plain_http: set[str] = set()


def _is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_plain_http(url: str) -> None:
    """Warn once per host when a key is about to travel unencrypted to a host other than this machine."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme == "http" and not _is_loopback(host) and host not in _warned_plain_http:
        _warned_plain_http.add(host)
        warnings.warn(f"an API key is sent over plain http to {host}: anyone on the network path can read it; "
                      "use https, or a server on 127.0.0.1", stacklevel=3)


async def _keep_client(client: Any) -> AsyncIterator[Any]:
    """Holds a client until its event loop shuts down: `asyncio.run` closes the async generators of its loop
    (shutdown_asyncgens), which closes the client inside the loop its connections belong to."""
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):  # a connection that fails to close cleanly is gone either way
            await client.close()


class OpenAILM(RemoteLM):
    """An OpenAI-compatible endpoint. `base_url=None` means OpenAI itself (or `$OPENAI_BASE_URL`).

    Keys go only where the user paired them: OpenAI (and `$OPENAI_BASE_URL`) gets `$OPENAI_API_KEY` (or the
    variable named by `api_key_env`); a custom `base_url` gets a key only from a variable named with
    `api_key_env`, otherwise the placeholder "EMPTY". Each event loop gets its own HTTP client, closed when the
    loop ends or by `aclose()`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key_env: str | None = None,
        structured: str = "json_schema",
        **options: Any,
    ) -> None:
        self.model, self.base_url = model, base_url
        super().__init__(**options)
        if structured not in ("json_schema", "json_object"):
            raise ValueError(f"structured must be 'json_schema' or 'json_object', got {structured!r}")
        self.structured = structured
        self.name = f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self._hosted = base_url is None and not os.environ.get("OPENAI_BASE_URL")
        # the variable whose value is sent as the key; None: a custom URL the user paired with no key
        self._api_key_env = api_key_env or ("OPENAI_API_KEY" if base_url is None else None)
        if self._api_key_env is not None:
            register_secret_env(self._api_key_env)
            if (self._hosted or api_key_env) and not os.environ.get(self._api_key_env):
                raise LMConfigError(f"{self.name}: set the API key in the environment variable {self._api_key_env}")
        self._clients = PerLoop(dict)

    def endpoint(self) -> str:
        return f"openai@{self.base_url or os.environ.get('OPENAI_BASE_URL') or 'api.openai.com'}"

    def check_endpoint(self) -> None:
        """Before a run pays for anything: the server answers, and does not refuse the key (one GET of `/models`,
        which costs nothing). Raises LMConfigError when it cannot be reached (refused, no such host, no answer to
        connect) or answers 401/403; any other answer, or a slow one, means it is there. It goes through the
        `openai` client itself, so it needs no HTTP library of its own (openai 1.x brings httpx, 3.x httpx2)."""
        import openai

        url = (self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        wait = min(self.timeout, 10.0)
        try:
            client = openai.OpenAI(base_url=url, api_key=self.api_key(), max_retries=0,
                                   timeout=openai.Timeout(wait, connect=min(wait, 5.0)))
            client.models.list()
        except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
            raise LMConfigError(f"{self.name}: {url} refused the API key (HTTP {exc.status_code}: "
                                f"{_short(exc.response.text, 120)}); check "
                                f"{self._api_key_env or 'the api_key_env variable'}; nothing was paid") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            if type(cause).__name__ not in _UNREACHABLE:  # it answered the connection: there, only slow or odd
                return
            raise LMConfigError(f"{self.name}: cannot reach {url} ({_short(cause) or type(cause).__name__}): start "
                                "the server or fix the URL; nothing was paid") from None
        except (openai.APIStatusError, ValueError):  # another answer, or a body that is no model list: it is there
            return

    def api_key(self) -> str:
        """The key this LM sends: from its paired variable, or the placeholder (read at each client's creation)."""
        if self._api_key_env is None:
            return PLACEHOLDER_KEY
        return os.environ.get(self._api_key_env) or PLACEHOLDER_KEY

    def _new_client(self) -> Any:
        from openai import AsyncOpenAI

        key = self.api_key()
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        if key != PLACEHOLDER_KEY:
            warn_plain_http(url)
        client = AsyncOpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=self.timeout)
        if not self._hosted:  # like the key, the organization and project ($OPENAI_ORG_ID, ...) are OpenAI's
            client.organization = client.project = None
        return client

    async def _get_client(self) -> Any:
        slot = self._clients.get()  # one client per event loop: its connections belong to that loop
        if "client" not in slot:
            keeper = _keep_client(self._new_client())
            slot["keeper"] = keeper  # a strong reference: the loop only keeps a weak one
            slot["client"] = await keeper.__anext__()
        return slot["client"]

    async def _prepare(self) -> None:
        await self._get_client()

    async def aclose(self) -> None:
        """Close the running loop's HTTP client (a later call in this or another loop makes a new one)."""
        slot = self._clients.pop()
        if slot and "keeper" in slot:
            await slot["keeper"].aclose()

    def _kwargs(self, params: dict[str, Any]) -> dict[str, Any]:
        kw: dict[str, Any] = {k: v for k, v in params.items() if k in _OPENAI_PARAMS}
        if params.get("max_tokens") is not None:
            # OpenAI's newer models accept only max_completion_tokens; self-hosted servers know max_tokens
            kw["max_completion_tokens" if self._hosted else "max_tokens"] = int(params["max_tokens"])
        fmt = response_format_for_openai(params.get("response_format"), self.structured)
        if fmt is not None:
            kw["response_format"] = fmt
        extra = {k: v for k, v in params.items() if k not in _OPENAI_PARAMS | {"max_tokens", "response_format"}}
        if extra and not self._hosted:
            kw["extra_body"] = extra
        return kw

    async def _request(self, messages: list[Message], params: dict[str, Any]) -> Completion:
        import openai

        try:
            resp = await (await self._get_client()).chat.completions.create(
                model=self.model, messages=messages, **self._kwargs(params))
        except openai.OpenAIError as exc:
            raise translate_error(exc, self.name) from None
        except json.JSONDecodeError as exc:  # the client parses the body lazily and lets this through
            raise Transient(f"malformed response body: {exc}") from None
        return _completion(resp, messages, self.name)


def translate_error(exc: Exception, name: str) -> Exception:
    """An `openai` exception (also raised by LiteLLM) as Transient (retry), AuthenticationError (401/403) or
    LMSetupError (404: wrong model or URL), which stop a run, or LMError (this request was refused)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        headers = getattr(exc.response, "headers", None)
        if status in _RETRY_STATUS or status >= 500:
            return Transient(f"HTTP {status}: {_short(exc.message)}", parse_retry_after(headers))
        if status in (401, 403):
            return AuthenticationError(f"{name}: HTTP {status}: {_short(exc.message)} (check the API key and the "
                                       f"access to this model)")
        if status == 404:
            return LMSetupError(f"{name}: HTTP 404: {_short(exc.message)} (check the model name and the base URL)")
        return LMError(f"{name}: HTTP {status}: {_short(exc.message)}")
    if isinstance(exc, openai.APITimeoutError):
        return Transient("the request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return Transient(f"connection failed: {_short(exc.__cause__ or exc)}")
    if isinstance(exc, openai.APIResponseValidationError):
        return Transient(f"malformed response body: {_short(exc)}")
    return LMError(f"{name}: {type(exc).__name__}: {_short(exc)}")


def _short(text: Any, n: int = 200) -> str:
    text = redact(str(text))
    return text if len(text) <= n else text[:n] + "..."


def _completion(resp: Any, messages: list[Message], name: str = "openai") -> Completion:
    """A Completion from a chat completion object; a body without choices counts as malformed, unless it is an
    error (a proxy's way to refuse a request with HTTP 200): a failed call, retried only when the error says so."""
    choices = getattr(resp, "choices", None)
    if not choices or getattr(choices[0], "message", None) is None:
        error = getattr(resp, "error", None) or (getattr(resp, "model_extra", None) or {}).get("error")
        if error:
            raise _error_in_body(error, name)
        raise Transient(f"malformed response body: no choices in {_short(resp)}")
    choice = choices[0]
    text = choice.message.content or ""
    finish = choice.finish_reason or "stop"
    if not text and getattr(choice.message, "tool_calls", None):
        finish = "tool_calls"  # (whatever the server says): ctx.lm explains what an answer of tool calls means
    usage = getattr(resp, "usage", None)
    if usage is not None and getattr(usage, "prompt_tokens", None) is not None:
        details = getattr(usage, "prompt_tokens_details", None)  # OpenAI and vLLM say what their prompt cache held
        cached = getattr(details, "cached_tokens", None) if details is not None else None
        u = Usage(int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0),
                  cached_input_tokens=int(cached or 0))
    else:
        u = estimated_usage(messages, text)
    return Completion(text, u, finish)


def _error_in_body(error: Any, name: str) -> Exception:
    """An `{"error": ...}` body answered with HTTP 200: Transient when its code says overload or a server fault,
    otherwise the request's failure (LMError: the rollout fails with the server's words)."""
    message, code = (error.get("message"), error.get("code") or error.get("type")) if isinstance(error, dict) \
        else (error, None)
    status = code if isinstance(code, int) else int(code) if isinstance(code, str) and code.isdigit() else None
    transient = (status is not None and (status in _RETRY_STATUS or status >= 500)) or (
        isinstance(code, str) and any(w in code.lower() for w in ("rate", "overload", "server", "timeout")))
    text = f"the endpoint answered HTTP 200 with an error{f' ({code})' if code is not None else ''}: " \
           f"{_short(message or error)}"
    return Transient(text) if transient else LMError(f"{name}: {text}")


def from_name(name: LMName) -> OpenAILM:
    """The LM a name `openai:...` stands for (the `openai` row of gepetto.lm.names.BACKENDS)."""
    return OpenAILM(name.model, base_url=name.base_url, **name.options)
