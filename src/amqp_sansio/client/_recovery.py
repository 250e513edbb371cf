"""Connection recovery, written once for every adapter: the policy, the plan that restores a
recorded topology on a new connection, the restorer that runs the plan on a core, the events an
application observes, and the epoch rule for deliveries.

Nothing here does I/O: an adapter connects (trying :attr:`RecoveryPolicy.endpoints` in turn,
sleeping :meth:`RecoveryPolicy.delay` between attempts), hands the new core to a
:class:`TopologyRestorer` built from :attr:`Connection.topology <amqp_sansio.Connection.topology>`
of the lost one, feeds it the core's events until it is done, then resumes routing.
"""

from __future__ import annotations

import enum
import random
from collections import deque
from typing import TYPE_CHECKING, Final, Literal, TypeAlias, final

import attrs

from .. import (
    BasicConsume,
    BasicQos,
    ChannelClosed,
    ChannelOpened,
    ConfirmSelect,
    ConnectionClosed,
    ConnectionLost,
    ConnectionState,
    ExchangeBind,
    ExchangeDeclare,
    HeartbeatTimeout,
    MethodReceived,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
)
from ._errors import AMQPError, ConnectionClosedError, ConnectionLostError, error_from
from ._params import redact_url

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from .. import Connection, Event, Method, Topology

__all__ = [
    "ChannelReopened",
    "Epoch",
    "Recovered",
    "RecoveryAttempt",
    "RecoveryEvent",
    "RecoveryGaveUp",
    "RecoveryLost",
    "RecoveryPlan",
    "RecoveryPolicy",
    "RecoveryState",
    "RecoveryStep",
    "StaleDeliveryError",
    "TopologyRecoveryError",
    "TopologyRestorer",
    "check_settle",
]

StepKind: TypeAlias = Literal[
    "exchange", "queue", "queue_binding", "exchange_binding", "qos", "confirm", "consumer"
]

#: Close codes after which recovery is tried by default: 320 CONNECTION_FORCED (an operator
#: closed the connection, the node is shutting down). A login refused (403 ACCESS_REFUSED),
#: 530 NOT_ALLOWED and the application's own close never are (the Java client and Lyra agree).
DEFAULT_RECOVER_CODES: Final = frozenset({320})


class RecoveryState(enum.Enum):
    """Where a recovering connection is."""

    OPEN = "OPEN"  # connected; the topology is in place
    RECOVERING = "RECOVERING"  # lost; reconnecting and restoring
    CLOSED = "CLOSED"  # closed by the application, or recovery gave up


@final
@attrs.frozen(kw_only=True)
class RecoveryStep:
    """One step of a :class:`RecoveryPlan`: a method to send again.

    :ivar kind: what it restores.
    :ivar channel: the channel (on the lost connection) it belongs to; None for exchanges,
        queues and bindings, which live on the broker and may go on any channel.
    :ivar method: the method as the application sent it (before server-named queues were
        renamed: see :meth:`RecoveryPlan.method`).
    :ivar name: the entity: an exchange or queue name, a consumer tag, a binding's ends.
    """

    kind: StepKind
    channel: int | None
    method: Method
    name: str

    @property
    def entity(self) -> str:
        """The entity in words, for errors and logs (``queue 'orders'``)."""
        return f"{self.kind.replace('_', ' ')} {self.name!r}"


class TopologyRecoveryError(AMQPError):
    """A step of topology recovery failed: the broker refused it (:attr:`cause`, also
    ``__cause__``). :attr:`step` names the entity."""

    step: RecoveryStep
    cause: AMQPError

    def __init__(self, step: RecoveryStep, cause: AMQPError) -> None:
        super().__init__(f"could not restore {step.entity}: {cause}")
        self.step = step
        self.cause = cause
        self.__cause__ = cause

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.step, self.cause))


class StaleDeliveryError(AMQPError):
    """A delivery received before the connection was lost was settled after it: its delivery
    tag belongs to the old connection, and on the new one it would settle another message or
    close the channel with 406. Nothing was sent; the broker requeued the message when the old
    connection went, so it will be delivered again."""

    delivery_tag: int
    epoch: int
    current_epoch: int
    #: True when the connection is the same but the channel was closed by the broker and
    #: opened again (``RecoveryPolicy.reopen_channels``).
    channel_reopened: bool

    def __init__(
        self, delivery_tag: int, epoch: int, current_epoch: int, channel_reopened: bool = False
    ) -> None:
        if channel_reopened:
            where = "a channel the broker closed since (it was opened again)"
        else:
            where = f"connection epoch {epoch}, which was lost (now {current_epoch})"
        super().__init__(
            f"delivery {delivery_tag} came on {where}: it is not settled, the broker redelivers it"
        )
        self.delivery_tag = delivery_tag
        self.epoch = epoch
        self.current_epoch = current_epoch
        self.channel_reopened = channel_reopened

    def __reduce__(self) -> tuple[object, ...]:
        return (
            type(self),
            (self.delivery_tag, self.epoch, self.current_epoch, self.channel_reopened),
        )


def check_settle(
    delivery_tag: int, epoch: int, current_epoch: int, *, stale: Literal["raise", "ignore"]
) -> bool:
    """Whether a settle (ack, nack, reject) of a delivery from connection *epoch* may be sent
    now that the connection is at *current_epoch*: True when they match; False (do not send)
    for a stale one when *stale* is ``"ignore"``.

    :raises StaleDeliveryError: a stale one and *stale* is ``"raise"``.
    """
    if epoch == current_epoch:
        return True
    if stale == "ignore":
        return False
    raise StaleDeliveryError(delivery_tag, epoch, current_epoch)


@final
class Epoch:
    """A recovering connection's epoch, shared with its deliveries: each delivery keeps the
    epoch it came on, and a settle checks it against :attr:`current`
    (:func:`check_settle`)."""

    __slots__ = ("current", "stale")

    def __init__(self, stale: Literal["raise", "ignore"] = "raise") -> None:
        #: 0 for the first connection, +1 for each one recovery made.
        self.current = 0
        self.stale: Literal["raise", "ignore"] = stale

    def __repr__(self) -> str:
        return f"<Epoch {self.current}>"

    def allows(self, delivery_tag: int, epoch: int, *, superseded: bool = False) -> bool:
        """Whether a delivery of *epoch* may be settled now (see :func:`check_settle`);
        *superseded*: its channel was since opened again on the same connection
        (``ChannelBook.superseded``), which makes it stale too.

        :raises StaleDeliveryError: it is stale and stale settles raise.
        """
        if superseded and epoch == self.current:
            if self.stale == "ignore":
                return False
            raise StaleDeliveryError(delivery_tag, epoch, self.current, channel_reopened=True)
        return check_settle(delivery_tag, epoch, self.current, stale=self.stale)


def _non_negative(name: str) -> Callable[[object, attrs.Attribute[float], float], None]:
    def check(_instance: object, _attribute: attrs.Attribute[float], value: float) -> None:
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")

    return check


def _optional_positive(
    _instance: object, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be > 0 or None, got {value!r}")


def _urls(urls: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(urls, str):
        return (urls,)
    return tuple(urls)


def _redacted(urls: tuple[str, ...]) -> str:
    # A URL's password never reaches a repr or a log line.
    return repr(tuple(redact_url(url) for url in urls))


def _codes(codes: set[int] | frozenset[int] | list[int] | tuple[int, ...]) -> frozenset[int]:
    return frozenset(codes)


@final
@attrs.frozen(kw_only=True)
class RecoveryPolicy:
    """How a connection recovers (``connect(..., recovery=RecoveryPolicy(...))``).

    :ivar initial_delay: seconds before the second attempt (the first is immediate).
    :ivar max_delay: the longest wait between attempts.
    :ivar multiplier: each wait is the previous one times this (1: a fixed interval).
    :ivar jitter: each wait is drawn uniformly from ``[delay * (1 - jitter), delay]``, so that
        clients that lost the same broker do not come back in step (0: no jitter).
    :ivar max_attempts: give up after this many failed attempts (None: no limit).
    :ivar max_duration: give up once this many seconds passed since the loss (None: no limit).
    :ivar endpoints: AMQP URLs tried in turn, one per attempt (empty: the URL given to
        ``connect``).
    :ivar recover_codes: connection close codes that trigger recovery (a lost transport and a
        heartbeat timeout always do).
    :ivar restore_exclusive: restore exclusive queues (a server-named one gets a new name; a
        client-named one may still be held by the dead connection for a while: the broker's
        405 RESOURCE_LOCKED fails the attempt, which is retried).
    :ivar restore_auto_delete: restore auto-delete queues and exchanges.
    :ivar topology_filter: called with each :class:`RecoveryStep`; False skips it (and, for
        a queue, the bindings and consumers that name it), as Java's
        ``TopologyRecoveryFilter``.
    :ivar on_topology_error: a step the broker refuses: ``"retry"`` fails the attempt (the
        next one starts over), ``"skip"`` goes on without it, ``"give_up"`` stops recovering.
    :ivar reconsume_on_cancel: consume again, with the same tag into the same iterator, when
        the broker cancels a consumer (``basic.cancel``: its queue was deleted, its node went
        down); a client-named queue in the recorded topology is declared again first, with its
        bindings.
    :ivar publish_wait: seconds a publish made during recovery waits for the connection to
        come back; 0 fails fast with the loss's error.
    :ivar publish_buffer: octets of message bodies that may wait during recovery; a publish
        beyond that fails fast.
    :ivar reopen_channels: open a channel again when the broker closes it with a channel error
        (a 404 from a passive declare, a 406, ...), as Lyra does (the Java client does not): the
        call that caused it still raises, and the channel object carries on under a new
        channel with its ``basic.qos``, confirm mode and consumers (same tags, same
        iterators); its unconfirmed publishes end unknown (or are published again, with
        :attr:`republish_unknown`), and deliveries that came before can no longer be settled
        (:class:`StaleDeliveryError`). A channel that closes again while being restored
        stays closed.
    :ivar republish_unknown: publish again, on the new connection, the confirm-mode publishes
        pending at the loss (in their order, before anything published after it), instead of
        ending them with :class:`PublishOutcomeUnknownError`: their tickets and waiters get
        the new publish's outcome. At least once: a message the broker had routed before the
        loss arrives twice. Each publish's body is kept until its confirm.
    :ivar stale_settle: a settle of a delivery from before the loss ``"raise"``\\ s
        :class:`StaleDeliveryError` or is ``"ignore"``\\ d; it is never sent.
    :ivar endpoint_order: how several endpoints given to ``connect()`` are walked:
        ``"in_order"`` (as given; the first that answers is used) or ``"shuffled"`` (once per
        connection, so that clients spread over a cluster's nodes).
    """

    initial_delay: float = attrs.field(default=0.5, validator=_non_negative("initial_delay"))
    max_delay: float = attrs.field(default=30.0, validator=_non_negative("max_delay"))
    multiplier: float = attrs.field(default=2.0)
    jitter: float = attrs.field(default=0.5)
    max_attempts: int | None = attrs.field(default=None)
    max_duration: float | None = attrs.field(default=None, validator=_optional_positive)
    endpoints: tuple[str, ...] = attrs.field(default=(), converter=_urls, repr=_redacted)
    recover_codes: frozenset[int] = attrs.field(default=DEFAULT_RECOVER_CODES, converter=_codes)
    restore_exclusive: bool = True
    restore_auto_delete: bool = True
    topology_filter: Callable[[RecoveryStep], bool] | None = None
    on_topology_error: Literal["retry", "skip", "give_up"] = "retry"
    reconsume_on_cancel: bool = False
    publish_wait: float = attrs.field(default=10.0, validator=_non_negative("publish_wait"))
    publish_buffer: int = 1 << 20
    reopen_channels: bool = False
    republish_unknown: bool = False
    stale_settle: Literal["raise", "ignore"] = "raise"
    endpoint_order: Literal["in_order", "shuffled"] = "in_order"

    def __attrs_post_init__(self) -> None:
        if self.multiplier < 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter!r}")
        if self.publish_buffer < 0:
            raise ValueError(f"publish_buffer must be >= 0, got {self.publish_buffer!r}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts!r}")
        if self.on_topology_error not in ("retry", "skip", "give_up"):
            raise ValueError(f"on_topology_error: unknown choice {self.on_topology_error!r}")
        if self.stale_settle not in ("raise", "ignore"):
            raise ValueError(f"stale_settle: unknown choice {self.stale_settle!r}")

    def triggers(self, error: AMQPError) -> bool:
        """Whether losing the connection with *error* starts recovery: a lost transport or a
        heartbeat timeout (:class:`ConnectionLostError`) does, a close by the broker does when
        its code is in :attr:`recover_codes`; anything else (our own close, a refused login)
        does not."""
        if isinstance(error, ConnectionLostError):
            return True
        if isinstance(error, ConnectionClosedError):
            return error.reply_code in self.recover_codes and error.reply_code != 200
        return False

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt number *attempt* (1: the first, at once)."""
        if attempt <= 1:
            return 0.0
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 2))
        if not self.jitter:
            return base
        draw = (rng or random).random()
        return base * (1 - self.jitter * draw)

    def endpoint(self, attempt: int, default: str) -> str:
        """The URL attempt number *attempt* connects to: the endpoints in turn."""
        endpoints = self.endpoints or (default,)
        return endpoints[(attempt - 1) % len(endpoints)]

    def gives_up(self, attempts: int, elapsed: float) -> bool:
        """Whether to stop after *attempts* failed attempts, *elapsed* seconds after the loss."""
        if self.max_attempts is not None and attempts >= self.max_attempts:
            return True
        return self.max_duration is not None and elapsed >= self.max_duration


# --- Events -----------------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class RecoveryLost:
    """The connection was lost and recovery starts. :ivar cause: why it was lost."""

    cause: AMQPError


@final
@attrs.frozen(kw_only=True)
class RecoveryAttempt:
    """An attempt to reconnect failed.

    :ivar attempt: its number (1 for the first).
    :ivar url: the endpoint it tried (credentials removed).
    :ivar error: why it failed (connect refused, a topology step refused, ...).
    :ivar next_delay: seconds until the next attempt; None when this was the last.
    """

    attempt: int
    url: str
    error: BaseException
    next_delay: float | None


@final
@attrs.frozen(kw_only=True)
class Recovered:
    """The connection is back and its topology restored.

    :ivar attempt: the attempt that succeeded.
    :ivar epoch: the new connection epoch (deliveries from older epochs cannot be settled).
    :ivar renamed_queues: old server-assigned queue name -> the new one.
    :ivar unknown_publishes: publishes pending at the loss, whose outcome is unknown.
    :ivar republished: publishes pending at the loss that were published again
        (:attr:`RecoveryPolicy.republish_unknown`).
    :ivar skipped: steps skipped by the filter, the policy or a refusal under ``"skip"``.
    :ivar dropped_deliveries: deliveries the consumers had received on the lost connection (or
        on a failed attempt's) and not handed out yet: dropped, since their tags died with the
        connection; the broker requeued them and delivers them again.
    :ivar address: ``host:port`` of the node the connection is on now (with several endpoints,
        usually another one than before).
    """

    attempt: int
    epoch: int
    renamed_queues: Mapping[str, str]
    unknown_publishes: int
    skipped: tuple[RecoveryStep, ...] = ()
    republished: int = 0
    dropped_deliveries: int = 0
    address: str = ""


@final
@attrs.frozen(kw_only=True)
class RecoveryGaveUp:
    """Recovery stopped: the connection is closed for good. :ivar cause: the last error."""

    attempts: int
    cause: BaseException


@final
@attrs.frozen(kw_only=True)
class ChannelReopened:
    """The broker closed a channel with a channel error, and it was opened again
    (:attr:`RecoveryPolicy.reopen_channels`): the same channel object carries on.

    :ivar channel: its number before.
    :ivar new_channel: its number now (the same one, when it was free again).
    :ivar cause: the error that closed it (also raised by the call that caused it).
    """

    channel: int
    new_channel: int
    cause: AMQPError


RecoveryEvent: TypeAlias = (
    RecoveryLost | RecoveryAttempt | Recovered | RecoveryGaveUp | ChannelReopened
)


# --- The plan ---------------------------------------------------------------------------------


def _restorable(declare: QueueDeclare | ExchangeDeclare, policy: RecoveryPolicy) -> bool:
    if declare.auto_delete and not policy.restore_auto_delete:
        return False
    return not (isinstance(declare, QueueDeclare) and declare.exclusive) or (
        policy.restore_exclusive
    )


@final
class RecoveryPlan:
    """The steps that restore *topology* on a new connection, in order: exchanges, queues,
    queue bindings, exchange-to-exchange bindings, then per channel its QoS, confirm mode and
    consumers (with their tags). Channels are reopened first (:attr:`channels`).

    A server-named queue (declared with ``queue=""``) is declared again the same way and gets a
    new name: :meth:`completed` learns it from the ``declare-ok``, and :meth:`method` puts it
    in the bindings and consumers that named the old one.

    :param topology: the lost connection's :attr:`~amqp_sansio.Connection.topology`.
    :param channels: the lost connection's open channels, in the order to reopen them (those
        with consumers or QoS are added when missing).
    :param confirm_channels: the channels that were in confirm mode.
    :param policy: which entities to restore (:attr:`RecoveryPolicy.restore_exclusive`,
        ``restore_auto_delete``, ``topology_filter``).
    :param paused: consumers the client had paused (``basic.cancel`` while its buffer was over
        its bound, so not in *topology*), by ``(channel, tag)``: restored like the others.
    """

    __slots__ = ("channels", "renamed", "skipped", "steps")

    def __init__(
        self,
        topology: Topology,
        *,
        channels: Iterable[int] = (),
        confirm_channels: Iterable[int] = (),
        policy: RecoveryPolicy | None = None,
        paused: Mapping[tuple[int, str], BasicConsume] | None = None,
    ) -> None:
        policy = policy or RecoveryPolicy()
        keep = policy.topology_filter or (lambda _step: True)
        steps: list[RecoveryStep] = []
        skipped: list[RecoveryStep] = []

        def add(step: RecoveryStep, restorable: bool = True) -> bool:
            if restorable and keep(step):
                steps.append(step)
                return True
            skipped.append(step)
            return False

        exchanges = {
            name
            for name, declare in topology.exchanges.items()
            if add(
                RecoveryStep(kind="exchange", channel=None, method=declare, name=name),
                _restorable(declare, policy),
            )
        }
        queues = {
            name
            for name, declare in topology.queues.items()
            if add(
                RecoveryStep(kind="queue", channel=None, method=declare, name=name),
                _restorable(declare, policy),
            )
        }
        dropped_queues = set(topology.queues) - queues
        dropped_exchanges = set(topology.exchanges) - exchanges
        for bind in topology.queue_bindings:
            add(
                RecoveryStep(
                    kind="queue_binding",
                    channel=None,
                    method=bind,
                    name=f"{bind.exchange}->{bind.queue} ({bind.routing_key})",
                ),
                bind.queue not in dropped_queues and bind.exchange not in dropped_exchanges,
            )
        for ebind in topology.exchange_bindings:
            add(
                RecoveryStep(
                    kind="exchange_binding",
                    channel=None,
                    method=ebind,
                    name=f"{ebind.source}->{ebind.destination} ({ebind.routing_key})",
                ),
                not {ebind.source, ebind.destination} & dropped_exchanges,
            )
        consumers = dict(topology.consumers)
        for key, consume in (paused or {}).items():
            consumers.setdefault(key, consume)
        ordered = list(dict.fromkeys(channels))
        for channel, _ in consumers:
            if channel not in ordered:
                ordered.append(channel)
        for channel in topology.qos:
            if channel not in ordered:
                ordered.append(channel)
        confirm = set(confirm_channels)
        for channel in ordered:
            for qos in topology.qos.get(channel, ()):
                add(RecoveryStep(kind="qos", channel=channel, method=qos, name=str(channel)))
            if channel in confirm:
                add(
                    RecoveryStep(
                        kind="confirm", channel=channel, method=ConfirmSelect(), name=str(channel)
                    )
                )
            for (on, tag), consume in consumers.items():
                if on == channel:
                    # The tag the broker confirmed, so a consumer keeps its name.
                    method = attrs.evolve(consume, consumer_tag=tag)
                    add(
                        RecoveryStep(kind="consumer", channel=channel, method=method, name=tag),
                        consume.queue not in dropped_queues,
                    )
        #: Channel numbers of the lost connection to open again, in order.
        self.channels: tuple[int, ...] = tuple(ordered)
        #: Every step, in order.
        self.steps: tuple[RecoveryStep, ...] = tuple(steps)
        #: Steps left out (by the policy or its filter, or because what they name is).
        self.skipped: list[RecoveryStep] = skipped
        #: Server-named queues restored so far: old name -> new name.
        self.renamed: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"<RecoveryPlan {len(self.channels)} channels, {len(self.steps)} steps>"

    def queue_name(self, name: str) -> str:
        """*name*, or the new name of the server-named queue it was."""
        return self.renamed.get(name, name)

    def method(self, step: RecoveryStep) -> Method:
        """The method to send for *step*, naming restored server-named queues by their new
        names."""
        method = step.method
        if not self.renamed:
            return method
        if isinstance(method, QueueBind | BasicConsume) and method.queue in self.renamed:
            return attrs.evolve(method, queue=self.renamed[method.queue])
        return method

    def completed(self, step: RecoveryStep, reply: Method | None) -> None:
        """*step* succeeded with *reply*: a server-named queue's ``declare-ok`` gives its new
        name."""
        if (
            step.kind == "queue"
            and isinstance(step.method, QueueDeclare)
            and not step.method.queue
            and isinstance(reply, QueueDeclareOk)
        ):
            self.renamed[step.name] = reply.queue


# --- Running a plan on a core -----------------------------------------------------------------


@final
class TopologyRestorer:
    """Runs a :class:`RecoveryPlan` on a freshly opened client core, one step at a time.

    :meth:`start` reopens the plan's channels; the adapter then passes every event of *core*
    to :meth:`handle` (and writes what the core queued) until :attr:`done`. A refused step
    raises :class:`TopologyRecoveryError` from :meth:`handle` unless the policy skips it; a
    connection closed or lost meanwhile raises its error. The methods go out one at a time, so
    each refusal names its step.

    :ivar channel_map: channel of the lost connection -> its number on the new one.
    """

    __slots__ = (
        "_core",
        "_current",
        "_opening",
        "_pending",
        "_policy",
        "channel_map",
        "done",
        "plan",
    )

    def __init__(self, core: Connection, plan: RecoveryPlan, policy: RecoveryPolicy) -> None:
        self._core = core
        self.plan = plan
        self._policy = policy
        self.channel_map: dict[int, int] = {}
        self._opening: dict[int, int] = {}  # new number -> old number
        self._pending: deque[RecoveryStep] = deque(plan.steps)
        self._current: tuple[RecoveryStep, int] | None = None
        #: True once every step was sent and answered.
        self.done = False

    def start(self) -> None:
        """Open the plan's channels (at least one, for the connection-wide steps)."""
        if self._core.state is not ConnectionState.OPEN:
            raise RuntimeError("the core must be open to restore a topology on it")
        olds = self.plan.channels or (0,)
        for old in olds:
            self._opening[self._core.open_channel()] = old
        if not self.plan.steps and not self._opening:
            self.done = True

    def _any_channel(self) -> int:
        return next(iter(self.channel_map.values()))

    def _next(self) -> None:
        core = self._core
        while self._pending:
            step = self._pending.popleft()
            channel = (
                self._any_channel() if step.channel is None else self.channel_map[step.channel]
            )
            method = self.plan.method(step)
            core.send_method(channel, method)
            if _expects_reply(method):
                self._current = (step, channel)
                return
            self.plan.completed(step, None)
        self._current = None
        self.done = True

    def handle(self, event: Event) -> bool:
        """Act on one event of the core. True when it was the restorer's (a reopened channel's
        open-ok, the reply to a step); anything else (deliveries to restored consumers, ...)
        is the adapter's to route.

        :raises TopologyRecoveryError: the broker refused a step (closed its channel or the
            connection) and the policy does not skip it.
        :raises AMQPError: the connection was closed or lost between steps.
        """
        kind = type(event)
        if kind is ChannelOpened:
            assert isinstance(event, ChannelOpened)
            old = self._opening.pop(event.channel, None)
            if old is None:
                return False
            self.channel_map[old] = event.channel
            if not self._opening and self._current is None:
                self._next()
            return True
        if kind is MethodReceived:
            assert isinstance(event, MethodReceived)
            current = self._current
            if current is None or event.request is None or event.channel != current[1]:
                return False
            self.plan.completed(current[0], event.method)
            self._next()
            return True
        if kind is ChannelClosed:
            assert isinstance(event, ChannelClosed)
            self._channel_closed(event)
            return True
        if kind is ConnectionClosed:
            assert isinstance(event, ConnectionClosed)
            raise self._refused(error_from(event, connection=True))
        if kind is ConnectionLost or kind is HeartbeatTimeout:
            raise self._refused(ConnectionLostError("the connection was lost during recovery"))
        return False

    def _refused(self, error: AMQPError) -> AMQPError:
        current = self._current
        return error if current is None else TopologyRecoveryError(current[0], error)

    def _channel_closed(self, event: ChannelClosed) -> None:
        current = self._current
        if current is None or event.channel != current[1] or not event.by_peer:
            raise error_from(event, connection=False)
        step = current[0]
        error = TopologyRecoveryError(step, error_from(event, connection=False))
        if self._policy.on_topology_error != "skip":
            raise error
        # Skip it: the broker closed the channel, so open it again and go on.
        self.plan.skipped.append(step)
        self._current = None
        old = next(old for old, new in self.channel_map.items() if new == event.channel)
        del self.channel_map[old]
        self._opening[self._core.open_channel()] = old
        if step.kind == "queue":
            # What names a queue that is not there would fail in turn.
            self._pending = deque(s for s in self._pending if not _names_queue(s, step.name))


def _names_queue(step: RecoveryStep, queue: str) -> bool:
    method = step.method
    return isinstance(method, QueueBind | BasicConsume) and method.queue == queue


def _expects_reply(method: Method) -> bool:
    nowait = getattr(method, "nowait", False)
    return not nowait and isinstance(
        method,
        ExchangeDeclare
        | QueueDeclare
        | QueueBind
        | ExchangeBind
        | BasicQos
        | BasicConsume
        | ConfirmSelect,
    )
