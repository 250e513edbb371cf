"""0-10's part of connection recovery: what a lost 0-10 connection leaves (its sessions, their
subscriptions, the topology its client declared) and the restore on a new connection, for the
client layer's :class:`~amqp_sansio.client.RecoverySupervisor`, which decides everything else
(when, where, give-up, events) as it does for 0-9-1.

Detached sessions are not resumed (their commands died with the connection, and a broker may
still hold the old names for a while): each lost session gets a new one, under a new name; the
recorded exchanges, queues and bindings are declared again on the first; each subscription
subscribes again on its session's successor with the same destination, accept and acquire
modes, flow mode and credit, into the same buffer. Transfers and syncs waiting at the loss end
with :class:`~amqp_sansio.client.PublishOutcomeUnknownError`, as 0-9-1's confirms do.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final, final

from ._core import Pending

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ...client._errors import AMQPError
    from ...client._recovery import RecoveryPolicy, RecoveryStep
    from ._core import ClientCore, ClientSession, SubscriptionCore

__all__ = ["LostSessions", "SessionRestoration"]


@final
class LostSessions:
    """A lost 0-10 connection's client, kept for recovery (its subscriptions unfinished: see
    :attr:`ClientCore.recover_on <amqp_sansio.v0_10.client.ClientCore.recover_on>`)."""

    __slots__ = ("commands", "sessions", "subscriptions", "unknown")

    def __init__(self, client: ClientCore) -> None:
        assert client.suspended, "the client was not kept for recovery"
        #: The sessions that were attached, by channel, in order.
        self.sessions: Final[dict[int, ClientSession]] = {
            channel: session
            for channel, session in sorted(client.sessions.items())
            if session.attached.error is None or session.attached.error is client.error
        }
        #: Their subscriptions, by channel.
        self.subscriptions: Final[dict[int, list[SubscriptionCore]]] = {
            channel: [sub for sub in session.subscriptions.values() if not sub.cancelled]
            for channel, session in self.sessions.items()
        }
        #: What declares the client's topology again.
        self.commands: Final = client.topology.commands()
        self.unknown: Final = client.unknown

    def __repr__(self) -> str:
        return f"<LostSessions {len(self.sessions)} sessions, {len(self.commands)} commands>"

    def drop_unhanded(self) -> int:
        return sum(sub.drop_unhanded() for subs in self.subscriptions.values() for sub in subs)

    def restoration(self, new: ClientCore, policy: RecoveryPolicy) -> SessionRestoration:
        return SessionRestoration(new, self)

    def give_up(self, cause: AMQPError) -> None:
        for subs in self.subscriptions.values():
            for sub in subs:
                sub.end(cause)


@final
class SessionRestoration:
    """One attempt's restore of a :class:`LostSessions` on a new client: attach the sessions,
    then, once attached, the declarations and subscriptions, pipelined; done when all are
    complete. It takes no event itself (the client core routes them to its pendings): the
    adapter calls :meth:`handle` after each :meth:`ClientCore.process
    <amqp_sansio.v0_10.client.ClientCore.process>`, and it sends the next phase or raises why a
    step failed."""

    __slots__ = ("_attaching", "_client", "_lost", "_pending", "_sessions", "done")

    def __init__(self, client: ClientCore, lost: LostSessions) -> None:
        self._client = client
        self._lost = lost
        self._sessions: dict[int, ClientSession] = {}  # old channel -> new session
        self._attaching = True
        self._pending: list[Pending] = []
        self.done = False

    def __repr__(self) -> str:
        return f"<SessionRestoration {len(self._sessions)} of {len(self._lost.sessions)}>"

    @property
    def renamed(self) -> Mapping[str, str]:
        return {}

    @property
    def skipped(self) -> tuple[RecoveryStep, ...]:
        return ()

    def start(self) -> None:
        for channel, old in self._lost.sessions.items():
            name = old.name.split(b"~", 1)[0] + b"~" + uuid.uuid4().hex[:8].encode()
            session = self._client.attach(name)
            session.attached = pending = Pending()
            self._pending.append(pending)
            self._sessions[channel] = session
        if not self._lost.sessions:
            self.done = True

    def handle(self, event: object) -> bool:
        pending = self._pending
        for p in pending:
            if p.error is not None:
                raise p.error
        if not all(p.done for p in pending):
            return False
        if self._attaching:
            self._attaching = False
            self._restore()
            return False
        self.done = True
        return False

    def _restore(self) -> None:
        self._pending = pending = []
        sessions = self._sessions
        first = next(iter(sessions.values()))
        for command in self._lost.commands:
            p = Pending()
            first.execute(command, p)
            pending.append(p)
        for channel, subs in self._lost.subscriptions.items():
            session = sessions[channel]
            for sub in subs:
                p = Pending()
                session.resubscribe(sub, p)
                pending.append(p)
        if not pending:
            self.done = True

    def channels(self) -> Mapping[int, ClientSession]:
        return dict(self._sessions)

    def resume(self) -> tuple[int, int]:
        return 0, 0
