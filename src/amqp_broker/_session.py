"""One client connection: server-role core events in, model calls, core sends out.

A :class:`Session` owns no socket and no clock. The transport feeds it every event from its
core (:meth:`Session.handle`) and reports protocol errors and transport loss; the session
answers through the core's outbound buffer and calls ``wake`` whenever it wrote into the core
from outside its own event handling (a delivery caused by another connection's publish).

Refusals follow RabbitMQ: soft errors (403, 404, 405, 406) close the channel, hard errors
(503, 530, 540) close the connection; the broker keeps serving every other connection.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Final, Protocol, final

import attrs

from amqp_sansio import (
    AMQP_0_8,
    AMQP_0_8_QPID,
    AMQP_0_9_1,
    AccessRequest,
    AccessRequestOk,
    AuthenticationRequested,
    BasicAck,
    BasicCancel,
    BasicCancelOk,
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
    BasicQosOk,
    BasicRecover,
    BasicRecoverAsync,
    BasicRecoverOk,
    BasicReject,
    BasicReturn,
    ChannelClose,
    ChannelClosed,
    ChannelFlowChanged,
    ChannelOpened,
    ConfirmSelect,
    ConfirmSelectOk,
    ConnectionBlocked,
    ConnectionClose,
    ConnectionClosed,
    ConnectionLost,
    ConnectionState,
    ConnectionUnblocked,
    ConnectionUpdateSecret,
    ConnectionUpdateSecretOk,
    ExchangeBind,
    ExchangeBindOk,
    ExchangeDeclare,
    ExchangeDeclareOk,
    ExchangeDelete,
    ExchangeDeleteOk,
    ExchangeUnbind,
    ExchangeUnbindOk,
    Int64,
    LocalProtocolError,
    MessageReceived,
    MethodReceived,
    QueueBind,
    QueueBindOk,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    QueueUnbindOk,
    RemoteProtocolError,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
    TxSelect,
    TxSelectOk,
    VirtualHostRequested,
    parse_credentials,
)

from ._errors import BrokerError
from ._permissions import FULL_ACCESS, UserRegistry

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from amqp_sansio import Connection, Event, FieldTable, Method

    from ._broker import Broker
    from ._channel import ModelChannel, ModelConnection
    from ._message import Message

__all__ = ["Session", "SessionTransport"]

logger: Final = logging.getLogger("amqp_broker")

#: The product qpid-python's client names in its start-ok (its 0-8 dialect: AMQP_0_8_QPID).
_QPID_PRODUCT: Final = "qpid python client"

_LOGIN_REFUSED: Final = (
    "Login was refused using authentication mechanism {}. For details see the broker logfile."
)


def _nothing() -> None:
    return None


class SessionTransport(Protocol):
    """What a session needs from the transport under its core (the broker's server glue)."""

    @property
    def outbound_size(self) -> int:
        """Octets of output not yet written (in the core and being written)."""

    def pause_reading(self) -> None:
        """Stop reading the client's socket (the connection is blocked)."""

    def resume_reading(self) -> None:
        """Read the client's socket again."""


@final
class _Confirms:
    """Publisher confirms of one channel waiting to be sent, coalesced as RabbitMQ does."""

    __slots__ = ("acks", "nacks")

    def __init__(self) -> None:
        self.acks: list[int] = []
        self.nacks: list[int] = []


def _coalesced(numbers: list[int], others: list[int]) -> list[tuple[int, bool]]:
    """RabbitMQ's ``coalesce_and_send``: every number below the smallest of *others* (the
    opposite outcome) goes in one frame with ``multiple``; the rest one by one."""
    numbers = sorted(numbers)
    cutoff = min([numbers[-1] + 1, *others])
    below = [n for n in numbers if n < cutoff]
    frames = [(below[-1], True)] if below else []
    frames += [(n, False) for n in numbers if n >= cutoff]
    return frames


@final
class Session:
    """The broker's side of one client connection, driven by its server-role core.

    :param broker: the shared model.
    :param core: an ``amqp_sansio.Connection`` in the server role.
    :param users: username -> password, for PLAIN and AMQPLAIN, allowed everything
        everywhere; by default the broker's users and their permissions.
    :param wake: called after the session wrote into *core* on behalf of another connection
        (``ServerConnection.schedule_flush``).
    :param peer: the client's address, for log lines.
    :param transport: the transport under *core*: with it the session bounds the output
        buffer (``BrokerOptions.outbound_limit``) and stops reading a blocked connection.
    :param coalesce_confirms: keep publisher confirms until :meth:`flush_confirms` (called
        when the socket can be written) and send them as RabbitMQ does, many in one frame;
        otherwise each publish is confirmed at once.
    """

    def __init__(
        self,
        broker: Broker,
        core: Connection,
        *,
        users: Mapping[str, str] | None = None,
        wake: Callable[[], None] = _nothing,
        peer: str = "",
        transport: SessionTransport | None = None,
        coalesce_confirms: bool = False,
    ) -> None:
        self.broker = broker
        self.core = core
        self.users = broker.users if users is None else UserRegistry(users)
        self.wake = wake
        self.peer = peer
        self.transport = transport
        self.username: str | None = None
        #: What the client's ``connection.start-ok`` said about it, and the name it gave
        #: (``connection_name``: RabbitMQ's connection name) or None.
        self.client_properties: FieldTable = {}
        self.connection_name: str | None = None
        self.connection: ModelConnection | None = None
        self._cancel_notify = False
        self._blocked_capable = False
        self._coalesce = coalesce_confirms
        self._confirms: dict[int, _Confirms] = {}
        # Confirms held until the store commits a batch, per channel in publish order:
        # (batch number, sequence, nack); later ones wait behind them (multiple=True acks).
        self._durable_confirms: dict[int, deque[tuple[int, int, bool]]] = {}
        # tx.commit-ok of commits that stored persistent messages: (batch number, channel).
        self._durable_commits: deque[tuple[int, int]] = deque()
        self._outbound_limit = broker.options.outbound_limit
        self._memory = broker.memory
        # The output buffer reached the limit: consumers are paused until it drains.
        self._full = False
        # Octets that may still be delivered before the output size is looked at again.
        self._budget = self._outbound_limit
        #: True while the connection is blocked by the memory alarm (its socket not read).
        self.blocked = False
        # connection.blocked was sent (so connection.unblocked is due).
        self._blocked_sent = False
        #: True once the connection ended (closed or lost): the transport may close.
        self.finished = False

    def __repr__(self) -> str:
        return f"<amqp_broker.Session {self.peer} user={self.username!r}>"

    @property
    def closing(self) -> bool:
        """Whether the broker sent ``connection.close`` and waits for ``close-ok``."""
        return self.core.state is ConnectionState.SERVER_CLOSING

    # --- events -------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        """Act on one event from the core."""
        kind = type(event)
        if kind is MethodReceived:
            assert isinstance(event, MethodReceived)
            self._on_method(event.channel, event.method)
        elif kind is MessageReceived:
            assert isinstance(event, MessageReceived)
            self._on_publish(event)
        elif kind is ChannelOpened:
            assert isinstance(event, ChannelOpened)
            if self.connection is not None:
                self.connection.open_channel(event.channel)
        elif kind is ChannelClosed:
            assert isinstance(event, ChannelClosed)
            self._confirms.pop(event.channel, None)
            self._forget_durable(event.channel)
            if self.connection is not None:
                self.connection.close_channel(event.channel)
        elif kind is ChannelFlowChanged:
            assert isinstance(event, ChannelFlowChanged)
            channel = self._channel(event.channel)
            if channel is not None:
                channel.flow(event.active)
        elif kind is AuthenticationRequested:
            assert isinstance(event, AuthenticationRequested)
            self._authenticate(event)
        elif kind is VirtualHostRequested:
            assert isinstance(event, VirtualHostRequested)
            self._open_vhost(event.virtual_host)
        elif kind is ConnectionClosed or kind is ConnectionLost:
            self.end()
        # ConnectionOpened and the rest need nothing from the broker.

    def protocol_error(self, error: RemoteProtocolError) -> None:
        """The client broke the protocol: the core already queued the close; forget the
        connection's state (requeue its unacked messages) at once."""
        logger.info("client %s broke the protocol: %s", self.peer, error.reply_text)
        self.end()

    def internal_error(self, event: Event) -> None:
        """Handling *event* raised (a bug in the broker; call it where the exception is
        caught): log it, close the connection with 541 INTERNAL_ERROR as RabbitMQ does when a
        channel process crashes, and release what the connection held; the transport then
        waits for ``close-ok`` as after any close. When the core can no longer send a close (it
        is closing already, or failed) the connection just ends."""
        if isinstance(event, MethodReceived | MessageReceived):
            what = event.method.NAME
        else:
            what = type(event).__name__
        logger.exception("internal error serving client %s (%s)", self.peer, what)
        try:
            self.core.close(541, f"INTERNAL_ERROR - the broker failed handling {what}")
        except LocalProtocolError:
            self.end()
            return
        self._release()
        self.wake()

    def end(self) -> None:
        """The connection is over (closed, lost or failed): release everything it held."""
        self.finished = True
        self._release()

    def _release(self) -> None:
        # Requeue unacked messages and delete exclusive queues as soon as the broker decides
        # the connection is over, not when the client gets round to close-ok.
        self._confirms.clear()
        self._durable_confirms.clear()
        self._durable_commits.clear()
        connection, self.connection = self.connection, None
        if connection is not None:
            self.broker.memory.forget(self._alarm_cleared)
            connection.close()
        if self.blocked:
            self.blocked = False
            if self.transport is not None:
                self.transport.resume_reading()

    def shutdown(self, reason: str = "shutdown") -> None:
        """The broker stops: send ``connection.close`` 320 CONNECTION_FORCED with RabbitMQ's
        text (the transport then waits a bounded time for ``close-ok``)."""
        self.close(
            320, f"CONNECTION_FORCED - broker forced connection closure with reason '{reason}'"
        )

    def close(self, reply_code: int, reply_text: str) -> None:
        """Close the connection from the broker's side (``rabbitmqctl close_connection``):
        ``connection.close`` with *reply_code* and *reply_text*; its unacknowledged messages
        are requeued at once. Nothing happens when it is already closing."""
        try:
            self.core.close(reply_code, reply_text)
        except LocalProtocolError:
            return  # already closing or closed
        self._release()
        self.wake()

    # --- handshake ----------------------------------------------------------------------------

    def _authenticate(self, event: AuthenticationRequested) -> None:
        if self.core.protocol is AMQP_0_8 and event.client_properties.get("product") == (
            _QPID_PRODUCT
        ):
            # qpid-python's 0-8 spec makes basic.recover (60, 100) wait for a recover-ok
            # (60, 101) that RabbitMQ's 0-8 lacks: without it the client waits forever
            try:
                self.core.use_dialect(AMQP_0_8_QPID)
            except LocalProtocolError as exc:
                logger.info("client %s keeps RabbitMQ's 0-8: %s", self.peer, exc)
        credentials = parse_credentials(event.mechanism, event.response)
        if credentials is None or not self.users.authenticate(*credentials):
            self.core.refuse_authentication(_LOGIN_REFUSED.format(event.mechanism))
            if self.core.state is ConnectionState.CLOSED:
                # it did not advertise authentication_failure_close: no close, as from RabbitMQ
                logger.info(
                    "client %s: login refused (%s), socket closed", self.peer, event.mechanism
                )
                self.end()
            else:
                logger.info("client %s: login refused (%s)", self.peer, event.mechanism)
            return
        self.username = credentials[0]
        self.client_properties = dict(event.client_properties)
        name = event.client_properties.get("connection_name")
        self.connection_name = name if isinstance(name, str) else None
        capabilities = event.client_properties.get("capabilities")
        if isinstance(capabilities, dict):
            self._cancel_notify = bool(capabilities.get("consumer_cancel_notify"))
            self._blocked_capable = bool(capabilities.get("connection.blocked"))
        self.core.accept_authentication()

    def _open_vhost(self, name: str) -> None:
        user = self.username or ""
        refusal = self.broker.admit(name, user, self.users)
        if refusal is not None:
            logger.info("client %s: %s", self.peer, refusal)
            self.core.refuse_virtual_host(refusal)
            return
        permission = self.users.permission(user, name)
        self.connection = self.broker.connect(
            name,
            self,
            cancel_notify=self._cancel_notify,
            user=user,
            permission=None if permission is FULL_ACCESS else permission,
        )
        self.broker.memory.on_clear(self._alarm_cleared)
        self.core.accept_virtual_host()

    # --- flow control -------------------------------------------------------------------------

    def _block(self) -> None:
        """An alarm (memory, free disk) is on and the client published: stop reading it."""
        self.blocked = True
        if self._blocked_capable and not self._blocked_sent:
            self._blocked_sent = True
            self.core.send_method(0, ConnectionBlocked(reason=self._memory.reason))
            self.wake()
        if self.transport is not None:
            self.transport.pause_reading()

    def _alarm_cleared(self) -> None:
        if not self.blocked:
            return
        self.blocked = False
        if self._blocked_sent:
            self._blocked_sent = False
            try:
                self.core.send_method(0, ConnectionUnblocked())
            except LocalProtocolError:
                return
            self.wake()
        if self.transport is not None:
            self.transport.resume_reading()

    def drained(self) -> None:
        """The transport wrote output: consumers paused by a full buffer resume below it."""
        transport = self.transport
        if transport is None:
            return
        self._budget = self._outbound_limit - transport.outbound_size
        if self._full and self._budget > 0:
            self._full = False
            connection = self.connection
            if connection is not None:
                connection.set_writable(True)

    def _check_outbound(self, octets: int) -> None:
        # Delivered about *octets*: look at the transport's real output size only once the
        # budget left by the last look is spent (cheaper than a look per delivery).
        self._budget -= octets
        transport = self.transport
        if self._budget > 0 or transport is None or self._full:
            return
        self._budget = self._outbound_limit - transport.outbound_size
        if self._budget <= 0:
            self._full = True
            connection = self.connection
            if connection is not None:
                connection.set_writable(False)

    # --- confirms -----------------------------------------------------------------------------

    def _confirm(self, channel: int, sequence: int, *, nack: bool, batch: int = 0) -> None:
        waiting = self._durable_confirms.get(channel)
        if self._coalesce and (batch or waiting):
            store = self.broker.store
            assert store is not None
            if waiting is None:
                waiting = self._durable_confirms[channel] = deque()
            elif waiting[-1][0] > batch:
                batch = waiting[-1][0]
            waiting.append((batch, sequence, nack))
            store.waiters[self.wake] = None
            return
        if not self._coalesce:
            method = BasicNack(delivery_tag=sequence) if nack else BasicAck(delivery_tag=sequence)
            self.core.send_method(channel, method)
            return
        pending = self._confirms.get(channel)
        if pending is None:
            pending = self._confirms[channel] = _Confirms()
        (pending.nacks if nack else pending.acks).append(sequence)

    def flush_confirms(self) -> None:
        """Send the confirms kept since the last call: acks below the first nack in one
        ``basic.ack`` with ``multiple``, as RabbitMQ's channel does when it is idle; those
        of persistent messages only once the store wrote them."""
        if self._durable_confirms or self._durable_commits:
            self._release_durable()
        confirms, self._confirms = self._confirms, {}
        for channel, pending in confirms.items():
            acks, nacks = pending.acks, pending.nacks
            try:
                if len(acks) == 1:
                    self.core.send_method(channel, BasicAck(delivery_tag=acks[0]))
                elif acks:
                    for tag, multiple in _coalesced(acks, nacks):
                        self.core.send_method(
                            channel, BasicAck(delivery_tag=tag, multiple=multiple)
                        )
                if nacks:
                    for tag, multiple in _coalesced(nacks, acks):
                        self.core.send_method(
                            channel, BasicNack(delivery_tag=tag, multiple=multiple)
                        )
            except LocalProtocolError as exc:
                # The channel or the connection is closing: the client gets no confirms there.
                logger.debug("confirms to %s dropped: %s", self.peer, exc)

    def _forget_durable(self, channel: int) -> None:
        """*channel* closed: what waited for the store there is never sent."""
        self._durable_confirms.pop(channel, None)
        if self._durable_commits:
            self._durable_commits = deque(c for c in self._durable_commits if c[1] != channel)

    def _release_durable(self) -> None:
        store = self.broker.store
        assert store is not None
        committed = store.committed
        commits = self._durable_commits
        while commits and commits[0][0] <= committed:
            try:
                self.core.send_method(commits.popleft()[1], TxCommitOk())
            except LocalProtocolError as exc:
                logger.debug("tx.commit-ok to %s dropped: %s", self.peer, exc)
        if commits:
            store.waiters[self.wake] = None
        for channel, waiting in list(self._durable_confirms.items()):
            while waiting and waiting[0][0] <= committed:
                _, sequence, nack = waiting.popleft()
                pending = self._confirms.get(channel)
                if pending is None:
                    pending = self._confirms[channel] = _Confirms()
                (pending.nacks if nack else pending.acks).append(sequence)
            if waiting:
                store.waiters[self.wake] = None
            else:
                del self._durable_confirms[channel]

    # --- the delivery sink (called by the model, maybe for another connection) ---------------

    def deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        message: Message,
        stream_offset: int | None = None,
    ) -> None:
        """Send ``basic.deliver`` (the model's :class:`DeliverySink`)."""
        properties = message.properties
        if stream_offset is not None:
            headers: FieldTable = dict(properties.headers or {})
            headers["x-stream-offset"] = Int64(stream_offset)
            properties = attrs.evolve(properties, headers=headers)
        try:
            self.core.send_content(
                channel,
                BasicDeliver(
                    consumer_tag=consumer_tag,
                    delivery_tag=delivery_tag,
                    redelivered=redelivered,
                    exchange=message.exchange,
                    routing_key=message.routing_key,
                ),
                properties,
                message.body,
                relay=True,  # other clients' headers go on as they came, as RabbitMQ's
            )
        except LocalProtocolError as exc:
            # The core failed under us (its transport is going away); the unacked record
            # stays in the model and is requeued when this connection ends.
            logger.debug("delivery to %s dropped: %s", self.peer, exc)
            return
        self._check_outbound(message.held)
        self.wake()

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        """Send a server-side ``basic.cancel`` (the consumer's queue was deleted)."""
        try:
            # 0-8 and 0-9 clients can't be sent basic.cancel: refused here, like a closing core
            cancel = BasicCancel(consumer_tag=consumer_tag, nowait=True)
            self.core.send_method(channel, self.core.protocol.adapt(cancel))
        except LocalProtocolError as exc:
            logger.debug("cancel to %s dropped: %s", self.peer, exc)
            return
        self.wake()

    def channel_failed(self, channel: int, error: BrokerError) -> None:
        """Close *channel* with *error* (the model's consumer timeout)."""
        try:
            self._close_channel(channel, error, None)
        except LocalProtocolError as exc:
            logger.debug("channel close to %s dropped: %s", self.peer, exc)
            return
        self.wake()

    # --- methods ------------------------------------------------------------------------------

    def _channel(self, number: int) -> ModelChannel | None:
        connection = self.connection
        return None if connection is None else connection.channels.get(number)

    def _on_method(self, number: int, method: Method) -> None:
        # The model speaks 0-9-1's classes: a 0-8 or 0-9 client's own classes (basic.consume,
        # basic.ack, ...) become 0-9-1's of the same meaning; shared ones pass as they are.
        method = AMQP_0_9_1.adapt(method)
        if number == 0:
            self._on_connection_method(method)
            return
        channel = self._channel(number)
        if channel is None:
            return  # the channel is closing: the core lets late methods through
        try:
            self._dispatch(channel, number, method)
        except BrokerError as exc:
            self._refuse(number, exc, method)

    def _on_connection_method(self, method: Method) -> None:
        if isinstance(method, ConnectionUpdateSecret):
            check = self.broker.secret_check
            if check is None or check(self.username or "", method.new_secret):
                self.core.send_method(0, ConnectionUpdateSecretOk())
                return
            logger.info("client %s: new secret refused for %r", self.peer, self.username)
            self.core.send_method(
                0,
                ConnectionClose(
                    reply_code=530,
                    reply_text="NOT_ALLOWED - New secret was refused by one of the backends",
                    class_id=method.CLASS_ID,
                    method_id=method.METHOD_ID,
                ),
            )
            self._release()

    def _refuse(self, number: int, error: BrokerError, method: Method) -> None:
        if error.is_hard:
            cause = method if error.caused_by_method else None
            self.core.send_method(
                0,
                ConnectionClose(
                    reply_code=error.reply_code,
                    reply_text=error.reply_text[:255],
                    class_id=0 if cause is None else cause.CLASS_ID,
                    method_id=0 if cause is None else cause.METHOD_ID,
                ),
            )
            self._release()
            return
        self._close_channel(number, error, method)

    def _close_channel(self, number: int, error: BrokerError, method: Method | None) -> None:
        cause = method if error.caused_by_method else None
        self.core.send_method(
            number,
            ChannelClose(
                reply_code=error.reply_code,
                reply_text=error.reply_text[:255],
                class_id=0 if cause is None else cause.CLASS_ID,
                method_id=0 if cause is None else cause.METHOD_ID,
            ),
        )
        self._confirms.pop(number, None)
        self._forget_durable(number)
        if self.connection is not None:
            self.connection.close_channel(number)

    def _send(self, number: int, reply: Method) -> None:
        """Send *reply* as the client's version's class of its meaning."""
        self.core.send_method(number, self.core.protocol.adapt(reply))

    def _dispatch(self, channel: ModelChannel, number: int, method: Method) -> None:
        send = self._send
        match method:
            case BasicAck():
                channel.ack(method.delivery_tag, multiple=method.multiple)
            case BasicNack():
                channel.nack(method.delivery_tag, multiple=method.multiple, requeue=method.requeue)
            case BasicReject():
                channel.nack(method.delivery_tag, requeue=method.requeue)
            case BasicGet():
                self._get(channel, number, method)
            case BasicConsume():
                if method.queue == "amq.rabbitmq.reply-to" and not method.no_ack:
                    raise BrokerError(406, "reply consumer cannot acknowledge")
                tag = channel.consume(
                    method.queue,
                    method.consumer_tag,
                    no_ack=method.no_ack,
                    exclusive=method.exclusive,
                    arguments=method.arguments,
                )
                if not method.nowait:
                    send(number, BasicConsumeOk(consumer_tag=tag))
                channel.start_consumer(tag)
            case BasicCancel():
                channel.cancel(method.consumer_tag)
                if not method.nowait:
                    send(number, BasicCancelOk(consumer_tag=method.consumer_tag))
            case BasicQos():
                if method.prefetch_size:
                    raise BrokerError(540, f"prefetch_size!=0 ({method.prefetch_size})")
                channel.qos(method.prefetch_count, global_=method.global_)
                send(number, BasicQosOk())
            case QueueDeclare():
                info = channel.queue_declare(
                    method.queue,
                    passive=method.passive,
                    durable=method.durable,
                    exclusive=method.exclusive,
                    auto_delete=method.auto_delete,
                    arguments=method.arguments,
                )
                if not method.nowait:
                    send(
                        number,
                        QueueDeclareOk(
                            queue=info.name,
                            message_count=info.message_count,
                            consumer_count=info.consumer_count,
                        ),
                    )
            case QueueBind():
                channel.queue_bind(
                    method.queue, method.exchange, method.routing_key, method.arguments
                )
                if not method.nowait:
                    send(number, QueueBindOk())
            case QueueUnbind():
                channel.queue_unbind(
                    method.queue, method.exchange, method.routing_key, method.arguments
                )
                send(number, QueueUnbindOk())
            case QueuePurge():
                count = channel.queue_purge(method.queue)
                if not method.nowait:
                    send(number, QueuePurgeOk(message_count=count))
            case QueueDelete():
                count = channel.queue_delete(
                    method.queue, if_unused=method.if_unused, if_empty=method.if_empty
                )
                if not method.nowait:
                    send(number, QueueDeleteOk(message_count=count))
            case ExchangeDeclare():
                channel.exchange_declare(
                    method.exchange,
                    method.type,
                    passive=method.passive,
                    durable=method.durable,
                    auto_delete=method.auto_delete,
                    internal=method.internal,
                    arguments=method.arguments,
                )
                if not method.nowait:
                    send(number, ExchangeDeclareOk())
            case ExchangeDelete():
                channel.exchange_delete(method.exchange, if_unused=method.if_unused)
                if not method.nowait:
                    send(number, ExchangeDeleteOk())
            case ExchangeBind():
                channel.exchange_bind(
                    method.destination, method.source, method.routing_key, method.arguments
                )
                if not method.nowait:
                    send(number, ExchangeBindOk())
            case ExchangeUnbind():
                channel.exchange_unbind(
                    method.destination, method.source, method.routing_key, method.arguments
                )
                if not method.nowait:
                    send(number, ExchangeUnbindOk())
            case BasicRecover() | BasicRecoverAsync():
                if not method.requeue:
                    raise BrokerError(540, "requeue=false")
                channel.recover()
                # recover-ok only where the client's version has one: 0-9's basic.recover is
                # asynchronous, 0-9-1's and RabbitMQ's 0-8 one (60, 110) are not
                if isinstance(method, BasicRecover) and self.core.protocol.has_reply(method.NAME):
                    send(number, BasicRecoverOk())
            case ConfirmSelect():
                channel.confirm_select()
                if not method.nowait:
                    send(number, ConfirmSelectOk())
            case TxSelect():
                channel.tx_select()
                send(number, TxSelectOk())
            case TxCommit():
                store = self.broker.store
                writes = 0 if store is None else store.writes
                for exchange, routing_key, properties, body in channel.tx_commit():
                    self._return(number, exchange, routing_key, properties, body)
                if self._coalesce and store is not None and store.writes != writes:
                    # the commit stored persistent messages: commit-ok once they are written
                    self._durable_commits.append((store.open_batch, number))
                    store.waiters[self.wake] = None
                else:
                    send(number, TxCommitOk())
            case TxRollback():
                channel.tx_rollback()
                send(number, TxRollbackOk())
            case AccessRequest():
                send(number, AccessRequestOk(ticket=1))
            case _:
                raise BrokerError(503, f"unimplemented method {method.NAME}")

    def _get(self, channel: ModelChannel, number: int, method: BasicGet) -> None:
        result = channel.get(method.queue, no_ack=method.no_ack)
        if result is None:
            self.core.send_method(number, BasicGetEmpty())
            return
        message = result.message
        self.core.send_content(
            number,
            BasicGetOk(
                delivery_tag=result.delivery_tag,
                redelivered=result.redelivered,
                exchange=message.exchange,
                routing_key=message.routing_key,
                message_count=result.message_count,
            ),
            message.properties,
            message.body,
            relay=True,
        )

    def _return(
        self,
        number: int,
        exchange: str,
        routing_key: str,
        properties: BasicProperties,
        body: bytes | bytearray,
    ) -> None:
        self.core.send_content(
            number,
            BasicReturn(
                reply_code=312, reply_text="NO_ROUTE", exchange=exchange, routing_key=routing_key
            ),
            properties,
            body,
            relay=True,
        )

    def _on_publish(self, event: MessageReceived) -> None:
        number = event.channel
        channel = self._channel(number)
        method = event.method
        properties = event.properties
        if (
            channel is None
            or not isinstance(method, BasicPublish)
            or not isinstance(properties, BasicProperties)
        ):
            return
        body = event.body
        if isinstance(body, memoryview):  # only under body_view_threshold, never set here
            body = body.tobytes()
        try:
            if method.immediate:
                raise BrokerError(540, "immediate=true")
            sequence = channel.next_publish_number() if channel.confirm else 0
            store = self.broker.store
            writes = 0 if store is None else store.writes
            outcome = channel.publish(
                method.exchange,
                method.routing_key,
                properties,
                body,
                mandatory=method.mandatory,
            )
        except BrokerError as exc:
            self._refuse(number, exc, method)
            return
        finally:
            if self._memory.alarmed and not self.blocked and self.connection is not None:
                self._block()
        if outcome is None:
            return
        if method.mandatory and not outcome.routed:
            self._return(
                number,
                method.exchange,
                method.routing_key,
                properties,
                body,
            )
        if sequence:
            # a persistent message went to a durable queue: confirmed once it is written
            batch = store.open_batch if store is not None and store.writes != writes else 0
            self._confirm(number, sequence, nack=outcome.rejected, batch=batch)
