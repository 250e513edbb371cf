"""The 0-10 and 0-9-1 message and consumer APIs, attribute by attribute, in every adapter:
each difference is listed with its reason in docs/amqp-0-10.md, or this fails. The objects
compared are real ones (a received message, a live consumer) from the embedded broker."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path
from typing import Final

import pytest
import trio

import amqp_asyncio
import amqp_blocking
import amqp_trio
from amqp_sansio import BasicProperties
from amqp_sansio.v0_10.client import Properties

DOC: Final = Path(__file__).parents[3] / "docs" / "amqp-0-10.md"
ADAPTERS: Final = ("amqp_trio", "amqp_asyncio", "amqp_blocking")
#: 0-10 properties sent and expected back as given (str stays str).
SENT: Final = Properties(
    content_type="text/plain",
    content_encoding="utf-8",
    headers={"n": 1},
    persistent=True,
    priority=4,
    ttl=60_000,
    message_id=uuid.UUID(int=7),
    correlation_id="corr-1",
    reply_to=("amq.direct", "replies"),
    user_id="guest",
    app_id="tests",
)

Names = dict[str, set[str]]  # "message" / "consumer" -> public attribute names


def public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def message_names(message: object) -> set[str]:
    # A 0-9-1 message keeps its properties in .properties, 0-10's has them flat too: both
    # are compared as one namespace.
    return public(message) | public(getattr(message, "properties"))  # noqa: B009


def documented() -> dict[tuple[str, str, str], set[str]]:
    """(adapter, object, "0-9-1" or "0-10") -> the names the docs' table lists as only there."""
    table = DOC.read_text().split("### Message and consumer, attribute by attribute", 1)[1]
    out: dict[tuple[str, str, str], set[str]] = {}
    row = re.compile(r"^\| (message|consumer) \| (.+?) \| (0-9-1|0-10) \| (.+?) \| (.+?) \|$")
    for line in table.splitlines():
        match = row.match(line)
        if match is None:
            if line.startswith("#"):
                break
            continue
        kind, names, side, adapters, why = match.groups()
        assert why.strip(), line
        which = ADAPTERS if adapters == "all" else tuple(re.findall(r"`(\w+)`", adapters))
        for adapter in which:
            out.setdefault((adapter, kind, side), set()).update(re.findall(r"`(\w+)`", names))
    return out


def check(adapter: str, v091: Names, v010: Names) -> None:
    listed = documented()
    for kind in ("message", "consumer"):
        assert v091[kind] - v010[kind] == listed.get((adapter, kind, "0-9-1"), set()), kind
        assert v010[kind] - v091[kind] == listed.get((adapter, kind, "0-10"), set()), kind


def test_the_docs_list_each_property_field_of_both_families() -> None:
    # 0-10's Properties has what 0-9-1's has under the same names, but for what the table says
    fields_091 = public(BasicProperties())
    fields_010 = public(SENT)
    only = documented()
    assert fields_091 - fields_010 <= only[("amqp_trio", "message", "0-9-1")]
    assert fields_010 - fields_091 <= only[("amqp_trio", "message", "0-10")]


def test_trio(embedded_url: str) -> None:
    async def main() -> tuple[Names, Names]:
        async with amqp_trio.connect(embedded_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.basic_publish(b"a", routing_key=queue)
            async with ch.basic_consume(queue) as consumer:
                message = await consumer.get(timeout=10)
                assert message is not None
                await message.ack()
                v091 = {"message": message_names(message), "consumer": public(consumer)}
        async with amqp_trio.connect(embedded_url, protocol="0-10") as c10, c10.session() as s:
            queue = f"parity-{uuid.uuid4().hex[:8]}"
            await s.queue_declare(queue, auto_delete=True)
            await s.transfer("", b"b", routing_key=queue, properties=SENT)
            subscription = await s.subscribe(queue)
            received = await subscription.get(timeout=10)
            assert received is not None
            assert received.properties == SENT
            received.accept()
            assert await subscription.get(timeout=0.05) is None  # a timeout: no error
            v010 = {"message": message_names(received), "consumer": public(subscription)}
            await s.queue_delete(queue)
        return v091, v010

    check("amqp_trio", *trio.run(main))


def test_asyncio(embedded_url: str) -> None:
    async def main() -> tuple[Names, Names]:
        async with amqp_asyncio.connect(embedded_url) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.basic_publish(b"a", routing_key=queue)
            async with ch.basic_consume(queue) as consumer:
                message = await consumer.get(timeout=10)
                assert message is not None
                await message.ack()
                v091 = {"message": message_names(message), "consumer": public(consumer)}
        async with (
            amqp_asyncio.connect(embedded_url, protocol="0-10") as c10,
            c10.session() as s,
        ):
            queue = f"parity-{uuid.uuid4().hex[:8]}"
            await s.queue_declare(queue, auto_delete=True)
            await s.transfer("", b"b", routing_key=queue, properties=SENT)
            subscription = await s.subscribe(queue)
            received = await subscription.get(timeout=10)
            assert received is not None
            assert received.properties == SENT
            received.accept()
            assert await subscription.get(timeout=0.05) is None  # a timeout: no error
            v010 = {"message": message_names(received), "consumer": public(subscription)}
            await s.queue_delete(queue)
        return v091, v010

    check("amqp_asyncio", *asyncio.run(main()))


def test_blocking(embedded_url: str) -> None:
    with amqp_blocking.connect(embedded_url) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        ch.basic_publish(b"a", routing_key=queue)
        with ch.basic_consume(queue) as consumer:
            message = consumer.get(timeout=10)
            assert message is not None
            message.ack()
            v091 = {"message": message_names(message), "consumer": public(consumer)}
    with amqp_blocking.connect(embedded_url, protocol="0-10") as c10, c10.session() as s:
        queue = f"parity-{uuid.uuid4().hex[:8]}"
        s.queue_declare(queue, auto_delete=True)
        s.transfer("", b"b", routing_key=queue, properties=SENT)
        subscription = s.subscribe(queue)
        received = subscription.get(timeout=10)
        assert received is not None
        assert received.properties == SENT
        received.accept()
        with pytest.raises(TimeoutError):  # blocking's 0-10 get: see the docs' table
            subscription.get(timeout=0.05)
        v010 = {"message": message_names(received), "consumer": public(subscription)}
        s.queue_delete(queue)
    check("amqp_blocking", v091, v010)
