"""A real OpenAI-compatible HTTP server on 127.0.0.1 for the provider tests.

``fake_openai`` serves ``/v1/chat/completions`` and ``/v1/embeddings`` from a
thread of this process. By default it answers like a well-behaved provider
(deterministic embeddings, a configurable chat reply, 400 for more than 20
inputs per embeddings request); tests queue scripted replies with
``fake_openai.push(path, Reply(...))`` to make it misbehave.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

BATCH_ERROR = "batch size is invalid, it should not be larger than 20"


@dataclass
class Reply:
    status: int = 200
    json: Any = None
    body: str | None = None  # raw body, wins over json
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Request:
    path: str
    json: Any
    headers: dict[str, str]


def raw_vector(text: str, dim: int) -> np.ndarray:
    """The (unnormalised) vector the fake server returns for ``text``."""
    seed = int.from_bytes(hashlib.md5(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim) * 3.0


def unit(text: str, dim: int) -> np.ndarray:
    v = raw_vector(text, dim)
    return (v / np.linalg.norm(v)).astype(np.float32)


class FakeOpenAI:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reset(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            self.requests: list[Request] = []
            self.scripts: dict[str, deque] = {"/chat/completions": deque(), "/embeddings": deque()}
            self.chat_reply = '{"summary": "ok", "recall_cues": ["ok"]}'
            self.dim = 8
            self.max_batch = 20
            self.always_base64 = False
            self.shuffle = False

    def push(self, path: str, *replies: Reply | Callable[[Request], Reply]) -> None:
        self.scripts[path].extend(replies)

    def calls(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- default behaviour ---------------------------------------------------
    def _chat(self, request: Request) -> Reply:
        return Reply(
            json={
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "model": request.json.get("model"),
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": self.chat_reply}, "finish_reason": "stop"}
                ],
            }
        )

    def _embeddings(self, request: Request) -> Reply:
        texts = request.json.get("input")
        if isinstance(texts, str):
            texts = [texts]
        if len(texts) > self.max_batch:
            return Reply(400, json={"error": {"message": BATCH_ERROR, "type": "InvalidParameter"}})
        as_base64 = self.always_base64 or request.json.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = raw_vector(text, self.dim)
            if as_base64:
                embedding: Any = base64.b64encode(vector.astype("<f4").tobytes()).decode()
            else:
                embedding = vector.tolist()
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        if self.shuffle:
            random.Random(len(texts)).shuffle(data)
        return Reply(json={"object": "list", "data": data, "model": request.json.get("model")})

    def _handler_class(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw or b"null")
                except ValueError:
                    payload = None
                path = self.path.removeprefix("/v1")
                request = Request(path, payload, {k.lower(): v for k, v in self.headers.items()})
                with fake._lock:
                    fake.requests.append(request)
                    script = fake.scripts.get(path)
                    reply = script.popleft() if script else None
                if callable(reply):
                    reply = reply(request)
                if reply is None:
                    if path == "/chat/completions":
                        reply = fake._chat(request)
                    elif path == "/embeddings":
                        reply = fake._embeddings(request)
                    else:
                        reply = Reply(404, json={"error": {"message": "not found"}})
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body if reply.body is not None else json.dumps(reply.json, ensure_ascii=False)
                data = body.encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        return Handler
