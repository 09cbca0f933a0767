"""Named retrieval parameter sets, relevance labels of recorded turns, and the tuning journal."""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class RetrievalProfile(models.Model):
    name = models.CharField(max_length=100, primary_key=True)
    params = models.JSONField(default=dict)
    created_at = models.BigIntegerField()
    last_applied_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "retrieval_profiles"
        ordering = ["name"]
        permissions = [("tune_retrieval", "Can evaluate and apply retrieval profiles")]

    def __str__(self) -> str:
        return self.name


class RelevanceLabel(models.Model):
    """A person's judgement of one fact for one recorded turn: should it have been in the prompt?

    One row per (turn, fact). ``added``: the fact was not among the turn's candidates — a
    reviewer found it by search (a fact of a person present at the turn). Deleting the turn
    or the fact deletes the label (forgetting, retention: :mod:`tuning.relevance`).
    """

    turn = models.ForeignKey("memory.Turn", on_delete=models.CASCADE, related_name="relevance_labels")
    fact = models.ForeignKey("memory.Fact", on_delete=models.CASCADE, related_name="relevance_labels")
    relevant = models.BooleanField()
    added = models.BooleanField(default=False)
    user = models.CharField(max_length=150)
    at = models.BigIntegerField()

    class Meta:
        db_table = "relevance_labels"
        verbose_name = _("相关性标注")
        verbose_name_plural = _("相关性标注")
        constraints = [models.UniqueConstraint(fields=["turn", "fact"], name="relevance_label_turn_fact")]
        indexes = [models.Index(fields=["fact"], name="idx_relevance_labels_fact")]
        permissions = [("label_relevance", "Can label which facts of a turn were relevant")]

    def __str__(self) -> str:
        return f"turn {self.turn_id} fact {self.fact_id}: {'relevant' if self.relevant else 'not relevant'}"


class TuningOperation(models.Model):
    """The tuning journal: who labelled, saved, applied, rolled back or deleted what, and when.

    A label operation names its turn and fact (deleted with either); ``detail`` keeps what the
    operation replaced (``prev``) — ids and numbers, never memory text.
    """

    class Op(models.TextChoices):
        LABEL = "label", _("标注")
        UNLABEL = "unlabel", _("取消标注")
        IMPORT = "import", _("导入标注")
        SAVE = "save", _("保存方案")
        APPLY = "apply", _("应用方案")
        ROLLBACK = "rollback", _("回滚")
        DELETE = "delete", _("删除方案")

    at = models.BigIntegerField()
    user = models.CharField(max_length=150, default="", blank=True)
    op = models.CharField(max_length=16, choices=Op.choices)
    turn = models.ForeignKey("memory.Turn", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    fact = models.ForeignKey("memory.Fact", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    profile = models.CharField(max_length=100, default="", blank=True)
    detail = models.JSONField(default=dict)

    class Meta:
        db_table = "tuning_operations"
        verbose_name = _("调优流水")
        verbose_name_plural = _("调优流水")
        indexes = [models.Index(fields=["at"], name="idx_tuning_operations_at")]

    def __str__(self) -> str:
        return f"{self.op} #{self.pk}"
