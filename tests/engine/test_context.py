"""The conversation as the query: recency weights and the weighted cosine (memory/engine/context.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from memory.engine.context import (
    ConversationQuery,
    recency_weights,
    shown_key,
    shown_keys,
    split_turn,
    text_lines,
    weighted_max,
    window_vector,
)


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


def test_the_whole_texts_row_comes_last_and_is_marked():
    turn, window, line, whole = [1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6]
    query = ConversationQuery.build(turn, [(line, 0.5)], window=(window, 0.7), whole=(whole, 1.0))
    assert query.weights == (1.0, 0.7, 0.5, 1.0) and query.wholes == (3,)
    assert np.allclose(query.vectors[3], whole)
    assert ConversationQuery.build(turn, [(line, 0.5)]).wholes == ()
    assert ConversationQuery.build(turn, [(None, 0.5)], whole=(whole, 1.0)).wholes == (1,)  # a missing line: no row
    assert ConversationQuery.build(turn, [], whole=(None, 1.0)).wholes == ()
    assert ConversationQuery.build(turn, [], whole=(whole, 0.0)).wholes == ()  # weight 0: off


def test_a_text_of_several_lines_is_its_last_line_and_the_lines_before_it_newest_first():
    assert split_turn("我家的狗今天很乖\n\n  下午一起去打篮球吗 \n几点") == ("几点", ["下午一起去打篮球吗", "我家的狗今天很乖"])
    # a line is not cut into sentences when the text has several: a chat's message is one line
    assert split_turn("哈哈。真的吗？\n我上周去哪了") == ("我上周去哪了", ["哈哈。真的吗？"])


def test_a_line_says_something_only_with_a_word_in_it():
    # a trailing line of punctuation or emoji is no line; a short word ("嗯") is the turn's line, as in a chat
    assert split_turn("我上周去哪了\n？？\n😂") == ("我上周去哪了\n？？\n😂", [])
    assert split_turn("我上周去哪了\n嗯") == ("嗯", ["我上周去哪了"])


def test_one_paragraph_of_three_sentences_or_more_is_read_as_its_sentences():
    text = "哈哈，今天好累啊。刚下班！对了，我上周去哪儿吃的饭？"
    assert text_lines(text) == ["哈哈，今天好累啊。", "刚下班！", "对了，我上周去哪儿吃的饭？"]
    assert split_turn(text) == ("对了，我上周去哪儿吃的饭？", ["刚下班！", "哈哈，今天好累啊。"])
    english = "I am so tired. Work was long! Where did I eat last week?"
    assert split_turn(english) == ("Where did I eat last week?", ["Work was long!", "I am so tired."])


def test_a_line_of_one_or_two_sentences_is_itself_unchanged():
    for text in ["我最近想去杭州玩", "妈妈电话是多少来着？另外，高尔夫电影之旅的主要内容是什么？", "  hello ", "",
                 "Was it good? Answer yes or no.", "嗯"]:
        assert split_turn(text) == (text, [])


def test_abbreviations_quotations_and_runs_of_punctuation_do_not_end_a_sentence():
    assert text_lines("Would Tim like Dr. Seuss and C. S. Lewis? He was in the U.S. last year. Ok then.") == [
        "Would Tim like Dr. Seuss and C. S. Lewis?", "He was in the U.S. last year.", "Ok then."]
    assert text_lines("他说：“好。”然后走了。真的吗？！……你确定？") == ["他说：“好。”然后走了。", "真的吗？！……", "你确定？"]
    assert text_lines("版本 3.5 发布了。我看过了。你呢？") == ["版本 3.5 发布了。", "我看过了。", "你呢？"]


def test_latin_marks_end_a_chinese_sentence_without_a_space():
    assert text_lines("太好了!我们去吧?你定时间.好") == ["太好了!", "我们去吧?", "你定时间.好"]


def test_a_shown_line_is_compared_by_its_words_not_its_spacing_or_case():
    assert shown_key("  I  love\tcats ") == shown_key("i love cats") == "i love cats"
    assert shown_key("我家的猫 叫咪咪") != shown_key("我家的猫叫咪咪")  # a space between words is kept, as one
    assert shown_keys(["我家的猫叫咪咪", "……", " ", "OK"]) == frozenset({"我家的猫叫咪咪", "ok"})  # no words: nothing shown
