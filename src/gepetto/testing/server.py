"""A small OpenAI-compatible chat server on loopback, for tests and benchmarks of the HTTP backends.

It answers `POST /v1/chat/completions` after a fixed delay, from a responder function, many requests at once
(one thread each), and can inject faults per model: queued in `faults[model]` and used one per request, e.g.
`["429:2", "500", "reset", "malformed", "empty", "slow:5", "no_choices", "400"]` ("429:2" sends Retry-After: 2;
"401:some text" answers 401 with that error message; "empty" is a 200 with an empty body), or at random:
`random_faults(model, rate)` makes a share `rate` of that model's requests fail with one of `FAULT_KINDS`.
The random draw of a request depends only on the seed, the request's body and how many times that body was
sent before (a retry draws anew), not on timing, so a deterministic client meets the same faults on every run.
Every fault sent is counted in `injected[(model, kind)]`. The headers of every request are kept in `headers`.
`hold(n)` makes it hold requests until `n` are in flight at once: concurrency tested without timing.
It stands in for a hosted API; it is not a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[list[dict[str, str]], dict[str, Any]], str]

# what a flaky hosted API does: rate limits (with Retry-After), server errors, answers too late for the client's
# timeout, dropped connections, and 200 answers whose body is empty or not JSON
FAULT_KINDS = ("429", "500", "timeout", "reset", "empty", "malformed")


@dataclass(frozen=True)
class RandomFaults:
    """A share `rate` of a model's requests fail, each with a kind drawn from `kinds` (seeded by `seed`).
    `retry_after` is the Retry-After a 429 sends; a "timeout" answers after `timeout_delay` seconds (set it
    above the client's timeout)."""

    rate: float
    kinds: Sequence[str] = FAULT_KINDS
    seed: int = 0
    retry_after: str = "1"
    timeout_delay: float = 5.0


def echo(messages: list[dict[str, str]], body: dict[str, Any]) -> str:
    return f"echo: {messages[-1].get('content', '')}" if messages else "echo"


def sim_responder(task: str = "sim:task", reflection: str = "sim:reflection") -> Responder:
    """The simulated LMs (gepetto.testing.sim) behind HTTP: a model name containing "reflection" gets `reflection`."""
    from gepetto.lm.names import make_lm

    lms = {"task": make_lm(task), "reflection": make_lm(reflection)}

    def respond(messages: list[dict[str, str]], body: dict[str, Any]) -> str:
        lm = lms["reflection" if "reflection" in body.get("model", "") else "task"]
        params = {k: v for k, v in body.items() if k not in ("model", "messages")}
        return asyncio.run(lm.complete(messages, **params)).text

    return respond


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a burst of concurrent clients: the default backlog (5) refuses some connections

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (it timed out, or closed a kept-alive connection) is no server error."""
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FakeOpenAIServer:
    def __init__(self, responder: Responder = echo, *, delay: float = 0.0, usage: bool = True,
                 cached_tokens: int | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.responder, self.delay, self.usage = responder, delay, usage
        self.cached_tokens = cached_tokens  # reported as OpenAI does: usage.prompt_tokens_details.cached_tokens
        self.faults: dict[str, list[str]] = {}
        self.random: dict[str, RandomFaults] = {}
        self.injected: Counter[tuple[str, str]] = Counter()
        self._seen: Counter[str] = Counter()  # request body digest -> times received
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = self.max_in_flight = 0
        self.hold_timeouts = 0  # requests `hold` let go after its timeout, not because `n` were in flight
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._hold: tuple[int, float] | None = None
        self._held = 0
        self._httpd = _Server((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}/v1"

    def start(self) -> FakeOpenAIServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def random_faults(self, model: str, rate: float, **options: Any) -> FakeOpenAIServer:
        """Make a share `rate` of `model`'s requests fail at random (see `RandomFaults`); rate 0 turns it off."""
        if rate:
            self.random[model] = RandomFaults(rate, **options)
        else:
            self.random.pop(model, None)
        return self

    def hold(self, n: int, timeout: float = 60.0) -> FakeOpenAIServer:
        """Hold each request until `n` requests have arrived (then all are answered, and later ones at once): the
        first `n` are in flight together. A client that never has `n` requests out at once is not refused: its
        requests are let go after `timeout` seconds and counted in `hold_timeouts`. A test of concurrency then
        depends on what the client does, not on how fast the machine is."""
        with self._lock:
            self._hold, self._held = (n, timeout), 0
        return self

    def _wait_for_others(self) -> None:
        with self._arrived:
            if self._hold is None:
                return
            n, timeout = self._hold
            self._held += 1
            self._arrived.notify_all()
            if not self._arrived.wait_for(lambda: self._held >= n, timeout):
                self.hold_timeouts += 1

    def _next_fault(self, body: dict[str, Any]) -> str:
        model = body.get("model", "")
        with self._lock:
            queue = self.faults.get(model)
            fault = queue.pop(0) if queue else ""
            label = fault.partition(":")[0]
            spec = self.random.get(model)
            if not fault and spec is not None:
                digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
                nth = self._seen[digest]
                self._seen[digest] += 1
                rng = random.Random(f"{spec.seed}:{digest}:{nth}")
                if rng.random() < spec.rate:
                    label = rng.choice(list(spec.kinds))
                    fault = {"429": f"429:{spec.retry_after}", "timeout": f"slow:{spec.timeout_delay:g}"}.get(label,
                                                                                                             label)
            if fault:
                self.injected[(model, label)] += 1
            return fault

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers.items()))
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    server._wait_for_others()
                    self._answer(body)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, body: dict[str, Any]) -> None:
                fault = server._next_fault(body)
                kind, _, arg = fault.partition(":")
                if server.delay:
                    time.sleep(server.delay)
                if kind == "429":
                    err = {"error": {"message": "rate limited", "type": "rate_limit"}}
                    self._send(429, json.dumps(err).encode(), {"Retry-After": arg or "0"})
                elif kind in ("500", "503", "400", "401", "403", "404"):
                    self._send(int(kind), json.dumps({"error": {"message": arg or f"fault {kind}"}}).encode())
                elif kind == "reset":
                    self.close_connection = True
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.connection.close()
                elif kind == "malformed":
                    self._send(200, b'{"id": "x", "choices": [ this is not json')
                elif kind == "empty":
                    self._send(200, b"")
                elif kind == "no_choices":
                    self._send(200, json.dumps({"id": "x", "object": "chat.completion", "choices": []}).encode())
                else:
                    if kind == "slow":
                        time.sleep(float(arg or 5))
                    messages = body.get("messages", [])
                    text = server.responder(messages, body)
                    payload: dict[str, Any] = {
                        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                        "model": body.get("model", ""),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                     "finish_reason": "stop"}],
                    }
                    if server.usage:
                        n_in = sum(len(m.get("content", "")) for m in messages) // 4 + 1
                        payload["usage"] = {"prompt_tokens": n_in, "completion_tokens": len(text) // 4 + 1,
                                            "total_tokens": n_in + len(text) // 4 + 1}
                        if server.cached_tokens is not None:
                            payload["usage"]["prompt_tokens_details"] = {
                                "cached_tokens": min(server.cached_tokens, n_in)}
                    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
                        self._send(200, json.dumps(payload).encode())

        return Handler
