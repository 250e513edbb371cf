"""A smoke test of an installed amqp-sansio, run by tools/check_package.py inside a fresh
virtual environment (``python -I``, so nothing from the source tree is importable).

Checks that every package imports from that environment, that the C speedups are in use or not
as expected, that the sans-IO core completes a handshake and a publish, that the embedded broker
and the blocking client carry a message, and that the console scripts start.

Usage: ``python -I package_smoke.py --speedups {yes,off,absent}``: the C speedups are shipped
and in use; turned off (by ``AMQP_SANSIO_NO_EXTENSIONS``); or not built at all.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

PACKAGES = [
    "amqp_sansio",
    "amqp_trio",
    "amqp_asyncio",
    "amqp_blocking",
    "amqp_broker",
    "amqp_tools",
    "pytest_amqp_sansio",
]
SCRIPTS = ["amqp-decode", "amqp-publish", "amqp-consume", "amqp-broker"]


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"smoke test failed: {message}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--speedups", choices=["yes", "off", "absent"], required=True)
    expect = parser.parse_args().speedups
    prefix = Path(sys.prefix).resolve()

    for name in PACKAGES:
        module = importlib.import_module(name)
        where = Path(str(module.__file__)).resolve()
        check(where.is_relative_to(prefix), f"{name} imported from {where}, not {prefix}")
        check((where.parent / "py.typed").exists(), f"{name} has no py.typed")
    check(importlib.util.find_spec("amqp_spark") is not None, "amqp_spark is not installed")

    from amqp_sansio import _table

    shipped = importlib.util.find_spec("amqp_sansio._speedups") is not None
    in_use = _table.speedups is not None
    if expect == "yes":
        check(shipped and in_use, f"C speedups expected (shipped {shipped}, in use {in_use})")
    elif expect == "off":
        check(shipped and not in_use, f"speedups shipped {shipped} and off: in use {in_use}")
    else:
        check(not shipped and not in_use, f"a pure build, but speedups shipped {shipped}")

    import amqp_blocking
    import amqp_broker
    import amqp_sansio
    from amqp_sansio.testing import ConnectionPair, content_frames, parse_frames

    pair = ConnectionPair()
    pair.handshake()
    channel = pair.open_channel()
    properties = amqp_sansio.BasicProperties(headers={"n": amqp_sansio.Int64(7), "s": "x"})
    pair.client.publish(channel, amqp_sansio.BasicPublish(routing_key="q"), properties, b"body")
    events = pair.transfer(pair.client)
    check(
        any(isinstance(e, amqp_sansio.MessageReceived) for e in events),
        f"the server core did not receive the publish: {events}",
    )
    frames = parse_frames(
        content_frames(1, amqp_sansio.BasicPublish(routing_key="q"), properties, b"body")
    )
    check(len(frames) == 3, f"content framing gave {frames}")

    with (
        amqp_broker.run_in_thread() as url,
        amqp_blocking.connect(url) as conn,
        conn.channel() as ch,
    ):
        ch.queue_declare("smoke")
        ch.confirm_select()
        ch.basic_publish(b"through the broker", routing_key="smoke")
        message = ch.basic_get("smoke", no_ack=True)
        check(message is not None and message.body == b"through the broker", "broker round trip")

    scripts = Path(sys.executable).parent
    for script in SCRIPTS:
        result = subprocess.run(
            [str(scripts / script), "--help"], capture_output=True, text=True, check=False
        )
        check(result.returncode == 0 and "usage:" in result.stdout, f"{script} --help failed")

    plugins = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    check(
        plugins.get("pytest_amqp_sansio") == "pytest_amqp_sansio",
        f"no pytest11 entry point for the plugin: {plugins}",
    )

    flag = os.environ.get("AMQP_SANSIO_NO_EXTENSIONS", "")
    print(
        f"smoke ok: Python {sys.version_info.major}.{sys.version_info.minor}, speedups "
        f"{'in use' if in_use else 'off' if shipped else 'not built'}"
        + (f" (AMQP_SANSIO_NO_EXTENSIONS={flag})" if flag else "")
    )


if __name__ == "__main__":
    main()
