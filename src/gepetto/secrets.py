"""Keep secrets out of everything gepetto writes or shows: one `redact(text)` for all of it.

Provider error texts, LM outputs and user exceptions can carry an API key (a proxy echoing the header, a
misconfigured server, a key pasted into a prompt). They become rollout feedback, which is stored, shown to
the reflection LM, printed and put in reports, so they pass through `redact` first. It removes the values
of the key variables in use (OPENAI_API_KEY, every `*_API_KEY` / `*_TOKEN` / `*_SECRET` variable in the
environment with a value of at least 8 characters, and the variables named with `api_key_env`) and text
shaped like a key (`sk-...`, `Bearer ...`, `hf_...`, `AKIA...`, long tokens after `key=` or `token=`, the
password in a URL's `user:password@`, the value of an `Authorization:` header, and `Basic <base64 of
user:password>`, the form in which a URL's password is sent).

Redaction applies to what gepetto writes or shows, never to what a program receives: a task LM's answer reaches
the program as the model said it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Any

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8

_named: set[str] = {"OPENAI_API_KEY"}
_SECRET_VAR = re.compile(r"(?:_API_KEY|_TOKEN|_SECRET)$", re.I)

_SHAPES = re.compile("|".join([
    r"\bsk-[A-Za-z0-9][A-Za-z0-9_\-]{15,}",  # OpenAI, Anthropic (sk-ant-...), DeepSeek, ...
    r"\b[Bb][Ee][Aa][Rr][Ee][Rr]\s+[A-Za-z0-9._~+/\-]{8,}=*",
    r"\bhf_[A-Za-z0-9]{16,}",  # Hugging Face
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\b(?:ghp|gho|ghu|ghs|ghr|github_pat)_[A-Za-z0-9_]{20,}",  # GitHub
    r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack
    r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google
]))
# an HTTP Authorization header's value ("Authorization: Basic YWxp...", "authorization=Token ..."): the whole value
_AUTH_HEADER = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?\s*)"
                          r"((?:basic|bearer|token|digest|negotiate)\s+[A-Za-z0-9._~+/\-]{6,}=*|[A-Za-z0-9._~+/\-]{16,}=*)")
# "Basic <base64 of user:password>" anywhere (an error body echoing the header)
_BASIC = re.compile(r"\b([Bb][Aa][Ss][Ii][Cc]\s+)([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
_SHAPE_TRIGGERS = ("sk-", "bearer", "hf_", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "xox",
                   "aiza")
_ASSIGN_TRIGGERS = ("key", "token", "secret", "passw", "auth")
# scheme://user:password@host -> keep the scheme, the user and the host, drop the password
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s/:@]*:)([^\s/@]+)@")
# key=..., token: "...", "api_key": "..." -> keep the name, drop a long value (16+ characters with a digit, or hex)
_ASSIGNED = re.compile(
    r"""(?ix)
    ( (?:key|token|secret|password|passwd|auth)\b ["']? \s* [=:] \s* ["']? )
    ( (?=[A-Za-z_\-./+]*\d) [A-Za-z0-9_\-./+]{16,}=*  # a long run with a digit: not a word of prose
    | [0-9a-fA-F]{16,}\b )                               # or a long hex run
    """
)


def register_secret_env(name: str) -> None:
    """Treat the value of environment variable `name` as a secret (e.g. one named with `api_key_env`)."""
    _named.add(name)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values in use right now, longest first (so a key is removed before any part of it)."""
    env = os.environ if environ is None else environ
    values = {env.get(n, "") for n in _named}
    values.update(v for k, v in env.items() if _SECRET_VAR.search(k))
    return sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)


_cache: tuple[Any, re.Pattern[str] | None] | None = None


def _values_pattern() -> re.Pattern[str] | None:
    """One regex for the secret values in use, rebuilt only when the environment (or the named set) changes."""
    global _cache
    data = getattr(os.environ, "_data", None)  # CPython's dict behind os.environ: hashing it is cheap
    key = (hash(frozenset(data.items())), len(_named)) if isinstance(data, dict) else None
    if key is not None and _cache is not None and _cache[0] == key:
        return _cache[1]
    forms: set[str] = set()
    for value in secret_values():
        forms.add(value)
        forms.add(json.dumps(value)[1:-1])  # as it appears inside JSON text
    pattern = re.compile("|".join(re.escape(v) for v in sorted(forms, key=len, reverse=True))) if forms else None
    _cache = (key, pattern)
    return pattern


class _Redactor:
    """Redaction with the secret values in use read once, for one text or a whole structure."""

    def __init__(self) -> None:
        self.values = _values_pattern()

    def __call__(self, text: str) -> str:
        if not isinstance(text, str):
            text = str(text)
        if not text:
            return text
        if self.values is not None:
            text = self.values.sub(REDACTED, text)
        lower = text.lower()  # cheap tests first: the regexes are slow on long texts without any trigger
        if any(t in lower for t in _SHAPE_TRIGGERS):
            text = _SHAPES.sub(REDACTED, text)
        if any(t in lower for t in _ASSIGN_TRIGGERS):
            text = _ASSIGNED.sub(lambda m: m.group(1) + REDACTED, text)
        if "://" in text:
            text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
        if "authorization" in lower:
            text = _AUTH_HEADER.sub(lambda m: m.group(1) + REDACTED, text)
        if "basic" in lower:
            text = _BASIC.sub(lambda m: m.group(1) + REDACTED if _credentials(m.group(2)) else m.group(0), text)
        return text

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, Mapping):
            return {k: self.data(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.data(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.data(v) for v in value)
        return value


def _credentials(b64: str) -> bool:
    """Whether `b64` is the base64 of "user:password" (what HTTP Basic authentication sends)."""
    import base64
    import binascii

    try:
        decoded = base64.b64decode(b64 + "=" * (-len(b64) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return False
    return ":" in decoded and decoded.isprintable()


def redact(text: str) -> str:
    """`text` without the secret values in use and without anything shaped like a key."""
    return _Redactor()(text)


def redact_data(value: Any) -> Any:
    """A copy of plain data (dicts, lists, tuples, strings) with every string redacted; other objects as is."""
    return _Redactor().data(value)


def redact_exception(exc: BaseException) -> BaseException:
    """`exc` itself when its text holds no secret; otherwise an exception of the same class name whose text is
    redacted (raise it `from None` so the original, with the secret, is not chained into tracebacks)."""
    text = str(exc)
    clean = redact(text)
    if clean == text:
        return exc
    try:
        new = type(exc)(clean)
        if str(new) == clean:
            if hasattr(exc, "attempts"):
                new.attempts = exc.attempts  # type: ignore[attr-defined]
            return new
    except Exception:
        pass
    return type(type(exc).__name__, (RuntimeError,), {})(clean)


def create_private_file(path: str | os.PathLike[str]) -> None:
    """Create `path` empty and readable by its owner only (0600) if it does not exist; leave an existing file."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def write_private_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path` readable by its owner only (0600), all or nothing: into a temporary file
    beside it, then renamed over it, so a failed write (a full disk) leaves the previous file as it was. A symlink
    is written through (its target replaced); a path that is there and no regular file (a FIFO, a device, a
    directory) is refused with an OSError, never replaced by a file."""
    import stat

    target = os.path.realpath(os.fspath(path))
    with contextlib.suppress(FileNotFoundError):
        mode = os.stat(target).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else
                    "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "not a regular file")
            raise OSError(f"{os.fspath(path)} is {kind}: give the path of a file")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target) or ".", prefix=f".{os.path.basename(target)}.",
                               suffix=".tmp")  # (mkstemp creates it 0600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["REDACTED", "create_private_file", "redact", "redact_data", "redact_exception", "register_secret_env",
           "secret_values", "write_private_text"]
