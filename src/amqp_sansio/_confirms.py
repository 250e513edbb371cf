"""Publisher confirms on one channel: numbering publishes, settling them from acks and nacks,
and tying a mandatory publish's ``basic.return`` to the confirm that follows it."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    from ._events import PublishReturned
    from ._generated.spec_0_9_1 import BasicPublish

__all__ = ["Confirms", "tie_returns"]


@final
class Confirms:
    """Publisher confirms on one channel: publishes are numbered 1, 2, ... from confirm.select.

    Every number below ``low`` is settled (acked or nacked); from ``low`` to ``next - 1`` a
    number is unsettled unless it is in ``settled`` (settled out of order). ``low`` always rests
    on an unsettled number or on ``next``, so an ack costs O(1) plus the numbers it settles:
    a window of any size stays linear overall.

    Client role only: ``mandatory`` maps each unsettled mandatory publish not yet tied to a return
    to its (exchange, routing key); ``free`` counts, per such key, the entries of ``mandatory``
    that no held return has reserved; ``held`` are returns not handed out yet, in wire order, each
    with whether it reserved a key (it waits for the confirm covering its publish) or only waits
    behind an older one (it came when no publish could explain it). ``held`` is empty or starts
    with a reserving return.

    In the server role the same numbers count the client's publishes and the acks we sent.
    """

    __slots__ = ("free", "held", "low", "mandatory", "next", "settled")

    def __init__(self) -> None:
        self.next = 1
        self.low = 1
        self.settled: set[int] = set()
        self.mandatory: dict[int, tuple[str, str]] = {}
        self.free: dict[tuple[str, str], int] = {}
        self.held: list[tuple[PublishReturned, bool]] = []

    def number(self, method: BasicPublish) -> int:
        """Number a publish just written (client role), keeping a mandatory one's key."""
        number = self.next
        self.next = number + 1
        if method.mandatory:
            key = (method.exchange, method.routing_key)
            self.mandatory[number] = key
            self.free[key] = self.free.get(key, 0) + 1
        return number

    def covers(self, tag: int, multiple: bool) -> bool:
        """Whether an ack of *tag* names only numbers in use and settles at least one."""
        if multiple and tag == 0:  # the spec: zero with multiple means "all outstanding"
            return self.low < self.next
        return self.low <= tag < self.next and (multiple or tag not in self.settled)

    def settle(self, tag: int, multiple: bool) -> tuple[int, ...]:
        """Settle what an ack of *tag* covers (after :meth:`covers` said it is valid)."""
        low = self.low
        settled = self.settled
        numbers: tuple[int, ...]
        if not multiple:
            if tag != low:
                settled.add(tag)
                return (tag,)
            numbers = (tag,)
            low += 1
        else:
            top = self.next if tag == 0 else tag + 1
            if settled:
                numbers = tuple(n for n in range(low, top) if n not in settled)
                settled.difference_update(range(low, top))
            else:
                numbers = tuple(range(low, top))
            low = top
        while low in settled:
            settled.remove(low)
            low += 1
        self.low = low
        return numbers

    def unsettled(self) -> tuple[int, ...]:
        return tuple(n for n in range(self.low, self.next) if n not in self.settled)

    def release(self) -> list[PublishReturned]:
        """The held returns, untied, in wire order: their confirm will never come."""
        held = self.held
        self.held = []
        return [event for event, _ in held]


def tie_returns(confirms: Confirms, numbers: tuple[int, ...]) -> list[PublishReturned]:
    """Forget the mandatory publishes among *numbers* (just settled) and tie held returns to
    them: each reserving return, oldest first, takes the lowest of those numbers with its
    exchange and routing key (see :class:`PublishReturned` for what this guess assumes).

    Returns what to hand out before the confirm, in wire order: every held return up to the
    newest one tied, then those that only waited behind it. An older reserving return that this
    confirm leaves untied is handed out untied rather than overtaken (with RabbitMQ, whose
    returns are confirmed in the order it sent them, this does not happen).
    """
    mandatory = confirms.mandatory
    free = confirms.free
    held = confirms.held
    waiting: dict[tuple[str, str], list[int]] = {}  # key -> indexes into held, newest first
    for index in range(len(held) - 1, -1, -1):
        event, reserved = held[index]
        if reserved:
            waiting.setdefault((event.method.exchange, event.method.routing_key), []).append(index)
    ties: dict[int, int] = {}  # index into held -> publish number
    for number in numbers:
        key = mandatory.pop(number, None)
        if key is None:
            continue
        indexes = waiting.get(key)
        if indexes:
            ties[indexes.pop()] = number  # the held return reserved this key: free unchanged
        elif free[key] == 1:
            del free[key]
        else:
            free[key] -= 1
    if not ties:
        return []
    out: list[PublishReturned] = []
    last = max(ties)
    for index in range(last + 1):
        event, reserved = held[index]
        tied = ties.get(index)
        if tied is not None:
            out.append(attrs.evolve(event, publish_number=tied))
            continue
        if reserved:  # give its reservation back: it leaves untied
            key = (event.method.exchange, event.method.routing_key)
            free[key] = free.get(key, 0) + 1
        out.append(event)
    rest = last + 1
    while rest < len(held) and not held[rest][1]:
        out.append(held[rest][0])
        rest += 1
    confirms.held = held[rest:]
    return out
