"""The channel API declared once, and the argument checks and reply readers the adapters share.

Each channel method that sends one request is a :class:`Request` in :data:`REQUESTS`: the method
class it sends, its arguments (names, types, defaults, the field each fills), what it returns and
how the reply is read, and its docstring. ``tools/gen_channels.py`` writes each adapter's
``_generated_channel.py`` from the table (``await self._call(QueueDeclare(...))`` in Trio and
asyncio, ``self._call(QueueDeclare(...), timeout)`` in the blocking adapter, which adds a
``timeout`` to every request with a reply), so the three adapters offer the same methods with
the same signatures. What differs by adapter stays hand-written beside them: publishing and
consuming, the publisher, closing.

Field values are checked where they are encoded (``Connection.send_method`` raises
``LocalProtocolError`` naming the field), so the helpers here check only what the core cannot
know: the adapters' own arguments (consumer tags, buffer sizes, publisher windows).
"""

from __future__ import annotations

import inspect
import random
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal, Protocol, TypeAlias, TypeVar, cast, final

import attrs

from .. import (
    AMQP_0_8,
    AMQP_0_9,
    AMQP_0_9_1,
    BasicAck,
    BasicCancel,
    BasicGet,
    BasicGetEmpty,
    BasicNack,
    BasicQos,
    BasicRecover,
    BasicReject,
    ChannelFlow,
    ChannelFlowOk,
    ConfirmSelect,
    ExchangeBind,
    ExchangeDeclare,
    ExchangeDelete,
    ExchangeUnbind,
    ProtocolVersion,
    QueueBind,
    QueueDeclare,
    QueueDeclareOk,
    QueueDelete,
    QueueDeleteOk,
    QueuePurge,
    QueuePurgeOk,
    QueueUnbind,
    TxCommit,
    TxRollback,
    TxSelect,
)
from ._errors import ConnectionLostError, ConnectionTimeoutError
from ._params import ConnectionParameters
from ._versions import client_protocol

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable, Container, Mapping

    from .. import Method

__all__ = [
    "DEFAULT_CONSUMER_BUFFER",
    "ENDPOINT_ERRORS",
    "REQUESTS",
    "EndpointResolver",
    "Endpoints",
    "Param",
    "Request",
    "check_window",
    "connection_parameters",
    "consumer_buffer_size",
    "consumer_tag",
    "declared_queue",
    "endpoint_parameters",
    "flow_state",
    "got_message",
    "message_count",
    "report_dropped",
]

#: A consumer's buffer when the channel has no prefetch count and none was given.
DEFAULT_CONSUMER_BUFFER: Final = 1000

_M = TypeVar("_M")


def connection_parameters(
    url_or_params: str | ConnectionParameters,
    connection_name: str | None,
    protocol: str | ProtocolVersion | None = None,
) -> ConnectionParameters:
    """What ``connect(url_or_params, connection_name=..., protocol=...)`` connects with: a
    *connection_name* or *protocol* given wins over the URL's or the parameters'.

    :raises TypeError: *url_or_params* is neither a URL nor :class:`ConnectionParameters`.
    :raises ValueError: the URL is malformed (see :meth:`ConnectionParameters.from_url`), or
        *protocol* is not a version the adapters speak.
    """
    if isinstance(url_or_params, ConnectionParameters):
        params = url_or_params
    elif isinstance(url_or_params, str):
        params = ConnectionParameters.from_url(url_or_params)
    else:
        raise TypeError(
            "url_or_params must be an AMQP URL or ConnectionParameters, not "
            f"{type(url_or_params).__name__}"
        )
    if connection_name is not None:
        params = attrs.evolve(params, connection_name=connection_name)
    if protocol is not None:
        params = attrs.evolve(params, protocol=client_protocol(protocol))
    return params


#: Called for the endpoints to walk, by ``connect()`` and again at the start of every round of
#: recovery attempts (as the Java client's ``AddressResolver``): for users who discover the
#: nodes (DNS, a service registry). It runs in the connection's I/O path: keep it quick.
EndpointResolver: TypeAlias = "Callable[[], Sequence[str | ConnectionParameters]]"

#: What ``connect()`` takes: one endpoint (a URL or parameters), several, walked in turn, or an
#: :data:`EndpointResolver` that gives them.
Endpoints: TypeAlias = (
    "str | ConnectionParameters | Sequence[str | ConnectionParameters] | EndpointResolver"
)


def endpoint_parameters(
    endpoints: Endpoints,
    connection_name: str | None,
    protocol: str | ProtocolVersion | None = None,
    *,
    order: Literal["in_order", "shuffled"] = "in_order",
    rng: random.Random | None = None,
) -> tuple[ConnectionParameters, ...]:
    """The endpoints ``connect(endpoints, ...)`` walks, each as :func:`connection_parameters`
    gives it, in *order* (``"shuffled"``: a random order drawn from *rng*).

    A resolver is called once, here.

    :raises TypeError: an endpoint is neither a URL nor :class:`ConnectionParameters`.
    :raises ValueError: no endpoint, or a malformed URL (its message names it).
    """
    if isinstance(endpoints, (str, ConnectionParameters)):
        return (connection_parameters(endpoints, connection_name, protocol),)
    if callable(endpoints):
        resolved = endpoints()
        if isinstance(resolved, (str, ConnectionParameters)):
            raise TypeError(
                "an endpoint resolver returns a sequence of URLs or ConnectionParameters, "
                f"not one {type(resolved).__name__}"
            )
        endpoints = resolved
    if not isinstance(endpoints, Sequence):
        raise TypeError(
            "url_or_params must be an AMQP URL, ConnectionParameters, a sequence of them or "
            "a callable that returns one, "
            f"not {type(endpoints).__name__}"
        )
    found = [connection_parameters(each, connection_name, protocol) for each in endpoints]
    if not found:
        raise ValueError("url_or_params: an empty sequence names no endpoint")
    if order == "shuffled":
        (rng or random.Random()).shuffle(found)
    return tuple(found)


#: What a failed connect to one endpoint raises before the next is tried (the node is down,
#: unreachable or slow); a refused login or a protocol mismatch ends the walk at once.
ENDPOINT_ERRORS: Final = (OSError, ConnectionTimeoutError, ConnectionLostError)


def consumer_tag(requested: str, prefix: str, in_use: Container[str]) -> str:
    """The tag for a new consumer: *requested*, or ``prefix.<random hex>`` when it is empty.

    :raises ValueError: the tag is already in use on the channel (*in_use*).
    """
    tag = requested or f"{prefix}.{uuid.uuid4().hex}"
    if tag in in_use:
        raise ValueError(f"consumer tag {tag!r} is already in use on this channel")
    return tag


def consumer_buffer_size(buffer_size: int | None, prefetch_count: int) -> int:
    """A consumer's buffer: *buffer_size* when given, else the channel's prefetch count, else
    :data:`DEFAULT_CONSUMER_BUFFER` (also for a size below 1)."""
    size = buffer_size if buffer_size is not None else prefetch_count
    return size if size > 0 else DEFAULT_CONSUMER_BUFFER


def check_window(window: int) -> int:
    """A publisher's window of unconfirmed publishes.

    :raises ValueError: *window* is not a positive int.
    """
    if type(window) is not int or window < 1:
        raise ValueError(f"window must be a positive int, not {window!r}")
    return window


def report_dropped(
    logger: logging.Logger, tag: str, dropped: int, *, no_ack: bool, channel: int
) -> None:
    """Log the deliveries a stopped consumer never handed out (nothing when none)."""
    if not dropped:
        return
    if no_ack:
        logger.warning(
            "consumer %s stopped with %d no-ack deliveries not handed out; they are lost",
            tag,
            dropped,
        )
    else:
        logger.info(
            "consumer %s stopped with %d deliveries not handed out; they stay "
            "unacknowledged and are redelivered when channel %d closes",
            tag,
            dropped,
            channel,
        )


# --- replies ----------------------------------------------------------------------------------


def _unexpected(expected: str, reply: object) -> AssertionError:
    # The core matched the reply to the request, so this is a bug, never the peer's doing.
    return AssertionError(f"expected {expected}, got {reply!r}")


def declared_queue(reply: object) -> QueueDeclareOk:
    """The reply to ``queue.declare``: the queue's name and counts."""
    if type(reply) is not QueueDeclareOk:
        raise _unexpected("queue.declare-ok", reply)
    return reply


def message_count(reply: object) -> int:
    """The message count of a ``queue.purge-ok`` or ``queue.delete-ok``."""
    if type(reply) is QueuePurgeOk or type(reply) is QueueDeleteOk:
        return reply.message_count
    raise _unexpected("queue.purge-ok or queue.delete-ok", reply)


def flow_state(reply: object) -> bool:
    """The state a ``channel.flow-ok`` confirms."""
    if type(reply) is not ChannelFlowOk:
        raise _unexpected("channel.flow-ok", reply)
    return reply.active


def got_message(reply: Method | _M | None, message_type: type[_M]) -> _M | None:
    """The reply to ``basic.get``: None for ``basic.get-empty``, else the message as the
    adapter's router handed it over (a *message_type*)."""
    if type(reply) is BasicGetEmpty:
        return None
    if isinstance(reply, message_type):
        return reply
    raise _unexpected(f"basic.get-empty or a {message_type.__name__}", reply)


# --- the table --------------------------------------------------------------------------------

#: The versions the adapters' channel methods speak.
_VERSIONS: Final = (AMQP_0_9_1, AMQP_0_9, AMQP_0_8)

#: What :attr:`Param.default` holds for an argument without a default.
_REQUIRED: Final = inspect.Parameter.empty


@final
@attrs.frozen
class Param:
    """One argument of a channel method."""

    #: Its name in the channel method.
    name: str
    #: Its type as the signature spells it: builtins, names public in :mod:`amqp_sansio`, and
    #: ``Message`` (the adapter's own).
    annotation: str
    #: Its default; ``inspect.Parameter.empty`` for a required argument.
    default: object = _REQUIRED
    #: Whether it is keyword-only (after ``*``).
    keyword_only: bool = False
    #: The field of the request it fills (None: the field of the same name).
    field: str | None = None
    #: A field table the caller may leave None: the request carries an empty table then.
    table: bool = False

    @property
    def required(self) -> bool:
        """Whether the argument has no default."""
        return self.default is _REQUIRED

    @property
    def target(self) -> str:
        """The request's field it fills."""
        return self.name if self.field is None else self.field


class _Build(Protocol):
    """A method class called with its fields by name."""

    def __call__(self, **fields: object) -> Method: ...


def _clean_docs(docs: Mapping[str, str]) -> dict[str, str]:
    return {adapter: inspect.cleandoc(doc) for adapter, doc in docs.items()}


@final
@attrs.frozen
class Request:
    """One channel method that sends one request, as data: each adapter's method is generated
    from it. Calling it builds the request from the method's arguments, as the generated code
    does (``REQUESTS[i]("q", durable=True)``)."""

    #: The channel method's name (``queue_declare``).
    name: str
    #: The method class it sends.
    method: type[Method]
    #: Its arguments, in signature order (the blocking adapter adds ``timeout`` to requests
    #: with a reply).
    params: tuple[Param, ...]
    #: Its docstring.
    doc: str = attrs.field(converter=inspect.cleandoc)
    #: What it returns, as the signature spells it.
    returns: str = "None"
    #: The function of :mod:`amqp_sansio.client` that reads the reply into the return value;
    #: None when the method returns nothing (or :attr:`adapt` does).
    reader: Callable[[object], object] | None = None
    #: The channel's own hook that turns the reply into the return value, where the
    #: adapter's types are involved (``_got_message`` makes the adapter's ``Message``).
    adapt: str | None = None
    #: A :class:`~amqp_sansio.client.ChannelBook` flag that, once set, makes the call only
    #: check that the channel is open (``confirm_mode``: confirm.select is sent once).
    once: str | None = None
    #: The docstring of adapters that say it their own way, by package name.
    docs: Mapping[str, str] = attrs.field(factory=dict, converter=_clean_docs)

    @property
    def expects_reply(self) -> bool:
        """Whether the broker answers the request in 0-9-1 (then the adapter's method waits, and
        the blocking adapter's takes a ``timeout``); :attr:`no_reply_in` names the versions
        where it does not."""
        return bool(self.method.RESPONSES)

    @property
    def no_reply_in(self) -> tuple[ProtocolVersion, ...]:
        """The versions that have the request's method but no reply to it (0-9's
        ``basic.recover``): there the adapter's method sends it and returns at once, since
        waiting would never end. Empty for most requests."""
        if not self.expects_reply:
            return ()
        meaning = self.method.NAME
        return tuple(
            spec.version
            for spec in _VERSIONS
            if meaning in spec.by_meaning and not spec.has_reply(meaning)
        )

    def doc_for(self, adapter: str) -> str:
        """The docstring of *adapter*'s method (``amqp_trio``, ...)."""
        return self.docs.get(adapter, self.doc)

    def __call__(self, *args: object, **kwargs: object) -> Method:
        """The request the channel method sends for these arguments.

        :raises TypeError: the arguments do not fit the method's signature.
        """
        positional = [param for param in self.params if not param.keyword_only]
        if len(args) > len(positional):
            raise TypeError(
                f"{self.name}() takes {len(positional)} positional arguments, {len(args)} given"
            )
        values: dict[str, object] = {
            param.name: arg for param, arg in zip(positional, args, strict=False)
        }
        known = {param.name for param in self.params}
        for name, value in kwargs.items():
            if name not in known:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{self.name}() got multiple values for argument {name!r}")
            values[name] = value
        fields: dict[str, object] = {}
        for param in self.params:
            value = values.get(param.name, param.default)
            if value is _REQUIRED:
                raise TypeError(f"{self.name}() missing required argument {param.name!r}")
            fields[param.target] = {} if param.table and value is None else value
        return cast("_Build", self.method)(**fields)


def _arg(
    name: str, annotation: str, default: object = _REQUIRED, *, field: str | None = None
) -> Param:
    return Param(name, annotation, default, field=field)


def _kw(name: str, annotation: str, default: object) -> Param:
    return Param(name, annotation, default, keyword_only=True)


_ARGUMENTS: Final = Param("arguments", "FieldTable | None", None, keyword_only=True, table=True)

# The requests, in the order the adapters' generated methods appear. Named after the channel
# methods: ``queue_declare("q", durable=True)`` is the request ``Channel.queue_declare`` sends.

exchange_declare: Final = Request(
    "exchange_declare",
    ExchangeDeclare,
    (
        _arg("exchange", "str"),
        _arg("exchange_type", "str", "direct", field="type"),
        _kw("passive", "bool", False),
        _kw("durable", "bool", False),
        _kw("auto_delete", "bool", False),
        _kw("internal", "bool", False),
        _ARGUMENTS,
    ),
    doc="Declare an exchange (``passive``: only check that it exists).",
    docs={
        "amqp_trio": "Declare an exchange (``passive``: only check that it exists, else NotFound)."
    },
)
exchange_delete: Final = Request(
    "exchange_delete",
    ExchangeDelete,
    (_arg("exchange", "str"), _kw("if_unused", "bool", False)),
    doc="Delete an exchange.",
)
exchange_bind: Final = Request(
    "exchange_bind",
    ExchangeBind,
    (_arg("destination", "str"), _arg("source", "str"), _arg("routing_key", "str", ""), _ARGUMENTS),
    doc="Bind exchange *destination* to exchange *source* (RabbitMQ extension).",
    docs={
        "amqp_blocking": "Bind exchange *destination* to exchange *source* (a RabbitMQ extension)."
    },
)
exchange_unbind: Final = Request(
    "exchange_unbind",
    ExchangeUnbind,
    (_arg("destination", "str"), _arg("source", "str"), _arg("routing_key", "str", ""), _ARGUMENTS),
    doc="Remove an exchange-to-exchange binding.",
)
queue_declare: Final = Request(
    "queue_declare",
    QueueDeclare,
    (
        _arg("queue", "str", ""),
        _kw("passive", "bool", False),
        _kw("durable", "bool", False),
        _kw("exclusive", "bool", False),
        _kw("auto_delete", "bool", False),
        _ARGUMENTS,
    ),
    doc='Declare a queue (``""``: the broker names it); returns its name and counts.',
    returns="QueueDeclareOk",
    reader=declared_queue,
    docs={
        "amqp_trio": """
            Declare a queue (``""``: the broker names it); returns ``queue.declare-ok`` with
            ``queue``, ``message_count`` and ``consumer_count``.
        """
    },
)
queue_bind: Final = Request(
    "queue_bind",
    QueueBind,
    (_arg("queue", "str"), _arg("exchange", "str"), _arg("routing_key", "str", ""), _ARGUMENTS),
    doc="Bind a queue to an exchange.",
)
queue_unbind: Final = Request(
    "queue_unbind",
    QueueUnbind,
    (_arg("queue", "str"), _arg("exchange", "str"), _arg("routing_key", "str", ""), _ARGUMENTS),
    doc="Remove a queue binding.",
)
queue_purge: Final = Request(
    "queue_purge",
    QueuePurge,
    (_arg("queue", "str"),),
    doc="Remove a queue's ready messages; returns how many.",
    returns="int",
    reader=message_count,
    docs={"amqp_trio": "Remove every ready message from a queue; returns how many."},
)
queue_delete: Final = Request(
    "queue_delete",
    QueueDelete,
    (_arg("queue", "str"), _kw("if_unused", "bool", False), _kw("if_empty", "bool", False)),
    doc="Delete a queue; returns how many messages it held.",
    returns="int",
    reader=message_count,
)
basic_qos: Final = Request(
    "basic_qos",
    BasicQos,
    (
        _arg("prefetch_count", "int", 0),
        _kw("prefetch_size", "int", 0),
        _kw("global_", "bool", False),
    ),
    doc="""
        Limit unacknowledged deliveries (per consumer; ``global_``: per channel). Consumers
        started afterwards get a buffer of ``prefetch_count`` messages.
    """,
    docs={
        "amqp_blocking": "Limit unacknowledged deliveries (per consumer; ``global_``: per channel)."
    },
)
confirm_select: Final = Request(
    "confirm_select",
    ConfirmSelect,
    (),
    doc="""
        Put the channel in confirm mode: :meth:`basic_publish` then waits for the broker's
        ack, and :meth:`publisher` pipelines. Calling it again does nothing.
    """,
    once="confirm_mode",
)
basic_cancel: Final = Request(
    "basic_cancel",
    BasicCancel,
    (_arg("consumer_tag", "str"),),
    doc="Cancel a consumer: its iterator hands out what is buffered, then stops.",
    docs={"amqp_blocking": "Cancel a consumer by tag (``Consumer.cancel()`` does the same)."},
)
basic_get: Final = Request(
    "basic_get",
    BasicGet,
    (_arg("queue", "str"), _kw("no_ack", "bool", False)),
    doc="Fetch one message (None when the queue is empty).",
    returns="Message | None",
    adapt="_got_message",
    docs={"amqp_blocking": "Fetch one message, or None when the queue is empty."},
)
basic_ack: Final = Request(
    "basic_ack",
    BasicAck,
    (_arg("delivery_tag", "int"), _kw("multiple", "bool", False)),
    doc="Acknowledge a delivery (``multiple``: and every earlier one).",
    docs={"amqp_blocking": "Acknowledge a delivery (with *multiple*: every one up to it)."},
)
basic_nack: Final = Request(
    "basic_nack",
    BasicNack,
    (_arg("delivery_tag", "int"), _kw("multiple", "bool", False), _kw("requeue", "bool", True)),
    doc="Negatively acknowledge deliveries (RabbitMQ extension).",
    docs={
        "amqp_blocking": """
            Refuse a delivery (with *multiple*: every one up to it). Never on a stream queue.
        """
    },
)
basic_reject: Final = Request(
    "basic_reject",
    BasicReject,
    (_arg("delivery_tag", "int"), _kw("requeue", "bool", True)),
    doc="Reject one delivery.",
    docs={"amqp_blocking": "Refuse one delivery. Never on a stream queue."},
)
basic_recover: Final = Request(
    "basic_recover",
    BasicRecover,
    (_arg("requeue", "bool", True),),
    doc="""
        Redeliver every unacknowledged message of the channel (RabbitMQ supports only
        ``requeue=True``).
    """,
    docs={"amqp_blocking": "Redeliver every unacknowledged delivery of the channel."},
)
tx_select: Final = Request("tx_select", TxSelect, (), doc="Put the channel in transaction mode.")
tx_commit: Final = Request("tx_commit", TxCommit, (), doc="Commit the current transaction.")
tx_rollback: Final = Request(
    "tx_rollback",
    TxRollback,
    (),
    doc="Roll back the current transaction.",
    docs={"amqp_blocking": "Roll the current transaction back."},
)
flow: Final = Request(
    "flow",
    ChannelFlow,
    (_arg("active", "bool"),),
    doc="""
        Ask the broker to pause (False) or resume (True) deliveries; returns the state the
        broker confirmed. RabbitMQ refuses ``flow(False)`` with 540, closing the connection.
    """,
    returns="bool",
    reader=flow_state,
    docs={
        "amqp_blocking": """
            Ask the broker to stop (False) or resume (True) deliveries; returns its answer.
        """
    },
)

#: Every channel method that sends one request, in the order the adapters define them.
REQUESTS: Final[tuple[Request, ...]] = (
    exchange_declare,
    exchange_delete,
    exchange_bind,
    exchange_unbind,
    queue_declare,
    queue_bind,
    queue_unbind,
    queue_purge,
    queue_delete,
    basic_qos,
    confirm_select,
    basic_cancel,
    basic_get,
    basic_ack,
    basic_nack,
    basic_reject,
    basic_recover,
    tx_select,
    tx_commit,
    tx_rollback,
    flow,
)
