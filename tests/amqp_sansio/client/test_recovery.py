"""The recovery policy and plan of the client layer, and the restorer run on a core against the
embedded broker's model in memory (``amqp_broker.memory_server``)."""

from __future__ import annotations

import pickle
import random
from typing import TYPE_CHECKING

import pytest

from amqp_broker import memory_server
from amqp_sansio import (
    BasicConsume,
    BasicConsumeOk,
    BasicQos,
    ConfirmSelect,
    ConnectionLost,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    MessageReceived,
    MethodReceived,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
)
from amqp_sansio.client import (
    AccessRefused,
    AMQPError,
    ChannelBook,
    ConnectionLostError,
    NotFound,
    PreconditionFailed,
    RecoveryPlan,
    RecoveryPolicy,
    RecoveryStep,
    ResourceLocked,
    Router,
    StaleDeliveryError,
    TopologyRecoveryError,
    check_settle,
    error_for_close,
)
from amqp_sansio.testing import ConnectionPair, MemoryConnection

if TYPE_CHECKING:
    from amqp_sansio import Method


def _ok(queue: str) -> QueueDeclareOk:
    return QueueDeclareOk(queue=queue, message_count=0, consumer_count=0)


# --- The policy -------------------------------------------------------------------------------


def test_backoff_grows_to_its_cap_with_jitter_below_it() -> None:
    policy = RecoveryPolicy(initial_delay=1, multiplier=2, max_delay=5, jitter=0)
    assert [policy.delay(n) for n in range(1, 7)] == [0, 1, 2, 4, 5, 5]
    jittered = RecoveryPolicy(initial_delay=1, multiplier=2, max_delay=5, jitter=0.5)
    rng = random.Random(1)
    draws = [jittered.delay(4, rng) for _ in range(200)]
    assert all(2 <= d <= 4 for d in draws)
    assert len(set(draws)) > 100  # spread, so clients do not come back in step


def test_endpoints_in_turn_and_limits() -> None:
    policy = RecoveryPolicy(endpoints=["amqp://a", "amqp://b"], max_attempts=3)
    assert [policy.endpoint(n, "amqp://x") for n in (1, 2, 3)] == [
        "amqp://a",
        "amqp://b",
        "amqp://a",
    ]
    assert RecoveryPolicy().endpoint(4, "amqp://x") == "amqp://x"
    assert not policy.gives_up(2, 1e9)
    assert policy.gives_up(3, 0)
    assert RecoveryPolicy(max_duration=10).gives_up(1, 10)
    assert not RecoveryPolicy().gives_up(10**6, 1e9)


def test_what_triggers_recovery() -> None:
    policy = RecoveryPolicy()
    assert policy.triggers(ConnectionLostError("socket closed"))
    assert policy.triggers(error_for_close(320, "CONNECTION_FORCED", connection=True))
    for code in (200, 403, 530, 541):
        assert not policy.triggers(error_for_close(code, "no", connection=True))
    assert not policy.triggers(error_for_close(404, "NOT_FOUND", connection=False))
    assert RecoveryPolicy(recover_codes={320, 541}).triggers(
        error_for_close(541, "INTERNAL_ERROR", connection=True)
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_delay": -1}, "initial_delay"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"jitter": 2}, "jitter"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_duration": 0}, "max_duration"),
        ({"publish_buffer": -1}, "publish_buffer"),
        ({"on_topology_error": "maybe"}, "on_topology_error"),
        ({"stale_settle": "panic"}, "stale_settle"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RecoveryPolicy(**kwargs)  # type: ignore[arg-type]


def test_stale_settles() -> None:
    assert check_settle(5, 2, 2, stale="raise")
    assert not check_settle(5, 1, 2, stale="ignore")
    with pytest.raises(StaleDeliveryError) as info:
        check_settle(5, 1, 2, stale="raise")
    assert (info.value.delivery_tag, info.value.epoch, info.value.current_epoch) == (5, 1, 2)
    copy = pickle.loads(pickle.dumps(info.value))
    assert str(copy) == str(info.value)


# --- The plan ---------------------------------------------------------------------------------


def _lost_topology() -> MemoryConnection:
    """A connection with a bit of everything declared, the link cut."""
    conn = MemoryConnection(memory_server())
    conn.open()
    ch = conn.open_channel()
    consumer_ch = conn.open_channel()
    method: Method
    for method in (
        ExchangeDeclare(exchange="src", type="fanout"),
        ExchangeDeclare(exchange="dst", type="direct", auto_delete=True),
        ExchangeBind(destination="dst", source="src"),
        QueueDeclare(queue="durable", durable=True),
        QueueDeclare(queue="", exclusive=True),
        QueueDeclare(queue="ad", auto_delete=True),
    ):
        conn.send(ch, method)
        conn.pump()
    (server_named,) = [q for q in conn.core.topology.queues if q.startswith("amq.gen-")]
    for method in (
        QueueBind(queue="durable", exchange="dst", routing_key="k"),
        QueueBind(queue=server_named, exchange="src"),
    ):
        conn.send(ch, method)
        conn.pump()
    conn.send(ch, ConfirmSelect())
    for method in (
        BasicQos(prefetch_count=7),
        BasicConsume(queue="durable", consumer_tag="c1"),
        BasicConsume(queue=server_named, consumer_tag="c2"),
    ):
        conn.send(consumer_ch, method)
        conn.pump()
    return conn


def test_the_plan_restores_in_order() -> None:
    conn = _lost_topology()
    topology = conn.core.topology
    plan = RecoveryPlan(topology, channels=[1, 2], confirm_channels=[1])
    kinds = [step.kind for step in plan.steps]
    assert kinds == [
        "exchange",
        "exchange",
        "queue",
        "queue",
        "queue",
        "queue_binding",
        "queue_binding",
        "exchange_binding",
        "confirm",
        "qos",
        "consumer",
        "consumer",
    ]
    assert plan.channels == (1, 2)
    assert [s.channel for s in plan.steps if s.kind in ("qos", "consumer")] == [2, 2, 2]
    # The consumers keep the tags the broker confirmed.
    consumers = [plan.method(s) for s in plan.steps if s.kind == "consumer"]
    assert [c.consumer_tag for c in consumers if isinstance(c, BasicConsume)] == ["c1", "c2"]
    assert plan.skipped == []


def test_a_server_named_queue_is_renamed_and_what_names_it_follows() -> None:
    topology = _lost_topology().core.topology
    plan = RecoveryPlan(topology, channels=[1, 2])
    (old,) = [q for q in topology.queues if q.startswith("amq.gen-")]
    declare = next(s for s in plan.steps if s.kind == "queue" and s.name == old)
    assert isinstance(declare.method, QueueDeclare)
    assert declare.method.queue == ""  # declared again the same way: the broker names it
    plan.completed(declare, _ok("amq.gen-new"))
    assert plan.renamed == {old: "amq.gen-new"}
    named = [plan.method(s) for s in plan.steps if s.kind in ("queue_binding", "consumer")]
    queues = {m.queue for m in named if isinstance(m, QueueBind | BasicConsume)}
    assert queues == {"durable", "amq.gen-new"}


def test_the_policy_and_filter_leave_entities_out_with_what_names_them() -> None:
    topology = _lost_topology().core.topology
    plan = RecoveryPlan(
        topology,
        channels=[1, 2],
        policy=RecoveryPolicy(restore_exclusive=False, restore_auto_delete=False),
    )
    names = {s.name for s in plan.steps}
    assert "ad" not in names
    assert "dst" not in names  # auto-delete exchange, and the bindings naming it
    assert not [s for s in plan.steps if "amq.gen-" in s.name]
    assert [s.name for s in plan.steps if s.kind == "consumer"] == ["c1"]
    assert [s.kind for s in plan.steps if s.kind.endswith("binding")] == []
    skipped = RecoveryPlan(
        topology,
        channels=[1, 2],
        policy=RecoveryPolicy(topology_filter=lambda step: step.name != "durable"),
    )
    assert "durable" not in {s.name for s in skipped.steps}
    assert "c1" not in {s.name for s in skipped.steps}
    assert {s.name for s in skipped.skipped} >= {"durable", "c1"}


# --- The restorer against the broker's model --------------------------------------------------


def test_recovery_restores_the_topology_on_the_broker() -> None:
    conn = _lost_topology()
    assert isinstance(conn.cut()[-1], ConnectionLost)
    old = conn.core.topology
    recovered = conn.recover()
    new = conn.core.topology
    assert set(new.exchanges) == set(old.exchanges)
    assert len(new.queues) == len(old.queues)
    assert set(recovered.renamed_queues.values()) <= set(new.queues)
    assert sorted(tag for _, tag in new.consumers) == ["c1", "c2"]
    assert recovered.epoch == 1


def _refusing_restore(policy: RecoveryPolicy) -> MemoryConnection:
    """A lost connection whose exchange 'x' another connection redeclared with another type
    meanwhile: restoring it is refused with 406."""
    server = memory_server()
    conn = MemoryConnection(server, policy=policy)
    conn.open()
    ch = conn.open_channel()
    method: Method
    for method in (
        ExchangeDeclare(exchange="x", type="direct"),
        QueueDeclare(queue="q"),
        QueueBind(queue="q", exchange="x", routing_key="k"),
    ):
        conn.send(ch, method)
        conn.pump()
    conn.cut()
    other = MemoryConnection(server)
    other.open()
    och = other.open_channel()
    for method in (ExchangeDelete(exchange="x"), ExchangeDeclare(exchange="x", type="fanout")):
        other.send(och, method)
        other.pump()
    return conn


def test_a_refused_step_names_its_entity_and_is_retried() -> None:
    conn = _refusing_restore(RecoveryPolicy(max_attempts=2))
    with pytest.raises(AssertionError, match="gave up after 2 attempts"):
        conn.recover()
    error = conn.last_error
    assert isinstance(error, TopologyRecoveryError)
    assert error.step.kind == "exchange"
    assert error.step.name == "x"
    assert isinstance(error.cause, PreconditionFailed)
    assert str(error).startswith("could not restore exchange 'x': ")
    assert conn.failed_attempts == 2


def test_a_refused_step_is_skipped_when_the_policy_says_so() -> None:
    conn = _refusing_restore(RecoveryPolicy(on_topology_error="skip"))
    recovered = conn.recover()
    assert [(s.kind, s.name) for s in recovered.skipped] == [("exchange", "x")]
    # The rest went on, on a reopened channel: the queue and its binding are back.
    assert "q" in conn.core.topology.queues
    assert len(conn.core.topology.queue_bindings) == 1


def test_a_filtered_step_is_reported_skipped() -> None:
    def not_x(step: RecoveryStep) -> bool:
        return step.name != "x"

    conn = _refusing_restore(RecoveryPolicy(topology_filter=not_x, max_attempts=1))
    recovered = conn.recover()
    # The binding names the exchange left out: it is left out too.
    assert [(s.kind, s.name) for s in recovered.skipped] == [
        ("exchange", "x"),
        ("queue_binding", "x->q (k)"),
    ]
    assert set(conn.core.topology.queues) == {"q"}
    assert conn.core.topology.exchanges == {}


def test_an_exclusive_queue_still_held_is_retried_not_fatal() -> None:
    """405 RESOURCE_LOCKED: another connection holds the client-named exclusive queue (as the
    broker may for a dead connection it has not noticed yet). The attempt fails naming the
    queue; once it is released, the next recovery succeeds."""
    server = memory_server()
    conn = MemoryConnection(server, policy=RecoveryPolicy(max_attempts=1))
    conn.open()
    ch = conn.open_channel()
    conn.send(ch, QueueDeclare(queue="held", exclusive=True))
    conn.pump()
    conn.cut()
    holder = MemoryConnection(server)
    holder.open()
    hch = holder.open_channel()
    holder.send(hch, QueueDeclare(queue="held", exclusive=True))
    holder.pump()
    with pytest.raises(AssertionError, match="gave up after 1 attempts"):
        conn.recover()
    error = conn.last_error
    assert isinstance(error, TopologyRecoveryError)
    assert (error.step.kind, error.step.name) == ("queue", "held")
    assert isinstance(error.cause, ResourceLocked)
    holder.cut()  # the holder goes: the broker deletes its exclusive queue
    recovered = conn.recover()
    assert recovered.skipped == ()
    assert "held" in conn.core.topology.queues


# --- Reopening a channel after a channel error (RecoveryPolicy.reopen_channels) ---------------


class _Waiter:
    """The smallest :class:`~amqp_sansio.client.Waiter`: keeps what it got."""

    def __init__(self) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self.finished = False

    def done(self) -> bool:
        return self.finished

    def set_result(self, result: object, /) -> None:
        self.result, self.finished = result, True

    def set_exception(self, exception: BaseException, /) -> None:
        self.error, self.finished = exception, True


class _Sink:
    """A consumer sink that records how it ended."""

    def __init__(self) -> None:
        self.ended: list[tuple[AMQPError | None, bool]] = []

    def deliver(self, event: MessageReceived, book: ChannelBook, /) -> bool:
        return True

    def finish(self, error: AMQPError | None, by_us: bool, /) -> None:
        self.ended.append((error, by_us))

    def cancelling(self) -> None:
        pass

    def drop_unhanded(self) -> int:
        return 0


def test_a_channel_error_reopens_the_channel_once_and_a_refused_restore_ends_it() -> None:
    pair = ConnectionPair()
    pair.handshake()
    router = Router(pair.client)
    reopened: list[tuple[int, int, AMQPError]] = []
    router.recover_with(
        RecoveryPolicy(reopen_channels=True),
        lambda _error: False,
        lambda old, book, cause: reopened.append((old, book.number, cause)),
    )

    def to_client() -> None:
        for event in pair.transfer(pair.server):
            router.handle(event)

    number = pair.client.open_channel()
    router.channel_opening(number, _Waiter())
    pair.transfer(pair.client)
    to_client()
    consume = BasicConsume(queue="q", consumer_tag="c")
    sink = _Sink()
    pair.client.send_method(number, consume)
    router.expect(number, consume, _Waiter(), sink)
    pair.transfer(pair.client)
    pair.server.send_method(number, BasicConsumeOk(consumer_tag="c"))
    to_client()

    # A channel error: the channel opens again and consumes again, with the same tag.
    pair.server.close_channel(number, 404, "NOT_FOUND - no queue 'missing'")
    to_client()
    ((old, new, cause),) = reopened
    assert (old, type(cause)) == (number, NotFound)
    assert sink.ended == []
    sent = [e for e in pair.transfer(pair.client) if isinstance(e, MethodReceived)]
    assert [(e.channel, e.method) for e in sent][-1] == (new, consume)

    # Refused while being restored (someone else consumes exclusively meanwhile): it stays
    # closed, and the consumer ends with the refusal.
    pair.server.close_channel(new, 403, "ACCESS_REFUSED - queue 'q' in exclusive use")
    to_client()
    assert len(reopened) == 1
    assert new not in router.channels
    ((error, by_us),) = sink.ended
    assert isinstance(error, AccessRefused)
    assert not by_us
