"""The examples in ``examples/`` run as a user would run them, against RabbitMQ at AMQP_URL, and
leave nothing behind; ``examples/demo.py`` also falls back to the embedded broker."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest
import trio

import amqp_trio
from tests.support import ROOT

EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, url: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env={**os.environ, "AMQP_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done


def queue_exists(url: str, queue: str) -> bool:
    async def check() -> bool:
        async with amqp_trio.connect(url) as conn, conn.channel() as ch:
            try:
                await ch.queue_declare(queue, passive=True)
            except amqp_trio.NotFound:
                return False
            return True

    return trio.run(check)


def exchange_exists(url: str, exchange: str) -> bool:
    async def check() -> bool:
        async with amqp_trio.connect(url) as conn, conn.channel() as ch:
            try:
                await ch.exchange_declare(exchange, "topic", passive=True)
            except amqp_trio.NotFound:
                return False
            return True

    return trio.run(check)


def named(pattern: str, text: str) -> str:
    found = re.search(pattern, text)
    assert found is not None, f"{pattern!r} not in {text!r}"
    return found.group(0)


@pytest.mark.rabbitmq
def test_publish_consume(rabbitmq_url: str) -> None:
    out = run_example("publish_consume.py", "4", url=rabbitmq_url).stdout
    assert "published 4 messages" in out
    assert re.findall(r"received '(hello \d)'", out) == [f"hello {n}" for n in range(4)]
    assert not queue_exists(rabbitmq_url, named(r"example-hello-[0-9a-f]{8}", out))


@pytest.mark.rabbitmq
def test_work_queue_spreads_tasks_over_both_workers(rabbitmq_url: str) -> None:
    out = run_example("work_queue.py", "8", url=rabbitmq_url).stdout
    done = re.findall(r"(worker-\d) did 'task (\d+) ", out)
    assert sorted(int(task) for _, task in done) == list(range(8))
    assert {worker for worker, _ in done} == {"worker-1", "worker-2"}


@pytest.mark.rabbitmq
def test_rpc_over_direct_reply_to(rabbitmq_url: str) -> None:
    out = run_example("rpc.py", "7", "50", url=rabbitmq_url).stdout
    assert out.splitlines() == ["fib(7) = 13", "fib(50) = 12586269025"]


@pytest.mark.rabbitmq
def test_pubsub_topic_routes_by_pattern(rabbitmq_url: str) -> None:
    out = run_example("pubsub_topic.py", url=rabbitmq_url).stdout
    watcher = re.findall(r"kernel watcher .* got \[([\w.]+)\]", out)
    pager = re.findall(r"pager .* got \[([\w.]+)\]", out)
    assert sorted(watcher) == ["kern.critical", "kern.info"]
    assert sorted(pager) == ["app.critical", "audit.login.root", "kern.critical"]
    assert not exchange_exists(rabbitmq_url, named(r"example-events-[0-9a-f]{8}", out))


@pytest.mark.rabbitmq
def test_stream_queue_reads_from_offset(rabbitmq_url: str) -> None:
    out = run_example("stream_queue.py", "6", url=rabbitmq_url).stdout
    assert re.findall(r"read 'event (\d)' at offset (\d)", out) == [
        ("6", "6"),
        ("7", "7"),
        ("8", "8"),
        ("9", "9"),
    ]
    assert not queue_exists(rabbitmq_url, named(r"example-stream-[0-9a-f]{8}", out))


@pytest.mark.rabbitmq
def test_demo_round_trip_against_rabbitmq(rabbitmq_url: str) -> None:
    done = run_example("demo.py", "--count", "3000", "--size", "100", url=rabbitmq_url)
    assert re.search(r"broker: RabbitMQ [\d.]+ at ", done.stdout)
    assert re.search(r"publish \(confirmed\) +: 3,000 messages of 100 B", done.stdout)
    assert re.search(r"consume \(acked\) +: 3,000 messages of 100 B", done.stdout)
    # stderr is not a terminal here: the bar prints lines, ending at 100 %
    assert re.search(r"publish +\[#{30}\] 100% +3,000/3,000", done.stderr)
    assert re.search(r"consume +\[#{30}\] 100% +3,000/3,000", done.stderr)


def test_demo_falls_back_to_the_embedded_broker() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_example("demo.py", "--count", "500", url=f"amqp://guest:guest@127.0.0.1:{port}/")
    assert "starting the embedded broker" in done.stdout
    assert "broker: embedded amqp_broker" in done.stdout
    assert re.search(r"consume \(acked\) +: 500 messages of 1,024 B", done.stdout)


def test_demo_over_0_10_against_the_embedded_broker() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = run_example(
        "demo.py",
        "--protocol",
        "0-10",
        "--count",
        "500",
        "--window",
        "100",
        url=f"amqp://guest:guest@127.0.0.1:{port}/",
    )
    assert "protocol: AMQP 0-10" in done.stdout
    assert "broker: embedded amqp_broker" in done.stdout
    assert re.search(r"publish \(synced\) +: 500 messages of 1,024 B", done.stdout)
    assert re.search(r"consume \(accepted\) +: 500 messages of 1,024 B", done.stdout)
    assert re.search(r"consume +\[#{30}\] 100% +500/500", done.stderr)


def test_demo_rejects_bad_arguments() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py"), "--size", "3"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "--size at least 10" in done.stderr


def test_amqp_0_10_session_runs_without_a_broker() -> None:
    # Both ends are our 0-10 core over a socket pair: no broker, no URL.
    out = run_example("amqp_0_10_session.py", "3", url="unused").stdout
    assert "published 3 messages; queue.query says 3" in out
    assert re.findall(r"received '(task \d)'", out) == ["task 0", "task 1", "task 2"]
    assert out.splitlines()[-3:] == [
        "synced: the server completed every command",
        "detached",
        "closed: 200",
    ]
