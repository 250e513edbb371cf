"""``amqp-broker`` (and ``python -m amqp_broker``): the embedded broker as a command.

``amqp-broker --port 5673 --user guest:guest --vhost staging``, or ``amqp-broker --config
broker.toml``: every setting has a command-line option and a key in the TOML file (see
:data:`CONFIG_EXAMPLE` and ``docs/tools.md``); the command line wins over the file, which wins
over RabbitMQ's defaults (:class:`amqp_broker.BrokerOptions`). ``--tls-port`` with
``--tls-cert``/``--tls-key`` adds an ``amqps`` listener. On SIGINT or SIGTERM every client gets
``connection.close`` 320 CONNECTION_FORCED and a few seconds to answer, as from RabbitMQ.

Bad input (an unknown key, a wrong type, a missing file, a port in use) is one line on stderr
and exit status 2 (usage and configuration) or 1 (the broker could not start), never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import ssl
import sys
import tomllib
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ._options import BrokerOptions
from ._policies import Policy
from ._server import make_broker, management_url, serve, shutdown
from ._store import StoreError
from ._versions import SERVED_VERSIONS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from amqp_sansio import ProtocolVersion

    from ._broker import Broker

__all__ = ["CONFIG_EXAMPLE", "ConfigError", "load_config", "main", "parse_args"]

#: A configuration file with every key (the values are RabbitMQ's defaults where it has one).
CONFIG_EXAMPLE: Final = """\
host = "127.0.0.1"
port = 5672
management_port = 15672      # the management HTTP API and /metrics (default: none)
vhosts = ["staging"]          # besides "/"
verbose = false
protocols = ["0-9-1", "0-9", "0-8"]   # served, most preferred first
header_0_9 = "0-9-1"          # how AMQP 1 1 0 9 is read: "0-9-1" (RabbitMQ) or "0-9" (qpid)
server_product = "RabbitMQ"   # connection.start's product and version (clients read them)
server_version = "3.10.8"
data_dir = "data"             # keep durable queues and persistent messages here (relative
                              # to this file's folder); without it everything is in memory

[users]                       # name = password; default guest = "guest"
guest = "guest"
app = "secret"

[[permissions]]               # as rabbitmqctl set_permissions; the user may then use only
user = "app"                  # the vhosts named this way
vhost = "staging"
configure = ".*"              # configure, write and read default to ".*"
write = ".*"
read = "^app\\\\."

[[policies]]                  # as rabbitmqctl set_policy; vhost "/", priority 0 and
name = "limits"               # apply_to "all" by default
pattern = "^app\\\\."
definition = { max-length = 10000, dead-letter-exchange = "dlx" }
priority = 1
apply_to = "queues"

[limits]                      # amqp_broker.BrokerOptions; false for "no limit" where allowed
handshake_timeout = 10.0
max_connections = false
channel_max = 2047
memory_high_watermark = 0.4
memory_high_watermark_bytes = false
outbound_limit = 1048576
unfinished_limit = 134217728
consumer_timeout = 1800.0
quorum_delivery_limit = false  # RabbitMQ 4.0's default is 20
close_timeout = 5.0
memory_check_interval = 0.25
disk_free_limit = 50000000

[limits.vhost_max_connections]
staging = 100

[tls]                         # an amqps listener; relative paths are read from this file's folder
port = 5671
cert = "server.pem"
key = "server.key"
"""

_TOP_KEYS: Final = {
    "host": str,
    "port": int,
    "management_port": int,
    "protocols": list,
    "header_0_9": str,
    "server_product": str,
    "server_version": str,
    "vhosts": list,
    "verbose": bool,
    "data_dir": str,
    "users": dict,
    "permissions": list,
    "policies": list,
    "limits": dict,
    "tls": dict,
}
_PERMISSION_KEYS: Final = ("user", "vhost", "configure", "write", "read")
_POLICY_KEYS: Final = ("name", "pattern", "definition", "vhost", "priority", "apply_to")


class ConfigError(Exception):
    """The configuration file cannot be used: says which file, key and why."""


@attrs.frozen
class _Limit:
    """One field of :class:`BrokerOptions` as an option: its type and whether None is allowed."""

    name: str
    kind: type[int | float]
    optional: bool
    default: object

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _limits() -> list[_Limit]:
    """The scalar fields of :class:`BrokerOptions`, read from its annotations so a new option
    is on the command line and in the file without a change here."""
    defaults = BrokerOptions()
    found = []
    for field in attrs.fields(BrokerOptions):
        annotation = str(field.type)
        if not annotation.startswith(("int", "float")):
            continue  # vhost_max_connections, protocols, header_0_9, server_*: their own
        kind: type[int | float] = float if annotation.startswith("float") else int
        optional = annotation.endswith("| None")
        found.append(_Limit(field.name, kind, optional, getattr(defaults, field.name)))
    return found


LIMITS: Final = _limits()

_LIMIT_HELP: Final = {
    "handshake_timeout": "drop a client that has not opened its connection by then",
    "max_connections": "stop accepting while N connections are open",
    "channel_max": "channels per connection",
    "memory_high_watermark": "block publishers above this fraction of RAM held",
    "memory_high_watermark_bytes": "the watermark in octets (wins over the fraction)",
    "outbound_limit": "octets of output a connection may have waiting before its consumers "
    "get nothing more",
    "unfinished_limit": "octets of unfinished 0-10 bodies a connection may hold (then 320)",
    "consumer_timeout": "close a channel whose delivery waited this long for its ack (406)",
    "quorum_delivery_limit": "dead-letter or drop a quorum queue's message returned more often "
    "than this, unless x-delivery-limit says otherwise",
    "close_timeout": "how long to wait for close-ok after connection.close (and on shutdown), "
    "and for the client to close its socket after close-ok",
    "memory_check_interval": "seconds between two looks at the output buffers for the watermark",
    "disk_free_limit": "with --data-dir: block publishers while less than this many octets "
    "are free on its disk",
}


#: What None means for an optional limit, where it is not "no limit".
_UNSET: Final = {"memory_high_watermark_bytes": "the fraction decides"}


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


#: What ``--OPTION none`` parses to: "no limit", told apart from an option not given (None).
_NO_LIMIT: Final = object()


def _number(limit: _Limit) -> object:
    def convert(text: str) -> object:
        if limit.optional and text.lower() == "none":
            return _NO_LIMIT
        try:
            return limit.kind(text)
        except ValueError:
            kind = "an integer" if limit.kind is int else "a number"
            none = " or none" if limit.optional else ""
            raise argparse.ArgumentTypeError(f"expected {kind}{none}, got {text!r}") from None

    convert.__name__ = limit.kind.__name__  # argparse names the type in its messages
    return convert


def _protocols(text: str) -> tuple[ProtocolVersion, ...]:
    names = [name.strip() for name in text.split(",")]
    try:
        return BrokerOptions(protocols=names).protocols
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _parser(prog: str) -> argparse.ArgumentParser:
    defaults = BrokerOptions()
    parser = argparse.ArgumentParser(
        prog=prog,
        description="An in-memory AMQP broker (amqp_broker; 0-9-1, 0-9 and 0-8 on one port), "
        "for tests and demos.",
        epilog="Settings come from the command line, then --config, then RabbitMQ's defaults. "
        "Example configuration file (every key):\n\n" + CONFIG_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="a TOML configuration file")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="TCP port (0: any free port; default 5672)")
    parser.add_argument(
        "--management-port",
        type=int,
        help="serve the management HTTP API and /metrics on this port (RabbitMQ's is 15672; "
        "default: none)",
    )
    parser.add_argument(
        "--user",
        type=_user,
        action="append",
        default=[],
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
        "--policy",
        nargs=4,
        action="append",
        default=[],
        metavar=("VHOST", "NAME", "PATTERN", "DEFINITION"),
        help="as rabbitmqctl set_policy -p VHOST NAME PATTERN DEFINITION (a JSON object: "
        "message-ttl, expires, max-length, max-length-bytes, overflow, dead-letter-exchange, "
        "dead-letter-routing-key, delivery-limit, dead-letter-strategy, alternate-exchange); "
        "priority 0, apply-to "
        "all (the TOML file's [[policies]] has both; repeatable)",
    )
    parser.add_argument(
        "--vhost", action="append", default=[], metavar="NAME", help="a virtual host besides /"
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep durable exchanges, queues, bindings, users and persistent messages in DIR "
        "and recover them at start (default: in memory, all lost when the broker stops)",
    )
    limits = parser.add_argument_group(
        "limits and flow control (amqp_broker.BrokerOptions; RabbitMQ's defaults)"
    )
    for limit in LIMITS:
        unset = _UNSET.get(limit.name, "no limit")
        default = unset if limit.default is None else limit.default
        none = f"; none: {unset}" if limit.optional else ""
        limits.add_argument(
            limit.flag,
            type=_number(limit),  # type: ignore[arg-type]  # a callable, as argparse takes
            metavar="N" if limit.kind is int else "SECONDS" if "timeout" in limit.name else "X",
            help=f"{_LIMIT_HELP.get(limit.name, limit.name)} (default {default}{none})",
        )
    limits.add_argument(
        "--vhost-max-connections",
        type=_vhost_limit,
        action="append",
        default=[],
        metavar="VHOST:N",
        help="refuse connection.open on VHOST beyond N connections (530; repeatable)",
    )
    versions = parser.add_argument_group("protocol versions")
    versions.add_argument(
        "--protocols",
        type=_protocols,
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
        help="serve the header AMQP 1 1 0 9 as 0-9-1 (RabbitMQ's reading, the default) or as "
        "0-9 (qpid-python's)",
    )
    identity = parser.add_argument_group("what connection.start says")
    identity.add_argument(
        "--server-product",
        metavar="NAME",
        help=f"the server properties' product (default {defaults.server_product}: clients read it)",
    )
    identity.add_argument(
        "--server-version",
        metavar="VERSION",
        help=f"the server properties' version (default {defaults.server_version}, the RabbitMQ "
        "whose behaviour the broker follows: aioamqp parses it)",
    )
    tls = parser.add_argument_group("TLS (amqps)")
    tls.add_argument("--tls-port", type=int, metavar="PORT", help="serve amqps on this port")
    tls.add_argument("--tls-cert", metavar="FILE", help="the server's certificate (PEM)")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", default=None, help="log connections"
    )
    # for bench/broker.py: write a cProfile of the whole run to FILE on exit
    parser.add_argument("--profile", metavar="FILE", help=argparse.SUPPRESS)
    return parser


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(
        type(value), f"a {type(value).__name__}"
    )


def _check_table(where: str, table: Mapping[str, object], allowed: Mapping[str, object]) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ConfigError(
            f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})"
        )


def _limit_value(limit: _Limit, value: object) -> int | float | None:
    where = f"limits.{limit.name}"
    if value is False and limit.optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        expected = "an integer" if limit.kind is int else "a number"
        raise ConfigError(
            f"{where} must be {expected}{' or false' if limit.optional else ''}, "
            f"not {_type_name(value)}"
        )
    if limit.kind is int and not isinstance(value, int):
        raise ConfigError(f"{where} must be an integer, not {value!r}")
    return limit.kind(value)


def load_config(path: str | Path) -> dict[str, object]:
    """Read and check a TOML configuration file; returns the settings under the command line's
    option names (``host``, ``user``, ``channel_max``, ``tls_cert``, ...).

    :raises ConfigError: the file is missing, is not TOML, or has a key or value that is not
        allowed (the message names the file and the key).
    """
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    try:
        return _settings(document, path.parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _settings(document: dict[str, object], folder: Path) -> dict[str, object]:
    _check_table("the top level", document, _TOP_KEYS)
    for key, kind in _TOP_KEYS.items():
        value = document.get(key)
        wrong = not isinstance(value, kind) or (kind is int and isinstance(value, bool))
        if value is not None and wrong:
            raise ConfigError(f"{key} must be {_type_name(kind())}, not {_type_name(value)}")
    settings: dict[str, object] = {}
    for key in (
        "host",
        "port",
        "management_port",
        "verbose",
        "header_0_9",
        "server_product",
        "server_version",
    ):
        if key in document:
            settings[key] = document[key]
    if "data_dir" in document:
        settings["data_dir"] = str(folder / str(document["data_dir"]))
    if "protocols" in document:
        names = document["protocols"]
        assert isinstance(names, list)
        try:
            settings["protocols"] = BrokerOptions(protocols=names).protocols
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None
    vhosts = document.get("vhosts", [])
    assert isinstance(vhosts, list)
    if not all(isinstance(v, str) for v in vhosts):
        raise ConfigError("vhosts must be a list of strings")
    settings["vhost"] = vhosts
    users = document.get("users", {})
    assert isinstance(users, dict)
    for name, password in users.items():
        if not isinstance(password, str):
            raise ConfigError(f"users.{name} must be a string (the password)")
    settings["user"] = list(users.items())
    permissions = []
    entries = document.get("permissions", [])
    assert isinstance(entries, list)
    for number, entry in enumerate(entries, 1):
        where = f"permissions entry {number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table ([[permissions]])")
        _check_table(where, entry, dict.fromkeys(_PERMISSION_KEYS))
        for key in ("user", "vhost"):
            if key not in entry:
                raise ConfigError(f"{where} needs {key!r}")
        values = [entry.get(key, ".*") for key in _PERMISSION_KEYS]
        if not all(isinstance(v, str) for v in values):
            raise ConfigError(f"{where}: every value must be a string")
        permissions.append(values)
    settings["permissions"] = permissions
    policies = []
    entries = document.get("policies", [])
    assert isinstance(entries, list)
    for number, entry in enumerate(entries, 1):
        where = f"policies entry {number}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table ([[policies]])")
        _check_table(where, entry, dict.fromkeys(_POLICY_KEYS))
        for key in ("name", "pattern", "definition"):
            if key not in entry:
                raise ConfigError(f"{where} needs {key!r}")
        vhost = entry.get("vhost", "/")
        if not isinstance(vhost, str):
            raise ConfigError(f"{where}: vhost must be a string")
        policies.append((vhost, _policy(where, entry)))
    settings["policy"] = policies
    limits = document.get("limits", {})
    assert isinstance(limits, dict)
    known = {limit.name: limit for limit in LIMITS}
    _check_table("limits", limits, {**known, "vhost_max_connections": None})
    for name, value in limits.items():
        if name == "vhost_max_connections":
            if not isinstance(value, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in value.values()
            ):
                raise ConfigError("limits.vhost_max_connections must be a table of vhost = integer")
            settings["vhost_max_connections"] = list(value.items())
        else:
            settings[name] = _limit_value(known[name], value)
    tls = document.get("tls", {})
    assert isinstance(tls, dict)
    _check_table("tls", tls, dict.fromkeys(("port", "cert", "key")))
    if "port" in tls:
        if not isinstance(tls["port"], int) or isinstance(tls["port"], bool):
            raise ConfigError("tls.port must be an integer")
        settings["tls_port"] = tls["port"]
    for key in ("cert", "key"):
        if key in tls:
            if not isinstance(tls[key], str):
                raise ConfigError(f"tls.{key} must be a string (a file name)")
            settings[f"tls_{key}"] = str(folder / tls[key])
    return settings


def _policy(where: str, entry: Mapping[str, object]) -> Policy:
    name, pattern = entry.get("name"), entry.get("pattern")
    definition, priority = entry.get("definition"), entry.get("priority", 0)
    apply_to = entry.get("apply_to", "all")
    if not isinstance(name, str) or not isinstance(pattern, str) or not isinstance(apply_to, str):
        raise ConfigError(f"{where}: name, pattern and apply_to must be strings")
    if not isinstance(definition, dict):
        raise ConfigError(f"{where}: definition must be a table (a JSON object)")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ConfigError(f"{where}: priority must be an integer")
    try:
        return Policy(name, pattern, definition, priority=priority, apply_to=apply_to)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def parse_args(argv: list[str] | None = None, prog: str = "amqp-broker") -> argparse.Namespace:
    """The command line merged over the configuration file (``--config``) merged over the
    defaults: host, port, users and their permissions, virtual hosts, limits, TLS."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    config: dict[str, object] = {}
    if args.config is not None:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            parser.error(str(exc))
    # Lists add up (the file's users, then the command line's); single values: the command
    # line wins, then the file, then the default.
    try:
        from_command_line = [
            (vhost, _policy(f"--policy {name}", _policy_entry(name, pattern, definition)))
            for vhost, name, pattern, definition in args.policy
        ]
    except ConfigError as exc:
        parser.error(str(exc))
    args.policy = from_command_line
    for name in ("user", "permissions", "policy", "vhost", "vhost_max_connections"):
        from_file = config.get(name, [])
        assert isinstance(from_file, list)
        setattr(args, name, from_file + getattr(args, name))
    fallbacks: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 5672,
        "verbose": False,
        "tls_port": None,
        "management_port": None,
        "data_dir": None,
        "tls_cert": None,
        "tls_key": None,
        "protocols": BrokerOptions().protocols,
        "header_0_9": BrokerOptions().header_0_9.value,
        "server_product": BrokerOptions().server_product,
        "server_version": BrokerOptions().server_version,
    }
    fallbacks.update({limit.name: limit.default for limit in LIMITS})
    for name, default in fallbacks.items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, config.get(name, default))
        elif value is _NO_LIMIT:
            setattr(args, name, None)
    if args.tls_port is not None and not (args.tls_cert and args.tls_key):
        parser.error("--tls-port (or tls.port) needs --tls-cert and --tls-key (tls.cert, tls.key)")
    for vhost, policy in args.policy:
        if vhost != "/" and vhost not in args.vhost:
            parser.error(f"policy {policy.name!r} names vhost {vhost!r}, which no --vhost gives")
    names = {name for name, _ in args.user or [("guest", "guest")]}
    for user, *_ in args.permissions:
        if user not in names:
            parser.error(f"--permissions names {user!r}, which no --user gives")
    try:
        args.options = _options(args)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def _policy_entry(name: str, pattern: str, definition: str) -> dict[str, object]:
    try:
        parsed = json.loads(definition)
    except ValueError as exc:
        raise ConfigError(f"--policy {name}: the definition is not JSON: {exc}") from None
    return {"name": name, "pattern": pattern, "definition": parsed}


def _options(args: argparse.Namespace) -> BrokerOptions:
    return BrokerOptions(
        vhost_max_connections=dict(args.vhost_max_connections),
        protocols=args.protocols,
        header_0_9=args.header_0_9,
        server_product=args.server_product,
        server_version=args.server_version,
        **{limit.name: getattr(args, limit.name) for limit in LIMITS},
    )


async def _main(args: argparse.Namespace, prog: str) -> None:
    users: dict[str, str] = dict(args.user or [("guest", "guest")])
    try:
        broker = make_broker(
            ["/", *args.vhost], options=args.options, users=users, data_dir=args.data_dir
        )
    except StoreError as exc:
        raise _StartError(str(exc)) from None
    try:
        await _serve(broker, args)
    finally:
        if broker.store is not None:
            broker.store.close()


async def _serve(broker: Broker, args: argparse.Namespace) -> None:
    for user, vhost, configure, write, read in args.permissions:
        broker.add_vhost(vhost)
        broker.set_permissions(user, vhost, configure, write, read)
    for vhost, policy in args.policy:
        broker.vhosts[vhost].set_policy(policy)
    context = None
    if args.tls_port is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except OSError as exc:  # ssl.SSLError is one too
            raise _StartError(
                f"cannot load the TLS certificate {args.tls_cert} and key {args.tls_key}: "
                f"{exc.strerror or exc}"
            ) from None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                listeners = await nursery.start(
                    partial(
                        serve,
                        broker,
                        args.host,
                        args.port,
                        ssl_context=context,
                        tls_port=args.tls_port,
                        management_port=args.management_port,
                    )
                )
            except* OSError as group:
                failed = group.exceptions[0]
                assert isinstance(failed, OSError)
                raise _StartError(
                    f"cannot listen on {args.host}:{args.port}"
                    + (f" (amqps {args.tls_port})" if args.tls_port is not None else "")
                    + f": {failed.strerror or failed}"
                ) from None
            ports = [str(listener.socket.getsockname()[1]) for listener in listeners]
            print(
                f"amqp_broker listening on {args.host}:{ports[0]}"
                + (f" (amqps on {args.host}:{ports[1]})" if len(ports) > 1 else ""),
                file=sys.stderr,
                flush=True,
            )
            if args.management_port is not None:
                print(f"amqp_broker management API on {management_url(broker)}", file=sys.stderr)
            if broker.recovered is not None:
                print(f"amqp_broker {broker.recovered}", file=sys.stderr, flush=True)
            async for signum in signals:
                print(
                    f"amqp_broker stopping ({signal.Signals(signum).name})",
                    file=sys.stderr,
                    flush=True,
                )
                await shutdown(broker)
                nursery.cancel_scope.cancel()
                break


class _StartError(Exception):
    """The broker could not start: the message is the whole story."""


def main(argv: list[str] | None = None, prog: str = "amqp-broker") -> int:
    """Run the broker until SIGINT or SIGTERM; the exit status (0, 1: could not start,
    2: bad command line or configuration)."""
    args = parse_args(argv, prog)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            try:
                profiler.runcall(trio.run, _main, args, prog)
            finally:
                profiler.dump_stats(args.profile)
            return 0
        trio.run(_main, args, prog)
    except (_StartError, BaseExceptionGroup) as exc:
        error = _find_start_error(exc)
        if error is None:
            raise
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    return 0


def _find_start_error(exc: BaseException) -> _StartError | None:
    # Trio's nurseries wrap what a task raised in exception groups.
    if isinstance(exc, _StartError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find_start_error(inner)
            if found is not None:
                return found
    return None
