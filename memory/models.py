"""The memory layers and their bookkeeping tables.

Table names follow the reference specification (``facts``, ``messages`` …) so
the raw SQL of the lexical index and the specification read the same. Every
memory timestamp is an integer epoch in **milliseconds**.
"""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class StreamKind(models.TextChoices):
    DIRECT = "direct", _("私聊")
    GROUP = "group", _("群聊")
    DESKTOP = "desktop", _("桌面")


class Person(models.Model):
    kind = models.CharField(max_length=16, default="user")  # owner | user
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
    CONVERSATION = "conversation"
    UNSUMMARIZED = "unsummarized"

    kind = models.CharField(max_length=32, default=CONVERSATION)
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
        return self.kind == self.UNSUMMARIZED


class EpisodeCue(models.Model):
    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="cues")
    cue = models.TextField()
    tokens = models.TextField(default="", db_default="", blank=True)  # what its FTS row holds (the resident index reads it)

    class Meta:
        db_table = "episode_cues"
        indexes = [models.Index(fields=["episode"], name="idx_cues_episode")]


class Message(models.Model):
    role = models.CharField(max_length=16)  # user | assistant
    content = models.TextField()
    created_at = models.BigIntegerField()
    episode = models.ForeignKey(Episode, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages")
    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="messages")
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
            models.Index(fields=["id"], condition=models.Q(embedding__isnull=True), name="idx_messages_no_vector"),
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


class Fact(models.Model):
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
    tokens_v2 = models.TextField(default="", blank=True)
    embedding = models.BinaryField(null=True, blank=True)
    embedding_q8 = models.BinaryField(null=True, blank=True)
    origin_kind = models.CharField(max_length=16, default="legacy")  # legacy | direct | group
    slot = models.CharField(max_length=32, default="", blank=True)
    # NULL = valid; another fact's id = superseded by it; own id = manual invalidation.
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False,
        db_column="superseded_by",
    )
    source = models.CharField(max_length=120, default="", blank=True)  # where it was heard (extraction, api …)

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
            models.Index(fields=["id"], condition=models.Q(embedding__isnull=True), name="idx_facts_no_vector"),
            models.Index(
                fields=["id"], condition=models.Q(embedding__isnull=False, embedding_q8__isnull=True),
                name="idx_facts_q8_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"Fact #{self.pk}"

    @property
    def invalid(self) -> bool:
        return self.superseded_by_id is not None

    @property
    def manually_invalidated(self) -> bool:
        return self.superseded_by_id == self.pk

    @property
    def pinned(self) -> bool:
        return self.half_life_hours >= 876_000.0


class ImportBatch(models.Model):
    kind = models.CharField(max_length=16)  # paste | upload
    origin_name = models.CharField(max_length=255, default="", blank=True)
    summary = models.CharField(max_length=120, default="", blank=True)
    submitted = models.IntegerField(default=0)
    added = models.IntegerField(default=0)
    status = models.CharField(max_length=16, default="running")  # running | done | failed
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
    tokens_v2 = models.TextField(default="", blank=True)
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
            models.Index(fields=["id"], condition=models.Q(embedding__isnull=True), name="idx_knowledge_no_vector"),
            models.Index(
                fields=["id"], condition=models.Q(embedding__isnull=False, embedding_q8__isnull=True),
                name="idx_knowledge_q8_pending",
            ),
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

    ref_kind = models.CharField(max_length=16)  # fact | episode | knowledge
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
    """The change log resident indexes read (memory/changes.py): one row per inserted row.

    Written by database triggers on facts, episode cues and knowledge. ``xid`` is the
    writing transaction's id on PostgreSQL (``pg_current_xact_id()``), so that a reader
    can tell which changes a snapshot may not have seen yet; SQLite leaves it NULL (one
    writer at a time: the log's id is the commit order).
    """

    source = models.CharField(max_length=32)
    row_id = models.BigIntegerField()
    xid = models.BigIntegerField(null=True, blank=True)

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

    consumer = models.CharField(max_length=32, primary_key=True)  # facts | knowledge
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

    class Meta:
        db_table = "turns"
        indexes = [models.Index(fields=["stream", "at"], name="idx_turns_stream_at")]
        permissions = [("preview_recall", "Can use the recall playground")]

    def __str__(self) -> str:
        return f"Turn #{self.pk}"


class QueueFailure(models.Model):
    """Consecutive failures of the head batch of a background queue.

    Persisted (not kept in process memory) so several workers and restarts
    agree on when a stuck batch is given up.
    """

    stream = models.ForeignKey(Stream, on_delete=models.CASCADE, related_name="+")
    queue = models.CharField(max_length=16)  # summarize | extract
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

    kind = models.CharField(max_length=32)  # import | evaluate | compare | backfill | decay
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
    # memory.jobs.recover_orphaned_jobs (worker start-up and beat).
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

    ``scopes`` lists what the token may do (``memory.auth.SCOPES``; ``admin`` implies all).
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
    target = models.CharField(max_length=16)  # message | fact | episode | person | stream
    target_id = models.BigIntegerField()
    counts = models.JSONField(default=dict)

    class Meta:
        db_table = "forget_log"
        ordering = ["-id"]
        permissions = [("forget_memory", "Can preview and carry out forgetting")]

    def __str__(self) -> str:
        return f"forget {self.target} #{self.target_id}"
