"""PostgreSQL: the spread's reads of the association graph answered by indexes, not rows.

A spread looks up every node it meets by id (its kind and ref id) and every active edge of
a frontier by its end (the far end and the strength). Through ``memory_nodes_pkey`` and
``(active, source_id)`` / ``(active, target_id)`` each of those was also a read of the row,
scattered over the table: at 10× (650,000 nodes, 1,000,000 edges) ~95 heap pages a spread,
cold in a store larger than memory. With the columns carried in the indexes (``INCLUDE``)
PostgreSQL answers them by index-only scans: ~12 heap pages a spread for the same look-ups
(memory_nodes 45 → 4, memory_edges 49 → 8; docs/DEPLOY.md). SQLite has no ``INCLUDE``: its edge
indexes stay as they are and its node rows are the table's own b-tree already.
"""
from django.db import migrations

from memory.backends import sql_for

EDGES = {"idx_memory_edges_source": ("source_id", "target_id"), "idx_memory_edges_target": ("target_id", "source_id")}
NODES = "CREATE INDEX idx_memory_nodes_refs ON memory_nodes (id) INCLUDE (ref_kind, ref_id)"

FORWARD = [NODES] + [s for name, (end, far) in EDGES.items() for s in (
    f"DROP INDEX {name}", f"CREATE INDEX {name} ON memory_edges (active, {end}) INCLUDE ({far}, strength)")]
REVERSE = ["DROP INDEX idx_memory_nodes_refs"] + [s for name, (end, _far) in EDGES.items() for s in (
    f"DROP INDEX {name}", f"CREATE INDEX {name} ON memory_edges (active, {end})")]


class Migration(migrations.Migration):
    dependencies = [("memory", "0033_facts_created_index")]

    operations = [sql_for(postgresql=FORWARD, reverse_postgresql=REVERSE)]
