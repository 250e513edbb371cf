"""The management HTTP API and /metrics (issue 34): against the embedded broker through the
plugin's fixtures, and side by side with a private RabbitMQ 3.10 node running
rabbitmq_management and rabbitmq_prometheus (one node for the module), comparing status codes,
error bodies and the JSON keys and values that do not depend on timing or on the node."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Final

import pytest
from prometheus_client.parser import text_string_to_metric_families

import amqp_blocking
from amqp_broker import BrokerThread, User
from amqp_broker._cli import parse_args

from ..support.rabbitmq_node import RabbitMQNode, rabbitmq_node

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

GUEST: Final = ("guest", "guest")
SIDE_POLICY: Final = {
    "pattern": "^p",
    "definition": {"max-length": 5},
    "priority": 1,
    "apply-to": "queues",
}
WAIT: Final = 30.0


def call(
    url: str,
    method: str = "GET",
    body: object = None,
    auth: tuple[str, str] | None = GUEST,
) -> tuple[int, object]:
    """Status and decoded JSON body (None when empty, the text when not JSON)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    if not raw:
        return status, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


pytestmark = pytest.mark.amqp_broker(management=True)


def test_overview_counts_queues_connections_and_messages(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    with amqp_blocking.connect(f"{amqp_broker.url}?name=counted") as conn:
        channel = conn.channel()
        channel.queue_declare("m-counted")
        for body in (b"a", b"b", b"c"):
            channel.basic_publish(body, routing_key="m-counted")
        assert channel.basic_get("m-counted") is not None  # one unacknowledged
        status, overview = call(amqp_management_url + "api/overview")
        assert status == 200
        assert isinstance(overview, dict)
        assert overview["object_totals"]["queues"] == 1
        assert overview["object_totals"]["connections"] == 1
        assert overview["object_totals"]["channels"] == 1
        assert overview["queue_totals"] == {
            "messages": 3,
            "messages_ready": 2,
            "messages_unacknowledged": 1,
        }
        status, queue = call(amqp_management_url + "api/queues/%2F/m-counted")
        assert status == 200
        assert isinstance(queue, dict)
        assert (queue["messages_ready"], queue["messages_unacknowledged"]) == (2, 1)


def test_connections_listed_and_closed_by_name(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    with amqp_blocking.connect(f"{amqp_broker.url}?name=doomed") as conn:
        conn.channel()
        status, listed = call(amqp_management_url + "api/connections")
        assert status == 200
        assert isinstance(listed, list)
        assert [(c["name"], c["user"], c["vhost"], c["channels"]) for c in listed] == [
            ("doomed", "guest", "/", 1)
        ]
        assert call(amqp_management_url + "api/connections/doomed", "DELETE") == (204, None)
        with pytest.raises(Exception, match="Closed via management plugin"):
            conn.channel().queue_declare("m-never", passive=True)
    assert call(amqp_management_url + "api/connections/doomed") == (
        404,
        {"error": "Object Not Found", "reason": "Not Found"},
    )


def test_get_requeues_or_takes_and_encodes_binary_payloads(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    url = amqp_management_url + "api/queues/%2F/m-get"
    assert call(url, "PUT", {"durable": False}) == (201, None)
    with amqp_blocking.connect(amqp_broker.url) as conn:
        channel = conn.channel()
        channel.basic_publish(b"text", routing_key="m-get")
        channel.basic_publish(b"\xff\x00", routing_key="m-get")
    status, got = call(
        url + "/get", "POST", {"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}
    )
    assert status == 200
    assert isinstance(got, list)
    assert [(m["payload"], m["payload_encoding"], m["message_count"]) for m in got] == [
        ("text", "string", 1),
        ("/wA=", "base64", 0),
    ]
    assert len(amqp_broker.peek("m-get")) == 2  # requeued
    status, got = call(
        url + "/get",
        "POST",
        {"count": 1, "ackmode": "ack_requeue_false", "encoding": "auto", "truncate": 2},
    )
    assert isinstance(got, list)
    assert [(m["payload"], m["payload_bytes"], m["redelivered"]) for m in got] == [("te", 4, True)]
    assert len(amqp_broker.peek("m-get")) == 1  # taken
    assert call(url + "/contents", "DELETE") == (204, None)
    assert amqp_broker.peek("m-get") == ()
    assert call(url, "DELETE") == (204, None)


def test_users_need_a_management_tag_and_see_only_their_vhosts(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    amqp_broker.call(lambda b: b.users.add("app", User("pw", tags=())))
    amqp_broker.call(lambda b: b.add_vhost("other"))
    amqp_broker.call(lambda b: b.users.add("viewer", User("pw", tags=("management",))))
    amqp_broker.call(lambda b: b.set_permissions("viewer", "other"))
    assert call(amqp_management_url + "api/overview", auth=("app", "pw")) == (
        401,
        {"error": "not_authorized", "reason": "Not management user"},
    )
    assert call(amqp_management_url + "api/whoami", auth=("viewer", "pw")) == (
        200,
        {"name": "viewer", "tags": ["management"]},
    )
    status, vhosts = call(amqp_management_url + "api/vhosts", auth=("viewer", "pw"))
    assert isinstance(vhosts, list)
    assert [v["name"] for v in vhosts] == ["other"]
    status, _ = call(amqp_management_url + "api/definitions", auth=("viewer", "pw"))
    assert status == 401
    status, _ = call(amqp_management_url + "api/queues/%2F/m-x", "PUT", {}, auth=("viewer", "pw"))
    assert status == 401


def test_metrics_use_rabbitmq_prometheus_names(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    with amqp_blocking.connect(amqp_broker.url) as conn:
        channel = conn.channel()
        channel.queue_declare("m-metrics")
        channel.basic_publish(b"x", routing_key="m-metrics")
        with urllib.request.urlopen(amqp_management_url + "metrics", timeout=WAIT) as response:
            text = response.read().decode()
    values = {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert values["rabbitmq_queues"] == 1
    assert values["rabbitmq_connections"] == 1
    assert values["rabbitmq_channels"] == 1
    assert values["rabbitmq_queue_messages_ready"] == 1
    assert values["rabbitmq_build_info"] == 1


def test_bad_http_is_a_400_and_the_server_goes_on(amqp_management_url: str) -> None:
    port = int(amqp_management_url.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 400")
    assert call(amqp_management_url + "api/healthchecks/node") == (200, {"status": "ok"})


def test_the_command_line_and_toml_take_a_management_port(tmp_path: object) -> None:
    assert parse_args(["--management-port", "15672"]).management_port == 15672
    assert parse_args([]).management_port is None


# --- side by side with RabbitMQ ----------------------------------------------------------------

#: guest's password as RabbitMQ's rabbit_password_hashing_sha256 stores it (salt 97b0c30e).
HASH: Final = "l7DDDv3zVV24K8LJ4tWPtqrD7DyUI5Wy/eyUAwYSPtOF3FzY"

#: Requests made in this order on both brokers; each answer's status and body are compared.
SCENARIO: Final[list[tuple[str, str, object]]] = [
    ("GET", "api/whoami", None),
    ("GET", "api/vhosts/%2F", None),
    ("GET", "api/vhosts/nope", None),
    ("PUT", "api/queues/%2F/side", {"durable": False, "arguments": {"x-max-length": 5}}),
    ("PUT", "api/queues/%2F/side", {"durable": False, "arguments": {"x-max-length": 5}}),
    ("PUT", "api/queues/%2F/side", {"durable": True}),
    ("PUT", "api/queues/%2F/side2", "a string"),
    ("GET", "api/queues/%2F/side", None),
    (
        "POST",
        "api/queues/%2F/side/get",
        {"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
    ),
    ("POST", "api/queues/%2F/side/get", {"count": 1}),
    ("GET", "api/bindings/%2F", None),
    ("DELETE", "api/queues/%2F/side/contents", None),
    ("DELETE", "api/queues/%2F/side", None),
    ("DELETE", "api/queues/%2F/side", None),
    ("GET", "api/queues/%2F/nope", None),
    ("GET", "api/queues/nope", None),
    ("GET", "api/exchanges/%2F/amq.topic", None),
    ("GET", "api/exchanges/%2F/nope", None),
    ("PUT", "api/exchanges/%2F/side-x", {"type": "direct", "durable": True}),
    ("PUT", "api/exchanges/%2F/side-x", {"type": "direct", "durable": True}),
    ("PUT", "api/exchanges/%2F/side-x", {"type": "fanout", "durable": True}),
    ("PUT", "api/exchanges/%2F/side-y", {"type": "nope"}),
    ("PUT", "api/exchanges/%2F/amq.side", {"type": "direct"}),
    ("PUT", "api/exchanges/nope/side-x", {"type": "direct"}),
    ("PUT", "api/exchanges/%2F/amq.direct", {"type": "direct", "durable": True}),
    ("GET", "api/exchanges/%2F/side-x", None),
    ("PUT", "api/queues/%2F/side-bq", {"durable": False}),
    ("POST", "api/bindings/%2F/e/side-x/q/side-bq", {"routing_key": "a b~c%/d"}),
    ("POST", "api/bindings/%2F/e/side-x/q/side-bq", {}),
    ("POST", "api/bindings/%2F/e/side-x/e/amq.fanout", {"routing_key": "r"}),
    ("POST", "api/bindings/%2F/e/nope/q/side-bq", {}),
    ("POST", "api/bindings/%2F/e/side-x/q/nope", {}),
    ("GET", "api/bindings/%2F/e/side-x/q/side-bq", None),
    ("GET", "api/bindings/%2F/e/side-x/q/side-bq/~", None),
    ("GET", "api/bindings/%2F/e/side-x/q/side-bq/a+b%257Ec%2525%252Fd", None),
    ("GET", "api/bindings/%2F/e/side-x/q/side-bq/nope", None),
    ("GET", "api/exchanges/%2F/side-x/bindings/source", None),
    ("GET", "api/exchanges/%2F/amq.fanout/bindings/destination", None),
    ("GET", "api/queues/%2F/side-bq/bindings", None),
    ("DELETE", "api/exchanges/%2F/side-x?if-unused=true", None),
    ("DELETE", "api/bindings/%2F/e/side-x/q/side-bq/~", None),
    ("DELETE", "api/bindings/%2F/e/side-x/q/side-bq/~", None),
    ("DELETE", "api/bindings/%2F/e/side-x/e/amq.fanout/r", None),
    ("DELETE", "api/exchanges/%2F/side-x", None),
    ("DELETE", "api/exchanges/%2F/side-x", None),
    ("DELETE", "api/exchanges/%2F/amq.direct", None),
    ("DELETE", "api/queues/%2F/side-bq", None),
    ("GET", "api/nope", None),
    ("GET", "api/healthchecks/node", None),
    ("GET", "api/aliveness-test/%2F", None),
    ("GET", "api/aliveness-test/nope", None),
    ("GET", "api/connections", None),
    ("GET", "api/connections?page=1", None),
    ("GET", "api/connections/nope", None),
    ("GET", "api/users/guest/permissions", None),
    ("GET", "api/vhosts/%2F/permissions", None),
    ("GET", "api/permissions", None),
    ("PUT", "api/vhosts/side-vh", None),
    ("PUT", "api/vhosts/side-vh", None),
    ("GET", "api/permissions/side-vh/guest", None),
    ("GET", "api/users/guest/permissions", None),
    ("GET", "api/vhosts", None),
    ("GET", "api/vhosts/nope/permissions", None),
    ("GET", "api/users/nope/permissions", None),
    ("PUT", "api/queues/side-vh/pa", {"durable": False}),
    ("PUT", "api/queues/side-vh/Pb", {"durable": False}),
    ("PUT", "api/queues/side-vh/c", {"durable": False}),
    ("GET", "api/queues/side-vh", None),
    ("GET", "api/queues/side-vh?name=p", None),
    ("GET", "api/queues/side-vh?page=1&page_size=1&name=p", None),
    ("GET", "api/queues/side-vh?page=2&page_size=2", None),
    ("GET", "api/queues/side-vh?page=3&page_size=1&name=p", None),
    ("GET", "api/queues/side-vh?page=4&page_size=1&name=p", None),
    ("GET", "api/queues/side-vh?page=1&name=%5Ep&use_regex=true", None),
    ("GET", "api/queues/side-vh?page=1&name=(&use_regex=true", None),
    ("GET", "api/queues/side-vh?page=1&sort=name&sort_reverse=true", None),
    ("GET", "api/queues/side-vh?page=0", None),
    ("GET", "api/queues/side-vh?page=1&page_size=501", None),
    ("GET", "api/queues/side-vh?page=x", None),
    ("PUT", "api/users/side-hashed", {"password_hash": HASH, "tags": ""}),
    ("GET", "api/users/side-hashed", None),
    ("PUT", "api/users/side-hashed", {"password": "x"}),
    ("PUT", "api/users/side-bad", {"password_hash": "!!", "tags": ""}),
    ("PUT", "api/users/side-bad", {"password": "x", "password_hash": HASH, "tags": ""}),
    ("POST", "api/users/bulk-delete", {"users": ["nobody", "side-hashed"]}),
    ("POST", "api/users/bulk-delete", {}),
    ("GET", "api/users/side-hashed", None),
    ("POST", "api/users/bulk-delete", {"users": ["side-hashed"]}),
    ("GET", "api/users/side-hashed", None),
    ("GET", "api/users/bulk-delete", None),
    ("PUT", "api/users/side-user", {"password": "pw", "tags": "monitoring"}),
    ("GET", "api/users/side-user", None),
    ("PUT", "api/users/side-user", {"password": "pw", "tags": "management,monitoring"}),
    ("GET", "api/permissions/side-vh/side-user", None),
    ("PUT", "api/permissions/side-vh/side-user", {"configure": "", "write": ".*", "read": "^r"}),
    ("GET", "api/permissions/side-vh/side-user", None),
    ("PUT", "api/permissions/side-vh/side-user", {"configure": ".*", "write": ".*", "read": ".*"}),
    ("PUT", "api/permissions/nope/side-user", {"configure": ".*", "write": ".*", "read": ".*"}),
    ("DELETE", "api/permissions/side-vh/side-user", None),
    ("GET", "api/permissions/side-vh/side-user", None),
    ("DELETE", "api/users/side-user", None),
    ("GET", "api/users/side-user", None),
    ("DELETE", "api/users/side-user", None),
    ("GET", "api/policies/side-vh", None),
    ("PUT", "api/policies/side-vh/side-pol", SIDE_POLICY),
    ("PUT", "api/policies/side-vh/side-pol", {**SIDE_POLICY, "priority": 2}),
    ("GET", "api/policies/side-vh", None),
    ("GET", "api/policies/side-vh/side-pol", None),
    ("GET", "api/queues/side-vh/pa", None),
    ("PUT", "api/policies/nope/side-pol", SIDE_POLICY),
    ("DELETE", "api/policies/side-vh/side-pol", None),
    ("DELETE", "api/policies/side-vh/side-pol", None),
    ("GET", "api/policies/side-vh/side-pol", None),
    ("DELETE", "api/vhosts/side-vh", None),
    ("DELETE", "api/vhosts/side-vh", None),
    (
        "POST",
        "api/definitions",
        {
            "vhosts": [{"name": "side-def"}],
            "queues": [
                {
                    "name": "side-dq",
                    "vhost": "side-def",
                    "durable": True,
                    "auto_delete": False,
                    "arguments": {},
                }
            ],
            "exchanges": [
                {
                    "name": "side-dx",
                    "vhost": "side-def",
                    "type": "fanout",
                    "durable": True,
                    "auto_delete": False,
                    "internal": False,
                    "arguments": {},
                }
            ],
            "bindings": [
                {
                    "source": "side-dx",
                    "vhost": "side-def",
                    "destination": "side-dq",
                    "destination_type": "queue",
                    "routing_key": "k",
                    "arguments": {},
                }
            ],
        },
    ),
    ("GET", "api/exchanges/side-def/side-dx", None),
    ("GET", "api/bindings/side-def", None),
    ("POST", "api/definitions", "a string"),
    ("DELETE", "api/vhosts/side-def", None),
]

#: Fields whose values depend on the node (its name), and those RabbitMQ shows only once its
#: stats collector has seen the queue (a few seconds after it is declared: timing).
NODE_FIELDS: Final = {"node", "cluster_state"}
#: Salted: present on both, never equal.
SALTED_FIELDS: Final = {"password_hash"}
TIMED_FIELDS: Final = {
    "state",
    "policy",
    "consumers",
    "messages",
    "messages_ready",
    "messages_unacknowledged",
    "message_bytes",
    "message_bytes_ready",
    "message_bytes_unacknowledged",
}


def _comparable(ours: object, theirs: object) -> tuple[object, object]:
    """Ours as is; theirs cut down to our keys (RabbitMQ has more: rates, GC, ...), in nested
    objects too (a page's items)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = set(ours) - NODE_FIELDS - TIMED_FIELDS
        assert keys <= set(theirs), f"keys RabbitMQ does not have: {keys - set(theirs)}"
        keys -= SALTED_FIELDS
        fields = {k: _comparable(ours[k], theirs[k]) for k in keys}
        return {k: p[0] for k, p in fields.items()}, {k: p[1] for k, p in fields.items()}
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        pairs = [_comparable(o, t) for o, t in zip(ours, theirs, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return ours, theirs


@pytest.fixture(scope="module")
def management_node() -> Iterator[RabbitMQNode]:
    # statistics every half second (RabbitMQ: 5 s), so its counters and per-queue gauges
    # show a workload soon after it
    with rabbitmq_node(management=True, extra_conf="collect_statistics_interval = 500\n") as node:
        yield node


@pytest.fixture(scope="module")
def rabbitmq_management(management_node: RabbitMQNode) -> str:
    return f"http://127.0.0.1:{management_node.management_port}/"


@pytest.fixture(scope="module")
def rabbitmq_metrics(management_node: RabbitMQNode) -> tuple[str, str]:
    """The node's AMQP URL and its rabbitmq_prometheus ``/metrics`` URL."""
    return management_node.url, f"http://127.0.0.1:{management_node.prometheus_port}/metrics"


@pytest.fixture(scope="module")
def rabbitmqadmin(rabbitmq_management: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rabbitmqadmin as the node serves it (fetched at test time, never committed)."""
    path = tmp_path_factory.mktemp("rabbitmqadmin") / "rabbitmqadmin"
    with urllib.request.urlopen(rabbitmq_management + "cli/rabbitmqadmin", timeout=WAIT) as got:
        path.write_bytes(got.read())
    return path


@pytest.mark.rabbitmq
def test_side_by_side_with_rabbitmq(rabbitmq_management: str, amqp_management_url: str) -> None:
    for method, path, body in SCENARIO:
        ours = call(amqp_management_url + path, method, body)
        theirs = call(rabbitmq_management + path, method, body)
        assert ours[0] == theirs[0], (method, path, ours, theirs)
        assert _comparable(ours[1], theirs[1])[0] == _comparable(ours[1], theirs[1])[1], (
            method,
            path,
        )


@pytest.mark.rabbitmq
def test_authentication_failures_as_rabbitmq(
    rabbitmq_management: str, amqp_management_url: str
) -> None:
    for auth in (None, ("guest", "wrong"), ("nobody", "x")):
        assert call(amqp_management_url + "api/overview", auth=auth) == call(
            rabbitmq_management + "api/overview", auth=auth
        )


@pytest.mark.rabbitmq
def test_overview_and_definitions_keys_are_rabbitmqs(
    rabbitmq_management: str, amqp_management_url: str
) -> None:
    for path in ("api/overview", "api/definitions"):
        _, ours = call(amqp_management_url + path)
        _, theirs = call(rabbitmq_management + path)
        assert isinstance(ours, dict)
        assert isinstance(theirs, dict)
        assert set(ours) <= set(theirs), set(ours) - set(theirs)
    _, ours = call(amqp_management_url + "api/overview")
    _, theirs = call(rabbitmq_management + "api/overview")
    assert isinstance(ours, dict)
    assert isinstance(theirs, dict)
    assert set(ours["object_totals"]) == set(theirs["object_totals"])
    assert set(ours["queue_totals"]) <= set(theirs["queue_totals"]) | {
        "messages",
        "messages_ready",
        "messages_unacknowledged",
    }


#: rabbitmqadmin's common commands and a piece of what each prints, in order.
ADMIN_COMMANDS: Final = [
    ("list vhosts", "| /    |"),
    ("declare queue name=m-admin durable=false", "queue declared"),
    ("list queues", "m-admin"),
    ("publish routing_key=m-admin payload=hello", "Message published"),
    ("get queue=m-admin ackmode=ack_requeue_true", "hello"),
    ("list exchanges", "amq.topic"),
    ("list bindings", "m-admin"),
    ("show overview", "3.10.8"),
    ("import {definitions}", "Uploaded definitions"),
    ("list users", "guest"),
    ("purge queue name=m-admin", "queue purged"),
    ("delete queue name=m-admin", "queue deleted"),
]


@pytest.mark.rabbitmq
def test_rabbitmqadmin_runs_its_common_commands_against_the_broker(
    rabbitmqadmin: Path, amqp_management_url: str, tmp_path: Path
) -> None:
    port = amqp_management_url.rsplit(":", 1)[1].strip("/")
    base = [sys.executable, str(rabbitmqadmin), "-H", "127.0.0.1", "-P", port]
    definitions = tmp_path / "import.json"
    definitions.write_text(json.dumps({"queues": [{"name": "m-imported", "vhost": "/"}]}))
    for command, expected in ADMIN_COMMANDS:
        done = subprocess.run(
            [*base, *command.format(definitions=definitions).split()],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert (done.returncode, expected in done.stdout) == (0, True), (command, done)
    exported = tmp_path / "definitions.json"
    done = subprocess.run(
        [*base, "export", str(exported)], capture_output=True, text=True, timeout=WAIT, check=False
    )
    assert done.returncode == 0, done
    exported_queues = json.loads(exported.read_text())["queues"]
    assert [q["name"] for q in exported_queues] == ["m-imported"]
    nodes = subprocess.run(
        [*base, "list", "nodes"], capture_output=True, text=True, timeout=WAIT, check=False
    )
    assert (nodes.returncode, "rabbit@localhost" in nodes.stdout) == (0, True), nodes


def test_channels_and_consumers_and_metrics_agree_with_the_snapshot(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    with amqp_blocking.connect(f"{amqp_broker.url}?name=worker") as conn:
        channel = conn.channel()
        channel.queue_declare("m-work")
        for body in (b"1", b"2", b"3", b"4"):
            channel.basic_publish(body, routing_key="m-work")
        assert channel.basic_get("m-work") is not None
        other = conn.channel()
        other.queue_declare("m-idle")
        with other.basic_consume("m-idle", consumer_tag="idle-tag"):
            _, channels = call(amqp_management_url + "api/channels")
            _, consumers = call(amqp_management_url + "api/consumers/%2F")
            with urllib.request.urlopen(amqp_management_url + "metrics", timeout=WAIT) as got:
                text = got.read().decode()
            snapshot = amqp_broker.snapshot()
    assert isinstance(channels, list)
    assert sorted((c["name"], c["messages_unacknowledged"]) for c in channels) == [
        ("worker (1)", 1),
        ("worker (2)", 0),
    ]
    assert isinstance(consumers, list)
    assert [(c["consumer_tag"], c["queue"]["name"]) for c in consumers] == [("idle-tag", "m-idle")]
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["rabbitmq_queue_messages_ready"] == sum(q.messages_ready for q in snapshot.queues)
    assert values["rabbitmq_queue_messages_unacked"] == sum(
        q.messages_unacknowledged for q in snapshot.queues
    )
    assert values["rabbitmq_consumers"] == sum(q.consumers for q in snapshot.queues) == 1
    assert values["rabbitmq_channels"] == sum(c.channels for c in snapshot.connections) == 2


def test_bad_input_changes_nothing(amqp_broker: BrokerThread, amqp_management_url: str) -> None:
    url = amqp_management_url + "api/queues/%2F/m-bad"
    assert call(url, "PUT", {"durable": "maybe"})[0] == 400
    status, _ = call(amqp_management_url + "api/queues/nope/m-bad", "PUT", {})
    assert status == 404
    request = urllib.request.Request(url, data=b"{not json", method="PUT")
    token = base64.b64encode(b"guest:guest").decode()
    request.add_header("authorization", f"Basic {token}")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=WAIT)
    assert caught.value.code == 400
    caught.value.close()
    port = int(amqp_management_url.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(
            b"PUT /api/queues/%2F/m-bad HTTP/1.1\r\nhost: x\r\n"
            b"content-length: 20000000\r\n\r\n" + b"x" * 17_000_000
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 413")
    assert [q.name for q in amqp_broker.snapshot().queues] == []


def test_responses_carry_rabbitmqs_reason_phrases(amqp_management_url: str) -> None:
    """Clients quote the phrase in their errors (requests: "401 Client Error: Unauthorized for
    url: ..."; amqpstorm's test_api_with_invalid_credentials matches on it)."""
    port = int(amqp_management_url.rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        sock.sendall(b"GET /api/overview HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as sock:
        token = base64.b64encode(b"guest:guest")
        sock.sendall(
            b"GET /api/nope HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            b"authorization: Basic " + token + b"\r\n\r\n"
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 404 Not Found\r\n")


def test_queues_show_their_message_bytes(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    """RabbitMQ's message_bytes (ready + unacknowledged body octets; aioamqp's
    test_empty_publish reads it), message_bytes_ready and message_bytes_unacknowledged."""
    with amqp_blocking.connect(amqp_broker.url) as conn:
        channel = conn.channel()
        channel.queue_declare("m-bytes")
        for body in (b"", b"abc", b"defgh"):
            channel.basic_publish(body, routing_key="m-bytes")
        assert channel.basic_get("m-bytes") is not None  # the empty one, unacknowledged
        assert channel.basic_get("m-bytes") is not None  # abc
        status, queue = call(amqp_management_url + "api/queues/%2F/m-bytes")
    assert status == 200
    assert isinstance(queue, dict)
    assert (
        queue["message_bytes"],
        queue["message_bytes_ready"],
        queue["message_bytes_unacknowledged"],
    ) == (8, 5, 3)


def test_management_url_names_the_address_the_broker_listens_on() -> None:
    with BrokerThread(host="127.34.0.9", management=True) as broker:
        url = broker.management_url
        assert url.startswith("http://127.34.0.9:")
        assert call(url + "api/healthchecks/node") == (200, {"status": "ok"})


def _headers(url: str, method: str, body: object) -> tuple[int, dict[str, str]]:
    """Status and headers (lower-case names) of one request as guest."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method)
    request.add_header("content-type", "application/json")
    request.add_header("authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(request, timeout=WAIT) as response:
        return response.status, {k.lower(): v for k, v in response.headers.items()}


def test_exchanges_are_declared_and_deleted_through_the_api(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    url = amqp_management_url + "api/exchanges/%2F/"
    assert call(url + "m-x", "PUT", {"type": "topic", "durable": True})[0] == 201
    assert call(url + "m-x", "PUT", {"type": "topic", "durable": True})[0] == 204
    assert call(url + "m-x", "PUT", {"type": "fanout", "durable": True}) == (
        400,
        {
            "error": "bad_request",
            "reason": "inequivalent arg 'type' for exchange 'm-x' in vhost '/': "
            "received 'fanout' but current is 'topic'",
        },
    )
    assert call(url + "m-bad", "PUT", {"type": "nope"})[0] == 400
    assert call(url + "m-bad", "PUT", {"type": "direct", "durable": "maybe"})[0] == 400
    assert call(url + "amq.mine", "PUT", {"type": "direct"}) == (
        401,
        {"error": "not_authorised", "reason": "Access refused."},
    )
    assert call(amqp_management_url + "api/exchanges/nope/m-x", "PUT", {"type": "direct"}) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    status, shown = call(url + "m-x")
    assert status == 200
    assert isinstance(shown, dict)
    assert (shown["type"], shown["durable"], shown["auto_delete"]) == ("topic", True, False)
    binding = amqp_management_url + "api/bindings/%2F/e/m-x/e/amq.direct"
    assert call(binding, "POST", {"routing_key": "k"})[0] == 201
    assert call(url + "m-x?if-unused=true", "DELETE") == (
        400,
        {"error": "bad_request", "reason": "exchange 'm-x' in vhost '/' in use"},
    )
    assert call(url + "m-x", "DELETE")[0] == 204
    assert call(url + "m-x", "DELETE")[0] == 404
    assert call(url + "amq.direct", "DELETE")[0] == 401
    names = {e.name for e in amqp_broker.snapshot().exchanges if e.vhost == "/"}
    assert not names & {"m-x", "m-bad", "amq.mine"}


def test_bindings_are_made_and_removed_by_their_properties_key(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    base = amqp_management_url + "api/"
    assert call(base + "queues/%2F/m-bq", "PUT", {"durable": False})[0] == 201
    between = base + "bindings/%2F/e/amq.topic/q/m-bq"
    # RabbitMQ's Location: the destination and the properties key, quoted again
    status, headers = _headers(between, "POST", {"routing_key": "a b~c%"})
    assert (status, headers["location"]) == (201, "m-bq/a%2Bb%257Ec%2525")
    status, headers = _headers(between, "POST", {"routing_key": "", "arguments": {"x": 1}})
    assert status == 201
    hashed = headers["location"].split("/")[1]
    assert hashed[0] == "~"
    assert len(hashed) == 7  # 4 bytes in base64url, unpadded
    status, listed = call(between)
    assert status == 200
    assert isinstance(listed, list)
    assert [(b["routing_key"], b["properties_key"]) for b in listed] == [
        ("", hashed),
        ("a b~c%", "a+b%7Ec%25"),
    ]
    assert call(between + "/" + hashed.replace("~", "%7E"))[1] == listed[0]
    assert call(base + "queues/%2F/m-bq/bindings")[1] == [
        {
            "source": "",
            "vhost": "/",
            "destination": "m-bq",
            "destination_type": "queue",
            "routing_key": "m-bq",
            "arguments": {},
            "properties_key": "m-bq",
        },
        *listed,
    ]
    assert call(base + "exchanges/%2F/amq.topic/bindings/source")[1] == listed
    assert call(between + "/a+b%257Ec%2525", "DELETE")[0] == 204
    assert call(between + "/a+b%257Ec%2525", "DELETE")[0] == 404
    assert call(base + "bindings/%2F/e/nope/q/m-bq", "POST", {}) == (
        404,
        {"error": "not_found", "reason": "no exchange 'nope' in vhost '/'"},
    )
    assert call(between, "POST", {"routing_key": 5})[0] == 400
    (queue,) = amqp_broker.snapshot().queues
    assert queue.name == "m-bq"
    assert call(between)[1] == listed[:1]


def test_listings_page_filter_and_sort_as_rabbitmq(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    base = amqp_management_url + "api/queues/%2F"
    for name in ("abc", "def", "Abd"):
        assert call(f"{base}/{name}", "PUT", {"durable": False})[0] == 201
    _, unpaged = call(base + "?name=ab")  # no page: every queue, sorted by vhost and name
    assert isinstance(unpaged, list)
    assert [q["name"] for q in unpaged] == ["Abd", "abc", "def"]
    status, page = call(base + "?page=1&page_size=1&name=AB")
    assert status == 200
    assert isinstance(page, dict)
    assert [q["name"] for q in page.pop("items")] == ["Abd"]
    assert page == {
        "filtered_count": 2,
        "item_count": 1,
        "page": 1,
        "page_count": 2,
        "page_size": 1,
        "total_count": 3,
    }
    _, regex = call(base + "?page=1&name=%5Ea&use_regex=true&sort=name&sort_reverse=true")
    assert isinstance(regex, dict)
    assert [q["name"] for q in regex["items"]] == ["abc", "Abd"]
    assert call(base + "?page=3&page_size=2") == (
        400,
        {"error": "page_out_of_range", "reason": "Page out of range, page: 3 page size: 2, len: 3"},
    )
    assert call(base + "?page=0")[1] == {
        "error": "invalid_pagination_parameters",
        "reason": "Invalid pagination parameters: page number 0, page size undefined",
    }
    for bad in ("?page=x", "?page=1&name=(&use_regex=true"):
        assert call(base + bad) == (
            400,
            {"error": "bad_request", "reason": "Pagination parameters are invalid"},
        )
    _, exchanges = call(amqp_management_url + "api/exchanges?page=1&page_size=2&name=.t")
    assert isinstance(exchanges, dict)
    assert [e["name"] for e in exchanges["items"]] == ["amq.topic"]
    with amqp_blocking.connect(f"{amqp_broker.url}?name=paged"):
        _, connections = call(amqp_management_url + "api/connections?page=1")
    assert isinstance(connections, dict)
    assert [c["name"] for c in connections["items"]] == ["paged"]


def test_nodes_and_overview_contexts_show_what_the_broker_has(amqp_management_url: str) -> None:
    status, nodes = call(amqp_management_url + "api/nodes")
    assert status == 200
    assert isinstance(nodes, list)
    (node,) = nodes
    assert node["name"] == "rabbit@localhost"
    assert node["running"] is True
    assert {t["name"] for t in node["exchange_types"]} == {"direct", "fanout", "headers", "topic"}
    status, one = call(amqp_management_url + "api/nodes/rabbit@localhost")
    assert status == 200
    assert isinstance(one, dict)
    assert {k: v for k, v in one.items() if k != "uptime"} == {
        k: v for k, v in node.items() if k != "uptime"
    }
    assert call(amqp_management_url + "api/nodes/nope")[0] == 404
    port = amqp_management_url.rsplit(":", 1)[1].strip("/")
    _, overview = call(amqp_management_url + "api/overview")
    assert isinstance(overview, dict)
    assert overview["contexts"] == [
        {
            "node": "rabbit@localhost",
            "description": "RabbitMQ Management",
            "path": "/",
            "ip": "127.0.0.1",
            "port": port,
        }
    ]
    assert call(amqp_management_url + "api/cluster-name") == (200, {"name": "rabbit@localhost"})
    assert call(amqp_management_url + "api/healthchecks/node/rabbit@localhost") == (
        200,
        {"status": "ok"},
    )


def test_users_show_password_hashes_and_take_them(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    base = amqp_management_url + "api/users/"
    _, guest = call(base + "guest")
    assert isinstance(guest, dict)
    raw = base64.b64decode(guest["password_hash"])
    assert raw[4:] == hashlib.sha256(raw[:4] + b"guest").digest()
    assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    # another user whose stored hash is guest's: it logs in with guest's password
    hashed = {"password_hash": guest["password_hash"], "tags": ""}
    assert call(base + "m-hashed", "PUT", hashed)[0] == 201
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert call(amqp_management_url + "api/permissions/%2F/m-hashed", "PUT", grant)[0] == 201
    with amqp_blocking.connect(amqp_broker.url.replace("guest:guest", "m-hashed:guest")):
        pass
    _, shown = call(base + "m-hashed")
    assert isinstance(shown, dict)
    assert shown["password_hash"] == guest["password_hash"]
    assert call(base + "m-x", "PUT", {"password": "p"}) == (
        400,
        {"error": "bad_request", "reason": "tags_not_present"},
    )
    assert call(base + "m-x", "PUT", {"password_hash": "!!", "tags": ""}) == (
        400,
        {"error": "bad_request", "reason": ["not_base64", "!!"]},
    )
    assert call(base + "bulk-delete", "POST", {"users": ["m-hashed", "nobody"]}) == (
        400,
        {"error": "bad_request", "reason": ["no_such_user", "nobody"]},
    )
    assert call(base + "m-hashed")[0] == 200  # nothing deleted
    assert call(base + "bulk-delete", "POST", {"users": ["m-hashed"]})[0] == 204
    assert call(base + "m-hashed")[0] == 404
    _, exported = call(amqp_management_url + "api/definitions")
    assert isinstance(exported, dict)
    assert [u["password_hash"] for u in exported["users"]] == [guest["password_hash"]]
    imported = {"users": [{"name": "m-imported", "password_hash": HASH, "tags": ""}]}
    assert call(amqp_management_url + "api/definitions", "POST", imported)[0] == 204
    _, shown = call(base + "m-imported")
    assert isinstance(shown, dict)
    assert shown["password_hash"] == HASH


def test_granting_one_vhost_keeps_the_others(amqp_management_url: str) -> None:
    """guest is given without permissions (every vhost): being granted one, as amqpstorm's
    test_api_virtual_host_create does, must not take "/" away, nor may deleting that vhost;
    a vhost made through the API gives its creator full permissions, as RabbitMQ's does."""
    base = amqp_management_url + "api/"
    assert call(base + "vhosts/m-vh", "PUT")[0] == 201
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert call(base + "permissions/m-vh/guest", "PUT", grant)[0] == 204
    assert call(base + "vhosts/m-vh", "DELETE")[0] == 204
    assert call(base + "vhosts/%2F")[0] == 200
    _, vhosts = call(base + "vhosts")
    assert isinstance(vhosts, list)
    assert [v["name"] for v in vhosts] == ["/"]
    assert call(base + "users/guest/permissions")[1] == [{"user": "guest", "vhost": "/", **grant}]
    assert call(base + "vhosts/%2F/permissions")[1] == [{"user": "guest", "vhost": "/", **grant}]
    assert call(base + "vhosts/m-new", "PUT")[0] == 201
    assert call(base + "permissions/m-new/guest")[1] == {"user": "guest", "vhost": "m-new", **grant}
    assert call(base + "queues/m-new/m-q", "PUT", {})[0] == 201
    assert call(base + "permissions/m-new/guest", "PUT", {**grant, "read": "("})[0] == 400
    assert call(base + "permissions")[1] == [
        {"user": "guest", "vhost": "/", **grant},
        {"user": "guest", "vhost": "m-new", **grant},
    ]


def test_policies_are_set_and_cleared_through_the_api(
    amqp_broker: BrokerThread, amqp_management_url: str
) -> None:
    url = amqp_management_url + "api/policies/%2F/m-cap"
    with amqp_blocking.connect(amqp_broker.url) as conn, conn.channel() as ch:
        ch.queue_declare("m-capped")
        for n in range(5):
            ch.basic_publish(b"%d" % n, routing_key="m-capped")
        cap = {"pattern": "^m-capped$", "definition": {"max-length": 2}, "apply-to": "queues"}
        assert call(url, "PUT", cap) == (201, None)
        # applied to the queue at once, as rabbitmqctl set_policy is: the heads are dropped
        assert [m.body for m in amqp_broker.peek("m-capped")] == [b"3", b"4"]
        status, shown = call(url)
        assert status == 200
        assert shown == {
            "vhost": "/",
            "name": "m-cap",
            "pattern": "^m-capped$",
            "apply-to": "queues",
            "definition": {"max-length": 2},
            "priority": 0,
        }
        # refused, and nothing changed: a bad setting, a bad type, a user without the tag
        bad = {**cap, "definition": {"max-length": -1}}
        status, error = call(url, "PUT", bad)
        assert status == 400
        assert isinstance(error, dict)
        assert error["error"] == "bad_request"
        assert "max-length" in str(error["reason"])
        assert call(url, "PUT", {**cap, "priority": True})[0] == 400
        amqp_broker.call(lambda b: b.users.add("watcher", User("pw", tags=("monitoring",))))
        assert call(url, "DELETE", auth=("watcher", "pw")) == (
            401,
            {"error": "not_authorized", "reason": "Not policymaker user"},
        )
        assert call(url)[1] == shown
        assert call(url, "DELETE") == (204, None)
        assert call(url, "DELETE")[0] == 404
        assert amqp_broker.call(lambda b: b.list_policies()) == []
        ch.queue_delete("m-capped")


#: A known workload's effect on rabbitmq_prometheus's aggregated channel counters.
COUNTED: Final = {
    "rabbitmq_channel_messages_published_total": 5,
    "rabbitmq_channel_messages_confirmed_total": 5,  # the unroutable ones are confirmed too
    "rabbitmq_channel_messages_unroutable_returned_total": 1,
    "rabbitmq_channel_messages_unroutable_dropped_total": 1,
    "rabbitmq_channel_get_ack_total": 1,
    "rabbitmq_channel_get_total": 1,
    "rabbitmq_channel_get_empty_total": 1,
    "rabbitmq_channel_messages_delivered_ack_total": 2,
    "rabbitmq_channel_messages_delivered_total": 0,
    "rabbitmq_channel_messages_redelivered_total": 1,
    "rabbitmq_channel_messages_acked_total": 2,
}


def _counters(metrics_url: str) -> dict[str, float]:
    with urllib.request.urlopen(metrics_url, timeout=WAIT) as got:
        text = got.read().decode()
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name in COUNTED
    }


def _counted_workload(url: str) -> None:
    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
        queue = ch.queue_declare("", exclusive=True).queue
        ch.confirm_select()
        for body in (b"0", b"1", b"2"):
            ch.basic_publish(body, routing_key=queue)
        with pytest.raises(amqp_blocking.MessageReturnedError):
            ch.basic_publish(b"x", routing_key="m-nowhere", mandatory=True)
        ch.basic_publish(b"y", routing_key="m-nowhere")
        first = ch.basic_get(queue, no_ack=False)
        assert first is not None
        first.ack()
        assert ch.basic_get(queue, no_ack=True) is not None
        for tries, message in enumerate(ch.consume(queue, timeout=WAIT)):
            if tries == 0:
                message.nack(requeue=True)  # comes again, redelivered
            else:
                assert message.redelivered
                message.ack()
                break
        assert ch.basic_get(queue) is None


def _counted_after(metrics_url: str, before: dict[str, float]) -> dict[str, float]:
    after = _counters(metrics_url)
    return {name: after.get(name, 0) - before.get(name, 0) for name in COUNTED}


@pytest.mark.rabbitmq
def test_published_delivered_and_acked_counters_as_rabbitmq(
    amqp_broker: BrokerThread, amqp_management_url: str, rabbitmq_metrics: tuple[str, str]
) -> None:
    ours = amqp_management_url + "metrics"
    before = _counters(ours)
    _counted_workload(amqp_broker.url)
    assert _counted_after(ours, before) == COUNTED
    # RabbitMQ's node, the same workload: its counters come from stats emitted every few
    # seconds, so they are read until they move (bounded), then compared
    amqp_url, theirs = rabbitmq_metrics
    before = _counters(theirs)
    _counted_workload(amqp_url)
    deadline = time.monotonic() + WAIT
    seen = _counted_after(theirs, before)
    while seen != COUNTED and time.monotonic() < deadline:
        time.sleep(0.5)
        seen = _counted_after(theirs, before)
    assert seen == COUNTED


def _per_queue(text: str, queue: str) -> dict[str, float]:
    return {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels == {"vhost": "/", "queue": queue}
    }


#: The per-object queue gauges the broker has, and their values after the workload below.
PER_QUEUE: Final = {
    "rabbitmq_queue_messages_ready": 2,
    "rabbitmq_queue_messages_unacked": 1,
    "rabbitmq_queue_messages": 3,
    "rabbitmq_queue_consumers": 0,
    "rabbitmq_queue_messages_bytes": 9,
    "rabbitmq_queue_messages_ready_bytes": 6,
    "rabbitmq_queue_messages_unacked_bytes": 3,
}


@pytest.mark.rabbitmq
def test_per_object_metrics_label_each_queue_as_rabbitmq(
    amqp_broker: BrokerThread, amqp_management_url: str, rabbitmq_metrics: tuple[str, str]
) -> None:
    amqp_url, their_metrics = rabbitmq_metrics
    for url, metrics in (
        (amqp_broker.url, amqp_management_url + "metrics"),
        (amqp_url, their_metrics),
    ):
        with amqp_blocking.connect(url) as conn, conn.channel() as ch:
            ch.queue_declare("m-per-queue")
            for body in (b"one", b"two", b"333"):
                ch.basic_publish(body, routing_key="m-per-queue")
            held = ch.basic_get("m-per-queue", no_ack=False)  # one unacked, 3 octets
            assert held is not None
            deadline = time.monotonic() + WAIT  # RabbitMQ's stats come every few seconds
            while True:
                with urllib.request.urlopen(metrics + "/per-object", timeout=WAIT) as got:
                    # RabbitMQ has more per queue (memory, reductions, ...): these are the same
                    seen = {
                        k: v
                        for k, v in _per_queue(got.read().decode(), "m-per-queue").items()
                        if k in PER_QUEUE
                    }
                if seen == PER_QUEUE or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            ch.queue_delete("m-per-queue")
        assert seen == PER_QUEUE, url
