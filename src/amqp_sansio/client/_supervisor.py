"""Recovery's decisions, written once for every adapter and both protocol families: a sans-IO
supervisor, like the core it drives. No sockets, no clock, no threads: time is an input, and the
supervisor says what to do next.

An adapter tells :class:`RecoverySupervisor` what happened (the connection was lost, an attempt
connected or failed, the core's events while the topology is restored) and asks
:meth:`~RecoverySupervisor.next_action` what to do: :class:`Connect` to an endpoint, :class:`Wait`
until a time, :class:`Resume` (move the channel objects to their new books), or
:class:`GiveUp`. The adapter keeps only its I/O and its idioms (a Trio task, an asyncio task, the
blocking adapter's I/O thread)::

    supervisor.lost(LostChannels(router), cause, now)
    while True:
        action = supervisor.next_action(now())
        if isinstance(action, Wait):
            sleep(action.until - now())
        elif isinstance(action, Connect):
            try:
                core, router = open_and_handshake(action.params, deadline=action.deadline)
                supervisor.connected(router)     # queues the restore's first methods
                ...                              # write, read: supervisor.handle(event) first
            except (OSError, AMQPError) as exc:
                supervisor.attempt_failed(exc, now())
        elif isinstance(action, Resume):
            for old, book in action.channels.items():
                channel_objects[old].rebind(book)
            recovered = supervisor.resume()       # republishes, emits Recovered
            break
        else:                                     # GiveUp
            ...

What differs between the families (the 0-9-1 channels and their topology; 0-10's sessions)
comes in a :class:`LostConnection`, whose :class:`Restoration` the supervisor runs on each new
connection; :class:`LostChannels` is 0-9-1's (and 0-9's, 0-8's).
"""

from __future__ import annotations

import enum
import random
from typing import TYPE_CHECKING, Final, Generic, Protocol, TypeAlias, TypeVar, final

import attrs

from .. import ChannelOpened
from ._errors import (
    AMQPError,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionTimeoutError,
)
from ._recovery import (
    ChannelReopened,
    Epoch,
    Recovered,
    RecoveryAttempt,
    RecoveryEvent,
    RecoveryGaveUp,
    RecoveryLost,
    RecoveryPlan,
    RecoveryPolicy,
    RecoveryState,
    RecoveryStep,
    TopologyRecoveryError,
    TopologyRestorer,
)
from ._requests import connection_parameters, endpoint_parameters
from ._router import end_suspended

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable, Mapping

    from .. import BasicConsume
    from ._instrument import Telemetry
    from ._params import ConnectionParameters
    from ._requests import EndpointResolver, Endpoints
    from ._router import ChannelBook, Router

__all__ = [
    "Connect",
    "GiveUp",
    "LostChannels",
    "LostConnection",
    "RecoveryAction",
    "RecoverySupervisor",
    "Restoration",
    "Resume",
    "Wait",
]

N = TypeVar("N")  # what a family's new connection is (a Router; 0-10's client core)
N_contra = TypeVar("N_contra", contravariant=True)
B = TypeVar("B")  # what a channel object is moved to (a ChannelBook; a 0-10 session)
B_co = TypeVar("B_co", covariant=True)


# --- What the adapter is told to do ----------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Connect:
    """Open a transport to :attr:`params` and run the handshake, by :attr:`deadline` (the
    adapter's clock); then call :meth:`RecoverySupervisor.connected`, or
    :meth:`~RecoverySupervisor.attempt_failed` with why not.

    :ivar attempt: the attempt's number (1 for the first).
    :ivar params: the endpoint's parameters (the policy's endpoints in turn, else the URL the
        connection was made with).
    :ivar deadline: when the attempt (connect, handshake and restore) has taken too long: fail it
        with :meth:`RecoverySupervisor.timeout_error`.
    """

    attempt: int
    params: ConnectionParameters
    deadline: float


@final
@attrs.frozen(kw_only=True)
class Wait:
    """Nothing to do until :attr:`until` (the adapter's clock): the backoff between attempts."""

    until: float


@final
@attrs.frozen(kw_only=True)
class Resume(Generic[B_co]):
    """The topology is restored: move each channel object of the lost connection (by its
    number there) to what :attr:`channels` gives it on the new one, then call
    :meth:`RecoverySupervisor.resume`."""

    channels: Mapping[int, B_co]


@final
@attrs.frozen(kw_only=True)
class GiveUp:
    """Recovery stopped for good: the consumers ended with :attr:`cause`; fail what still
    waits, close what is open, and say the connection is closed."""

    cause: AMQPError


RecoveryAction: TypeAlias = "Connect | Wait | Resume[object] | GiveUp"


# --- What a protocol family supplies ---------------------------------------------------------


class Restoration(Protocol[B_co]):
    """Restoring a lost connection's state on a new one (one attempt)."""

    @property
    def done(self) -> bool:
        """Every step was sent and answered."""
        ...

    def start(self) -> None:
        """Queue the first steps in the new connection's core (the adapter writes them)."""

    def handle(self, event: object) -> bool:
        """One event of the new core: True when it was the restoration's.

        :raises AMQPError: a step was refused (:class:`TopologyRecoveryError`), or the
            connection ended meanwhile.
        """
        ...

    def channels(self) -> Mapping[int, B_co]:
        """Once :attr:`done`: the lost connection's channel numbers -> their new homes."""
        ...

    def resume(self) -> tuple[int, int]:
        """Once the adapter moved its channel objects: carry on what the lost connection left
        (publishes kept for republishing); returns how many were published again and how many
        more outcomes became unknown."""
        ...

    @property
    def renamed(self) -> Mapping[str, str]:
        """Server-named queues restored under new names: old -> new."""
        ...

    @property
    def skipped(self) -> tuple[RecoveryStep, ...]:
        """Steps left out (by the policy, its filter, or a refusal under ``"skip"``)."""
        ...


class LostConnection(Protocol[N_contra, B_co]):
    """What a protocol family's lost connection leaves to recover."""

    @property
    def unknown(self) -> int:
        """Outcomes that became unknown at the loss (confirms, syncs)."""
        ...

    def drop_unhanded(self) -> int:
        """Drop the deliveries the consumers hold and did not hand out yet (the broker
        requeues them, and their tags died with the connection); how many."""
        ...

    def restoration(self, new: N_contra, policy: RecoveryPolicy) -> Restoration[B_co]:
        """The restoration to run on the newly opened connection *new*."""
        ...

    def give_up(self, cause: AMQPError) -> None:
        """Recovery stopped: consumers end with *cause*, kept publishes end unknown."""


# --- The supervisor --------------------------------------------------------------------------


class _Phase(enum.Enum):
    CONNECTED = "connected"  # no loss in progress
    WAITING = "waiting"  # lost: the next attempt is due at _due
    CONNECTING = "connecting"  # an attempt is opening its transport and handshake
    RESTORING = "restoring"  # the attempt's connection is open; its restoration runs
    RESUMING = "resuming"  # restored: the adapter moves its channel objects
    GAVE_UP = "gave up"  # GiveUp not yet taken by the adapter
    CLOSED = "closed"


@final
class RecoverySupervisor(Generic[N, B]):
    """One connection's recovery: its state, the backoff schedule, the endpoint of each attempt,
    the restoration, the epoch its deliveries carry, the publishes whose outcome became
    unknown, the deliveries dropped, and the events, told to *emit* (on the adapter's thread or
    task, under its lock) and logged on *logger* in the same words for every adapter.

    :param params: the parameters the connection was made with (the endpoint when the policy
        names none, and the address in logs).
    :param policy: the policy; None: no recovery (a loss is final, :meth:`recover_on` says
        so), but the epoch and the state are still kept.
    :param emit: told each :data:`~amqp_sansio.client.RecoveryEvent`.
    :param logger: the adapter's logger.
    :param rng: draws the jitter (tests pass a seeded one).
    """

    __slots__ = (
        "_attempt",
        "_cause",
        "_closing",
        "_current_params",
        "_deadline",
        "_dropped",
        "_due",
        "_emit",
        "_logger",
        "_lost",
        "_opened",
        "_phase",
        "_restoration",
        "_rng",
        "_started",
        "_unknown",
        "_waiting_octets",
        "endpoints",
        "epoch",
        "in_use",
        "params",
        "policy",
        "resolver",
        "secret",
        "telemetry",
    )

    def __init__(
        self,
        params: ConnectionParameters,
        policy: RecoveryPolicy | None,
        *,
        emit: Callable[[RecoveryEvent], None],
        logger: logging.Logger,
        rng: random.Random | None = None,
    ) -> None:
        self.params: Final = params
        self.policy: Final = policy
        #: The epoch each delivery keeps and each settle is checked against.
        self.epoch: Final = Epoch("raise" if policy is None else policy.stale_settle)
        self._emit = emit
        self._logger = logger
        self._rng = rng or random.Random()
        self._phase = _Phase.CONNECTED
        self._opened = False
        self._closing = False
        self._cause: AMQPError | None = None
        self._lost: LostConnection[N, B] | None = None
        self._restoration: Restoration[B] | None = None
        self._attempt = 0
        self._started = 0.0
        self._due = 0.0
        self._deadline = 0.0
        self._current_params = params
        #: The secret every new attempt logs in with, once the application updated it
        #: (``update_secret``): a reconnect never goes back to the password it started with.
        self.secret: str | None = None
        #: The endpoints ``connect()`` was given, in the order the first connect walked them
        #: (one: ``params``); recovery walks them too, from the one after :attr:`in_use`.
        self.endpoints: tuple[ConnectionParameters, ...] = (params,)
        #: What ``connect()`` was given when it was a resolver: asked again for
        #: :attr:`endpoints` at the start of every round of attempts.
        self.resolver: EndpointResolver | None = None
        #: The endpoint the connection is on (the first connect's, then each recovery's).
        self.in_use: ConnectionParameters = params
        #: The connection's telemetry, told when recovery moved it to another node.
        self.telemetry: Telemetry | None = None
        self._unknown = 0
        self._dropped = 0
        self._waiting_octets = 0

    def __repr__(self) -> str:
        return f"<RecoverySupervisor {self.params.address} {self._phase.value}>"

    # --- state --------------------------------------------------------------------------------

    @property
    def state(self) -> RecoveryState:
        """``OPEN``, ``RECOVERING`` or ``CLOSED`` (the public state)."""
        phase = self._phase
        if phase is _Phase.CONNECTED:
            return RecoveryState.OPEN
        if phase in (_Phase.GAVE_UP, _Phase.CLOSED):
            return RecoveryState.CLOSED
        return RecoveryState.RECOVERING

    @property
    def recovering(self) -> bool:
        """From a loss until :meth:`resume` (or giving up): calls wait for the connection."""
        return self._phase in (
            _Phase.WAITING,
            _Phase.CONNECTING,
            _Phase.RESTORING,
            _Phase.RESUMING,
        )

    @property
    def attempting(self) -> bool:
        """An attempt's connection is open or opening (its failure is the attempt's)."""
        return self._phase in (_Phase.CONNECTING, _Phase.RESTORING)

    @property
    def restoring(self) -> bool:
        """The new connection is open and its restoration runs: events go to :meth:`handle`
        first."""
        return self._phase is _Phase.RESTORING

    @property
    def cause(self) -> AMQPError | None:
        """Why the connection was lost, while recovering."""
        return self._cause if self.recovering else None

    def recover_on(self, error: AMQPError) -> bool:
        """Whether a connection ending with *error* is kept for recovery (the router's
        ``recover_on``): during an attempt whatever happened (the attempt reports it), else
        as the policy's :meth:`~RecoveryPolicy.triggers` says; never once the application
        closes."""
        if self._closing or self.policy is None or self._phase is _Phase.CLOSED:
            return False
        if self.attempting:
            return True
        return self._opened and self._phase is _Phase.CONNECTED and self.policy.triggers(error)

    def opened(self) -> None:
        """The first connection's handshake finished: only a connection that opened once is
        recovered (a failing first ``connect()`` raises as it always did)."""
        self._opened = True

    def attach(
        self,
        router: Router,
        on_reopened: Callable[[int, ChannelBook], None] | None = None,
    ) -> None:
        """Route a 0-9-1 connection's *router* for recovery: it suspends (keeps consumers) when
        :meth:`recover_on` says so, and under ``reopen_channels`` reopens channels the broker
        closed, telling *on_reopened* (the adapter moves its channel object from the old
        number to the new book) before :class:`ChannelReopened` is emitted."""
        policy = self.policy
        if policy is None:
            return

        def reopened(old: int, book: ChannelBook, cause: AMQPError) -> None:
            if on_reopened is not None:
                on_reopened(old, book)
            self._emit(ChannelReopened(channel=old, new_channel=book.number, cause=cause))

        router.recover_with(policy, self.recover_on, reopened)

    # --- the application ---------------------------------------------------------------------

    def close(self) -> bool:
        """The application closes the connection: nothing is recovered from now on. When a
        recovery was under way it stops (True): the consumers end and the adapter closes what
        the attempt had open."""
        self._closing = True
        if not self.recovering:
            return False
        cause = ConnectionClosedError("closed by the client", reply_code=200)
        if self._lost is not None:
            self._lost.give_up(cause)
        self._end()
        return True

    def closed(self) -> None:
        """The connection ended for good without recovery (closed, or lost with no policy)."""
        self._end()

    def admit(self, octets: int = 0) -> None:
        """A call made while recovering wants to wait for the connection, with *octets* of
        body: fine under the policy's ``publish_wait`` and ``publish_buffer`` (then call
        :meth:`release` once it stopped waiting).

        :raises ConnectionLostError: ``publish_wait`` is 0, or the buffer would overflow.
        """
        policy = self.policy
        assert policy is not None
        if not policy.publish_wait or self._waiting_octets + octets > policy.publish_buffer:
            why = "publish_wait is 0" if not policy.publish_wait else "publish_buffer is full"
            raise ConnectionLostError(
                f"the connection to {self.params.address} is recovering ({why}): {self._cause}"
            )
        self._waiting_octets += octets

    def release(self, octets: int = 0) -> None:
        """A call admitted by :meth:`admit` stopped waiting."""
        self._waiting_octets -= octets

    def wait_expired(self) -> ConnectionLostError:
        """The error of a call that waited ``publish_wait`` seconds in vain."""
        assert self.policy is not None
        return ConnectionLostError(
            f"the connection to {self.params.address} did not recover within "
            f"{self.policy.publish_wait} s: {self._cause}"
        )

    # --- the loss -----------------------------------------------------------------------------

    def lost(self, lost: LostConnection[N, B], cause: AMQPError, now: float) -> None:
        """The connection was lost and the router kept it for recovery (:meth:`recover_on`
        said so): deliveries not handed out are dropped, the epoch moves on, and the first
        attempt is due at once."""
        assert self._opened, "a connection that never opened is not recovered"
        assert self.policy is not None, "no policy: nothing recovers"
        assert self._phase is _Phase.CONNECTED, f"lost while {self._phase.value}"
        self._lost = lost
        self._cause = cause
        self._unknown = lost.unknown
        self._dropped = lost.drop_unhanded()
        self.epoch.current += 1
        self._attempt = 0
        self._started = now
        self._due = now
        self._phase = _Phase.WAITING
        self._logger.warning(
            "lost the connection to %s (%s): recovering", self.in_use.address, cause
        )
        self._emit(RecoveryLost(cause=cause))

    def next_deadline(self) -> float | None:
        """When :meth:`next_action` has something new to say: the next attempt, or the
        current attempt's deadline; None otherwise."""
        if self._phase is _Phase.WAITING:
            return self._due
        if self.attempting:
            return self._deadline
        return None

    def next_action(self, now: float) -> Connect | Wait | Resume[B] | GiveUp | None:
        """What the adapter does next; None while nothing is asked of it (connected, an
        attempt under way, or closed)."""
        phase = self._phase
        if phase is _Phase.WAITING:
            if now < self._due:
                return Wait(until=self._due)
            return self._connect(now)
        if phase is _Phase.RESUMING:
            assert self._restoration is not None
            return Resume(channels=self._restoration.channels())
        if phase is _Phase.GAVE_UP:
            assert self._cause is not None
            self._end()
            return GiveUp(cause=self._cause)
        return None

    def _connect(self, now: float) -> Connect:
        policy = self.policy
        assert policy is not None
        self._attempt += 1
        params = self._endpoint(policy)
        if self.secret is not None:
            params = attrs.evolve(params, password=self.secret)
        self._phase = _Phase.CONNECTING
        self._deadline = now + params.connection_timeout
        self._current_params = params
        return Connect(attempt=self._attempt, params=params, deadline=self._deadline)

    def _endpoint(self, policy: RecoveryPolicy) -> ConnectionParameters:
        # The policy's endpoints win; else connect()'s, starting after the one that was lost
        # (a dead node is tried last), every one once per round.
        url = policy.endpoint(self._attempt, "")
        if url:
            return connection_parameters(url, self.params.connection_name)
        if self.resolver is not None and (self._attempt - 1) % len(self.endpoints) == 0:
            self._resolve()
        endpoints = self.endpoints
        if len(endpoints) == 1:
            return endpoints[0]
        addresses = [endpoint.address for endpoint in endpoints]
        used = self.in_use.address
        start = addresses.index(used) if used in addresses else -1
        return endpoints[(start + self._attempt) % len(endpoints)]

    def use_endpoints(self, endpoints: tuple[ConnectionParameters, ...], given: Endpoints) -> None:
        """The endpoints the first connect walked; when ``connect()`` was *given* a resolver,
        recovery asks it again at the start of every round (:meth:`_resolve`)."""
        self.endpoints = endpoints
        self.resolver = given if callable(given) else None

    def _resolve(self) -> None:
        """Ask the resolver for this round's endpoints; on failure walk the last ones again
        (a registry that is down must not stop recovery)."""
        assert self.resolver is not None
        try:
            found = endpoint_parameters(self.resolver, self.params.connection_name)
        except Exception as exc:  # the application's code: any error, walk the old list
            self._logger.warning(
                "the endpoint resolver failed (%s: %s): trying the %d endpoints it gave last",
                type(exc).__name__,
                exc,
                len(self.endpoints),
            )
            return
        self.endpoints = tuple(attrs.evolve(each, protocol=self.params.protocol) for each in found)

    def timeout_error(self) -> ConnectionTimeoutError:
        """The error of an attempt past its :attr:`Connect.deadline`."""
        return ConnectionTimeoutError(
            f"recovery attempt {self._attempt} to {self._current_params.address} took over "
            f"{self._current_params.connection_timeout} s"
        )

    # --- an attempt ---------------------------------------------------------------------------

    def connected(self, new: N) -> Restoration[B]:
        """The attempt's connection is open (the handshake finished): the restoration starts,
        with its first methods queued in the new core (the adapter writes them). Feed the new
        core's events to :meth:`handle` first until :meth:`next_action` says :class:`Resume`."""
        assert self._phase is _Phase.CONNECTING, f"connected while {self._phase.value}"
        assert self._lost is not None
        assert self.policy is not None
        restoration = self._lost.restoration(new, self.policy)
        self._restoration = restoration
        self._phase = _Phase.RESTORING
        restoration.start()
        if restoration.done:
            self._phase = _Phase.RESUMING
        return restoration

    def handle(self, event: object) -> bool:
        """One event of the new core while :attr:`restoring`: True when the restoration took
        it; anything else (deliveries to restored consumers) is the adapter's to route.

        :raises AMQPError: a step was refused or the connection ended: close the attempt's
            transport and call :meth:`attempt_failed` with it.
        """
        restoration = self._restoration
        if self._phase is not _Phase.RESTORING or restoration is None:
            return False
        taken = restoration.handle(event)
        if restoration.done:
            self._phase = _Phase.RESUMING
        return taken

    def attempt_failed(self, error: BaseException, now: float) -> None:
        """The attempt failed with *error* (connect refused, handshake, a refused step, the
        connection lost during the restore, its deadline): the next one is scheduled, or
        recovery gives up (:meth:`next_action` says :class:`GiveUp`)."""
        if self._phase is _Phase.CLOSED:
            return  # closed by the application meanwhile
        assert self.attempting, f"an attempt failed while {self._phase.value}"
        policy = self.policy
        lost = self._lost
        assert policy is not None
        assert lost is not None
        if self._phase is _Phase.RESTORING:
            # The attempt's connection opened: what it delivered is as stale as the first's.
            self._dropped += lost.drop_unhanded()
            self.epoch.current += 1
        self._restoration = None
        attempt = self._attempt
        last = (
            policy.gives_up(attempt, now - self._started)
            or (isinstance(error, TopologyRecoveryError) and policy.on_topology_error == "give_up")
            or (isinstance(error, ConnectionClosedError) and error.reply_code in (403, 530))
        )
        address = self._current_params.address
        self._logger.info("recovery attempt %d to %s failed: %s", attempt, address, error)
        delay = None if last else policy.delay(attempt + 1, self._rng)
        self._emit(RecoveryAttempt(attempt=attempt, url=address, error=error, next_delay=delay))
        if delay is not None:
            self._due = now + delay
            self._phase = _Phase.WAITING
            return
        self._logger.error(
            "gave up recovering the connection to %s after %d attempts: %s",
            self.params.address,
            attempt,
            error,
        )
        self._emit(RecoveryGaveUp(attempts=attempt, cause=error))
        assert self._cause is not None
        lost.give_up(self._cause)
        self._phase = _Phase.GAVE_UP

    def resume(self) -> Recovered:
        """The adapter moved its channel objects (:class:`Resume`): the lost connection's kept
        publishes go out again, the connection is open, and :class:`Recovered` is emitted (and
        returned). The adapter writes what the core queued and wakes what waited."""
        assert self._phase is _Phase.RESUMING, f"resume while {self._phase.value}"
        restoration = self._restoration
        assert restoration is not None
        republished, unknown = restoration.resume()
        recovered = Recovered(
            attempt=self._attempt,
            epoch=self.epoch.current,
            renamed_queues=dict(restoration.renamed),
            unknown_publishes=self._unknown + unknown,
            skipped=restoration.skipped,
            republished=republished,
            dropped_deliveries=self._dropped,
            address=self._current_params.address,
        )
        if self.telemetry is not None and self._current_params.address != self.in_use.address:
            self.telemetry.moved_to(self._current_params.host, self._current_params.port)
        self.in_use = self._current_params
        self._phase = _Phase.CONNECTED
        self._lost = None
        self._restoration = None
        self._cause = None
        self._logger.info(
            "recovered the connection to %s (attempt %d, epoch %d)",
            self._current_params.address,
            recovered.attempt,
            recovered.epoch,
        )
        self._emit(recovered)
        return recovered

    def _end(self) -> None:
        self._phase = _Phase.CLOSED
        self._lost = None
        self._restoration = None


# --- 0-9-1 (and 0-9, 0-8) ---------------------------------------------------------------------


@final
class LostChannels:
    """A lost 0-9-1 connection: its router's books, kept with their consumers
    (:attr:`Router.suspended <amqp_sansio.client.Router.suspended>`), and the topology its core
    recorded. Its restoration runs a :class:`~amqp_sansio.client.RecoveryPlan` on the new
    router's core and hands each channel its new :class:`~amqp_sansio.client.ChannelBook`.
    """

    __slots__ = ("books", "paused", "topology", "unknown")

    def __init__(self, router: Router) -> None:
        books = router.suspended
        assert books is not None, "the router did not suspend"
        #: The lost connection's books, by channel number (channel 0's included).
        self.books: Final[dict[int, ChannelBook]] = books
        self.topology: Final = router.core.topology
        self.unknown: Final = router.unknown
        #: Consumers paused for their buffer at the loss, or being consumed again (not in the
        #: topology): restored too.
        self.paused: Final[dict[tuple[int, str], BasicConsume]] = {
            (number, tag): consume
            for number, book in books.items()
            for tag, consume in book.restore_consumes.items()
        }

    def __repr__(self) -> str:
        return f"<LostChannels {sorted(self.books)}>"

    def drop_unhanded(self) -> int:
        return sum(
            sink.drop_unhanded() for book in self.books.values() for sink in book.consumers.values()
        )

    def restoration(self, new: Router, policy: RecoveryPolicy) -> ChannelRestoration:
        return ChannelRestoration(new, self, policy)

    def give_up(self, cause: AMQPError) -> None:
        end_suspended(self.books, cause)


@final
class ChannelRestoration:
    """One attempt's restore of a :class:`LostChannels` on a new router: the plan's channels,
    exchanges, queues, bindings, QoS, confirm mode and consumers, one step at a time."""

    __slots__ = ("_lost", "_restorer", "_router", "plan")

    def __init__(self, router: Router, lost: LostChannels, policy: RecoveryPolicy) -> None:
        self._router = router
        self._lost = lost
        books = lost.books
        self.plan: Final = RecoveryPlan(
            lost.topology,
            channels=[number for number in books if number],
            confirm_channels=[number for number, book in books.items() if book.confirm_mode],
            policy=policy,
            paused=lost.paused,
        )
        self._restorer = TopologyRestorer(router.core, self.plan, policy)

    def __repr__(self) -> str:
        return f"<ChannelRestoration {self.plan!r}>"

    @property
    def done(self) -> bool:
        return self._restorer.done

    @property
    def renamed(self) -> Mapping[str, str]:
        return self.plan.renamed

    @property
    def skipped(self) -> tuple[RecoveryStep, ...]:
        return tuple(self.plan.skipped)

    def start(self) -> None:
        self._restorer.start()

    def handle(self, event: object) -> bool:
        restorer = self._restorer
        taken = restorer.handle(event)  # type: ignore[arg-type]
        if taken and type(event) is ChannelOpened:
            assert isinstance(event, ChannelOpened)
            old = next(o for o, n in restorer.channel_map.items() if n == event.channel)
            # The new book carries the lost one's consumers from here: deliveries to restored
            # consumers belong to the new channel, even before the adapter resumes.
            self._router.channel_reopened(event.channel, self._lost.books.get(old))
        return taken

    def channels(self) -> Mapping[int, ChannelBook]:
        router = self._router
        return {
            old: router.channels[new]
            for old, new in self._restorer.channel_map.items()
            if old in self.plan.channels
        }

    def resume(self) -> tuple[int, int]:
        router = self._router
        republished = unknown = 0
        for old, book in self.channels().items():
            sent, ended = router.resume(self._lost.books.get(old), book)
            republished += sent
            unknown += ended
        for lost in self._lost.books.values():
            lost.consumers = {}
        return republished, unknown
