"""copy_store copies every table a model owns (a new model is not forgotten), parents first."""
from __future__ import annotations

from django.apps import apps

from memory.management.copy_store import NOT_COPIED, copied_models


def test_every_model_table_is_copied_parents_first():
    tables = [m._meta.db_table for m in copied_models()]
    every = {m._meta.db_table for m in apps.get_models(include_auto_created=True) if m._meta.managed and not m._meta.proxy}
    assert set(tables) == every - NOT_COPIED and len(tables) == len(set(tables))
    assert {"facts", "messages", "fact_operations", "retrieval_profiles", "api_tokens", "jobs", "auth_user"} <= set(tables)
    position = {t: i for i, t in enumerate(tables)}
    for model in copied_models():
        for f in model._meta.concrete_fields:
            if f.is_relation and f.db_constraint and f.related_model is not model:
                assert position[f.related_model._meta.db_table] < position[model._meta.db_table], (model, f.name)
