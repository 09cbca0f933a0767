"""The change log: how a resident index learns which rows were inserted, in any commit order.

Database triggers write one ``memory_changes`` row per inserted fact, episode cue and
knowledge row (and message, on PostgreSQL), in the inserting transaction (a rolled-back insert leaves no change).
A reader (:class:`ChangeFeed`) remembers a *horizon* and asks for the changes at or
above it:

- SQLite has one writer at a time, so a change's id is its commit order: the horizon is
  one past the highest id read.
- PostgreSQL commits in any order: a transaction that took id 10 may commit after the one
  that took id 11. Each change carries its transaction's id (``pg_current_xact_id()``);
  the horizon is the ``xmin`` of the snapshot the changes were read in — every
  transaction below it had ended, so any change a later snapshot shows that this one did
  not has an xid at or above it. Changes at or above the horizon come back on the next
  read; the feed remembers which of them it has already handed out.

Updates and deletes of facts, cues and knowledge are not logged: they bump a revision in
``meta`` (triggers), and a revision is a value, so a reader compares it, whatever the
commit order. The knowledge vector index and the tuning cache work that way (a revision /
the meta row itself). Messages are the exception (migration 0025): a token change or a
delete is logged with the row's tokens and stream before it, and the resident message
statistics (``ResidentMessages``) read each change together with the row as the same
snapshot shows it (PostgreSQL: :func:`memory.backends.postgresql.read_message_changes`, a
feed's ``read``; SQLite reads the log by id itself), so they take the old row's share out
and add the new one: every committed change applied once, in whatever order, adds up to
the snapshot's statistics.
The retention sweep prunes the log (:func:`prune`); a reader whose horizon lies below
the pruned part rebuilds.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memory import backends

KEEP_CHANGES = 200_000  # log rows the retention sweep keeps (readers behind them rebuild)


@dataclass
class Poll:
    revision: str
    row_ids: list[int] = field(default_factory=list)
    rebuild: bool = False
    changes: list[tuple] = field(default_factory=list)  # the new changes as read: (id, row id, position, *detail)


#: ``read(horizon, seen change ids) -> (revision, new horizon, changes, pruned)``, as ``read_changes``
Reader = Callable[[int | None, set[int]], tuple[str, int, list[tuple], int]]


class ChangeFeed:
    """The changes of one table not yet handed out, plus the table's revision (not thread-safe).

    ``read`` replaces the backend's ``read_changes`` for a feed whose changes carry more than
    the row id (each change a tuple starting ``(change id, row id, position)``); it is given
    the ids already handed out, whose detail it need not read again.
    """

    def __init__(self, source: str, revision_key: str, read: Reader | None = None) -> None:
        self.source = source
        self.revision_key = revision_key
        self.horizon: int | None = None
        self._seen: set[int] = set()   # change ids at or above the horizon already handed out
        self._moves = 0                # starts and polls so far (a reading made elsewhere is for one position)
        self._read = read or (lambda horizon, _seen: backends.module().read_changes(source, revision_key, horizon))

    @property
    def position(self) -> tuple[int | None, int]:
        """Where the feed stands: a reading of the log for its :attr:`horizon`, made elsewhere (several
        feeds read in one statement: :func:`memory.backends.postgresql.changes_statement`), is
        applied by :meth:`poll` only while the feed is still here."""
        return self.horizon, self._moves

    def start(self) -> str:
        """Begin at the log's present: changes visible now count as read. Returns the revision."""
        revision, horizon, changes, _pruned = self._read(None, set())
        self._moves += 1
        self.horizon = horizon
        self._seen = {c[0] for c in changes if c[2] >= horizon}
        return revision

    def poll(self, reading: tuple | None = None, read_at: tuple[int | None, int] | None = None) -> Poll:
        """The revision and the rows inserted since the last poll (``rebuild`` when the feed cannot tell).

        ``reading``: what ``read`` returns, read for :attr:`position` ``read_at``; used instead of
        reading again when the feed has not moved since (else it reads now).
        """
        if reading is None or read_at != self.position:
            reading = None
        self._moves += 1
        if self.horizon is None:
            revision, *_ = reading or self._read(None, set())
            return Poll(revision, rebuild=True)
        revision, horizon, changes, pruned = reading or self._read(self.horizon, self._seen)
        if pruned >= self.horizon:
            return Poll(revision, rebuild=True)
        fresh = [c for c in changes if c[0] not in self._seen]
        self._seen = {c[0] for c in changes if c[2] >= horizon}
        self.horizon = max(self.horizon, horizon)
        return Poll(revision, [c[1] for c in fresh], changes=fresh)


def prune(keep: int = KEEP_CHANGES) -> int:
    """Drop all but the newest ``keep`` change rows (retention sweep); returns the rows dropped."""
    return backends.module().prune_changes(keep)
