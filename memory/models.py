"""The memory layers and their bookkeeping tables.

Table names follow the reference specification (``facts``, ``messages`` …) so
the raw SQL of the lexical index and the specification read the same. Every
memory timestamp is an integer epoch in **milliseconds**.
"""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from memory.engine import decay


def vector_indexes(table: str, *, q8_pending: bool = True) -> list[models.Index]:
    """The partial indexes the vector backfill reads: rows without a vector and (``q8_pending``)
    rows whose SQ8 copy is still to be written."""
    no_vector = models.Index(fields=["id"], condition=models.Q(embedding__isnull=True), name=f"idx_{table}_no_vector")
    if not q8_pending:
        return [no_vector]
    pending = models.Q(embedding__isnull=False, embedding_q8__isnull=True)
    return [no_vector, models.Index(fields=["id"], condition=pending, name=f"idx_{table}_q8_pending")]


class StreamKind(models.TextChoices):
    DIRECT = "direct", _("私聊")
    GROUP = "group", _("群聊")
    DESKTOP = "desktop", _("桌面")


class Person(models.Model):
    class Kind(models.TextChoices):
        OWNER = "owner", _("主人")
        USER = "user", _("用户")

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.USER)
    display_name = models.CharField(max_length=200, blank=True, default="")
    first_seen_at = models.BigIntegerField()

    class Meta:
        db_table = "persons"

    def __str__(self) -> str:
        return self.display_name or f"#{self.pk}"


class Identity(models.Model):
    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="identities")
    platform = models.CharField(max_length=64)
    external_id = models.CharField(max_length=200)
    display_name = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        verbose_name_plural = "identities"
        db_table = "identities"
        constraints = [models.UniqueConstraint(fields=["platform", "external_id"], name="identity_platform_external")]

    def __str__(self) -> str:
        return f"{self.platform}:{self.external_id}"


class Stream(models.Model):
    platform = models.CharField(max_length=64)
    kind = models.CharField(max_length=16, choices=StreamKind.choices)
    external_id = models.CharField(max_length=200)
    display_name = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        db_table = "streams"
        constraints = [
            models.UniqueConstraint(fields=["platform", "kind", "external_id"], name="stream_platform_kind_external")
        ]

    def __str__(self) -> str:
        return self.display_name or f"{self.platform}:{self.kind}:{self.external_id}"


class Episode(models.Model):
    class Kind(models.TextChoices):
        CONVERSATION = "conversation", _("对话情节")
        UNSUMMARIZED = "unsummarized", _("未总结")

    kind = models.CharField(max_length=32, choices=Kind.choices, default=Kind.CONVERSATION)
    summary = models.TextField()
    started_at = models.BigIntegerField()
    ended_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="episodes")
    needs_rebuild = models.BooleanField(default=False)
    source = models.CharField(max_length=64, blank=True, default="")  # summariser label

    class Meta:
        db_table = "episodes"
        indexes = [
            models.Index(fields=["-ended_at"], name="idx_episodes_time"),
            models.Index(fields=["stream", "-ended_at"], name="idx_episodes_stream_time"),
        ]

    def __str__(self) -> str:
        return f"Episode #{self.pk}"

    @property
    def is_placeholder(self) -> bool:
        return self.kind == self.Kind.UNSUMMARIZED


class EpisodeCue(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="cues")
    cue = models.TextField()
    tokens = models.TextField(default="", db_default="", blank=True)  # what its FTS row holds (the resident index reads it)

    class Meta:
        db_table = "episode_cues"
        indexes = [models.Index(fields=["episode"], name="idx_cues_episode")]


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user", _("用户")
        ASSISTANT = "assistant", _("机器人")
        SYSTEM = "system", _("系统")

    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    created_at = models.BigIntegerField()
    # no index of their own: idx_messages_pending and idx_messages_stream_sender lead with them
    episode = models.ForeignKey(
        Episode, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages", db_index=False
    )
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="messages", db_index=False)
    sender_person = models.ForeignKey(Person, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    external_message_id = models.CharField(max_length=200, null=True, blank=True)
    tokens = models.TextField(default="", db_default="", blank=True)  # what messages_fts holds for this row ('' = no FTS row)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_q8 = models.BinaryField(null=True, blank=True)

    class Meta:
        db_table = "messages"
        indexes = [
            models.Index(fields=["episode", "id"], name="idx_messages_pending"),
            models.Index(fields=["stream", "episode", "id"], name="idx_messages_stream_pending"),
            models.Index(fields=["stream", "created_at"], name="idx_messages_stream_created"),
            # covering: a stream's newest message and its recent speakers (every turn) without reading rows
            models.Index(fields=["stream", "id", "sender_person"], name="idx_messages_stream_sender"),
            *vector_indexes("messages", q8_pending=False),
            # covering: a stream's indexed tokens without reading its rows (resident message statistics)
            models.Index(
                fields=["stream", "id", "tokens"], condition=~models.Q(tokens=""), name="idx_messages_stream_tokens"
            ),
            # covering: inspect's dense channel reads a stream's SQ8 vectors from the index (~7 a page)
            models.Index(
                fields=["stream", "id", "embedding_q8"], condition=models.Q(embedding_q8__isnull=False),
                name="idx_messages_stream_q8",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "external_message_id"],
                condition=models.Q(external_message_id__isnull=False),
                name="message_stream_external_unique",
            )
        ]

    def __str__(self) -> str:
        return f"Message #{self.pk}"


class FactState(models.TextChoices):
    """What a fact is now. Frozen is never "deleted": it revives when recalled or reinforced."""

    ACTIVE = "active", _("活跃")
    FROZEN = "frozen", _("已冻结")  # retention fell below 0.1: not surfaced on its own
    INVALID = "invalid", _("已失效")  # invalidated by hand (superseded by itself)
    SUPERSEDED = "superseded", _("已被取代")  # replaced by a newer fact


#: A filter beside the states: pinned facts (any state) — ``Fact.objects.in_state(PINNED)``.
PINNED = "pinned"

_STATE_CONDITIONS: dict[str, models.Q] = {
    FactState.ACTIVE: models.Q(superseded_by__isnull=True, active=True),
    FactState.FROZEN: models.Q(superseded_by__isnull=True, active=False),
    FactState.INVALID: models.Q(superseded_by=models.F("id")),
    FactState.SUPERSEDED: models.Q(superseded_by__isnull=False) & ~models.Q(superseded_by=models.F("id")),
    PINNED: models.Q(half_life_hours__gte=decay.PIN_HALF_LIFE_HOURS),
}


class FactQuerySet(models.QuerySet["Fact"]):
    def valid(self) -> FactQuerySet:
        """Facts nobody replaced or invalidated (active or frozen)."""
        return self.filter(superseded_by__isnull=True)

    def in_state(self, state: str) -> FactQuerySet:
        """Facts in ``state`` (a :class:`FactState` value, or :data:`PINNED`)."""
        return self.filter(Fact.state_condition(state))


class Fact(models.Model):
    class Origin(models.TextChoices):
        """Where a fact was learnt: a direct chat, a group, or before origins were recorded."""

        LEGACY = "legacy", _("旧数据")
        DIRECT = "direct", _("私聊")
        GROUP = "group", _("群聊")

    person = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="facts")
    kind = models.CharField(max_length=32, default="未分类")
    content = models.TextField()
    content_key = models.TextField()
    strength = models.FloatField()
    half_life_hours = models.FloatField()
    updated_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    hit_count = models.IntegerField(default=0)
    last_hit_at = models.BigIntegerField(null=True, blank=True)
    due_at = models.BigIntegerField()
    active = models.BooleanField(default=True)
    tokens = models.TextField(default="", blank=True)  # what its FTS row holds (the resident index reads it)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_q8 = models.BinaryField(null=True, blank=True)
    origin_kind = models.CharField(max_length=16, choices=Origin.choices, default=Origin.LEGACY)
    slot = models.CharField(max_length=32, default="", blank=True)
    # NULL = valid; another fact's id = superseded by it; own id = manual invalidation.
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False,
        db_column="superseded_by",
    )
    source = models.CharField(max_length=120, default="", blank=True)  # where it was heard (extraction, api …)
    # the message it was heard in (the extractor's, or the bot's source_message_id): the conversation around
    # it lifts the fact when a turn asks about what was said there (memory/selectors/told.py)
    source_message = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False,
    )

    objects = FactQuerySet.as_manager()

    class Meta:
        db_table = "facts"
        constraints = [models.UniqueConstraint(fields=["person", "content_key"], name="fact_person_content_key")]
        indexes = [
            models.Index(fields=["active", "due_at"], name="idx_facts_due"),
            models.Index(fields=["person", "active"], name="idx_facts_person_active"),
            models.Index(fields=["person", "slot"], name="idx_facts_person_slot"),
            # the console's fact table: newest first, and its list of kinds
            models.Index(fields=["-updated_at", "-id"], name="idx_facts_updated"),
            models.Index(fields=["kind"], name="idx_facts_kind"),
            # dashboard counts read these instead of scanning rows that carry 2 KB vectors
            models.Index(fields=["active", "superseded_by", "half_life_hours"], name="idx_facts_state"),
            # facts learnt since a moment: the dashboard's "learnt today", the fact table's date filters
            models.Index(fields=["created_at"], name="idx_facts_created"),
            *vector_indexes("facts"),
        ]

    def __str__(self) -> str:
        return f"Fact #{self.pk}"

    @staticmethod
    def state_condition(state: str) -> models.Q:
        """The row condition of ``state`` (a :class:`FactState` value, or :data:`PINNED`), for filters and counts."""
        return _STATE_CONDITIONS[state]

    @property
    def state(self) -> FactState:
        if not self.valid:
            return FactState.INVALID if self.superseded_by_id == self.pk else FactState.SUPERSEDED
        return FactState.ACTIVE if self.active else FactState.FROZEN

    @property
    def valid(self) -> bool:
        """Nobody replaced or invalidated it (active or frozen): ``Fact.objects.valid()`` for rows."""
        return self.superseded_by_id is None

    @property
    def pinned(self) -> bool:
        return decay.is_pinned(self.half_life_hours)

    def retention_at(self, now: int) -> float:
        """Retention (0..1) at ``now`` (epoch ms): strength decayed over the half-life since ``updated_at``."""
        return decay.retention(self.strength, self.updated_at, self.half_life_hours, now)


class ImportBatch(models.Model):
    class Kind(models.TextChoices):
        PASTE = "paste", _("粘贴")
        UPLOAD = "upload", _("上传")

    class Status(models.TextChoices):
        RUNNING = "running", _("运行中")
        DONE = "done", _("完成")
        FAILED = "failed", _("失败")

    kind = models.CharField(max_length=16, choices=Kind.choices)
    origin_name = models.CharField(max_length=255, default="", blank=True)
    summary = models.CharField(max_length=120, default="", blank=True)
    submitted = models.IntegerField(default=0)
    added = models.IntegerField(default=0)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    created_at = models.BigIntegerField()
    finished_at = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(default="", blank=True)

    class Meta:
        verbose_name_plural = "import batches"
        db_table = "import_batches"
        indexes = [models.Index(fields=["created_at"], name="idx_import_batches_created")]
        permissions = [("import_knowledge", "Can import knowledge and delete import batches")]

    def __str__(self) -> str:
        return f"Import #{self.pk}"


class Knowledge(models.Model):
    content = models.TextField()
    content_key = models.TextField(unique=True)
    source = models.CharField(max_length=64, default="", blank=True)
    tokens = models.TextField(default="", blank=True)  # what its FTS row holds (the resident index reads it)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_q8 = models.BinaryField(null=True, blank=True)
    created_at = models.BigIntegerField()
    hit_count = models.IntegerField(default=0)
    last_hit_at = models.BigIntegerField(null=True, blank=True)
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.CASCADE, related_name="knowledge"
    )

    class Meta:
        verbose_name_plural = "knowledge"
        db_table = "knowledge"
        indexes = [
            models.Index(fields=["import_batch"], name="idx_knowledge_import_batch"),
            *vector_indexes("knowledge"),
        ]

    def __str__(self) -> str:
        return f"Knowledge #{self.pk}"


class KnowledgeNode(models.Model):
    """A concept of the concept graph (co-occurrence of keywords in knowledge)."""

    concept = models.CharField(max_length=200, unique=True)
    created_at = models.BigIntegerField()

    class Meta:
        db_table = "knowledge_nodes"

    def __str__(self) -> str:
        return self.concept


class KnowledgeEdge(models.Model):
    source = models.ForeignKey(KnowledgeNode, on_delete=models.CASCADE, related_name="+")
    target = models.ForeignKey(KnowledgeNode, on_delete=models.CASCADE, related_name="+")
    strength = models.FloatField(default=1.0)  # a co-occurrence count, not a probability
    updated_at = models.BigIntegerField()

    class Meta:
        db_table = "knowledge_edges"
        constraints = [models.UniqueConstraint(fields=["source", "target"], name="knowledge_edge_pair")]
        indexes = [models.Index(fields=["source"], name="idx_knowledge_edges_source")]


class MemoryNode(models.Model):
    """A pointer to a fact, episode or knowledge row in the association graph."""

    class RefKind(models.TextChoices):
        FACT = "fact", _("事实")
        EPISODE = "episode", _("情节")
        KNOWLEDGE = "knowledge", _("知识")

    ref_kind = models.CharField(max_length=16, choices=RefKind.choices)
    ref_id = models.BigIntegerField()

    class Meta:
        db_table = "memory_nodes"
        constraints = [models.UniqueConstraint(fields=["ref_kind", "ref_id"], name="memory_node_ref")]

    def __str__(self) -> str:
        return f"{self.ref_kind}#{self.ref_id}"


class MemoryEdge(models.Model):
    """Undirected co-activation edge, stored once with ``source_id < target_id``."""

    source = models.ForeignKey(MemoryNode, on_delete=models.CASCADE, related_name="+")
    target = models.ForeignKey(MemoryNode, on_delete=models.CASCADE, related_name="+")
    strength = models.FloatField(default=0.35)
    updated_at = models.BigIntegerField()
    active = models.BooleanField(default=True)

    class Meta:
        db_table = "memory_edges"
        constraints = [
            models.UniqueConstraint(fields=["source", "target"], name="memory_edge_pair"),
            models.CheckConstraint(condition=models.Q(source__lt=models.F("target")), name="memory_edge_ordered"),
        ]
        # on PostgreSQL they also carry the far end and the strength, so a spread reads no edge rows
        # (migration 0034, which gives memory_nodes an (id) INCLUDE (ref_kind, ref_id) index for the same reason)
        indexes = [
            models.Index(fields=["active", "source"], name="idx_memory_edges_source"),
            models.Index(fields=["active", "target"], name="idx_memory_edges_target"),
        ]
        permissions = [("preview_association", "Can view the association graph and preview spreading")]


#: The meta row of the fact-extraction cursors: ``{stream id: id of the last message given to the extractor}``.
EXTRACT_CURSOR_KEY = "fact_extract_cursor"


class Meta(models.Model):
    """Key/value store: cursors (:data:`EXTRACT_CURSOR_KEY`), the active tuning profile, revision counters."""

    key = models.CharField(max_length=200, primary_key=True)
    value = models.TextField()

    class Meta:
        db_table = "meta"

    def __str__(self) -> str:
        return self.key


class Change(models.Model):
    """The change log resident indexes read (memory/search/changes.py): one row per inserted row.

    Written by database triggers on facts, episode cues and knowledge (and messages on
    PostgreSQL, migration 0024). ``xid`` is the
    writing transaction's id on PostgreSQL (``pg_current_xact_id()``), so that a reader
    can tell which changes a snapshot may not have seen yet; SQLite leaves it NULL (one
    writer at a time: the log's id is the commit order).

    PostgreSQL also logs a message's stored tokens changing and a message with tokens
    being deleted (migration 0025): ``old_tokens`` / ``scope`` are the row's tokens and
    stream before the change (NULL for an insert), so the resident message statistics
    take the old row's share back out instead of reloading.
    """

    source = models.CharField(max_length=32)
    row_id = models.BigIntegerField()
    xid = models.BigIntegerField(null=True, blank=True)
    scope = models.BigIntegerField(null=True, blank=True)
    old_tokens = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "memory_changes"
        indexes = [models.Index(fields=["source", "xid"], name="idx_changes_source_xid")]

    def __str__(self) -> str:
        return f"{self.source}:{self.row_id}"


class PipelineEvent(models.Model):
    """The event ledger: observation events of the memory pipeline."""

    seq = models.BigAutoField(primary_key=True)
    at = models.BigIntegerField()
    stream_id = models.BigIntegerField(null=True, blank=True)
    turn_id = models.BigIntegerField(null=True, blank=True)
    stage = models.CharField(max_length=64, default="", blank=True)
    kind = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)

    class Meta:
        db_table = "pipeline_events"
        indexes = [
            models.Index(fields=["at"], name="idx_pipeline_events_at"),
            models.Index(fields=["kind", "seq"], name="idx_pipeline_events_kind"),
            models.Index(fields=["stream_id", "seq"], name="idx_pipeline_events_stream"),
            models.Index(fields=["turn_id", "seq"], name="idx_pipeline_events_turn"),
        ]

    def __str__(self) -> str:
        return f"{self.kind}@{self.at}"


class VectorSpace(models.Model):
    """Which embedding space the stored vectors of a consumer belong to."""

    class Consumer(models.TextChoices):
        FACTS = "facts", _("事实")
        KNOWLEDGE = "knowledge", _("知识")
        MESSAGES = "messages", _("消息")

    consumer = models.CharField(max_length=32, primary_key=True, choices=Consumer.choices)
    model = models.CharField(max_length=200)
    api_format = models.CharField(max_length=32)
    dim = models.IntegerField()
    recipe = models.CharField(max_length=64, default="content")
    updated_at = models.BigIntegerField()

    class Meta:
        db_table = "vector_space"

    def __str__(self) -> str:
        return f"{self.consumer}: {self.model}/{self.dim}"


class Turn(models.Model):
    """One bot turn: the lexical pool served, then the confirmed prompt facts."""

    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="turns")
    speaker = models.ForeignKey(Person, on_delete=models.CASCADE, related_name="+")
    at = models.BigIntegerField()
    text = models.TextField()
    impression = models.TextField(default="", blank=True)
    watermark_message_id = models.BigIntegerField(null=True, blank=True)
    stream_kind = models.CharField(max_length=16)
    present_person_ids = models.JSONField(default=list)
    pool = models.JSONField(default=list)  # [{factId, score, lexical, retention, personId, halfLife}]
    prompt_fact_ids = models.JSONField(default=list)
    confirmed_at = models.BigIntegerField(null=True, blank=True)
    reinforced_fact_ids = models.JSONField(default=list)
    # the recent messages that joined the turn's query, newest first (recall.recent_context)
    context_message_ids = models.JSONField(default=list)
    # eligible facts relevance alone would have put in the prompt but retention ranked out
    held_back_fact_ids = models.JSONField(default=list)
    # what the turn inspector shows of the turn as it happened: the episodes it recalled, the
    # profile in force ({"name", "params"}; empty before it was recorded) and how many facts
    # visibility held back before ranking (heard in private, the turn in a group)
    episode_ids = models.JSONField(default=list)
    profile = models.JSONField(default=dict)
    visibility_blocked = models.IntegerField(default=0)

    class Meta:
        db_table = "turns"
        indexes = [
            models.Index(fields=["stream", "at"], name="idx_turns_stream_at"),
            models.Index(fields=["speaker", "at"], name="idx_turns_speaker_at"),
            models.Index(fields=["at"], name="idx_turns_at"),
        ]
        permissions = [("preview_recall", "Can use the recall playground")]

    def __str__(self) -> str:
        return f"Turn #{self.pk}"


class QueueFailure(models.Model):
    """Consecutive failures of the head batch of a background queue.

    Persisted (not kept in process memory) so several workers and restarts
    agree on when a stuck batch is given up.
    """

    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="+")
    class Queue(models.TextChoices):
        SUMMARIZE = "summarize", _("总结")
        EXTRACT = "extract", _("抽取")

    queue = models.CharField(max_length=16, choices=Queue.choices)
    head_message_id = models.BigIntegerField()
    failures = models.IntegerField(default=0)
    last_error = models.TextField(default="", blank=True)
    updated_at = models.BigIntegerField()

    class Meta:
        db_table = "queue_failures"
        constraints = [models.UniqueConstraint(fields=["stream", "queue"], name="queue_failure_stream_queue")]


class Job(models.Model):
    """Long background work with progress, shown by the console."""

    class Status(models.TextChoices):
        QUEUED = "queued", _("排队中")
        RUNNING = "running", _("运行中")
        DONE = "done", _("完成")
        FAILED = "failed", _("失败")

    class Kind(models.TextChoices):
        """What a job does, in an operator's words."""

        IMPORT = "import", _("导入知识")
        EVALUATE = "evaluate", _("检索评估")
        COMPARE = "compare", _("参数对比")
        FIT = "fit", _("按标注拟合参数")
        BACKFILL = "backfill", _("补全向量")
        DECAY = "decay", _("记忆衰减")
        TUNING_PROBE = "tuning_probe", _("调优探针")

    kind = models.CharField(max_length=32, choices=Kind.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    progress = models.IntegerField(default=0)
    total = models.IntegerField(default=0)
    error = models.TextField(default="", blank=True)
    params = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    created_by = models.CharField(max_length=150, default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The lease of a running job: the worker's node name and the last sign of life (start and
    # every progress write). A job whose worker is gone is re-queued or failed by
    # memory.dispatch.jobs.recover_orphaned_jobs (worker start-up and beat).
    worker = models.CharField(max_length=200, default="", blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.IntegerField(default=0)

    class Meta:
        db_table = "jobs"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk}"

    @property
    def finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def percent(self) -> int:
        if self.status == self.Status.DONE:
            return 100
        return int(100 * self.progress / self.total) if self.total else 0


class ApiToken(models.Model):
    """A bot's bearer token; only its SHA-256 is stored.

    ``scopes`` lists what the token may do (``memory.api.auth.SCOPES``; ``admin`` implies all).
    A revoked token keeps its row (name, dates) for the record and is refused everywhere.
    """

    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=150, default="", blank=True)

    class Meta:
        db_table = "api_tokens"
        permissions = [("manage_api_tokens", "Can list, create and revoke API tokens")]

    def __str__(self) -> str:
        return self.name

    def has_scope(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


class ForgetRecord(models.Model):
    """One carried-out forgetting: who, when, what kind of target and how many rows — never the text."""

    at = models.BigIntegerField()
    user = models.CharField(max_length=150, default="", blank=True)  # console user or api:<token name>
    class Target(models.TextChoices):
        MESSAGE = "message", _("消息")
        FACT = "fact", _("事实")
        EPISODE = "episode", _("情节")
        PERSON = "person", _("人物")
        STREAM = "stream", _("会话")

    target = models.CharField(max_length=16, choices=Target.choices)
    target_id = models.BigIntegerField()
    counts = models.JSONField(default=dict)

    class Meta:
        db_table = "forget_log"
        ordering = ["-id"]
        permissions = [("forget_memory", "Can preview and carry out forgetting"),
                       ("export_person", "Can export everything stored about a person")]

    def __str__(self) -> str:
        return f"forget {self.target} #{self.target_id}"


class FactOperation(models.Model):
    """The fact-operations journal: one row per change to a fact, with what it was before (``prev``).

    Written by :func:`memory.services.journal_operation` — by ``add_fact`` when a fact
    supersedes another, and by every curation service (pin, invalidate, restore,
    replace, adjudicate, undo). Read by curation, export and forgetting. The table kept
    the name it had when the curation app owned the model; ``curation.models.FactOperation``
    is a proxy of this one that carries the curation permissions.
    """

    class Op(models.TextChoices):
        INVALIDATE = "invalidate", _("标失效")
        RESTORE = "restore", _("恢复")
        PIN = "pin", _("永久保留")
        UNPIN = "unpin", _("取消永久保留")
        SUPERSEDE = "supersede", _("标记取代")
        REPLACE = "replace", _("人工取代")
        ADJUDICATE = "adjudicate", _("冲突裁决")
        UNDO = "undo", _("撤销")

    class Actor(models.TextChoices):
        MANUAL = "manual", _("人工")
        AUTO = "auto", _("系统自动")

    at = models.BigIntegerField()
    actor = models.CharField(max_length=16, choices=Actor.choices)
    op = models.CharField(max_length=16, choices=Op.choices)
    person = models.ForeignKey("memory.Person", on_delete=models.CASCADE, related_name="+", db_constraint=False)
    fact = models.ForeignKey("memory.Fact", on_delete=models.CASCADE, related_name="operations", db_constraint=False)
    related_fact = models.ForeignKey(
        "memory.Fact", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    prev = models.JSONField(default=dict)
    undone_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    undo_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    user = models.CharField(max_length=150, default="", blank=True)  # console user or API token name

    class Meta:
        db_table = "fact_operations"
        indexes = [
            models.Index(fields=["fact"], name="idx_fact_operations_fact"),
            models.Index(fields=["person", "at"], name="idx_fact_operations_person"),
        ]

    def __str__(self) -> str:
        return f"{self.op} #{self.pk}"
