"""``python -m amqp_broker --host 127.0.0.1 --port 5673 --user guest:guest [--vhost NAME]``.

Limits, timeouts and flow control take RabbitMQ's defaults (see ``--help`` and
:class:`amqp_broker.BrokerOptions`); ``--tls-port`` with ``--tls-cert``/``--tls-key`` adds an
``amqps`` listener. On SIGINT or SIGTERM every client gets ``connection.close`` 320
CONNECTION_FORCED and a few seconds to answer, as from RabbitMQ.
"""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
from functools import partial
from typing import TYPE_CHECKING

import trio

from ._options import BrokerOptions
from ._server import make_broker, serve, shutdown
from ._versions import SERVED_VERSIONS

if TYPE_CHECKING:
    from amqp_sansio import ProtocolVersion


def _user(text: str) -> tuple[str, str]:
    name, sep, password = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:PASSWORD, got {text!r}")
    return name, password


def _vhost_limit(text: str) -> tuple[str, int]:
    vhost, sep, count = text.rpartition(":")
    if not sep or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected VHOST:COUNT, got {text!r}")
    return vhost, int(count)


def _protocols(text: str) -> tuple[ProtocolVersion, ...]:
    names = [name.strip() for name in text.split(",")]
    try:
        return BrokerOptions(protocols=names).protocols
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: host, port, users and their permissions, virtual hosts, limits."""
    defaults = BrokerOptions()
    parser = argparse.ArgumentParser(
        prog="python -m amqp_broker",
        description="An in-memory AMQP broker (0-9-1, 0-9 and 0-8 on one port).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=5672, help="TCP port (0: any free port)")
    parser.add_argument(
        "--user",
        type=_user,
        action="append",
        metavar="NAME:PASSWORD",
        help="a user (repeatable; default guest:guest); may do everything everywhere unless "
        "--permissions names it",
    )
    parser.add_argument(
        "--permissions",
        nargs=5,
        action="append",
        default=[],
        metavar=("USER", "VHOST", "CONFIGURE", "WRITE", "READ"),
        help="as rabbitmqctl set_permissions: the user may then use only the vhosts named "
        "this way, with these regular expressions (repeatable)",
    )
    parser.add_argument(
        "--vhost",
        action="append",
        default=[],
        metavar="NAME",
        help="a virtual host besides / (repeatable)",
    )
    limits = parser.add_argument_group("limits and flow control (RabbitMQ's defaults)")
    limits.add_argument(
        "--handshake-timeout",
        type=float,
        default=defaults.handshake_timeout,
        metavar="SECONDS",
        help="drop a client that has not opened its connection by then (default %(default)s)",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="stop accepting while N connections are open (default: no limit)",
    )
    limits.add_argument(
        "--vhost-max-connections",
        type=_vhost_limit,
        action="append",
        default=[],
        metavar="VHOST:N",
        help="refuse connection.open on VHOST beyond N connections (530; repeatable)",
    )
    limits.add_argument(
        "--channel-max",
        type=int,
        default=defaults.channel_max,
        metavar="N",
        help="channels per connection (default %(default)s)",
    )
    limits.add_argument(
        "--memory-high-watermark",
        type=float,
        default=defaults.memory_high_watermark,
        metavar="FRACTION",
        help="block publishers above this fraction of RAM held (default %(default)s)",
    )
    limits.add_argument(
        "--memory-high-watermark-bytes",
        type=int,
        metavar="OCTETS",
        help="the watermark in octets (wins over the fraction)",
    )
    limits.add_argument(
        "--outbound-limit",
        type=int,
        default=defaults.outbound_limit,
        metavar="OCTETS",
        help="output a connection may have waiting before its consumers get nothing more "
        "(default %(default)s)",
    )
    limits.add_argument(
        "--consumer-timeout",
        type=float,
        default=defaults.consumer_timeout,
        metavar="SECONDS",
        help="close a channel whose delivery waited this long for its ack (406; default "
        "%(default)s)",
    )
    limits.add_argument(
        "--close-timeout",
        type=float,
        default=defaults.close_timeout,
        metavar="SECONDS",
        help="how long to wait for close-ok after connection.close, and on shutdown "
        "(default %(default)s)",
    )
    versions = parser.add_argument_group("protocol versions")
    versions.add_argument(
        "--protocols",
        type=_protocols,
        default=defaults.protocols,
        metavar="V[,V...]",
        help="the versions served, most preferred first: any other header gets the first "
        "one's header and a close (default "
        + ",".join(v.value for v in defaults.protocols)
        + "; served: "
        + ", ".join(v.value for v in SERVED_VERSIONS)
        + ")",
    )
    versions.add_argument(
        "--header-0-9",
        choices=("0-9-1", "0-9"),
        default=defaults.header_0_9.value,
        help="serve the header AMQP 1 1 0 9 as 0-9-1 (RabbitMQ's reading, the default) or as "
        "0-9 (qpid-python's)",
    )
    tls = parser.add_argument_group("TLS (amqps)")
    tls.add_argument("--tls-port", type=int, metavar="PORT", help="serve amqps on this port")
    tls.add_argument("--tls-cert", metavar="FILE", help="the server's certificate (PEM)")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log connections")
    # for bench/broker.py: write a cProfile of the whole run to FILE on exit
    parser.add_argument("--profile", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tls_port is not None and not (args.tls_cert and args.tls_key):
        parser.error("--tls-port needs --tls-cert and --tls-key")
    names = {name for name, _ in args.user or [("guest", "guest")]}
    for user, *_ in args.permissions:
        if user not in names:
            parser.error(f"--permissions names {user!r}, which no --user gives")
    return args


def _options(args: argparse.Namespace) -> BrokerOptions:
    return BrokerOptions(
        handshake_timeout=args.handshake_timeout,
        max_connections=args.max_connections,
        vhost_max_connections=dict(args.vhost_max_connections),
        channel_max=args.channel_max,
        memory_high_watermark=args.memory_high_watermark,
        memory_high_watermark_bytes=args.memory_high_watermark_bytes,
        outbound_limit=args.outbound_limit,
        consumer_timeout=args.consumer_timeout,
        close_timeout=args.close_timeout,
        protocols=args.protocols,
        header_0_9=args.header_0_9,
    )


async def _main(args: argparse.Namespace) -> None:
    users: dict[str, str] = dict(args.user or [("guest", "guest")])
    broker = make_broker(["/", *args.vhost], options=_options(args), users=users)
    for user, vhost, configure, write, read in args.permissions:
        broker.add_vhost(vhost)
        broker.set_permissions(user, vhost, configure, write, read)
    context = None
    if args.tls_port is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(
                    serve, broker, args.host, args.port, ssl_context=context, tls_port=args.tls_port
                )
            )
            ports = [str(listener.socket.getsockname()[1]) for listener in listeners]
            print(
                f"amqp_broker listening on {args.host}:{ports[0]}"
                + (f" (amqps on {args.host}:{ports[1]})" if len(ports) > 1 else ""),
                file=sys.stderr,
                flush=True,
            )
            async for signum in signals:
                print(
                    f"amqp_broker stopping ({signal.Signals(signum).name})",
                    file=sys.stderr,
                    flush=True,
                )
                await shutdown(broker)
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
