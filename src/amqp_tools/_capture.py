"""Reading pcap and pcapng files with scapy: TCP segments out, with what went wrong said plainly.

scapy (the ``tools`` extra) reads both formats, gzipped or not, and dissects every link type it
knows (Ethernet, Linux cooked capture v1 and v2, BSD loopback, raw IP, VLAN tags, ...). What it
does not do is fail loudly: a truncated or corrupt file ends the packets with a log warning,
and a record cut short by the end of the file may even end them silently. So the file is read
through :class:`_ShortReadWatch`, which notices a read that the end of the file cut short, and
scapy's warnings are collected and reported as :class:`CaptureProblem` values instead of being
printed.
"""

from __future__ import annotations

import gzip
import logging
import zlib
from typing import TYPE_CHECKING, Final, final

import attrs

from ._reassembly import Endpoint, TcpSegment

if TYPE_CHECKING:
    import io
    from collections.abc import Iterator
    from types import TracebackType

    from scapy.packet import Packet

__all__ = ["Capture", "CaptureError", "CaptureProblem", "open_capture"]

_GZIP_MAGIC: Final = b"\x1f\x8b"
_INSTALL_HINT: Final = (
    "amqp-decode reads captures with scapy, which is not installed: "
    "pip install 'amqp-sansio[tools]'"
)


class CaptureError(Exception):
    """The file cannot be read as a capture at all (missing, not pcap or pcapng, ...)."""


@final
@attrs.frozen
class CaptureProblem:
    """Something wrong with the capture that did not stop the reading of what came before."""

    message: str
    #: The last packet read before it, if any.
    after_packet: int | None = None


@final
class _ShortReadWatch:
    """The file object scapy reads: passes reads through, unbuffered so their sizes are scapy's
    own, and remembers whether one came back short. scapy asks for exactly the size of the next
    header or record; only the end of the file answers with fewer octets, and a clean end
    answers with none, so a short read means the file ends inside a record."""

    def __init__(self, raw: io.BufferedReader | gzip.GzipFile, name: str) -> None:
        self._raw = raw
        self.name = name
        self.cut_short = False

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if 0 < len(data) < size:
            self.cut_short = True
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def close(self) -> None:
        self._raw.close()


@final
class _ScapyWarnings(logging.Handler):
    """Collects what scapy logs while reading, instead of letting it print."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _import_scapy() -> None:
    try:
        import scapy  # noqa: F401
    except ImportError:
        raise CaptureError(_INSTALL_HINT) from None


@final
class Capture:
    """An open capture file; iterate :meth:`segments`, then read :attr:`problems`."""

    def __init__(self, path: str) -> None:
        _import_scapy()
        # Layers first: importing them fills conf.l2types, which the readers look link types up in.
        import scapy.layers.inet
        import scapy.layers.inet6
        import scapy.layers.l2  # noqa: F401
        from scapy.error import Scapy_Exception
        from scapy.utils import PcapReader

        self.path = path
        #: Problems found so far; complete once :meth:`segments` is exhausted.
        self.problems: list[CaptureProblem] = []
        #: Packets read, and how many of them carried no TCP segment.
        self.packets = 0
        self.not_tcp = 0
        self._logger = logging.getLogger("scapy")
        self._handler = _ScapyWarnings()
        self._saved = (list(self._logger.handlers), self._logger.propagate)
        self._logger.handlers = [self._handler]
        self._logger.propagate = False
        try:
            self._file = open(path, "rb")  # noqa: SIM115  (closed by close())
        except OSError as exc:
            self._restore_logging()
            raise CaptureError(f"cannot open {path}: {exc.strerror or exc}") from None
        try:
            head = self._file.peek(2)[:2]
            if not head:
                raise CaptureError(f"{path} is empty")
            raw: io.BufferedReader | gzip.GzipFile = self._file
            #: Whether the file is gzipped (scapy and Wireshark read those too).
            self.compressed = head == _GZIP_MAGIC
            if self.compressed:
                raw = gzip.GzipFile(fileobj=self._file)
            self._watch = _ShortReadWatch(raw, path)
            try:
                # scapy types the file as IO[bytes]; it calls only read, seek and close.
                self._reader = PcapReader(self._watch)  # type: ignore[arg-type]
            except (Scapy_Exception, EOFError, OSError, zlib.error) as exc:
                raise CaptureError(f"{path} is not a pcap or pcapng capture ({exc})") from None
        except BaseException:
            self._file.close()
            self._restore_logging()
            raise
        self.format = "pcapng" if type(self._reader).__name__ == "PcapNgReader" else "pcap"

    def __enter__(self) -> Capture:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self._restore_logging()

    def _restore_logging(self) -> None:
        handlers, propagate = self._saved
        self._logger.handlers = handlers
        self._logger.propagate = propagate

    def segments(self) -> Iterator[TcpSegment]:
        """The TCP segments, in capture order; other packets are counted and skipped."""
        from scapy.error import Scapy_Exception

        start: float | None = None
        iterator = iter(self._reader)
        while True:
            seen = len(self._handler.messages)
            try:
                packet = next(iterator)
            except StopIteration:
                break
            except (Scapy_Exception, OSError, EOFError, zlib.error, ValueError) as exc:
                self._problem(f"the capture is corrupt after packet {self.packets}: {exc}")
                break
            self.packets += 1
            self._report_warnings(seen, during=self.packets)
            stamp = float(packet.time)
            if start is None:
                start = stamp
            segment = _tcp_segment(packet, self.packets, stamp - start)
            if segment is None:
                self.not_tcp += 1
            else:
                yield segment
        self._report_end()

    def _report_warnings(self, seen: int, during: int) -> None:
        for message in self._handler.messages[seen:]:
            self._problem(f"packet {during}: {_plain(message)}")
        del self._handler.messages[seen:]

    def _report_end(self) -> None:
        leftover = self._handler.messages
        for message in leftover:
            self._problem(f"after packet {self.packets}: {_plain(message)}")
        leftover.clear()
        if self._watch.cut_short and not any("truncated" in p.message for p in self.problems):
            self._problem(
                f"the file ends inside a record after packet {self.packets}: it is truncated"
            )

    def _problem(self, message: str) -> None:
        self.problems.append(CaptureProblem(message, self.packets or None))


def _plain(message: str) -> str:
    """A scapy warning without its reader's prefix."""
    return message.removeprefix("PcapNg: ").removeprefix("Pcap: ")


def open_capture(path: str) -> Capture:
    """Open *path* (pcap or pcapng, optionally gzipped).

    :raises CaptureError: it cannot be opened or is not a capture, or scapy is missing.
    """
    return Capture(path)


def _tcp_segment(packet: Packet, number: int, time: float) -> TcpSegment | None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Padding

    tcp = packet.getlayer(TCP)
    # type() and not isinstance(): TCPerror, the copy quoted inside an ICMP error, is a TCP.
    if tcp is None or type(tcp) is not TCP:
        return None
    ip = tcp.underlayer
    while ip is not None and not isinstance(ip, (IP, IPv6)):
        ip = ip.underlayer
    if ip is None or type(ip) not in (IP, IPv6):
        return None
    if isinstance(ip, IP) and (int(ip.flags) & 1 or int(ip.frag)):
        return None  # an IP fragment: not reassembled
    payload = bytes(tcp.payload)
    padding = tcp.getlayer(Padding)
    if padding is not None:
        payload = payload[: len(payload) - len(bytes(padding))]
    flags = int(tcp.flags)
    return TcpSegment(
        packet=number,
        time=time,
        source=Endpoint(str(ip.src), int(tcp.sport)),
        destination=Endpoint(str(ip.dst), int(tcp.dport)),
        seq=int(tcp.seq),
        payload=payload,
        syn=bool(flags & 0x02),
        ack=bool(flags & 0x10),
        fin=bool(flags & 0x01),
        rst=bool(flags & 0x04),
    )
