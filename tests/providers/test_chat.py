from __future__ import annotations

import socket
import time

import pytest

from memory.providers.chat import (
    OpenAIChatModel,
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
)
from tests.providers.conftest import Reply

MESSAGES = [{"role": "user", "content": "你好"}]


def make_model(fake, **kwargs) -> OpenAIChatModel:
    options = {"api_key": "sk-test", "timeout": 2.0, "max_retries": 2, "backoff": 0.01}
    options.update(kwargs)
    return OpenAIChatModel(fake.base_url, "test-model", **options)


def test_it_returns_the_first_choice_text_and_sends_an_openai_request(fake_openai):
    fake_openai.chat_reply = "你好呀"
    model = make_model(fake_openai)

    assert model.complete(MESSAGES, temperature=0.5, max_tokens=64) == "你好呀"

    (request,) = fake_openai.calls("/chat/completions")
    assert request.json == {"model": "test-model", "messages": MESSAGES, "temperature": 0.5, "max_tokens": 64}
    assert request.headers["authorization"] == "Bearer sk-test"
    assert model.label == "llm:test-model"


def test_it_sends_no_authorization_header_without_a_key(fake_openai):
    make_model(fake_openai, api_key="").complete(MESSAGES)

    assert "authorization" not in fake_openai.calls("/chat/completions")[0].headers


def test_malformed_json_body_is_a_bad_response(fake_openai):
    fake_openai.push("/chat/completions", Reply(body='{"choices": [ oops'))

    with pytest.raises(ProviderBadResponse):
        make_model(fake_openai).complete(MESSAGES)
    assert len(fake_openai.requests) == 1  # not retried


@pytest.mark.parametrize(
    "payload",
    [{"id": "x"}, {"choices": []}, {"choices": [{"message": {"content": None}}]}, ["not", "an", "object"]],
)
def test_missing_choices_is_a_bad_response(fake_openai, payload):
    fake_openai.push("/chat/completions", Reply(json=payload))

    with pytest.raises(ProviderBadResponse):
        make_model(fake_openai).complete(MESSAGES)


def test_a_slow_response_times_out_after_retries(fake_openai):
    fake_openai.push("/chat/completions", *[Reply(delay=1.0) for _ in range(3)])
    model = make_model(fake_openai, timeout=0.2, max_retries=1)

    started = time.monotonic()
    with pytest.raises(ProviderTimeout):
        model.complete(MESSAGES)

    assert time.monotonic() - started < 1.5
    assert len(fake_openai.calls("/chat/completions")) == 2


def test_a_timeout_is_retried_and_can_recover(fake_openai):
    fake_openai.push("/chat/completions", Reply(delay=1.0))
    fake_openai.chat_reply = "recovered"

    assert make_model(fake_openai, timeout=0.3).complete(MESSAGES) == "recovered"


def test_429_then_200_is_retried(fake_openai):
    fake_openai.push(
        "/chat/completions", Reply(429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
    )
    fake_openai.chat_reply = "after the limit"

    assert make_model(fake_openai).complete(MESSAGES) == "after the limit"
    assert len(fake_openai.calls("/chat/completions")) == 2


def test_a_long_retry_after_is_not_waited_for(fake_openai):
    fake_openai.push("/chat/completions", Reply(429, json={"error": {}}, headers={"Retry-After": "120"}))

    started = time.monotonic()
    with pytest.raises(ProviderRateLimited) as info:
        make_model(fake_openai).complete(MESSAGES)

    assert time.monotonic() - started < 1.0
    assert info.value.retry_after == 120.0
    assert info.value.status == 429
    assert len(fake_openai.requests) == 1


def test_persistent_429_raises_rate_limited_after_retries(fake_openai):
    fake_openai.push("/chat/completions", *[Reply(429, json={"error": {}}) for _ in range(3)])

    with pytest.raises(ProviderRateLimited):
        make_model(fake_openai, max_retries=2).complete(MESSAGES)
    assert len(fake_openai.requests) == 3


def test_500_then_200_is_retried(fake_openai):
    fake_openai.push("/chat/completions", Reply(500, body="upstream exploded"), Reply(503, json={}))
    fake_openai.chat_reply = "fine now"

    assert make_model(fake_openai).complete(MESSAGES) == "fine now"
    assert len(fake_openai.requests) == 3


def test_persistent_5xx_raises_provider_error_with_status(fake_openai):
    fake_openai.push("/chat/completions", *[Reply(502, body="bad gateway") for _ in range(2)])

    with pytest.raises(ProviderError) as info:
        make_model(fake_openai, max_retries=1).complete(MESSAGES)
    assert info.value.status == 502
    assert "bad gateway" in str(info.value)


def test_other_4xx_is_not_retried(fake_openai):
    fake_openai.push("/chat/completions", Reply(401, json={"error": {"message": "invalid api key"}}))

    with pytest.raises(ProviderError) as info:
        make_model(fake_openai).complete(MESSAGES)
    assert info.value.status == 401
    assert not isinstance(info.value, (ProviderRateLimited, ProviderBadResponse, ProviderTimeout))
    assert len(fake_openai.requests) == 1


def test_connection_refused_is_a_provider_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01, timeout=1.0)

    with pytest.raises(ProviderError):
        model.complete(MESSAGES)


def test_a_trailing_slash_in_the_base_url_is_harmless(fake_openai):
    OpenAIChatModel(fake_openai.base_url + "/", "m").complete(MESSAGES)

    assert fake_openai.requests[0].path == "/chat/completions"
