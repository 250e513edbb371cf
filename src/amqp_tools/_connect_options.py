"""The connection options of rabbitmq-c's tools (``--url``, ``--server``, ``--port``,
``--vhost``, ``--username``, ``--password``, ``--heartbeat``, ``--authfile``, ``--ssl``,
``--cacert``, ``--key``, ``--cert``), with its rules: ``--url`` excludes the options it already
says, and ``--authfile`` excludes ``--username``/``--password``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Final

from ._cli import UsageError

if TYPE_CHECKING:
    from amqp_sansio.client import ConnectionParameters

    from ._cli import ArgumentParser

__all__ = ["DEFAULT_URL", "add_connection_options", "connection_parameters"]

DEFAULT_URL: Final = "amqp://guest:guest@localhost:5672/"
#: Options that --url already covers: rabbitmq-c refuses them together.
_URL_EXCLUDES: Final = ("server", "port", "vhost", "username", "password", "authfile")


def add_connection_options(parser: ArgumentParser) -> None:
    group = parser.add_argument_group("connection options")
    group.add_argument(
        "-u",
        "--url",
        metavar="amqp://...",
        help=f"the AMQP URL to connect to (default {DEFAULT_URL})",
    )
    group.add_argument(
        "-s",
        "--server",
        metavar="HOST",
        help="the AMQP server to connect to (HOST:PORT is accepted, and deprecated as in "
        "rabbitmq-c: use --port)",
    )
    group.add_argument(
        "--port", type=_port, help="the port to connect on (default 5672, 5671 with --ssl)"
    )
    group.add_argument("--vhost", help="the vhost to use when connecting (default /)")
    group.add_argument("--username", help="the username to login with (default guest)")
    group.add_argument("--password", help="the password to login with (default guest)")
    group.add_argument(
        "--heartbeat",
        type=_heartbeat,
        metavar="SECONDS",
        help="heartbeat interval, set to 0 to disable (the default)",
    )
    group.add_argument(
        "--authfile",
        metavar="FILE",
        help="a file with the credentials: 'username:NAME' and 'password:SECRET' lines",
    )
    group.add_argument("--ssl", action="store_true", help="connect over TLS")
    group.add_argument(
        "--cacert", metavar="FILE", help="the CA certificates to verify the server with"
    )
    group.add_argument("--key", metavar="FILE", help="the client's private key (with --cert)")
    group.add_argument("--cert", metavar="FILE", help="the client's certificate")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is in 1..65535, not {port}")
    return port


def _heartbeat(text: str) -> int:
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= seconds <= 65535:
        raise argparse.ArgumentTypeError(f"the heartbeat must be in 0..65535, not {seconds}")
    return seconds


def _split_server(server: str) -> tuple[str, str | None]:
    """``HOST``, ``HOST:PORT``, ``[IPV6]`` or ``[IPV6]:PORT``; a bare IPv6 address has no port."""
    if server.startswith("["):
        host, bracket, rest = server[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise UsageError(f"--server: cannot read {server!r} as [ADDRESS] or [ADDRESS]:PORT")
        return host, rest[1:] if rest else None
    if server.count(":") == 1:
        host, _, port = server.partition(":")
        return host, port
    return server, None


def _read_authfile(path: str) -> tuple[str, str]:
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        raise UsageError(f"--authfile: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--authfile: {path} is not UTF-8 text") from None
    if len(lines) != 2 or not lines[0].startswith("username:"):
        raise UsageError(
            f"--authfile: {path} must hold two lines, 'username:NAME' then 'password:SECRET'"
        )
    if not lines[1].startswith("password:"):
        raise UsageError(f"--authfile: the second line of {path} must start with 'password:'")
    return lines[0].removeprefix("username:"), lines[1].removeprefix("password:")


def connection_parameters(args: argparse.Namespace, connection_name: str) -> ConnectionParameters:
    """The parameters the options describe.

    :raises UsageError: conflicting options, a bad URL or an unreadable authfile.
    """
    from amqp_sansio.client import ConnectionParameters  # after the options were parsed

    if args.url is not None:
        given = [f"--{name}" for name in _URL_EXCLUDES if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{given[0]} and --url cannot be used together")
        if args.ssl and not args.url.lower().startswith("amqps:"):
            raise UsageError("--ssl asks for TLS but the --url is not amqps://")
    if args.authfile is not None and (args.username is not None or args.password is not None):
        raise UsageError("--authfile and --username/--password cannot be used together")
    try:
        base = ConnectionParameters.from_url(args.url if args.url is not None else DEFAULT_URL)
    except ValueError as exc:
        raise UsageError(f"bad --url: {exc}") from None
    host, port = base.host, base.port
    tls = base.tls or args.ssl
    if args.url is None:
        port = 5671 if tls else 5672
    if args.server is not None:
        host, port_text = _split_server(args.server)
        if port_text is not None:
            if args.port is not None:
                raise UsageError("both --server and --port give the port")
            try:
                port = _port(port_text)
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"--server: {exc}") from None
    if args.port is not None:
        port = args.port
    username, password = base.username, base.password
    if args.authfile is not None:
        username, password = _read_authfile(args.authfile)
    if args.username is not None:
        username = args.username
    if args.password is not None:
        password = args.password
    if args.key is not None and args.cert is None:
        raise UsageError("--key needs --cert")
    if not tls and (args.cacert or args.cert):
        raise UsageError("--cacert and --cert need --ssl (or an amqps:// URL)")
    try:
        return ConnectionParameters(
            host=host,
            tls=tls,
            port=port,
            virtual_host=base.virtual_host if args.vhost is None else args.vhost,
            username=username,
            password=password,
            auth_mechanism=base.auth_mechanism,
            heartbeat=(base.heartbeat or 0) if args.heartbeat is None else args.heartbeat,
            frame_max=base.frame_max,
            channel_max=base.channel_max,
            connection_timeout=base.connection_timeout,
            connection_name=base.connection_name or connection_name,
            cafile=args.cacert if args.cacert is not None else base.cafile,
            certfile=args.cert if args.cert is not None else base.certfile,
            keyfile=args.key if args.key is not None else base.keyfile,
            verify=base.verify,
            server_hostname=base.server_hostname,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
