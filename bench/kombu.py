"""kombu publish and consume throughput, and client CPU per message, on amqp-sansio's kombu
transport (``amqp_kombu``) next to kombu's own ``pyamqp`` transport (py-amqp), and
``librabbitmq`` when it is installed (its C extension does not build on this machine's
Python: it is skipped, saying so).

For each transport, in a process of its own: publish N messages of SIZE octets through
``kombu.Producer`` (without and with ``confirm_publish``) to a fresh queue, then consume them
back through ``kombu.Consumer`` and ``Connection.drain_events`` (prefetch 1000, one ack per
message, as a Celery worker acks). Client CPU is the process's CPU time (every thread: the
I/O thread of amqp_blocking included) over the messages; the clock covers the loop only.

    .venv/bin/python bench/kombu.py                       # RabbitMQ at AMQP_URL, N=20000, 1 KiB
    .venv/bin/python bench/kombu.py --n 2000 --size 16    # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
TRANSPORTS = ("amqp-sansio", "pyamqp", "librabbitmq")


def _url(scheme: str, amqp_url: str) -> str:
    parts = urlsplit(amqp_url)
    vhost = parts.path if parts.path not in ("", "/") else "//"
    return f"{scheme}://{parts.netloc}{vhost}"


def worker(transport: str, amqp_url: str, n: int, size: int, confirm: bool) -> dict[str, float]:
    # This file is named kombu.py (the name for it): its directory, first on the path
    # of a script, would shadow the package.
    here = Path(__file__).resolve().parent
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != here]
    import kombu

    if transport == "amqp-sansio":
        import amqp_kombu

        assert amqp_kombu.SCHEMES
    options = {"confirm_publish": True} if confirm else {}
    body = b"x" * size
    queue_name = f"bench-kombu-{uuid.uuid4().hex[:8]}"
    with kombu.Connection(_url(transport, amqp_url), transport_options=options) as conn:
        channel = conn.channel()
        queue = kombu.Queue(queue_name, routing_key=queue_name, durable=False)
        queue(channel).declare()
        producer = kombu.Producer(channel, routing_key=queue_name)
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(n):
            producer.publish(body, content_type="application/data", content_encoding="binary")
        publish_wall = time.perf_counter() - wall
        publish_cpu = time.process_time() - cpu
        with kombu.Connection(_url(transport, amqp_url)) as consuming:
            count = 0

            def on_message(message: kombu.Message) -> None:
                nonlocal count
                count += 1
                message.ack()

            consumer = kombu.Consumer(
                consuming, [queue], on_message=on_message, prefetch_count=1000
            )
            # The queue holds them all once a passive declare counts n (publishes without
            # confirms may still be on their way).
            while queue(channel).queue_declare(passive=True).message_count < n:
                time.sleep(0.01)
            cpu, wall = time.process_time(), time.perf_counter()
            with consumer:
                while count < n:
                    consuming.drain_events(timeout=10)
            consume_wall = time.perf_counter() - wall
            consume_cpu = time.process_time() - cpu
        queue(channel).delete()
    return {
        "publish_per_s": n / publish_wall,
        "publish_cpu_us": publish_cpu / n * 1e6,
        "consume_per_s": n / consume_wall,
        "consume_cpu_us": consume_cpu / n * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("AMQP_URL", DEFAULT_URL))
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--worker", nargs=2, metavar=("TRANSPORT", "CONFIRM"))
    args = parser.parse_args()
    if args.worker:
        transport, confirm = args.worker
        result = worker(transport, args.url, args.n, args.size, confirm == "confirm")
        print(json.dumps(result))
        return 0
    print(f"kombu 5.7.0, N={args.n}, {args.size} B bodies, broker {urlsplit(args.url).hostname}")
    print()
    print(
        "| transport | confirms | publish msg/s | publish CPU us/msg | consume msg/s "
        "| consume CPU us/msg |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for transport in TRANSPORTS:
        if transport == "librabbitmq":
            try:
                import librabbitmq  # noqa: F401
            except ImportError:
                print("| librabbitmq | - | not installed (its C extension does not build) | | | |")
                continue
        for confirm in ("plain", "confirm"):
            done = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--url",
                    args.url,
                    "--n",
                    str(args.n),
                    "--size",
                    str(args.size),
                    "--worker",
                    transport,
                    confirm,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(done.stdout.strip().splitlines()[-1])
            print(
                f"| {transport} | {'on' if confirm == 'confirm' else 'off'} "
                f"| {r['publish_per_s']:,.0f} | {r['publish_cpu_us']:.0f} "
                f"| {r['consume_per_s']:,.0f} | {r['consume_cpu_us']:.0f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
