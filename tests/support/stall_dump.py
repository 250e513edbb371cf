"""What a recovery scenario was doing when its test timed out: the client's state (the router's
books, the consumer's buffer, the supervisor's phase) and the broker's (queues, consumers,
channels), printed by the test on its timeout so that a hang that comes once in a while under
load leaves more than "it waited" (issue 28).

The scenario records what it holds in the :class:`ScenarioState` that :func:`begin` gives;
:func:`stall_report` reads it with ``getattr`` (the adapters' private names differ, and a dump
must never raise).
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import TYPE_CHECKING, Protocol

import attrs

if TYPE_CHECKING:
    from pathlib import Path


class Ctl(Protocol):
    """``rabbitmqctl`` for one node: ``RabbitMQNode.ctl``, or the shared node's."""

    def __call__(self, *args: str) -> str: ...


@attrs.define
class ScenarioState:
    """What the running scenario holds: set by it, read by :func:`stall_report`."""

    phase: str = "starting"
    queue: str = ""
    conn: object = None
    channel: object = None
    consumer: object = None
    received: set[int] = attrs.field(factory=set)
    confirmed: set[int] = attrs.field(factory=set)
    published: int = 0
    #: The last few things the scenario saw (events, message idents), oldest first.
    trail: list[str] = attrs.field(factory=list)

    def note(self, what: str) -> None:
        self.trail.append(what)
        del self.trail[:-40]


#: The scenario running (or last run) in this process.
_current: list[ScenarioState] = [ScenarioState()]


def begin() -> ScenarioState:
    """A new scenario starts: its state, which :func:`stall_report` reads."""
    _current[0] = ScenarioState()
    return _current[0]


def _get(obj: object, *names: str) -> object:
    for name in names:
        obj = getattr(obj, name, None)
        if obj is None:
            return None
    return obj


def _book_lines(book: object) -> list[str]:
    lines = [f"    book {_get(book, 'number')} (id {id(book):#x})"]
    for name in (
        "consumers",
        "consumes",
        "paused",
        "pausing",
        "unbounded",
        "restore_consumes",
        "prefetch_count",
        "confirm_mode",
        "superseded",
        "error",
        "flow_active",
    ):
        value = getattr(book, name, None)
        if isinstance(value, dict):
            value = {key: type(sink).__name__ for key, sink in value.items()}
        lines.append(f"      {name}: {value!r}")
    rpcs = getattr(book, "rpcs", ())
    lines.append(f"      rpcs: {[(type(w).__name__, type(r).__name__) for w, _, r in rpcs]}")
    lines.append(f"      confirms pending: {len(getattr(book, 'confirms', {}) or {})}")
    return lines


def client_report(state: ScenarioState | None = None) -> str:
    """The client's side, as far as duck typing reaches."""
    state = state or _current[0]
    lines = [f"scenario phase: {state.phase}; queue {state.queue!r}"]
    missing = sorted(state.confirmed - state.received)
    lines.append(
        f"published {state.published}, confirmed {len(state.confirmed)}, received "
        f"{len(state.received)}, confirmed but not received {len(missing)}: {missing[:20]}"
    )
    lines.append(f"trail: {state.trail}")
    conn = state.conn
    inner = getattr(conn, "_conn", conn)  # a facade's connection
    lines.extend(
        f"conn.{name}: {getattr(inner, name, None)!r}"
        for name in (
            "_supervisor",
            "_recovered",
            "_restored",
            "_transport",
            "_generation",
            "_epoch",
        )
    )
    core = _get(inner, "_core")
    if core is not None:
        lines.append(f"core state: {getattr(core, 'state', None)!r}")
        lines.append(f"core topology consumers: {_get(core, 'topology', 'consumers')!r}")
        lines.append(f"core outbound: {getattr(core, 'outbound_size', None)!r}")
    router = _get(inner, "_book")
    if router is not None:
        lines.append(f"router error: {getattr(router, 'error', None)!r}")
        for book in (getattr(router, "channels", None) or {}).values():
            lines.extend(_book_lines(book))
    channel = state.channel
    channel = getattr(channel, "_channel", channel)
    ch_book = getattr(channel, "_book", None)
    lines.append(f"channel {getattr(channel, 'number', None)}: book id {id(ch_book):#x}")
    consumer = state.consumer
    consumer = getattr(consumer, "_consumer", consumer)
    lines.extend(
        f"consumer.{name}: {getattr(consumer, name, None)!r}"
        for name in (
            "consumer_tag",
            "buffered",
            "buffer_size",
            "_ended",
            "_error",
            "_over",
            "dropped",
        )
    )
    lines.append(f"consumer waiter: {getattr(consumer, '_waiter', None)!r}")
    return "\n".join(lines)


def broker_report(ctl: Ctl) -> str:
    """The broker's side through *ctl* (``RabbitMQNode.ctl``, or the shared node's
    ``rabbitmqctl``)."""
    lines = []
    for args in (
        ("list_queues", "name", "messages_ready", "messages_unacknowledged", "consumers"),
        (
            "list_consumers",
            "queue_name",
            "channel_pid",
            "consumer_tag",
            "ack_required",
            "prefetch_count",
            "active",
        ),
        (
            "list_channels",
            "pid",
            "number",
            "consumer_count",
            "messages_unacknowledged",
            "messages_unconfirmed",
            "prefetch_count",
            "global_prefetch_count",
        ),
        ("list_connections", "pid", "name", "state", "channels", "recv_oct", "send_oct"),
    ):
        try:
            lines.append(f"$ rabbitmqctl {' '.join(args)}\n{ctl(*args)}")
        except (OSError, subprocess.SubprocessError) as exc:
            lines.append(f"$ rabbitmqctl {' '.join(args)}: {exc!r}")
    return "\n".join(lines)


def stall_report(ctl: Ctl | None = None, logs: Path | None = None) -> str:
    """Both sides, for a test to print when its scenario timed out; *logs*: a private node's
    log directory, whose logs are added (the node's data is removed after the test)."""
    parts = ["=== stall report (client) ===", client_report()]
    if ctl is not None:
        parts += ["=== stall report (broker) ===", broker_report(ctl)]
    for log in sorted(logs.glob("*.log")) if logs is not None else ():
        with contextlib.suppress(OSError):
            # Whole: every boot's lines (what it recovered) and what came between.
            parts += [f"=== {log.name} ===", log.read_text(errors="replace")]
    return "\n".join(parts)
