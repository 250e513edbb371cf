"""Publisher-confirm bookkeeping every adapter shares: the outcome of each publish from the core's
confirm events, and the counting of pipelined publishers and their tickets (the adapters add the
waiting)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, NoReturn, final

from ._errors import (
    AMQPError,
    ConnectionLostError,
    MessageReturnedError,
    PublishNackedError,
    PublishOutcomeUnknownError,
)
from ._message import Message
from ._requests import check_window

if TYPE_CHECKING:
    from .. import BasicReturn, ContentProperties

__all__ = [
    "ConfirmTracker",
    "PublishOutcome",
    "PublishTicketState",
    "PublisherCounts",
]


#: What a publish ended with: None when the broker acked it, else the error to report.
PublishOutcome = AMQPError | None


@final
class ConfirmTracker:
    """Turns a channel's confirm-mode events into one outcome per publish number.

    The core already expands ``multiple`` into exact publish numbers and emits a returned
    mandatory publish just before the ack that settles it. This class remembers the return,
    so an ack after a return becomes :class:`MessageReturnedError`, a nack becomes
    :class:`PublishNackedError`, and a lost transport an unknown outcome
    (:class:`PublishOutcomeUnknownError`).
    It holds only returns still waiting for their ack: memory is bounded by what is in flight.
    """

    __slots__ = ("_returned",)

    def __init__(self) -> None:
        self._returned: dict[int, MessageReturnedError] = {}

    def returned(
        self,
        channel: int,
        publish_number: int | None,
        method: BasicReturn,
        properties: ContentProperties,
        body: bytes | bytearray | memoryview,
    ) -> MessageReturnedError:
        """Record a ``basic.return``; returns the error (for a publish outside confirm mode,
        ``publish_number`` None, it is the only report there will be)."""
        message = Message.from_content(channel, method, properties, body)
        error = MessageReturnedError(publish_number, method.reply_code, method.reply_text, message)
        if publish_number is not None:
            self._returned[publish_number] = error
        return error

    @property
    def holds_returns(self) -> bool:
        """Whether a return waits for its ack (else every ack is a plain confirm)."""
        return bool(self._returned)

    def confirmed(self, publish_numbers: tuple[int, ...]) -> list[tuple[int, PublishOutcome]]:
        """Outcomes for a broker ack: None, or the return recorded for that number."""
        if not self._returned:
            return [(number, None) for number in publish_numbers]
        pop = self._returned.pop
        return [(number, pop(number, None)) for number in publish_numbers]

    def nacked(self, publish_numbers: tuple[int, ...]) -> list[tuple[int, PublishOutcome]]:
        """Outcomes for a broker nack: :class:`PublishNackedError` for each number."""
        for number in publish_numbers:
            self._returned.pop(number, None)
        return [(number, PublishNackedError(number)) for number in publish_numbers]

    def lost(self, publish_numbers: tuple[int, ...]) -> list[tuple[int, PublishOutcome]]:
        """Outcomes for publishes the transport took with it: unknown (never a fake nack)."""
        self._returned.clear()
        cause = ConnectionLostError("the connection to the broker was lost")
        return [(number, PublishOutcomeUnknownError(number, cause)) for number in publish_numbers]


class PublisherCounts:
    """The outcome counters and the kept failures of every adapter's pipelined ``Publisher``;
    the adapter adds publishing and the waiting."""

    def __init__(self, window: int) -> None:
        #: The most publishes kept unconfirmed at once.
        self.window: Final = check_window(window)
        #: Publishes written.
        self.published = 0
        #: Publishes the broker acked (returned ones excluded).
        self.confirmed = 0
        #: Publishes the broker nacked.
        self.nacked = 0
        #: Mandatory publishes returned unroutable.
        self.returned = 0
        #: Publishes whose outcome is unknown: the connection or channel ended before their
        #: confirm (:class:`PublishOutcomeUnknownError`; they may have been routed).
        self.unknown = 0
        #: Publishes that failed for any reason (nacked, returned, unknown).
        self.failed = 0
        self._in_flight = 0
        self._failures: list[AMQPError] = []

    @property
    def in_flight(self) -> int:
        """Publishes written and not settled yet."""
        return self._in_flight

    def take_failures(self) -> list[AMQPError]:
        """The failures kept so far, oldest first; they are forgotten here."""
        failures, self._failures = self._failures, []
        return failures

    def _raise_failures(self) -> NoReturn:
        failures, self._failures = self._failures, []
        raise ExceptionGroup(f"{len(failures)} publishes failed", failures)

    def _count_published(self) -> None:
        self.published += 1
        self._in_flight += 1

    def _settled(self, outcome: AMQPError | None) -> None:
        """A publish of this publisher was settled: count it (adapters also wake waiters)."""
        self._count_settled(outcome)

    def _count_settled(self, outcome: AMQPError | None) -> None:
        """Count a publish the broker settled (None: confirmed) and keep a failure until the
        publisher's owner takes it."""
        self._in_flight -= 1
        if outcome is None:
            self.confirmed += 1
            return
        self.failed += 1
        if isinstance(outcome, PublishNackedError):
            self.nacked += 1
        elif isinstance(outcome, MessageReturnedError):
            self.returned += 1
        elif isinstance(outcome, PublishOutcomeUnknownError):
            self.unknown += 1
        self._failures.append(outcome)


class PublishTicketState:
    """What every adapter's ``PublishTicket`` knows: the publish number and, once the broker
    settled it, the outcome; the adapter adds the waiting."""

    __slots__ = ("_done", "_error", "_owner", "number")

    def __init__(self, number: int, owner: PublisherCounts | None) -> None:
        #: The channel's publish sequence number (1 for the first publish after confirm.select).
        self.number: Final = number
        self._owner = owner
        self._done = False
        self._error: AMQPError | None = None

    def __repr__(self) -> str:
        state = "pending" if not self._done else ("failed" if self._error else "confirmed")
        return f"<PublishTicket {self.number} {state}>"

    @property
    def done(self) -> bool:
        """Whether the broker settled the publish (or the connection ended)."""
        return self._done

    @property
    def error(self) -> AMQPError | None:
        """The failure (:class:`~amqp_sansio.client.PublishNackedError`,
        :class:`~amqp_sansio.client.MessageReturnedError`, a connection error); None while
        pending or when confirmed."""
        return self._error

    def _record(self, outcome: AMQPError | None) -> bool:
        """Keep the outcome and count it on the owning publisher; False if already settled."""
        if self._done:
            return False
        self._done = True
        self._error = outcome
        if self._owner is not None:
            self._owner._settled(outcome)
        return True
