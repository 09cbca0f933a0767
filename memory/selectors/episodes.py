"""L2 reads: episode recall by cue, the newest episodes of a stream, the episode lists."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, Max, Min, QuerySet

from memory import backends
from memory.engine import decay
from memory.models import Episode, EpisodeCue, PipelineEvent, Stream
from memory.search import lexical, read_ahead


@dataclass(frozen=True)
class RecalledEpisode:
    id: int
    summary: str
    kind: str
    started_at: int
    ended_at: int
    score: float
    stream_id: int = 0


_EPISODE_COLUMNS = "id, summary, kind, started_at, ended_at, stream_id"


def recall_episodes(*, stream_id: int | None, query: str, limit: int = 3) -> list[RecalledEpisode]:
    """Episodes of a stream whose cues match ``query`` (best cue per episode; summaries are not indexed)."""
    hits = episode_hits(stream_id=stream_id, query=query, limit=limit)
    return recalled_episodes(hits, read_ahead.read(episodes_read(hits))) if hits else []


def episode_hits(*, stream_id: int | None, query: str, limit: int) -> dict[int, float]:
    """``{episode id: bm25 of its best cue}``, best first, of at most ``limit`` episodes whose cues match
    ``query`` (one stream: the stream column bounds the work; every stream: the resident index)."""
    if limit < 1:
        return {}
    match = lexical.match_for("cues_fts", query)
    best: dict[int, float] = {}
    for hit in lexical.cue_candidates(match, stream_id=stream_id, limit=limit * 4):
        best.setdefault(hit.episode_id, hit.bm25)
    return dict(list(best.items())[:limit])


def episodes_read(ids: Iterable[int]) -> read_ahead.Read:
    """The rows of episodes by id (``{id: row}``), for :func:`recalled_episodes` (a turn sends it with its
    write, memory/recall/): plain SQL, no ORM compile per call."""
    ids = list(dict.fromkeys(int(i) for i in ids))
    return read_ahead.Read(("episodes", tuple(ids)),
                        f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE id IN ({backends.in_placeholders(ids)})",
                        ids, lexical.rows_by_id)


def recalled_episodes(hits: dict[int, float], rows: dict[int, tuple]) -> list[RecalledEpisode]:
    """The episodes of :func:`episode_hits` still there (``rows``: :func:`episodes_read`'s), in its order."""
    return [
        RecalledEpisode(
            id=e, summary=summary, kind=kind, started_at=started, ended_at=ended,
            score=decay.score(hits[e], 1.0), stream_id=sid,
        )
        for e, summary, kind, started, ended, sid in (rows[i] for i in hits if i in rows)
    ]


def recent_episodes(*, stream_id: int, limit: int = 4) -> list[RecalledEpisode]:
    """Newest episodes of a stream by end time; placeholders excluded; score 1.0."""
    return read_ahead.read(recent_episodes_read(stream_id=stream_id, limit=limit)) if limit >= 1 else []


def recent_episodes_read(*, stream_id: int, limit: int) -> read_ahead.Read:
    """:func:`recent_episodes` as a read a turn sends with its others (:func:`memory.search.read_ahead.one_state`)."""
    return read_ahead.Read(
        ("recent_episodes", stream_id, int(limit)),
        f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE stream_id = %s AND kind <> %s ORDER BY ended_at DESC, id DESC LIMIT %s",
        [stream_id, Episode.Kind.UNSUMMARIZED.value, int(limit)],
        lambda rows: [
            RecalledEpisode(id=e, summary=summary, kind=kind, started_at=started, ended_at=ended, score=1.0, stream_id=sid)
            for e, summary, kind, started, ended, sid in rows
        ],
    )


# --- the console's episode pages ----------------------------------------------------------------------


def episodes_with_counts() -> QuerySet[Episode]:
    """Episodes with their stream and ``n_messages`` (the messages they summarise)."""
    return Episode.objects.select_related("stream").annotate(n_messages=Count("messages"))


def episode_list(*, stream: Stream | None = None, placeholders: bool = False) -> QuerySet[Episode]:
    """Episodes newest first (by end), of one stream or all, optionally only the unsummarised placeholders."""
    qs = episodes_with_counts().order_by("-ended_at", "-id")
    if stream is not None:
        qs = qs.filter(stream=stream)
    if placeholders:
        qs = qs.filter(kind=Episode.Kind.UNSUMMARIZED)
    return qs


def episode_batches(*, stream_id: int) -> QuerySet[Episode]:
    """A stream's episodes newest first, each with ``n_messages`` and the ids of its first and last message."""
    return (
        Episode.objects.filter(stream_id=stream_id)
        .annotate(n_messages=Count("messages"), first_id=Min("messages__id"), last_id=Max("messages__id"))
        .order_by("-ended_at", "-id")
    )


def episode_cues(episode_ids: Iterable[int]) -> dict[int, list[str]]:
    """``{episode id: its cues}`` (one query; episodes without a cue are absent)."""
    by_id: dict[int, list[str]] = defaultdict(list)
    for episode_id, cue in EpisodeCue.objects.filter(episode_id__in=list(episode_ids)).values_list("episode_id", "cue"):
        by_id[episode_id].append(cue)
    return dict(by_id)


def summary_skip_reasons(stream_ids: Iterable[int]) -> dict[int, str]:
    """``{placeholder episode id: why its batch was not summarised}`` from the streams'
    ``summary_batch_skipped`` events (one query; the latest event of an episode wins)."""
    events = PipelineEvent.objects.filter(kind="summary_batch_skipped", stream_id__in=list(stream_ids)).order_by("seq")
    reasons: dict[int, str] = {}
    for payload in events.values_list("payload", flat=True):
        payload = payload or {}
        episode_id = payload.get("episodeId") or payload.get("episode_id")
        if episode_id:
            reasons[int(episode_id)] = str(payload.get("error") or payload.get("reason") or "")
    return reasons
