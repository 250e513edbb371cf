"""The broker keeps what it promised to keep (``--data-dir``, issue 31).

The model over a :class:`DurableStore` reopened as a restart would; then the real command,
stopped with SIGTERM and SIGKILL (also in the middle of confirmed publishing) and started
again on the same directory; then a damaged store.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_broker import Broker, DurableStore, StoreError
from amqp_sansio import (
    BasicProperties,
    BlockedByPeer,
    ConfirmSelect,
    MethodReceived,
    PublishConfirmed,
    TxCommit,
    TxCommitOk,
    TxSelect,
    UnblockedByPeer,
)
from amqp_sansio.client import NotFound
from amqp_sansio.v0_10.client import Properties
from tests.tools.support import TIMEOUT

from .test_session import Net, open_client

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from pathlib import Path

    from amqp_broker import BrokerError, Message
    from amqp_sansio import FieldTable

PERSISTENT = BasicProperties(delivery_mode=2)
TRANSIENT = BasicProperties(delivery_mode=1)


class _Sink:
    """Records deliveries (channel, tag, redelivered, body)."""

    def __init__(self) -> None:
        self.delivered: list[tuple[int, bool, bytes]] = []

    def deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
        stream_offset: int | None = None,
    ) -> None:
        self.delivered.append((delivery_tag, redelivered, bytes(message.body)))

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        raise AssertionError("no cancels here")

    def channel_failed(self, channel: int, error: BrokerError) -> None:
        raise AssertionError(error)


#: The stores the running test opened: closed after it (an open sqlite3 connection left to the
#: garbage collector is a ResourceWarning on Python 3.13, in whichever test runs then).
_OPENED: list[DurableStore] = []


@pytest.fixture(autouse=True)
def _close_stores() -> Iterator[None]:
    yield
    while _OPENED:
        _OPENED.pop().close()


def _broker(folder: Path) -> Broker:
    store = DurableStore(folder)
    _OPENED.append(store)
    return Broker(clock=lambda: 0.0, wall_clock=lambda: 0.0, store=store)


def _restart(broker: Broker, folder: Path) -> Broker:
    """What a stop does to the store (write what is queued, close), then a new start."""
    assert broker.store is not None
    broker.store.close()
    return _broker(folder)


def test_definitions_and_persistent_messages_survive_a_restart(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.add_vhost("staging")
    broker.add_user("app", "secret")
    broker.set_permissions("app", "staging", "^app", ".*", ".*")
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.exchange_declare("d.ex", "topic", durable=True, arguments={"alternate-exchange": "alt"})
    ch.exchange_declare("t.ex", "fanout")
    ch.queue_declare("d.q", durable=True, arguments={"x-max-length": 50})
    ch.queue_declare("t.q")
    ch.queue_declare("x.q", durable=True, exclusive=True)
    ch.queue_bind("d.q", "d.ex", "k.#", {})
    ch.queue_bind("d.q", "amq.direct", "k", {})
    ch.queue_bind("d.q", "t.ex", "", {})  # a transient end: not kept
    ch.queue_bind("t.q", "d.ex", "k.#", {})
    for n in range(4):
        ch.publish("d.ex", "k.a", PERSISTENT, b"p%d" % n)
        ch.publish("d.ex", "k.a", TRANSIENT, b"t%d" % n)
    first = ch.get("d.q", no_ack=False)  # delivered, not acked: redelivered after restart
    assert first is not None
    assert first.message.body == b"p0"
    second = ch.get("d.q", no_ack=False)
    assert second is not None
    assert second.message.body == b"t0"
    third = ch.get("d.q", no_ack=False)
    assert third is not None
    assert third.message.body == b"p1"
    ch.ack(third.delivery_tag)  # acked: gone for good
    broker = _restart(broker, tmp_path)

    assert set(broker.vhosts) == {"/", "staging"}
    assert broker.users.password("app") == "secret"
    permission = broker.users.permission("app", "staging")
    assert permission is not None
    assert permission.allows("configure", "app.q")
    assert not permission.allows("configure", "other")
    vhost = broker.vhosts["/"]
    assert set(vhost.queues) == {"d.q"}
    assert "t.ex" not in vhost.exchanges
    exchange = vhost.exchanges["d.ex"]
    assert (exchange.type, exchange.durable, exchange.arguments) == (
        "topic",
        True,
        {"alternate-exchange": "alt"},
    )
    assert vhost.queues["d.q"].arguments == {"x-max-length": 50}
    assert broker.recovered is not None
    assert "3 persistent messages" in broker.recovered
    sink = _Sink()
    ch = broker.connect("/", sink).open_channel(1)
    ch.publish("amq.direct", "k", PERSISTENT, b"direct")  # the bindings are back
    ch.publish("d.ex", "k.z", PERSISTENT, b"topic")
    ch.consume("d.q", "c", no_ack=True, exclusive=False, arguments={})
    ch.start_consumer("c")
    assert [(r, b) for _, r, b in sink.delivered] == [
        (True, b"p0"),
        (False, b"p2"),
        (False, b"p3"),
        (False, b"direct"),
        (False, b"topic"),
    ]
    broker = _restart(broker, tmp_path)  # consumed without acks: nothing is left
    assert broker.vhosts["/"].queues["d.q"].message_count == 0


def _stream_contents(broker: Broker, name: str) -> tuple[int, int, list[tuple[int, bytes]]]:
    log = broker.vhosts["/"].queues[name].log
    assert log is not None
    found = []
    for offset in range(log.first_offset, log.next_offset):
        message = log.read(offset)
        if message is not None:
            found.append((offset, bytes(message.body)))
    return log.first_offset, log.next_offset, found


def test_a_stream_comes_back_with_its_offsets_and_retention(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    ch = broker.connect("/", _Sink()).open_channel(1)
    arguments: FieldTable = {
        "x-queue-type": "stream",
        "x-stream-max-segment-size-bytes": 1000,  # a few messages a segment
        "x-max-length-bytes": 3000,  # and retention drops the oldest segments
    }
    ch.queue_declare("s", durable=True, arguments=arguments)
    for n in range(40):
        ch.publish("", "s", TRANSIENT, b"%03d" % n + b"x" * 200)  # a stream keeps all
    before = _stream_contents(broker, "s")
    assert before[0] > 0  # retention dropped the start
    broker = _restart(broker, tmp_path)
    assert _stream_contents(broker, "s") == before
    assert broker.recovered is not None
    assert f"{len(before[2])} stream messages" in broker.recovered
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.publish("", "s", TRANSIENT, b"after")  # it goes on at the next offset
    found = _stream_contents(broker, "s")[2]
    assert found[-1] == (before[1], b"after")
    ch.queue_delete("s")
    broker = _restart(broker, tmp_path)
    assert "s" not in broker.vhosts["/"].queues


def test_deletes_and_unbinds_are_kept(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.exchange_declare("gone.ex", "direct", durable=True)
    ch.exchange_declare("d.ex", "direct", durable=True)
    ch.queue_declare("gone.q", durable=True)
    ch.queue_declare("d.q", durable=True)
    ch.queue_bind("d.q", "d.ex", "a", {})
    ch.queue_bind("d.q", "d.ex", "b", {})
    ch.queue_bind("d.q", "gone.ex", "a", {})
    ch.exchange_bind("d.ex", "amq.topic", "#", {})
    ch.publish("", "gone.q", PERSISTENT, b"lost with its queue")
    ch.publish("", "d.q", PERSISTENT, b"purged")
    ch.queue_unbind("d.q", "d.ex", "b", {})
    ch.queue_delete("gone.q")
    ch.exchange_delete("gone.ex")
    assert ch.queue_purge("d.q") == 1
    broker = _restart(broker, tmp_path)
    vhost = broker.vhosts["/"]
    assert set(vhost.queues) == {"d.q"}
    assert "gone.ex" not in vhost.exchanges
    assert [b.routing_key for b in vhost.exchanges["d.ex"].bindings.values()] == ["a"]
    assert [b.routing_key for b in vhost.exchanges["amq.topic"].bindings.values()] == ["#"]
    assert vhost.queues["d.q"].message_count == 0
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.publish("amq.topic", "a", PERSISTENT, b"through two exchanges")
    got = ch.get("d.q", no_ack=True)
    assert got is not None
    assert got.message.body == b"through two exchanges"


def test_a_message_consumed_before_the_commit_never_reaches_the_disk(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    store = broker.store
    assert store is not None
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.queue_declare("d.q", durable=True)
    store.flush()
    ch.publish("", "d.q", PERSISTENT, b"quick")
    got = ch.get("d.q", no_ack=False)
    assert got is not None
    ch.ack(got.delivery_tag)
    batch = store.take_batch()
    assert [op for op in batch.ops if op is not None] == []  # the insert was cancelled
    store.write(batch)


def _confirmed(events: Sequence[object]) -> list[int]:
    return [n for e in events if isinstance(e, PublishConfirmed) for n in e.publish_numbers]


def test_a_persistent_message_is_confirmed_only_once_written(tmp_path: Path) -> None:
    net = Net(coalesce=True)
    net.broker = _broker(tmp_path)
    store = net.broker.store
    assert store is not None
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ConfirmSelect())
    client.declare(ch, "d.q", durable=True)
    client.declare(ch, "t.q")
    client.publish(ch, b"1", routing_key="t.q", properties=PERSISTENT)  # not a durable queue
    assert _confirmed(client.take()) == [1]
    client.publish(ch, b"2", routing_key="d.q", properties=PERSISTENT)
    client.publish(ch, b"3", routing_key="t.q")  # in order behind 2
    client.publish(ch, b"4", routing_key="d.q", properties=PERSISTENT)
    assert _confirmed(client.take()) == []  # nothing written yet
    first = store.take_batch()  # the transport's committer takes 2, 3 and 4 ...
    client.publish(ch, b"5", routing_key="d.q", properties=PERSISTENT)  # ... 5 comes later
    store.write(first)
    for waiter in store.released():
        waiter()
    net.pump()
    assert _confirmed(client.take()) == [2, 3, 4]
    store.write(store.take_batch())
    for waiter in store.released():
        waiter()
    net.pump()
    assert _confirmed(client.take()) == [5]
    client.publish(ch, b"6", routing_key="d.q", properties=TRANSIENT)
    assert _confirmed(client.take()) == [6]  # transient: nothing to wait for
    store.close()


def test_a_transaction_with_persistent_messages_commits_once_written(tmp_path: Path) -> None:
    net = Net(coalesce=True)
    net.broker = _broker(tmp_path)
    store = net.broker.store
    assert store is not None
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "d.q", durable=True)
    client.reply(ch, TxSelect())
    client.publish(ch, b"1", routing_key="d.q", properties=PERSISTENT)
    events = client.call(ch, TxCommit())
    assert not [e for e in events if isinstance(e, MethodReceived)]  # no commit-ok yet
    store.write(store.take_batch())
    for waiter in store.released():
        waiter()
    net.pump()
    assert [type(e.method) for e in client.take() if isinstance(e, MethodReceived)] == [TxCommitOk]
    client.publish(ch, b"2", routing_key="d.q", properties=TRANSIENT)
    assert isinstance(client.reply(ch, TxCommit()), TxCommitOk)  # nothing to wait for
    store.close()


def test_a_full_disk_blocks_publishers_until_there_is_room(tmp_path: Path) -> None:
    net = Net(coalesce=True)
    net.broker = _broker(tmp_path)
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "d.q", durable=True)
    memory = net.broker.memory
    memory.set_disk_low(True, 1000)  # what the disk watcher does below disk_free_limit
    client.publish(ch, b"1", routing_key="d.q", properties=PERSISTENT)
    assert [e.reason for e in client.take() if isinstance(e, BlockedByPeer)] == ["low on disk"]
    memory.set_disk_low(False, 10**9)
    net.pump()
    assert [e for e in client.take() if isinstance(e, UnblockedByPeer)]
    assert client.drain(ch, "d.q") == [b"1"]  # the publish that met the alarm was kept


def test_the_disk_watcher_blocks_below_disk_free_limit(
    data_dir: Path, brokers: list[_Process]
) -> None:
    # a limit above any disk's free space: the alarm is on from the start
    broker = _Process(data_dir, "--disk-free-limit", str(10**18))
    brokers.append(broker)
    with amqp_blocking.connect(broker.url) as conn:
        ch = conn.channel()
        ch.queue_declare("d.q", durable=True)
        ch.basic_publish(b"blocked", routing_key="d.q", properties=PERSISTENT)
        # the publish makes the broker say why it stops reading: wait for the client's
        # I/O thread to have read it (bounded, never timed)
        for _ in range(int(TIMEOUT / 0.05)):
            if conn.blocked_reason is not None:
                break
            time.sleep(0.05)
        assert conn.blocked_reason == "low on disk"
        broker.process.kill()  # it reads nothing from a blocked client, not even a close


# --- the command, stopped and killed -----------------------------------------------------------


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


class _Process:
    def __init__(self, data_dir: Path, *options: str) -> None:
        command = [sys.executable, "-m", "amqp_broker", "--port", "0", "--data-dir", str(data_dir)]
        self.process = subprocess.Popen(
            [*command, "--protocols", "0-9-1,0-10", *options],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        lines = [self.process.stderr.readline()]
        while "disk alarm" in lines[-1]:  # the log line of --disk-free-limit's alarm
            lines.append(self.process.stderr.readline())
        assert lines[-1].startswith("amqp_broker listening on 127.0.0.1:"), lines
        self.url = f"amqp://guest:guest@127.0.0.1:{int(lines[-1].rsplit(':', 1)[1])}/"
        self.recovered = self.process.stderr.readline()
        while "disk alarm" in self.recovered:
            self.recovered = self.process.stderr.readline()

    def stop(self, signum: signal.Signals) -> int:
        self.process.send_signal(signum)
        code = self.process.wait(timeout=TIMEOUT)
        assert self.process.stderr is not None
        rest = self.process.stderr.read()
        self.process.stderr.close()
        assert "Traceback" not in rest
        return code


@pytest.fixture
def brokers() -> Iterator[list[_Process]]:
    started: list[_Process] = []
    yield started
    for broker in started:
        if broker.process.poll() is None:
            broker.process.kill()
            broker.process.wait(timeout=TIMEOUT)
        if broker.process.stderr is not None:
            broker.process.stderr.close()


def _start(brokers: list[_Process], data_dir: Path) -> _Process:
    broker = _Process(data_dir)
    brokers.append(broker)
    return broker


def _drain(ch: amqp_blocking.Channel, queue: str) -> list[tuple[bytes, bool]]:
    got = []
    while (message := ch.basic_get(queue, no_ack=True)) is not None:
        got.append((bytes(message.body), message.redelivered))
    return got


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_stopped_or_killed_broker_comes_back_with_what_it_kept(
    signum: signal.Signals, data_dir: Path, brokers: list[_Process]
) -> None:
    broker = _start(brokers, data_dir)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        ch.exchange_declare("d.ex", "topic", durable=True)
        ch.exchange_declare("t.ex", "topic")
        ch.queue_declare("d.classic", durable=True)
        ch.queue_declare("d.quorum", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare("d.stream", durable=True, arguments={"x-queue-type": "stream"})
        ch.queue_declare("t.q")
        for queue in ("d.classic", "d.quorum", "d.stream", "t.q"):
            ch.queue_bind(queue, "d.ex", "k.#")
        ch.confirm_select()
        for n in range(3):
            ch.basic_publish(b"p%d" % n, exchange="d.ex", routing_key="k.a", properties=PERSISTENT)
            ch.basic_publish(b"t%d" % n, exchange="d.ex", routing_key="k.a", properties=TRANSIENT)
        held = ch.basic_get("d.classic", no_ack=False)
        assert held is not None
        assert held.body == b"p0"
        # confirmed after the delivery: the store wrote the delivery with it
        ch.basic_publish(b"last", exchange="d.ex", routing_key="k.a", properties=PERSISTENT)
        code = broker.stop(signum)
    assert code == (0 if signum == signal.SIGTERM else -signal.SIGKILL)
    broker = _start(brokers, data_dir)
    # the stream kept all 7 routed before the stop, transient ones too
    assert "1 exchanges, 3 queues, 3 bindings" in broker.recovered
    assert "7 stream messages" in broker.recovered
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        ch.exchange_declare("d.ex", "topic", passive=True)
        with pytest.raises(NotFound):
            ch.queue_declare("t.q", passive=True)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        ch.basic_publish(b"bound", exchange="d.ex", routing_key="k.b", properties=PERSISTENT)
        assert _drain(ch, "d.classic") == [
            (b"p0", True),
            (b"p1", False),
            (b"p2", False),
            (b"last", False),
            (b"bound", False),
        ]
        assert [body for body, _ in _drain(ch, "d.quorum")] == [
            b"p0",
            b"p1",
            b"p2",
            b"last",
            b"bound",
        ]
        assert ch.queue_declare("d.stream", passive=True).message_count == 8
        for queue in ("d.classic", "d.quorum", "d.stream"):
            ch.queue_delete(queue)
        ch.exchange_delete("d.ex")
    assert broker.stop(signal.SIGTERM) == 0


def _publish_until_killed(url: str, confirmed: list[int], enough: threading.Event) -> None:
    """Publish numbered persistent messages, each confirmed before the next, until the
    connection goes; numbers confirmed are appended to *confirmed*."""
    try:
        with amqp_blocking.connect(url) as conn, conn.channel() as ch:
            ch.confirm_select()
            for n in range(100_000):
                ch.basic_publish(str(n).encode(), routing_key="kill.q", properties=PERSISTENT)
                confirmed.append(n)
                if len(confirmed) >= 20:
                    enough.set()
    except Exception:  # the broker was killed under it: the point of the test
        enough.set()


def test_a_kill_during_confirmed_publishing_loses_no_confirmed_message(
    data_dir: Path, brokers: list[_Process]
) -> None:
    kept: list[int] = []
    for _ in range(5):
        broker = _start(brokers, data_dir)
        with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
            ch.queue_declare("kill.q", durable=True)
        confirmed: list[int] = []
        enough = threading.Event()
        publisher = threading.Thread(
            target=_publish_until_killed, args=(broker.url, confirmed, enough)
        )
        publisher.start()
        assert enough.wait(TIMEOUT)
        broker.process.kill()  # while the publisher is in the middle of its next publish
        publisher.join(TIMEOUT)
        broker.process.wait(TIMEOUT)
        kept += confirmed
        broker = _start(brokers, data_dir)
        with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
            numbers = [int(body) for body, _ in _drain(ch, "kill.q")]
            ch.queue_delete("kill.q")
        # every confirmed one, once, in order; maybe the one in flight at the kill
        assert numbers[: len(confirmed)] == confirmed
        assert len(numbers) <= len(confirmed) + 1
        assert broker.stop(signal.SIGTERM) == 0
    assert len(kept) >= 100


def test_a_kill_keeps_0_10_persistent_transfers_once_completed(
    data_dir: Path, brokers: list[_Process]
) -> None:
    broker = _start(brokers, data_dir)
    persistent = Properties(persistent=True)
    with amqp_blocking.connect_0_10(broker.url) as conn_0_10, conn_0_10.session() as session:
        session.queue_declare("d.q", durable=True)
        session.queue_declare("t.q")
        for n in range(5):
            # completed (the sync bit) only once the store wrote it
            session.transfer("", b"p%d" % n, routing_key="d.q", properties=persistent)
            session.transfer("", b"t%d" % n, routing_key="d.q")
        session.transfer("", b"gone", routing_key="t.q", properties=persistent)
        broker.process.kill()
        broker.process.wait(TIMEOUT)
    broker = _start(brokers, data_dir)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        assert _drain(ch, "d.q") == [(b"p%d" % n, False) for n in range(5)]
        with pytest.raises(NotFound):
            ch.queue_declare("t.q", passive=True)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        ch.queue_delete("d.q")
    assert broker.stop(signal.SIGTERM) == 0


def test_a_kill_keeps_a_0_10_transaction_once_its_commit_completed(
    data_dir: Path, brokers: list[_Process]
) -> None:
    broker = _start(brokers, data_dir)
    persistent = Properties(persistent=True)
    with amqp_blocking.connect_0_10(broker.url) as conn_0_10, conn_0_10.session() as session:
        session.queue_declare("d.q", durable=True)
        session.tx_select()
        for n in range(20):
            session.transfer("", b"p%d" % n, routing_key="d.q", properties=persistent)
        session.tx_commit()  # completed only once the store wrote the twenty
        session.transfer("", b"uncommitted", routing_key="d.q", properties=persistent)
        broker.process.kill()
        broker.process.wait(TIMEOUT)
    broker = _start(brokers, data_dir)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        assert _drain(ch, "d.q") == [(b"p%d" % n, False) for n in range(20)]
        ch.queue_delete("d.q")
    assert broker.stop(signal.SIGTERM) == 0


def _fill(data_dir: Path, brokers: list[_Process], count: int) -> None:
    broker = _start(brokers, data_dir)
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        ch.queue_declare("torn.q", durable=True)
        ch.confirm_select()
        for n in range(count):
            ch.basic_publish(str(n).encode(), routing_key="torn.q", properties=PERSISTENT)
    broker.process.kill()  # the write-ahead log keeps the commits, not yet checkpointed
    broker.process.wait(TIMEOUT)


def test_a_torn_or_flipped_log_tail_keeps_what_was_written_before_it(
    data_dir: Path, brokers: list[_Process]
) -> None:
    rng = random.Random(31)
    _fill(data_dir, brokers, 60)
    log = data_dir / "broker.sqlite3-wal"
    data = log.read_bytes()
    assert len(data) > 4096
    cut = rng.randrange(len(data) // 2, len(data) - 100)
    damaged = bytearray(data[:cut])
    damaged[-50] ^= 0xFF  # a flipped byte inside the (now torn) last frame too
    log.write_bytes(bytes(damaged))
    broker = _start(brokers, data_dir)
    assert "recovered from" in broker.recovered
    with amqp_blocking.connect(broker.url) as conn, conn.channel() as ch:
        numbers = [int(body) for body, _ in _drain(ch, "torn.q")]
        ch.queue_delete("torn.q")
    # a prefix of what was confirmed: every transaction before the damage, nothing after it
    assert numbers == list(range(len(numbers)))
    assert 0 < len(numbers) < 60
    assert broker.stop(signal.SIGTERM) == 0


def test_a_damaged_database_stops_the_start_with_a_clear_error(
    data_dir: Path, brokers: list[_Process], tmp_path: Path
) -> None:
    _fill(data_dir, brokers, 5)
    broker = _start(brokers, data_dir)  # a clean start checkpoints into the database
    assert broker.stop(signal.SIGTERM) == 0
    database = data_dir / "broker.sqlite3"
    data = bytearray(database.read_bytes())
    data[0:16] = b"not a database!!"
    database.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "amqp_broker", "--port", "0", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 1
    assert "is damaged" in result.stderr
    assert "will not start" in result.stderr
    assert "Traceback" not in result.stderr
    with pytest.raises(StoreError, match="is damaged"):
        DurableStore(data_dir)
    assert database.read_bytes()[:16] == b"not a database!!"  # left as it was for the user


def test_a_quorum_queues_delivery_count_survives_a_restart(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.queue_declare("d.qq", durable=True, arguments={"x-queue-type": "quorum"})
    ch.publish("", "d.qq", PERSISTENT, b"counted")
    for _ in range(2):  # two returns
        got = ch.get("d.qq", no_ack=False)
        assert got is not None
        ch.nack(got.delivery_tag, requeue=True)
    got = ch.get("d.qq", no_ack=False)  # delivered a third time, then the broker stops
    assert got is not None
    assert (got.message.properties.headers or {})["x-delivery-count"] == 2
    broker = _restart(broker, tmp_path)
    got = broker.connect("/", _Sink()).open_channel(1).get("d.qq", no_ack=False)
    assert got is not None
    assert got.redelivered
    # The delivery the stop cut off counts as a return, as a closed channel's does.
    assert (got.message.properties.headers or {})["x-delivery-count"] == 3


def test_policies_and_operator_policies_survive_a_restart(tmp_path: Path) -> None:
    broker = _broker(tmp_path)
    broker.set_policy("cap", r"^capped\.", {"max-length": 1}, priority=2, apply_to="queues")
    broker.set_policy("gone", "^x", {"message-ttl": 5})
    broker.set_operator_policy("limit", ".*", {"max-length": 10}, priority=1)
    broker.set_policy("cap", r"^capped\.", {"max-length": 2}, priority=3, apply_to="queues")
    broker.clear_policy("gone")
    policies, operator_policies = broker.list_policies(), broker.list_operator_policies()
    broker = _restart(broker, tmp_path)
    assert broker.list_policies() == policies
    assert [p.definition for p in policies] == [{"max-length": 2}]  # the later set wins
    assert broker.list_operator_policies() == operator_policies
    assert broker.recovered is not None
    assert broker.recovered.endswith(", 2 policies")  # one policy, one operator policy
    # A queue declared after the restart follows the policy kept.
    ch = broker.connect("/", _Sink()).open_channel(1)
    ch.queue_declare("capped.q")
    for n in range(3):
        ch.publish("", "capped.q", BasicProperties(), b"%d" % n)
    assert broker.vhosts["/"].queues["capped.q"].message_count == 2
