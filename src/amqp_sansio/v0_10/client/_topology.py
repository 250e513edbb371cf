"""What a 0-10 client declared on its connection, as the 0-9-1 core's topology recorder keeps
it: the commands the broker completed, minus what was deleted or unbound since, to declare
again on a new connection (recovery)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, final

from .._generated.spec_0_10 import (
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    QueueDeclare,
    QueueDelete,
)

if TYPE_CHECKING:
    from .._types import Command

__all__ = ["Topology010"]

_BindingKey: TypeAlias = "tuple[str, str, str]"


@final
class Topology010:
    """Exchanges, queues and bindings in force, each the command the application sent (passive
    declares are checks, not declarations, and are not kept)."""

    __slots__ = ("bindings", "exchanges", "queues")

    def __init__(self) -> None:
        #: Exchange name -> its ``exchange.declare``, oldest first.
        self.exchanges: dict[str, ExchangeDeclare] = {}
        #: Queue name -> its ``queue.declare``, oldest first.
        self.queues: dict[str, QueueDeclare] = {}
        #: (queue, exchange, binding key) -> its ``exchange.bind``, oldest first.
        self.bindings: dict[_BindingKey, ExchangeBind] = {}

    def __repr__(self) -> str:
        return (
            f"<Topology010 {len(self.exchanges)} exchanges, {len(self.queues)} queues, "
            f"{len(self.bindings)} bindings>"
        )

    def record(self, command: Command) -> None:
        """The broker completed *command*."""
        if isinstance(command, ExchangeDeclare):
            if not command.passive and command.exchange:
                self.exchanges[command.exchange] = command
        elif isinstance(command, QueueDeclare):
            if not command.passive and command.queue:
                self.queues[command.queue] = command
        elif isinstance(command, ExchangeBind):
            key = (command.queue or "", command.exchange or "", command.binding_key or "")
            self.bindings[key] = command
        elif isinstance(command, ExchangeUnbind):
            key = (command.queue or "", command.exchange or "", command.binding_key or "")
            self.bindings.pop(key, None)
        elif isinstance(command, QueueDelete):
            name = command.queue or ""
            self.queues.pop(name, None)
            self.bindings = {k: b for k, b in self.bindings.items() if k[0] != name}
        elif isinstance(command, ExchangeDelete):
            name = command.exchange or ""
            self.exchanges.pop(name, None)
            self.bindings = {k: b for k, b in self.bindings.items() if k[1] != name}

    def commands(self) -> list[Command]:
        """What declares it all again, in order: exchanges, queues, then bindings."""
        return [*self.exchanges.values(), *self.queues.values(), *self.bindings.values()]
