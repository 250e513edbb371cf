"""Topology recording through a ConnectionPair: what the broker confirmed is recorded, what was
deleted, unbound or cancelled is forgotten, and the record outlives the connection."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    BasicCancel,
    BasicCancelOk,
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    BasicQosOk,
    ChannelClosed,
    ConnectionLost,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    Method,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueueUnbind,
    QueueUnbindOk,
    Topology,
)
from amqp_sansio.testing import ConnectionPair, feed

BYTEWISE = pytest.mark.parametrize("byte_at_a_time", [False, True], ids=["whole", "bytewise"])


def _open(byte_at_a_time: bool = False) -> tuple[ConnectionPair, int]:
    pair = ConnectionPair(byte_at_a_time=byte_at_a_time)
    pair.handshake()
    ch = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    return pair, ch


def _call(pair: ConnectionPair, ch: int, request: Method, reply: Method | None) -> None:
    """The client sends *request*; the server answers with *reply* (None: nowait)."""
    pair.client.send_method(ch, request)
    pair.transfer(pair.client)
    if reply is not None:
        pair.server.send_method(ch, reply)
        pair.transfer(pair.server)


def _topology(pair: ConnectionPair) -> Topology:
    """A fresh snapshot (a function call, so mypy does not narrow one snapshot's fields)."""
    return pair.client.topology


def _empty(topology: Topology) -> bool:
    return not (
        topology.exchanges
        or topology.queues
        or topology.queue_bindings
        or topology.exchange_bindings
        or topology.consumers
        or topology.qos
    )


@BYTEWISE
def test_exchanges_are_recorded_on_declare_ok_and_forgotten_on_delete(
    byte_at_a_time: bool,
) -> None:
    pair, ch = _open(byte_at_a_time)
    declare = ExchangeDeclare(exchange="logs", type="fanout", durable=True)
    pair.client.send_method(ch, declare)
    pair.transfer(pair.client)
    assert pair.client.topology.exchanges == {}  # not before the broker said yes
    pair.server.send_method(ch, ExchangeDeclareOk())
    pair.transfer(pair.server)
    assert pair.client.topology.exchanges == {"logs": declare}
    _call(pair, ch, ExchangeDeclare(exchange="logs", passive=True), ExchangeDeclareOk())
    assert pair.client.topology.exchanges == {"logs": declare}  # a passive declare is a check
    fast = ExchangeDeclare(exchange="fast", nowait=True)
    _call(pair, ch, fast, None)
    assert pair.client.topology.exchanges == {"logs": declare, "fast": fast}
    _call(pair, ch, ExchangeDelete(exchange="logs"), ExchangeDeleteOk())
    _call(pair, ch, ExchangeDelete(exchange="fast", nowait=True), None)
    assert _empty(pair.client.topology)


@BYTEWISE
def test_server_named_queue_is_recorded_under_its_name(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    declare = QueueDeclare(queue="", exclusive=True, auto_delete=True)
    _call(pair, ch, declare, QueueDeclareOk(queue="amq.gen-1", message_count=0, consumer_count=0))
    named = QueueDeclare(queue="jobs", durable=True, nowait=True)
    _call(pair, ch, named, None)
    _call(pair, ch, QueueDeclare(queue="", nowait=True), None)  # its name is never known
    _call(
        pair,
        ch,
        QueueDeclare(queue="jobs", passive=True),
        QueueDeclareOk(queue="jobs", message_count=3, consumer_count=0),
    )
    assert pair.client.topology.queues == {"amq.gen-1": declare, "jobs": named}
    _call(pair, ch, QueueDelete(queue="amq.gen-1"), QueueDeleteOk(message_count=0))
    assert pair.client.topology.queues == {"jobs": named}


@BYTEWISE
def test_bindings_follow_bind_and_unbind(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    plain = QueueBind(queue="q", exchange="x", routing_key="a")
    with_args = QueueBind(queue="q", exchange="x", routing_key="a", arguments={"x-match": "all"})
    other = QueueBind(queue="q2", exchange="y", routing_key="b", nowait=True)
    for bind in (plain, with_args):
        _call(pair, ch, bind, QueueBindOk())
    _call(pair, ch, other, None)
    _call(pair, ch, plain, QueueBindOk())  # again: still one record
    assert _topology(pair).queue_bindings == (with_args, plain, other)
    _call(pair, ch, QueueUnbind(queue="q", exchange="x", routing_key="a"), QueueUnbindOk())
    assert _topology(pair).queue_bindings == (with_args, other)
    _call(
        pair,
        ch,
        QueueUnbind(queue="q", exchange="x", routing_key="a", arguments={"x-match": "all"}),
        QueueUnbindOk(),
    )
    assert _topology(pair).queue_bindings == (other,)

    e2e = ExchangeBind(destination="d", source="s", routing_key="r")
    e2e_nowait = ExchangeBind(destination="d2", source="s", routing_key="r", nowait=True)
    _call(pair, ch, e2e, ExchangeBindOk())
    _call(pair, ch, e2e_nowait, None)
    assert _topology(pair).exchange_bindings == (e2e, e2e_nowait)
    _call(
        pair, ch, ExchangeUnbind(destination="d", source="s", routing_key="r"), ExchangeUnbindOk()
    )
    assert _topology(pair).exchange_bindings == (e2e_nowait,)
    _call(
        pair,
        ch,
        ExchangeUnbind(destination="d2", source="s", routing_key="r", nowait=True),
        None,
    )
    _call(pair, ch, ExchangeUnbind(destination="none", source="s"), ExchangeUnbindOk())
    assert _topology(pair).exchange_bindings == ()


def test_deleting_an_exchange_or_a_queue_drops_its_bindings() -> None:
    pair, ch = _open()
    binds: list[Method] = [
        QueueBind(queue="q", exchange="x", nowait=True),
        QueueBind(queue="q", exchange="keep", nowait=True),
        QueueBind(queue="q2", exchange="keep", nowait=True),
        ExchangeBind(destination="x", source="keep", nowait=True),
        ExchangeBind(destination="keep", source="x", nowait=True),
        ExchangeBind(destination="keep2", source="keep", nowait=True),
    ]
    for bind in binds:
        _call(pair, ch, bind, None)
    _call(pair, ch, ExchangeDelete(exchange="x"), ExchangeDeleteOk())
    topology = pair.client.topology
    assert topology.queue_bindings == (binds[1], binds[2])
    assert topology.exchange_bindings == (binds[5],)
    _call(pair, ch, QueueDelete(queue="q", nowait=True), None)
    assert _topology(pair).queue_bindings == (binds[2],)


@BYTEWISE
def test_consumers_and_qos_belong_to_their_channel(byte_at_a_time: bool) -> None:
    pair, ch = _open(byte_at_a_time)
    other = pair.client.open_channel()
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    consume = BasicConsume(queue="q")
    _call(pair, ch, consume, BasicConsumeOk(consumer_tag="amq.ctag-1"))
    tagged = BasicConsume(queue="q", consumer_tag="mine", nowait=True)
    _call(pair, ch, tagged, None)
    _call(pair, ch, BasicConsume(queue="q", nowait=True), None)  # the server's tag is unknown
    on_other = BasicConsume(queue="q2", consumer_tag="t2")
    _call(pair, other, on_other, BasicConsumeOk(consumer_tag="t2"))
    per_consumer = BasicQos(prefetch_count=10)
    shared = BasicQos(prefetch_count=100, global_=True)
    newer = BasicQos(prefetch_count=20)
    for qos in (per_consumer, shared, newer):
        _call(pair, ch, qos, BasicQosOk())
    _call(pair, other, per_consumer, BasicQosOk())
    topology = pair.client.topology
    assert topology.consumers == {
        (ch, "amq.ctag-1"): consume,
        (ch, "mine"): tagged,
        (other, "t2"): on_other,
    }
    assert topology.qos == {ch: (newer, shared), other: (per_consumer,)}

    _call(pair, ch, BasicCancel(consumer_tag="amq.ctag-1"), BasicCancelOk(consumer_tag="x"))
    _call(pair, ch, BasicCancel(consumer_tag="mine", nowait=True), None)
    assert set(pair.client.topology.consumers) == {(other, "t2")}

    pair.server.send_method(other, BasicCancel(consumer_tag="t2", nowait=True))  # queue deleted
    pair.transfer(pair.server)
    assert pair.client.topology.consumers == {}

    _call(pair, ch, consume, BasicConsumeOk(consumer_tag="again"))
    pair.client.close_channel(ch)
    pair.transfer(pair.client)
    [closed] = pair.transfer(pair.server)
    assert isinstance(closed, ChannelClosed)
    topology = pair.client.topology
    assert topology.consumers == {}
    assert topology.qos == {other: (per_consumer,)}


def test_a_refused_declare_is_not_recorded() -> None:
    pair, ch = _open()
    pair.client.send_method(ch, ExchangeDeclare(exchange="x", type="nope"))
    pair.transfer(pair.client)
    pair.server.close_channel(ch, 503, "COMMAND_INVALID - unknown exchange type 'nope'")
    [closed] = pair.transfer(pair.server)
    assert isinstance(closed, ChannelClosed)
    assert _empty(pair.client.topology)


def test_the_record_survives_the_connection_and_is_read_only() -> None:
    pair, ch = _open()
    declare = QueueDeclare(queue="q", durable=True)
    consume = BasicConsume(queue="q", consumer_tag="c")
    _call(pair, ch, declare, QueueDeclareOk(queue="q", message_count=0, consumer_count=0))
    _call(pair, ch, consume, BasicConsumeOk(consumer_tag="c"))
    [lost] = feed(pair.client, b"")
    assert isinstance(lost, ConnectionLost)
    topology = pair.client.topology
    assert topology.queues == {"q": declare}
    assert topology.consumers == {(ch, "c"): consume}
    with pytest.raises(TypeError):
        topology.queues["other"] = declare  # type: ignore[index]
    with pytest.raises(AttributeError):
        topology.queues = {}  # type: ignore[misc]
    assert pair.client.topology == topology  # snapshots compare by value


def test_the_server_role_records_nothing() -> None:
    pair, ch = _open()
    _call(
        pair,
        ch,
        QueueDeclare(queue="q"),
        QueueDeclareOk(queue="q", message_count=0, consumer_count=0),
    )
    assert _empty(pair.server.topology)
    assert not _empty(pair.client.topology)


def _consume(pair: ConnectionPair, ch: int, queue: str, tag: str) -> None:
    _call(pair, ch, BasicConsume(queue=queue, consumer_tag=tag), BasicConsumeOk(consumer_tag=tag))


def _ok(queue: str) -> QueueDeclareOk:
    return QueueDeclareOk(queue=queue, message_count=0, consumer_count=0)


def test_an_auto_delete_queue_is_forgotten_with_its_last_consumer() -> None:
    pair, ch = _open()
    _call(pair, ch, ExchangeDeclare(exchange="x", type="direct"), ExchangeDeclareOk())
    _call(pair, ch, QueueDeclare(queue="ad", auto_delete=True), _ok("ad"))
    _call(pair, ch, QueueBind(queue="ad", exchange="x", routing_key="k"), QueueBindOk())
    _consume(pair, ch, "ad", "t1")
    _consume(pair, ch, "ad", "t2")
    _call(pair, ch, BasicCancel(consumer_tag="t1"), BasicCancelOk(consumer_tag="t1"))
    assert "ad" in _topology(pair).queues  # one consumer left: the broker keeps it
    _call(pair, ch, BasicCancel(consumer_tag="t2"), BasicCancelOk(consumer_tag="t2"))
    topology = _topology(pair)
    assert "ad" not in topology.queues
    assert topology.queue_bindings == ()
    assert "x" in topology.exchanges  # not auto-delete: stays


def test_a_server_cancel_or_a_channel_close_auto_deletes_too() -> None:
    pair, ch = _open()
    _call(pair, ch, QueueDeclare(queue="a", auto_delete=True), _ok("a"))
    _call(pair, ch, QueueDeclare(queue="b", auto_delete=True), _ok("b"))
    _call(pair, ch, QueueDeclare(queue="keep"), _ok("keep"))
    _consume(pair, ch, "a", "ta")
    _consume(pair, ch, "keep", "tk")
    pair.server.send_method(ch, BasicCancel(consumer_tag="ta", nowait=True))
    pair.transfer(pair.server)
    assert set(_topology(pair).queues) == {"b", "keep"}  # b never had a consumer: it stays
    _consume(pair, ch, "b", "tb")
    pair.client.close_channel(ch)
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    assert set(_topology(pair).queues) == {"keep"}


def test_an_auto_delete_exchange_is_forgotten_with_its_last_binding() -> None:
    pair, ch = _open()
    _call(
        pair,
        ch,
        ExchangeDeclare(exchange="ax", type="fanout", auto_delete=True),
        ExchangeDeclareOk(),
    )
    _call(pair, ch, ExchangeDeclare(exchange="dest", type="fanout"), ExchangeDeclareOk())
    _call(pair, ch, QueueDeclare(queue="q1"), _ok("q1"))
    _call(pair, ch, QueueDeclare(queue="q2"), _ok("q2"))
    _call(pair, ch, QueueBind(queue="q1", exchange="ax"), QueueBindOk())
    _call(pair, ch, ExchangeBind(destination="dest", source="ax"), ExchangeBindOk())
    _call(pair, ch, QueueUnbind(queue="q1", exchange="ax"), QueueUnbindOk())
    assert "ax" in _topology(pair).exchanges  # still the source of dest's binding
    _call(pair, ch, ExchangeUnbind(destination="dest", source="ax"), ExchangeUnbindOk())
    assert set(_topology(pair).exchanges) == {"dest"}
    # Deleting a queue drops its bindings, which may be an auto-delete exchange's last.
    _call(
        pair,
        ch,
        ExchangeDeclare(exchange="ax2", type="fanout", auto_delete=True),
        ExchangeDeclareOk(),
    )
    _call(pair, ch, QueueBind(queue="q2", exchange="ax2"), QueueBindOk())
    _call(pair, ch, QueueDelete(queue="q2"), QueueDeleteOk(message_count=0))
    assert set(_topology(pair).exchanges) == {"dest"}
