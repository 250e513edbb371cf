"""``amqp-consume``: consume messages, with the options of rabbitmq-c's amqp-consume."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import TYPE_CHECKING, Final

from ._cli import EXIT_COMMAND_FAILED, EXIT_OK, ArgumentParser, UsageError, run
from ._client_cli import failure
from ._connect_options import add_connection_options, connection_parameters

if TYPE_CHECKING:
    from collections.abc import Sequence

    import amqp_blocking

__all__ = ["consume_main"]

_PROG: Final = "amqp-consume"
#: basic.qos takes a 16-bit prefetch count.
_MAX_PREFETCH: Final = 65535

_DESCRIPTION = """\
Consume messages from an AMQP queue. For each message, COMMAND (with its ARGS) runs with the
body on its standard input, and the message is acknowledged when it exits with status 0;
without a COMMAND each body is written to standard output, followed by a newline. The options
are those of rabbitmq-c's amqp-consume (where COMMAND is required).

Without --queue, or with --exchange, --declare or --exclusive, a queue is declared first
(auto-delete; server-named without --queue) and, with --exchange, bound to it once per
comma-separated --routing-key. A server-named queue's name is printed on standard error once the
consumer is on.
"""

_EPILOG = """\
When COMMAND fails for a message, that message is returned to its queue (basic.reject with
requeue) and amqp-consume stops: rabbitmq-c leaves it unacknowledged and goes on. With
--no-ack the broker sends without waiting for acknowledgements, so messages it sent beyond
--count are lost when amqp-consume exits (as with rabbitmq-c).

exit status: 0 done (--count reached, --timeout passed, or the consumer was cancelled); 1 the
broker refused (login, vhost, a missing queue or exchange) or the connection was lost; 2 a bad
option or URL; 3 the broker could not be reached; 4 COMMAND failed; 130 interrupted.
"""


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog=_PROG,
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(parser)
    group = parser.add_argument_group("consumer options")
    group.add_argument("-q", "--queue", help="the queue to consume from")
    group.add_argument("-e", "--exchange", help="bind the queue to this exchange")
    group.add_argument(
        "-r", "--routing-key", help="the routing key to bind with (comma-separated: several)"
    )
    group.add_argument(
        "-d", "--declare", action="store_true", help="declare the queue (auto-delete) first"
    )
    group.add_argument(
        "-x", "--exclusive", action="store_true", help="declare the queue as exclusive"
    )
    group.add_argument("-A", "--no-ack", action="store_true", help="consume in no-ack mode")
    group.add_argument(
        "-c",
        "--count",
        type=_positive,
        metavar="LIMIT",
        help="stop consuming after this many messages are consumed",
    )
    group.add_argument(
        "-p",
        "--prefetch-count",
        type=_positive,
        metavar="LIMIT",
        help="receive only this many messages at a time from the server",
    )
    group.add_argument(
        "--timeout",
        type=_seconds,
        metavar="SECONDS",
        help="stop after this many seconds without a message (not in rabbitmq-c)",
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND [ARGS]",
        help="run for each message, with its body on standard input",
    )
    return parser


def _run_command(command: Sequence[str], body: bytes) -> str | None:
    """Run *command* with *body* on its standard input; None when it succeeded, else why not."""
    try:
        result = subprocess.run(command, input=body, check=False)
    except OSError as exc:
        return f"cannot run {command[0]!r}: {exc.strerror or exc}"
    if result.returncode < 0:
        return f"{command[0]!r} was killed by signal {-result.returncode}"
    if result.returncode:
        return f"{command[0]!r} exited with status {result.returncode}"
    return None


def _main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    import amqp_blocking  # after the options: --help never pays for it

    if args.routing_key is not None and args.exchange is None:
        raise UsageError(
            "--routing-key option requires an exchange name to be provided with --exchange"
        )
    params = connection_parameters(args, _PROG)
    try:
        conn = amqp_blocking.connect(params)
    except (amqp_blocking.AMQPError, OSError) as exc:
        return failure(_PROG, exc, params, "connecting")
    queue = args.queue or ""
    doing = "setting up the queue"
    try:
        with conn, conn.channel() as channel:
            if not args.queue or args.exchange or args.declare or args.exclusive:
                doing = f"queue.declare {queue!r}"
                declared = channel.queue_declare(queue, exclusive=args.exclusive, auto_delete=True)
                if not args.queue:
                    queue = declared.queue
            if args.exchange is not None:
                for key in (args.routing_key or "").split(","):
                    doing = f"queue.bind {queue!r} to {args.exchange!r} with {key!r}"
                    channel.queue_bind(queue, args.exchange, key)
            prefetch = _prefetch(args.count, args.prefetch_count)
            if prefetch:
                doing = f"basic.qos {prefetch}"
                channel.basic_qos(prefetch)
            doing = f"consuming from {queue!r}"
            return _consume(channel, queue, args)
    except (amqp_blocking.AMQPError, OSError) as exc:
        return failure(_PROG, exc, params, doing)


def _prefetch(count: int | None, prefetch_count: int | None) -> int:
    """The prefetch rabbitmq-c sets: --count when it fits, --prefetch-count when smaller."""
    prefetch = count if count is not None and count <= _MAX_PREFETCH else 0
    if (
        prefetch_count is not None
        and prefetch_count <= _MAX_PREFETCH
        and (not prefetch or prefetch_count < prefetch)
    ):
        prefetch = prefetch_count
    return prefetch


def _consume(channel: amqp_blocking.Channel, queue: str, args: argparse.Namespace) -> int:
    import amqp_blocking  # loaded already by _main

    out = sys.stdout.buffer
    received = 0
    with channel.basic_consume(queue, no_ack=args.no_ack) as consumer:
        if not args.queue:
            # Said once the consumer is on (rabbitmq-c says it after the declare): a script
            # reading it knows that what it publishes now is consumed.
            print(f"Server provided queue name: {queue}", file=sys.stderr, flush=True)
        while args.count is None or received < args.count:
            try:
                message = consumer.get(args.timeout)
            except amqp_blocking.ConsumerCancelledError:
                print(f"{_PROG}: the broker cancelled the consumer of {queue!r}", file=sys.stderr)
                return EXIT_OK
            if message is None:
                break
            received += 1
            if args.command:
                problem = _run_command(args.command, message.body)
                if problem is not None:
                    if not args.no_ack:
                        message.reject(requeue=True)
                    returned = "" if args.no_ack else "; the message went back to its queue"
                    print(f"{_PROG}: {problem}{returned}", file=sys.stderr)
                    return EXIT_COMMAND_FAILED
            else:
                out.write(message.body + b"\n")
                out.flush()
            if not args.no_ack:
                message.ack()
    return EXIT_OK


def consume_main(argv: Sequence[str] | None = None) -> int:
    """The ``amqp-consume`` command; returns its exit status (``--help`` for everything)."""
    return run(_PROG, _main, argv)
