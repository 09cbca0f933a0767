"""Request and response schemas of the bot API (v1). Field names are the contract.

All instants are integer epoch milliseconds in ``0 … MAX_EPOCH_MS`` (before the year
9000). Every id is a positive 64-bit integer; bounds are part of the schema so
out-of-range input is a 422, never a database error. Request bodies are strict: a
JSON integer field takes only a JSON integer (not ``true``, not ``"5"``), a boolean
field only ``true``/``false``, and unknown fields are refused.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Any, Literal

from django.conf import settings
from ninja import Field
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, StringConstraints

from memory.engine.context import TURN_TEXT_MAX_CHARS
from memory.models import Fact, FactState

# --- scalar types ---------------------------------------------------------------

MAX_ID = 2**63 - 1
# The last instant an API input may name: 8999-12-31T23:59:59.999Z. Every page must be
# able to show it, and what derives from it (a due_at years later), in any time zone:
# local dates overflow from 9999-12-31 (253_402_272_000_000 in Asia/Shanghai).
MAX_EPOCH_MS = 221_845_391_999_999
FACT_MAX_CHARS = 2000
KNOWLEDGE_MAX_CHARS = 20_000
QUERY_MAX_CHARS = 2000
IMPORT_MAX_CHARS = 200_000
EMBEDDING_MAX_DIM = 4096



def _json_integer(value: Any) -> Any:
    """``212.0`` is the JSON integer 212 (JSON Schema's ``integer``); ``212.5``, ``true`` and
    ``"212"`` stay what they are and are refused by the strict integer check after this."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Integers of request bodies (the bodies are strict, see In); as a path or query
# parameter, where every value arrives as text, the same type parses the text.
JsonInt = Annotated[int, BeforeValidator(_json_integer)]
Id = Annotated[int, Field(ge=1, le=MAX_ID), BeforeValidator(_json_integer)]
EPOCH_MS_HELP = "epoch milliseconds, 0 … 221845391999999 (before the year 9000)"
EpochMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS, description=EPOCH_MS_HELP), BeforeValidator(_json_integer)]

# What the server checks after the fact, stated in the schema as patterns (unanchored:
# "contains a character of this class"). NOT_BLANK excludes exactly the characters
# Python's str.strip() removes, spelled out so every regex engine reads it the same way.
WHITESPACE = r"\t\n\v\f\r \x1c-\x1f\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = f"[^{WHITESPACE}]"
# memory.engine.similarity.exact_key keeps word characters and CJK ideographs; a text
# without any has an empty key and is refused ("must contain at least one letter or digit").
HAS_WORD = r"[\p{L}\p{N}_\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"




def _format_characters() -> str:
    """Unicode's format characters (category Cf) of the Basic Multilingual Plane as one regex class, in ``\\uXXXX``
    escapes every regex engine reads: zero-width space and joiners, bidi marks, embeddings, overrides and
    isolates, the word joiner, the BOM, soft hyphen …"""
    ranges: list[list[int]] = []
    for code in range(0x10000):
        if unicodedata.category(chr(code)) == "Cf":
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "[" + "".join(f"\\u{a:04x}" + (f"-\\u{b:04x}" if b > a else "") for a, b in ranges) + "]"


# An id (a platform, a stream's or a person's external id) names something the console lists and a bot
# resolves by equality: a format character in it makes an invisible id ("\u200b"), a reversed one
# ("\u202erel" shows as "ler") or two ids that look alike. Refused (422), not stripped: stripping would
# merge "\u202erel" into another stream "rel". Display names and texts keep them (emoji sequences).
FORMAT_CHARACTERS = _format_characters()
_FORMAT_RE = re.compile(FORMAT_CHARACTERS)


def _no_format_characters(value: str) -> str:
    found = _FORMAT_RE.search(value)
    if found:
        raise ValueError(f"must not contain invisible formatting characters (found U+{ord(found.group()):04X}:"
                         " zero-width, joiner or bidi control)")
    return value


ID_RULES: dict[str, Any] = {"pattern": NOT_BLANK, "not": {"pattern": FORMAT_CHARACTERS}}

# Stripped, then at least one character: the schema says "not blank" with NOT_BLANK, and "no format character".
Platform = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64), AfterValidator(_no_format_characters),
    Field(json_schema_extra=ID_RULES),
]
ExternalId = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), AfterValidator(_no_format_characters),
    Field(json_schema_extra=ID_RULES),
]


def message_max_chars() -> int:
    """The longest message text stored (``MESSAGE_MAX_CHARS``): the API's bound and the services'."""
    return settings.MESSAGE_MAX_CHARS


def _message_content_schema(schema: dict[str, Any]) -> None:
    """``maxLength`` is the configured ``MESSAGE_MAX_CHARS``, read when the schema is built."""
    schema["maxLength"] = message_max_chars()

DisplayName = Annotated[str, StringConstraints(strip_whitespace=True, max_length=200)]
StreamKindName = Literal["direct", "group", "desktop"]
EmbeddingValue = Annotated[float, Field(allow_inf_nan=False, ge=-1e6, le=1e6)]


class In(BaseModel):
    """Base of request bodies: unknown fields are rejected (a typo should not pass silently),
    and values are not coerced (``true`` is no integer, ``"123"`` no epoch, ``1`` no boolean).

    Request and response bodies are plain pydantic models, not ``ninja.Schema``: a Schema wraps
    every object it validates for Django attribute lookups (and validates an ``extra="forbid"``
    body twice), which nothing here needs — bodies are JSON, responses are the dicts of the
    output adapters below — and which cost about a millisecond a turn.
    """

    model_config = ConfigDict(extra="forbid", strict=True)


class Out(BaseModel):
    """Base of response bodies (see :class:`In`)."""


# --- refs -----------------------------------------------------------------------


class StreamRef(In):
    platform: Platform
    kind: StreamKindName
    external_id: ExternalId
    name: DisplayName = ""


class PersonRef(In):
    platform: Platform
    external_id: ExternalId
    name: DisplayName = ""


# --- errors ---------------------------------------------------------------------


class FieldError(Out):
    field: str = Field(description="dotted path of the offending field, e.g. body.stream.kind")
    message: str
    type: str = ""


class ErrorOut(Out):
    detail: str = Field(description="one sentence saying what went wrong")
    errors: list[FieldError] = Field(default_factory=list)


# --- messages -------------------------------------------------------------------


class MessageIn(In):
    # the view's rule "a user message needs its sender", stated in the schema
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"role": {"const": "user"}}, "required": ["role"]},
            "then": {"properties": {"sender": {"type": "object"}}, "required": ["sender"]},
        }
    )

    stream: StreamRef
    sender: PersonRef | None = Field(None, description="required when role is 'user'")
    role: Literal["user", "assistant"]
    content: str = Field(
        description="at most MESSAGE_MAX_CHARS characters (default 20000)", json_schema_extra=_message_content_schema
    )
    external_message_id: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    at: EpochMs | None = None


class MessagePatch(In):
    content: str = Field(
        description="at most MESSAGE_MAX_CHARS characters (default 20000)", json_schema_extra=_message_content_schema
    )


class MessageOut(Out):
    id: int
    stream_id: int
    person_id: int | None


# --- turns ----------------------------------------------------------------------


class TurnIn(In):
    stream: StreamRef
    speaker: PersonRef
    text: Annotated[str, StringConstraints(max_length=TURN_TEXT_MAX_CHARS)]
    impression: Annotated[str, StringConstraints(max_length=TURN_TEXT_MAX_CHARS)] = ""
    watermark_message_id: Id | None = None
    at: EpochMs | None = None


class ConfirmIn(In):
    query_embedding: Annotated[list[EmbeddingValue], Field(min_length=1, max_length=EMBEDDING_MAX_DIM)] | None = None
    at: EpochMs | None = None


class WorkingMessageOut(Out):
    id: int
    role: str
    person_id: int | None
    content: str
    at: int


class TurnFactOut(Out):
    id: int
    person_id: int
    kind: str
    slot: str
    content: str
    retention: float
    score: float
    conflict_slot: str | None = Field(None, description="the slot whose conflict group this fact belongs to")
    completed: bool = Field(False, description="added only to show a conflict group whole (not itself recalled)")


class EpisodeOut(Out):
    id: int
    summary: str
    started_at: int
    ended_at: int
    score: float | None = None


class TurnOut(Out):
    turn_id: int
    stream_id: int
    speaker_id: int
    working_memory: list[WorkingMessageOut]
    facts: list[TurnFactOut]
    episodes: list[EpisodeOut]


class ConfirmOut(Out):
    turn_id: int
    facts: list[TurnFactOut] = Field(description="the re-ranked prompt facts; exactly these are reinforced")
    conflict_members: list[TurnFactOut] = Field(
        description="members of the prompt facts' slot conflict groups missing from `facts`, to show them whole"
    )
    reinforced: list[int]
    used_vector: bool


# --- actions --------------------------------------------------------------------


class RecallIn(In):
    stream: StreamRef
    speaker: PersonRef
    query: Annotated[str, StringConstraints(max_length=QUERY_MAX_CHARS)]
    cross_person: bool = False
    hops: Annotated[int, Field(ge=0, le=3), BeforeValidator(_json_integer)] | None = None
    at: EpochMs | None = None
    query_embedding: Annotated[list[EmbeddingValue], Field(min_length=1, max_length=EMBEDDING_MAX_DIM)] | None = None


class RankTermsOut(Out):
    """Every term of a fact's score as the ranking (memory/engine/scoring.py: rank) computed it."""

    id: int
    content: str
    source: str = Field(description="lexical | dense: the channel that brought the fact")
    bm25: float | None
    lexical: float = Field(description="relevance_from_bm25 (0 without a lexical match)")
    coverage: float | None = Field(None, description="share of the query's achievable IDF mass the fact matches")
    cosine: float | None
    relevance: float | None = Field(None, description="fused relevance with a cosine, else the lexical one")
    calibrated: float | None = Field(None, description="relevance as a share of the pool's best (reference profile: relevance)")
    retention: float
    prior: float | None = Field(None, description="the retention term of the score")
    score: float
    eligible: bool = Field(True, description="False: under both relevance floors, never recalled")
    timed: bool = Field(False, description="told inside the time the question names: time_boost added to the score")
    told: float | None = Field(
        None, description="share of the question's informative words that the conversation the fact was heard in "
        "holds (told_gain times it added to the score); null: not read (no message recorded, or held by the gate)",
    )


class SpreadHitOut(Out):
    kind: str
    id: int
    content: str
    score: float
    hops: int


class RecallOut(Out):
    stream_id: int
    speaker_id: int
    facts: list[TurnFactOut]
    episodes: list[EpisodeOut]
    spread: list[SpreadHitOut]
    observation: str
    fact_terms: list[RankTermsOut] = Field(default_factory=list, description="the score terms of `facts`, same order")
    held_back: list[RankTermsOut] = Field(
        default_factory=list, description="facts relevance alone would have recalled but retention ranked out"
    )
    used_vector: bool = False


class InspectIn(In):
    stream: StreamRef
    query: Annotated[str, StringConstraints(max_length=QUERY_MAX_CHARS)]
    before_message_id: Id | None = None
    limit: Annotated[int, Field(ge=1, le=50), BeforeValidator(_json_integer)] = 6


class InspectMessageOut(Out):
    id: int
    role: str
    person_id: int | None
    content: str
    at: int
    score: float | None = None


class InspectOut(Out):
    stream_id: int
    messages: list[InspectMessageOut]


class ConsultIn(In):
    query: Annotated[str, StringConstraints(max_length=QUERY_MAX_CHARS)]
    limit: Annotated[int, Field(ge=1, le=50), BeforeValidator(_json_integer)] = 5
    at: EpochMs | None = None


class KnowledgeHitOut(Out):
    id: int
    content: str
    score: float


class ConsultOut(Out):
    knowledge: list[KnowledgeHitOut]


# --- facts ----------------------------------------------------------------------


class FactIn(In):
    person: PersonRef
    kind: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=32), Field(json_schema_extra={"pattern": NOT_BLANK})
    ]
    slot: Annotated[str, StringConstraints(strip_whitespace=True, max_length=32)] = ""
    content: Annotated[str, StringConstraints(max_length=FACT_MAX_CHARS)] = Field(
        description="must contain at least one letter or digit", json_schema_extra={"pattern": HAS_WORD}
    )
    supersedes: Id | None = None
    stream_kind: StreamKindName | None = Field(
        None, description="where the fact was heard (group → group origin, else direct); absent → legacy"
    )
    source_message_id: Id | None = Field(
        None, description="the stored message it was heard in (404 if there is none): a turn that asks about "
        "what was said around that message ranks the fact higher",
    )
    at: EpochMs | None = None


class FactWriteOut(Out):
    fact_id: int
    person_id: int
    created: bool
    conflict_with: list[int]
    superseded: int | None
    origin_promoted: bool


class FactRowOut(Out):
    id: int
    kind: str
    content: str
    slot: str
    origin_kind: str
    strength: float
    retention: float
    half_life_hours: float
    active: bool
    invalid: bool
    pinned: bool
    superseded_by: int | None
    due_at: int
    hit_count: int
    last_hit_at: int | None
    updated_at: int
    created_at: int


class PersonFactsOut(Out):
    person_id: int
    at: int
    facts: list[FactRowOut]


# --- knowledge ------------------------------------------------------------------


class KnowledgeIn(In):
    content: Annotated[str, StringConstraints(max_length=KNOWLEDGE_MAX_CHARS)] = Field(
        description="must contain at least one letter or digit", json_schema_extra={"pattern": HAS_WORD}
    )
    source: Annotated[str, StringConstraints(strip_whitespace=True, max_length=64)] = "api"
    at: EpochMs | None = None


class KnowledgeOut(Out):
    id: int
    created: bool


class ImportIn(In):
    text: str = Field(
        description=f"not blank, at most {IMPORT_MAX_CHARS} characters; split into chunks of ≤ 1200",
        json_schema_extra={"pattern": NOT_BLANK, "maxLength": IMPORT_MAX_CHARS},
    )
    origin_name: Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] = ""
    kind: Literal["paste", "upload"] = "paste"


class ImportOut(Out):
    job_id: int
    batch_id: int | None = None
    status: str
    progress: int = 0
    total: int = 0
    result: dict[str, Any] = Field(default_factory=dict)
    error: str = ""


# --- output adapters ----------------------------------------------------------------
# The read path returns dataclasses (ScopedFact, KnowledgeHit …) or model rows; these
# turn either into the dicts of the response schemas above.


def _get(obj: Any, *names: str, default: Any = None) -> Any:
    for name in names:
        if isinstance(obj, dict):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    return default


def _float(value: Any) -> float:
    return 0.0 if value is None else float(value)


def working_message_out(m: Any) -> dict[str, Any]:
    return {
        "id": _get(m, "id", "pk"),
        "role": _get(m, "role", default=""),
        "person_id": _get(m, "person_id", "sender_person_id"),
        "content": _get(m, "content", default=""),
        "at": _get(m, "at", "created_at", default=0),
    }


def fact_out(f: Any) -> dict[str, Any]:
    """A recalled fact; ``recall.PromptFact`` wrappers carry the conflict slot."""
    conflict_slot = _get(f, "conflict_slot", default=None) or None
    completed = bool(_get(f, "completed", default=False))
    inner = _get(f, "fact", default=None)
    if inner is not None and not isinstance(inner, str):
        f = inner
    slot = _get(f, "slot", default="") or ""
    return {
        "id": _get(f, "id", "pk"),
        "person_id": _get(f, "person_id"),
        "kind": _get(f, "kind", default=""),
        "slot": slot,
        "content": _get(f, "content", default=""),
        "retention": _float(_get(f, "retention")),
        "score": _float(_get(f, "score")),
        "conflict_slot": conflict_slot,
        "completed": completed,
    }


def episode_out(e: Any) -> dict[str, Any]:
    score = _get(e, "score")
    return {
        "id": _get(e, "id", "pk"),
        "summary": _get(e, "summary", default=""),
        "started_at": _get(e, "started_at", default=0),
        "ended_at": _get(e, "ended_at", default=0),
        "score": None if score is None else float(score),
    }


def rank_terms_out(f: Any) -> dict[str, Any]:
    """A ranked fact (``selectors.ScopedFact``) with every term of its score."""
    terms = f.terms()
    return {"id": f.id, "content": f.content, **{k: v for k, v in terms.items() if k not in ("factId", "active")}}


def spread_hit_out(h: Any) -> dict[str, Any]:
    return {
        "kind": _get(h, "kind", "ref_kind", default=""),
        "id": _get(h, "id", "ref_id", default=0),
        "content": _get(h, "content", "text", default="") or "",
        "score": _float(_get(h, "score")),
        "hops": int(_get(h, "hops", default=0) or 0),
    }


def inspect_message_out(m: Any) -> dict[str, Any]:
    out = working_message_out(m)
    score = _get(m, "score")
    out["score"] = None if score is None else float(score)
    return out


def knowledge_hit_out(h: Any) -> dict[str, Any]:
    return {"id": _get(h, "id", "pk"), "content": _get(h, "content", default=""), "score": _float(_get(h, "score"))}


def fact_row(fact: Fact, now: int) -> dict[str, Any]:
    """A fact row with its decay state at ``now`` (the console's and curation API's view)."""
    return {
        "id": fact.pk,
        "kind": fact.kind,
        "content": fact.content,
        "slot": fact.slot,
        "origin_kind": fact.origin_kind,
        "strength": fact.strength,
        "retention": fact.retention_at(now),
        "half_life_hours": fact.half_life_hours,
        "active": fact.active,
        "invalid": fact.state in (FactState.INVALID, FactState.SUPERSEDED),
        "pinned": fact.pinned,
        "superseded_by": fact.superseded_by_id,
        "due_at": fact.due_at,
        "hit_count": fact.hit_count,
        "last_hit_at": fact.last_hit_at,
        "updated_at": fact.updated_at,
        "created_at": fact.created_at,
    }
