"""The conversation as the query: recency weights and the weighted cosine (memory/engine/context.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from memory.engine.context import ConversationQuery, recency_weights, weighted_max, window_vector


def test_recency_weights_halve_every_half_life():
    assert recency_weights(4, 2.0) == pytest.approx([2 ** -0.5, 0.5, 2 ** -1.5, 0.25])
    assert recency_weights(4) == pytest.approx([2 ** -0.25, 2 ** -0.5, 2 ** -0.75, 0.5])  # the default half-life: 4 messages
    assert recency_weights(0) == [] and recency_weights(-3) == []
    with pytest.raises(ValueError):
        recency_weights(2, 0)


def test_weighted_max_takes_the_best_weighted_row_and_skips_missing_cosines():
    cos = np.array([[0.2, 0.9, np.nan], [0.8, 0.1, np.nan], [0.5, np.nan, np.nan]])
    out = weighted_max(cos, [1.0, 0.5, 0.25])
    assert out[0] == pytest.approx(0.4)  # 0.5 * 0.8 beats 1 * 0.2 and 0.25 * 0.5
    assert out[1] == pytest.approx(0.9)
    assert math.isnan(out[2])
    with pytest.raises(ValueError):
        weighted_max(cos, [1.0])


def test_a_conversation_query_puts_the_turn_first_and_drops_what_cannot_be_compared():
    turn = np.array([1.0, 0.0, 0.0], dtype=np.float32)
    query = ConversationQuery.build(turn, [([0.0, 1.0, 0.0], 0.7), (None, 0.5), ([0.0, 1.0], 0.4), ([0, 0, 1.0], 0.0)])
    assert query.weights == (1.0, 0.7)
    assert query.vectors.shape == (2, 3) and query.primary.tolist() == [1.0, 0.0, 0.0]
    assert ConversationQuery.build(None, [(None, 0.5)]) is None
    alone = ConversationQuery.build(None, [([0.0, 1.0, 0.0], 0.5)])
    assert alone.weights == (0.5,)


def test_the_window_is_the_centroid_of_the_turn_and_its_lines():
    turn = np.array([0.0, 0.0, 2.0, 0.0])  # not unit: each vector counts as its direction, once
    dog, ball = np.array([0.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    assert window_vector(turn, [dog, ball]) == pytest.approx(np.array([1.0, 1.0, 1.0, 0.0]) / 3 ** 0.5)
    assert window_vector(turn, [dog, None]) == pytest.approx(np.array([0.0, 1.0, 1.0, 0.0]) / 2 ** 0.5)
    assert window_vector(turn, []) is None
    assert window_vector(turn, [None, np.ones(3)]) is None  # another embedding space: left out
    assert window_vector(turn, [-turn]) is None  # nothing left to point at
    assert window_vector(turn, [dog]).dtype == np.float32


def test_the_window_row_follows_the_turns_vector_with_its_weight():
    turn, window, line = [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]
    query = ConversationQuery.build(turn, [(line, 0.5)], window=(window, 0.7))
    assert query.weights == (1.0, 0.7, 0.5)
    assert np.allclose(query.vectors, [turn, window, line])
    assert ConversationQuery.build(turn, [(line, 0.5)], window=([0.0, 1.0, 0.0], 1.0)).weights == (1.0, 0.5)  # other space
    only = ConversationQuery.build(None, [], window=(window, 0.7))
    assert only.weights == (0.7,)
