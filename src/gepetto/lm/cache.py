"""Response cache in the run store's database (a SQLite file, or a PostgreSQL database given by URL): the same
model, messages and parameters give the stored answer, with no LM call.

Keyed by a sha256 of (model name, messages, parameters). Mode "auto" caches deterministic calls only
(temperature 0, which is every backend's default here); "always" caches sampled calls too (their `seed`
parameter is part of the key), which is what makes a resumed run replay its reflection exactly.
The table lives in the run store (its file, or its database) by default, so a run and its cache travel together,
and the machines that share a PostgreSQL store share its cache. An answer holding
anything shaped like a secret (gepetto.secrets) is not kept: stored redacted, it would come back to the program
redacted. Only the hash of the messages is kept, never the messages.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from gepetto.db import StoreError, open_database
from gepetto.lm.base import LM, Completion, Message, Usage
from gepetto.secrets import redact

_SCHEMA = """
CREATE TABLE IF NOT EXISTS lm_cache (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    finish_reason TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    estimated INTEGER NOT NULL,
    created REAL NOT NULL
)
"""
_PG_SCHEMA = _SCHEMA.replace("REAL", "DOUBLE PRECISION").replace("INTEGER", "BIGINT")


def cache_key(model: str, messages: Sequence[Message], params: dict[str, Any]) -> str:
    blob = json.dumps({"model": model, "messages": [dict(m) for m in messages], "params": params},
                      sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class CachedLM:
    """Wraps an LM with the response cache at `path` (a SQLite file, or a PostgreSQL URL). Errors are never
    cached. A store that cannot be opened raises StoreError."""

    def __init__(self, lm: LM, path: str | Path, mode: Literal["auto", "always"] = "auto") -> None:
        if mode not in ("auto", "always"):
            raise ValueError(f"cache mode must be 'auto' or 'always', got {mode!r}")
        self.lm, self.mode, self.name = lm, mode, lm.name
        self.hits = self.misses = 0
        self._warned = False
        self._lock = threading.Lock()
        self._db = open_database(path, timeout=30)
        self.path = self._db.where
        if self._db.dialect == "sqlite":
            self._db.execute(_SCHEMA)
            self._put = "INSERT OR REPLACE INTO lm_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        else:
            self._db.schema([_PG_SCHEMA])
            self._put = ("INSERT INTO lm_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                         + ", ".join(f"{c}=EXCLUDED.{c}" for c in ("model", "text", "finish_reason", "input_tokens",
                                                                    "output_tokens", "estimated", "created")))

    def close(self) -> None:
        self._db.close()

    def cacheable(self, params: dict[str, Any]) -> bool:
        return self.mode == "always" or float(params.get("temperature") or 0.0) == 0.0

    def get(self, key: str) -> Completion | None:
        try:
            with self._lock:
                row = self._db.execute("SELECT text, finish_reason, input_tokens, output_tokens, estimated "
                                       "FROM lm_cache WHERE key = ?", (key,)).fetchone()
        except StoreError as exc:  # a damaged file, a server away: a miss (the LM answers), never a failed rollout
            self._broken(exc)
            return None
        if row is None:
            return None
        return Completion(row[0], Usage(row[2], row[3], bool(row[4])), row[1], cached=True)

    def put(self, key: str, out: Completion) -> None:
        text = redact(out.text)
        if text != out.text:  # kept redacted, it would be replayed to the program redacted: not kept at all
            return
        try:
            with self._lock:
                self._db.execute(self._put, (key, redact(self.name), text, out.finish_reason, out.usage.input_tokens,
                                             out.usage.output_tokens, int(out.usage.estimated), time.time()))
        except StoreError as exc:  # a full disk or a damaged file: the answer is good, only not kept
            self._broken(exc)

    def _broken(self, exc: StoreError) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"the LM response cache {self.path} cannot be used ({exc}); calls go to the LM uncached",
                          stacklevel=3)

    async def complete(self, messages: Sequence[Message], **params: Any) -> Completion:
        if not self.cacheable(params):
            return await self.lm.complete(messages, **params)
        key = cache_key(self.name, messages, params)
        hit = self.get(key)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        out = await self.lm.complete(messages, **params)
        if out.finish_reason != "error":
            self.put(key, out)
        return out
