"""The broker without sockets: client cores talk to :class:`amqp_broker.Session`s through
``amqp_sansio.testing.ConnectionPair``; every assertion is on what a client core received.

The :class:`Net` harness here is shared by the other ``test_broker_*`` modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

from amqp_broker import Broker, BrokerOptions, Session, User
from amqp_sansio import (
    NEED_DATA,
    AccessRequest,
    AccessRequestOk,
    BasicAck,
    BasicCancel,
    BasicConsume,
    BasicConsumeOk,
    BasicDeliver,
    BasicGet,
    BasicGetEmpty,
    BasicGetOk,
    BasicNack,
    BasicProperties,
    BasicPublish,
    BasicQos,
    BasicRecover,
    BasicReject,
    ChannelClosed,
    ChannelFlow,
    ChannelFlowOk,
    ConfirmSelect,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionUpdateSecretOk,
    ConsumerCancelled,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    MessageReceived,
    MethodReceived,
    PublishConfirmed,
    PublishNacked,
    PublishReturned,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    RemoteProtocolError,
    TxCommit,
    TxRollback,
    TxSelect,
)
from amqp_sansio.testing import ConnectionPair, get_all_events

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from amqp_sansio import Event, FieldTable, Method

USERS: Final = {"guest": "guest", "alice": "s3cret"}
WALL_CLOCK: Final = 1_700_000_000.0


class Clock:
    """A hand-moved monotonic clock for TTL tests."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Transport:
    """The session's transport in the harness: what the server core has not handed to the
    client yet counts as output; reading can be paused."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.paused = False

    @property
    def outbound_size(self) -> int:
        return self.client.server.outbound_size

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Client:
    """One client core joined to a broker session."""

    def __init__(self, net: Net, config: ConnectionConfig) -> None:
        self.net = net
        self.pair = ConnectionPair(client_config=config)
        self.core = self.pair.client
        self.server = self.pair.server
        self.transport = Transport(self)
        self.session = Session(
            net.broker,
            self.server,
            users=USERS if net.legacy_users else None,
            peer=f"test{id(self)}",
            transport=self.transport if net.transport else None,
            coalesce_confirms=net.coalesce,
        )
        #: False: the client's socket is not read (nothing moves from the server to it).
        self.reading = True
        self.server_failed = False
        self.events: list[Event] = []
        #: Every event this client ever received, for :meth:`closed`.
        self.history: list[Event] = []

    def move(self) -> bool:
        """Move bytes both ways once; True when something moved."""
        moved = False
        blocked = self.transport.paused  # the server reads nothing: the rest waits
        data = b"" if blocked else self.core.data_to_send()
        if data and not self.session.finished:
            moved = True
            self.server.receive_data(data)
        while not blocked and not self.session.finished and not self.server_failed:
            try:
                event = self.server.next_event()
            except RemoteProtocolError as exc:
                self.server_failed = True
                self.session.protocol_error(exc)
                break
            if event is NEED_DATA:
                break
            moved = True
            self.session.handle(event)
            blocked = self.transport.paused
        if not self.reading:
            return moved
        self.session.flush_confirms()
        out = self.server.data_to_send()
        self.session.drained()
        if out:
            moved = True
            self.core.receive_data(out)
            received = get_all_events(self.core)
            self.events += received
            self.history += received
        return moved

    def take(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    def channel(self) -> int:
        number = self.core.open_channel()
        self.net.pump()
        self.take()
        return number

    def call(self, channel: int, method: Method) -> list[Event]:
        """Send *method*, let everything settle, return this client's events."""
        self.core.send_method(channel, method)
        self.net.pump()
        return self.take()

    def reply(self, channel: int, method: Method) -> Method:
        """Send a synchronous request and return its reply method."""
        events = self.call(channel, method)
        replies = [e for e in events if isinstance(e, MethodReceived) and e.request]
        assert len(replies) == 1, events
        # anything else (deliveries right after consume-ok) stays for the test to take
        self.events = [e for e in events if e is not replies[0]] + self.events
        return replies[0].method

    def publish(
        self,
        channel: int,
        body: bytes,
        *,
        exchange: str = "",
        routing_key: str = "",
        properties: BasicProperties | None = None,
        mandatory: bool = False,
        immediate: bool = False,
    ) -> int | None:
        number = self.core.publish(
            channel,
            BasicPublish(
                exchange=exchange,
                routing_key=routing_key,
                mandatory=mandatory,
                immediate=immediate,
            ),
            properties or BasicProperties(),
            body,
        )
        self.net.pump()
        return number

    def declare(self, channel: int, queue: str = "", **kwargs: bool | FieldTable) -> str:
        reply = self.reply(channel, QueueDeclare(queue=queue, **kwargs))  # type: ignore[arg-type]
        assert isinstance(reply, QueueDeclareOk)
        return reply.queue

    def get(self, channel: int, queue: str, *, no_ack: bool = True) -> MessageReceived | None:
        events = self.call(channel, BasicGet(queue=queue, no_ack=no_ack))
        for event in events:
            if isinstance(event, MessageReceived):
                return event
            if isinstance(event, MethodReceived) and isinstance(event.method, BasicGetEmpty):
                return None
        raise AssertionError(f"no get-ok or get-empty: {events}")

    def drain(self, channel: int, queue: str) -> list[bytes]:
        bodies = []
        while (message := self.get(channel, queue)) is not None:
            bodies.append(bytes(message.body))
        return bodies

    def consume(self, channel: int, queue: str, **kwargs: bool | str) -> str:
        reply = self.reply(channel, BasicConsume(queue=queue, **kwargs))  # type: ignore[arg-type]
        assert isinstance(reply, BasicConsumeOk)
        return reply.consumer_tag

    def closed(self) -> ChannelClosed | ConnectionClosed:
        """The close this client received last."""
        for event in reversed(self.history):
            if isinstance(event, ChannelClosed | ConnectionClosed):
                return event
        raise AssertionError(f"nothing closed: {self.history}")


def deliveries(events: Sequence[Event]) -> list[MessageReceived]:
    return [
        e for e in events if isinstance(e, MessageReceived) and isinstance(e.method, BasicDeliver)
    ]


def bodies(events: Sequence[Event]) -> list[bytes]:
    return [bytes(e.body) for e in deliveries(events)]


def tags(events: Sequence[Event]) -> list[int]:
    tags = []
    for event in deliveries(events):
        assert isinstance(event.method, BasicDeliver)
        tags.append(event.method.delivery_tag)
    return tags


class Net:
    """A broker and the client cores connected to it."""

    def __init__(
        self,
        vhosts: tuple[str, ...] = ("/",),
        *,
        options: BrokerOptions | None = None,
        users: Mapping[str, str | User] | None = None,
        transport: bool = False,
        coalesce: bool = False,
    ) -> None:
        self.clock = Clock()
        self.broker = Broker(
            vhosts=vhosts,
            clock=self.clock,
            wall_clock=lambda: WALL_CLOCK,
            options=options,
            users=users,
        )
        #: Sessions authenticate against USERS (allowed everything), not the broker's users.
        self.legacy_users = users is None
        self.transport = transport
        self.coalesce = coalesce
        self.clients: list[Client] = []

    def connect(
        self,
        *,
        username: str = "guest",
        password: str = "guest",
        vhost: str = "/",
        mechanism: str = "PLAIN",
        cancel_notify: bool = True,
    ) -> Client:
        properties: FieldTable = {}
        if not cancel_notify:
            properties = {"capabilities": {"consumer_cancel_notify": False}}
        config = ConnectionConfig(
            username=username,
            password=password,
            virtual_host=vhost,
            sasl_mechanism=mechanism,
            client_properties=properties,
        )
        client = Client(self, config)
        self.clients.append(client)
        return client

    def pump(self) -> None:
        for _ in range(10_000):
            moved = [client.move() for client in self.clients]  # every client, every round
            if not any(moved):
                return
        raise AssertionError("the network never settled")

    def advance(self, seconds: float) -> None:
        """Move the clock and run the broker's expiry timer like the transport does."""
        self.clock.now += seconds
        deadline = self.broker.next_deadline()
        if deadline is not None and deadline <= self.clock.now:
            self.broker.handle_timer()
        self.pump()


@pytest.fixture
def net() -> Net:
    return Net(vhosts=("/", "other"))


def open_client(net: Net, **kwargs: str | bool) -> Client:
    client = net.connect(**kwargs)  # type: ignore[arg-type]
    net.pump()
    client.take()
    assert client.core.state.value == "OPEN"
    return client


# --- handshake ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_with_each_mechanism(net: Net, mechanism: str) -> None:
    client = open_client(net, username="alice", password="s3cret", mechanism=mechanism)
    assert client.session.username == "alice"


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_bad_password_is_refused_with_403(net: Net, mechanism: str) -> None:
    client = net.connect(password="wrong", mechanism=mechanism)
    net.pump()
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert closed.reply_code == 403
    assert closed.reply_text == (
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. "
        "For details see the broker logfile."
    )
    assert client.session.finished
    other = open_client(net)  # the broker keeps serving
    assert other.declare(other.channel(), "still-here") == "still-here"


def test_unknown_vhost_is_refused_with_530(net: Net) -> None:
    client = net.connect(vhost="nowhere")
    net.pump()
    closed = client.closed()
    assert (closed.reply_code, closed.reply_text) == (530, "NOT_ALLOWED - vhost nowhere not found")


def test_virtual_hosts_are_separate(net: Net) -> None:
    root = open_client(net)
    other = open_client(net, vhost="other")
    ch_root, ch_other = root.channel(), other.channel()
    root.declare(ch_root, "shared-name")
    other.declare(ch_other, "shared-name")
    root.publish(ch_root, b"root", routing_key="shared-name")
    assert other.get(ch_other, "shared-name") is None
    message = root.get(ch_root, "shared-name")
    assert message is not None
    assert message.body == b"root"


# --- queues ---------------------------------------------------------------------------------


def test_server_named_queue_and_declare_ok_counts(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    name = client.declare(ch, "", exclusive=True)
    assert name.startswith("amq.gen-")
    client.publish(ch, b"a", routing_key=name)
    client.publish(ch, b"b", routing_key=name)
    client.consume(ch, name, no_ack=False)
    ok = client.reply(client.channel(), QueueDeclare(queue=name, passive=True))
    assert isinstance(ok, QueueDeclareOk)
    # both messages went to the consumer: none ready, one consumer
    assert (ok.message_count, ok.consumer_count) == (0, 1)


def test_passive_declare_of_missing_queue_is_404(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.call(ch, QueueDeclare(queue="missing", passive=True))
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    assert (closed.reply_code, closed.reply_text) == (
        404,
        "NOT_FOUND - no queue 'missing' in vhost '/'",
    )
    assert (closed.class_id, closed.method_id) == (50, 10)


def test_redeclare_with_other_arguments_is_406(net: Net) -> None:
    client = open_client(net)
    client.declare(client.channel(), "q", arguments={"x-max-length": 5})
    ch = client.channel()
    client.call(ch, QueueDeclare(queue="q", arguments={"x-max-length": 6}))
    closed = client.closed()
    assert closed.reply_code == 406
    assert closed.reply_text.startswith("PRECONDITION_FAILED - inequivalent arg 'x-max-length'")
    ch = client.channel()
    client.call(ch, QueueDeclare(queue="q", durable=True, arguments={"x-max-length": 5}))
    assert client.closed().reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': "
        "received 'true' but current is 'false'"
    )


def test_reserved_prefix_is_403(net: Net) -> None:
    client = open_client(net)
    client.call(client.channel(), QueueDeclare(queue="amq.mine"))
    assert (client.closed().reply_code, client.closed().reply_text) == (
        403,
        "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'",
    )
    client.call(client.channel(), ExchangeDeclare(exchange="amq.mine", type="direct"))
    assert client.closed().reply_code == 403


def test_exclusive_queue_of_another_connection_is_405(net: Net) -> None:
    owner, other = open_client(net), open_client(net)
    owner.declare(owner.channel(), "private", exclusive=True)
    for method in (
        QueueDeclare(queue="private", passive=True),
        BasicConsume(queue="private"),
        BasicGet(queue="private"),
        QueuePurge(queue="private"),
        QueueDelete(queue="private"),
        QueueBind(queue="private", exchange="amq.direct", routing_key="k"),
    ):
        other.call(other.channel(), method)
        closed = other.closed()
        assert isinstance(closed, ChannelClosed)
        assert closed.reply_code == 405, method
        assert closed.reply_text.startswith(
            "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'private'"
        )
    # deleted with its owner
    owner.core.close()
    net.pump()
    assert "private" not in net.broker.vhosts["/"].queues
    other.declare(other.channel(), "private")  # now free


def test_exclusive_consumer_is_403(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.consume(ch, "q")
    ch2 = client.channel()
    client.call(ch2, BasicConsume(queue="q", exclusive=True))
    assert (client.closed().reply_code, client.closed().reply_text) == (
        403,
        "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use",
    )


def test_purge_and_delete_with_conditions(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    for body in (b"1", b"2", b"3"):
        client.publish(ch, body, routing_key="q")
    client.call(ch, QueueDelete(queue="q", if_empty=True))
    assert client.closed().reply_text == "PRECONDITION_FAILED - queue 'q' in vhost '/' not empty"
    ch = client.channel()
    purged = client.reply(ch, QueuePurge(queue="q"))
    assert isinstance(purged, QueuePurgeOk)
    assert purged.message_count == 3
    client.consume(ch, "q")
    client.call(ch, QueueDelete(queue="q", if_unused=True))
    assert client.closed().reply_text == "PRECONDITION_FAILED - queue 'q' in vhost '/' in use"
    ch = client.channel()
    client.publish(ch, b"4", routing_key="q")
    deleted = client.reply(ch, QueueDelete(queue="q"))
    # the consumer went with the channel the 406 closed: the message waited in the queue
    assert isinstance(deleted, QueueDeleteOk)
    assert deleted.message_count == 1
    assert isinstance(client.reply(ch, QueueDelete(queue="q")), QueueDeleteOk)  # idempotent


def test_auto_delete_queue_goes_with_its_last_consumer(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "temp", auto_delete=True)
    first = client.consume(ch, "temp")
    second = client.consume(ch, "temp")
    client.call(ch, BasicCancel(consumer_tag=first))
    assert "temp" in net.broker.vhosts["/"].queues
    client.call(ch, BasicCancel(consumer_tag=second))
    assert "temp" not in net.broker.vhosts["/"].queues


def test_queue_deleted_under_a_consumer_sends_basic_cancel(net: Net) -> None:
    consumer, admin = open_client(net), open_client(net)
    ch = consumer.channel()
    consumer.declare(ch, "doomed")
    tag = consumer.consume(ch, "doomed")
    quiet = open_client(net, cancel_notify=False)
    quiet_ch = quiet.channel()
    quiet.consume(quiet_ch, "doomed")
    admin.call(admin.channel(), QueueDelete(queue="doomed"))
    assert ConsumerCancelled(channel=ch, consumer_tag=tag) in consumer.take()
    assert not [e for e in quiet.take() if isinstance(e, ConsumerCancelled)]


def test_default_queue_name_is_the_last_declared(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.call(ch, QueueBind(queue="", exchange="amq.direct"))
    assert client.closed().reply_text == "NOT_FOUND - no previously declared queue"
    ch = client.channel()
    name = client.declare(ch, "")
    client.call(ch, QueueBind(queue="", exchange="amq.direct"))  # routing key = queue name
    client.publish(ch, b"x", exchange="amq.direct", routing_key=name)
    assert client.drain(ch, "") == [b"x"]


# --- consumers ------------------------------------------------------------------------------


def test_round_robin_between_consumers(net: Net) -> None:
    a, b, producer = open_client(net), open_client(net), open_client(net)
    ch_a, ch_b, ch_p = a.channel(), b.channel(), producer.channel()
    producer.declare(ch_p, "work")
    a.consume(ch_a, "work", no_ack=True)
    b.consume(ch_b, "work", no_ack=True)
    for index in range(6):
        producer.publish(ch_p, b"%d" % index, routing_key="work")
    got_a, got_b = bodies(a.take()), bodies(b.take())
    assert sorted(got_a + got_b) == [b"%d" % i for i in range(6)]
    assert (len(got_a), len(got_b)) == (3, 3)
    assert {got_a[0], got_b[0]} == {b"0", b"1"}  # alternating from the start


def test_per_consumer_prefetch_holds_back_until_ack(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.reply(ch, BasicQos(prefetch_count=2))
    client.consume(ch, "q")
    for index in range(5):
        client.publish(ch, b"%d" % index, routing_key="q")
    events = client.take()
    assert bodies(events) == [b"0", b"1"]
    events = client.call(ch, BasicAck(delivery_tag=tags(events)[1], multiple=True))
    assert bodies(events) == [b"2", b"3"]


def test_channel_wide_prefetch_is_shared_by_consumers(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q1")
    client.declare(ch, "q2")
    client.reply(ch, BasicQos(prefetch_count=3, global_=True))
    client.consume(ch, "q1")
    client.consume(ch, "q2")
    for index in range(3):
        client.publish(ch, b"1-%d" % index, routing_key="q1")
        client.publish(ch, b"2-%d" % index, routing_key="q2")
    events = client.take()
    assert len(deliveries(events)) == 3
    assert len(deliveries(client.call(ch, BasicAck(delivery_tag=tags(events)[0])))) == 1


def test_nack_requeue_redelivers_with_flag(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"first", routing_key="q")
    client.publish(ch, b"second", routing_key="q")
    client.reply(ch, BasicQos(prefetch_count=1))
    client.consume(ch, "q")
    first = deliveries(client.take())
    assert [bytes(m.body) for m in first] == [b"first"]
    assert isinstance(first[0].method, BasicDeliver)
    assert not first[0].method.redelivered
    again = deliveries(client.call(ch, BasicNack(delivery_tag=tags(first)[0], requeue=True)))
    assert [bytes(m.body) for m in again] == [b"first"]
    assert isinstance(again[0].method, BasicDeliver)
    assert again[0].method.redelivered
    assert bodies(client.call(ch, BasicReject(delivery_tag=tags(again)[0], requeue=False))) == [
        b"second"
    ]


def test_unacked_messages_return_when_the_channel_or_connection_goes(net: Net) -> None:
    consumer, other = open_client(net), open_client(net)
    ch = consumer.channel()
    consumer.declare(ch, "q")
    for index in range(3):
        consumer.publish(ch, b"%d" % index, routing_key="q")
    consumer.consume(ch, "q")
    assert len(deliveries(consumer.take())) == 3
    consumer.core.close_channel(ch)
    net.pump()
    ch2 = consumer.channel()
    consumer.consume(ch2, "q")
    again = deliveries(consumer.take())
    assert [bytes(m.body) for m in again] == [b"0", b"1", b"2"]
    assert all(isinstance(m.method, BasicDeliver) and m.method.redelivered for m in again)
    # the transport dies: the unacked messages go to the other connection's get
    consumer.server.receive_data(b"")
    consumer.session.handle(consumer.server.next_event())  # type: ignore[arg-type]
    assert other.drain(other.channel(), "q") == [b"0", b"1", b"2"]


def test_basic_get_reports_message_count_and_empty(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    for body in (b"a", b"b", b"c"):
        client.publish(ch, body, routing_key="q")
    message = client.get(ch, "q", no_ack=False)
    assert message is not None
    assert isinstance(message.method, BasicGetOk)
    assert (message.body, message.method.message_count) == (b"a", 2)
    client.call(ch, BasicAck(delivery_tag=message.method.delivery_tag))
    assert client.drain(ch, "q") == [b"b", b"c"]
    assert client.get(ch, "q") is None


def test_recover_redelivers_unacked(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"m", routing_key="q")
    client.consume(ch, "q")
    assert bodies(client.take()) == [b"m"]
    events = client.call(ch, BasicRecover(requeue=True))
    again = deliveries(events)
    assert [bytes(m.body) for m in again] == [b"m"]
    assert isinstance(again[0].method, BasicDeliver)
    assert again[0].method.redelivered
    assert again[0].method.delivery_tag == 2


def test_unknown_delivery_tag_is_406(net: Net) -> None:
    client, other = open_client(net), open_client(net)
    ch = client.channel()
    client.call(ch, BasicAck(delivery_tag=5))
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    assert (closed.reply_code, closed.reply_text) == (
        406,
        "PRECONDITION_FAILED - unknown delivery tag 5",
    )
    # double ack
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"x", routing_key="q")
    message = client.get(ch, "q", no_ack=False)
    assert message is not None
    assert isinstance(message.method, BasicGetOk)
    client.call(ch, BasicAck(delivery_tag=message.method.delivery_tag))
    client.call(ch, BasicAck(delivery_tag=message.method.delivery_tag))
    assert client.closed().reply_text == "PRECONDITION_FAILED - unknown delivery tag 1"
    assert other.declare(other.channel(), "fine") == "fine"


def test_single_active_consumer(net: Net) -> None:
    a, b = open_client(net), open_client(net)
    ch_a, ch_b = a.channel(), b.channel()
    a.declare(ch_a, "sac", arguments={"x-single-active-consumer": True})
    tag_a = a.consume(ch_a, "sac", no_ack=True)
    b.consume(ch_b, "sac", no_ack=True)
    for index in range(3):
        a.publish(ch_a, b"%d" % index, routing_key="sac")
    assert len(bodies(a.take())) == 3
    assert bodies(b.take()) == []
    a.call(ch_a, BasicCancel(consumer_tag=tag_a))
    a.publish(ch_a, b"later", routing_key="sac")
    assert bodies(b.take()) == [b"later"]


def test_direct_reply_to(net: Net) -> None:
    requester, responder = open_client(net), open_client(net)
    ch_r, ch_s = requester.channel(), responder.channel()
    responder.declare(ch_s, "rpc")
    responder.consume(ch_s, "rpc", no_ack=True)
    requester.consume(ch_r, "amq.rabbitmq.reply-to", no_ack=True)
    requester.publish(
        ch_r,
        b"ping",
        routing_key="rpc",
        properties=BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="1"),
    )
    (request,) = deliveries(responder.take())
    assert isinstance(request.properties, BasicProperties)
    reply_to = request.properties.reply_to
    assert reply_to is not None
    assert reply_to.startswith("amq.rabbitmq.reply-to.")
    responder.publish(
        ch_s, b"pong", routing_key=reply_to, properties=BasicProperties(correlation_id="1")
    )
    assert bodies(requester.take()) == [b"pong"]


# --- publishing -----------------------------------------------------------------------------


def test_publish_to_missing_exchange_is_404_and_others_go_on(net: Net) -> None:
    client, other = open_client(net), open_client(net)
    ch = client.channel()
    client.publish(ch, b"x", exchange="no-such-exchange")
    closed = client.closed()
    assert isinstance(closed, ChannelClosed)
    assert (closed.reply_code, closed.reply_text) == (
        404,
        "NOT_FOUND - no exchange 'no-such-exchange' in vhost '/'",
    )
    assert (closed.class_id, closed.method_id) == (60, 40)
    ch_other = other.channel()
    other.declare(ch_other, "q")
    other.publish(ch_other, b"ok", routing_key="q")
    assert other.drain(ch_other, "q") == [b"ok"]


def test_confirms_and_mandatory_returns(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ConfirmSelect())
    client.declare(ch, "q")
    assert client.publish(ch, b"1", routing_key="q") == 1
    assert client.publish(ch, b"2", routing_key="nowhere", mandatory=True) == 2
    assert client.publish(ch, b"3", routing_key="nowhere") == 3
    events = client.take()
    returned = [e for e in events if isinstance(e, PublishReturned)]
    assert len(returned) == 1
    assert (returned[0].method.reply_code, returned[0].method.reply_text) == (312, "NO_ROUTE")
    assert returned[0].publish_number == 2
    confirmed = [n for e in events if isinstance(e, PublishConfirmed) for n in e.publish_numbers]
    assert confirmed == [1, 2, 3]


def test_reject_publish_overflow_nacks(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ConfirmSelect())
    client.declare(ch, "small", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    for body in (b"1", b"2", b"3"):
        client.publish(ch, body, routing_key="small")
    events = client.take()
    assert [n for e in events if isinstance(e, PublishConfirmed) for n in e.publish_numbers] == [
        1,
        2,
    ]
    assert [n for e in events if isinstance(e, PublishNacked) for n in e.publish_numbers] == [3]
    assert client.drain(ch, "small") == [b"1", b"2"]


def test_transactions_buffer_publishes_and_acks(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.publish(ch, b"acked-in-tx", routing_key="q")
    client.reply(ch, TxSelect())
    client.publish(ch, b"rolled-back", routing_key="q")
    client.reply(ch, TxRollback())
    message = client.get(ch, "q", no_ack=False)
    assert message is not None
    assert isinstance(message.method, BasicGetOk)
    client.call(ch, BasicAck(delivery_tag=message.method.delivery_tag))
    client.publish(ch, b"committed", routing_key="q")
    client.publish(ch, b"returned", routing_key="nowhere", mandatory=True)
    assert client.get(ch, "q") is None  # nothing visible before commit
    events = client.call(ch, TxCommit())
    assert [bytes(e.body) for e in events if isinstance(e, PublishReturned)] == [b"returned"]
    assert client.drain(ch, "q") == [b"committed"]
    # the ack was committed: closing the channel requeues nothing
    client.core.close_channel(ch)
    net.pump()
    assert client.drain(client.channel(), "q") == []


def test_tx_and_confirm_do_not_mix(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, TxSelect())
    client.call(ch, ConfirmSelect())
    assert (
        client.closed().reply_text == "PRECONDITION_FAILED - cannot switch from tx to confirm mode"
    )
    ch = client.channel()
    client.call(ch, TxCommit())
    assert client.closed().reply_text == "PRECONDITION_FAILED - channel is not transactional"


# --- hard errors ----------------------------------------------------------------------------


def test_unknown_exchange_type_is_503_connection_error(net: Net) -> None:
    client, other = open_client(net), open_client(net)
    client.call(client.channel(), ExchangeDeclare(exchange="x", type="bogus"))
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text) == (
        503,
        "COMMAND_INVALID - unknown exchange type 'bogus'",
    )
    assert client.session.finished
    assert other.declare(other.channel(), "alive") == "alive"


def test_method_on_unopened_channel_is_504(net: Net) -> None:
    client, other = open_client(net), open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.consume(ch, "q")
    client.server.receive_data(
        bytes.fromhex("01 0007 0000000c 0032000a 0000 00 00 00000000 ce".replace(" ", ""))
    )
    with pytest.raises(RemoteProtocolError) as info:
        client.server.next_event()
    assert info.value.reply_code == 504
    client.session.protocol_error(info.value)
    net.pump()
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert closed.reply_code == 504
    # its consumer is gone, so the queue's messages go elsewhere
    other_ch = other.channel()
    other.publish(other_ch, b"x", routing_key="q")
    assert other.drain(other_ch, "q") == [b"x"]


def test_consumer_tag_reuse_is_530(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.consume(ch, "q", consumer_tag="mine")
    client.call(ch, BasicConsume(queue="q", consumer_tag="mine"))
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text) == (
        530,
        "NOT_ALLOWED - attempt to reuse consumer tag 'mine'",
    )


@pytest.mark.parametrize(
    ("method", "text"),
    [
        (BasicQos(prefetch_size=10), "NOT_IMPLEMENTED - prefetch_size!=0 (10)"),
        (BasicRecover(requeue=False), "NOT_IMPLEMENTED - requeue=false"),
    ],
)
def test_unimplemented_options_are_540(net: Net, method: Method, text: str) -> None:
    client = open_client(net)
    client.call(client.channel(), method)
    closed = client.closed()
    assert isinstance(closed, ConnectionClosed)
    assert (closed.reply_code, closed.reply_text) == (540, text)


def test_immediate_publish_is_540(net: Net) -> None:
    client = open_client(net)
    client.publish(client.channel(), b"x", routing_key="q", immediate=True)
    closed = client.closed()
    assert (closed.reply_code, closed.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")


# --- exchanges ------------------------------------------------------------------------------


def test_exchange_lifecycle_errors(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="ex", type="direct"))
    client.call(ch, ExchangeDeclare(exchange="ex", type="fanout"))
    assert client.closed().reply_text == (
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'ex' in vhost '/': "
        "received 'fanout' but current is 'direct'"
    )
    ch = client.channel()
    client.call(ch, ExchangeDeclare(exchange="missing", passive=True))
    assert client.closed().reply_code == 404
    ch = client.channel()
    client.declare(ch, "q")
    client.reply(ch, QueueBind(queue="q", exchange="ex", routing_key="k"))
    client.call(ch, ExchangeDelete(exchange="ex", if_unused=True))
    assert client.closed().reply_text == "PRECONDITION_FAILED - exchange 'ex' in vhost '/' in use"
    ch = client.channel()
    client.call(ch, ExchangeDelete(exchange="amq.direct"))
    assert client.closed().reply_code == 403
    ch = client.channel()
    client.call(ch, QueueBind(queue="q", exchange=""))
    assert (
        client.closed().reply_text
        == "ACCESS_REFUSED - operation not permitted on the default exchange"
    )
    ch = client.channel()
    client.reply(ch, ExchangeDelete(exchange="ex"))
    client.reply(ch, ExchangeDelete(exchange="ex"))  # idempotent, like RabbitMQ 3.10
    client.reply(ch, QueueUnbind(queue="q", exchange="amq.direct", routing_key="never-bound"))


def test_auto_delete_exchange_goes_with_its_last_binding(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="temp-x", type="fanout", auto_delete=True))
    client.declare(ch, "q")
    client.reply(ch, QueueBind(queue="q", exchange="temp-x"))
    client.reply(ch, ExchangeBind(destination="amq.fanout", source="temp-x"))
    client.reply(ch, QueueUnbind(queue="q", exchange="temp-x"))
    assert "temp-x" in net.broker.vhosts["/"].exchanges
    client.reply(ch, ExchangeUnbind(destination="amq.fanout", source="temp-x"))
    assert "temp-x" not in net.broker.vhosts["/"].exchanges


def test_internal_exchange_refuses_publishes(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.reply(ch, ExchangeDeclare(exchange="inner", type="fanout", internal=True))
    client.publish(ch, b"x", exchange="inner")
    assert client.closed().reply_text == (
        "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'"
    )


def test_replies_answer_requests_in_order(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    for name in ("a", "b", "c"):
        client.core.send_method(ch, QueueDeclare(queue=name))
    net.pump()
    names = [
        e.method.queue
        for e in client.take()
        if isinstance(e, MethodReceived) and isinstance(e.method, QueueDeclareOk)
    ]
    assert names == ["a", "b", "c"]


def test_nack_multiple_and_ack_multiple_zero(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    for index in range(4):
        client.publish(ch, b"%d" % index, routing_key="q")
    client.consume(ch, "q")
    delivered = tags(client.take())
    assert delivered == [1, 2, 3, 4]
    client.call(ch, BasicNack(delivery_tag=2, multiple=True, requeue=False))
    client.call(ch, BasicAck(delivery_tag=0, multiple=True))
    client.core.close_channel(ch)
    net.pump()
    assert client.drain(client.channel(), "q") == []


def test_update_secret_and_access_request_are_answered(net: Net) -> None:
    client = open_client(net)
    client.core.update_secret(b"new-token", "refresh")
    net.pump()
    events = client.take()
    assert [type(e.method) for e in events if isinstance(e, MethodReceived)] == [
        ConnectionUpdateSecretOk
    ]
    ok = client.reply(client.channel(), AccessRequest())
    assert isinstance(ok, AccessRequestOk)


def test_channel_flow_pauses_deliveries(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "q")
    client.consume(ch, "q", no_ack=True)
    flow = client.call(ch, ChannelFlow(active=False))
    assert [type(e.method) for e in flow if isinstance(e, MethodReceived)] == [ChannelFlowOk]
    client.publish(ch, b"held", routing_key="q")
    assert bodies(client.take()) == []
    assert bodies(client.call(ch, ChannelFlow(active=True))) == [b"held"]
    client.publish(ch, b"flowing", routing_key="q")
    assert bodies(client.take()) == [b"flowing"]


def test_nowait_methods_get_no_reply(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    for method in (
        ExchangeDeclare(exchange="nw", type="topic", nowait=True),
        QueueDeclare(queue="nwq", nowait=True),
        QueueBind(queue="nwq", exchange="nw", routing_key="#", nowait=True),
        BasicConsume(queue="nwq", consumer_tag="nwc", no_ack=True, nowait=True),
        ConfirmSelect(nowait=True),
    ):
        client.core.send_method(ch, method)
    net.pump()
    assert [e for e in client.take() if isinstance(e, MethodReceived)] == []
    client.publish(ch, b"x", exchange="nw", routing_key="a.b")
    events = client.take()
    assert bodies(events) == [b"x"]
    assert [n for e in events if isinstance(e, PublishConfirmed) for n in e.publish_numbers] == [1]


@pytest.mark.parametrize(
    ("arguments", "flags", "text"),
    [
        (
            {"x-queue-type": "bogus"},
            {"durable": True},
            (
                "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'typed' in vhost '/': "
                "\"unsupported queue type 'bogus'\""
            ),
        ),
        (
            {"x-queue-type": "quorum"},
            {},
            "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'typed' in vhost '/'",
        ),
        (
            {"x-dead-letter-routing-key": "k"},
            {},
            (
                "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue "
                "'typed' in vhost '/': no_dead_letter_exchange"
            ),
        ),
        (
            {"x-expires": 0},
            {},
            (
                "PRECONDITION_FAILED - invalid arg 'x-expires' for queue 'typed' in vhost '/': "
                "{value_zero,0}"
            ),
        ),
    ],
)
def test_queue_type_checks(
    net: Net, arguments: FieldTable, flags: dict[str, bool], text: str
) -> None:
    client = open_client(net)
    client.call(client.channel(), QueueDeclare(queue="typed", arguments=arguments, **flags))
    assert client.closed().reply_text == text


def test_quorum_queue_declares_and_works(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.declare(ch, "qq", durable=True, arguments={"x-queue-type": "quorum"})
    client.declare(ch, "qq", durable=True, arguments={"x-queue-type": "quorum"})
    client.publish(ch, b"x", routing_key="qq")
    assert client.drain(ch, "qq") == [b"x"]


def test_direct_reply_to_misuse(net: Net) -> None:
    client = open_client(net)
    ch = client.channel()
    client.call(ch, BasicConsume(queue="amq.rabbitmq.reply-to", no_ack=False))
    assert client.closed().reply_text == "PRECONDITION_FAILED - reply consumer cannot acknowledge"
    ch = client.channel()
    client.publish(
        ch, b"x", routing_key="q", properties=BasicProperties(reply_to="amq.rabbitmq.reply-to")
    )
    assert client.closed().reply_text == "PRECONDITION_FAILED - fast reply consumer does not exist"
    ch = client.channel()
    client.reply(ch, ConfirmSelect())
    client.publish(ch, b"x", routing_key="amq.rabbitmq.reply-to.gone", mandatory=True)
    assert [type(e) for e in client.take()] == [PublishReturned, PublishConfirmed]


def test_public_names() -> None:
    import amqp_broker

    assert len(amqp_broker.__all__) == len(set(amqp_broker.__all__))
    for name in amqp_broker.__all__:
        obj = getattr(amqp_broker, name)
        assert getattr(obj, "__module__", "amqp_broker") == "amqp_broker", name
