"""One checked publish path for every protocol family (issue 29): a 0-8, 0-9, 0-9-1
``basic.publish`` and a 0-10 ``message.transfer`` meet the same checks of the model (write
permission, the exchange's existence, internal exchanges, the ``user-id`` property) and the
same routing (alternate exchanges, ``reject-publish``), over sockets to one embedded broker.
A seeded random sweep then sends the same publishes through every protocol and compares the
answers."""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
import amqp_broker
from amqp_broker import Permission, User
from amqp_sansio import BasicProperties
from amqp_sansio.client import ChannelClosedError
from amqp_sansio.v0_10.client import ExecutionError, Properties

if TYPE_CHECKING:
    from collections.abc import Iterator

PROTOCOLS: Final = ("0-9-1", "0-9", "0-8", "0-10")
#: A user who may write only to exchanges named ``open-...`` (and the default exchange).
LIMITED: Final = User("limited", permissions={"/": Permission(".*", "^open-|^$", ".*")})


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def broker_url() -> Iterator[str]:
    with amqp_broker.run_in_thread(users={"guest": "guest", "limited": LIMITED}) as url:
        yield url


def _url(url: str, user: str) -> str:
    return url.replace("guest:guest", f"{user}:{user}" if user == "limited" else "guest:guest")


def publish(
    url: str,
    protocol: str,
    exchange: str,
    routing_key: str,
    *,
    user: str = "guest",
    user_id: str | None = None,
    no_local_queue: str | None = None,
) -> int | None:
    """Publish one message by *protocol*; the refusal's reply code, or None when accepted.
    With *no_local_queue* the publishing connection first declares that exclusive queue
    with qpidd's ``no-local`` argument (the case that once bypassed the model's checks)."""
    url = _url(url, user)
    if protocol == "0-10":
        with amqp_blocking.connect_0_10(url) as conn, conn.session() as session:
            if no_local_queue is not None:
                session.queue_declare(
                    no_local_queue, exclusive=True, auto_delete=True, arguments={"no-local": True}
                )
            try:
                session.transfer(
                    exchange, b"m", routing_key=routing_key, properties=Properties(user_id=user_id)
                )
            except ExecutionError as exc:
                return exc.error_code
            return None
    with amqp_blocking.connect(f"{url}?protocol={protocol}") as connection:
        channel = connection.channel()
        if no_local_queue is not None:
            # an int: 0-8 and 0-9 tables have no bool
            channel.queue_declare(no_local_queue, exclusive=True, arguments={"no-local": 1})
        try:
            channel.basic_publish(
                b"m",
                exchange=exchange,
                routing_key=routing_key,
                properties=BasicProperties(user_id=user_id),
            )
            channel.basic_qos(prefetch_count=0)  # a round trip: a refusal closes the channel
        except ChannelClosedError as exc:
            return exc.reply_code
        return None


@pytest.fixture
def admin(broker_url: str) -> Iterator[amqp_blocking.Channel]:
    with amqp_blocking.connect(broker_url) as conn:
        yield conn.channel()


def _count(channel: amqp_blocking.Channel, queue: str) -> int:
    return channel.queue_declare(queue, passive=True).message_count


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_internal_exchange_is_refused(
    broker_url: str, admin: amqp_blocking.Channel, protocol: str
) -> None:
    internal, queue = _unique("internal"), _unique("q")
    admin.exchange_declare(internal, "fanout", internal=True)
    admin.queue_declare(queue)
    admin.queue_bind(queue, internal)
    assert publish(broker_url, protocol, internal, "") == 403
    # holding an exclusive no-local queue changes nothing (0-10 once routed by itself then)
    no_local = _unique("nl")
    assert publish(broker_url, protocol, internal, "", no_local_queue=no_local) == 403
    assert _count(admin, queue) == 0
    admin.queue_delete(queue)
    admin.exchange_delete(internal)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_missing_exchange_is_404(broker_url: str, protocol: str) -> None:
    assert publish(broker_url, protocol, _unique("missing"), "k") == 404


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_write_permission_is_checked(
    broker_url: str, admin: amqp_blocking.Channel, protocol: str
) -> None:
    closed, opened, queue = _unique("closed"), _unique("open"), _unique("q")
    for name in (closed, opened):
        admin.exchange_declare(name, "fanout")
    admin.queue_declare(queue)
    admin.queue_bind(queue, opened)
    admin.queue_bind(queue, closed)
    assert publish(broker_url, protocol, closed, "", user="limited") == 403
    assert publish(broker_url, protocol, opened, "", user="limited") is None
    assert _count(admin, queue) == 1
    admin.queue_delete(queue)
    for name in (closed, opened):
        admin.exchange_delete(name)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_user_id_property_must_name_the_user(
    broker_url: str, admin: amqp_blocking.Channel, protocol: str
) -> None:
    queue = _unique("q")
    admin.queue_declare(queue)
    assert publish(broker_url, protocol, "", queue, user_id="bob") == 406
    assert publish(broker_url, protocol, "", queue, user_id="guest") is None
    assert _count(admin, queue) == 1
    admin.queue_delete(queue)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_alternate_exchange_and_reject_publish_apply(
    broker_url: str, admin: amqp_blocking.Channel, protocol: str
) -> None:
    alt, source, caught, full = _unique("alt"), _unique("src"), _unique("c"), _unique("full")
    admin.exchange_declare(alt, "fanout")
    admin.exchange_declare(source, "direct", arguments={"alternate-exchange": alt})
    admin.queue_declare(caught)
    admin.queue_bind(caught, alt)
    admin.queue_declare(full, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    admin.queue_bind(full, source, "full")
    assert publish(broker_url, protocol, source, "nowhere") is None
    assert publish(broker_url, protocol, source, "full") is None
    assert publish(broker_url, protocol, source, "full") is None  # refused by the queue
    assert (_count(admin, caught), _count(admin, full)) == (1, 1)
    for queue in (caught, full):
        admin.queue_delete(queue)
    for name in (source, alt):
        admin.exchange_delete(name)


def test_random_publishes_meet_the_same_checks_in_every_protocol(
    broker_url: str, admin: amqp_blocking.Channel
) -> None:
    # each case: (exchange kind, user, user-id); every protocol must give the same answer
    internal, closed, opened = _unique("internal"), _unique("closed"), _unique("open")
    admin.exchange_declare(internal, "fanout", internal=True)
    admin.exchange_declare(closed, "fanout")
    admin.exchange_declare(opened, "fanout")
    exchanges = {
        "internal": internal,
        "closed": closed,
        "open": opened,
        "default": "",
        "missing": _unique("missing"),
    }
    rng = random.Random(29)
    answers: dict[tuple[str, str, str | None, bool], set[int | None]] = {}
    for _ in range(12):
        kind = rng.choice(list(exchanges))
        user = rng.choice(["guest", "limited"])
        user_id = rng.choice([None, user, "bob"])
        no_local = rng.random() < 0.5
        seen = {
            publish(
                broker_url,
                protocol,
                exchanges[kind],
                "nowhere",
                user=user,
                user_id=user_id,
                no_local_queue=_unique("nl") if no_local else None,
            )
            for protocol in PROTOCOLS
        }
        answers[kind, user, user_id, no_local] = seen
    assert {case: codes for case, codes in answers.items() if len(codes) != 1} == {}
    for name in (internal, closed, opened):
        admin.exchange_delete(name)
