"""Build the configured providers from Django settings (read lazily, per call).

Settings (their defaults in ``config/settings.py``, read per call):

* ``LLM_BASE_URL``, ``LLM_MODEL``, ``LLM_API_KEY``, ``LLM_TIMEOUT`` — a chat
  model exists only when both the URL and the model are set; without one, the
  summariser and extractor are the offline heuristics.
* ``EMBEDDING_PROVIDER`` (``local`` | ``openai`` | ``none``), ``EMBEDDING_BASE_URL``,
  ``EMBEDDING_MODEL``, ``EMBEDDING_API_KEY``, ``EMBEDDING_DIM``,
  ``EMBEDDING_BATCH`` (≤ 20), ``EMBEDDING_THREADS``, ``EMBEDDING_TIMEOUT`` and
  ``EMBEDDING_RETRIES`` (the workers' calls), ``EMBEDDING_QUERY_TIMEOUT`` (a call made
  while serving a request: one attempt), ``EMBEDDING_DOWN_SECONDS`` (how long a failing
  remote provider is skipped, memory/providers/embeddings.py).

Instances are cached per configuration, so a process keeps one HTTP
connection pool per provider and a settings override yields a fresh object.
Every returned object has a ``label`` ("llm:<model>", "heuristic", …).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from django.conf import settings

from memory.providers import Embedder, Extractor, Summariser
from memory.providers.chat import OpenAIChatModel
from memory.providers.embeddings import clamp_batch, reset_breakers

logger = logging.getLogger(__name__)

__all__ = ["get_chat_model", "get_embedder", "get_extractor", "get_summariser", "preload_embedder", "reset_cache"]

_cache: dict[tuple, Any] = {}
_cache_lock = threading.Lock()


def embedding_batch() -> int:
    """Rows per embedding call: ``EMBEDDING_BATCH``, within the providers' limit."""
    return clamp_batch(settings.EMBEDDING_BATCH)


def _cached(key: tuple, build):
    with _cache_lock:
        if key not in _cache:
            _cache[key] = build()
        return _cache[key]


def reset_cache() -> None:
    """Forget built providers and the remote embedders' breakers (tests; a settings change is picked up anyway)."""
    reset_breakers()
    with _cache_lock:
        for obj in _cache.values():
            close = getattr(obj, "close", None)
            if callable(close):
                close()
        _cache.clear()


def _chat_key() -> tuple | None:
    base_url = settings.LLM_BASE_URL.strip()
    model = settings.LLM_MODEL.strip()
    if not base_url or not model:
        return None
    return ("chat", base_url, model, settings.LLM_API_KEY, settings.LLM_TIMEOUT)


def get_chat_model() -> OpenAIChatModel | None:
    """The configured chat model, or None when LLM_BASE_URL / LLM_MODEL are unset."""
    key = _chat_key()
    if key is None:
        return None
    _, base_url, model, api_key, timeout = key
    return _cached(key, lambda: OpenAIChatModel(base_url, model, api_key=api_key, timeout=timeout))


def get_embedder(*, serving: bool = False) -> Embedder | None:
    """OpenAIEmbedder when EMBEDDING_BASE_URL is set, else the local USE model; None for 'none'.

    ``serving``: for a call made while a request waits (a turn's confirm, a search): a remote
    provider gets one attempt of ``EMBEDDING_QUERY_TIMEOUT`` seconds (2) instead of the
    workers' ``EMBEDDING_RETRIES`` (3) retries of ``EMBEDDING_TIMEOUT`` (30); a failure leaves
    the lexical order. Both skip a provider that failed within ``EMBEDDING_DOWN_SECONDS`` (30).
    """
    provider = settings.EMBEDDING_PROVIDER.strip().lower() or "local"
    if provider == "none":
        return None
    base_url = settings.EMBEDDING_BASE_URL.strip()
    if base_url:
        model = settings.EMBEDDING_MODEL.strip()
        if not model:
            logger.error("embedding_misconfigured reason=EMBEDDING_MODEL is empty base_url=%s", base_url)
            return None
        api_key = settings.EMBEDDING_API_KEY
        dim = settings.EMBEDDING_DIM
        batch = embedding_batch()
        if serving:
            timeout, retries = settings.EMBEDDING_QUERY_TIMEOUT, 0
        else:
            timeout, retries = settings.EMBEDDING_TIMEOUT, settings.EMBEDDING_RETRIES
        down = settings.EMBEDDING_DOWN_SECONDS

        def build_remote():
            from memory.providers.embeddings import OpenAIEmbedder  # only the configured provider's module loads

            return OpenAIEmbedder(base_url, model, api_key=api_key, dim=dim, batch=batch, timeout=timeout,
                                  max_retries=retries, down_seconds=down)

        return _cached(("embed-openai", base_url, model, api_key, dim, batch, timeout, retries, down), build_remote)
    if provider == "openai":
        logger.error("embedding_misconfigured reason=EMBEDDING_PROVIDER=openai without EMBEDDING_BASE_URL")
        return None
    threads = settings.EMBEDDING_THREADS

    def build_local():
        from memory.providers.local import LocalUSEEmbedder  # ONNX runtime and the USE model: only when configured

        return LocalUSEEmbedder(threads=threads)

    return _cached(("embed-local", threads), build_local)


def _dialogue_provider(role: str, heuristic: str, llm: str) -> Any:
    """The class ``llm`` of :mod:`memory.providers.llm` over the configured chat model, else ``heuristic``."""
    key = _chat_key()
    if key is None:
        from memory.providers import heuristic as rules  # jieba's analyser: only when it is the provider

        return _cached((role, "heuristic"), getattr(rules, heuristic))
    from memory.providers import llm as model  # only the configured provider's module loads

    chat = get_chat_model()
    provider = getattr(model, llm)
    return _cached((role, *key), lambda: provider(chat))


def get_summariser() -> Summariser:
    """LLMSummariser over the configured chat model, else HeuristicSummariser."""
    return _dialogue_provider("summariser", "HeuristicSummariser", "LLMSummariser")


def get_extractor() -> Extractor:
    """LLMExtractor over the configured chat model, else HeuristicExtractor."""
    return _dialogue_provider("extractor", "HeuristicExtractor", "LLMExtractor")


def preload_embedder() -> float | None:
    """Load the configured local embedding model now, at process start; returns the load time in ms.

    Called by the Celery worker before its pool forks (config/celery.py) and by
    each gunicorn worker after it loads the app (config/gunicorn.py), so no
    request or task pays the 1–2 s load. A remote or disabled embedder needs no
    loading (None); a model already loaded in this process (inherited through
    fork) is not loaded again. Never raises: a broken model logs and the first
    embed call tries again.
    """
    embedder = get_embedder()
    threads = getattr(embedder, "threads", None)
    if embedder is None or threads is None:
        return None
    from memory.providers import local  # ONNX runtime and the USE model: only for a local embedder

    try:
        started = time.perf_counter()
        local.load_model(threads)
        elapsed = (time.perf_counter() - started) * 1000
    except Exception:  # noqa: BLE001 — preloading is an optimisation; the first embed retries
        logger.exception("embedder_preload_failed label=%s", embedder.label)
        return None
    logger.info("embedder_preloaded label=%s load_ms=%.0f pid=%d", embedder.label, elapsed, os.getpid())
    return elapsed
