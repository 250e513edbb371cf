"""The data source's options: parsed and validated once, on the driver, into frozen values.

Spark hands a data source its options as strings under lower-cased keys. :func:`parse_options`
turns them into :class:`AmqpOptions` or raises :class:`AmqpOptionError` naming the option, so a
typo or a bad value fails at ``load()``/``save()``/``start()`` and never on an executor.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import attrs

from amqp_sansio.client import DEFAULT_URL, ConnectionParameters

from ._errors import AmqpOptionError
from ._offsets import OffsetKind, OffsetSpec, parse_offsets_option

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "OPTION_NAMES",
    "AmqpOptions",
    "MessageIdMode",
    "QueueType",
    "SinkOptions",
    "SourceOptions",
    "parse_options",
]

QueueType: TypeAlias = Literal["stream", "classic", "quorum"]
MessageIdMode: TypeAlias = Literal["none", "deterministic"]

#: Every option the data source understands, as documented (Spark lower-cases the keys).
OPTION_NAMES: Final = (
    # connection
    "url",
    "heartbeat",
    "connectionTimeoutMs",
    "tls.caFile",
    "tls.certFile",
    "tls.keyFile",
    "tls.verify",
    # source
    "queue",
    "queueType",
    "declare",
    "queueArgs",
    "startingOffsets",
    "endingOffsets",
    "maxMessagesPerTrigger",
    "numPartitions",
    "maxMessagesPerPartition",
    "prefetch",
    "pollTimeoutMs",
    "pollIdleMs",
    "readTimeoutMs",
    "failOnDataLoss",
    "includeHeadersJson",
    # sink
    "exchange",
    "routingKey",
    "mandatory",
    "deliveryMode",
    "contentType",
    "confirm",
    "maxInFlight",
    "confirmTimeoutMs",
    "messageIdMode",
)
_CANONICAL: Final = {name.lower(): name for name in OPTION_NAMES}

# Keys Spark itself adds: load("x") gives "path"; writeStream adds the other two.
_SPARK_KEYS: Final = frozenset({"path", "queryname", "checkpointlocation"})

_STARTING_KINDS: Final[frozenset[OffsetKind]] = frozenset(
    {"first", "last", "next", "offset", "timestamp"}
)
_ENDING_KINDS: Final[frozenset[OffsetKind]] = frozenset({"next", "offset"})
_MAX_PREFETCH: Final = 0xFFFF  # basic.qos prefetch-count is a short
_MAX_MS: Final = 24 * 3600 * 1000


@dataclass(frozen=True)
class SourceOptions:
    """What and how to read. Queue-specific offsets are keyed by queue name."""

    queues: tuple[str, ...]
    queue_type: QueueType | None
    declare: bool
    queue_arguments_json: str | None
    starting_offsets: dict[str, OffsetSpec] | None
    ending_offsets: dict[str, OffsetSpec] | None
    max_messages_per_trigger: int | None
    num_partitions: int
    max_messages_per_partition: int | None
    prefetch: int
    poll_timeout: float
    poll_idle: float
    read_timeout: float
    fail_on_data_loss: bool
    include_headers_json: bool

    def queue_arguments(self) -> dict[str, object]:
        """``x-queue-type`` plus ``queueArgs``, for ``declare=true``."""
        arguments: dict[str, object] = {}
        if self.queue_arguments_json is not None:
            loaded = json.loads(self.queue_arguments_json)
            assert isinstance(loaded, dict)
            arguments.update(loaded)
        if self.queue_type is not None:
            arguments["x-queue-type"] = self.queue_type
        return arguments


@dataclass(frozen=True)
class SinkOptions:
    """Where and how to publish."""

    exchange: str
    routing_key: str | None
    mandatory: bool
    delivery_mode: int
    content_type: str | None
    confirm: bool
    max_in_flight: int
    confirm_timeout: float
    message_id_mode: MessageIdMode


@dataclass(frozen=True)
class AmqpOptions:
    """All options, parsed. ``connection`` never shows the password in a ``repr``."""

    connection: ConnectionParameters
    source: SourceOptions
    sink: SinkOptions
    given: frozenset[str] = field(default_factory=frozenset)

    def gave(self, name: str) -> bool:
        """Whether the user set option ``name`` (documented spelling)."""
        return name.lower() in self.given


class _Reader:
    """Typed accessors over the raw option strings; each raises naming the option."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.raw = raw

    def text(self, name: str) -> str | None:
        value = self.raw.get(name.lower())
        if value is None:
            return None
        if not isinstance(value, str):
            raise AmqpOptionError(name, f"expected a string, got {type(value).__name__}")
        return value

    def integer(self, name: str, low: int, high: int) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        try:
            number = int(value.strip(), 10)
        except ValueError:
            raise AmqpOptionError(
                name, f"expected an integer from {low} to {high}, got {value!r}"
            ) from None
        if not low <= number <= high:
            raise AmqpOptionError(name, f"expected an integer from {low} to {high}, got {number}")
        return number

    def millis(self, name: str, default: int) -> float:
        number = self.integer(name, 1, _MAX_MS)
        return (default if number is None else number) / 1000.0

    def boolean(self, name: str, default: bool) -> bool:
        value = self.text(name)
        if value is None:
            return default
        word = value.strip().lower()
        if word in ("true", "false"):
            return word == "true"
        raise AmqpOptionError(name, f"expected true or false, got {value!r}")

    def choice(self, name: str, choices: tuple[str, ...]) -> str | None:
        value = self.text(name)
        if value is None:
            return None
        word = value.strip().lower()
        if word not in choices:
            raise AmqpOptionError(name, f"expected one of {', '.join(choices)}, got {value!r}")
        return word


def _check_keys(raw: Mapping[str, str]) -> frozenset[str]:
    given: set[str] = set()
    for key in raw:
        lowered = key.lower()
        if lowered in _SPARK_KEYS:
            continue
        if lowered not in _CANONICAL:
            close = difflib.get_close_matches(lowered, _CANONICAL, n=1, cutoff=0.75)
            hint = f"; did you mean {_CANONICAL[close[0]]!r}?" if close else ""
            raise AmqpOptionError(key, f"unknown option{hint} (known: {', '.join(OPTION_NAMES)})")
        given.add(lowered)
    return frozenset(given)


def _connection(options: _Reader) -> ConnectionParameters:
    url = options.text("url")
    if url is None:
        url = DEFAULT_URL
    try:
        params = ConnectionParameters.from_url(url.strip())
    except (TypeError, ValueError) as exc:
        # from_url never puts the password in its message; keep it that way.
        raise AmqpOptionError("url", f"not a valid AMQP URL: {exc}") from None
    heartbeat = options.integer("heartbeat", 0, 0xFFFF)
    timeout = options.integer("connectionTimeoutMs", 1, _MAX_MS)
    files: dict[str, str | None] = {}
    for name in ("tls.caFile", "tls.certFile", "tls.keyFile"):
        value = options.text(name)
        if value is not None:
            if not params.tls:
                raise AmqpOptionError(name, "needs an amqps:// url")
            if not value.strip():
                raise AmqpOptionError(name, "is empty")
            value = value.strip()
        files[name] = value
    verify = params.verify
    if options.text("tls.verify") is not None:
        if not params.tls:
            raise AmqpOptionError("tls.verify", "needs an amqps:// url")
        verify = options.boolean("tls.verify", True)
    try:
        return attrs.evolve(
            params,
            heartbeat=params.heartbeat if heartbeat is None else heartbeat,
            connection_timeout=params.connection_timeout if timeout is None else timeout / 1000,
            cafile=files["tls.caFile"] or params.cafile,
            certfile=files["tls.certFile"] or params.certfile,
            keyfile=files["tls.keyFile"] or params.keyfile,
            verify=verify,
            connection_name=params.connection_name or "amqp_spark",
        )
    except (TypeError, ValueError) as exc:
        raise AmqpOptionError("url", str(exc)) from None


def _queues(options: _Reader) -> tuple[str, ...]:
    queue = options.text("queue")
    path = options.text("path")
    if queue is not None and path is not None and queue.strip() != path.strip():
        raise AmqpOptionError(
            "queue", f"given both as option ({queue!r}) and as load() path ({path!r})"
        )
    text = queue if queue is not None else path
    if text is None:
        return ()
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if not name:
            raise AmqpOptionError("queue", f"empty queue name in {text!r}")
        if len(name.encode()) > 255:
            raise AmqpOptionError("queue", f"queue name longer than 255 bytes: {name[:40]!r}...")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise AmqpOptionError("queue", f"queue(s) named twice: {', '.join(duplicates)}")
    return tuple(names)


def _queue_arguments(options: _Reader, declare: bool) -> str | None:
    text = options.text("queueArgs")
    if text is None:
        return None
    if not declare:
        raise AmqpOptionError("queueArgs", "has no effect without declare=true")
    try:
        loaded: object = json.loads(text)
    except ValueError as exc:
        raise AmqpOptionError("queueArgs", f"not valid JSON: {exc}") from None
    if not isinstance(loaded, dict):
        raise AmqpOptionError("queueArgs", 'expected a JSON object such as {"x-max-age": "7D"}')
    if "x-queue-type" in loaded:
        raise AmqpOptionError("queueArgs", "set the queue type with the queueType option")
    for key, value in loaded.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise AmqpOptionError("queueArgs", f"{key}: not a finite number")
    return json.dumps(loaded, sort_keys=True)


def _source(options: _Reader) -> SourceOptions:
    queues = _queues(options)
    queue_type_text = options.choice("queueType", ("stream", "classic", "quorum"))
    queue_type: QueueType | None
    if queue_type_text == "stream":
        queue_type = "stream"
    elif queue_type_text == "classic":
        queue_type = "classic"
    elif queue_type_text == "quorum":
        queue_type = "quorum"
    else:
        queue_type = None
    declare = options.boolean("declare", False)
    if declare and queue_type is None:
        raise AmqpOptionError("declare", "needs queueType to know which queue to declare")
    if declare and not queues:
        raise AmqpOptionError("declare", "needs the queue option")
    stream_only = ("startingOffsets", "endingOffsets", "numPartitions", "maxMessagesPerPartition")
    if queue_type in ("classic", "quorum"):
        for name in stream_only:
            if options.text(name) is not None:
                raise AmqpOptionError(
                    name, f"applies to stream queues only; queueType is {queue_type}"
                )
    starting: dict[str, OffsetSpec] | None = None
    ending: dict[str, OffsetSpec] | None = None
    for name in ("startingOffsets", "endingOffsets"):
        text = options.text(name)
        if text is None:
            continue
        if not queues:
            raise AmqpOptionError(name, "needs the queue option")
        kinds = _STARTING_KINDS if name == "startingOffsets" else _ENDING_KINDS
        parsed = parse_offsets_option(name, text, queues, kinds)
        if name == "startingOffsets":
            starting = parsed
        else:
            ending = parsed
    max_per_trigger_limit = _MAX_PREFETCH if queue_type in ("classic", "quorum") else 2**31 - 1
    max_per_trigger = options.integer("maxMessagesPerTrigger", 1, max_per_trigger_limit)
    prefetch = options.integer("prefetch", 1, _MAX_PREFETCH)
    return SourceOptions(
        queues=queues,
        queue_type=queue_type,
        declare=declare,
        queue_arguments_json=_queue_arguments(options, declare),
        starting_offsets=starting,
        ending_offsets=ending,
        max_messages_per_trigger=max_per_trigger,
        num_partitions=options.integer("numPartitions", 1, 10_000) or 1,
        max_messages_per_partition=options.integer("maxMessagesPerPartition", 1, 2**31 - 1),
        prefetch=2000 if prefetch is None else prefetch,
        poll_timeout=options.millis("pollTimeoutMs", 1000),
        poll_idle=options.millis("pollIdleMs", 100),
        read_timeout=options.millis("readTimeoutMs", 30_000),
        fail_on_data_loss=options.boolean("failOnDataLoss", True),
        include_headers_json=options.boolean("includeHeadersJson", False),
    )


def _shortstr(options: _Reader, name: str) -> str | None:
    value = options.text(name)
    if value is not None and len(value.encode()) > 255:
        raise AmqpOptionError(name, "longer than 255 bytes (an AMQP short string)")
    return value


def _sink(options: _Reader) -> SinkOptions:
    delivery_mode = options.integer("deliveryMode", 1, 2)
    message_id_mode = options.choice("messageIdMode", ("none", "deterministic"))
    return SinkOptions(
        exchange=_shortstr(options, "exchange") or "",
        routing_key=_shortstr(options, "routingKey"),
        mandatory=options.boolean("mandatory", True),
        delivery_mode=2 if delivery_mode is None else delivery_mode,
        content_type=_shortstr(options, "contentType"),
        confirm=options.boolean("confirm", True),
        max_in_flight=options.integer("maxInFlight", 1, 1_000_000) or 1000,
        confirm_timeout=options.millis("confirmTimeoutMs", 30_000),
        message_id_mode="deterministic" if message_id_mode == "deterministic" else "none",
    )


def parse_options(raw: Mapping[str, str]) -> AmqpOptions:
    """Parse Spark's option map (any key case) into :class:`AmqpOptions`.

    :raises AmqpOptionError: an unknown option, a bad value, or options that contradict
        each other; the message names the option.
    """
    lowered = {key.lower(): value for key, value in raw.items()}
    given = _check_keys(lowered)
    options = _Reader(lowered)
    return AmqpOptions(
        connection=_connection(options),
        source=_source(options),
        sink=_sink(options),
        given=given,
    )
