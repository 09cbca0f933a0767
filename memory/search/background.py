"""The vectors of the relevance gate's background bank (:mod:`memory.engine.background`).

The bank's lines are embedded once per process and embedding model (the configured serving
embedder), at worker start (``config/gunicorn.py``) or at the first turn that needs them. A
failed embedding is retried after :data:`RETRY_SECONDS`; meanwhile the gate has no dense
background (a candidate's ``margin`` is unknown and only the relative parts of the gate apply).
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from memory.engine.background import BANK
from memory.providers import config as provider_config

logger = logging.getLogger(__name__)

RETRY_SECONDS = 60.0

_vectors: dict[str, np.ndarray] = {}
_failed: dict[str, float] = {}
_lock = threading.Lock()


def bank_vectors() -> np.ndarray | None:
    """The bank as unit row vectors of the serving embedder; ``None`` without an embedder (or while
    its last attempt failed less than :data:`RETRY_SECONDS` ago)."""
    embedder = provider_config.get_embedder(serving=True)
    if embedder is None:
        return None
    label = embedder.label
    found = _vectors.get(label)
    if found is not None:
        return found
    with _lock:
        found = _vectors.get(label)
        if found is not None or time.monotonic() - _failed.get(label, -RETRY_SECONDS) < RETRY_SECONDS:
            return found
        try:
            rows = embedder.embed(list(BANK))
            if any(r is None for r in rows):
                raise ValueError("the embedder returned no vector for a bank line")
            matrix = np.vstack([np.asarray(r, dtype=np.float32).ravel() for r in rows])
            matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
        except Exception:  # noqa: BLE001 — the gate then judges without a dense background
            _failed[label] = time.monotonic()
            logger.warning("background_bank_embedding_failed label=%s", label, exc_info=True)
            return None
        _vectors[label] = matrix
        return matrix


def reset() -> None:
    """Forget the embedded bank (tests; a change of embedding model needs nothing: vectors are per model)."""
    with _lock:
        _vectors.clear()
        _failed.clear()
