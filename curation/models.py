"""The operation journal: one row per change to a fact, with what it was before."""
from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class FactOperation(models.Model):
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
        N4 = "n4", _("自动纠错")

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
        permissions = [
            ("curate_fact", "Can pin, invalidate, restore and replace facts"),
            ("undo_operation", "Can undo fact operations"),
        ]

    def __str__(self) -> str:
        return f"{self.op} #{self.pk}"
