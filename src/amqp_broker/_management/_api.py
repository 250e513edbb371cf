"""The management API's endpoints over the model, with RabbitMQ 3.10's JSON field names,
status codes and error bodies. Pure request -> response: :mod:`._http` does the I/O."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import os
import re
import time
from typing import TYPE_CHECKING, Final, final
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlsplit

import attrs
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from amqp_sansio import BasicProperties

from .._errors import BrokerError
from .._permissions import FULL_ACCESS, Permission, hash_password
from .._permissions import User as UserRecord
from .._queues import Queue
from .._routing import EXCHANGE_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from prometheus_client.metrics_core import Metric

    from amqp_sansio import FieldTable

    from .._broker import Broker
    from .._message import Message
    from .._permissions import User
    from .._policies import Policy
    from .._routing import Exchange
    from .._session import Session

__all__ = ["ManagementApi", "Response"]

_JSON: Final = ("content-type", "application/json")
#: The tags that let a user into the management API (RabbitMQ's).
MANAGEMENT_TAGS: Final = frozenset({"management", "policymaker", "monitoring", "administrator"})
_NODE: Final = "rabbit@localhost"


@final
@attrs.frozen
class Response:
    """One HTTP answer."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = attrs.field(factory=list)


def _json(status: int, value: object) -> Response:
    return Response(status, json.dumps(value).encode(), [_JSON])


def _error(status: int, error: str, reason: object) -> Response:
    return _json(status, {"error": error, "reason": reason})


_NOT_FOUND: Final = ("Object Not Found", "Not Found")
_NOT_ALLOWED: Final = ("Method Not Allowed", "Method Not Allowed")
#: RabbitMQ's page size when ``page`` comes without one, and the largest it takes.
_PAGE_SIZE: Final = 100
_MAX_PAGE_SIZE: Final = 500
#: What rabbit_exchange_type_* say of themselves in /api/nodes.
_EXCHANGE_TYPES: Final = {
    "direct": "AMQP direct exchange, as per the AMQP specification",
    "fanout": "AMQP fanout exchange, as per the AMQP specification",
    "headers": "AMQP headers exchange, as per the AMQP specification",
    "topic": "AMQP topic exchange, as per the AMQP specification",
}


def _flag(value: object) -> object:
    """RabbitMQ takes booleans as JSON or as the strings rabbitmqadmin sends."""
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def _number(value: object) -> object:
    """A count as JSON or as the string rabbitmqadmin sends."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _items(document: dict[str, object], key: str) -> list[dict[str, object]]:
    """The objects under *key* of a definitions document."""
    items = document.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise TypeError(f"{key} must be a list of objects")
    return items


def _strings(value: object) -> list[str]:
    if not isinstance(value, list):
        raise TypeError("tags must be a string or a list")
    return [str(v) for v in value]


def _table(value: object) -> FieldTable:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TypeError("arguments must be an object")
    return value


def _describe(vhost: str) -> str:
    return "Default virtual host" if vhost == "/" else ""


def _sort_key(value: object) -> tuple[int, object]:
    """Erlang's term order, which RabbitMQ sorts by: numbers < atoms (booleans, a missing
    field) < maps < lists < binaries (bytewise: code points)."""
    if isinstance(value, bool) or value is None:
        return 1, str(value)
    if isinstance(value, int | float):
        return 0, value
    if isinstance(value, dict):
        return 2, json.dumps(value, sort_keys=True)
    if isinstance(value, list):
        return 3, json.dumps(value)
    return 4, str(value)


def _field(item: dict[str, object], path: str) -> object:
    """A ``sort`` key: a field, or one inside nested objects (``a.b``)."""
    value: object = item
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _args_hash(arguments: object) -> str:
    """The suffix a binding with arguments gets in its properties key. RabbitMQ's is
    erlang:phash2 of the arguments' Erlang terms; this is 4 bytes of SHA-256 of their JSON,
    in the same URL-safe base64 without padding."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).digest()[:4]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _properties_key(routing_key: str, arguments: object) -> str:
    """RabbitMQ's ``properties_key``: the routing key quote_plus'd (Erlang's escapes ``~``
    too; ``~`` alone stands for an empty key), then ``~`` and the arguments' hash when there
    are any."""
    key = quote_plus(routing_key, safe="").replace("~", "%7E")
    if arguments:
        return f"{key}~{_args_hash(arguments)}"
    return key or "~"


class _Refusal(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _plain(value: object) -> object:
    """A field value as JSON (tables and arrays nested; octets as text)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class _NoSink:
    """The sink of the API's own short-lived connections: they never consume."""

    def deliver(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the management API does not consume")

    def consumer_cancelled(self, channel: int, consumer_tag: str) -> None:
        return None

    def channel_failed(self, channel: int, error: BrokerError) -> None:
        return None


def _properties(properties: BasicProperties) -> dict[str, object]:
    shown: dict[str, object] = {}
    for field in attrs.fields(BasicProperties):
        value = getattr(properties, field.name)
        if value is not None:
            shown[field.name] = _plain(value)
    return shown


@final
class ManagementApi:
    """Answers management requests for *broker*; *sessions* lists its open client
    connections, *close* closes one (``connection.close`` 320)."""

    def __init__(
        self,
        broker: Broker,
        sessions: Callable[[], list[Session]],
        close: Callable[[Session, str], None],
    ) -> None:
        self.broker = broker
        self._sessions = sessions
        self._close = close
        #: Where the API listens (host, port), once it does: the node's ``contexts``.
        self.listening: tuple[str, int] | None = None
        self._started = time.monotonic()
        # the request being answered (one at a time: the API runs on the broker's loop)
        self._query: dict[str, str] = {}
        self._user_name = ""
        self._sees_all = False

    # --- entry --------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Response:
        """The answer to one request."""
        split = urlsplit(target)
        path = split.path
        if path == "/metrics":
            return self._metrics()
        if path == "/metrics/per-object":
            return self._metrics(per_object=True)
        if not path.startswith("/api/"):
            return _error(404, *_NOT_FOUND)
        parts = [unquote(p) for p in path[len("/api/") :].rstrip("/").split("/")]
        self._query = dict(parse_qsl(split.query, keep_blank_values=True))
        try:
            user_name, user = self._authenticate(headers)
            self._user_name = user_name
            self._sees_all = bool({"administrator", "monitoring"} & set(user.tags))
            response = self._route(method, parts, user_name, user, body)
            if isinstance(response, list):
                return self._paged(response)
            return response
        except _Refusal as refusal:
            return refusal.response
        except BrokerError as exc:
            return self._broker_error(exc)

    def _authenticate(self, headers: dict[str, str]) -> tuple[str, User]:
        # RabbitMQ: no credentials, an empty 401 with the challenge; wrong ones, "Login failed".
        challenge = Response(401, b"", [("www-authenticate", 'Basic realm="RabbitMQ Management"')])
        failed = _error(401, "not_authorized", "Login failed")
        scheme, _, encoded = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            raise _Refusal(challenge)
        try:
            name, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise _Refusal(failed) from None
        user = self.broker.users.get(name)
        if user is None or not self.broker.users.authenticate(name, password):
            raise _Refusal(failed)
        if not MANAGEMENT_TAGS & set(user.tags):
            raise _Refusal(_error(401, "not_authorized", "Not management user"))
        return name, user

    def _broker_error(self, exc: BrokerError) -> Response:
        if exc.reply_code == 404:
            return _error(404, *_NOT_FOUND)
        if exc.reply_code == 403 and "amq." in exc.reply_text:
            # the reserved amq.* names (declare, delete): RabbitMQ's answer is terser
            return _error(401, "not_authorised", "Access refused.")
        if exc.reply_code in (403, 530):
            return _error(401, "not_authorized", exc.reply_text)
        # The management API gives the text without AMQP's "NAME - " prefix.
        return _error(400, "bad_request", exc.reply_text.partition(" - ")[2] or exc.reply_text)

    # --- routing ------------------------------------------------------------------------------

    def _route(  # one table of endpoints
        self, method: str, parts: list[str], name: str, user: User, body: bytes
    ) -> Response | list[dict[str, object]]:
        """The answer, or a listing that ``page``, ``name``, ``sort`` and the rest of the
        query apply to (:meth:`_paged`)."""
        head, rest = parts[0], parts[1:]
        read_only = method in ("GET", "HEAD")
        if head == "overview" and not rest and read_only:
            return _json(200, self._overview())
        if head == "whoami" and not rest and read_only:
            return _json(200, {"name": name, "tags": list(user.tags)})
        if head == "healthchecks" and rest[:1] == ["node"] and len(rest) <= 2 and read_only:
            if rest[1:] not in ([], [_NODE]):
                return _error(404, *_NOT_FOUND)
            return _json(200, {"status": "ok"})
        if head == "cluster-name" and not rest and read_only:
            return _json(200, {"name": _NODE})
        if head == "nodes" and len(rest) <= 1 and read_only:
            if rest not in ([], [_NODE]):
                # RabbitMQ 3.10 answers a 500 (its node lookup crashes)
                return _error(404, *_NOT_FOUND)
            return _json(200, self._node() if rest else [self._node()])
        if head == "aliveness-test" and len(rest) == 1 and read_only:
            return self._aliveness(rest[0], name)
        if head == "vhosts" and len(rest) == 1 and method in ("PUT", "DELETE"):
            self._require(user, "administrator")
            return self._change_vhost(method, rest[0], name)
        if head == "vhosts" and len(rest) == 2 and rest[1] == "permissions" and read_only:
            self._require(user, "administrator")
            self._vhost_known(rest[0])
            return self._grants(vhost=rest[0])
        if head == "users":
            self._require(user, "administrator")
            return self._users(method, rest, body)
        if head == "permissions" and not rest and read_only:
            self._require(user, "administrator")
            return self._grants()
        if head == "permissions" and len(rest) == 2:
            self._require(user, "administrator")
            return self._permissions(method, rest[0], rest[1], body)
        if head == "policies" and read_only and len(rest) <= 2:
            return self._listing(self._policies(name), rest, "policy")
        if head == "policies" and len(rest) == 2 and method in ("PUT", "DELETE"):
            if not {"policymaker", "administrator"} & set(user.tags):
                return _error(401, "not_authorized", "Not policymaker user")
            return self._change_policy(method, rest[0], rest[1], name, body)
        if head == "vhosts" and read_only:
            return self._vhosts(rest, user)
        if head == "queues":
            return self._queues(method, rest, name, user, body)
        if head == "exchanges" and method == "POST" and len(rest) == 3 and rest[2] == "publish":
            return self._publish(rest[0], rest[1], name, body)
        if head == "exchanges" and read_only and len(rest) <= 2:
            return self._listing(self._exchanges(name), rest, "exchange")
        if head == "exchanges" and len(rest) == 2 and method in ("PUT", "DELETE"):
            return self._change_exchange(method, rest[0], rest[1], name, body)
        if (
            head == "exchanges"
            and len(rest) == 4
            and rest[2] == "bindings"
            and rest[3] in ("source", "destination")
            and read_only
        ):
            self._vhost_of(rest[0], name)
            if rest[1] not in self.broker.vhosts[rest[0]].exchanges:
                return _error(404, *_NOT_FOUND)
            end = "source" if rest[3] == "source" else "destination"
            return [
                b
                for b in self._bindings(name)
                if b["vhost"] == rest[0]
                and b[end] == rest[1]
                and (end == "source" or b["destination_type"] == "exchange")
            ]
        if head == "bindings" and read_only and len(rest) <= 1:
            return self._listing(self._bindings(name), rest, None)
        if head == "bindings" and len(rest) in (5, 6) and rest[1] == "e" and rest[3] in "qe":
            return self._binding_between(method, rest, name, body)
        if head == "channels" and read_only and not rest:
            return _json(200, self._channel_list(name, user))
        if head == "consumers" and read_only and len(rest) <= 1:
            return self._listing(self._consumers(name), rest, None)
        if head == "connections":
            return self._connections(method, rest, name, user)
        if head == "definitions" and not rest and method == "POST":
            self._require(user, "administrator")
            return self._import(name, body)
        if head == "definitions" and not rest and read_only:
            self._require(user, "administrator")
            return _json(200, self._definitions())
        if head in (
            "overview",
            "whoami",
            "healthchecks",
            "vhosts",
            "exchanges",
            "bindings",
            "definitions",
            "aliveness-test",
            "nodes",
            "permissions",
            "cluster-name",
        ):
            return _error(405, *_NOT_ALLOWED)
        return _error(404, *_NOT_FOUND)

    def _paged(self, items: list[dict[str, object]]) -> Response:
        """RabbitMQ's listing query: sorted (``sort``, ``sort_reverse``; by vhost and name
        when not asked), and with ``page`` (``page_size``, ``name``, ``use_regex``) one page
        of what matches ``name`` (case-insensitive: a substring, or a regular expression)
        in RabbitMQ's paged object."""
        query = self._query
        total = len(items)
        # RabbitMQ's sort_list: the asked key first, vhost and name break ties
        keys = [*([query["sort"]] if query.get("sort") else []), "vhost", "name"]
        items = sorted(items, key=lambda i: [_sort_key(_field(i, k)) for k in keys])
        if query.get("sort_reverse") == "true":
            items.reverse()
        if "page" not in query:
            return _json(200, items)
        page, size = query["page"], query.get("page_size")
        pattern = query.get("name")
        try:
            if not page.isdigit() or (size is not None and not size.isdigit()):
                raise ValueError(page)
            if pattern and query.get("use_regex") == "true":
                matcher = re.compile(pattern, re.IGNORECASE)
                items = [i for i in items if matcher.search(str(i.get("name", "")))]
            elif pattern:
                items = [i for i in items if pattern.lower() in str(i.get("name", "")).lower()]
        except (ValueError, re.error):
            return _error(400, "bad_request", "Pagination parameters are invalid")
        number, per_page = int(page), _PAGE_SIZE if size is None else int(size)
        if number < 1 or not 1 <= per_page <= _MAX_PAGE_SIZE:
            return _error(
                400,
                "invalid_pagination_parameters",
                f"Invalid pagination parameters: page number {number}, "
                f"page size {'undefined' if size is None else per_page}",
            )
        start = (number - 1) * per_page
        if start > len(items):
            return _error(
                400,
                "page_out_of_range",
                f"Page out of range, page: {number} page size: {per_page}, len: {len(items)}",
            )
        shown = items[start : start + per_page]
        return _json(
            200,
            {
                "filtered_count": len(items),
                "item_count": len(shown),
                "items": shown,
                "page": number,
                "page_count": math.ceil(len(items) / per_page),
                "page_size": per_page,
                "total_count": total,
            },
        )

    @staticmethod
    def _require(user: User, tag: str) -> None:
        if tag not in user.tags:
            raise _Refusal(_error(401, "not_authorized", "Not administrator user"))

    def _visible(self, name: str, vhost: str) -> bool:
        """Whether *vhost*'s objects are listed to *name*: RabbitMQ's list_visible_vhosts
        shows administrators and monitoring users every vhost, others those they may use."""
        if name == self._user_name and self._sees_all:
            return True
        return self.broker.users.permission(name, vhost) is not None

    def _vhost_of(self, vhost: str, name: str) -> None:
        if vhost not in self.broker.vhosts:
            raise _Refusal(_error(404, *_NOT_FOUND))
        if self.broker.users.permission(name, vhost) is None:  # acting needs permission
            raise _Refusal(_error(401, "not_authorized", "Not_Authorized"))

    def _listing(
        self, items: list[dict[str, object]], rest: list[str], kind: str | None
    ) -> Response | list[dict[str, object]]:
        if rest:
            self._vhost_known(rest[0])
            items = [i for i in items if i["vhost"] == rest[0]]
        if kind is not None and len(rest) == 2:
            for item in items:
                if item["name"] == rest[1]:
                    return _json(200, item)
            return _error(404, *_NOT_FOUND)
        return items

    def _vhost_known(self, vhost: str) -> None:
        if vhost not in self.broker.vhosts:
            raise _Refusal(_error(404, *_NOT_FOUND))

    # --- endpoints ----------------------------------------------------------------------------

    def _contexts(self, node: bool) -> list[dict[str, object]]:
        """The node's HTTP listeners (the management API's: no Prometheus one here)."""
        if self.listening is None:
            return []
        host, port = self.listening
        shown: dict[str, object] = {"node": _NODE} if node else {}
        # RabbitMQ gives the port as a string here
        return [
            {
                **shown,
                "description": "RabbitMQ Management",
                "path": "/",
                "ip": host,
                "port": str(port),
            }
        ]

    def _node(self) -> dict[str, object]:
        """What the embedded broker has of /api/nodes/NAME: no memory, disk, file descriptor
        or Erlang statistics (it is one Python process, not a cluster member)."""
        return {
            "name": _NODE,
            "running": True,
            "os_pid": str(os.getpid()),
            "processors": os.cpu_count() or 1,
            "uptime": int((time.monotonic() - self._started) * 1000),
            "partitions": [],
            "cluster_links": [],
            "exchange_types": [
                {"name": t, "description": _EXCHANGE_TYPES[t], "enabled": True}
                for t in sorted(EXCHANGE_TYPES)
            ],
            "contexts": self._contexts(node=False),
        }

    def _overview(self) -> dict[str, object]:
        queues = [q for v in self.broker.vhosts.values() for q in v.queues.values()]
        sessions = self._sessions()
        ready = sum(q.message_count for q in queues)
        unacked = sum(self._unacked().values())
        options = self.broker.options
        return {
            "management_version": options.server_version,
            "rabbitmq_version": options.server_version,
            "product_name": options.server_product,
            "product_version": options.server_version,
            "cluster_name": _NODE,
            "node": _NODE,
            "contexts": self._contexts(node=True),
            "object_totals": {
                "connections": len(sessions),
                "channels": sum(self._channels(s) for s in sessions),
                "exchanges": sum(len(v.exchanges) for v in self.broker.vhosts.values()),
                "queues": len(queues),
                "consumers": sum(len(q.consumers) for q in queues),
            },
            "queue_totals": {
                "messages": ready + unacked,
                "messages_ready": ready,
                "messages_unacknowledged": unacked,
            },
        }

    def _aliveness(self, vhost: str, name: str) -> Response:
        self._vhost_of(vhost, name)
        return _json(200, {"status": "ok"})

    def _vhosts(self, rest: list[str], user: User) -> Response | list[dict[str, object]]:
        shown = [
            {
                "name": v,
                "description": _describe(v),
                "tags": [],
                "default_queue_type": "undefined",
                "metadata": {"description": _describe(v), "tags": []},
                "tracing": False,
            }
            for v in self.broker.vhosts
            if self._visible(self._user_name, v)
        ]
        if not rest:
            return shown
        for vhost in shown:
            if vhost["name"] == rest[0] and len(rest) == 1:
                return _json(200, vhost)
        return _error(404, *_NOT_FOUND)

    def _change_vhost(self, method: str, vhost: str, name: str) -> Response:
        broker = self.broker
        if method == "PUT":
            existed = vhost in broker.vhosts
            broker.add_vhost(vhost)
            if not existed:  # RabbitMQ gives the user who creates it full permissions
                self._grant(name, vhost, ".*", ".*", ".*")
            return Response(204 if existed else 201)
        host = broker.vhosts.get(vhost)
        if host is None:
            return _error(404, *_NOT_FOUND)
        # RabbitMQ closes the vhost's connections and drops everything in it.
        for session in self._sessions():
            if session.connection is not None and session.connection.vhost is host:
                self._close(session, "CONNECTION_FORCED - vhost '" + vhost + "' is deleted")
        for queue in list(host.queues.values()):
            host.delete_queue(queue)
        del broker.vhosts[vhost]
        for user_name in broker.users.names():  # its permissions go with it, as in RabbitMQ
            user = broker.users.get(user_name)
            if user is not None and user.permissions is not None and vhost in user.permissions:
                broker.clear_permissions(user_name, vhost)
        return Response(204)

    @staticmethod
    def _user_json(user_name: str, user: User) -> dict[str, object]:
        return {
            "name": user_name,
            "password_hash": user.password_hash or "",
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": list(user.tags),
            "limits": {},
        }

    def _grant(self, user_name: str, vhost: str, configure: str, write: str, read: str) -> None:
        """Set one vhost's permissions. A user with access everywhere implicitly (given
        without permissions) keeps it to the other vhosts there are: in RabbitMQ each vhost's
        permissions stand alone, so granting one takes nothing away."""
        broker = self.broker
        Permission(configure, write, read)  # a bad pattern's ValueError before any change
        user = broker.users.get(user_name)
        if user is not None and user.permissions is None:
            for other in broker.vhosts:
                if other != vhost:
                    broker.set_permissions(
                        user_name, other, FULL_ACCESS.configure, FULL_ACCESS.write, FULL_ACCESS.read
                    )
        broker.set_permissions(user_name, vhost, configure, write, read)

    def _grants(
        self, *, vhost: str | None = None, user: str | None = None
    ) -> list[dict[str, object]]:
        """/api/permissions, optionally one vhost's or one user's."""
        shown: list[dict[str, object]] = []
        users = self.broker.users
        for user_name in users.names():
            if user is not None and user_name != user:
                continue
            for v in self.broker.vhosts:
                permission = users.permission(user_name, v)
                if permission is not None and vhost in (None, v):
                    shown.append(
                        {
                            "user": user_name,
                            "vhost": v,
                            "configure": permission.configure,
                            "write": permission.write,
                            "read": permission.read,
                        }
                    )
        return shown

    def _bulk_delete(self, body: bytes) -> Response:
        request = self._body(body)
        if "users" not in request:
            return _error(400, "bad_request", "[{key_missing,users}]")
        names = request["users"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            # RabbitMQ 3.10 answers a 500 for anything but a list of names
            return _error(400, "bad_request", "bad_request")
        for user_name in names:
            # all checked first: RabbitMQ deletes the names before a missing one, this
            # deletes none
            if user_name not in self.broker.users:
                return _error(400, "bad_request", ["no_such_user", user_name])
        for user_name in names:
            self.broker.delete_user(user_name)
        return Response(204)

    def _users(
        self, method: str, rest: list[str], body: bytes
    ) -> Response | list[dict[str, object]]:
        users = self.broker.users
        if not rest and method in ("GET", "HEAD"):
            shown = []
            for user_name in users.names():
                user = users.get(user_name)
                assert user is not None
                shown.append(self._user_json(user_name, user))
            return shown
        if rest == ["bulk-delete"]:
            if method != "POST":
                return Response(405)
            return self._bulk_delete(body)
        if len(rest) == 2 and rest[1] == "permissions" and method in ("GET", "HEAD"):
            if rest[0] not in users:
                return _error(404, *_NOT_FOUND)
            return self._grants(user=rest[0])
        if len(rest) != 1:
            return _error(404, *_NOT_FOUND)
        user_name = rest[0]
        found = users.get(user_name)
        if method in ("GET", "HEAD"):
            if found is None:
                return _error(404, *_NOT_FOUND)
            return _json(200, self._user_json(user_name, found))
        if method == "DELETE":
            if found is None:
                return _error(404, *_NOT_FOUND)
            self.broker.delete_user(user_name)
            return Response(204)
        if method != "PUT":
            return _error(405, "Method Not Allowed", "Method Not Allowed")
        request = self._body(body)
        if "tags" not in request:
            return _error(400, "bad_request", "tags_not_present")
        tags = request["tags"]
        if not isinstance(tags, str | list):
            return _error(400, "bad_request", "bad_request")
        names = tags.split(",") if isinstance(tags, str) else [str(t) for t in tags]
        if "password" in request and "password_hash" in request:
            return _error(400, "bad_request", "both_password_and_password_hash_are_provided")
        password, password_hash = request.get("password"), request.get("password_hash")
        if password is None and password_hash is None:
            # RabbitMQ: an existing user keeps its password; a new one gets a random one
            # (no password logs it in)
            if found is None:
                password_hash = hash_password(base64.b64encode(os.urandom(24)).decode())
            else:
                password, password_hash = found.password, found.password_hash
        if not isinstance(password, str | None) or not isinstance(password_hash, str | None):
            return _error(400, "bad_request", "bad_request")
        if password_hash is not None and password is None:
            try:
                base64.b64decode(password_hash, validate=True)
            except binascii.Error:
                return _error(400, "bad_request", ["not_base64", password_hash])
        new = attrs.evolve(
            found or UserRecord("", {}),
            password=password or "",
            password_hash=password_hash if password is None else hash_password(password),
            tags=tuple(t.strip() for t in names if t.strip()),
        )
        users.add(user_name, new)
        return Response(201 if found is None else 204)

    def _permissions(self, method: str, vhost: str, user_name: str, body: bytes) -> Response:
        broker = self.broker
        if vhost not in broker.vhosts or user_name not in broker.users:
            if method == "PUT":
                return _error(400, "bad_request", "vhost_or_user_not_found")
            return _error(404, *_NOT_FOUND)
        user = broker.users.get(user_name)
        assert user is not None
        explicit = user.permissions is not None and vhost in user.permissions
        if method in ("GET", "HEAD"):
            permission = broker.users.permission(user_name, vhost)
            if permission is None:
                return _error(404, *_NOT_FOUND)
            return _json(
                200,
                {
                    "user": user_name,
                    "vhost": vhost,
                    "configure": permission.configure,
                    "write": permission.write,
                    "read": permission.read,
                },
            )
        if method == "DELETE":
            if user.permissions is None:  # the others stay, as in _grant
                self._grant(user_name, vhost, ".*", ".*", ".*")
            broker.clear_permissions(user_name, vhost)
            return Response(204)
        if method != "PUT":
            return _error(405, "Method Not Allowed", "Method Not Allowed")
        request = self._body(body)
        patterns = [request.get(k) for k in ("configure", "write", "read")]
        if not all(isinstance(p, str) for p in patterns):
            return _error(400, "bad_request", "bad_request")
        try:
            self._grant(user_name, vhost, *[str(p) for p in patterns])
        except ValueError as exc:
            return _error(400, "bad_request", str(exc))
        return Response(204 if explicit else 201)

    def _import(self, name: str, body: bytes) -> Response:
        """``POST /api/definitions``: vhosts, users (with a ``password`` or a
        ``password_hash``), permissions, policies, exchanges, queues, bindings, in that
        order."""
        try:
            document = json.loads(body or b"{}")
        except (ValueError, UnicodeDecodeError):
            document = None
        if not isinstance(document, dict):
            return _error(400, "bad_request", "failed_to_parse_json")
        broker = self.broker
        try:
            for vhost in _items(document, "vhosts"):
                broker.add_vhost(str(vhost["name"]))
            for user in _items(document, "users"):
                password, password_hash = user.get("password"), user.get("password_hash")
                if isinstance(password, str) or isinstance(password_hash, str):
                    tags = user.get("tags", [])
                    names = tags.split(",") if isinstance(tags, str) else _strings(tags)
                    broker.users.add(
                        str(user["name"]),
                        UserRecord(
                            password if isinstance(password, str) else "",
                            {},
                            tuple(str(t) for t in names if t),
                            # an export's hash stands for the password it hashes
                            password_hash=None if isinstance(password, str) else str(password_hash),
                        ),
                    )
            for grant in _items(document, "permissions"):
                broker.set_permissions(
                    str(grant["user"]),
                    str(grant["vhost"]),
                    str(grant["configure"]),
                    str(grant["write"]),
                    str(grant["read"]),
                )
            for policy in _items(document, "policies"):
                definition = policy["definition"]
                assert isinstance(definition, dict)
                broker.set_policy(
                    str(policy["name"]),
                    str(policy["pattern"]),
                    definition,
                    vhost=str(policy["vhost"]),
                    priority=int(str(policy.get("priority", 0))),
                    apply_to=str(policy.get("apply-to", "all")),
                )
            for exchange in _items(document, "exchanges"):
                with self._channel(str(exchange["vhost"]), name) as channel:
                    channel.exchange_declare(
                        str(exchange["name"]),
                        str(exchange["type"]),
                        durable=bool(exchange.get("durable", True)),
                        auto_delete=bool(exchange.get("auto_delete", False)),
                        internal=bool(exchange.get("internal", False)),
                        arguments=_table(exchange.get("arguments")),
                    )
            for queue in _items(document, "queues"):
                with self._channel(str(queue["vhost"]), name) as channel:
                    channel.queue_declare(
                        str(queue["name"]),
                        durable=bool(queue.get("durable", True)),
                        auto_delete=bool(queue.get("auto_delete", False)),
                        arguments=_table(queue.get("arguments")),
                    )
            for binding in _items(document, "bindings"):
                with self._channel(str(binding["vhost"]), name) as channel:
                    bind = (
                        channel.queue_bind
                        if binding.get("destination_type", "queue") == "queue"
                        else channel.exchange_bind
                    )
                    bind(
                        str(binding["destination"]),
                        str(binding["source"]),
                        str(binding.get("routing_key", "")),
                        _table(binding.get("arguments")),
                    )
        except (KeyError, TypeError, ValueError, AssertionError) as exc:
            return _error(400, "bad_request", f"invalid definitions: {exc}")
        return Response(204)

    def _channel_list(self, name: str, user: User) -> list[dict[str, object]]:
        admin = "administrator" in user.tags or "monitoring" in user.tags
        shown: list[dict[str, object]] = []
        for session in self._sessions():
            connection = session.connection
            if connection is None or not (admin or session.username == name):
                continue
            details = self._connection_details(session)
            for channel in connection.channels.values():
                shown.append(  # noqa: PERF401  # one item per channel reads plainer
                    {
                        "name": f"{details['name']} ({channel.number})",
                        "number": channel.number,
                        "user": session.username or "",
                        "vhost": connection.vhost.name,
                        "node": _NODE,
                        "state": "running",
                        "connection_details": details,
                        "consumer_count": len(channel.consumers),
                        "prefetch_count": channel.consumer_prefetch,
                        "global_prefetch_count": channel.global_prefetch,
                        "confirm": channel.confirm,
                        "transactional": channel.transactional,
                        "messages_unacknowledged": len(channel.unacked),
                    }
                )
        return shown

    def _connection_details(self, session: Session) -> dict[str, object]:
        host, _, port = session.peer.rpartition(":")
        return {
            "name": self._connection_name(session),
            "peer_host": host,
            "peer_port": int(port or 0),
        }

    def _consumers(self, name: str) -> list[dict[str, object]]:
        shown: list[dict[str, object]] = []
        for session in self._sessions():
            connection = session.connection
            if connection is None or not self._visible(name, connection.vhost.name):
                continue
            details = self._connection_details(session)
            for channel in connection.channels.values():
                for consumer in channel.consumers.values():
                    shown.append(  # noqa: PERF401  # likewise
                        {
                            "consumer_tag": consumer.tag,
                            "queue": {"name": consumer.queue.name, "vhost": connection.vhost.name},
                            "channel_details": {
                                **details,
                                "connection_name": details["name"],
                                "name": f"{details['name']} ({channel.number})",
                                "number": channel.number,
                                "user": session.username or "",
                                "node": _NODE,
                            },
                            "vhost": connection.vhost.name,
                            "ack_required": not consumer.no_ack,
                            "exclusive": consumer.exclusive,
                            "prefetch_count": consumer.prefetch,
                            "arguments": _plain(consumer.arguments),
                            "active": True,
                            "activity_status": "up",
                        }
                    )
        return shown

    def _policies(self, name: str) -> list[dict[str, object]]:
        return [
            _policy_json(v.name, p)
            for v in self.broker.vhosts.values()
            if self._visible(name, v.name)
            for p in v.policies.values()
        ]

    def _unacked(self) -> dict[tuple[str, str], int]:
        return {key: count for key, (count, _) in self._unacked_sizes().items()}

    def _unacked_sizes(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(vhost, queue) -> how many deliveries wait for their ack, and their body octets."""
        sizes: dict[tuple[str, str], tuple[int, int]] = {}
        for session in self._sessions():
            connection = session.connection
            if connection is None:
                continue
            for channel in connection.channels.values():
                for record in channel.unacked.values():
                    key = (record.queue.vhost_name, record.queue.name)
                    count, octets = sizes.get(key, (0, 0))
                    sizes[key] = (count + 1, octets + record.entry.message.size)
        return sizes

    @staticmethod
    def _channels(session: Session) -> int:
        return 0 if session.connection is None else len(session.connection.channels)

    def _queue_json(self, queue: Queue, unacked: tuple[int, int]) -> dict[str, object]:
        ready = queue.message_count
        unacked_count, unacked_bytes = unacked
        shown: dict[str, object] = {
            "name": queue.name,
            "vhost": queue.vhost_name,
            "durable": queue.durable,
            "auto_delete": queue.auto_delete,
            "exclusive": queue.exclusive_owner is not None,
            "arguments": _plain(queue.arguments),
            "type": queue.type,
            "node": _NODE,
            "state": "running",
            "policy": queue.policy,
            "consumers": len(queue.consumers),
            "messages": ready + unacked_count,
            "messages_ready": ready,
            "messages_unacknowledged": unacked_count,
        }
        if queue.log is None:  # a stream's retained log has no byte counts here
            shown["message_bytes"] = queue.ready_bytes + unacked_bytes
            shown["message_bytes_ready"] = queue.ready_bytes
            shown["message_bytes_unacknowledged"] = unacked_bytes
        return shown

    def _all_queues(self, name: str) -> list[dict[str, object]]:
        unacked = self._unacked_sizes()
        return [
            self._queue_json(q, unacked.get((v.name, q.name), (0, 0)))
            for v in self.broker.vhosts.values()
            if self._visible(name, v.name)
            for q in v.queues.values()
        ]

    def _queues(
        self, method: str, rest: list[str], name: str, user: User, body: bytes
    ) -> Response | list[dict[str, object]]:
        if len(rest) <= 2 and method in ("GET", "HEAD"):
            return self._listing(self._all_queues(name), rest, "queue")
        if len(rest) == 3 and rest[2] == "bindings" and method in ("GET", "HEAD"):
            self._vhost_of(rest[0], name)
            if rest[1] not in self.broker.vhosts[rest[0]].queues:
                return _error(404, *_NOT_FOUND)
            return [
                b
                for b in self._bindings(name)
                if b["vhost"] == rest[0]
                and b["destination"] == rest[1]
                and b["destination_type"] == "queue"
            ]
        if len(rest) == 2 and method == "PUT":
            return self._declare(rest[0], rest[1], name, body)
        if len(rest) == 2 and method == "DELETE":
            self._vhost_of(rest[0], name)
            if rest[1] not in self.broker.vhosts[rest[0]].queues:
                return _error(404, *_NOT_FOUND)
            with self._channel(rest[0], name) as channel:
                channel.queue_delete(rest[1])
            return Response(204)
        if len(rest) == 3 and rest[2] == "contents" and method == "DELETE":
            self._vhost_of(rest[0], name)
            with self._channel(rest[0], name) as channel:
                channel.queue_purge(rest[1])
            return Response(204)
        if len(rest) == 3 and rest[2] == "get" and method == "POST":
            return self._get(rest[0], rest[1], name, body)
        if len(rest) <= 3:
            return _error(405, "Method Not Allowed", "Method Not Allowed")
        return _error(404, *_NOT_FOUND)

    def _body(self, body: bytes) -> dict[str, object]:
        try:
            value = json.loads(body or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise _Refusal(_error(400, "bad_request", "not_json")) from None
        if isinstance(value, str):
            raise _Refusal(
                _error(
                    400,
                    "bad_request",
                    "invalid payload: the request body "
                    "JSON-decoded to a string. Is the input doubly-JSON-encoded?",
                )
            )
        if not isinstance(value, dict):
            raise _Refusal(_error(400, "bad_request", "not_json"))
        return value

    def _declare(self, vhost: str, queue: str, name: str, body: bytes) -> Response:
        self._vhost_of(vhost, name)
        request = self._body(body)
        arguments = request.get("arguments", {})
        durable = _flag(request.get("durable", True))
        auto_delete = _flag(request.get("auto_delete", False))
        if (
            not isinstance(arguments, dict)
            or not isinstance(durable, bool)
            or not isinstance(auto_delete, bool)
        ):
            return _error(400, "bad_request", "bad_request")
        existed = queue in self.broker.vhosts[vhost].queues
        with self._channel(vhost, name) as channel:
            channel.queue_declare(
                queue, durable=durable, auto_delete=auto_delete, arguments=arguments
            )
        return Response(204 if existed else 201)

    def _change_exchange(
        self, method: str, vhost: str, exchange: str, name: str, body: bytes
    ) -> Response:
        """PUT declares (201, or 204 when an equivalent one exists), DELETE deletes
        (``if-unused=true``: only without bindings from it)."""
        if vhost not in self.broker.vhosts:
            if method == "PUT":
                return _error(404, "not_found", "vhost_not_found")
            return _error(404, *_NOT_FOUND)
        self._vhost_of(vhost, name)
        if exchange in ("", "amq.default"):
            return _error(401, "not_authorised", "Access refused.")
        exists = exchange in self.broker.vhosts[vhost].exchanges
        if method == "DELETE":
            if not exists:
                return _error(404, *_NOT_FOUND)
            with self._channel(vhost, name) as channel:
                channel.exchange_delete(exchange, if_unused=self._query.get("if-unused") == "true")
            return Response(204)
        request = self._body(body)
        type_ = request.get("type", "direct")
        flags = [_flag(request.get(k, False)) for k in ("durable", "auto_delete", "internal")]
        arguments = request.get("arguments", {})
        if (
            not isinstance(type_, str)
            or not all(isinstance(f, bool) for f in flags)
            or not isinstance(arguments, dict)
        ):
            return _error(400, "bad_request", "bad_request")
        durable, auto_delete, internal = (bool(f) for f in flags)
        with self._channel(vhost, name) as channel:
            channel.exchange_declare(
                exchange,
                type_,
                durable=durable,
                auto_delete=auto_delete,
                internal=internal,
                arguments=arguments,
            )
        return Response(204 if exists else 201)

    def _change_policy(
        self, method: str, vhost: str, policy: str, name: str, body: bytes
    ) -> Response:
        """PUT sets (201, or 204 when it replaces one) as ``rabbitmqctl set_policy`` does,
        DELETE clears (204; 404 when there is none)."""
        if vhost not in self.broker.vhosts:
            if method == "PUT":
                return _error(404, "not_found", "vhost_not_found")
            return _error(404, *_NOT_FOUND)
        self._vhost_of(vhost, name)
        exists = policy in self.broker.vhosts[vhost].policies
        if method == "DELETE":
            if not exists:
                return _error(404, *_NOT_FOUND)
            self.broker.clear_policy(policy, vhost=vhost)
            return Response(204)
        request = self._body(body)
        pattern, definition = request.get("pattern"), request.get("definition")
        priority, apply_to = request.get("priority", 0), request.get("apply-to", "all")
        if isinstance(priority, str) and priority.isdigit():  # rabbitmqadmin sends strings
            priority = int(priority)
        if (
            not isinstance(pattern, str)
            or not isinstance(definition, dict)
            or not isinstance(priority, int)
            or isinstance(priority, bool)
            or not isinstance(apply_to, str)
        ):
            return _error(400, "bad_request", "bad_request")
        try:
            self.broker.set_policy(
                policy, pattern, definition, vhost=vhost, priority=priority, apply_to=apply_to
            )
        except ValueError as exc:  # an unknown key, a bad value or pattern: nothing changed
            return _error(400, "bad_request", f"Validation failed\n\n{exc}\n")
        return Response(204 if exists else 201)

    def _binding_between(
        self, method: str, rest: list[str], name: str, body: bytes
    ) -> Response | list[dict[str, object]]:
        """``/api/bindings/VHOST/e/SOURCE/{q,e}/DESTINATION[/PROPERTIES_KEY]``: GET lists the
        bindings between the two (or shows one), POST binds (201 with the new binding's
        Location), DELETE unbinds one by its properties key."""
        vhost, source, kind, destination = rest[0], rest[2], rest[3], rest[4]
        self._vhost_of(vhost, name)
        host = self.broker.vhosts[vhost]
        kind_name = "queue" if kind == "q" else "exchange"
        between = [
            b
            for b in self._bindings(name)
            if b["vhost"] == vhost
            and b["source"] == source
            and b["destination"] == destination
            and b["destination_type"] == kind_name
        ]
        read_only = method in ("GET", "HEAD")
        if len(rest) == 6:
            found = [b for b in between if b["properties_key"] == rest[5]]
            if read_only or method == "DELETE":
                if not found:
                    return _error(404, *_NOT_FOUND)
                if read_only:
                    return _json(200, found[0])
                with self._channel(vhost, name) as channel:
                    unbind = channel.queue_unbind if kind == "q" else channel.exchange_unbind
                    unbind(
                        destination,
                        source,
                        str(found[0]["routing_key"]),
                        _table(found[0]["arguments"]),
                    )
                return Response(204)
            return _error(405, *_NOT_ALLOWED)
        if read_only:
            if source not in host.exchanges:
                return _error(404, *_NOT_FOUND)
            ends = host.queues if kind == "q" else host.exchanges
            if destination not in ends:
                return _error(404, *_NOT_FOUND)
            return between
        if method != "POST":
            return _error(405, *_NOT_ALLOWED)
        request = self._body(body)
        routing_key = request.get("routing_key", "")
        arguments = request.get("arguments", {})
        if not isinstance(routing_key, str) or not isinstance(arguments, dict):
            return _error(400, "bad_request", "bad_request")
        if source not in host.exchanges:
            return _error(404, "not_found", f"no exchange '{source}' in vhost '{vhost}'")
        if destination not in (host.queues if kind == "q" else host.exchanges):
            return _error(404, "not_found", f"no {kind_name} '{destination}' in vhost '{vhost}'")
        with self._channel(vhost, name) as channel:
            bind = channel.queue_bind if kind == "q" else channel.exchange_bind
            bind(destination, source, routing_key, arguments)
        # relative to the request's URL, as RabbitMQ's: DESTINATION/PROPERTIES_KEY, quoted
        key = _properties_key(routing_key, _plain(arguments))
        location = f"{quote_plus(destination, safe='')}/{quote(key, safe='')}"
        return Response(201, b"", [("location", location)])

    def _get(self, vhost: str, queue: str, name: str, body: bytes) -> Response:
        self._vhost_of(vhost, name)
        request = self._body(body)
        count = _number(request.get("count", 1))
        ackmode = request.get("ackmode")
        encoding = request.get("encoding", "auto")
        truncate = _number(request.get("truncate"))
        missing = [k for k in ("ackmode", "encoding") if k not in request]
        if missing:
            reason = ",".join(f"{{key_missing,{k}}}" for k in missing)
            return _error(400, "bad_request", f"[{reason}]")
        modes = (
            "ack_requeue_true",
            "ack_requeue_false",
            "reject_requeue_true",
            "reject_requeue_false",
        )
        if not isinstance(count, int) or ackmode not in modes or encoding not in ("auto", "base64"):
            return _error(400, "bad_request", "bad_request")
        requeue = ackmode in ("ack_requeue_true", "reject_requeue_true")
        taken: list[dict[str, object]] = []
        with self._channel(vhost, name) as channel:
            for _ in range(count):
                got = channel.get(queue, no_ack=not requeue)
                if got is None:
                    break
                taken.append(
                    self._message(
                        got.message, got.redelivered, got.message_count, encoding, truncate
                    )
                )
        return _json(200, taken)  # leaving the block requeues what requeue left unacked

    def _publish(self, vhost: str, exchange: str, name: str, body: bytes) -> Response:
        self._vhost_of(vhost, name)
        request = self._body(body)
        routing_key = request.get("routing_key")
        payload = request.get("payload")
        encoding = request.get("payload_encoding", "string")
        properties = request.get("properties", {})
        if (
            not isinstance(routing_key, str)
            or not isinstance(payload, str)
            or encoding not in ("string", "base64")
            or not isinstance(properties, dict)
        ):
            return _error(400, "bad_request", "bad_request")
        try:
            data = base64.b64decode(payload) if encoding == "base64" else payload.encode()
            shown = BasicProperties(**{str(k): v for k, v in properties.items()})
        except (binascii.Error, TypeError, ValueError):
            return _error(400, "bad_request", "bad_request")
        with self._channel(vhost, name) as channel:
            # the API names the default exchange amq.default, as RabbitMQ does
            default = "" if exchange == "amq.default" else exchange
            outcome = channel.publish(default, routing_key, shown, data)
        return _json(200, {"routed": outcome is not None and outcome.routed})

    @staticmethod
    def _message(
        message: Message, redelivered: bool, left: int, encoding: str, truncate: object
    ) -> dict[str, object]:
        body = bytes(message.body)
        size = len(body)
        if isinstance(truncate, int) and truncate >= 0:
            body = body[:truncate]
        try:
            if encoding == "base64":
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "base64 asked")
            payload, kind = body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            payload, kind = base64.b64encode(body).decode("ascii"), "base64"
        return {
            "payload_bytes": size,
            "redelivered": redelivered,
            "exchange": message.exchange,
            "routing_key": message.routing_key,
            "message_count": left,
            "properties": _properties(message.properties),
            "payload": payload,
            "payload_encoding": kind,
        }

    def _channel(self, vhost: str, name: str) -> _ApiChannel:
        return _ApiChannel(self.broker, vhost, name)

    def _exchanges(self, name: str) -> list[dict[str, object]]:
        shown: list[dict[str, object]] = []
        for v in self.broker.vhosts.values():
            if not self._visible(name, v.name):
                continue
            for e in v.exchanges.values():
                item = _exchange_json(v.name, e)
                if e.name.startswith("amq.") or not e.name:
                    # who declared the others is not recorded, so it is left out
                    item["user_who_performed_action"] = "rmq-internal"
                shown.append(item)
        return shown

    def _bindings(self, name: str) -> list[dict[str, object]]:
        shown: list[dict[str, object]] = []
        for v in self.broker.vhosts.values():
            if not self._visible(name, v.name):
                continue
            # RabbitMQ lists each queue's binding to the default exchange first.
            shown.extend(
                self._binding(v.name, "", q.name, "queue", q.name, {}) for q in v.queues.values()
            )
            for e in v.exchanges.values():
                if not e.name:
                    continue
                for b in e.bindings.values():
                    kind = "queue" if isinstance(b.destination, Queue) else "exchange"
                    shown.append(
                        self._binding(
                            v.name, e.name, b.destination.name, kind, b.routing_key, b.arguments
                        )
                    )
        # RabbitMQ's order for bindings (rabbit_mgmt_wm_bindings' sort keys)
        shown.sort(
            key=lambda b: [
                _sort_key(b[k])
                for k in ("vhost", "source", "destination", "routing_key", "properties_key")
            ]
        )
        return shown

    @staticmethod
    def _binding(
        vhost: str, source: str, destination: str, kind: str, key: str, arguments: object
    ) -> dict[str, object]:
        return {
            "source": source,
            "vhost": vhost,
            "destination": destination,
            "destination_type": kind,
            "routing_key": key,
            "arguments": _plain(arguments),
            "properties_key": _properties_key(key, _plain(arguments)),
        }

    def _connection_json(self, session: Session) -> dict[str, object]:
        connection = session.connection
        return {
            "name": self._connection_name(session),
            "peer_host": session.peer.rpartition(":")[0],
            "peer_port": int(session.peer.rpartition(":")[2] or 0),
            "user": session.username or "",
            "vhost": "" if connection is None else connection.vhost.name,
            "channels": self._channels(session),
            "node": _NODE,
            "state": "running",
            "protocol": "AMQP 0-9-1",
            "type": "network",
            "client_properties": _plain(session.client_properties),
            "user_provided_name": session.connection_name,
        }

    @staticmethod
    def _connection_name(session: Session) -> str:
        return session.connection_name or session.peer

    def _connections(
        self, method: str, rest: list[str], name: str, user: User
    ) -> Response | list[dict[str, object]]:
        admin = "administrator" in user.tags or "monitoring" in user.tags
        mine = [s for s in self._sessions() if admin or s.username == name]
        if not rest and method in ("GET", "HEAD"):
            return [self._connection_json(s) for s in mine]
        if len(rest) != 1:
            return _error(404, *_NOT_FOUND)
        found = [s for s in mine if self._connection_name(s) == rest[0]]
        if not found:
            return _error(404, *_NOT_FOUND)
        if method in ("GET", "HEAD"):
            return _json(200, self._connection_json(found[0]))
        if method == "DELETE":
            for session in found:
                self._close(session, "CONNECTION_FORCED - Closed via management plugin")
            return Response(204)
        return _error(405, "Method Not Allowed", "Method Not Allowed")

    def _definitions(self) -> dict[str, object]:
        broker = self.broker
        users = []
        permissions = []
        for user_name in broker.users.names():
            user = broker.users.get(user_name)
            assert user is not None
            users.append(
                {
                    "name": user_name,
                    "password_hash": user.password_hash or "",
                    "hashing_algorithm": "rabbit_password_hashing_sha256",
                    "tags": list(user.tags),
                    "limits": {},
                }
            )
            for vhost in broker.vhosts:
                permission = broker.users.permission(user_name, vhost)
                if permission is not None:
                    permissions.append(
                        {
                            "user": user_name,
                            "vhost": vhost,
                            "configure": permission.configure,
                            "write": permission.write,
                            "read": permission.read,
                        }
                    )
        queues = [
            {
                "name": q.name,
                "vhost": v.name,
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": _plain(q.arguments),
            }
            for v in broker.vhosts.values()
            for q in v.queues.values()
            if q.exclusive_owner is None
        ]
        exchanges = [
            _exchange_json(v.name, e)
            for v in broker.vhosts.values()
            for e in v.exchanges.values()
            if e.name and not e.name.startswith("amq.")
        ]
        bindings = [b for b in self._bindings_unfiltered() if b["source"]]
        policies = [
            _policy_json(v.name, p) for v in broker.vhosts.values() for p in v.policies.values()
        ]
        return {
            "rabbit_version": broker.options.server_version,
            "rabbitmq_version": broker.options.server_version,
            "product_name": broker.options.server_product,
            "product_version": broker.options.server_version,
            "users": users,
            "vhosts": [
                {"name": v, "limits": [], "metadata": {"description": _describe(v), "tags": []}}
                for v in broker.vhosts
            ],
            "permissions": permissions,
            "topic_permissions": [],
            "parameters": [],
            "global_parameters": [],
            "policies": policies,
            "queues": queues,
            "exchanges": exchanges,
            "bindings": [
                {
                    k: b[k]
                    for k in (
                        "source",
                        "vhost",
                        "destination",
                        "destination_type",
                        "routing_key",
                        "arguments",
                    )
                }
                for b in bindings
            ],
        }

    def _bindings_unfiltered(self) -> list[dict[str, object]]:
        shown: list[dict[str, object]] = []
        for v in self.broker.vhosts.values():
            for e in v.exchanges.values():
                for b in e.bindings.values():
                    kind = "queue" if isinstance(b.destination, Queue) else "exchange"
                    shown.append(
                        self._binding(
                            v.name, e.name, b.destination.name, kind, b.routing_key, b.arguments
                        )
                    )
        return shown

    # --- /metrics -----------------------------------------------------------------------------

    def _metrics(self, *, per_object: bool = False) -> Response:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self))
        if per_object:
            registry.register(_PerQueue(self))
        return Response(200, generate_latest(registry), [("content-type", CONTENT_TYPE_LATEST)])


class _Collector(Collector):
    """rabbitmq_prometheus's aggregated metrics (its ``/metrics``, not ``/per-object``)."""

    def __init__(self, api: ManagementApi) -> None:
        self._api = api

    def collect(self) -> Iterator[Metric]:
        api = self._api
        broker = api.broker
        queues = [q for v in broker.vhosts.values() for q in v.queues.values()]
        sessions = api._sessions()  # the same module's helper
        unacked = sum(api._unacked().values())
        ready = sum(q.message_count for q in queues)

        def gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, text, value=value)

        yield gauge("rabbitmq_connections", "Connections currently open", len(sessions))
        yield gauge(
            "rabbitmq_channels",
            "Channels currently open",
            sum(ManagementApi._channels(s) for s in sessions),
        )
        yield gauge("rabbitmq_queues", "Queues available", len(queues))
        yield gauge(
            "rabbitmq_consumers",
            "Consumers currently connected",
            sum(len(q.consumers) for q in queues),
        )
        yield gauge(
            "rabbitmq_queue_messages_ready", "Messages ready to be delivered to consumers", ready
        )
        yield gauge(
            "rabbitmq_queue_messages_unacked",
            "Messages delivered to consumers but not yet acknowledged",
            unacked,
        )
        yield gauge(
            "rabbitmq_queue_messages", "Sum of ready and unacknowledged messages", ready + unacked
        )
        counts = broker.counters
        for name, text, value in (
            (
                "messages_published",
                "Total number of messages published into an exchange on a channel",
                counts.published,
            ),
            (
                "messages_confirmed",
                "Total number of messages published into an exchange and confirmed on the channel",
                counts.confirmed,
            ),
            (
                "messages_unroutable_returned",
                (
                    "Total number of messages published as mandatory into an exchange and "
                    "returned to the publisher as unroutable"
                ),
                counts.unroutable_returned,
            ),
            (
                "messages_unroutable_dropped",
                (
                    "Total number of messages published as non-mandatory into an exchange and "
                    "dropped as unroutable"
                ),
                counts.unroutable_dropped,
            ),
            (
                "get_ack",
                "Total number of messages fetched with basic.get in manual acknowledgement mode",
                counts.get_ack,
            ),
            (
                "get",
                "Total number of messages fetched with basic.get in automatic acknowledgement mode",
                counts.get,
            ),
            (
                "messages_delivered_ack",
                "Total number of messages delivered to consumers in manual acknowledgement mode",
                counts.delivered_ack,
            ),
            (
                "messages_delivered",
                "Total number of messages delivered to consumers in automatic acknowledgement mode",
                counts.delivered,
            ),
            (
                "messages_redelivered",
                "Total number of messages redelivered to consumers",
                counts.redelivered,
            ),
            ("messages_acked", "Total number of messages acknowledged by consumers", counts.acked),
            (
                "get_empty",
                "Total number of times basic.get operations fetched no message",
                counts.get_empty,
            ),
        ):
            # rabbitmq_prometheus's aggregated channel counters (the _total suffix is the
            # client library's)
            yield CounterMetricFamily(f"rabbitmq_channel_{name}", text, value=value)
        yield InfoMetricFamily(
            "rabbitmq_build",
            "RabbitMQ & Erlang/OTP version info",
            value={
                "rabbitmq_version": broker.options.server_version,
                "product_name": broker.options.server_product,
                "product_version": broker.options.server_version,
            },
        )
        yield InfoMetricFamily(
            "rabbitmq_identity",
            "RabbitMQ node & cluster identity info",
            value={"rabbitmq_node": _NODE, "rabbitmq_cluster": _NODE},
        )


class _ApiChannel:
    """A connection and channel of the API's own, for one request, as the user who made it
    (so permissions apply as to an AMQP client); closing it requeues what it left unacked."""

    def __init__(self, broker: Broker, vhost: str, user: str) -> None:
        self._connection = broker.connect(
            vhost, _NoSink(), user=user, permission=broker.users.permission(user, vhost)
        )

    def __enter__(self) -> ModelChannel:
        return self._connection.open_channel(1)

    def __exit__(self, *exc_info: object) -> None:
        self._connection.close()


if TYPE_CHECKING:
    from .._channel import ModelChannel


def _exchange_json(vhost: str, exchange: Exchange[Queue]) -> dict[str, object]:
    """An exchange as ``/api/exchanges`` and the definitions show it."""
    return {
        "name": exchange.name,
        "vhost": vhost,
        "type": exchange.type,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": _plain(exchange.arguments),
    }


def _policy_json(vhost: str, policy: Policy) -> dict[str, object]:
    """A policy as ``/api/policies`` and the definitions show it."""
    return {
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to,
        "definition": _plain(policy.definition),
        "priority": policy.priority,
    }


@final
class _PerQueue(Collector):
    """rabbitmq_prometheus's ``/metrics/per-object`` queue gauges, labelled ``vhost`` and
    ``queue`` (the aggregated ones come too, as on RabbitMQ)."""

    def __init__(self, api: ManagementApi) -> None:
        self._api = api

    def collect(self) -> Iterator[Metric]:
        api = self._api
        unacked = api._unacked_sizes()
        families = {
            name: GaugeMetricFamily(f"rabbitmq_queue_{name}", text, labels=("vhost", "queue"))
            for name, text in (
                ("messages_ready", "Messages ready to be delivered to consumers"),
                ("messages_unacked", "Messages delivered to consumers but not yet acknowledged"),
                ("messages", "Sum of ready and unacknowledged messages"),
                ("consumers", "Consumers on a queue"),
                ("messages_bytes", "Size in bytes of ready and unacknowledged messages"),
                ("messages_ready_bytes", "Size in bytes of ready messages"),
                ("messages_unacked_bytes", "Size in bytes of all unacknowledged messages"),
            )
        }
        for vhost in api.broker.vhosts.values():
            for queue in vhost.queues.values():
                labels = (vhost.name, queue.name)
                count, octets = unacked.get(labels, (0, 0))
                ready = queue.message_count
                values: list[tuple[str, int]] = [
                    ("messages_ready", ready),
                    ("messages_unacked", count),
                    ("messages", ready + count),
                    ("consumers", len(queue.consumers)),
                ]
                if queue.log is None:  # a stream's retained log has no byte counts here
                    values += [
                        ("messages_bytes", queue.ready_bytes + octets),
                        ("messages_ready_bytes", queue.ready_bytes),
                        ("messages_unacked_bytes", octets),
                    ]
                for name, value in values:
                    families[name].add_metric(labels, value)
        yield from families.values()
