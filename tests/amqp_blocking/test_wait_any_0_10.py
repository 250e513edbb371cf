"""amqp_blocking.Connection010.wait_any: one thread waits for the next message of several 0-10
subscriptions (on several sessions), which take turns when several are ready."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import amqp_blocking
from amqp_sansio.v0_10.client import NotFoundError
from tests.support.broker_0_10 import brokers_in_thread

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.broker_0_10 import Ports


@pytest.fixture(scope="module")
def ports() -> Iterator[Ports]:
    with brokers_in_thread(1) as found:
        yield found[0]


def test_wait_any_hands_out_the_ready_subscriptions_in_turn(ports: Ports) -> None:
    with (
        amqp_blocking.connect_0_10(ports.url()) as conn,
        conn.session() as first,
        conn.session() as second,
    ):
        first.queue_declare("wait-any-a", exclusive=True, auto_delete=True)
        second.queue_declare("wait-any-b", exclusive=True, auto_delete=True)
        sub_a = first.subscribe("wait-any-a", accept=False)
        sub_b = second.subscribe("wait-any-b", accept=False)
        assert conn.wait_any([sub_a, sub_b], timeout=0) is None  # nothing yet
        for index in range(2):
            first.transfer("", b"a%d" % index, routing_key="wait-any-a")
            second.transfer("", b"b%d" % index, routing_key="wait-any-b")
        order = []
        for _ in range(4):
            ready = conn.wait_any([sub_a, sub_b], timeout=10)
            assert ready is not None
            message = ready.get(timeout=0)
            assert message is not None
            order.append(message.body)
        assert sorted(order) == [b"a0", b"a1", b"b0", b"b1"]
        # Both were ready after the transfers: they took turns, not one then the other.
        assert order[:2] in ([b"a0", b"b0"], [b"b0", b"a0"])
        sub_b.cancel()
        ended = conn.wait_any([sub_b], timeout=10)
        assert ended is sub_b
        assert ended.get(timeout=0) is None  # cancelled: ended, nothing left


def test_wait_any_returns_a_subscription_whose_session_failed(ports: Ports) -> None:
    with (
        amqp_blocking.connect_0_10(ports.url()) as conn,
        conn.session() as session,
        conn.session() as other,
    ):
        session.queue_declare("wait-any-c", exclusive=True, auto_delete=True)
        sub = session.subscribe("wait-any-c")
        with pytest.raises(NotFoundError):
            session.queue_delete("no-such-queue-here", if_empty=True)
        ended = conn.wait_any([sub], timeout=10)
        assert ended is sub
        with pytest.raises(NotFoundError):
            ended.get(timeout=0)
        assert session.is_closed  # the execution.exception ended it
        assert not other.is_closed
        with (
            amqp_blocking.connect_0_10(ports.url()) as stranger,
            pytest.raises(ValueError, match="another connection"),
        ):
            stranger.wait_any([sub], timeout=0)
        other.sync()  # the connection's other sessions carry on
