"""Embedders: texts in, position-aligned float32 unit vectors (or None) out.

The contract every :class:`~memory.providers.Embedder` keeps (docs/REFERENCE.md §5):

* ``embed(texts)`` returns one entry per input, in input order;
* an entry is a float32, L2-normalised vector of length ``dim``, or ``None``
  when that text could not be embedded (its HTTP batch failed, or the text is
  blank) — provider failures are logged, never raised;
* at most ``MAX_BATCH`` (20) texts go into one request: that is a hard limit
  of common providers ("batch size is invalid, it should not be larger than
  20"), and a bigger configured batch is clamped with a warning.

A remote provider that times out, refuses connections, answers 5xx or keeps
answering 429 is skipped for ``down_seconds`` by every :class:`OpenAIEmbedder`
of the process that talks to the same URL (a breaker, as memory/broker.py has
for Redis): their ``embed`` returns ``None`` at once instead of waiting on it
again, so a hung provider costs one request's timeout per period, not every
turn's, and a backfill stops after its first failed batch. A 4xx or a bad body
is the request's fault, not the provider's state: it does not open the breaker.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.providers import Embedder
from memory.providers.chat import JSONClient, ProviderBadResponse, ProviderError, ProviderRateLimited, ProviderTimeout

logger = logging.getLogger(__name__)

__all__ = ["MAX_BATCH", "Embedder", "OpenAIEmbedder", "clamp_batch", "embed_one", "normalise"]

MAX_BATCH = 20

_down_until: dict[str, float] = {}  # base URL → monotonic time until which it is skipped


def _provider_down(exc: ProviderError) -> bool:
    """Whether ``exc`` says the provider is unreachable or failing (not that the request was bad)."""
    if isinstance(exc, (ProviderTimeout, ProviderRateLimited)):
        return True
    return not isinstance(exc, ProviderBadResponse) and (exc.status is None or exc.status >= 500)


def reset_breakers() -> None:
    """Forget every opened breaker (tests)."""
    _down_until.clear()


def embed_one(embedder: Embedder, text: str) -> np.ndarray | None:
    return embedder.embed([text])[0]


def clamp_batch(batch: int) -> int:
    batch = int(batch)
    if batch > MAX_BATCH:
        logger.warning("embedding_batch_clamped configured=%d limit=%d", batch, MAX_BATCH)
        return MAX_BATCH
    return max(1, batch)


def normalise(vector: Any, dim: int) -> np.ndarray:
    """Return ``vector`` as a float32 unit vector, or raise ValueError.

    Scales by max|v| before taking the norm so that very large or very small
    components neither overflow nor underflow.
    """
    v = np.asarray(vector, dtype=np.float64)
    if v.ndim != 1 or v.shape[0] != dim:
        raise ValueError(f"dimension {v.shape} != ({dim},)")
    if not np.all(np.isfinite(v)):
        raise ValueError("non-finite component")
    peak = float(np.max(np.abs(v))) if v.size else 0.0
    if peak == 0.0:
        raise ValueError("zero vector")
    v = v / peak
    v = v / float(np.linalg.norm(v))
    return v.astype(np.float32)


def _decode_embedding(raw: Any) -> np.ndarray:
    if isinstance(raw, str):  # encoding_format="base64": little-endian float32
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("bad base64 embedding") from exc
        if len(data) % 4:
            raise ValueError("base64 embedding is not a whole number of float32s")
        return np.frombuffer(data, dtype="<f4")
    if isinstance(raw, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in raw):
        return np.asarray(raw, dtype=np.float64)
    raise ValueError(f"embedding is {type(raw).__name__}, not a list of numbers or base64")


def parse_embeddings_response(body: Any, count: int, dim: int) -> list[np.ndarray]:
    """Validate a ``/embeddings`` body for ``count`` inputs; any bad item fails it all."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise ProviderBadResponse("embeddings response has no data list")
    data = body["data"]
    if len(data) != count:
        raise ProviderBadResponse(f"embeddings response has {len(data)} items for {count} inputs")
    by_index: dict[int, np.ndarray] = {}
    for position, item in enumerate(data):
        if not isinstance(item, dict):
            raise ProviderBadResponse("embeddings item is not an object")
        index = item.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in by_index:
            raise ProviderBadResponse(f"embeddings item has bad index {index!r}")
        try:
            by_index[index] = normalise(_decode_embedding(item.get("embedding")), dim)
        except ValueError as exc:
            raise ProviderBadResponse(f"embeddings item {index}: {exc}") from exc
    return [by_index[i] for i in range(count)]


class OpenAIEmbedder:
    """``Embedder`` for an OpenAI-compatible ``POST {base_url}/embeddings``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        dim: int = 1024,
        batch: int = MAX_BATCH,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        encoding_format: str | None = None,
        down_seconds: float = 0.0,
    ) -> None:
        self.name = model
        self.down_seconds = max(0.0, float(down_seconds))  # the breaker's period (0: no breaker)
        self.label = f"openai:{model}"
        self.dim = int(dim)
        self.batch = clamp_batch(batch)
        # None leaves the parameter out: some compatible servers reject it.
        self.encoding_format = encoding_format
        self._http = JSONClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries, backoff=backoff)

    def close(self) -> None:
        self._http.close()

    def _embed_batch(self, texts: list[str]) -> list[np.ndarray]:
        payload: dict[str, Any] = {"model": self.name, "input": texts}
        if self.encoding_format:
            payload["encoding_format"] = self.encoding_format
        body = self._http.post("/embeddings", payload)
        return parse_embeddings_response(body, len(texts), self.dim)

    def is_down(self) -> bool:
        """True while a recent failure of this URL keeps the process from asking it again (never
        without a breaker, ``down_seconds`` 0)."""
        return bool(self.down_seconds) and time.monotonic() < _down_until.get(self._http.base_url, 0.0)

    def _mark_down(self, exc: ProviderError) -> None:
        was_down = self.is_down()
        _down_until[self._http.base_url] = time.monotonic() + self.down_seconds
        if not was_down:
            logger.warning("embedder_unavailable url=%s error=%s: skipping it for %.0f s",
                           self._http.base_url, exc, self.down_seconds)

    def embed(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = [None] * len(texts)
        # Blank texts are never sent: providers reject empty input, and a
        # vector of nothing would only add noise to retrieval.
        positions = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        for start in range(0, len(positions), self.batch):
            chunk = positions[start : start + self.batch]
            if self.is_down():
                logger.info("embed_skipped model=%s size=%d: the provider is marked down", self.name, len(positions) - start)
                break
            try:
                vectors = self._embed_batch([texts[i] for i in chunk])
            except ProviderError as exc:
                logger.warning(
                    "embed_batch_failed model=%s size=%d first=%d error=%s", self.name, len(chunk), chunk[0], exc
                )
                if self.down_seconds and _provider_down(exc):
                    self._mark_down(exc)
                continue
            for i, vector in zip(chunk, vectors, strict=True):
                out[i] = vector
        return out

    def embed_one(self, text: str) -> np.ndarray | None:
        return self.embed([text])[0]

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self._http.base_url!r}, {self.name!r}, dim={self.dim})"
