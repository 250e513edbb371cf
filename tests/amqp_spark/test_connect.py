"""amqp_spark through Spark Connect: a local Connect server started by PySpark itself
(``SparkSession.builder.remote("local[2]")``), the source registered through the Connect
session, a stream queue read into a parquet sink. The client runs in a process of its own,
``tests/amqp_spark/connect_driver.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from tests.support.spark_cluster import committed_rows

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.rabbitmq

MESSAGES: Final = 10_000
_ROOT: Final = Path(__file__).resolve().parents[2]


@pytest.fixture
def stream_queue(rabbitmq_url: str) -> Iterator[str]:
    name = f"amqp-spark-connect-{uuid.uuid4().hex[:10]}"
    with amqp_blocking.connect(rabbitmq_url) as connection, connection.channel() as channel:
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        channel.confirm_select()
        with channel.publisher(window=1000) as publisher:
            for index in range(MESSAGES):
                publisher.publish(b"%d" % index, routing_key=name)
        yield name
        channel.queue_delete(name)


def test_stream_queue_to_parquet_through_spark_connect(
    rabbitmq_url: str, stream_queue: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    src = str(_ROOT / "src")
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": src if not path else f"{src}{os.pathsep}{path}"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.amqp_spark.connect_driver",
            rabbitmq_url,
            stream_queue,
            str(out),
            str(tmp_path / "checkpoint"),
        ],
        cwd=_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-3000:]
    lines = result.stdout.decode().splitlines()
    assert [line for line in lines if line.startswith("batch ")] == ["batch 3000"] * 3 + [
        "batch 1000"
    ]
    offsets = sorted(int(str(row["stream_offset"])) for row in committed_rows(out))
    assert offsets == list(range(MESSAGES))
    # a Connect load() is lazy; start() reports the missing option, with its fix
    errors = [line for line in lines if line.startswith("start error: ")]
    assert len(errors) == 1
    assert "'queueType'" in errors[0]
    assert '.option("queueType", "stream")' in errors[0]
