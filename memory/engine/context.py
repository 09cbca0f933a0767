"""The conversation as the query: recency weights and the weighted cosine of a turn.

A turn's recall reads the stream's recent messages as well as the turn's own line. The
``k``-th message before the turn's line (``k = 1`` is the one just before it) counts with
weight ``2 ** (-k / half_life)``; the turn's line itself counts 1. So an older line can
only decide what is recalled when it matches clearly better than the lines after it.

* Lexical: each recent *user* line is its own query; a fact it finds enters the pool with
  its relevance and query coverage multiplied by the line's weight.
* Dense: a fact's cosine with the conversation is the weighted maximum
  ``max_i(w_i * cos(q_i, fact))`` over the turn's vector (``w = 1``), the vector of the
  *window* and the recent messages' vectors.
* The window: the turn's vector and the vectors of the recent user lines, summed and scaled to
  unit length (weight ``window_weight``). A line of a chat often says little by itself ("是啊，
  那次真难忘"); what the conversation is about is spread over its lines, and their centroid finds
  it where the best of the lines' separate vectors does not. It is made of vectors the turn has
  already (the messages' stored ones), so it costs no embedding call; embedding the lines joined
  as one text ranked no better on the dev split (BENCHMARKS.md, the conversation as the query).

A turn whose text is itself several lines (a pasted history, a paragraph of small talk ending
in the question) is read as the chat it would have been: :func:`split_turn` takes its last line
with a word in it as the turn's line and the lines before it as the newest lines of the
conversation, in the positions they would hold had they been sent one by one. Its own vector
whole is one more row of the dense query (:attr:`ConversationQuery.wholes`), its margin read against
the chattiest row's background.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_DENSE_MESSAGES",
    "DEFAULT_GAP_MINUTES",
    "DEFAULT_HALF_LIFE",
    "DEFAULT_LEXICAL_LINES",
    "DEFAULT_SHOWN_OUT",
    "DEFAULT_TEXT_LINES",
    "DEFAULT_WHOLE_LEXICAL",
    "DEFAULT_WHOLE_WEIGHT",
    "DEFAULT_WINDOW_WEIGHT",
    "TURN_TEXT_MAX_CHARS",
    "ConversationQuery",
    "recency_weights",
    "shown_key",
    "shown_keys",
    "split_turn",
    "text_lines",
    "weighted_max",
    "weighted_max_at",
    "window_vector",
]

#: messages; four lines back a message counts half. Chosen on the dev split (BENCHMARKS.md, the
#: recall matrix): a question asked after lines of chit-chat needs the conversation's older lines
#: nearly as much as the last one, and this long half-life over the last twelve messages did as
#: well as one embedding of the recent window. The conversation ends at a silence
#: (``DEFAULT_GAP_MINUTES``), so a long half-life does not reach into an older topic.
DEFAULT_HALF_LIFE: float = 4.0
#: the recent user lines (among this many newest messages) that query the lexical index.
DEFAULT_LEXICAL_LINES: int = 3
#: the newest messages (the assistant's too: a bot line often names what the user's memory is
#: about) whose vectors join the dense query.
DEFAULT_DENSE_MESSAGES: int = 12
#: weight of the window's vector (the centroid of the recent user lines and the turn's line); 0 = off.
#: It counts as the turn's own line does: the window is the turn, read with what led to it.
DEFAULT_WINDOW_WEIGHT: float = 1.0
#: 1 = a turn's text of several lines is read as a chat (:func:`split_turn`); 0 = as one query.
DEFAULT_TEXT_LINES: int = 1
#: a text read as a chat (:func:`split_turn`) keeps its own vector too: one more row of the dense
#: query, of this weight (0 = off); it counts as the turn's line does. Chosen on the dev split
#: (docs/ARCHITECTURE.md, "Ranking", gives the numbers): a tie or a win on every set
DEFAULT_WHOLE_WEIGHT: float = 1.0
#: the whole text as one more lexical query line, of this weight (0 = off: a win on MemDaily's dev
#: split, a tie on DuLeMon's, and a loss where the pasted lines are memories themselves)
DEFAULT_WHOLE_LEXICAL: float = 0.0
#: minutes of silence that end a conversation: older messages do not join the turn's query.
DEFAULT_GAP_MINUTES: float = 60.0
#: 1 = a memory whose text is a line the conversation shows already (a message of the turn's context,
#: a line of its text before its own; among the conversation's newest lines, its window) is no
#: candidate of the turn: the bot reads that line in its prompt, a slot of the memories would repeat
#: it. 0 = such memories are ranked as any other.
DEFAULT_SHOWN_OUT: int = 1


#: the longest text a turn may carry (the API's bound) — and so the longest conversation a turn's
#: dense query reads whole (``memory.recall.read_whole``): never longer than it could have been pasted
TURN_TEXT_MAX_CHARS: int = 20_000

#: a line of this many sentences or more is read as lines, one per sentence: a message of one
#: or two (a question and its aside, two questions) is one line as a chat's message is
PARAGRAPH_SENTENCES: int = 3
#: a sentence ends at Chinese or English end punctuation (a run of it, and the closing quotes or
#: brackets after it); a Latin "!" or "?" ends one before a space, a Chinese character or the end,
#: a full stop only before a space or the end ("3.5", "a.com" go on)
_SENTENCE_END = re.compile(
    r"(?:[。！？][。！？…]*|[!?][!?.…]*(?=[^\x00-\x7f]|[\s\"')\]]|$)|\.+(?=[\s\"'”’」』）)\]]|$))[\"'”’」』）)\]]*"
)
#: a line says something when it holds a letter, a digit or a CJK character (not only punctuation,
#: emoji or spaces)
_WORD = re.compile(r"[^\W_]")


_CLOSING = "\"'”’」』）)]"
#: English words a full stop follows without ending the sentence (besides initials and dotted
#: acronyms: "C. S.", "J.K.", "U.S.")
_ABBREVIATIONS = frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "approx"})
_LAST_WORD = re.compile(r"([A-Za-z](?:[A-Za-z.]*[A-Za-z])?)$")


def _abbreviation(before: str) -> bool:
    """True when the full stop after ``before`` closes an abbreviation or an initial, not a sentence."""
    word = _LAST_WORD.search(before)
    return bool(word) and (len(word.group(1)) == 1 or "." in word.group(1) or word.group(1).lower() in _ABBREVIATIONS)


def _says_something(line: str) -> bool:
    return bool(_WORD.search(line))


def _sentences(paragraph: str) -> list[str]:
    """``paragraph`` cut after each sentence's end; a piece without a word joins the one before."""
    parts, start = [], 0
    for end in _SENTENCE_END.finditer(paragraph):
        if end.group()[-1] in _CLOSING or (end.group().startswith(".") and _abbreviation(paragraph[start:end.start()])):
            continue  # a quotation's own end, an abbreviation: the sentence goes on
        parts.append(paragraph[start:end.end()])
        start = end.end()
    parts.append(paragraph[start:])
    out: list[str] = []
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if out and not _says_something(part):
            out[-1] += part
        else:
            out.append(part)
    return out


def text_lines(text: str) -> list[str]:
    """The lines of a turn's text, oldest first: its non-blank lines, or — a text of one line of at
    least :data:`PARAGRAPH_SENTENCES` sentences (Chinese 。！？, English . ! ? before a space) — its
    sentences; lines without a word (punctuation, emoji) are left out. Spaces inside a line are kept."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and len(sentences := _sentences(lines[0])) >= PARAGRAPH_SENTENCES:
        lines = sentences
    return [line for line in lines if _says_something(line)]


def shown_key(text: str) -> str:
    """What a memory's text and a line of the conversation are compared by (:data:`DEFAULT_SHOWN_OUT`):
    the text casefolded, its runs of white space one space, trimmed."""
    return " ".join(text.split()).casefold()


def shown_keys(lines: Iterable[str]) -> frozenset[str]:
    """:func:`shown_key` of each of ``lines`` that says something (a line of punctuation shows nothing)."""
    return frozenset(shown_key(line) for line in lines if _says_something(line))


def split_turn(text: str) -> tuple[str, list[str]]:
    """``(the turn's line, the lines before it, newest first)``: the last line of ``text`` with a
    word in it, and the others as the conversation that led to it (:func:`text_lines`). A text of
    one line (or none with a word) is its own line, unchanged: ``(text, [])``."""
    lines = text_lines(text)
    if len(lines) < 2:
        return text, []
    return lines[-1], lines[-2::-1]


def window_vector(turn_vector, line_vectors: Sequence[object]) -> np.ndarray | None:
    """The window's vector: the turn's vector and the recent user lines' vectors (each once,
    whatever its recency), summed and scaled to unit length. A line vector of another dimension
    than the turn's is left out; None when no line is left (the window would be the turn's line
    itself) or the sum is zero."""
    turn = np.asarray(turn_vector, dtype=np.float64).ravel()
    lines = [np.asarray(v, dtype=np.float64).ravel() for v in line_vectors if v is not None]
    lines = [v for v in lines if v.shape == turn.shape]
    if not lines:
        return None
    total = turn / (np.linalg.norm(turn) or 1.0) + sum(v / (np.linalg.norm(v) or 1.0) for v in lines)
    norm = float(np.linalg.norm(total))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    return (total / norm).astype(np.float32)


def recency_weights(n: int, half_life: float = DEFAULT_HALF_LIFE) -> list[float]:
    """Weights of the ``n`` messages before the turn, newest first: ``2 ** (-k / half_life)``, ``k = 1..n``."""
    if n <= 0:
        return []
    if half_life <= 0:
        raise ValueError("half_life must be positive")
    return [2.0 ** (-k / half_life) for k in range(1, n + 1)]


@dataclass(frozen=True)
class ConversationQuery:
    """The query vectors of a turn: the turn's own vector first (weight 1), then the window's
    (when there is one) and the recent messages' vectors with their weights (rows of ``vectors``)."""

    vectors: np.ndarray  # (m, d) float32, row 0 = the turn's line
    weights: tuple[float, ...]
    #: rows of a whole text read as a chat (its own vector): its background is the highest of any
    #: row's — a text made of small-talk lines is small talk, however far its vector is from each line
    wholes: tuple[int, ...] = ()

    @classmethod
    def build(
        cls, text_vector, context: Sequence[tuple[object, float]], window: tuple[object, float] | None = None,
        whole: tuple[object, float] | None = None,
    ) -> ConversationQuery | None:
        """From the turn's vector (may be None), the window's ``(vector, weight)`` (optional),
        the recent messages' ``(vector, weight)`` pairs (vectors may be None) and the whole text's
        ``(vector, weight)`` (optional, the last row: :attr:`wholes`).

        None when there is no vector at all. Without the turn's vector the others alone form
        the query (their weights unchanged).
        """
        rows, weights = [], []
        if text_vector is not None:
            rows.append(np.asarray(text_vector, dtype=np.float32).ravel())
            weights.append(1.0)
        wholes = []
        pairs = [(pair, False) for pair in ([window] if window is not None else []) + list(context)]
        for (vector, weight), is_whole in pairs + ([(whole, True)] if whole is not None else []):
            if vector is None or weight <= 0:
                continue
            row = np.asarray(vector, dtype=np.float32).ravel()
            if rows and row.shape != rows[0].shape:
                continue  # a vector of another embedding space: not comparable
            if is_whole:
                wholes.append(len(rows))
            rows.append(row)
            weights.append(float(weight))
        if not rows:
            return None
        return cls(np.vstack(rows), tuple(weights), tuple(wholes))

    @property
    def primary(self) -> np.ndarray:
        return self.vectors[0]


def weighted_max(cosines: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """``max_i(weights[i] * cosines[i, j])`` per column ``j``; NaN entries (no vector) are skipped.

    ``cosines`` has one row per query vector. A column with no finite entry stays NaN.
    """
    matrix = np.asarray(cosines, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != len(weights):
        raise ValueError("one row of cosines per weight")
    scaled = matrix * np.asarray(weights, dtype=np.float64)[:, None]
    scaled = np.where(np.isnan(scaled), -np.inf, scaled)
    best = scaled.max(axis=0) if scaled.size else np.full(matrix.shape[1], -np.inf)
    return np.where(np.isneginf(best), np.nan, best)


def weighted_max_at(cosines: np.ndarray, weights: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`weighted_max` and, per column, the row that gave it (0 where the column is all NaN)."""
    matrix = np.asarray(cosines, dtype=np.float64)
    values = weighted_max(matrix, weights)
    scaled = np.where(np.isnan(matrix), -np.inf, matrix * np.asarray(weights, dtype=np.float64)[:, None])
    rows = scaled.argmax(axis=0) if scaled.size else np.zeros(matrix.shape[1], dtype=np.int64)
    return values, rows
