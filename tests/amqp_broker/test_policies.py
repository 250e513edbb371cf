"""Policies (``rabbitmqctl set_policy``) side by side with RabbitMQ 3.10 (issue 29): a private
RabbitMQ node (policies are broker-wide configuration, never set on the shared node) and the
embedded broker get the same policies and the same scenarios, and their observations are
compared: max-length by policy and the lower of policy and argument; the argument's
dead-letter exchange over the policy's; message TTL and dead-lettering by policy; a quorum
queue's delivery limit by policy; ``overflow`` (a classic queue's argument wins, a quorum
queue's policy); the highest priority of two matching policies; an exchanges-only policy
leaving queues alone; an alternate exchange by policy, and the exchange's own argument over
it; an operator policy capping what arguments and policies give. The embedded broker's
answers are pinned on their own too, and the Python API's checks, ``clear_policy`` and the
TOML/CLI forms are tested on it alone.

The private node costs about 15 s of CPU to start and a second per ``rabbitmqctl`` call."""

from __future__ import annotations

import json
import signal
import subprocess
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import Policy
from amqp_broker._cli import parse_args
from amqp_sansio.client import PublishNackedError
from tests.tools.support import TIMEOUT, script

from ..support.rabbitmq_node import rabbitmq_node

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from pathlib import Path

    from amqp_sansio import FieldValue

#: name -> (pattern, definition, priority, apply-to); "canary" is set last (see _wait).
POLICIES: Final[dict[str, tuple[str, dict[str, object], int, str]]] = {
    "len": ("^len-", {"max-length": 2, "dead-letter-exchange": "dlx-p"}, 0, "queues"),
    "ttl": ("^ttl-", {"message-ttl": 0, "dead-letter-exchange": "dlx-p"}, 0, "all"),
    "limit": ("^limit-", {"delivery-limit": 1}, 0, "all"),
    "ovf": ("^ovf-", {"overflow": "reject-publish", "max-length": 1}, 0, "all"),
    "low": ("^prio-", {"max-length": 5}, 0, "all"),
    "high": ("^prio-", {"max-length": 1}, 7, "all"),
    "exchanges-only": ("^exq-", {"max-length": 1}, 0, "exchanges"),
    "ae": ("^aex-", {"alternate-exchange": "alt-p"}, 0, "exchanges"),
    "oper-pol": ("^oper-pol$", {"max-length": 1}, 0, "queues"),
    "canary": ("^canary$", {"max-length": 1}, 0, "queues"),
}


def _drain(channel: amqp_blocking.Channel, queue: str) -> list[bytes]:
    """The bodies in *queue* before a marker published now (dead-lettering is asynchronous
    in RabbitMQ; the marker comes after what the broker already dead-lettered)."""
    channel.basic_publish(b"marker", routing_key=queue)
    bodies = []
    consumer = channel.basic_consume(queue, no_ack=True)
    while (message := consumer.get(timeout=10)) is not None and message.body != b"marker":
        bodies.append(message.body)
    consumer.cancel()
    return bodies


def _bodies(channel: amqp_blocking.Channel, queue: str) -> list[bytes]:
    """The bodies ready in *queue* (its count is exact once the publishes are confirmed)."""
    count = channel.queue_declare(queue, passive=True).message_count
    consumer = channel.basic_consume(queue, no_ack=True)
    bodies = []
    for _ in range(count):
        message = consumer.get(timeout=10)
        assert message is not None
        bodies.append(message.body)
    consumer.cancel()
    return bodies


def _wait(channel: amqp_blocking.Channel) -> None:
    """Until the canary policy applies: RabbitMQ applies a policy just set a moment later."""
    for _ in range(100):
        channel.queue_declare("canary")
        channel.basic_publish(b"1", routing_key="canary")
        channel.basic_publish(b"2", routing_key="canary")
        count = channel.queue_declare("canary", passive=True).message_count
        channel.queue_delete("canary")
        if count == 1:
            return
    raise AssertionError("the policies never applied")


#: The operator policy (name, pattern, definition): a cap of 2 on ``oper-`` queues.
OPERATOR: Final[tuple[str, str, dict[str, object]]] = ("cap", "^oper-", {"max-length": 2})


def scenarios(
    url: str,
    set_policy: Callable[[str, str, dict[str, object], int, str], None],
    set_operator_policy: Callable[[str, str, dict[str, object]], None],
) -> dict[str, object]:
    """Set :data:`OPERATOR` and :data:`POLICIES` and observe what they do."""
    set_operator_policy(*OPERATOR)
    for name, (pattern, definition, priority, apply_to) in POLICIES.items():
        set_policy(name, pattern, definition, priority, apply_to)
    seen: dict[str, object] = {}
    with amqp_blocking.connect(url) as conn:
        channel = conn.channel()
        channel.confirm_select()
        _wait(channel)
        for dlx in ("dlx-p", "dlx-a"):
            channel.exchange_declare(dlx, "fanout")
            channel.queue_declare(f"{dlx}-q")
            channel.queue_bind(f"{dlx}-q", dlx)

        def declare(queue: str, kind: str, arguments: Mapping[str, FieldValue]) -> None:
            channel.queue_declare(
                queue, durable=True, arguments={"x-queue-type": kind, **arguments}
            )

        for kind in ("classic", "quorum"):
            for label, arguments in (
                ("none", {}),
                ("ml3", {"x-max-length": 3}),
                ("ml1", {"x-max-length": 1}),
                ("dlxa", {"x-dead-letter-exchange": "dlx-a"}),
            ):
                queue = f"len-{kind}-{label}"
                declare(queue, kind, arguments)
                for n in range(5):
                    channel.basic_publish(b"%d" % n, routing_key=queue)
                seen[queue] = (
                    _bodies(channel, queue),
                    _drain(channel, "dlx-p-q"),
                    _drain(channel, "dlx-a-q"),
                )
                channel.queue_delete(queue)

            if kind == "classic":  # RabbitMQ 3.10's quorum queues expire lazily: the last
                # message may wait for the queue's next operation
                queue = "ttl-classic"
                declare(queue, kind, {})
                for n in range(3):
                    channel.basic_publish(b"%d" % n, routing_key=queue)
                dead = _drain(channel, "dlx-p-q")
                seen[queue] = (channel.queue_declare(queue, passive=True).message_count, dead)
                channel.queue_delete(queue)

            queue = f"ovf-{kind}"
            declare(queue, kind, {"x-overflow": "drop-head"})
            answers = []
            for n in range(2):
                try:
                    channel.basic_publish(b"%d" % n, routing_key=queue)
                    answers.append("ack")
                except PublishNackedError:
                    answers.append("nack")
            seen[queue] = (answers, _bodies(channel, queue))
            channel.queue_delete(queue)

            queue = f"prio-{kind}"
            declare(queue, kind, {})
            for n in range(3):
                channel.basic_publish(b"%d" % n, routing_key=queue)
            seen[queue] = _bodies(channel, queue)
            channel.queue_delete(queue)

            queue = f"exq-{kind}"
            declare(queue, kind, {})
            for n in range(3):
                channel.basic_publish(b"%d" % n, routing_key=queue)
            seen[queue] = _bodies(channel, queue)
            channel.queue_delete(queue)

        # the operator policy caps what arguments and policies give
        for label, arguments in (
            ("none", {}),
            ("arg1", {"x-max-length": 1}),
            ("arg5", {"x-max-length": 5}),
            ("pol", {}),
        ):
            queue = f"oper-{label}"
            declare(queue, "classic", arguments)
            for n in range(5):
                channel.basic_publish(b"%d" % n, routing_key=queue)
            seen[queue] = _bodies(channel, queue)
            channel.queue_delete(queue)

        # an alternate exchange by policy; an exchange's own argument wins
        for alternate in ("alt-p", "alt-a"):
            channel.exchange_declare(alternate, "fanout")
            channel.queue_declare(f"{alternate}-q")
            channel.queue_bind(f"{alternate}-q", alternate)
        channel.exchange_declare("aex-plain", "direct")
        channel.exchange_declare("aex-arg", "direct", arguments={"alternate-exchange": "alt-a"})
        caught = []
        for source in ("aex-plain", "aex-arg"):
            channel.basic_publish(source.encode(), exchange=source, routing_key="nowhere")
            caught.append((_drain(channel, "alt-p-q"), _drain(channel, "alt-a-q")))
        seen["ae"] = caught
        for name in ("aex-plain", "aex-arg", "alt-p", "alt-a"):
            channel.exchange_delete(name)
        for name in ("alt-p-q", "alt-a-q"):
            channel.queue_delete(name)

        for label, arguments in (("none", {}), ("arg3", {"x-delivery-limit": 3})):
            queue = f"limit-{label}"
            declare(queue, "quorum", arguments)
            channel.basic_publish(b"m1", routing_key=queue)
            consumer_channel = conn.channel()
            consumer_channel.basic_qos(prefetch_count=1)
            consumer = consumer_channel.basic_consume(queue)
            trace = []
            for _ in range(6):
                message = consumer.get(timeout=10)
                assert message is not None
                trace.append(message.body)
                if message.body == b"m2":
                    message.ack()
                    break
                message.nack(requeue=True)
                if len(trace) == 1:
                    channel.basic_publish(b"m2", routing_key=queue)
            seen[queue] = trace
            consumer_channel.close()
            channel.queue_delete(queue)
        for dlx in ("dlx-p", "dlx-a"):
            channel.queue_delete(f"{dlx}-q")
            channel.exchange_delete(dlx)
    return seen


EXPECTED: Final[dict[str, object]] = {
    **{
        f"len-{kind}-{label}": value
        for kind in ("classic", "quorum")
        for label, value in (
            ("none", ([b"3", b"4"], [b"0", b"1", b"2"], [])),
            ("ml3", ([b"3", b"4"], [b"0", b"1", b"2"], [])),  # the lower: the policy's 2
            ("ml1", ([b"4"], [b"0", b"1", b"2", b"3"], [])),  # the argument's 1
            ("dlxa", ([b"3", b"4"], [], [b"0", b"1", b"2"])),  # the argument's DLX
        )
    },
    "ttl-classic": (0, [b"0", b"1", b"2"]),
    "ovf-classic": (["ack", "ack"], [b"1"]),  # the argument's drop-head
    # the policy's reject-publish, refusing once the queue is over its limit (quorum's rule)
    "ovf-quorum": (["ack", "ack"], [b"0", b"1"]),
    "prio-classic": [b"2"],  # the priority-7 policy's max-length 1
    "prio-quorum": [b"2"],
    "exq-classic": [b"0", b"1", b"2"],
    "exq-quorum": [b"0", b"1", b"2"],
    # m1 delivered twice, then dropped (the policy's limit 1); with x-delivery-limit 3 the
    # lower, 1, applies too
    "limit-none": [b"m1", b"m1", b"m2"],
    "limit-arg3": [b"m1", b"m1", b"m2"],
    "ae": [([b"aex-plain"], []), ([], [b"aex-arg"])],
    "oper-none": [b"3", b"4"],  # the operator's cap
    "oper-arg1": [b"4"],  # the argument, lower
    "oper-arg5": [b"3", b"4"],  # capped
    "oper-pol": [b"4"],  # the policy, lower
}


@pytest.fixture
def embedded() -> Iterator[tuple[str, amqp_broker.BrokerThread]]:
    with amqp_broker.BrokerThread() as thread:
        yield thread.url, thread


def _embedded_operator(
    thread: amqp_broker.BrokerThread,
) -> Callable[[str, str, dict[str, object]], None]:
    def set_operator_policy(name: str, pattern: str, definition: dict[str, object]) -> None:
        thread.call(lambda b: b.set_operator_policy(name, pattern, definition))

    return set_operator_policy


def _embedded_setter(
    thread: amqp_broker.BrokerThread,
) -> Callable[[str, str, dict[str, object], int, str], None]:
    def set_policy(
        name: str, pattern: str, definition: dict[str, object], priority: int, apply_to: str
    ) -> None:
        thread.call(
            lambda b: b.set_policy(name, pattern, definition, priority=priority, apply_to=apply_to)
        )

    return set_policy


@pytest.mark.rabbitmq
def test_policies_as_rabbitmq(embedded: tuple[str, amqp_broker.BrokerThread]) -> None:
    url, thread = embedded
    with rabbitmq_node() as node:

        def set_policy(
            name: str, pattern: str, definition: dict[str, object], priority: int, apply_to: str
        ) -> None:
            node.ctl(
                "set_policy",
                "--priority",
                str(priority),
                "--apply-to",
                apply_to,
                name,
                pattern,
                json.dumps(definition),
            )

        def set_operator_policy(name: str, pattern: str, definition: dict[str, object]) -> None:
            node.ctl(
                "set_operator_policy", "--apply-to", "queues", name, pattern, json.dumps(definition)
            )

        on_rabbitmq = scenarios(node.url, set_policy, set_operator_policy)
    assert scenarios(url, _embedded_setter(thread), _embedded_operator(thread)) == on_rabbitmq


def test_policies_on_the_embedded_broker(embedded: tuple[str, amqp_broker.BrokerThread]) -> None:
    url, thread = embedded
    assert scenarios(url, _embedded_setter(thread), _embedded_operator(thread)) == EXPECTED


def test_set_list_and_clear(embedded: tuple[str, amqp_broker.BrokerThread]) -> None:
    url, thread = embedded
    thread.call(lambda b: b.set_policy("two", "^q$", {"max-length": 2}))
    with amqp_blocking.connect(url) as conn:
        channel = conn.channel()
        channel.confirm_select()
        channel.queue_declare("q")
        for n in range(4):
            channel.basic_publish(b"%d" % n, routing_key="q")
        assert channel.queue_declare("q", passive=True).message_count == 2
        # a lower limit applies to the queue at once, dropping its heads
        thread.call(lambda b: b.set_policy("two", "^q$", {"max-length": 1}))
        assert channel.queue_declare("q", passive=True).message_count == 1
        assert thread.call(lambda b: b.list_policies()) == [Policy("two", "^q$", {"max-length": 1})]
        thread.call(lambda b: b.clear_policy("two"))
        for n in range(4):
            channel.basic_publish(b"%d" % n, routing_key="q")
        assert channel.queue_declare("q", passive=True).message_count == 5
        assert thread.call(lambda b: b.list_policies()) == []


def test_operator_policies_hold_caps_only(embedded: tuple[str, amqp_broker.BrokerThread]) -> None:
    _, thread = embedded
    with pytest.raises(ValueError, match="'dead-letter-exchange': not allowed in operator"):
        thread.call(lambda b: b.set_operator_policy("o", ".*", {"dead-letter-exchange": "x"}))
    thread.call(lambda b: b.set_operator_policy("o", ".*", {"max-length": 3}))
    assert [p.name for p in thread.call(lambda b: b.list_operator_policies())] == ["o"]
    thread.call(lambda b: b.clear_operator_policy("o"))
    assert thread.call(lambda b: b.list_operator_policies()) == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"definition": {"max-lengthx": 2}}, "'max-lengthx': not recognised policy settings"),
        ({"definition": {"max-length": "a"}}, "max-length: 'a' is not a valid maximum length"),
        ({"definition": {"overflow": "x"}}, "overflow: 'x' is not a valid overflow"),
        ({"definition": {}, "apply_to": "topics"}, "apply_to is one of"),
        ({"definition": {}, "pattern": "("}, "bad policy pattern '('"),
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object], error: str) -> None:
    arguments: dict[str, object] = {"name": "p", "pattern": ".*", **kwargs}
    with pytest.raises(ValueError, match=error.replace("(", r"\(")):
        Policy(**arguments)  # type: ignore[arg-type]


def test_policies_from_the_config_file_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        'vhosts = ["jobs"]\n'
        "[[policies]]\n"
        'name = "cap"\nvhost = "jobs"\npattern = "^q"\npriority = 3\napply_to = "queues"\n'
        'definition = { max-length = 10, overflow = "reject-publish" }\n',
        encoding="utf-8",
    )
    args = parse_args(["--config", str(path), "--policy", "/", "ttl", "^t", '{"message-ttl": 5}'])
    assert args.policy == [
        (
            "jobs",
            Policy(
                "cap",
                "^q",
                {"max-length": 10, "overflow": "reject-publish"},
                priority=3,
                apply_to="queues",
            ),
        ),
        ("/", Policy("ttl", "^t", {"message-ttl": 5})),
    ]


@pytest.mark.parametrize(
    ("config", "args", "message"),
    [
        ("", ["--policy", "/", "p", ".*", "{"], "--policy p: the definition is not JSON"),
        ("", ["--policy", "/", "p", ".*", '{"ttl": 1}'], "'ttl': not recognised policy settings"),
        ("", ["--policy", "other", "p", ".*", "{}"], "policy 'p' names vhost 'other', which no"),
        ("[[policies]]\nname = 'p'", [], "policies entry 1 needs 'pattern'"),
        (
            "[[policies]]\nname = 'p'\npattern = '.*'\ndefinition = { max-length = -1 }",
            [],
            "policies entry 1: max-length: -1 is not a valid maximum length",
        ),
    ],
)
def test_bad_policies_in_the_configuration(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config: str,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broker.toml").write_text(config, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        amqp_broker.main(["--config", "broker.toml", *args])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_command_applies_its_policies(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            script("amqp-broker"),
            "--port",
            "0",
            "--policy",
            "/",
            "one",
            "^one-",
            '{"max-length": 1}',
        ],
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert line.startswith("amqp_broker listening on 127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        with amqp_blocking.connect(f"amqp://guest:guest@127.0.0.1:{port}/") as conn:
            channel = conn.channel()
            channel.confirm_select()
            channel.queue_declare("one-q")
            for n in range(3):
                channel.basic_publish(b"%d" % n, routing_key="one-q")
            assert channel.queue_declare("one-q", passive=True).message_count == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=TIMEOUT)
        assert process.stderr is not None
        process.stderr.close()
