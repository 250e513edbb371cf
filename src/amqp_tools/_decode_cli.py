"""``amqp-decode``: print the AMQP inside pcap and pcapng captures."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Final, TextIO

from ._capture import CaptureError, open_capture
from ._cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, ArgumentParser, run
from ._decode import Line, decode_segments
from ._decoders import ReportKind, decodable_versions
from ._format import FormatOptions

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["decode_main"]

_PROG: Final = "amqp-decode"

_DESCRIPTION = """\
Decode the AMQP connections in pcap and pcapng captures (gzipped too): each TCP stream is
reassembled (both directions, in sequence order; retransmitted and out-of-order segments are
handled) and every frame is printed with the packet that completed it: methods with their
arguments, content headers with their properties, and bodies.

A connection is recognised by the protocol header its client sends first, whatever the ports.
Decoded: {versions} (every version the core speaks). Connections speaking another version
(1.0, unknown version octets) are named and skipped; other TCP traffic gets one line saying it
is not AMQP.
"""

_EPILOG = """\
Each frame line reads: packet number, seconds since the first packet, [connection], C>S
(client to server) or S>C, channel, and the frame. Passwords in connection.start-ok are hidden
unless --show-credentials is given.

exit status: 0 decoded without problems; 1 problems were found and reported (a malformed
frame, octets missing from the capture, a truncated file, no AMQP connection at all); 2 a bad
option, or a file that cannot be read as a capture.
"""


def _body_limit(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of octets or 'all', not {text!r}"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of octets >= 0, not {value}")
    return value


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=_PROG,
        description=_DESCRIPTION.format(versions=", ".join(decodable_versions())),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("captures", nargs="+", metavar="CAPTURE", help="pcap or pcapng files")
    parser.add_argument(
        "--max-body",
        type=_body_limit,
        default=256,
        metavar="N",
        help="octets of each body frame to print (default 256; 'all' for every one)",
    )
    parser.add_argument(
        "-x", "--hex", action="store_true", help="print bodies as a hex dump (offset, hex, text)"
    )
    parser.add_argument("--no-heartbeats", action="store_true", help="leave heartbeat frames out")
    parser.add_argument(
        "--show-credentials",
        action="store_true",
        help="show the password in connection.start-ok and secure-ok (hidden by default)",
    )
    return parser


def _write_line(line: Line, out: TextIO) -> None:
    where = "end" if line.packet is None else f"#{line.packet}"
    when = "" if line.time is None else f"{line.time:.6f}"
    conn = "" if line.connection is None else f"[{line.connection}]"
    if line.kind is ReportKind.MORE:
        out.write(f"{'':28}{line.text}\n")
        return
    prefix = "error: " if line.kind is ReportKind.ERROR else ""
    arrow = f" {line.arrow}" if line.arrow else ""
    out.write(f"{where:<8} {when:>11} {conn:>5}{arrow} {prefix}{line.text}\n")


def _decode_file(path: str, options: FormatOptions, out: TextIO) -> tuple[int, bool]:
    """Decode one capture; returns the problems found and whether it held AMQP.

    :raises CaptureError: it is not a capture.
    """
    with open_capture(path) as capture:
        kind = f"{capture.format}, gzipped" if capture.compressed else capture.format
        out.write(f"{path} ({kind})\n")
        summary = decode_segments(capture.segments(), options, lambda line: _write_line(line, out))
        problems = summary.errors
        for problem in capture.problems:
            problems += 1
            _write_line(Line(ReportKind.ERROR, f"capture file: {problem.message}"), out)
        out.write(
            f"{path}: {capture.packets} packets ({capture.not_tcp} not TCP), "
            f"{summary.connections} TCP connections, {summary.amqp} AMQP\n"
        )
        for text in summary.lines:
            out.write(f"  {text}\n")
        if not summary.amqp and not any("not decoded" in text for text in summary.lines):
            problems += 1
            out.write(
                f"error: no AMQP connection in {path} (none of its TCP connections starts with "
                "an AMQP protocol header)\n"
            )
        return problems, summary.amqp > 0


def _main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    options = FormatOptions(
        max_body=args.max_body,
        hex_bodies=args.hex,
        heartbeats=not args.no_heartbeats,
        show_credentials=args.show_credentials,
    )
    out = sys.stdout
    status = EXIT_OK
    problems = 0
    for path in args.captures:
        try:
            found, _ = _decode_file(path, options, out)
        except CaptureError as exc:
            out.flush()
            print(f"{_PROG}: error: {exc}", file=sys.stderr)
            status = EXIT_USAGE
            continue
        problems += found
    out.flush()
    if problems:
        print(
            f"{_PROG}: {problems} problem{'s' if problems > 1 else ''} found (see the lines "
            "marked error:)",
            file=sys.stderr,
        )
        if status == EXIT_OK:
            status = EXIT_PROBLEMS
    return status


def decode_main(argv: Sequence[str] | None = None) -> int:
    """The ``amqp-decode`` command; returns its exit status (``--help`` for everything)."""
    return run(_PROG, _main, argv)
