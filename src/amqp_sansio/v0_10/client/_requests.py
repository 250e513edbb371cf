"""The 0-10 session API declared once: each session method that executes one command is a
:class:`SessionRequest` in :data:`SESSION_REQUESTS` (the command class, the arguments, what it
returns, its docstring). ``tools/gen_channels.py`` writes each adapter's
``_generated_session.py`` from the table, as it writes the 0-9-1 channel methods from
:data:`amqp_sansio.client.REQUESTS`: ``await self.execute(QueueDeclare(...))`` in Trio and
asyncio, ``self.execute(QueueDeclare(...))`` in the blocking adapter. Transfers, subscriptions
and closing stay hand-written in each adapter.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Final, final

import attrs

from ...client._requests import Param
from .._generated.spec_0_10 import (
    ExchangeBind,
    ExchangeBound,
    ExchangeBoundResult,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeQuery,
    ExchangeQueryResult,
    ExchangeUnbind,
    QueueDeclare,
    QueueDelete,
    QueuePurge,
    QueueQuery,
    QueueQueryResult,
    TxCommit,
    TxRollback,
    TxSelect,
)

if TYPE_CHECKING:
    from .._types import Command, Struct

__all__ = ["SESSION_REQUESTS", "SessionRequest"]


@final
@attrs.frozen
class SessionRequest:
    """One session method that executes one command (with the sync bit) and returns its
    result: each adapter's method is generated from it."""

    #: The session method's name (``queue_declare``).
    name: str
    #: The command class it executes.
    command: type[Command]
    #: Its arguments, in signature order; each fills the command's field of its name.
    params: tuple[Param, ...]
    #: Its docstring.
    doc: str = attrs.field(converter=inspect.cleandoc)
    #: The command's result struct it returns; None: it returns nothing.
    result: type[Struct] | None = None


def _arg(name: str, annotation: str, default: object = inspect.Parameter.empty) -> Param:
    return Param(name, annotation, default)


def _kw(name: str, annotation: str, default: object) -> Param:
    return Param(name, annotation, default, keyword_only=True)


_ARGUMENTS: Final = _kw("arguments", "Map | None", None)

#: The session methods, in the order the adapters' generated methods appear.
SESSION_REQUESTS: Final[tuple[SessionRequest, ...]] = (
    SessionRequest(
        "exchange_declare",
        ExchangeDeclare,
        (
            _arg("exchange", "str"),
            _arg("type", "str", "direct"),
            _kw("alternate_exchange", "str | None", None),
            _kw("passive", "bool", False),
            _kw("durable", "bool", False),
            _kw("auto_delete", "bool", False),
            _ARGUMENTS,
        ),
        """``exchange.declare``: create the exchange unless it exists, else check that it has
        this type (``passive``: only check that it exists).""",
    ),
    SessionRequest(
        "exchange_delete",
        ExchangeDelete,
        (_arg("exchange", "str"), _kw("if_unused", "bool", False)),
        """``exchange.delete`` (``if_unused``: only while nothing is bound to it).""",
    ),
    SessionRequest(
        "exchange_query",
        ExchangeQuery,
        (_arg("name", "str"),),
        """``exchange.query``: the exchange's type, durability and arguments (``not_found``
        set when there is none).""",
        ExchangeQueryResult,
    ),
    SessionRequest(
        "exchange_bind",
        ExchangeBind,
        (
            _arg("queue", "str"),
            _arg("exchange", "str"),
            _arg("binding_key", "str", ""),
            _arg("arguments", "Map | None", None),
        ),
        """``exchange.bind``: bind *queue* to *exchange* (0-10 binds queues with the
        exchange class).""",
    ),
    SessionRequest(
        "exchange_unbind",
        ExchangeUnbind,
        (_arg("queue", "str"), _arg("exchange", "str"), _arg("binding_key", "str", "")),
        """``exchange.unbind``: remove the binding of *queue* to *exchange*.""",
    ),
    SessionRequest(
        "exchange_bound",
        ExchangeBound,
        (
            _arg("exchange", "str", ""),
            _arg("queue", "str | None", None),
            _arg("binding_key", "str | None", None),
            _arg("arguments", "Map | None", None),
        ),
        """``exchange.bound``: whether such a binding exists (each ``*_not_found`` or
        ``*_not_matched`` flag of the result says what is missing).""",
        ExchangeBoundResult,
    ),
    SessionRequest(
        "queue_declare",
        QueueDeclare,
        (
            _arg("queue", "str"),
            _kw("alternate_exchange", "str | None", None),
            _kw("passive", "bool", False),
            _kw("durable", "bool", False),
            _kw("exclusive", "bool", False),
            _kw("auto_delete", "bool", False),
            _ARGUMENTS,
        ),
        """``queue.declare``: create the queue unless it exists (``passive``: only check that
        it exists; 0-10 has no server-named queues).""",
    ),
    SessionRequest(
        "queue_delete",
        QueueDelete,
        (_arg("queue", "str"), _kw("if_unused", "bool", False), _kw("if_empty", "bool", False)),
        """``queue.delete`` (``if_unused``: only without subscribers; ``if_empty``: only
        without messages).""",
    ),
    SessionRequest(
        "queue_purge",
        QueuePurge,
        (_arg("queue", "str"),),
        """``queue.purge``: remove the queue's messages (its subscriptions stay).""",
    ),
    SessionRequest(
        "queue_query",
        QueueQuery,
        (_arg("queue", "str"),),
        """``queue.query``: the queue's settings and its message and subscriber counts.""",
        QueueQueryResult,
    ),
    SessionRequest(
        "tx_select",
        TxSelect,
        (),
        """``tx.select``: from now on the session's transfers and accepts are transactional.""",
    ),
    SessionRequest(
        "tx_commit",
        TxCommit,
        (),
        """``tx.commit``: make the transaction's transfers and accepts take effect.""",
    ),
    SessionRequest(
        "tx_rollback",
        TxRollback,
        (),
        """``tx.rollback``: drop the transaction's transfers and accepts.""",
    ),
)
