"""Turn inspection: the list of recorded turns and everything about one turn (the console pages and the API).

The inspector shows a turn **as it happened**: the conversation it read (its recorded context
messages, each with the weight it had as a query), the candidate pool it recorded, ranked again
by the confirm step (``recall.rank_pool``: the recorded pool, the dense channel, the engine's
``rank``) at the turn's own time under the profile that was in force — the only way to show
every score term, since a turn records its lexical pool and its prompt, not each cosine. Each
candidate's verdict is what was *recorded* (in the prompt, held back by forgetting) where the
turn recorded it; the rest comes from that ranking (held by the relevance gate, or out of
places). When the ranking no longer gives the recorded prompt — memory changed since — the
page says so (``drift``).

A replay ranks the turn afresh (:meth:`tuning.evaluation.Evaluator.ranking`: the lexical pool
rebuilt from today's memory at the turn's time) under two profiles, side by side.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext as _

from memory import recall, selectors
from memory.engine.scoring import Gate
from memory.engine.scoring import Verdict as Verdict_
from memory.models import Episode, Fact, Message, Person, PipelineEvent, Turn
from tuning import evaluation, relevance, services
from tuning.labels import VERDICT_LABELS


@dataclass(frozen=True)
class Verdict:
    """Why a candidate is or is not in the prompt, in plain words; ``code`` styles it and counts it.

    The code is the ranking's own verdict (``memory.engine.scoring.Verdict``: ``prompt``, ``forgetting``,
    ``gate``, ``limit``); the reason words the numbers behind it and, for the relevance gate, the gate's
    own reason for the candidate (``ScopedFact.gate``: ``memory.engine.scoring.Gate``).
    """

    code: str
    label: str
    reason: str




def gate_reason(fact: Any) -> str:
    """The relevance gate's reason for a candidate (``fact.gate``), in plain words."""
    margin = getattr(fact, "margin", None)
    cos = "—" if fact.cosine is None else f"{fact.cosine:.2f}"
    margin_text = "—" if margin is None else f"{margin:+.2f}"
    return {
        Gate.LEADS_DENSE: _("意思上明显最接近这句话（余弦 %(cos)s，远超第二名），直接放行") % {"cos": cos},
        Gate.LEADS_LEXICAL: _("词面上明显最匹配这句话（BM25 远超第二名），直接放行"),
        Gate.DENSE: _("意思上比闲聊更接近这句话（余弦 %(cos)s，比闲聊背景 %(margin)s）") % {"cos": cos, "margin": margin_text},
        Gate.LEXICAL: _("覆盖了这句话里有信息量的词（覆盖 %(share)s）") % {"share": _pct(fact.coverage)},
        Gate.UNKNOWN: _("没有可判断相关的信号，放行"),
        Gate.REFERENCE: _("reference 参数方案没有相关门"),
        Gate.HELD: _("和这句话的关系不比闲聊更近（余弦 %(cos)s，比闲聊背景 %(margin)s），词面上也没覆盖够有信息量的词")
        % {"cos": cos, "margin": margin_text},
    }.get(getattr(fact, "gate", "") or "", "")


def verdict_of(fact: Any, *, code: str, rank: int, limit: int) -> Verdict:
    """The verdict of one ranked candidate (``code``: the ranking's verdict; ``rank``: its place, from 1)."""
    gate = gate_reason(fact)
    if code == Verdict_.PROMPT:
        why = _("第 %(rank)s 名；提示词最多放 %(limit)s 条事实。") % {"rank": rank, "limit": limit}
    elif code == Verdict_.FORGETTING:
        why = _("只看相关度它能进提示词，但它的留存度只有 %(retention)s（很久没被提起、快被忘了），"
                "得分被更新鲜、更牢固的事实超过。") % {"retention": _pct(fact.retention)}
    elif code == Verdict_.LIMIT:
        why = _("够相关，但排第 %(rank)s 名：前 %(limit)s 个名额给了得分更高的事实。") % {"rank": rank, "limit": limit}
    else:
        return Verdict(code, str(VERDICT_LABELS.get(code, code)),
                       _("不进提示词，无论得分多高：%(why)s。") % {"why": gate or _("相关门拦下了它")})
    if gate and code != Verdict_.FORGETTING:
        why += " " + _("相关门：%(why)s。") % {"why": gate}
    return Verdict(code, str(VERDICT_LABELS.get(code, code)), why)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{round(float(value) * 100)}%"


# --------------------------------------------------------------------------- #
# The list
# --------------------------------------------------------------------------- #


def _local_midnight_ms(day: dt.date) -> int:
    return int(timezone.make_aware(dt.datetime.combine(day, dt.time.min)).timestamp() * 1000)


def turn_rows(*, stream: int | None = None, person: int | None = None, fact: int | None = None,
              since: int | None = None, until: int | None = None, labelled: bool | None = None) -> Any:
    """Recorded turns newest first (:func:`memory.selectors.turn_list`), labelled ones only (``True``) or
    unlabelled ones only (``False``)."""
    rows = selectors.turn_list(stream_id=stream, person_id=person, since=since, until=until, fact_id=fact)
    if labelled is True:
        rows = rows.filter(pk__in=relevance.labelled_turn_ids())
    elif labelled is False:
        rows = rows.exclude(pk__in=relevance.labelled_turn_ids())
    return rows


def filter_turns(data: Mapping[str, Any]) -> Any:
    """The turn list's queryset for the filter form's cleaned data (dates are local days)."""
    return turn_rows(
        stream=data["stream"].pk if data.get("stream") else None,
        person=data["person"].pk if data.get("person") else None,
        fact=data["fact"].pk if data.get("fact") else None,
        since=_local_midnight_ms(data["since"]) if data.get("since") else None,
        until=_local_midnight_ms(data["until"] + dt.timedelta(days=1)) if data.get("until") else None,
        labelled={"yes": True, "no": False}.get(data.get("labelled") or ""),
    )


def decorate_turns(turns: Sequence[Turn]) -> None:
    """Each listed turn's label count (``label_count``) and how many facts it put in the prompt and held back."""
    labels = relevance.labels_of(t.pk for t in turns)
    for t in turns:
        found = labels.get(t.pk)
        t.label_count = found.count if found else 0
        t.prompt_count = len(t.prompt_fact_ids or [])
        t.held_back_count = len(t.held_back_fact_ids or [])


# --------------------------------------------------------------------------- #
# One turn
# --------------------------------------------------------------------------- #


@dataclass
class Line:
    """One message of the conversation as the turn saw it."""

    message: Message
    sender: str
    position: int | None  # 1 = the message just before the turn's line; None: outside its context
    lexical_weight: float | None
    dense_weight: float | None


@dataclass
class Candidate:
    fact: Any  # a ScopedFact: every term of its score
    rank: int | None
    verdict: Verdict
    person: str
    recorded: Mapping[str, Any] | None  # the recorded pool's entry (the lexical stage), if it was in the pool
    label: Any = None  # RelevanceLabel
    state: str = ""  # the fact now: active | frozen | invalid | superseded | gone


@dataclass
class Inspection:
    turn: Turn
    speaker: str
    present: list[tuple[int, str]]
    lines: list[Line]
    candidates: list[Candidate]
    prompt: list[Candidate]
    held_back: list[Candidate]
    gated: list[Candidate]
    added: list[Candidate]  # labelled facts that were never candidates
    episodes: list[Episode]
    missing_episodes: int
    profile_name: str | None
    profile_params: dict[str, Any]
    limit: int
    used_vector: bool
    confirmed: bool
    drift: list[int]  # recorded prompt facts the ranking of today's memory would not put in the prompt
    summary: list[tuple[str, str, int]] = field(default_factory=list)
    labels: Mapping[int, Any] = field(default_factory=dict)
    previous: int | None = None
    next: int | None = None
    shown: list[Fact] = field(default_factory=list)  # no candidates: the conversation holds their words

    @property
    def label_count(self) -> int:
        return len(self.labels)


#: the turn's events that list the facts left out because the conversation shows them (``shownFactIds``)
SHOWN_EVENTS = ("memory_retrieval_trace", "memory_retrieval_confirmed")


def _names(ids: Sequence[int]) -> dict[int, str]:
    people = selectors.persons_by_id(ids)
    return {pid: (str(people[pid]) if pid in people else f"#{pid}") for pid in ids}


def _state(row: Fact | None) -> str:
    return "gone" if row is None else str(row.state)


def _fact_from_row(row: Fact, now: int) -> Any:
    return selectors.ScopedFact(
        id=row.pk, person_id=row.person_id, kind=row.kind, content=row.content, slot=row.slot,
        origin_kind=row.origin_kind, retention=row.retention_at(now), score=0.0, lexical_relevance=0.0, bm25=None,
        half_life_hours=row.half_life_hours, active=row.active, eligible=False,
    )


def inspect_turn(turn: Turn, *, query_vector: Any = None, embed: bool = True) -> Inspection:
    """Everything the inspector page shows of ``turn`` (module docstring)."""
    recorded_profile = turn.profile or {}
    params = services.validate_params(recorded_profile.get("params") or {}) if recorded_profile else {}
    limit = recall.fact_recall_limit(params)
    person_ids = [int(p) for p in turn.present_person_ids or []]

    # the conversation, with each context message's weight as a query
    stored = [int(m) for m in turn.context_message_ids or []]
    line, context = recall.read_turn(turn.text, recall.context_from_ids(stored), params)
    weights = recall.query_weights(context, params)
    positions = {c.message_id: c.position for c in context if c.message_id}
    messages = selectors.conversation_before(turn, limit=max(12, len(context) + 4))

    # the confirm step again, on the recorded pool, at the turn's time, under the recorded profile
    pool = recall.recorded_pool(turn.pool or [])
    vector = query_vector
    if vector is None and embed:
        vector = recall.embed_query(line)
    # the positions the confirm gave them, and the conversation read whole as the confirm reads it
    query = recall.conversation_query(vector, context, params, whole=recall.read_whole(turn.text, line, context, params))
    ranking = recall.rank_pool(pool=pool, query_vector=query, person_ids=person_ids, text=line,
                               stream_kind=turn.stream_kind, now=int(turn.at), limit=limit, overrides=params,
                               shown=recall.shown_in_conversation(context, params))
    confirmed = turn.confirmed_at is not None
    in_prompt = set(turn.prompt_fact_ids or []) if confirmed else {f.id for f in ranking.prompt}
    held = set(turn.held_back_fact_ids or []) if confirmed else {f.id for f in ranking.held_back}
    drift = [f for f in (turn.prompt_fact_ids or []) if f not in {x.id for x in ranking.prompt}] if confirmed else []

    labels = relevance.turn_labels(turn.pk)
    recorded = {int(e["factId"]): e for e in turn.pool or [] if isinstance(e, dict) and "factId" in e}
    ranked_ids = {f.id for f in ranking.ranked}
    extra_ids = [i for i in [*in_prompt, *held, *recorded, *labels] if i not in ranked_ids]
    # left out because the conversation holds their words: as the turn recorded it, and as today's ranking does
    recorded_shown = [
        int(fid)
        for payload in PipelineEvent.objects.filter(turn_id=turn.pk, kind__in=SHOWN_EVENTS).values_list("payload", flat=True)
        for fid in (payload or {}).get("shownFactIds") or []
    ]
    shown_ids = list(dict.fromkeys([*recorded_shown, *ranking.shown_out]))
    rows = Fact.objects.in_bulk([*ranked_ids, *extra_ids, *shown_ids])
    now = int(turn.at)
    names = _names(sorted({*person_ids, int(turn.speaker_id), *(r.person_id for r in rows.values())}))

    candidates = []
    for rank, f in enumerate(ranking.ranked, start=1):
        code = _code(f, in_prompt, held, ranking.verdicts)
        verdict = verdict_of(f, code=code, rank=rank, limit=limit)
        candidates.append(Candidate(f, rank, verdict, names.get(f.person_id, ""), recorded.get(f.id), labels.get(f.id),
                                    _state(rows.get(f.id))))
    # recorded candidates the ranking of today's memory no longer has (invalidated or forgotten since)
    for fid in dict.fromkeys(i for i in [*in_prompt, *held, *recorded] if i not in ranked_ids):
        row = rows.get(fid)
        entry = recorded.get(fid)
        if row is None and entry is None:
            continue
        fact = _fact_from_row(row, now) if row is not None else recall.recorded_pool([entry])[0]
        code = "prompt" if fid in in_prompt else "forgetting" if fid in held else "gone"
        reason = _("当时的记录如此；这条事实之后已失效或被取代，今天的记忆里排不到它。") if row is not None else _(
            "这条事实已被遗忘。")
        if fid in shown_ids:
            reason = _("当时的记录如此；它的原文就是这段对话里已有的一句，现在不再进候选。")
        candidates.append(Candidate(fact, None, Verdict(code, str(VERDICT_LABELS[code]), reason),
                                    names.get(fact.person_id, ""), entry, labels.get(fid), _state(row)))
    listed = {c.fact.id for c in candidates}
    added = [
        Candidate(_fact_from_row(rows[fid], now), None, Verdict("gone", "", ""), names.get(rows[fid].person_id, ""),
                  None, label, _state(rows[fid]))
        for fid, label in labels.items() if fid not in listed and fid in rows
    ]

    episode_ids = [int(e) for e in turn.episode_ids or []]
    episodes = Episode.objects.in_bulk(episode_ids)
    counts = Counter(c.verdict.code for c in candidates)
    return Inspection(
        turn=turn, speaker=names.get(int(turn.speaker_id), ""),
        present=[(pid, names.get(pid, f"#{pid}")) for pid in person_ids],
        lines=[
            Line(m, _sender(m, names), positions.get(m.pk), *weights.get(m.pk, (None, None)))
            for m in messages
        ],
        candidates=candidates,
        prompt=sorted((c for c in candidates if c.verdict.code == "prompt"),
                      key=lambda c: (turn.prompt_fact_ids or []).index(c.fact.id)
                      if c.fact.id in (turn.prompt_fact_ids or []) else c.rank or 0),
        held_back=[c for c in candidates if c.verdict.code == "forgetting"],
        gated=[c for c in candidates if c.verdict.code == "gate"],
        added=added,
        episodes=[episodes[e] for e in episode_ids if e in episodes],
        missing_episodes=sum(1 for e in episode_ids if e not in episodes),
        profile_name=recorded_profile.get("name") if recorded_profile else None,
        profile_params=params,
        limit=limit,
        used_vector=query is not None,
        confirmed=confirmed,
        drift=drift,
        summary=[(code, str(label), counts[code]) for code, label in VERDICT_LABELS.items() if counts.get(code)],
        labels=labels,
        shown=[rows[fid] for fid in shown_ids if fid in rows],
    )


def _code(fact: Any, in_prompt: set[int], held: set[int], ranked: Mapping[int, str]) -> str:
    """The recorded outcome where there is one (prompt, held back by forgetting); else the ranking's — a
    fact the ranking of today's memory would put in the prompt that the turn did not is out of places."""
    if fact.id in in_prompt:
        return Verdict_.PROMPT
    if fact.id in held:
        return Verdict_.FORGETTING
    code = ranked.get(fact.id) or (Verdict_.LIMIT if fact.eligible else Verdict_.GATE)
    return Verdict_.LIMIT if code in (Verdict_.PROMPT, Verdict_.FORGETTING) else code


def _sender(message: Message, names: dict[int, str]) -> str:
    if message.sender_person_id:
        return names.get(message.sender_person_id) or _person_name(message.sender_person_id)
    return _("机器人") if message.role == "assistant" else ""


def _person_name(pid: int) -> str:
    person = Person.objects.filter(pk=pid).first()
    return str(person) if person else f"#{pid}"


def _label_json(label: Any) -> dict[str, Any] | None:
    if label is None:
        return None
    return {"relevant": label.relevant, "added": label.added, "user": label.user, "at": label.at}


def as_json(view: Inspection) -> dict[str, Any]:
    """An inspection as the API returns it (``GET /api/v1/tuning/turns/{id}``)."""
    turn = view.turn
    return {
        "turn": {
            "id": turn.pk, "stream": turn.stream_id, "stream_kind": turn.stream_kind, "speaker": turn.speaker_id,
            "speaker_name": view.speaker, "at": turn.at, "confirmed_at": turn.confirmed_at, "text": turn.text,
            "impression": turn.impression, "present": [{"id": pid, "name": name} for pid, name in view.present],
            "labels": view.label_count,
        },
        "conversation": [
            {"message": line.message.pk, "role": line.message.role, "sender": line.sender,
             "at": line.message.created_at, "content": line.message.content, "position": line.position,
             "lexical_weight": line.lexical_weight, "dense_weight": line.dense_weight}
            for line in view.lines
        ],
        "candidates": [
            {"fact": c.fact.id, "person": c.fact.person_id, "content": c.fact.content, "rank": c.rank,
             "verdict": c.verdict.code, "reason": c.verdict.reason, "state": c.state, "terms": c.fact.terms(),
             "label": _label_json(c.label)}
            for c in view.candidates
        ],
        "prompt": [c.fact.id for c in view.prompt],
        "held_back": {
            "forgetting": [c.fact.id for c in view.held_back],
            "gate": [c.fact.id for c in view.gated],
            "visibility": turn.visibility_blocked,
        },
        "added": [{"fact": c.fact.id, "content": c.fact.content, "label": _label_json(c.label)} for c in view.added],
        "episodes": [{"id": e.pk, "summary": e.summary, "ended_at": e.ended_at} for e in view.episodes],
        "profile": {"name": view.profile_name, "params": view.profile_params, "limit": view.limit,
                    "used_vector": view.used_vector},
        "drift": view.drift,
    }


# --------------------------------------------------------------------------- #
# Replay under two profiles
# --------------------------------------------------------------------------- #


@dataclass
class ReplaySide:
    label: str
    profile: str
    params: dict[str, Any]
    ranked: list[Any]
    verdicts: dict[int, str]
    recall: float | None
    ndcg: float | None
    k: int


@dataclass
class ReplayRow:
    fact_id: int
    content: str
    a_rank: int | None
    b_rank: int | None
    a_verdict: str
    b_verdict: str
    label: Any

    @property
    def changed(self) -> bool:
        return (self.a_verdict == "prompt") != (self.b_verdict == "prompt")

    @property
    def moved(self) -> bool:
        return self.a_rank != self.b_rank


def _side(sample: evaluation.TraceSample, target: Mapping[str, Any], vectors: evaluation.QueryVectors,
          label: str) -> ReplaySide:
    ev = evaluation.Evaluator(services.validate_params(target.get("params") or {}), vectors)
    _replayed, ranking, _vector = ev.ranking(sample)
    verdicts = {f.id: _code(f, set(), set(), ranking.verdicts) if f.id not in ranking.verdicts else ranking.verdicts[f.id]
                for f in ranking.ranked}
    scored = evaluation.score_turn(sample, [f.id for f in ranking.prompt], ev.k)
    return ReplaySide(label, target.get("profile") or "", ev.overrides, ranking.ranked, verdicts, scored["recall"],
                      scored["ndcg"], ev.k)


def replay(turn: Turn, a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The turn ranked afresh under targets ``a`` and ``b`` (``{label, profile, params}``), side by side."""
    labels = relevance.labels_of([turn.pk])
    sample = evaluation.sample_from_turn(turn, labels.get(turn.pk))
    vectors = evaluation.configured_query_vectors(serving=True)
    side_a = _side(sample, a, vectors, a.get("label", "A"))
    side_b = _side(sample, b, vectors, b.get("label", "B"))
    rank_a = {f.id: i for i, f in enumerate(side_a.ranked, start=1)}
    rank_b = {f.id: i for i, f in enumerate(side_b.ranked, start=1)}
    contents = {f.id: f.content for f in [*side_a.ranked, *side_b.ranked]}
    turn_labels = relevance.turn_labels(turn.pk)
    order = sorted(set(rank_a) | set(rank_b), key=lambda f: (min(rank_a.get(f, 10**6), rank_b.get(f, 10**6)), f))
    rows = [
        ReplayRow(f, contents.get(f, ""), rank_a.get(f), rank_b.get(f), side_a.verdicts.get(f, ""),
                  side_b.verdicts.get(f, ""), turn_labels.get(f))
        for f in order
    ]
    return {"a": side_a, "b": side_b, "rows": rows, "changed": sum(1 for r in rows if r.changed),
            "labelled": sample.labelled, "verdict_labels": VERDICT_LABELS}
