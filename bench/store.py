"""Candidates for the broker's durable store, and the broker's persistent publishing.

``--candidates`` (the default) measures the stores the issue names on this machine's disk, in
a temporary directory next to the data (``--dir``): SQLite in WAL mode with
``synchronous=FULL`` (the standard library; what ``amqp_broker`` uses) and an append-only log
of our own (length + CRC32 framed records, one ``os.fsync`` per commit). LMDB is not
installed here, so it is not measured. For each message size and batch size (messages per
commit: 1 is one sync per message, larger batches are what group commit makes of many
publishers) it prints messages/s, commits/s and bytes written per message (the growth of the
files), and the time to read N stored messages back at start (restart).

``--broker`` measures the whole path instead: ``python -m amqp_broker --data-dir`` in a
subprocess and the RabbitMQ at ``AMQP_URL``, persistent messages with confirms to a durable
queue from 1 and 16 publishers (threads of amqp_blocking, a window of 100 each), msgs/s and
the broker's CPU per message (``/proc/PID/stat``).

    .venv/bin/python bench/store.py                        # candidates, 2 000 messages each
    .venv/bin/python bench/store.py --broker --count 2000  # broker vs RabbitMQ
    .venv/bin/python bench/store.py --kill 50              # kill -9 while publishing/acking

``--kill N`` runs N rounds: a publisher (each message confirmed before the next) and a
consumer (``basic.get``, acking every third message) against the broker, which is killed
with SIGKILL once 200 more messages were confirmed; after the restart every confirmed
message must be present exactly once, unless the consumer acked it. The messages stay in
the queue from round to round, so the restart time (printed) grows with them.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

_RECORD = struct.Struct(">II")  # length, crc32


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir())


def sqlite_candidate(folder: Path, count: int, size: int, batch: int) -> tuple[float, int, float]:
    """(seconds to write, bytes on disk, seconds to read back) for *count* messages."""
    db = sqlite3.connect(folder / "s.sqlite3", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(
        "CREATE TABLE m (queue TEXT, seq INTEGER, body BLOB, PRIMARY KEY (queue, seq)) "
        "WITHOUT ROWID"
    )
    body = os.urandom(size)
    started = time.perf_counter()
    for first in range(0, count, batch):
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO m VALUES ('q', ?, ?)",
            [(n, body) for n in range(first, min(first + batch, count))],
        )
        db.execute("COMMIT")
    wrote = time.perf_counter() - started
    on_disk = _dir_size(folder)
    db.close()  # checkpoints the log: reading back starts from a closed store
    started = time.perf_counter()
    db = sqlite3.connect(folder / "s.sqlite3")
    rows = db.execute("SELECT seq, body FROM m ORDER BY queue, seq").fetchall()
    read = time.perf_counter() - started
    assert len(rows) == count
    db.close()
    return wrote, on_disk, read


def log_candidate(folder: Path, count: int, size: int, batch: int) -> tuple[float, int, float]:
    """The same for an append-only log: framed records, one fsync per batch."""
    path = folder / "log"
    body = os.urandom(size)
    started = time.perf_counter()
    with path.open("ab") as out:
        for first in range(0, count, batch):
            chunk = bytearray()
            for n in range(first, min(first + batch, count)):
                record = struct.pack(">Q", n) + body
                chunk += _RECORD.pack(len(record), zlib.crc32(record)) + record
            out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    wrote = time.perf_counter() - started
    on_disk = path.stat().st_size
    started = time.perf_counter()
    data = path.read_bytes()
    offset, found = 0, 0
    while offset + _RECORD.size <= len(data):
        length, crc = _RECORD.unpack_from(data, offset)
        record = data[offset + _RECORD.size : offset + _RECORD.size + length]
        if len(record) < length or zlib.crc32(record) != crc:
            break  # a torn tail
        found += 1
        offset += _RECORD.size + length
    read = time.perf_counter() - started
    assert found == count
    return wrote, on_disk, read


def candidates(args: argparse.Namespace) -> None:
    print(
        f"{'store':8} {'size':>5} {'batch':>5} {'msgs/s':>9} {'syncs/s':>8} {'B/msg':>6} "
        f"{'read s':>7}"
    )
    for size in (16, 1024):
        for batch in (1, 16, 256):
            for name, run in (("sqlite", sqlite_candidate), ("log", log_candidate)):
                with tempfile.TemporaryDirectory(dir=args.dir) as folder:
                    count = args.count if batch > 1 else min(args.count, 500)
                    wrote, on_disk, read = run(Path(folder), count, size, batch)
                commits = -(-count // batch)
                print(
                    f"{name:8} {size:5} {batch:5} {count / wrote:9.0f} {commits / wrote:8.0f} "
                    f"{on_disk / count:6.0f} {read:7.3f}",
                    flush=True,
                )


def _cpu(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _publish(url: str, queue: str, publishers: int, count: int, size: int) -> float:
    import amqp_blocking
    from amqp_sansio import BasicProperties

    persistent = BasicProperties(delivery_mode=2)
    body = b"x" * size
    each = count // publishers

    def run() -> None:
        with (
            amqp_blocking.connect(url) as conn,
            conn.channel() as ch,
            ch.publisher(window=100) as pub,
        ):
            for _ in range(each):
                pub.publish(body, routing_key=queue, properties=persistent)

    threads = [threading.Thread(target=run) for _ in range(publishers)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def broker(args: argparse.Namespace) -> None:
    import amqp_blocking

    rabbit = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    sys.path.insert(0, str(Path(__file__).parent))
    from broker import find_rabbitmq_pid

    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        process = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--port", "0", "--data-dir", folder],
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stderr is not None
            line = process.stderr.readline()
            port = int(line.rsplit(":", 1)[1])
            targets = [
                ("amqp_broker", f"amqp://guest:guest@127.0.0.1:{port}/", process.pid),
                ("RabbitMQ", rabbit, find_rabbitmq_pid(5672)),
            ]
            print(f"{'broker':12} {'pubs':>4} {'size':>5} {'msgs/s':>8} {'CPU us/msg':>10}")
            for publishers in (1, 16):
                for size in (16, 1024):
                    for name, url, pid in targets:
                        queue = f"bench.store.{os.getpid()}"
                        with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                            ch.queue_declare(queue, durable=True)
                        before = _cpu(pid) if pid else 0.0
                        seconds = _publish(url, queue, publishers, args.count, size)
                        cpu = (_cpu(pid) - before) if pid else float("nan")
                        with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                            ch.queue_delete(queue)
                        sent = args.count // publishers * publishers
                        print(
                            f"{name:12} {publishers:4} {size:5} {sent / seconds:8.0f} "
                            f"{cpu / sent * 1e6:10.0f}",
                            flush=True,
                        )
        finally:
            process.terminate()
            process.wait(timeout=30)


def _start(folder: str) -> tuple[subprocess.Popen[str], str, float]:
    """The broker on *folder*: the process, its URL, and seconds until it listened."""
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "amqp_broker", "--port", "0", "--data-dir", folder],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    seconds = time.perf_counter() - started
    port = int(line.rsplit(":", 1)[1])
    process.stderr.readline()  # what it recovered
    return process, f"amqp://guest:guest@127.0.0.1:{port}/", seconds


def kill_loop(args: argparse.Namespace) -> None:
    """``--kill N``: N rounds of kill -9 during confirmed persistent publishing and acking
    consumption, each checked after the restart; then the restart time with many messages."""
    import amqp_blocking
    from amqp_sansio import BasicProperties

    persistent = BasicProperties(delivery_mode=2)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        confirmed: set[int] = set()
        acked: set[int] = set()
        number = 0
        for round_ in range(args.kill):
            process, url, _ = _start(folder)
            with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                ch.queue_declare("kill.q", durable=True)
            enough = threading.Event()

            def publish(url: str = url, enough: threading.Event = enough) -> None:
                nonlocal number
                try:
                    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                        ch.confirm_select()
                        while True:
                            number += 1
                            ch.basic_publish(
                                str(number).encode(), routing_key="kill.q", properties=persistent
                            )
                            confirmed.add(number)
                            if len(confirmed) % 200 == 0:
                                enough.set()
                except Exception:
                    enough.set()

            def consume(url: str = url) -> None:
                try:
                    with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                        while True:
                            message = ch.basic_get("kill.q", no_ack=False)
                            if message is not None and int(message.body) % 3 == 0:
                                message.ack()
                                acked.add(int(message.body))
                except Exception:
                    return

            threads = [threading.Thread(target=publish), threading.Thread(target=consume)]
            for thread in threads:
                thread.start()
            enough.wait(60)
            process.kill()
            process.wait(30)
            for thread in threads:
                thread.join(60)
            process, url, seconds = _start(folder)
            with amqp_blocking.connect(url) as conn, conn.channel() as ch:
                present: list[int] = []
                while (message := ch.basic_get("kill.q", no_ack=False)) is not None:
                    present.append(int(message.body))
                # put them back for the next round (the channel's close requeues them)
            duplicates = len(present) - len(set(present))
            lost = confirmed - acked - set(present)
            print(
                f"round {round_ + 1}: {len(confirmed)} confirmed, {len(acked)} acked, "
                f"{len(present)} present, {duplicates} duplicates, {len(lost)} lost, "
                f"restart {seconds:.2f} s",
                flush=True,
            )
            if lost or duplicates:
                raise SystemExit(f"lost {sorted(lost)[:10]}, {duplicates} duplicates")
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", action="store_true", help="the broker against RabbitMQ")
    parser.add_argument("--count", type=int, default=2000, help="messages per case")
    parser.add_argument("--dir", default=None, help="where the temporary stores go")
    parser.add_argument("--kill", type=int, default=0, help="rounds of kill -9 and restart")
    args = parser.parse_args()
    if args.kill:
        kill_loop(args)
    elif args.broker:
        broker(args)
    else:
        candidates(args)


if __name__ == "__main__":
    main()
