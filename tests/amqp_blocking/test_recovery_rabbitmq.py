"""amqp_blocking's recovery against RabbitMQ: the connection, found by its name, is closed with
``rabbitmqctl close_connection`` (320) again and again during pipelined confirmed publishing and
consuming. No confirmed message is lost, the consumer resumes on every new connection, and the
publishes whose outcome the closes made unknown are counted and published again."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Final

import pytest

import amqp_blocking
from amqp_blocking import (
    ConnectionForced,
    PublishOutcomeUnknownError,
    Recovered,
    RecoveryLost,
    RecoveryPolicy,
    StaleDeliveryError,
)

from ..support.rabbitmqctl import connection_pid, rabbitmqctl
from ..support.scenarios import unique

if TYPE_CHECKING:
    from amqp_blocking import PublishTicket

pytestmark = pytest.mark.rabbitmq

#: Forced closes: each costs two rabbitmqctl calls (find the connection, close it), about a
#: second of CPU each.
CLOSES: Final = 20
MESSAGES: Final = 2000
WAIT: Final = 60.0


def test_forced_closes_lose_no_confirmed_message(rabbitmq_url: str) -> None:
    name = unique("recovery")
    queue = unique("recovery-q")
    policy = RecoveryPolicy(initial_delay=0.05, multiplier=1, jitter=0, max_duration=60)
    received: set[int] = set()
    stale = [0]
    recoveries: list[Recovered] = []
    progress = [0]
    with amqp_blocking.connect(rabbitmq_url, connection_name=name, recovery=policy) as conn:
        events = conn.recovery_events()
        pub_ch = conn.channel()
        sub_ch = conn.channel()
        pub_ch.queue_declare(queue)
        sub_ch.basic_qos(100)
        consumer = sub_ch.basic_consume(queue)

        def consume() -> None:
            while (message := consumer.get(WAIT)) is not None:
                received.add(int(message.body))
                try:
                    message.ack()
                except StaleDeliveryError:
                    stale[0] += 1  # handed out before a close: the broker redelivers it

        def close_repeatedly() -> None:
            for _ in range(CLOSES):
                mark = progress[0]
                while progress[0] < mark + MESSAGES // (CLOSES * 2):
                    time.sleep(0.01)
                rabbitmqctl("close_connection", connection_pid(name), "test")
                lost = events.get(WAIT)
                assert isinstance(lost, RecoveryLost)
                assert isinstance(lost.cause, ConnectionForced)
                recovered = events.get(WAIT)
                assert isinstance(recovered, Recovered), recovered
                recoveries.append(recovered)

        consuming = threading.Thread(target=consume, daemon=True)
        consuming.start()
        closer = threading.Thread(target=close_repeatedly, daemon=True)
        closer.start()
        confirmed: set[int] = set()
        unknown = 0
        pending = list(range(MESSAGES))
        with pub_ch.publisher(window=50) as publisher:
            while pending:
                tickets: list[tuple[int, PublishTicket]] = []
                for ident in pending:
                    # Each ticket carries its outcome: the publisher's kept copies are
                    # dropped, or a close with a full window of unknown outcomes in flight
                    # would pile up `window` of them and the next publish would raise them.
                    publisher.take_failures()
                    tickets.append((ident, publisher.publish(b"%d" % ident, routing_key=queue)))
                    progress[0] += 1
                publisher.wait_for_confirms(WAIT)
                pending = []
                for ident, ticket in tickets:
                    if ticket.error is None:
                        confirmed.add(ident)
                    else:
                        assert isinstance(ticket.error, PublishOutcomeUnknownError), ticket.error
                        unknown += 1
                        pending.append(ident)  # at least once: publish it again
                publisher.take_failures()
                if not pending and closer.is_alive():
                    pending = [MESSAGES + len(confirmed)]  # keep traffic until the closes end
        closer.join(WAIT)
        assert len(recoveries) == CLOSES
        assert publisher.unknown == unknown
        assert [r.epoch for r in recoveries] == list(range(1, CLOSES + 1))
        assert sum(r.unknown_publishes for r in recoveries) == unknown
        deadline = time.monotonic() + WAIT
        while not confirmed <= received and time.monotonic() < deadline:
            time.sleep(0.05)
        assert confirmed <= received
        consumer.close()
        pub_ch.queue_delete(queue)
    consuming.join(WAIT)
    assert set(range(MESSAGES)) <= confirmed
    print(f"{CLOSES} forced closes: {unknown} unknown outcomes republished, {stale[0]} stale acks")
