"""``python -m amqp_broker --host 127.0.0.1 --port 5673 --user guest:guest [--vhost NAME]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from functools import partial

import trio

from ._server import make_broker, serve


def _user(text: str) -> tuple[str, str]:
    name, sep, password = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:PASSWORD, got {text!r}")
    return name, password


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: host, port, users and extra virtual hosts."""
    parser = argparse.ArgumentParser(
        prog="python -m amqp_broker", description="An in-memory AMQP 0-9-1 broker."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5672, help="TCP port (0: any free port)")
    parser.add_argument(
        "--user",
        type=_user,
        action="append",
        metavar="NAME:PASSWORD",
        help="a user (repeatable; default guest:guest)",
    )
    parser.add_argument(
        "--vhost",
        action="append",
        default=[],
        metavar="NAME",
        help="a virtual host besides / (repeatable)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log connections")
    # for bench/broker.py: write a cProfile of the whole run to FILE on exit
    parser.add_argument("--profile", metavar="FILE", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


async def _main(args: argparse.Namespace) -> None:
    users = dict(args.user or [("guest", "guest")])
    broker = make_broker(["/", *args.vhost])
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(serve, broker, args.host, args.port, users=users)
            )
            port = listeners[0].socket.getsockname()[1]
            print(f"amqp_broker listening on {args.host}:{port}", file=sys.stderr, flush=True)
            async for signum in signals:
                print(
                    f"amqp_broker stopping ({signal.Signals(signum).name})",
                    file=sys.stderr,
                    flush=True,
                )
                nursery.cancel_scope.cancel()
                break


def main(argv: list[str] | None = None) -> int:
    """Run the broker until interrupted."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
        try:
            profiler.runcall(trio.run, _main, args)
        finally:
            profiler.dump_stats(args.profile)
        return 0
    trio.run(_main, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
