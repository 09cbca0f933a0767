"""The background of "no memory asked for": a fixed bank of generic chat lines.

Whether a memory is relevant to a line is judged against what that same line would score if
it asked for nothing at all (:mod:`memory.engine.scoring`, the relevance gate). The bank holds
lines of small talk — greetings, farewells, acknowledgements, laughter, moods, "are you
there", in Chinese and English — written for this project; none of them names anything a
memory could be about.

* Dense background of a query vector: its best cosine with the bank's vectors
  (:func:`background_of`); a memory must stand out of it. A two-character greeting sits close
  to the bank, so only a memory that matches it even better passes; a question about a
  trip sits far from it, so a memory that matches it moderately passes. A long text sits far
  from every short line and from every memory alike, so the same rule holds for a line, a
  paragraph and a pasted history.
* Lexical background: the bank's words (:func:`generic_words`) carry no information about
  what to recall; the query's informative mass leaves them out.

The bank's vectors come from the configured embedder (``memory.search.background``, once per process
and embedding model); this module is pure.
"""
from __future__ import annotations

import functools

import numpy as np

from .tokenize import words

__all__ = ["BANK", "generic_words", "background_of"]

BANK: tuple[str, ...] = (
    # greetings, farewells
    "你好啊", "嗨", "早啊", "下午好", "晚安啦", "拜拜", "回头聊", "我先去忙了", "我回来了", "刚睡醒",
    # acknowledgements, fillers
    "嗯嗯好的", "好的好的", "知道了", "收到", "没问题", "可以啊", "对啊", "是吗", "真的吗", "好吧", "然后呢", "你猜",
    "我也是", "随便聊聊",
    # laughter, praise, thanks, apologies
    "哈哈哈哈", "笑死", "厉害了", "太棒了", "加油", "么么哒", "谢谢啦", "不客气", "不好意思", "没事没事", "辛苦了",
    # are you there, how are you, moods
    "你在吗", "你在干什么", "你吃饭了吗", "最近怎么样", "今天天气不错", "好累啊", "好困", "好开心", "有点烦", "无聊",
    # the same in English
    "hello there", "hi!", "good evening", "bye", "see you later", "haha yes", "ok sure", "got it", "thanks a lot",
    "no problem", "sorry", "how are you doing", "what are you up to", "I'm tired", "that's cool", "really?",
    "lol okay",
)


#: Chinese words that ask or point but name nothing — question words, pronouns, demonstratives,
#: connectives (the one-character ones never reach an index: ``tokenize.STOP_CHARS``). A conversation
#: that holds them says nothing about what a question is about, so where a fact was told is not read
#: by them (memory/selectors/told.py); English ones are the analyser's stop words already.
FUNCTION_WORDS: frozenset[str] = frozenset(
    "什么 怎么 怎么样 怎样 为什么 为啥 干嘛 干什么 哪里 哪儿 哪个 哪些 什么样 多少 如何 是否 有没有 是不是"
    " 我们 你们 他们 她们 它们 咱们 大家 自己 这个 那个 这些 那些 这样 那样 这里 那里 这儿 那儿"
    " 这么 那么 一下 一些 一点 一个 还是 或者 然后 因为 所以 但是 可是 如果 就是 还有 已经".split()
)


@functools.cache
def generic_words() -> frozenset[str]:
    """The words of the bank (as :func:`memory.engine.tokenize.words` analyses them)."""
    return frozenset(w for line in BANK for w in words(line))


def background_of(query_vectors: np.ndarray, bank_vectors: np.ndarray | None) -> np.ndarray | None:
    """Each query vector's best cosine with the bank (rows of unit vectors; ``None`` without a bank)."""
    if bank_vectors is None or len(bank_vectors) == 0:
        return None
    queries = np.atleast_2d(np.asarray(query_vectors, dtype=np.float32))
    if queries.shape[1] != bank_vectors.shape[1]:
        return None  # another embedding space
    return (queries @ bank_vectors.T).max(axis=1).astype(np.float64)
