"""Facts' and knowledge's stored index tokens are called ``tokens``, as cues' and messages' are.

The column was ``tokens_v2``. A rename keeps every value; what names the column follows it:
SQLite rewrites the update triggers of 0008 (``AFTER UPDATE OF …``, their ``WHEN``), and
PostgreSQL's triggers of 0020 hold the column by number, not by name. The FTS5 tables are
contentless and the postings tables hold their own copy: neither names it.
"""
from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memory", "0031_fact_operation_actors")]

    operations = [
        migrations.RenameField(model_name="fact", old_name="tokens_v2", new_name="tokens"),
        migrations.RenameField(model_name="knowledge", old_name="tokens_v2", new_name="tokens"),
    ]
