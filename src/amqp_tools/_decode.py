"""From reassembled TCP streams to AMQP: find each connection's protocol header, hand both
sides to the decoder of that version, and put every line in capture order.

Which end is the AMQP client is decided by the octets, not the ports: the first side to send
anything must send a protocol header (``AMQP`` and four version octets). A connection whose first
octets are something else is not AMQP and is skipped with one line saying what it started with.
A server that answers with a protocol header of its own refuses the client's version and
names the one it speaks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from amqp_sansio import RemoteProtocolError
from amqp_sansio.framing import parse_protocol_header

from ._decoders import (
    DECODERS,
    ECHOED_HEADER,
    Report,
    ReportKind,
    StreamDecoder,
    decodable_versions,
    describe_version,
)
from ._reassembly import Side, StreamChunk, TcpReassembler

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._format import FormatOptions
    from ._reassembly import StreamGap, TcpConnection, TcpSegment

__all__ = ["DecodeSummary", "Line", "decode_segments"]

_HEADER_SIZE: Final = 8


@final
@attrs.frozen
class Line:
    """One line of output: what, where in the capture, and which connection and side."""

    kind: ReportKind
    text: str
    packet: int | None = None
    time: float | None = None
    connection: int | None = None
    #: C>S or S>C (AMQP roles), or "" for a line about the whole connection.
    arrow: str = ""


@final
@attrs.define
class DecodeSummary:
    """Counts for the closing lines and the exit status."""

    connections: int = 0
    amqp: int = 0
    errors: int = 0
    lines: list[str] = attrs.field(factory=list)


@final
class _ConnectionView:
    """One TCP connection as AMQP: undecided until its first octets, then decoded or skipped."""

    def __init__(self, conn: TcpConnection, options: FormatOptions) -> None:
        self.conn = conn
        self._options = options
        self._head = b""  # the first octets, until they show whether this is AMQP
        self._first_side: Side | None = None
        #: The TCP side that is the AMQP client, once known.
        self.client_side: Side | None = None
        self.status = "undecided"  # "amqp", "not decoded", "not amqp", "undecided"
        self.version = ""
        self.decoder: StreamDecoder | None = None
        self._ignored: set[Side] = set()
        self.octets = {Side.CLIENT: 0, Side.SERVER: 0}
        self.errors = 0

    def arrow(self, side: Side) -> str:
        amqp_client = self.client_side or Side.CLIENT
        return "C>S" if side is amqp_client else "S>C"

    def title(self) -> str:
        client, server = self.conn.client, self.conn.server
        if self.client_side is Side.SERVER:
            client, server = server, client
        return f"{client} > {server}"

    def chunk(self, chunk: StreamChunk) -> Iterable[tuple[Report, Side | None]]:
        side = chunk.side
        self.octets[side] += len(chunk.data)
        if self.status in ("not amqp", "not decoded"):
            return
        data, offset = chunk.data, chunk.offset
        if self.status == "undecided":
            if self._first_side is None:
                self._first_side = side
            if side is not self._first_side:
                # The other side spoke before the first finished its header: not AMQP.
                yield from self._not_amqp(self._head)
                return
            self._head += data
            try:
                header = parse_protocol_header(self._head)
            except RemoteProtocolError:
                yield from self._not_amqp(self._head)
                return
            if header is None:
                return  # fewer than 8 octets, all of them a prefix of "AMQP"
            self.client_side = side
            self.version = describe_version(header.version, header.version_octets)
            factory = DECODERS.get(header.version)
            if factory is None:
                self.status = "not decoded"
                can = ", ".join(decodable_versions())
                yield (
                    Report(
                        ReportKind.NOTE,
                        f"{self.title()}: {self.version}, not decoded yet "
                        f"(amqp-decode decodes {can}); this connection is skipped",
                    ),
                    None,
                )
                return
            self.status = "amqp"
            self.decoder = factory(self._options)
            yield Report(ReportKind.NOTE, f"{self.title()}: {self.version}"), None
            yield Report(ReportKind.FRAME, f"protocol header {self.version}", 0), side
            data, offset = self._head[_HEADER_SIZE:], _HEADER_SIZE
            self._head = b""
            if not data:
                return
        elif side is not self.client_side and offset == 0 and data.startswith(b"AMQP"):
            if not self._echoed(data):
                yield from self._refused(data)
                return
            # 0-10: the server answers with the same header, then speaks.
            yield Report(ReportKind.FRAME, f"protocol header {self.version}", 0), side
            data, offset = data[_HEADER_SIZE:], _HEADER_SIZE
            if not data:
                return
        if side in self._ignored:
            return
        assert self.decoder is not None
        for report in self.decoder.feed(side, data, offset):
            if report.kind is ReportKind.ERROR:
                self.errors += 1
            yield report, side

    def _echoed(self, data: bytes) -> bool:
        """Whether *data*, the server's first octets, repeat the client's header in a version
        whose server does that (0-10)."""
        try:
            header = parse_protocol_header(data)
        except RemoteProtocolError:
            return False
        return (
            header is not None
            and header.version in ECHOED_HEADER
            and describe_version(header.version, header.version_octets) == self.version
        )

    def _refused(self, data: bytes) -> Iterable[tuple[Report, Side | None]]:
        server = Side.SERVER if self.client_side is Side.CLIENT else Side.CLIENT
        self._ignored.add(server)
        try:
            header = parse_protocol_header(data)
        except RemoteProtocolError:
            header = None
        offered = (
            "an incomplete protocol header"
            if header is None
            else describe_version(header.version, header.version_octets)
        )
        yield (
            Report(
                ReportKind.FRAME,
                f"protocol header {offered}: the server refuses {self.version} "
                "and names the version it speaks",
                0,
            ),
            server,
        )

    def _not_amqp(self, head: bytes) -> Iterable[tuple[Report, Side | None]]:
        self.status = "not amqp"
        hint = (
            ""
            if self.conn.saw_syn
            else " (the capture has no start of this connection: if it is AMQP, the capture "
            "began after its protocol header)"
        )
        yield (
            Report(
                ReportKind.NOTE,
                f"{self.title()}: not AMQP, it starts with {head[:16]!r}{hint}; skipped",
            ),
            None,
        )

    def end(self) -> Iterable[tuple[Report, Side | None]]:
        if self.status == "undecided" and self._head:
            yield (
                Report(
                    ReportKind.NOTE,
                    f"{self.title()}: ends after {self._head!r}, too short to tell whether it is "
                    "AMQP; skipped",
                ),
                None,
            )
            self.status = "not amqp"
        if self.decoder is None:
            return
        for side in (Side.CLIENT, Side.SERVER):
            if side in self._ignored:
                continue
            for report in self.decoder.end(side):
                if report.kind is ReportKind.ERROR:
                    self.errors += 1
                yield report, side

    def summary(self) -> str:
        head = f"[{self.conn.number}] {self.title()}"
        if self.status == "amqp":
            assert self.decoder is not None
            assert self.client_side is not None
            server = Side.SERVER if self.client_side is Side.CLIENT else Side.CLIENT
            text = (
                f"{head}: {self.version}, client {self.decoder.frames(self.client_side)} frames "
                f"in {self.octets[self.client_side]} octets, server "
                f"{self.decoder.frames(server)} frames in {self.octets[server]} octets"
            )
            if self.errors:
                text += f", {self.errors} problem{'s' if self.errors > 1 else ''}"
            return text
        if self.status == "not decoded":
            total = self.octets[Side.CLIENT] + self.octets[Side.SERVER]
            return f"{head}: {self.version}, not decoded ({total} octets)"
        return f"{head}: not AMQP"


def decode_segments(
    segments: Iterable[TcpSegment], options: FormatOptions, emit: Callable[[Line], None]
) -> DecodeSummary:
    """Reassemble *segments* and decode every AMQP connection among them, giving each line to
    *emit* as soon as the packet that completes it is read."""
    reassembler = TcpReassembler()
    views: dict[int, _ConnectionView] = {}
    summary = DecodeSummary()

    def send(
        view: _ConnectionView,
        reports: Iterable[tuple[Report, Side | None]],
        packet: int | None,
        time: float | None,
    ) -> None:
        for report, side in reports:
            if report.kind is ReportKind.ERROR:
                summary.errors += 1
            arrow = "" if side is None else view.arrow(side)
            emit(Line(report.kind, report.text, packet, time, view.conn.number, arrow))

    for segment in segments:
        for chunk in reassembler.add(segment):
            view = views.get(chunk.connection.number)
            if view is None:
                view = views[chunk.connection.number] = _ConnectionView(chunk.connection, options)
            send(view, view.chunk(chunk), chunk.packet, chunk.time)

    for gap in reassembler.finish():
        view = views.get(gap.connection.number)
        if view is None:
            view = views[gap.connection.number] = _ConnectionView(gap.connection, options)
        if view.status in ("amqp", "undecided"):
            view.errors += 1
            send(view, [(_gap_report(gap), gap.side)], None, None)
    for view in views.values():
        send(view, view.end(), None, None)

    summary.connections = len(reassembler.connections)
    for view in views.values():
        if view.status == "amqp":
            summary.amqp += 1
        summary.lines.append(view.summary())
    return summary


def _gap_report(gap: StreamGap) -> Report:
    return Report(
        ReportKind.ERROR,
        f"{gap.missing} octets missing from the capture at stream offset {gap.offset}; the "
        f"{gap.stranded} captured octets after them are not decoded",
        gap.offset,
    )
