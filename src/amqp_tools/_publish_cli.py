"""``amqp-publish``: publish a message, with the options of rabbitmq-c's amqp-publish."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Final

from ._cli import EXIT_OK, ArgumentParser, UsageError, run
from ._client_cli import failure
from ._connect_options import add_connection_options, connection_parameters

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from amqp_sansio import FieldTable

__all__ = ["publish_main"]

_PROG: Final = "amqp-publish"

_DESCRIPTION = """\
Publish a message to an AMQP broker: the body given with --body, else read from standard input
(each line a message with --line-buffered). The options are those of rabbitmq-c's amqp-publish.
Unlike it, amqp-publish waits for the broker's publisher confirm, so exit status 0 means the
broker took the message; --mandatory also fails when no queue receives it.
"""

_EPILOG = """\
exit status: 0 published and confirmed; 1 the broker refused (login, vhost, a missing
exchange, a nack, an unroutable --mandatory message) or the connection was lost; 2 a bad option
or URL; 3 the broker could not be reached; 130 interrupted.
"""


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=_PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(parser)
    group = parser.add_argument_group("message options")
    group.add_argument(
        "-e", "--exchange", help="the exchange to publish to (default: the default exchange)"
    )
    group.add_argument("-r", "--routing-key", help="the routing key to publish with")
    group.add_argument(
        "-p", "--persistent", action="store_true", help="use the persistent delivery mode"
    )
    group.add_argument("-C", "--content-type", help="the content-type for the message")
    group.add_argument("-E", "--content-encoding", help="the content-encoding for the message")
    group.add_argument("-t", "--reply-to", help="the reply-to for the message")
    group.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar='"KEY: VALUE"',
        help="set a message header (may be given several times)",
    )
    group.add_argument("-b", "--body", help="the message body (default: standard input)")
    group.add_argument(
        "-l",
        "--line-buffered",
        action="store_true",
        help="publish each line of standard input as a message (without its line ending)",
    )
    group.add_argument(
        "-m",
        "--mandatory",
        action="store_true",
        help="fail when no queue receives the message (not in rabbitmq-c)",
    )
    return parser


def _headers(items: Sequence[str]) -> FieldTable | None:
    headers: FieldTable = {}
    for item in items:
        key, colon, value = item.partition(":")
        if not colon or not key:
            raise UsageError(f'--header {item!r}: expected "KEY: VALUE"')
        headers[key] = value.lstrip(" ")
    return headers or None


def _bodies(args: argparse.Namespace) -> Iterator[bytes]:
    if args.body is not None:
        yield args.body.encode()
    elif args.line_buffered:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n") if line.endswith(b"\n") else line
    else:
        yield sys.stdin.buffer.read()


def _main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    # After the options: --help and a usage error never pay for the client's import.
    import amqp_blocking
    from amqp_sansio import BasicProperties

    if args.exchange is None and args.routing_key is None:
        raise UsageError("neither exchange nor routing key specified")
    if args.body is not None and args.line_buffered:
        raise UsageError("--body and --line-buffered cannot be used together")
    properties = BasicProperties(
        delivery_mode=2 if args.persistent else 1,
        content_type=args.content_type,
        content_encoding=args.content_encoding,
        reply_to=args.reply_to,
        headers=_headers(args.header),
    )
    params = connection_parameters(args, _PROG)
    try:
        conn = amqp_blocking.connect(params)
    except (amqp_blocking.AMQPError, OSError) as exc:
        return failure(_PROG, exc, params, "connecting")
    exchange = args.exchange or ""
    routing_key = args.routing_key or ""
    doing = f"publishing to exchange {exchange!r} with routing key {routing_key!r}"
    try:
        with conn, conn.channel() as channel:
            channel.confirm_select()
            for body in _bodies(args):
                channel.basic_publish(
                    body,
                    exchange=exchange,
                    routing_key=routing_key,
                    properties=properties,
                    mandatory=args.mandatory,
                )
    except (amqp_blocking.AMQPError, OSError) as exc:
        return failure(_PROG, exc, params, doing)
    return EXIT_OK


def publish_main(argv: Sequence[str] | None = None) -> int:
    """The ``amqp-publish`` command; returns its exit status (``--help`` for everything)."""
    return run(_PROG, _main, argv)
