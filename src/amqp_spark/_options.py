"""The data source's options: parsed and validated once, on the driver, into frozen values.

Spark hands a data source its options as strings under lower-cased keys. :func:`parse_options`
turns them into :class:`AmqpOptions` or raises :class:`AmqpOptionError` naming the option, so a
typo or a bad value fails at ``load()``/``save()``/``start()`` and never on an executor.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

import attrs

from amqp_sansio.client import DEFAULT_URL, ConnectionParameters

from ._errors import AmqpOptionError
from ._offsets import EVERY_QUEUE, OffsetKind, OffsetSpec, parse_offsets_option

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
    "superStream",
    "queueType",
    "declare",
    "queueArgs",
    "startingOffsets",
    "endingOffsets",
    "startingTimestamp",
    "endingTimestamp",
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
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
#: Spark's Kafka source names, accepted where they mean exactly what ours mean.
KAFKA_ALIASES: Final = {
    "maxOffsetsPerTrigger": "maxMessagesPerTrigger",
    "minOffsetsPerTrigger": "minMessagesPerTrigger",
}
_CANONICAL: Final = {name.lower(): name for name in (*OPTION_NAMES, *KAFKA_ALIASES)}

# Keys Spark itself adds: load("x") gives "path"; writeStream adds the other two.
_SPARK_KEYS: Final = frozenset({"path", "queryname", "checkpointlocation"})

_STARTING_KINDS: Final[frozenset[OffsetKind]] = frozenset(
    {"first", "last", "next", "offset", "timestamp"}
)
_ENDING_KINDS: Final[frozenset[OffsetKind]] = frozenset({"next", "offset", "timestamp"})
_MAX_PREFETCH: Final = 0xFFFF  # basic.qos prefetch-count is a short
_MAX_MS: Final = 24 * 3600 * 1000
# maxTriggerDelay: Kafka's default, and the units of Spark's time strings.
_DEFAULT_TRIGGER_DELAY_S: Final = 15 * 60.0
_TIME_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
# A super stream's partitions are found by name: <super stream>-0, -1, ... (RabbitMQ's layout).
MAX_SUPER_STREAM_PARTITIONS: Final = 1000


@dataclass(frozen=True)
class SourceOptions:
    """What and how to read. Queue-specific offsets are keyed by queue name."""

    queues: tuple[str, ...]
    #: ``superStream``: the queues are its partitions, found when the query first plans.
    super_stream: str | None
    queue_type: QueueType | None
    declare: bool
    queue_arguments_json: str | None
    starting_offsets: dict[str, OffsetSpec] | None
    ending_offsets: dict[str, OffsetSpec] | None
    max_messages_per_trigger: int | None
    min_messages_per_trigger: int | None
    max_trigger_delay: float
    max_bytes_per_trigger: int | None
    num_partitions: int
    max_messages_per_partition: int | None
    prefetch: int
    poll_timeout: float
    poll_idle: float
    read_timeout: float
    fail_on_data_loss: bool
    include_headers_json: bool

    def reads(self) -> bool:
        """Whether a queue (or a super stream) to read was named."""
        return bool(self.queues) or self.super_stream is not None

    def offset_specs(
        self, specs: dict[str, OffsetSpec] | None, queues: tuple[str, ...], default: OffsetSpec
    ) -> dict[str, OffsetSpec]:
        """``specs`` (starting or ending offsets) for each of ``queues``, else ``default``."""
        if specs is None:
            return dict.fromkeys(queues, default)
        if EVERY_QUEUE in specs:
            return dict.fromkeys(queues, specs[EVERY_QUEUE])
        return {q: specs[q] for q in queues}

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

    def duration(self, name: str, default: float) -> float:
        """Seconds, from a Spark time string: ``"15m"``, ``"30s"``, ``"500ms"``; a bare number
        is milliseconds (as in Spark's Kafka source)."""
        value = self.text(name)
        if value is None:
            return default
        match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", value.lower())
        unit = "ms" if match is None or not match.group(2) else match.group(2)
        if match is None or unit not in _TIME_UNITS:
            raise AmqpOptionError(
                name,
                f"expected a duration such as 15m, 30s or 500ms (ms, s, m, h, d), got {value!r}",
            )
        return int(match.group(1)) * _TIME_UNITS[unit]

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


def _resolve_aliases(lowered: dict[str, str]) -> dict[str, str]:
    """Kafka's names under ours; giving both spellings is a contradiction, not a choice."""
    out = dict(lowered)
    for alias, name in KAFKA_ALIASES.items():
        if alias.lower() not in out:
            continue
        if name.lower() in out:
            raise AmqpOptionError(alias, f"is Kafka's name for {name!r}; give only one of them")
        out[name.lower()] = out.pop(alias.lower())
    return out


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


def _super_stream(options: _Reader, queues: tuple[str, ...]) -> str | None:
    name = options.text("superStream")
    if name is None:
        return None
    name = name.strip()
    if queues:
        raise AmqpOptionError(
            "superStream", "reads the super stream's partitions; give either it or queue"
        )
    if not name:
        raise AmqpOptionError("superStream", "is empty")
    # its partitions are named <name>-<n>, which must still be a short string
    if len(name.encode()) > 255 - len(f"-{MAX_SUPER_STREAM_PARTITIONS}"):
        raise AmqpOptionError("superStream", f"name too long: {name[:40]!r}...")
    return name


def _queue_type(options: _Reader, super_stream: str | None) -> QueueType | None:
    text = options.choice("queueType", ("stream", "classic", "quorum"))
    if super_stream is not None:
        if text not in (None, "stream"):
            raise AmqpOptionError("queueType", "a super stream's partitions are stream queues")
        return "stream"
    if text == "stream":
        return "stream"
    if text == "classic":
        return "classic"
    if text == "quorum":
        return "quorum"
    return None


def _offsets(
    options: _Reader,
    name: str,
    timestamp_name: str,
    queues: tuple[str, ...],
    super_stream: str | None,
) -> dict[str, OffsetSpec] | None:
    """``startingOffsets``/``endingOffsets``, or Kafka's ``startingTimestamp``/
    ``endingTimestamp`` (milliseconds) for every queue. A super stream's queues are not known
    yet: its single spec is stored under ``EVERY_QUEUE``."""
    text = options.text(name)
    millis = options.integer(timestamp_name, 0, 2**63 - 1)
    if text is not None and millis is not None:
        raise AmqpOptionError(timestamp_name, f"give either it or {name}, not both")
    if text is None and millis is None:
        return None
    given = name if text is not None else timestamp_name
    if not queues and super_stream is None:
        raise AmqpOptionError(given, "needs the queue option")
    keys = queues or (EVERY_QUEUE,)
    if millis is not None:
        # x-stream-offset takes a timestamp in seconds: the cut is at second (and chunk) grain
        return dict.fromkeys(keys, OffsetSpec("timestamp", millis // 1000))
    assert text is not None
    if super_stream is not None and text.strip().startswith("{"):
        raise AmqpOptionError(
            name, "takes one value for all of a super stream's partitions, not a JSON object"
        )
    kinds = _STARTING_KINDS if name == "startingOffsets" else _ENDING_KINDS
    return parse_offsets_option(name, text, keys, kinds)


def _source(options: _Reader) -> SourceOptions:
    queues = _queues(options)
    super_stream = _super_stream(options, queues)
    queue_type = _queue_type(options, super_stream)
    declare = options.boolean("declare", False)
    if declare and queue_type is None:
        raise AmqpOptionError("declare", "needs queueType to know which queue to declare")
    if declare and not queues:
        raise AmqpOptionError("declare", "needs the queue option")
    stream_only = (
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "numPartitions",
        "maxMessagesPerPartition",
        "minMessagesPerTrigger",
        "maxTriggerDelay",
        "maxBytesPerTrigger",
    )
    if queue_type in ("classic", "quorum"):
        for name in stream_only:
            if options.text(name) is not None:
                raise AmqpOptionError(
                    name, f"applies to stream queues only; queueType is {queue_type}"
                )
    starting = _offsets(options, "startingOffsets", "startingTimestamp", queues, super_stream)
    ending = _offsets(options, "endingOffsets", "endingTimestamp", queues, super_stream)
    max_per_trigger_limit = _MAX_PREFETCH if queue_type in ("classic", "quorum") else 2**31 - 1
    max_per_trigger = options.integer("maxMessagesPerTrigger", 1, max_per_trigger_limit)
    min_per_trigger = options.integer("minMessagesPerTrigger", 1, 2**31 - 1)
    if (
        min_per_trigger is not None
        and max_per_trigger is not None
        and min_per_trigger > max_per_trigger
    ):
        raise AmqpOptionError(
            "minMessagesPerTrigger",
            f"{min_per_trigger} is more than maxMessagesPerTrigger ({max_per_trigger})",
        )
    if options.text("maxTriggerDelay") is not None and min_per_trigger is None:
        raise AmqpOptionError("maxTriggerDelay", "has no effect without minMessagesPerTrigger")
    prefetch = options.integer("prefetch", 1, _MAX_PREFETCH)
    return SourceOptions(
        queues=queues,
        super_stream=super_stream,
        queue_type=queue_type,
        declare=declare,
        queue_arguments_json=_queue_arguments(options, declare),
        starting_offsets=starting,
        ending_offsets=ending,
        max_messages_per_trigger=max_per_trigger,
        min_messages_per_trigger=min_per_trigger,
        max_trigger_delay=options.duration("maxTriggerDelay", _DEFAULT_TRIGGER_DELAY_S),
        max_bytes_per_trigger=options.integer("maxBytesPerTrigger", 1, 2**63 - 1),
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
    _check_keys(lowered)
    lowered = _resolve_aliases(lowered)
    given = _check_keys(lowered)
    options = _Reader(lowered)
    return AmqpOptions(
        connection=_connection(options),
        source=_source(options),
        sink=_sink(options),
        given=given,
    )
