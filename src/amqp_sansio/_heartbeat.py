"""Heartbeats as a timer machine: time is an input (aioquic's ``handle_timer``), liveness is
"did any octet arrive since the last tick" (pika's byte counters), never a clock read here.

One machine for both protocol families: the 0-9-1 core (0-8, 0-9 too) and the 0-10 core tell
it the same things (octets received at *now*, octets handed out) and ask it the same question,
so a silent peer is declared dead two intervals after its last octet in either."""

from __future__ import annotations

import enum
from typing import Final, final

from ._frames import HEARTBEAT_FRAME

__all__ = ["Heartbeat", "Tick"]

_FRAME_SIZE: Final = len(HEARTBEAT_FRAME)


class Tick(enum.Enum):
    """What a timer tick asks of the connection."""

    NOTHING = "nothing"
    SEND_HEARTBEAT = "send heartbeat"  #: queue a heartbeat frame
    PEER_DEAD = "peer dead"  #: nothing arrived for two intervals


@final
class Heartbeat:
    """One connection's heartbeat timers, once the interval is negotiated.

    The connection tells it what happened (:meth:`received`, :meth:`handed_out`) and asks it
    when to be called next (:meth:`deadline`) and what to do at a tick (:meth:`tick`).
    """

    __slots__ = (
        "_frame_size",
        "_last_seen",
        "_queued",
        "_received",
        "_send_check",
        "_sent",
        "_started",
        "interval",
    )

    def __init__(self, frame_size: int = _FRAME_SIZE) -> None:
        #: Seconds; 0 means off.
        self.interval = 0
        # The size of one heartbeat as this protocol family writes it (0-10's is a control).
        self._frame_size = frame_size
        self._started = False
        self._sent = False  # something but our own heartbeats written since the last check
        self._received = False  # an octet arrived since the last tick
        self._queued = 0  # octets of heartbeat frames queued by ticks, not handed out yet
        self._send_check = 0.0
        self._last_seen = 0.0

    def received(self, now: float | None = None) -> None:
        """Octets arrived from the peer, at *now* on the adapter's clock when it says so.

        With *now*, two silent intervals count from the arrival itself; without it, from the
        next tick, which notices the octets up to half an interval after they came.
        """
        if now is None:
            self._received = True
        elif self._started and now > self._last_seen:
            self._last_seen = now

    def handed_out(self, octets: int) -> None:
        """The connection handed *octets* to the adapter to write."""
        if octets > self._queued:  # more than the timer's own heartbeats
            self._sent = True
        self._queued = 0

    def deadline(self) -> float | None:
        """When :meth:`tick` is due, or None when heartbeats are off. ``0.0`` (in the past on
        any clock) until the first tick, which sets the baseline."""
        if not self.interval:
            return None
        if not self._started:
            return 0.0
        return min(self._send_check, self._last_seen + 2 * self.interval)

    def tick(self, now: float, *, reading: bool) -> Tick:
        """Let time pass to *now*. Every half interval with nothing written since the previous
        check, a heartbeat is due; two intervals without an octet (counted from its arrival
        time when :meth:`received` was told it, else from the tick that saw it; or from the
        last tick while the adapter is not *reading*) mean the peer is dead."""
        interval = self.interval
        if not self._started:
            self._started = True
            self._last_seen = now
            self._send_check = now + interval / 2
            self._sent = self._received = False
            return Tick.NOTHING
        if self._received or not reading:
            self._received = False
            self._last_seen = now
        elif now >= self._last_seen + 2 * interval:
            return Tick.PEER_DEAD
        if now < self._send_check:
            return Tick.NOTHING
        due = not self._sent
        self._sent = False
        self._send_check = now + interval / 2
        if not due:
            return Tick.NOTHING
        self._queued += self._frame_size
        return Tick.SEND_HEARTBEAT
