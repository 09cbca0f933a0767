"""L2 reads: episode recall by cue and the newest episodes of a stream."""
from __future__ import annotations

from dataclasses import dataclass

from memory import lexical
from memory.engine import decay
from memory.models import Episode


@dataclass(frozen=True)
class RecalledEpisode:
    id: int
    summary: str
    kind: str
    started_at: int
    ended_at: int
    score: float
    stream_id: int = 0


def recall_episodes(*, stream_id: int | None, query: str, limit: int = 3) -> list[RecalledEpisode]:
    """Episodes of a stream whose cues match ``query`` (best cue per episode; summaries are not indexed)."""
    if limit < 1:
        return []
    # One stream: the stream column bounds the work; every stream: the resident index.
    match = lexical.match_for("cues_fts", query)
    hits = lexical.cue_candidates(match, stream_id=stream_id, limit=limit * 4)
    best: dict[int, float] = {}
    for episode_id, _cue, b in hits:
        best.setdefault(episode_id, b)
    chosen = list(best)[:limit]
    episodes = Episode.objects.in_bulk(chosen)
    return [
        RecalledEpisode(
            id=e.id, summary=e.summary, kind=e.kind, started_at=e.started_at, ended_at=e.ended_at,
            score=decay.score(best[e.id], 1.0), stream_id=e.stream_id,
        )
        for e in (episodes[i] for i in chosen)
    ]


def recent_episodes(*, stream_id: int, limit: int = 4) -> list[RecalledEpisode]:
    """Newest episodes of a stream by end time; placeholders excluded; score 1.0."""
    if limit < 1:
        return []
    rows = Episode.objects.filter(stream_id=stream_id).exclude(kind=Episode.UNSUMMARIZED).order_by("-ended_at", "-id")
    return [
        RecalledEpisode(
            id=e.id, summary=e.summary, kind=e.kind, started_at=e.started_at, ended_at=e.ended_at, score=1.0,
            stream_id=e.stream_id,
        )
        for e in rows[:limit]
    ]
