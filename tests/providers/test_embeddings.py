from __future__ import annotations

import base64
import logging
import socket
import time

import numpy as np
import pytest

from memory.providers.embeddings import MAX_BATCH, OpenAIEmbedder, embed_one, normalise
from tests.providers.conftest import BATCH_ERROR, Reply, unit


def make_embedder(fake, **kwargs) -> OpenAIEmbedder:
    options = {"api_key": "sk-emb", "dim": fake.dim, "timeout": 2.0, "max_retries": 2, "backoff": 0.01}
    options.update(kwargs)
    return OpenAIEmbedder(fake.base_url, "test-embed", **options)


def texts(n: int) -> list[str]:
    return [f"第{i}条记忆：今天吃了{i}碗面" for i in range(n)]


def assert_unit_float32(vector, dim):
    assert vector is not None
    assert vector.dtype == np.float32 and vector.shape == (dim,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_it_embeds_position_aligned_unit_vectors(fake_openai):
    inputs = texts(3)

    vectors = make_embedder(fake_openai).embed(inputs)

    for text, vector in zip(inputs, vectors, strict=True):
        assert_unit_float32(vector, fake_openai.dim)
        np.testing.assert_allclose(vector, unit(text, fake_openai.dim), atol=1e-6)
    (request,) = fake_openai.calls("/embeddings")
    assert request.json == {"model": "test-embed", "input": inputs}
    assert request.headers["authorization"] == "Bearer sk-emb"


def test_the_client_never_sends_more_than_20_inputs(fake_openai, caplog):
    inputs = texts(45)

    with caplog.at_level(logging.WARNING, logger="memory.providers.embeddings"):
        embedder = make_embedder(fake_openai, batch=50)
    vectors = embedder.embed(inputs)

    assert embedder.batch == MAX_BATCH
    assert "embedding_batch_clamped" in caplog.text
    sizes = [len(r.json["input"]) for r in fake_openai.calls("/embeddings")]
    assert sizes == [20, 20, 5]
    assert all(v is not None for v in vectors)
    np.testing.assert_allclose(vectors[44], unit(inputs[44], fake_openai.dim), atol=1e-6)


def test_the_fake_provider_really_rejects_21_inputs(fake_openai):
    """Guards the test above: the server would have failed an oversized batch."""
    import httpx

    response = httpx.post(fake_openai.base_url + "/embeddings", json={"model": "m", "input": texts(21)})

    assert response.status_code == 400
    assert response.json()["error"]["message"] == BATCH_ERROR


def test_a_smaller_configured_batch_is_kept(fake_openai):
    make_embedder(fake_openai, batch=7).embed(texts(15))

    assert [len(r.json["input"]) for r in fake_openai.calls("/embeddings")] == [7, 7, 1]


def test_a_failing_batch_leaves_none_only_at_its_positions(fake_openai, caplog):
    fake_openai.push("/embeddings", Reply(400, json={"error": {"message": BATCH_ERROR}}))
    inputs = texts(25)

    with caplog.at_level(logging.WARNING, logger="memory.providers.embeddings"):
        vectors = make_embedder(fake_openai).embed(inputs)

    assert vectors[:20] == [None] * 20
    assert all(v is not None for v in vectors[20:])
    assert "embed_batch_failed" in caplog.text


def test_provider_failures_never_raise(fake_openai):
    fake_openai.push("/embeddings", *[Reply(500, body="boom") for _ in range(3)])

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


def test_500_then_200_is_retried(fake_openai):
    fake_openai.push("/embeddings", Reply(500, body="boom"))

    vectors = make_embedder(fake_openai).embed(texts(2))

    assert all(v is not None for v in vectors)
    assert len(fake_openai.calls("/embeddings")) == 2


def test_429_then_200_is_retried(fake_openai):
    fake_openai.push("/embeddings", Reply(429, json={"error": {}}, headers={"Retry-After": "0"}))

    assert all(v is not None for v in make_embedder(fake_openai).embed(texts(2)))
    assert len(fake_openai.calls("/embeddings")) == 2


def test_a_slow_batch_times_out_to_none(fake_openai):
    fake_openai.push("/embeddings", Reply(delay=1.0), Reply(delay=1.0))

    vectors = make_embedder(fake_openai, timeout=0.2, max_retries=1).embed(texts(2))

    assert vectors == [None, None]


def test_wrong_dimension_fails_the_whole_batch(fake_openai):
    vectors = make_embedder(fake_openai, dim=fake_openai.dim * 2).embed(texts(3))

    assert vectors == [None, None, None]


def one_bad_item(bad):
    def reply(request):
        data = [{"index": i, "embedding": [0.5] * 8} for i in range(len(request.json["input"]))]
        data[1]["embedding"] = bad
        return Reply(json={"data": data})

    return reply


@pytest.mark.parametrize(
    "bad", [[0.0] * 8, [0.5] * 7 + [float("nan")], [0.5] * 7 + [float("inf")], "not base64!!", None, [0.5] * 7 + ["x"]]
)
def test_one_invalid_item_fails_the_whole_batch(fake_openai, bad):
    fake_openai.push("/embeddings", one_bad_item(bad))

    assert make_embedder(fake_openai).embed(texts(3)) == [None, None, None]


def test_non_finite_numbers_in_the_raw_body_fail_the_batch(fake_openai):
    body = '{"data": [{"index": 0, "embedding": [NaN, 1, 1, 1, 1, 1, 1, 1]}, {"index": 1, "embedding": [1e400, 1, 1, 1, 1, 1, 1, 1]}]}'
    fake_openai.push("/embeddings", Reply(body=body))

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


def test_a_count_mismatch_fails_the_batch(fake_openai):
    fake_openai.push("/embeddings", Reply(json={"data": [{"index": 0, "embedding": [1.0] * 8}]}))

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


@pytest.mark.parametrize("indexes", [[0, 0], [0, 5], [0, "1"]])
def test_bad_indexes_fail_the_batch(fake_openai, indexes):
    fake_openai.push("/embeddings", Reply(json={"data": [{"index": i, "embedding": [1.0] * 8} for i in indexes]}))

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


def test_malformed_json_fails_the_batch(fake_openai):
    fake_openai.push("/embeddings", Reply(body="<html>gateway</html>"))

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


def test_results_are_sorted_by_index(fake_openai):
    fake_openai.shuffle = True
    inputs = texts(12)

    vectors = make_embedder(fake_openai).embed(inputs)

    for text, vector in zip(inputs, vectors, strict=True):
        np.testing.assert_allclose(vector, unit(text, fake_openai.dim), atol=1e-6)


def test_reversed_index_order_is_realigned(fake_openai):
    def reversed_reply(request):
        items = request.json["input"]
        return Reply(
            json={
                "data": [
                    {"index": i, "embedding": [1.0 if j == i else 0.0 for j in range(8)]}
                    for i in reversed(range(len(items)))
                ]
            }
        )

    fake_openai.push("/embeddings", reversed_reply)

    vectors = make_embedder(fake_openai).embed(texts(3))

    assert [int(np.argmax(v)) for v in vectors] == [0, 1, 2]


def test_base64_encoding_is_requested_and_decoded(fake_openai):
    inputs = texts(3)

    vectors = make_embedder(fake_openai, encoding_format="base64").embed(inputs)

    assert fake_openai.calls("/embeddings")[0].json["encoding_format"] == "base64"
    for text, vector in zip(inputs, vectors, strict=True):
        np.testing.assert_allclose(vector, unit(text, fake_openai.dim), atol=1e-6)


def test_unrequested_base64_is_accepted_too(fake_openai):
    fake_openai.always_base64 = True
    inputs = texts(2)

    vectors = make_embedder(fake_openai).embed(inputs)

    assert "encoding_format" not in fake_openai.calls("/embeddings")[0].json
    np.testing.assert_allclose(vectors[1], unit(inputs[1], fake_openai.dim), atol=1e-6)


def test_base64_of_a_partial_float_fails_the_batch(fake_openai):
    bad = base64.b64encode(b"\x00\x00\x80").decode()
    fake_openai.push("/embeddings", one_bad_item(bad))

    assert make_embedder(fake_openai).embed(texts(2)) == [None, None]


def test_blank_texts_are_none_and_never_sent(fake_openai):
    vectors = make_embedder(fake_openai).embed(["", "真的有内容", "   "])

    assert vectors[0] is None and vectors[2] is None
    assert vectors[1] is not None
    assert fake_openai.calls("/embeddings")[0].json["input"] == ["真的有内容"]


def test_nothing_to_embed_sends_nothing(fake_openai):
    assert make_embedder(fake_openai).embed([]) == []
    assert fake_openai.requests == []


def test_embed_one(fake_openai):
    embedder = make_embedder(fake_openai)

    np.testing.assert_allclose(embedder.embed_one("你好"), unit("你好", fake_openai.dim), atol=1e-6)
    np.testing.assert_allclose(embed_one(embedder, "你好"), unit("你好", fake_openai.dim), atol=1e-6)


def test_normalise_survives_huge_and_tiny_components():
    huge = normalise([1e300, 1e300, 0.0], 3)
    tiny = normalise([1e-300, 0.0, 1e-300], 3)

    np.testing.assert_allclose(huge, [2**-0.5, 2**-0.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(tiny, [2**-0.5, 0.0, 2**-0.5], atol=1e-6)


# --- the breaker: a failing provider is skipped for a while -------------------------------------------


def test_a_hung_provider_is_skipped_for_down_seconds_then_asked_again(fake_openai, caplog):
    fake_openai.push("/embeddings", Reply(delay=1.0))
    embedder = make_embedder(fake_openai, timeout=0.2, max_retries=0, down_seconds=0.6)

    with caplog.at_level(logging.WARNING, logger="memory.providers.embeddings"):
        assert embedder.embed(texts(2)) == [None, None]
        assert embedder.is_down()
        assert embedder.embed(texts(2)) == [None, None]  # nothing sent (below): no wait
    assert len(fake_openai.calls("/embeddings")) == 1
    assert [r.message for r in caplog.records].count(
        f"embedder_unavailable url={fake_openai.base_url} error={fake_openai.base_url}/embeddings: "
        "timed out after 1 attempts: skipping it for 1 s") == 1

    time.sleep(0.7)
    assert not embedder.is_down()
    assert all(v is not None for v in embedder.embed(texts(2)))
    assert len(fake_openai.calls("/embeddings")) == 2


def test_after_a_failed_batch_the_next_batches_are_not_sent(fake_openai):
    fake_openai.push("/embeddings", *[Reply(503, body="down") for _ in range(2)])
    embedder = make_embedder(fake_openai, max_retries=1, down_seconds=30)

    assert embedder.embed(texts(MAX_BATCH + 5)) == [None] * (MAX_BATCH + 5)
    assert len(fake_openai.calls("/embeddings")) == 2  # the first batch and its retry, nothing of the second


def test_every_embedder_of_the_url_shares_the_breaker(fake_openai):
    fake_openai.push("/embeddings", Reply(429, json={"error": {}}, headers={"Retry-After": "0"}))
    serving = make_embedder(fake_openai, max_retries=0, down_seconds=30)
    worker = make_embedder(fake_openai, max_retries=3, down_seconds=30)

    assert serving.embed(texts(1)) == [None]
    assert worker.is_down() and worker.embed(texts(1)) == [None]
    assert len(fake_openai.calls("/embeddings")) == 1


def test_a_refused_connection_opens_the_breaker():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = OpenAIEmbedder(f"http://127.0.0.1:{port}/v1", "m", dim=8, timeout=1.0, max_retries=0, down_seconds=30)

    assert embedder.embed(texts(1)) == [None]
    assert embedder.is_down()


@pytest.mark.parametrize("reply", [Reply(400, json={"error": {"message": "bad input"}}), Reply(body="{not json")])
def test_a_bad_request_or_body_does_not_open_the_breaker(fake_openai, reply):
    fake_openai.push("/embeddings", reply)
    embedder = make_embedder(fake_openai, down_seconds=30)

    assert embedder.embed(texts(1)) == [None]
    assert not embedder.is_down()
    assert embedder.embed(texts(1))[0] is not None
    assert len(fake_openai.calls("/embeddings")) == 2


def test_without_down_seconds_there_is_no_breaker(fake_openai):
    fake_openai.push("/embeddings", Reply(500, body="boom"))
    embedder = make_embedder(fake_openai, max_retries=0)

    assert embedder.embed(texts(1)) == [None]
    assert not embedder.is_down()
    assert embedder.embed(texts(1))[0] is not None
