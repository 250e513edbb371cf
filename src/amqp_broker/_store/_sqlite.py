"""The store: one SQLite database in WAL mode (``broker.sqlite3`` in the data directory).

Chosen by measurement (``bench/store.py``, docs/durability.md): its commit with
``synchronous=FULL`` is one ``fsync`` of the write-ahead log, as cheap as an append-only log
of our own, and SQLite already detects a torn log tail by its frame checksums and drops it at
the next open, keeping every transaction committed before it.

Changes are queued in memory by the model's calls and written by :meth:`DurableStore.write`
in one transaction per batch, off the event loop; a message added and removed within one
batch (consumed before the commit) never reaches the disk.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs

from amqp_sansio import BasicProperties, FieldTable
from amqp_sansio.framing import decode_table, encode_table

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "DurableStore",
    "RecoveredBinding",
    "RecoveredExchange",
    "RecoveredMessage",
    "RecoveredPolicy",
    "RecoveredQueue",
    "RecoveredStreamMessage",
    "Recovery",
    "StoreBatch",
    "StoreError",
]

#: The database's file name inside the data directory.
DATABASE: Final = "broker.sqlite3"
_SCHEMA_VERSION: Final = "1"

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS vhosts (name TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, password TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS permissions (
    user TEXT, vhost TEXT, configure TEXT, write TEXT, read TEXT, PRIMARY KEY (user, vhost));
CREATE TABLE IF NOT EXISTS exchanges (
    vhost TEXT, name TEXT, type TEXT, auto_delete INTEGER, internal INTEGER, arguments BLOB,
    PRIMARY KEY (vhost, name));
CREATE TABLE IF NOT EXISTS queues (
    vhost TEXT, name TEXT, auto_delete INTEGER, arguments BLOB, PRIMARY KEY (vhost, name));
CREATE TABLE IF NOT EXISTS bindings (
    vhost TEXT, source TEXT, kind TEXT, destination TEXT, routing_key TEXT, arguments BLOB,
    PRIMARY KEY (vhost, source, kind, destination, routing_key, arguments));
CREATE TABLE IF NOT EXISTS stream_messages (
    vhost TEXT, queue TEXT, offset INTEGER, time_ms INTEGER, exchange TEXT,
    routing_key TEXT, properties BLOB, body BLOB, PRIMARY KEY (vhost, queue, offset))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS policies (
    vhost TEXT, name TEXT, operator INTEGER, pattern TEXT, definition TEXT, priority INTEGER,
    apply_to TEXT, PRIMARY KEY (vhost, name, operator));
CREATE TABLE IF NOT EXISTS messages (
    vhost TEXT, queue TEXT, seq INTEGER, redelivered INTEGER, exchange TEXT,
    routing_key TEXT, properties BLOB, body BLOB, PRIMARY KEY (vhost, queue, seq))
    WITHOUT ROWID;
"""

_ADD_MESSAGE: Final = "INSERT OR REPLACE INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
_REMOVE_MESSAGE: Final = "DELETE FROM messages WHERE vhost = ? AND queue = ? AND seq = ?"
#: ``redelivered`` holds 0 (never delivered) or 1 + the delivery count at the last delivery.
_DELIVERED: Final = "UPDATE messages SET redelivered = ? WHERE vhost = ? AND queue = ? AND seq = ?"

#: One queued change: an SQL statement and its parameters.
_Op: TypeAlias = tuple[str, tuple[object, ...]]
_MessageKey: TypeAlias = tuple[str, str, int]


class StoreError(Exception):
    """The data directory cannot be used (unreadable, corrupt beyond what SQLite recovers,
    or written by a newer broker): the message says which file and what to do."""


@final
@attrs.frozen
class StoreBatch:
    """The changes queued since the previous batch, written in one transaction."""

    number: int
    ops: list[_Op | None]


@final
@attrs.frozen
class RecoveredExchange:
    """A durable exchange read back from the store."""

    vhost: str
    name: str
    type: str
    auto_delete: bool
    internal: bool
    arguments: FieldTable


@final
@attrs.frozen
class RecoveredQueue:
    """A durable queue read back from the store."""

    vhost: str
    name: str
    auto_delete: bool
    arguments: FieldTable


@final
@attrs.frozen
class RecoveredBinding:
    """A binding between durable ends read back from the store."""

    vhost: str
    source: str
    kind: str
    destination: str
    routing_key: str
    arguments: FieldTable


@final
@attrs.frozen
class RecoveredMessage:
    """A persistent message of a durable queue, in the queue's order (by *seq*)."""

    vhost: str
    queue: str
    seq: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: BasicProperties
    body: bytes
    #: Returns counted before the last delivery (quorum queues); a crash counts as one more.
    delivery_count: int = 0


@final
@attrs.frozen
class RecoveredStreamMessage:
    """A message of a stream queue at its offset, appended at *time_ms* (wall clock)."""

    vhost: str
    queue: str
    offset: int
    time_ms: int
    exchange: str
    routing_key: str
    properties: BasicProperties
    body: bytes


@final
@attrs.frozen
class RecoveredPolicy:
    """A policy (or, with *operator*, an operator policy) read back from the store."""

    vhost: str
    name: str
    operator: bool
    pattern: str
    definition: dict[str, object]
    priority: int
    apply_to: str


@final
@attrs.frozen
class Recovery:
    """Everything the store held at start."""

    vhosts: list[str]
    users: list[tuple[str, str]]
    permissions: list[tuple[str, str, str, str, str]]
    exchanges: list[RecoveredExchange]
    queues: list[RecoveredQueue]
    bindings: list[RecoveredBinding]
    messages: list[RecoveredMessage]
    stream_messages: list[RecoveredStreamMessage]
    policies: list[RecoveredPolicy] = attrs.field(factory=list)


def _table_bytes(table: FieldTable) -> bytes:
    out = bytearray()
    encode_table(out, table)
    return bytes(out)


def _table(blob: bytes) -> FieldTable:
    return decode_table(blob, 0)[0]


def _properties_bytes(properties: BasicProperties) -> bytes:
    out = bytearray()
    properties.encode(out)
    return bytes(out)


def is_persistent(properties: BasicProperties) -> bool:
    """Delivery mode 2 (0-10's ``persistent`` delivery mode arrives as the same)."""
    return properties.delivery_mode == 2


@final
class DurableStore:
    """Durable definitions and persistent messages in ``DIRECTORY/broker.sqlite3``.

    :param directory: the data directory (created if missing).
    :raises StoreError: the database cannot be opened or fails its integrity check.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DATABASE
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # one writer at a time, from the committer's worker thread after the load
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the broker store {self.path}: {exc}") from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: every commit syncs the log (NORMAL would lose the last commits on power loss)
            self._db.execute("PRAGMA synchronous=FULL")
            check = self._db.execute("PRAGMA quick_check").fetchone()
            if check is None or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check}")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (_SCHEMA_VERSION,))
            elif row[0] != _SCHEMA_VERSION:
                self._db.close()
                raise StoreError(
                    f"the broker store {self.path} has schema {row[0]}, this broker reads "
                    f"{_SCHEMA_VERSION}"
                )
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(
                f"the broker store {self.path} is damaged ({exc}); the broker will not start "
                "on it and lose what it holds: move the data directory away to start empty, "
                "or restore it from a copy"
            ) from None
        self._ops: list[_Op | None] = []
        # message key -> index in _ops of its still unwritten insert
        self._adds: dict[_MessageKey, int] = {}
        #: The batch now being filled, and the last one written.
        self.open_batch = 1
        self.committed = 0
        #: Persistent messages queued so far (a publish that raised it waits for the commit).
        self.writes = 0
        #: Called when a change enters an empty batch (the transport's committer wakes).
        self.on_pending: Callable[[], None] = _nothing
        #: Called once after the next commit (sessions holding confirms), then forgotten.
        self.waiters: dict[Callable[[], None], None] = {}

    def __repr__(self) -> str:
        return f"<DurableStore {str(self.path)!r} batch={self.open_batch}>"

    def _queue(self, sql: str, params: tuple[object, ...]) -> None:
        if not self._ops:
            self.on_pending()
        self._ops.append((sql, params))

    # --- definitions --------------------------------------------------------------------------

    def vhost_added(self, name: str) -> None:
        """A virtual host was created."""
        self._queue("INSERT OR IGNORE INTO vhosts VALUES (?)", (name,))

    def user_set(self, name: str, password: str) -> None:
        """A user was added or its password changed."""
        self._queue("INSERT OR REPLACE INTO users VALUES (?, ?)", (name, password))

    def user_deleted(self, name: str) -> None:
        """A user was removed, with its permissions."""
        self._queue("DELETE FROM users WHERE name = ?", (name,))
        self._queue("DELETE FROM permissions WHERE user = ?", (name,))

    def permissions_set(self, user: str, vhost: str, configure: str, write: str, read: str) -> None:
        """``set_permissions``."""
        self._queue(
            "INSERT OR REPLACE INTO permissions VALUES (?, ?, ?, ?, ?)",
            (user, vhost, configure, write, read),
        )

    def permissions_cleared(self, user: str, vhost: str) -> None:
        """``clear_permissions``."""
        self._queue("DELETE FROM permissions WHERE user = ? AND vhost = ?", (user, vhost))

    def policy_set(
        self,
        vhost: str,
        name: str,
        *,
        operator: bool,
        pattern: str,
        definition: Mapping[str, object],
        priority: int,
        apply_to: str,
    ) -> None:
        """``set_policy`` (*operator*: ``set_operator_policy``); the definition as JSON, as
        ``rabbitmqctl`` takes it."""
        self._queue(
            "INSERT OR REPLACE INTO policies VALUES (?, ?, ?, ?, ?, ?, ?)",
            (vhost, name, operator, pattern, json.dumps(dict(definition)), priority, apply_to),
        )

    def policy_cleared(self, vhost: str, name: str, *, operator: bool) -> None:
        """``clear_policy`` (*operator*: ``clear_operator_policy``)."""
        self._queue(
            "DELETE FROM policies WHERE vhost = ? AND name = ? AND operator = ?",
            (vhost, name, operator),
        )

    def exchange_declared(
        self,
        vhost: str,
        name: str,
        type_: str,
        *,
        auto_delete: bool,
        internal: bool,
        arguments: FieldTable,
    ) -> None:
        """A durable exchange was declared."""
        self._queue(
            "INSERT OR REPLACE INTO exchanges VALUES (?, ?, ?, ?, ?, ?)",
            (vhost, name, type_, auto_delete, internal, _table_bytes(arguments)),
        )

    def exchange_deleted(self, vhost: str, name: str) -> None:
        """A durable exchange was deleted, with the bindings from and to it."""
        self._queue("DELETE FROM exchanges WHERE vhost = ? AND name = ?", (vhost, name))
        self._queue(
            "DELETE FROM bindings WHERE vhost = ? AND (source = ? OR "
            "(kind = 'exchange' AND destination = ?))",
            (vhost, name, name),
        )

    def queue_declared(
        self, vhost: str, name: str, *, auto_delete: bool, arguments: FieldTable
    ) -> None:
        """A durable queue was declared."""
        self._queue(
            "INSERT OR REPLACE INTO queues VALUES (?, ?, ?, ?)",
            (vhost, name, auto_delete, _table_bytes(arguments)),
        )

    def queue_deleted(self, vhost: str, name: str) -> None:
        """A durable queue was deleted, with its messages and the bindings to it."""
        self._queue("DELETE FROM queues WHERE vhost = ? AND name = ?", (vhost, name))
        self._queue("DELETE FROM messages WHERE vhost = ? AND queue = ?", (vhost, name))
        self._queue("DELETE FROM stream_messages WHERE vhost = ? AND queue = ?", (vhost, name))
        self._queue(
            "DELETE FROM bindings WHERE vhost = ? AND kind = 'queue' AND destination = ?",
            (vhost, name),
        )
        for key in [k for k in self._adds if k[0] == vhost and k[1] == name]:
            del self._adds[key]

    def binding_added(
        self,
        vhost: str,
        source: str,
        kind: str,
        destination: str,
        routing_key: str,
        arguments: FieldTable,
    ) -> None:
        """A binding between a durable exchange and a durable queue or exchange."""
        self._queue(
            "INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)",
            (vhost, source, kind, destination, routing_key, _table_bytes(arguments)),
        )

    def binding_removed(
        self,
        vhost: str,
        source: str,
        kind: str,
        destination: str,
        routing_key: str,
        arguments: FieldTable,
    ) -> None:
        """``queue.unbind`` or ``exchange.unbind`` of a stored binding."""
        self._queue(
            "DELETE FROM bindings WHERE vhost = ? AND source = ? AND kind = ? AND "
            "destination = ? AND routing_key = ? AND arguments = ?",
            (vhost, source, kind, destination, routing_key, _table_bytes(arguments)),
        )

    # --- messages -----------------------------------------------------------------------------

    def message_added(
        self,
        vhost: str,
        queue: str,
        seq: int,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
    ) -> None:
        """A persistent message entered a durable queue at position *seq*."""
        key = (vhost, queue, seq)
        self._adds[key] = len(self._ops)
        self._queue(
            _ADD_MESSAGE,
            (vhost, queue, seq, 0, exchange, routing_key, _properties_bytes(properties), body),
        )
        self.writes += 1

    def message_delivered(self, vhost: str, queue: str, seq: int, delivery_count: int = 0) -> None:
        """A stored message went to a consumer that acknowledges, after *delivery_count*
        returns: after a crash it comes back redelivered, its count kept."""
        key = (vhost, queue, seq)
        value = 1 + delivery_count
        index = self._adds.get(key)
        if index is None:
            self._queue(_DELIVERED, (value, *key))
            return
        op = self._ops[index]
        assert op is not None
        params = op[1]
        self._ops[index] = (op[0], (*params[:3], value, *params[4:]))

    def message_removed(self, vhost: str, queue: str, seq: int) -> None:
        """A stored message left its queue for good (acked, expired, dropped, dead-lettered,
        delivered without ack)."""
        key = (vhost, queue, seq)
        index = self._adds.pop(key, None)
        if index is None:
            self._queue(_REMOVE_MESSAGE, key)
        else:
            self._ops[index] = None  # never written: consumed within the batch

    def stream_appended(
        self,
        vhost: str,
        queue: str,
        offset: int,
        time_ms: int,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
    ) -> None:
        """A message was appended to a stream queue at *offset* (every one: streams keep
        transient messages too, as RabbitMQ's)."""
        self._queue(
            "INSERT OR REPLACE INTO stream_messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                vhost,
                queue,
                offset,
                time_ms,
                exchange,
                routing_key,
                _properties_bytes(properties),
                body,
            ),
        )
        self.writes += 1

    def stream_trimmed(self, vhost: str, queue: str, first_offset: int) -> None:
        """Retention dropped a stream's messages below *first_offset*."""
        self._queue(
            "DELETE FROM stream_messages WHERE vhost = ? AND queue = ? AND offset < ?",
            (vhost, queue, first_offset),
        )

    # --- group commit -------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Whether changes wait for :meth:`write`."""
        return bool(self._ops)

    def take_batch(self) -> StoreBatch:
        """Close the open batch (new changes go into the next one) and return it."""
        batch = StoreBatch(self.open_batch, self._ops)
        self._ops = []
        self._adds = {}
        self.open_batch += 1
        return batch

    def write(self, batch: StoreBatch) -> None:
        """Write *batch* in one transaction and sync it (blocking: run it off the event
        loop); then :attr:`committed` is its number."""
        ops = [op for op in batch.ops if op is not None]
        if ops:
            db = self._db
            db.execute("BEGIN")
            try:
                start = 0
                while start < len(ops):
                    sql = ops[start][0]
                    end = start + 1
                    while end < len(ops) and ops[end][0] == sql:
                        end += 1
                    db.executemany(sql, [params for _, params in ops[start:end]])
                    start = end
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        self.committed = batch.number

    def released(self) -> list[Callable[[], None]]:
        """The waiters to call now that a batch was committed (and forget them)."""
        waiters = list(self.waiters)
        self.waiters.clear()
        return waiters

    def flush(self) -> None:
        """Write what is queued now, here (at shutdown)."""
        self.write(self.take_batch())

    # --- start and stop -----------------------------------------------------------------------

    def load(self) -> Recovery:
        """Everything stored, messages in each queue's order."""
        db = self._db
        try:
            return Recovery(
                vhosts=[r[0] for r in db.execute("SELECT name FROM vhosts ORDER BY rowid")],
                users=[(r[0], r[1]) for r in db.execute("SELECT name, password FROM users")],
                permissions=[
                    (r[0], r[1], r[2], r[3], r[4]) for r in db.execute("SELECT * FROM permissions")
                ],
                exchanges=[
                    RecoveredExchange(r[0], r[1], r[2], bool(r[3]), bool(r[4]), _table(r[5]))
                    for r in db.execute("SELECT * FROM exchanges ORDER BY rowid")
                ],
                queues=[
                    RecoveredQueue(r[0], r[1], bool(r[2]), _table(r[3]))
                    for r in db.execute("SELECT * FROM queues ORDER BY rowid")
                ],
                bindings=[
                    RecoveredBinding(r[0], r[1], r[2], r[3], r[4], _table(r[5]))
                    for r in db.execute("SELECT * FROM bindings ORDER BY rowid")
                ],
                messages=[
                    RecoveredMessage(
                        r[0],
                        r[1],
                        r[2],
                        bool(r[3]),
                        r[4],
                        r[5],
                        BasicProperties.decode(r[6], 0)[0],
                        bytes(r[7]),
                        max(r[3] - 1, 0),
                    )
                    for r in db.execute("SELECT * FROM messages ORDER BY vhost, queue, seq")
                ],
                stream_messages=[
                    RecoveredStreamMessage(
                        r[0],
                        r[1],
                        r[2],
                        r[3],
                        r[4],
                        r[5],
                        BasicProperties.decode(r[6], 0)[0],
                        bytes(r[7]),
                    )
                    for r in db.execute(
                        "SELECT * FROM stream_messages ORDER BY vhost, queue, offset"
                    )
                ],
                policies=[
                    RecoveredPolicy(r[0], r[1], bool(r[2]), r[3], json.loads(r[4]), r[5], r[6])
                    for r in db.execute("SELECT * FROM policies ORDER BY rowid")
                ],
            )
        except Exception as exc:
            raise StoreError(
                f"the broker store {self.path} holds a row this broker cannot read ({exc}); "
                "move the data directory away to start empty, or restore it from a copy"
            ) from None

    def close(self) -> None:
        """Write what is queued and close the database (checkpointing its log)."""
        if self._ops:
            self.flush()
        self._db.close()


def _nothing() -> None:
    return None
