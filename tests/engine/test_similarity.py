"""Duplicate detection — docs/REFERENCE.md §3."""

from __future__ import annotations

import pytest

from memory.engine.similarity import BIGRAM_THRESHOLD, CHAR_THRESHOLD, exact_key, is_same_fact, similarity


def test_thresholds() -> None:
    assert (CHAR_THRESHOLD, BIGRAM_THRESHOLD) == (0.85, 0.55)


def test_exact_key() -> None:
    assert exact_key("玩家 习惯深夜写代码。") == "玩家习惯深夜写代码"
    assert exact_key("Hello, World!") == "helloworld"
    assert exact_key("！？") == ""


@pytest.mark.parametrize(
    ("a", "b", "char", "bigram", "same"),
    [
        ("玩家不喜欢吃香菜", "香菜玩家不喜欢吃", 1.0, 0.75, True),
        ("玩家喜欢猫", "猫喜欢玩家", 1.0, 1 / 3, False),
        ("玩家习惯在深夜写代码", "玩家习惯深夜写代码。", 0.9, 0.7, True),
        ("他喜欢喝冰美式咖啡", "他喜欢喝冰美式咖啡的", 0.9, 0.889, True),
        ("他现在住在成都", "他现在住在杭州", 0.5, None, False),
    ],
)
def test_worked_values(a: str, b: str, char: float, bigram: float | None, same: bool) -> None:
    sim = similarity(a, b)
    assert sim["char"] == pytest.approx(char, abs=1e-3)
    if bigram is not None:
        assert sim["bigram"] == pytest.approx(bigram, abs=1e-3)
    assert is_same_fact(a, b) is same


def test_equal_normalised_and_empty() -> None:
    assert is_same_fact("玩家喜欢猫！", "玩家喜欢猫")
    assert is_same_fact("", "！")
    assert similarity("", "") == {"char": 1.0, "bigram": 1.0}


def test_english_sentences_compare_by_words_not_letters():
    """Letter sets of any two English sentences overlap; the word set decides."""
    assert not is_same_fact("Caroline went to a LGBTQ support group", "Melanie painted a sunset with her kids")
    assert is_same_fact("Caroline went to the support group yesterday", "Caroline went to a support group yesterday")
    assert is_same_fact("Caroline went to a support group.", "caroline went to a support group")


def test_latin_words_inside_chinese_are_compared_too():
    assert not is_same_fact("他喜欢写Rust代码", "他喜欢写Go代码")
