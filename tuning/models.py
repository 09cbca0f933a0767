"""Named retrieval parameter sets and evaluation reports."""
from __future__ import annotations

from django.db import models


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
