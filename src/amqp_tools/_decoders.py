"""Protocol decoders, chosen by the protocol header a connection starts with.

A connection's client sends an 8-octet protocol header before anything else; its version octets
pick the decoder from :data:`DECODERS`. A version the core cannot decode yet still gets a clear
line ("not decoded yet") instead of a failure, and a new version plugs in with one entry: a
factory building a :class:`StreamDecoder`, which is given each side's octets in order (after
the header) and says what they are.

AMQP 0-8, 0-9 and 0-9-1 share one framing, so :class:`FrameDecoder` serves all three with the
core's method tables of each version (it takes them as parameters, as ``FrameReader`` does);
:class:`AssemblyDecoder` reads 0-10 (frames, then whole controls and commands, with the
``amqp_sansio.v0_10`` frame layer). 1.0 is not decoded.
"""

from __future__ import annotations

import enum
import re
from typing import TYPE_CHECKING, Final, Protocol, TypeAlias, final

import attrs

from amqp_sansio import AMQP_0_8, AMQP_0_9, ContentProperties, Method, RemoteProtocolError
from amqp_sansio.framing import (
    ContentBodyFrame,
    ContentHeaderFrame,
    FrameReader,
    HeartbeatFrame,
    MethodFrame,
    ProtocolVersion,
)
from amqp_sansio.v0_10 import framing as framing_0_10

from ._format import (
    FormatOptions,
    format_body,
    format_compound,
    format_method,
    format_properties,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from ._reassembly import Side

__all__ = [
    "DECODERS",
    "AssemblyDecoder",
    "DecoderFactory",
    "FrameDecoder",
    "Report",
    "ReportKind",
    "StreamDecoder",
    "decodable_versions",
    "describe_version",
]

#: FrameReader's "no limit": a capture is decoded whatever frame_max the peers agreed on.
_NO_FRAME_LIMIT: Final = 0xFFFF_FFFF
_OFFSET_IN_MESSAGE: Final = re.compile(r"at stream offset (\d+)")


@final
class ReportKind(enum.Enum):
    """What a line of the decoder's output is."""

    #: A decoded frame or protocol header.
    FRAME = "frame"
    #: A further line of the one before (a hex dump row).
    MORE = "more"
    #: Something worth knowing that is not wrong (a connection skipped, a capture ending
    #: inside a frame).
    NOTE = "note"
    #: Something wrong: a malformed frame, octets the capture lacks, a corrupt file.
    ERROR = "error"


@final
@attrs.frozen
class Report:
    """One line a decoder produced, with the stream offset it is about (where one applies)."""

    kind: ReportKind
    text: str
    offset: int | None = None


class StreamDecoder(Protocol):
    """Decodes the two streams of one connection, past the client's protocol header."""

    def feed(self, side: Side, data: bytes, offset: int) -> Iterator[Report]:
        """*side*'s next octets, which start at TCP stream *offset*, in order."""
        ...

    def end(self, side: Side) -> Iterator[Report]:
        """*side*'s stream ended (or the capture did)."""
        ...

    def frames(self, side: Side) -> int:
        """Frames decoded from *side* so far."""
        ...


DecoderFactory: TypeAlias = "Callable[[FormatOptions], StreamDecoder]"


@final
class FrameDecoder:
    """The AMQP 0-8/0-9/0-9-1 framing, with the method and content property tables of one
    version. After a malformed frame a side is not decoded further: nothing in the framing
    marks where the next frame starts."""

    def __init__(
        self,
        options: FormatOptions,
        methods: Mapping[int, type[Method]] | None = None,
        properties: Mapping[int, type[ContentProperties]] | None = None,
    ) -> None:
        self._options = options
        self._methods = methods
        self._properties = properties
        self._readers: dict[Side, FrameReader] = {}
        self._start: dict[Side, int] = {}  # TCP stream offset of each reader's first octet
        self._fed: dict[Side, int] = {}
        self._frames: dict[Side, int] = {}
        self._broken: set[Side] = set()

    def _new_reader(self) -> FrameReader:
        if self._methods is None or self._properties is None:
            return FrameReader(frame_max=_NO_FRAME_LIMIT)
        return FrameReader(
            frame_max=_NO_FRAME_LIMIT, methods=self._methods, properties=self._properties
        )

    def frames(self, side: Side) -> int:
        return self._frames.get(side, 0)

    def feed(self, side: Side, data: bytes, offset: int) -> Iterator[Report]:
        if side in self._broken:
            return
        reader = self._readers.get(side)
        if reader is None:
            reader = self._readers[side] = self._new_reader()
            self._start[side] = offset
            self._fed[side] = 0
            self._frames[side] = 0
        reader.feed(data)
        self._fed[side] += len(data)
        start = self._start[side]
        while True:
            frame_at = start + self._fed[side] - reader.buffered
            try:
                frame = reader.next_frame()
            except RemoteProtocolError as exc:
                self._broken.add(side)
                # The reader counts offsets from its first octet; say them in the TCP stream's.
                detail = _OFFSET_IN_MESSAGE.sub(
                    lambda found: f"at stream offset {int(found[1]) + start}", str(exc)
                )
                rest = start + self._fed[side] - frame_at
                yield Report(
                    ReportKind.ERROR,
                    f"malformed frame: {detail}; the rest of this side ({rest} octets captured "
                    "so far) is not decoded",
                    frame_at,
                )
                return
            if frame is None:
                return
            self._frames[side] += 1
            yield from self._describe(frame, frame_at)

    def end(self, side: Side) -> Iterator[Report]:
        reader = self._readers.get(side)
        if reader is None or side in self._broken or not reader.buffered:
            return
        at = self._start[side] + self._fed[side] - reader.buffered
        yield Report(
            ReportKind.NOTE,
            f"the stream ends inside a frame: {reader.buffered} octets of an incomplete frame",
            at,
        )

    def _describe(
        self, frame: MethodFrame | ContentHeaderFrame | ContentBodyFrame | HeartbeatFrame, at: int
    ) -> Iterator[Report]:
        options = self._options
        if isinstance(frame, MethodFrame):
            text = format_method(frame.method, options)
            yield Report(ReportKind.FRAME, f"ch{frame.channel} {text}", at)
        elif isinstance(frame, ContentHeaderFrame):
            props = format_properties(frame.properties)
            yield Report(
                ReportKind.FRAME,
                f"ch{frame.channel} content header class={frame.class_id} "
                f"body_size={frame.body_size} {props}",
                at,
            )
        elif isinstance(frame, ContentBodyFrame):
            first, *more = format_body(bytes(frame.payload), options)
            yield Report(
                ReportKind.FRAME,
                f"ch{frame.channel} content body {len(frame.payload)} octets: {first}",
                at,
            )
            for line in more:
                yield Report(ReportKind.MORE, line, at)
        elif options.heartbeats:
            yield Report(ReportKind.FRAME, "heartbeat", at)


@final
class AssemblyDecoder:
    """AMQP 0-10: frames (12-octet headers), joined into controls and commands with their
    header structs and body. After a malformed frame or segment a side is not decoded
    further."""

    def __init__(self, options: FormatOptions) -> None:
        self._options = options
        self._readers: dict[Side, tuple[framing_0_10.FrameReader, framing_0_10.AssemblyReader]] = {}
        self._start: dict[Side, int] = {}
        self._fed: dict[Side, int] = {}
        self._frames: dict[Side, int] = {}
        self._broken: set[Side] = set()

    def frames(self, side: Side) -> int:
        return self._frames.get(side, 0)

    def feed(self, side: Side, data: bytes, offset: int) -> Iterator[Report]:
        if side in self._broken:
            return
        readers = self._readers.get(side)
        if readers is None:
            readers = self._readers[side] = (
                framing_0_10.FrameReader(),
                framing_0_10.AssemblyReader(max_message_size=_NO_FRAME_LIMIT),
            )
            self._start[side] = offset
            self._fed[side] = 0
            self._frames[side] = 0
        frames, assemblies = readers
        frames.feed(data)
        self._fed[side] += len(data)
        start = self._start[side]
        while True:
            frame_at = start + self._fed[side] - frames.buffered
            try:
                frame = frames.next_frame()
                if frame is None:
                    return
                self._frames[side] += 1
                assembly = assemblies.receive(frame)
            except RemoteProtocolError as exc:
                self._broken.add(side)
                yield Report(
                    ReportKind.ERROR,
                    f"malformed frame or segment at stream offset {frame_at}: {exc}; the rest "
                    "of this side is not decoded",
                    frame_at,
                )
                return
            if assembly is not None:
                yield from self._describe(assembly, frame_at)

    def end(self, side: Side) -> Iterator[Report]:
        readers = self._readers.get(side)
        if readers is None or side in self._broken or not readers[0].buffered:
            return
        at = self._start[side] + self._fed[side] - readers[0].buffered
        yield Report(
            ReportKind.NOTE,
            f"the stream ends inside a frame: {readers[0].buffered} octets of an incomplete frame",
            at,
        )

    def _describe(self, assembly: framing_0_10.Assembly, at: int) -> Iterator[Report]:
        options = self._options
        sync = " sync" if assembly.sync else ""
        yield Report(
            ReportKind.FRAME,
            f"ch{assembly.channel} {format_compound(assembly.op, options)}{sync}",
            at,
        )
        for struct in assembly.headers or ():
            yield Report(ReportKind.MORE, f"  header {format_compound(struct, options)}", at)
        if assembly.body is not None:
            first, *more = format_body(assembly.body, options)
            yield Report(ReportKind.MORE, f"  body {len(assembly.body)} octets: {first}", at)
            for line in more:
                yield Report(ReportKind.MORE, line, at)


def _decode_0_9_1(options: FormatOptions) -> StreamDecoder:
    return FrameDecoder(options)  # the core's default tables are 0-9-1's


def _decode_0_9(options: FormatOptions) -> StreamDecoder:
    return FrameDecoder(options, AMQP_0_9.methods, AMQP_0_9.properties)


def _decode_0_8(options: FormatOptions) -> StreamDecoder:
    return FrameDecoder(options, AMQP_0_8.methods, AMQP_0_8.properties)


def _decode_0_10(options: FormatOptions) -> StreamDecoder:
    return AssemblyDecoder(options)


#: The decoder of each protocol version; None where there is none yet.
DECODERS: Final[dict[ProtocolVersion, DecoderFactory | None]] = {
    ProtocolVersion.AMQP_0_9_1: _decode_0_9_1,
    ProtocolVersion.AMQP_0_9: _decode_0_9,
    ProtocolVersion.AMQP_0_8: _decode_0_8,
    ProtocolVersion.AMQP_0_10: _decode_0_10,
    ProtocolVersion.AMQP_1_0: None,
}

#: Versions whose server answers the client's protocol header with its own before anything
#: else (0-10); in the others a server's header means it refuses the client's version.
ECHOED_HEADER: Final = frozenset({ProtocolVersion.AMQP_0_10})


def describe_version(version: ProtocolVersion, octets: tuple[int, int, int, int]) -> str:
    """``AMQP 0-9-1``, or the raw version octets for a header the core does not know."""
    if version is ProtocolVersion.UNKNOWN:
        return "AMQP with unknown version octets {}.{}.{}.{}".format(*octets)
    return f"AMQP {version.value}"


def decodable_versions() -> list[str]:
    """The versions with a decoder, for messages."""
    return [f"AMQP {v.value}" for v, factory in DECODERS.items() if factory is not None]
