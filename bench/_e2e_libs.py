"""The timed part of each end-to-end benchmark case, one function per library.

Each runner connects, opens a channel and prepares (confirm mode, QoS) before it starts the
clock, and returns the seconds the operation took:

* ``publish``: N publishes to the default exchange without confirms, each awaited (or called)
  one after the other as an application would, then one synchronous round trip on the channel
  (a passive ``queue.declare``) so that the clock stops after the broker has handled them all;
* ``confirm``: N publishes in confirm mode, ending when every one is confirmed. Libraries with a
  way to keep many publishes in flight use a window of ``window`` unconfirmed publishes
  (the ``publisher`` of amqp_trio, amqp_asyncio and amqp_blocking, concurrent tasks bounded
  by a semaphore for aio-pika and aiormq);
  pika's BlockingConnection and py-amqp can only wait for each confirm in turn, and async_amqp
  must (see its runner);
* ``consume``: N messages from a queue filled beforehand, with ``basic.qos`` prefetch
  ``prefetch`` and a ``multiple`` ack every ``ack_every`` deliveries; the clock runs from the
  ``basic.consume`` call to the last ack.

Library imports happen inside the runners: a worker process imports only the library it runs
(the async_amqp worker runs from its own virtualenv, where the others are not installed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable

    from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
    from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

__all__ = ["RUNNERS", "Case", "Stopwatch", "Timing"]

#: (wall-clock seconds, CPU seconds of this process) of one timed operation
Timing = tuple[float, float]


class Stopwatch:
    """Wall-clock and process CPU time from construction to :meth:`stop`."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def stop(self) -> Timing:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


@dataclass(frozen=True)
class Case:
    url: str
    op: str  # "publish" | "confirm" | "consume"
    queue: str
    count: int
    body_size: int
    window: int
    prefetch: int
    ack_every: int

    @property
    def body(self) -> bytes:
        return b"x" * self.body_size

    def check_consumed(self, messages: int, octets: int) -> None:
        if messages != self.count or octets != self.count * self.body_size:
            raise RuntimeError(
                f"consumed {messages} messages with {octets} body octets, expected "
                f"{self.count} with {self.count * self.body_size}"
            )


def run_raw(case: Case) -> Timing:
    from _raw import RawClient

    client = RawClient(case.url)
    try:
        if case.op == "publish":
            watch = Stopwatch()
            client.publish(case.queue, case.count, case.body)
        elif case.op == "confirm":
            client.confirm_select()
            watch = Stopwatch()
            client.publish_confirmed(case.queue, case.count, case.body, window=case.window)
        else:
            watch = Stopwatch()
            client.consume(
                case.queue,
                case.count,
                case.body_size,
                prefetch=case.prefetch,
                ack_every=case.ack_every,
            )
        elapsed = watch.stop()
        if case.op == "consume":
            client.cancel()
        return elapsed
    finally:
        client.close()


def run_core(case: Case) -> Timing:
    """``core``: a bare blocking socket loop over ``amqp_sansio.Connection`` (no adapter)."""
    from _core_client import CoreClient

    client = CoreClient(case.url)
    try:
        if case.op == "publish":
            watch = Stopwatch()
            client.publish(case.queue, case.count, case.body)
            return watch.stop()
        if case.op == "confirm":
            client.confirm_select()
            watch = Stopwatch()
            client.publish_confirmed(case.queue, case.count, case.body, case.window)
            return watch.stop()
        watch = Stopwatch()
        received, octets = client.consume(case.queue, case.count, case.prefetch, case.ack_every)
        elapsed = watch.stop()
        case.check_consumed(received, octets)
        return elapsed
    finally:
        client.close()


def run_amqp_trio(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import trio

    import amqp_trio

    async def main() -> Timing:
        async with amqp_trio.connect(case.url) as conn, conn.channel() as ch:
            body = case.body
            queue = case.queue
            if case.op == "publish":
                watch = Stopwatch()
                for _ in range(case.count):
                    await ch.basic_publish(body, routing_key=queue)
                await ch.queue_declare(queue, passive=True)
                return watch.stop()
            if case.op == "confirm":
                await ch.confirm_select()
                watch = Stopwatch()
                async with ch.publisher(window=case.window) as publisher:
                    for _ in range(case.count):
                        await publisher.publish(body, routing_key=queue)
                return watch.stop()
            await ch.basic_qos(prefetch_count=case.prefetch)
            received = octets = 0
            watch = Stopwatch()
            async with ch.basic_consume(queue) as consumer:
                async for message in consumer:
                    received += 1
                    octets += len(message.body)
                    if received % ack_every == 0 or received == count:
                        await ch.basic_ack(message.delivery_tag, multiple=True)
                        if received == case.count:
                            break
                elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return trio.run(main)


def run_amqp_asyncio(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import asyncio

    import amqp_asyncio

    async def main() -> Timing:
        async with amqp_asyncio.connect(case.url) as conn, conn.channel() as ch:
            body = case.body
            queue = case.queue
            if case.op == "publish":
                watch = Stopwatch()
                for _ in range(case.count):
                    await ch.basic_publish(body, routing_key=queue)
                await ch.queue_declare(queue, passive=True)
                return watch.stop()
            if case.op == "confirm":
                await ch.confirm_select()
                watch = Stopwatch()
                async with ch.publisher(window=case.window) as publisher:
                    for _ in range(case.count):
                        await publisher.publish(body, routing_key=queue)
                return watch.stop()
            await ch.basic_qos(prefetch_count=case.prefetch)
            received = octets = 0
            watch = Stopwatch()
            async with ch.basic_consume(queue) as consumer:
                async for message in consumer:
                    received += 1
                    octets += len(message.body)
                    if received % ack_every == 0 or received == count:
                        await ch.basic_ack(message.delivery_tag, multiple=True)
                        if received == case.count:
                            break
                elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return asyncio.run(main())


def run_amqp_blocking(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import amqp_blocking

    with amqp_blocking.connect(case.url) as conn, conn.channel() as ch:
        body = case.body
        queue = case.queue
        if case.op == "publish":
            watch = Stopwatch()
            for _ in range(case.count):
                ch.basic_publish(body, routing_key=queue)
            ch.queue_declare(queue, passive=True)
            return watch.stop()
        if case.op == "confirm":
            ch.confirm_select()
            watch = Stopwatch()
            with ch.publisher(window=case.window) as publisher:
                for _ in range(case.count):
                    publisher.publish(body, routing_key=queue)
            return watch.stop()
        ch.basic_qos(prefetch_count=case.prefetch)
        received = octets = 0
        watch = Stopwatch()
        with ch.basic_consume(queue) as consumer:
            for message in consumer:
                received += 1
                octets += len(message.body)
                if received % ack_every == 0 or received == count:
                    ch.basic_ack(message.delivery_tag, multiple=True)
                    if received == case.count:
                        break
            elapsed = watch.stop()
        case.check_consumed(received, octets)
        return elapsed


def run_aio_pika(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import asyncio

    import aio_pika

    async def main() -> Timing:
        connection = await aio_pika.connect(case.url)
        async with connection:
            channel = await connection.channel(publisher_confirms=case.op == "confirm")
            exchange = channel.default_exchange
            body = case.body
            queue_name = case.queue
            if case.op == "publish":
                watch = Stopwatch()
                for _ in range(case.count):
                    await exchange.publish(aio_pika.Message(body), routing_key=queue_name)
                await channel.declare_queue(queue_name, passive=True)
                return watch.stop()
            if case.op == "confirm":
                window = asyncio.Semaphore(case.window)

                async def publish_one() -> None:
                    try:
                        await exchange.publish(aio_pika.Message(body), routing_key=queue_name)
                    finally:
                        window.release()

                watch = Stopwatch()
                async with asyncio.TaskGroup() as tasks:
                    for _ in range(case.count):
                        await window.acquire()
                        tasks.create_task(publish_one())
                return watch.stop()
            await channel.set_qos(prefetch_count=case.prefetch)
            queue = await channel.declare_queue(queue_name, passive=True)
            received = octets = 0
            watch = Stopwatch()
            async with queue.iterator() as messages:
                async for message in messages:
                    received += 1
                    octets += len(message.body)
                    if received % ack_every == 0 or received == count:
                        await message.ack(multiple=True)
                        if received == case.count:
                            break
                elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return asyncio.run(main())


def run_aiormq(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import asyncio

    import aiormq

    async def main() -> Timing:
        connection = await aiormq.connect(case.url)
        try:
            channel = await connection.channel(publisher_confirms=case.op == "confirm")
            body = case.body
            queue = case.queue
            if case.op == "publish":
                watch = Stopwatch()
                for _ in range(case.count):
                    await channel.basic_publish(body, routing_key=queue)
                await channel.queue_declare(queue, passive=True)
                return watch.stop()
            if case.op == "confirm":
                window = asyncio.Semaphore(case.window)

                async def publish_one() -> None:
                    try:
                        await channel.basic_publish(body, routing_key=queue)
                    finally:
                        window.release()

                watch = Stopwatch()
                async with asyncio.TaskGroup() as tasks:
                    for _ in range(case.count):
                        await window.acquire()
                        tasks.create_task(publish_one())
                return watch.stop()
            await channel.basic_qos(prefetch_count=case.prefetch)
            done = asyncio.Event()
            counts = [0, 0]  # received, octets
            finished_at = [(0.0, 0.0)]

            async def on_message(message: aiormq.abc.DeliveredMessage) -> None:
                counts[0] += 1
                counts[1] += len(message.body)
                if counts[0] % ack_every == 0 or counts[0] == count:
                    await channel.basic_ack(int(message.delivery_tag or 0), multiple=True)
                    if counts[0] == case.count:
                        finished_at[0] = watch.stop()
                        done.set()

            watch = Stopwatch()
            await channel.basic_consume(queue, on_message)
            await done.wait()
            case.check_consumed(counts[0], counts[1])
            return finished_at[0]
        finally:
            await connection.close()

    return asyncio.run(main())


def run_pika(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import pika

    connection = pika.BlockingConnection(pika.URLParameters(case.url))
    try:
        channel = connection.channel()
        body = case.body
        queue = case.queue
        if case.op in ("publish", "confirm"):
            if case.op == "confirm":
                channel.confirm_delivery()
            watch = Stopwatch()
            for _ in range(case.count):
                channel.basic_publish(exchange="", routing_key=queue, body=body)
            if case.op == "publish":
                channel.queue_declare(queue, passive=True)
            return watch.stop()
        channel.basic_qos(prefetch_count=case.prefetch)
        counts = [0, 0]
        finished_at = [(0.0, 0.0)]

        def on_message(
            ch: pika.adapters.blocking_connection.BlockingChannel,
            method: pika.spec.Basic.Deliver,
            _properties: pika.spec.BasicProperties,
            message_body: bytes,
        ) -> None:
            counts[0] += 1
            counts[1] += len(message_body)
            if counts[0] % ack_every == 0 or counts[0] == count:
                ch.basic_ack(method.delivery_tag, multiple=True)
                if counts[0] == case.count:
                    finished_at[0] = watch.stop()
                    ch.stop_consuming()

        watch = Stopwatch()
        channel.basic_consume(queue, on_message)
        channel.start_consuming()
        case.check_consumed(counts[0], counts[1])
        return finished_at[0]
    finally:
        connection.close()


def run_py_amqp(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import amqp

    parts = urlsplit(case.url)
    connection = amqp.Connection(
        host=f"{parts.hostname or '127.0.0.1'}:{parts.port or 5672}",
        userid=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        virtual_host=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
        confirm_publish=case.op == "confirm",
    )
    connection.connect()
    try:
        channel = connection.channel()
        body = case.body
        queue = case.queue
        if case.op in ("publish", "confirm"):
            watch = Stopwatch()
            for _ in range(case.count):
                channel.basic_publish(amqp.Message(body), exchange="", routing_key=queue)
            if case.op == "publish":
                channel.queue_declare(queue, passive=True)
            return watch.stop()
        channel.basic_qos(0, case.prefetch, False)
        counts = [0, 0]
        finished_at = [(0.0, 0.0)]

        def on_message(message: amqp.Message) -> None:
            counts[0] += 1
            counts[1] += len(message.body)
            if counts[0] % ack_every == 0 or counts[0] == count:
                channel.basic_ack(message.delivery_tag, multiple=True)
                if counts[0] == case.count:
                    finished_at[0] = watch.stop()

        watch = Stopwatch()
        channel.basic_consume(queue, callback=on_message)
        while counts[0] < case.count:
            connection.drain_events(timeout=30)
        case.check_consumed(counts[0], counts[1])
        return finished_at[0]
    finally:
        connection.close()


def run_async_amqp(case: Case) -> Timing:
    # The consume loop checks for its ack inline, as core's does: the harness's own
    # per-message work is the same for every library.
    ack_every, count = case.ack_every, case.count
    import async_amqp
    import trio

    parts = urlsplit(case.url)

    async def main() -> Timing:
        async with async_amqp.connect_amqp(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5672,
            login=unquote(parts.username or "guest"),
            password=unquote(parts.password or "guest"),
            virtualhost=unquote(parts.path[1:]) if len(parts.path) > 1 else "/",
        ) as protocol:
            channel = await protocol.channel()
            body = case.body
            queue = case.queue
            if case.op == "publish":
                watch = Stopwatch()
                for _ in range(case.count):
                    await channel.publish(body, "", queue)
                await channel.queue_declare(queue, passive=True)
                return watch.stop()
            if case.op == "confirm":
                # One publish in flight: async_amqp ignores `multiple` on acks, so with more
                # than one unconfirmed publish its confirm futures never resolve (the same bug
                # as aioamqp's Polyconseil/aioamqp#233).
                await channel.confirm_select()
                watch = Stopwatch()
                for _ in range(case.count):
                    await channel.publish(body, "", queue)
                return watch.stop()
            await channel.basic_qos(prefetch_count=case.prefetch)
            received = octets = 0
            watch = Stopwatch()
            async with channel.new_consumer(queue_name=queue) as listener:
                async for message_body, envelope, _properties in listener:
                    received += 1
                    octets += len(message_body)
                    if received % ack_every == 0 or received == count:
                        await channel.basic_client_ack(envelope.delivery_tag, multiple=True)
                        if received == case.count:
                            break
                elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return trio.run(main)


def _sdk_providers() -> tuple[SdkTracerProvider, SdkMeterProvider]:
    """OpenTelemetry's SDK with the in-memory span exporter (each span exported as it ends)
    and the in-memory metric reader: everything recorded, nothing sent anywhere."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


def run_amqp_trio_otel_noop(case: Case) -> Timing:
    """amqp_trio traced through OpenTelemetry's no-op providers: the cost of the hooks and of
    the API calls themselves."""
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    from amqp_sansio.client import instrument

    instrument(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())
    return run_amqp_trio(case)


def run_amqp_trio_otel_sdk(case: Case) -> Timing:
    """amqp_trio traced into the SDK's in-memory exporter and metric reader."""
    from amqp_sansio.client import instrument

    tracer_provider, meter_provider = _sdk_providers()
    instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return run_amqp_trio(case)


def run_aio_pika_otel_sdk(case: Case) -> Timing:
    """aio-pika with opentelemetry-instrumentation-aio-pika, into the same SDK setup."""
    from opentelemetry.instrumentation.aio_pika import AioPikaInstrumentor

    tracer_provider, _ = _sdk_providers()
    AioPikaInstrumentor().instrument(tracer_provider=tracer_provider)
    return run_aio_pika(case)


# -- AMQP 0-10 (against the embedded broker, which serves 0-10 and 0-9-1 on one port) -------
# publish: unsynced transfers, then one execution.sync; confirm: an execution.sync every
# `window` transfers (0-10's publisher confirms); consume: a subscription with `prefetch`
# messages of credit, each message accepted.


def run_amqp_trio_0_10(case: Case) -> Timing:
    import trio

    import amqp_trio

    async def main() -> Timing:
        async with (
            amqp_trio.connect(case.url, protocol="0-10") as conn,
            conn.session() as session,
        ):
            body = case.body
            queue = case.queue
            if case.op in ("publish", "confirm"):
                every = case.window if case.op == "confirm" else case.count
                watch = Stopwatch()
                for n in range(1, case.count + 1):
                    await session.transfer("", body, routing_key=queue, sync=False)
                    if n % every == 0 or n == case.count:
                        await session.sync()
                return watch.stop()
            received = octets = 0
            watch = Stopwatch()
            subscription = await session.subscribe(queue, prefetch=case.prefetch)
            async for message in subscription:
                received += 1
                octets += len(message.body)
                message.accept()
                if received == case.count:
                    break
            await session.sync()
            elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return trio.run(main)


def run_amqp_asyncio_0_10(case: Case) -> Timing:
    import asyncio

    import amqp_asyncio

    async def main() -> Timing:
        async with (
            amqp_asyncio.connect(case.url, protocol="0-10") as conn,
            conn.session() as session,
        ):
            body = case.body
            queue = case.queue
            if case.op in ("publish", "confirm"):
                every = case.window if case.op == "confirm" else case.count
                watch = Stopwatch()
                for n in range(1, case.count + 1):
                    await session.transfer("", body, routing_key=queue, sync=False)
                    if n % every == 0 or n == case.count:
                        await session.sync()
                return watch.stop()
            received = octets = 0
            watch = Stopwatch()
            subscription = await session.subscribe(queue, prefetch=case.prefetch)
            async for message in subscription:
                received += 1
                octets += len(message.body)
                message.accept()
                if received == case.count:
                    break
            await session.sync()
            elapsed = watch.stop()
            case.check_consumed(received, octets)
            return elapsed

    return asyncio.run(main())


def run_amqp_blocking_0_10(case: Case) -> Timing:
    import amqp_blocking

    with amqp_blocking.connect(case.url, protocol="0-10") as conn, conn.session() as session:
        body = case.body
        queue = case.queue
        if case.op in ("publish", "confirm"):
            every = case.window if case.op == "confirm" else case.count
            watch = Stopwatch()
            for n in range(1, case.count + 1):
                session.transfer("", body, routing_key=queue, sync=False)
                if n % every == 0 or n == case.count:
                    session.sync()
            return watch.stop()
        received = octets = 0
        watch = Stopwatch()
        subscription = session.subscribe(queue, prefetch=case.prefetch)
        for message in subscription:
            received += 1
            octets += len(message.body)
            message.accept()
            if received == case.count:
                break
        session.sync()
        elapsed = watch.stop()
        case.check_consumed(received, octets)
        return elapsed


def run_qpid_python_0_10(case: Case) -> Timing:
    """qpid-python 1.36's 0-10 client under Python 2.7 (``qpid_e2e_0_10.py2``), installed as
    the tests install it (``.cache/qpid27``); it times itself."""
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    qpid = root / ".cache" / "qpid27"
    python = Path.home() / ".pyenv" / "versions" / "2.7.18" / "bin" / "python"
    if not python.exists() or not (qpid / "qpid" / "ops.py").exists():
        raise ImportError(
            "qpid-python needs pyenv's Python 2.7.18 and .cache/qpid27 (the 0-10 tests "
            "install it: pytest tests/amqp_broker/test_broker_0_10.py)"
        )
    spec = json.dumps(
        {
            "url": case.url,
            "op": case.op,
            "queue": case.queue,
            "count": case.count,
            "body_size": case.body_size,
            "window": case.window,
            "prefetch": case.prefetch,
        }
    )
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("qpid_e2e_0_10.py2")), spec],
        env={"PYTHONPATH": str(qpid), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"qpid-python worker failed: {done.stderr.strip()[-500:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["received"] != (case.count if case.op == "consume" else 0):
        raise RuntimeError(f"qpid-python consumed {result['received']} of {case.count}")
    return float(result["seconds"]), float(result["cpu_seconds"])


RUNNERS: dict[str, Callable[[Case], Timing]] = {
    "raw": run_raw,
    "core": run_core,
    "amqp_trio": run_amqp_trio,
    "amqp_asyncio": run_amqp_asyncio,
    "amqp_blocking": run_amqp_blocking,
    "aio-pika": run_aio_pika,
    "aiormq": run_aiormq,
    "pika": run_pika,
    "py-amqp": run_py_amqp,
    "async_amqp": run_async_amqp,
    "amqp_trio+otel-noop": run_amqp_trio_otel_noop,
    "amqp_trio+otel-sdk": run_amqp_trio_otel_sdk,
    "aio-pika+otel-sdk": run_aio_pika_otel_sdk,
    "amqp_trio-0-10": run_amqp_trio_0_10,
    "amqp_asyncio-0-10": run_amqp_asyncio_0_10,
    "amqp_blocking-0-10": run_amqp_blocking_0_10,
    "qpid-python-0-10": run_qpid_python_0_10,
}
