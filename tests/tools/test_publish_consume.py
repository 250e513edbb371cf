"""amqp-publish and amqp-consume as subprocesses, against RabbitMQ and the embedded broker
(``amqp_url``), checked through amqp_blocking. Every test deletes the queues it made."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_sansio.client import ConnectionParameters
from amqp_tools import publish_main

from .support import TIMEOUT, assert_no_traceback, run_tool, script

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def queue(amqp_url: str) -> Iterator[str]:
    """A fresh durable queue, deleted afterwards."""
    name = f"amqp-tools-{uuid.uuid4().hex[:12]}"
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as channel:
        channel.queue_declare(name, durable=True)
    yield name
    with amqp_blocking.connect(amqp_url) as conn, conn.channel() as channel:
        channel.queue_delete(name)


def _get_all(url: str, queue: str) -> list[amqp_blocking.Message]:
    messages = []
    with amqp_blocking.connect(url) as conn, conn.channel() as channel:
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            messages.append(message)
    return messages


def _publish(url: str, queue: str, *bodies: str) -> None:
    with amqp_blocking.connect(url) as conn, conn.channel() as channel:
        channel.confirm_select()
        for body in bodies:
            channel.basic_publish(body.encode(), routing_key=queue)


def _count(url: str, queue: str) -> int:
    with amqp_blocking.connect(url) as conn, conn.channel() as channel:
        return channel.queue_declare(queue, passive=True).message_count


def test_publish_with_properties(amqp_url: str, queue: str) -> None:
    result = run_tool(
        "amqp-publish",
        "--url", amqp_url,
        "-r", queue,
        "-p",
        "-C", "text/plain",
        "-E", "utf-8",
        "-t", "replies",
        "-H", "colour: blue",
        "-H", "size:  large",
        "-b", "hello",
    )  # fmt: skip
    assert_no_traceback(result)
    assert result.returncode == 0, result.stderr
    (message,) = _get_all(amqp_url, queue)
    assert message.body == b"hello"
    props = message.properties
    assert (props.delivery_mode, props.content_type, props.content_encoding) == (
        2,
        "text/plain",
        "utf-8",
    )
    assert props.reply_to == "replies"
    assert props.headers == {"colour": "blue", "size": "large"}


def test_publish_standard_input(amqp_url: str, queue: str) -> None:
    whole = run_tool("amqp-publish", "--url", amqp_url, "-r", queue, stdin=b"all\nof it\n")
    assert whole.returncode == 0, whole.stderr
    lines = run_tool(
        "amqp-publish", "--url", amqp_url, "-r", queue, "-l", stdin=b"one\ntwo\r\nthree"
    )
    assert lines.returncode == 0, lines.stderr
    bodies = [m.body for m in _get_all(amqp_url, queue)]
    assert bodies == [b"all\nof it\n", b"one", b"two", b"three"]


def test_connection_options_instead_of_a_url(amqp_url: str, queue: str, tmp_path: Path) -> None:
    params = ConnectionParameters.from_url(amqp_url)
    auth = tmp_path / "auth"
    auth.write_text(f"username:{params.username}\npassword:{params.password}\n")
    result = run_tool(
        "amqp-publish", "-s", params.host, "--port", str(params.port), "--vhost",
        params.virtual_host, "--authfile", str(auth), "--heartbeat", "30", "-r", queue, "-b", "x",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [m.body for m in _get_all(amqp_url, queue)] == [b"x"]


def test_consume_prints_bodies_and_acks(amqp_url: str, queue: str) -> None:
    _publish(amqp_url, queue, "first", "second", "third")
    result = run_tool("amqp-consume", "--url", amqp_url, "-q", queue, "-c", "2")
    assert_no_traceback(result)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "first\nsecond\n"
    assert _count(amqp_url, queue) == 1  # acked; the third waits


def test_consume_runs_a_command_per_message(amqp_url: str, queue: str, tmp_path: Path) -> None:
    _publish(amqp_url, queue, "a", "b")
    append = "import sys; open(sys.argv[1], 'ab').write(sys.stdin.buffer.read() + b'|')"
    out = tmp_path / "out"
    result = run_tool(
        "amqp-consume", "--url", amqp_url, "-q", queue, "-c", "2", "-p", "1",
        sys.executable, "-c", append, str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == b"a|b|"
    assert _count(amqp_url, queue) == 0


def test_a_failing_command_returns_its_message(amqp_url: str, queue: str) -> None:
    _publish(amqp_url, queue, "keep me")
    result = run_tool(
        "amqp-consume", "--url", amqp_url, "-q", queue, sys.executable, "-c", "raise SystemExit(3)"
    )
    assert_no_traceback(result)
    assert result.returncode == 4
    assert "exited with status 3; the message went back to its queue" in result.stderr
    (message,) = _get_all(amqp_url, queue)
    assert message.body == b"keep me"
    assert message.redelivered


def test_consume_stops_after_a_quiet_timeout(amqp_url: str, queue: str) -> None:
    result = run_tool("amqp-consume", "--url", amqp_url, "-q", queue, "--timeout", "0.2")
    assert (result.returncode, result.stdout) == (0, ""), result.stderr


def test_consume_declares_and_binds_a_server_named_queue(amqp_url: str) -> None:
    # -e and -r make amqp-consume declare an auto-delete queue and bind it once per key; its
    # name is printed once the consumer is on, so what is published after that arrives.
    with subprocess.Popen(
        [script("amqp-consume"), "--url", amqp_url, "-e", "amq.topic", "-r", "a.*,b.#", "-x",
         "-c", "2", "--timeout", str(TIMEOUT)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as consumer:  # fmt: skip
        assert consumer.stderr is not None
        line = consumer.stderr.readline().decode()
        assert line.startswith("Server provided queue name: "), line
        with amqp_blocking.connect(amqp_url) as conn, conn.channel() as channel:
            channel.confirm_select()
            for key, body in (("c.x", b"not bound"), ("a.x", b"one"), ("b.x.y", b"two")):
                channel.basic_publish(body, exchange="amq.topic", routing_key=key)
        out, err = consumer.communicate(timeout=TIMEOUT)
    assert consumer.returncode == 0, err
    assert out == b"one\ntwo\n"


def test_a_missing_queue(amqp_url: str) -> None:
    result = run_tool("amqp-consume", "--url", amqp_url, "-q", "amqp-tools-no-such-queue")
    assert_no_traceback(result)
    assert result.returncode == 1
    assert "amqp-consume: consuming from 'amqp-tools-no-such-queue': 404" in result.stderr
    assert "NOT_FOUND" in result.stderr


def test_a_missing_exchange(amqp_url: str) -> None:
    result = run_tool(
        "amqp-publish", "--url", amqp_url, "-e", "amqp-tools-no-such-exchange", "-b", "x"
    )
    assert_no_traceback(result)
    assert result.returncode == 1
    assert "404" in result.stderr
    assert "amqp-tools-no-such-exchange" in result.stderr


def test_mandatory_fails_when_nothing_receives(amqp_url: str) -> None:
    result = run_tool(
        "amqp-publish", "--url", amqp_url, "-m", "-r", "amqp-tools-nobody-here", "-b", "x"
    )
    assert_no_traceback(result)
    assert result.returncode == 1
    assert "NO_ROUTE" in result.stderr or "312" in result.stderr


def test_a_refused_login(amqp_url: str) -> None:
    params = ConnectionParameters.from_url(amqp_url)
    result = run_tool(
        "amqp-publish", "-s", params.host, "--port", str(params.port),
        "--username", "amqp-tools-nobody", "--password", "wrong", "-r", "q", "-b", "x",
    )  # fmt: skip
    assert_no_traceback(result)
    assert result.returncode == 1
    assert f"amqp-publish: {params.address} refused the connection: 403" in result.stderr


def _status(args: list[str]) -> object:
    """amqp-publish's exit status, in-process."""
    try:
        return publish_main(args)
    except SystemExit as exited:  # argparse's own errors
        return exited.code


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("tool", "args"), [("amqp-publish", ["-r", "q", "-b", "x"]), ("amqp-consume", ["-q", "q"])]
)
def test_a_refused_connection(tool: str, args: list[str]) -> None:
    port = _free_port()
    result = run_tool(tool, "-s", f"127.0.0.1:{port}", *args)
    assert_no_traceback(result)
    assert result.returncode == 3
    assert f"{tool}: cannot connect to 127.0.0.1:{port}: Connection refused" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-b", "x"], "neither exchange nor routing key specified"),
        (["--url", "http://x", "-r", "q"], "bad --url: url: the scheme must be amqp or amqps"),
        (["--url", "amqp://h", "--vhost", "v", "-r", "q"], "--vhost and --url cannot be used"),
        (["-s", "h:1", "--port", "2", "-r", "q"], "both --server and --port give the port"),
        (["-s", "h:port", "-r", "q"], "--server: not a port number: 'port'"),
        (["-r", "q", "-H", "no colon"], "--header 'no colon': expected \"KEY: VALUE\""),
        (["-r", "q", "--authfile", "/nonexistent/auth"], "--authfile: cannot read"),
        (["-r", "q", "--key", "k.pem"], "--key needs --cert"),
        (["-r", "q", "--cacert", "ca.pem"], "--cacert and --cert need --ssl"),
        (["-r", "q", "--port", "0"], "a port is in 1..65535, not 0"),
        (["-r", "q", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_publish_usage_errors(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # In-process: none of these gets as far as a connection (the subprocess cases are above).
    assert _status(args) == 2
    assert message in capsys.readouterr().err


def test_consume_usage_errors() -> None:
    result = run_tool("amqp-consume", "-q", "x", "-r", "key")
    assert result.returncode == 2
    assert "--routing-key option requires an exchange name" in result.stderr
    result = run_tool("amqp-consume", "-q", "x", "-c", "0")
    assert result.returncode == 2
    assert "must be at least 1, not 0" in result.stderr
