"""The connection and channel state machines, as data.

Rule 1 (after h11): everything that decides whether a method is legal, which state it leads to
and what the machine does besides moving (its :class:`Effect`) lives in this file, and so do the
sets derived from that: which sends and receipts may take a fast path, which requests a reply may
overtake. Rule 2: this file does not know which role *we* play. Every table is keyed by the role
that **sends** the method, so our sends and the peer's frames are checked by the same entries: a
client core refuses to send what a server core would reject on receipt, and vice versa.

Rule 3: the tables are keyed by what a method **means** (its spec name, ``"connection.close"``),
never by one version's classes. A :class:`~amqp_sansio._protocol.ProtocolSpec` says how each
meaning is numbered and encoded in its version; :func:`compile_tables` turns the meanings into
that version's classes once, so lookups on the hot path stay keyed by class identity.

States are shared views of the conversation (both cores move through the same states for the
same bytes). The close handshakes need to know who started them, so the closing states name
the role that sent ``close`` (``CLIENT_CLOSING``/``SERVER_CLOSING``), which keeps the tables
role-agnostic.

A missing entry means "illegal": :class:`LocalProtocolError` for our sends (checked before
anything is encoded), a 503/504 connection error for received methods, except that a peer's
methods crossing our ``close`` are discarded (:func:`discards`).
"""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING, Final, NamedTuple, TypeAlias, final

from ._generated.reply_codes import ReplyCode
from ._method import Role

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._method import Method
    from ._protocol import ProtocolSpec

__all__ = [
    "CHANNEL_LIFECYCLE",
    "CONNECTION_TRANSITIONS",
    "OVERTAKABLE_REQUESTS",
    "RECORDED",
    "TAGGED_REPLIES",
    "ChannelState",
    "ChannelTransition",
    "CompiledTables",
    "ConnectionState",
    "Effect",
    "Input",
    "Transition",
    "channel_transitions",
    "closing_state",
    "compile_tables",
    "discards",
    "refusal_code",
]

_CLIENT: Final = Role.CLIENT
_SERVER: Final = Role.SERVER


class ConnectionState(enum.Enum):
    """Where the connection (channel 0) is; named after whose move it is."""

    # Members are singletons compared by identity: the C identity hash keeps the per-frame
    # transition lookups off enum's Python-level __hash__ (hash of the name).
    __hash__ = object.__hash__

    AWAIT_HEADER = "AWAIT_HEADER"  # the client's protocol header
    AWAIT_START = "AWAIT_START"  # the server's connection.start
    AWAIT_START_OK = "AWAIT_START_OK"
    AWAIT_TUNE = "AWAIT_TUNE"  # the server decides: secure, tune, or close (refused)
    AWAIT_SECURE_OK = "AWAIT_SECURE_OK"
    AWAIT_TUNE_OK = "AWAIT_TUNE_OK"
    AWAIT_OPEN = "AWAIT_OPEN"
    AWAIT_OPEN_OK = "AWAIT_OPEN_OK"  # the server decides: open-ok or close (refused)
    OPEN = "OPEN"
    CLIENT_CLOSING = "CLIENT_CLOSING"  # the client sent connection.close
    SERVER_CLOSING = "SERVER_CLOSING"  # the server sent connection.close
    CLOSED = "CLOSED"
    ERROR = "ERROR"


class ChannelState(enum.Enum):
    """Where one channel is. A channel id not in use is ``CLOSED``."""

    __hash__ = object.__hash__  # see ConnectionState

    CLOSED = "CLOSED"
    OPENING = "OPENING"  # channel.open sent, open-ok not yet
    OPEN = "OPEN"
    CLIENT_CLOSING = "CLIENT_CLOSING"
    SERVER_CLOSING = "SERVER_CLOSING"


class Input(enum.Enum):
    """Inputs that are not methods."""

    __hash__ = object.__hash__  # see ConnectionState

    PROTOCOL_HEADER = "PROTOCOL_HEADER"
    #: The server refuses a login without a word, then closes the socket (0-9-1's rule and
    #: RabbitMQ's, for a client that does not advertise ``authentication_failure_close``).
    SILENT_REFUSAL = "SILENT_REFUSAL"


class Effect(enum.Enum):
    """What a machine does with a method besides moving to the next state.

    The connection shell and the channel machine each map the effects they meet to one handler;
    a row names the effect of the method's receipt and of its sending.
    """

    __hash__ = object.__hash__  # see ConnectionState

    NONE = "none"  #: nothing beyond the request FIFO
    # channel 0, received
    START = "start"  #: client: answer start-ok from the config
    START_OK = "start-ok"  #: server: ask the application (start-ok, secure-ok)
    SECURE = "secure"  #: client: hand the challenge to the application
    TUNE = "tune"  #: client: answer tune-ok and open
    TUNE_OK = "tune-ok"  #: server: check the client's limits
    OPEN = "open"  #: server: ask the application about the virtual host
    OPEN_OK = "open-ok"  #: client: the connection is open
    REDIRECT = "redirect"  #: client (0-8, 0-9): connect elsewhere; the connection is over
    CLOSE = "close"  #: answer close-ok; closed unless the closes crossed
    CLOSE_OK = "close-ok"  #: our close was answered
    BLOCKED = "blocked"  #: connection.blocked
    UNBLOCKED = "unblocked"  #: connection.unblocked
    # channels, received
    CHANNEL_OPEN = "channel-open"  #: server: answer open-ok
    CHANNEL_OPEN_OK = "channel-open-ok"  #: client: the channel is open
    FLOW = "flow"  #: answer flow-ok, in order behind the replies the application owes
    CONSUMER_CANCELLED = "consumer-cancelled"  #: client: the server cancelled a consumer
    CONFIRM = "confirm"  #: client: a publisher confirm (ack or nack)
    CONFIRMS_SELECTED = "confirms-selected"  #: confirm.select: publishes are numbered now
    DELIVERY = "delivery"  #: content that answers nothing and is never confirmed
    CONTENT_REPLY = "content-reply"  #: content that answers a request (get-ok)
    PUBLISH = "publish"  #: server: a publish, numbered when confirms are on
    RETURN = "return"  #: client: a returned publish, tied to its confirm
    # sent
    CLOSE_SENT = "close-sent"  #: remember our close for the closed event
    SETTLE_PUBLISHES = "settle-publishes"  #: server: an ack or nack must settle publishes
    RECORD = "record"  #: client: a topology change, recorded when it succeeded


class Transition(NamedTuple):
    """One row of the connection table: the state a method leads to, and its effects when
    received and when sent."""

    next: ConnectionState
    received: Effect = Effect.NONE
    sent: Effect = Effect.NONE


class ChannelTransition(NamedTuple):
    """One row of a channel table (see :class:`Transition`)."""

    next: ChannelState
    received: Effect = Effect.NONE
    sent: Effect = Effect.NONE


_Key: TypeAlias = "str | Input"
_ConnRows: TypeAlias = "dict[ConnectionState, dict[_Key, Transition]]"
_ChanRows: TypeAlias = "dict[ChannelState, dict[str, ChannelTransition]]"

_C = ConnectionState
_H = ChannelState
_E = Effect

# --- What methods mean ------------------------------------------------------------------------

#: Requests whose success changes the topology a client records for recovery.
RECORDED: Final = frozenset(
    (
        "exchange.declare",
        "exchange.delete",
        "exchange.bind",
        "exchange.unbind",
        "queue.declare",
        "queue.delete",
        "queue.bind",
        "queue.unbind",
        "basic.consume",
        "basic.cancel",
        "basic.qos",
    )
)

#: RabbitMQ answers basic.consume and basic.cancel from the queue's process, so other replies
#: may overtake those requests (seen on 3.10.8: declare-ok before the consume-ok of a consume
#: sent first). A reply may skip outstanding requests of these meanings; any other disorder is
#: a 503.
OVERTAKABLE_REQUESTS: Final = frozenset(("basic.consume", "basic.cancel"))
#: Replies that name their request by consumer tag (an empty tag in the request matches any).
TAGGED_REPLIES: Final = frozenset(("basic.consume-ok", "basic.cancel-ok"))

#: A channel's own opening and closing: the channel table's rows for them are written out below;
#: every other method of a channel class follows the "work" rows.
CHANNEL_LIFECYCLE: Final = frozenset(
    ("channel.open", "channel.open-ok", "channel.close", "channel.close-ok")
)

# --- Connection (channel 0) -------------------------------------------------------------------

#: What each role may send on channel 0 once the connection is open, besides close (RabbitMQ's
#: extensions; either side may say it is blocked).
_OPEN_CHANNEL0: Final = {
    _SERVER: {
        "connection.blocked": _E.BLOCKED,
        "connection.unblocked": _E.UNBLOCKED,
        "connection.update-secret-ok": _E.NONE,
    },
    _CLIENT: {
        "connection.blocked": _E.BLOCKED,
        "connection.unblocked": _E.UNBLOCKED,
        "connection.update-secret": _E.NONE,
    },
}

# After the start method both sides may close; before it there is nobody to answer a close.
_NEGOTIATING: Final = (
    _C.AWAIT_START_OK,
    _C.AWAIT_TUNE,
    _C.AWAIT_SECURE_OK,
    _C.AWAIT_TUNE_OK,
    _C.AWAIT_OPEN,
    _C.AWAIT_OPEN_OK,
)

_CLOSE: Final = "connection.close"
_CLOSE_OK: Final = "connection.close-ok"


def _connection_table() -> dict[Role, _ConnRows]:
    table: dict[Role, _ConnRows] = {}
    for role, mine, theirs in (
        (_CLIENT, _C.CLIENT_CLOSING, _C.SERVER_CLOSING),
        (_SERVER, _C.SERVER_CLOSING, _C.CLIENT_CLOSING),
    ):
        close = Transition(mine, _E.CLOSE, _E.CLOSE_SENT)
        rows: _ConnRows = {state: {} for state in _C}
        for state in _NEGOTIATING:
            rows[state][_CLOSE] = close
        rows[_C.OPEN] = {
            _CLOSE: close,
            **{name: Transition(_C.OPEN, effect) for name, effect in _OPEN_CHANNEL0[role].items()},
        }
        # A close crossing ours: answered with close-ok while we keep waiting for ours.
        rows[mine] = {_CLOSE_OK: Transition(mine)}
        rows[theirs] = {
            _CLOSE_OK: Transition(_C.CLOSED, _E.CLOSE_OK),
            _CLOSE: Transition(theirs, _E.CLOSE, _E.CLOSE_SENT),
        }
        table[role] = rows
    client, server = table[_CLIENT], table[_SERVER]
    client[_C.AWAIT_HEADER][Input.PROTOCOL_HEADER] = Transition(_C.AWAIT_START)
    server[_C.AWAIT_START]["connection.start"] = Transition(_C.AWAIT_START_OK, _E.START)
    client[_C.AWAIT_START_OK]["connection.start-ok"] = Transition(_C.AWAIT_TUNE, _E.START_OK)
    server[_C.AWAIT_TUNE]["connection.secure"] = Transition(_C.AWAIT_SECURE_OK, _E.SECURE)
    server[_C.AWAIT_TUNE]["connection.tune"] = Transition(_C.AWAIT_TUNE_OK, _E.TUNE)
    client[_C.AWAIT_SECURE_OK]["connection.secure-ok"] = Transition(_C.AWAIT_TUNE, _E.START_OK)
    client[_C.AWAIT_TUNE_OK]["connection.tune-ok"] = Transition(_C.AWAIT_OPEN, _E.TUNE_OK)
    client[_C.AWAIT_OPEN]["connection.open"] = Transition(_C.AWAIT_OPEN_OK, _E.OPEN)
    server[_C.AWAIT_OPEN_OK]["connection.open-ok"] = Transition(_C.OPEN, _E.OPEN_OK)
    # A refused login that gets no close: the connection is over, nothing follows.
    server[_C.AWAIT_TUNE][Input.SILENT_REFUSAL] = Transition(_C.CLOSED)
    # 0-8 and 0-9: the server may send the client elsewhere instead; nothing follows.
    server[_C.AWAIT_OPEN_OK]["connection.redirect"] = Transition(_C.CLOSED, _E.REDIRECT)
    return table


#: ``CONNECTION_TRANSITIONS[sender][state][meaning] -> Transition``; total over states.
CONNECTION_TRANSITIONS: Final = _connection_table()

# --- Channels ---------------------------------------------------------------------------------

#: Effects of channel methods other than the lifecycle, by the role that sends them. The rest
#: of a version's channel methods are plain work (Effect.NONE both ways).
_CHANNEL_EFFECTS: Final[dict[Role, dict[str, tuple[Effect, Effect]]]] = {
    # meaning: (effect when the peer receives it, effect when this role sends it)
    _CLIENT: {
        "channel.flow": (_E.FLOW, _E.NONE),
        "confirm.select": (_E.CONFIRMS_SELECTED, _E.CONFIRMS_SELECTED),
        "basic.publish": (_E.PUBLISH, _E.NONE),
        **dict.fromkeys(RECORDED, (_E.NONE, _E.RECORD)),
    },
    _SERVER: {
        "channel.flow": (_E.FLOW, _E.NONE),
        "basic.cancel": (_E.CONSUMER_CANCELLED, _E.NONE),
        "basic.ack": (_E.CONFIRM, _E.SETTLE_PUBLISHES),
        "basic.nack": (_E.CONFIRM, _E.SETTLE_PUBLISHES),
        "basic.deliver": (_E.DELIVERY, _E.NONE),
        "basic.get-ok": (_E.CONTENT_REPLY, _E.NONE),
        "basic.return": (_E.RETURN, _E.NONE),
    },
}


def channel_transitions(methods: Iterable[type[Method]]) -> dict[Role, _ChanRows]:
    """``[sender][state][meaning] -> Transition`` for a version's *methods*; total over states.

    The lifecycle rows are the same in every version; the "work" rows hold every method of a
    class other than connection (10) that the role may send, per the version's ``<chassis>``.
    Whether work is in order (replies, content) is checked by the request FIFO and the content
    assembler, not here.
    """
    methods = tuple(methods)
    replies = frozenset(reply.NAME for cls in methods for reply in cls.RESPONSES)
    table: dict[Role, _ChanRows] = {}
    for role, mine, theirs in (
        (_CLIENT, _H.CLIENT_CLOSING, _H.SERVER_CLOSING),
        (_SERVER, _H.SERVER_CLOSING, _H.CLIENT_CLOSING),
    ):
        effects = _CHANNEL_EFFECTS[role]
        work = {
            cls.NAME: ChannelTransition(
                _H.OPEN, *effects.get(cls.NAME, (_content_effect(cls, replies), _E.NONE))
            )
            for cls in methods
            if cls.CLASS_ID != 10 and cls.NAME not in CHANNEL_LIFECYCLE and role in cls.SENT_BY
        }
        rows: _ChanRows = {state: {} for state in _H}
        rows[_H.OPEN] = {**work, "channel.close": ChannelTransition(mine, _E.CLOSE, _E.CLOSE_SENT)}
        rows[mine] = {"channel.close-ok": ChannelTransition(mine)}
        rows[theirs] = {
            "channel.close-ok": ChannelTransition(_H.CLOSED, _E.CLOSE_OK),
            "channel.close": ChannelTransition(theirs, _E.CLOSE, _E.CLOSE_SENT),
        }
        table[role] = rows
    client, server = table[_CLIENT], table[_SERVER]
    client[_H.CLOSED]["channel.open"] = ChannelTransition(_H.OPENING, _E.CHANNEL_OPEN)
    # The client may pipeline work behind channel.open: the server handles frames in order.
    client[_H.OPENING] = {
        **{name: row._replace(next=_H.OPENING) for name, row in client[_H.OPEN].items()},
        "channel.close": ChannelTransition(_H.CLIENT_CLOSING, _E.CLOSE, _E.CLOSE_SENT),
    }
    server[_H.OPENING] = {
        "channel.open-ok": ChannelTransition(_H.OPEN, _E.CHANNEL_OPEN_OK),
        "channel.close": ChannelTransition(_H.SERVER_CLOSING, _E.CLOSE, _E.CLOSE_SENT),
    }
    return table


def _content_effect(cls: type[Method], replies: frozenset[str]) -> Effect:
    # Content methods of other classes (0-8/0-9 file and stream deliveries, file.stage, 0-8's
    # test.content) are assembled like basic.deliver, or like basic.get-ok where they answer a
    # request (file.stage answers file.open-ok, test.content-ok answers test.content); a
    # method without content just passes through.
    if not cls.HAS_CONTENT:
        return _E.NONE
    return _E.CONTENT_REPLY if cls.NAME in replies else _E.DELIVERY


def closing_state(role: Role) -> tuple[ConnectionState, ChannelState]:
    """The connection and channel states in which *role* has sent ``close``."""
    if role is _CLIENT:
        return _C.CLIENT_CLOSING, _H.CLIENT_CLOSING
    return _C.SERVER_CLOSING, _H.SERVER_CLOSING


def discards(state: ConnectionState | ChannelState, receiver: Role) -> bool:
    """Whether *receiver* silently drops a method the tables refuse in *state*.

    After sending ``close`` a peer discards everything but ``close`` and ``close-ok`` (spec,
    connection.close and channel.close rules): those methods crossed our close on the wire.
    """
    return state in closing_state(receiver)


def refusal_code(state: ChannelState, meaning: str) -> ReplyCode:
    """The reply code for a method the channel table refuses in *state*.

    504 CHANNEL_ERROR for anything on a channel that is not open and for a second
    ``channel.open`` (RabbitMQ: "second 'channel.open' seen"); 503 COMMAND_INVALID otherwise.
    """
    if state is ChannelState.CLOSED or meaning == "channel.open":
        return ReplyCode.CHANNEL_ERROR
    return ReplyCode.COMMAND_INVALID


# --- One version's tables, by class ----------------------------------------------------------

_Rows: TypeAlias = "dict[ChannelState, dict[type[Method], ChannelTransition]]"
_Rows0: TypeAlias = "dict[ConnectionState, dict[type[Method] | Input, Transition]]"


@final
class CompiledTables:
    """The tables of one version for one role, keyed by that version's classes, and the sets
    derived from them. Made once per (version, role) by :func:`compile_tables`."""

    __slots__ = (
        "channel_receive",
        "channel_send",
        "connection_receive",
        "connection_send",
        "fast_publish",
        "fast_receipts",
        "fast_sends",
        "overtakable",
        "recorded",
        "replies",
        "tagged",
    )

    def __init__(self, spec: ProtocolSpec, role: Role) -> None:
        by_meaning = spec.by_meaning
        peer = role.peer
        channel = channel_transitions(spec.methods.values())
        #: Our sends on channel 0: ``[state][class]``.
        self.connection_send: Final = _by_class(CONNECTION_TRANSITIONS[role], by_meaning)
        #: The peer's methods on channel 0.
        self.connection_receive: Final = _by_class(CONNECTION_TRANSITIONS[peer], by_meaning)
        self.channel_send: Final[_Rows] = {
            state: {by_meaning[name]: row for name, row in rows.items()}
            for state, rows in channel[role].items()
        }
        self.channel_receive: Final[_Rows] = {
            state: {by_meaning[name]: row for name, row in rows.items()}
            for state, rows in channel[peer].items()
        }
        #: Every method that answers a request.
        self.replies: Final = frozenset(
            reply for cls in spec.methods.values() for reply in cls.RESPONSES
        )
        self.overtakable: Final = _classes(by_meaning, OVERTAKABLE_REQUESTS)
        self.tagged: Final = _classes(by_meaning, TAGGED_REPLIES)
        #: Client role: requests that change the recorded topology.
        self.recorded: Final = _classes(by_meaning, RECORDED) if role is _CLIENT else frozenset()
        open_send = self.channel_send[_H.OPEN]
        #: A consumer's settlements this role may send on an open channel with no check but the
        #: channel's state (send_method's fast path: one struct pack).
        self.fast_sends: Final = frozenset(
            cls
            for name in ("basic.ack", "basic.nack", "basic.reject")
            if (cls := by_meaning.get(name)) is not None and self._plain(spec, cls, open_send)
        )
        publish = by_meaning.get("basic.publish")
        #: Whether publish() may take the fast path (encode_publish) on an open channel.
        self.fast_publish: Final = (
            publish is not None
            and self._plain(spec, publish, open_send)
            and publish not in self.recorded
            and spec.table_types is None  # encode_publish does not narrow headers
        )
        deliver = by_meaning.get("basic.deliver")
        row = None if deliver is None else self.channel_receive[_H.OPEN].get(deliver)
        #: Deliveries, where the peer may send them on an open channel and they only start
        #: content (the fast path of the channel dispatch).
        self.fast_receipts: Final = frozenset(
            () if row is None or row.next is not _H.OPEN or row.received is not _E.DELIVERY
            else (deliver,)
        )  # fmt: skip

    def _plain(
        self, spec: ProtocolSpec, cls: type[Method], rows: Mapping[type[Method], ChannelTransition]
    ) -> bool:
        """Whether *cls* leaves an open channel open, does nothing more, answers and expects
        nothing, and goes on the wire as its class encodes it: a fast path needs no more."""
        row = rows.get(cls)
        return (
            row is not None
            and row.next is _H.OPEN
            and row.sent is _E.NONE
            and cls not in self.replies
            and not cls.RESPONSES
            and cls not in spec.wire_ids
        )


def _by_class(
    table: Mapping[ConnectionState, Mapping[_Key, Transition]],
    by_meaning: Mapping[str, type[Method]],
) -> _Rows0:
    """Connection rows keyed by one version's classes; a meaning the version lacks has no row."""
    return {
        state: {
            (key if isinstance(key, Input) else by_meaning[key]): row
            for key, row in rows.items()
            if isinstance(key, Input) or key in by_meaning
        }
        for state, rows in table.items()
    }


def _classes(
    by_meaning: Mapping[str, type[Method]], names: Iterable[str]
) -> frozenset[type[Method]]:
    return frozenset(by_meaning[name] for name in names if name in by_meaning)


@functools.cache
def compile_tables(spec: ProtocolSpec, role: Role) -> CompiledTables:
    """The tables of *spec* for *role*, made once."""
    return CompiledTables(spec, role)
