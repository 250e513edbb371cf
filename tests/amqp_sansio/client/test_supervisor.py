"""Recovery's decisions, tested once, in the client layer (issue 28): the sans-IO
:class:`~amqp_sansio.client.RecoverySupervisor` on a fake clock, with a scripted lost
connection (backoff, give-up, endpoint order, events and log texts, what waits), and driving a
real router against the embedded broker's model (restore order, unknown outcomes, deliveries
dropped at the loss, a delivery of the live connection never stale)."""

from __future__ import annotations

import itertools
import logging
import random
from typing import TYPE_CHECKING, Final, final

import pytest

from amqp_broker import memory_server
from amqp_sansio import (
    BasicGet,
    BasicProperties,
    BasicPublish,
    BasicQos,
    ConfirmSelect,
    MessageReceived,
    PublishConfirmed,
    QueueDeclare,
)
from amqp_sansio.client import (
    AMQPError,
    Connect,
    ConnectionClosedError,
    ConnectionLostError,
    ConnectionParameters,
    GiveUp,
    HeartbeatTimeoutError,
    Recovered,
    RecoveryAttempt,
    RecoveryEvent,
    RecoveryGaveUp,
    RecoveryLost,
    RecoveryPolicy,
    RecoveryState,
    RecoveryStep,
    RecoverySupervisor,
    Resume,
    StaleDeliveryError,
    TopologyRecoveryError,
    Wait,
    error_for_close,
)
from amqp_sansio.testing import MemoryConnection

if TYPE_CHECKING:
    from collections.abc import Mapping

PARAMS: Final = ConnectionParameters(host="a", port=5672, connection_timeout=7)
LOG: Final = logging.getLogger("tests.supervisor")


@final
class ScriptedRestore:
    """A restoration that is done after *steps* events."""

    def __init__(self, lost: ScriptedLost, steps: int) -> None:
        self.lost = lost
        self.left = steps
        self.started = False

    @property
    def done(self) -> bool:
        return self.started and self.left == 0

    def start(self) -> None:
        self.started = True

    def handle(self, event: object) -> bool:
        if isinstance(event, AMQPError):
            raise event
        self.left -= 1
        return True

    def channels(self) -> Mapping[int, str]:
        return {1: "new channel 1"}

    def resume(self) -> tuple[int, int]:
        self.lost.resumed += 1
        return 2, 3  # republished, unknown

    @property
    def renamed(self) -> Mapping[str, str]:
        return {"amq.gen-old": "amq.gen-new"}

    @property
    def skipped(self) -> tuple[RecoveryStep, ...]:
        return ()


@final
class ScriptedLost:
    """A lost connection with *unknown* outcomes and *buffered* deliveries."""

    def __init__(self, unknown: int = 0, buffered: int = 0, steps: int = 1) -> None:
        self.unknown = unknown
        self.buffered = buffered
        self.steps = steps
        self.resumed = 0
        self.gave_up: AMQPError | None = None

    def drop_unhanded(self) -> int:
        dropped, self.buffered = self.buffered, 0
        return dropped

    def restoration(self, new: str, policy: RecoveryPolicy) -> ScriptedRestore:
        assert new == "new connection"
        return ScriptedRestore(self, self.steps)

    def give_up(self, cause: AMQPError) -> None:
        self.gave_up = cause


def state(sup: RecoverySupervisor[str, str]) -> RecoveryState:
    """A call, so mypy does not narrow one reading of the property to the next."""
    return sup.state


def supervisor(policy: RecoveryPolicy, events: list[RecoveryEvent]) -> RecoverySupervisor[str, str]:
    sup: RecoverySupervisor[str, str] = RecoverySupervisor(
        PARAMS, policy, emit=events.append, logger=LOG, rng=random.Random(0)
    )
    sup.opened()
    return sup


LOST: Final = ConnectionLostError("the link went")


def test_the_loss_then_attempts_on_the_backoff_schedule_then_recovered() -> None:
    events: list[RecoveryEvent] = []
    policy = RecoveryPolicy(initial_delay=1, multiplier=2, max_delay=3, jitter=0)
    sup = supervisor(policy, events)
    assert state(sup) is RecoveryState.OPEN
    assert sup.next_action(0) is None
    lost = ScriptedLost(unknown=4, buffered=5)
    sup.lost(lost, LOST, now=100)
    assert state(sup) is RecoveryState.RECOVERING
    assert sup.epoch.current == 1
    assert events == [RecoveryLost(cause=LOST)]
    assert lost.buffered == 0  # dropped at the loss, never handed out
    # The first attempt at once, then 1, 2, 3, 3 seconds after each failure.
    starts = []
    now = 100.0
    for _ in range(5):
        action = sup.next_action(now)
        while isinstance(action, Wait):
            assert sup.next_deadline() == action.until
            now = action.until
            action = sup.next_action(now)
        assert isinstance(action, Connect)
        assert action.deadline == now + 7
        assert action.params is PARAMS
        starts.append(now)
        sup.attempt_failed(ConnectionRefusedError("refused"), now)
    assert [b - a for a, b in itertools.pairwise(starts)] == [1, 2, 3, 3]
    attempts = [e for e in events if isinstance(e, RecoveryAttempt)]
    assert [(a.attempt, a.next_delay) for a in attempts] == [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 3),
        (5, 3),
    ]
    # The sixth connects and restores: the channels move, then Recovered says what happened.
    now += 3
    action = sup.next_action(now)
    assert isinstance(action, Connect)
    assert action.attempt == 6
    sup.connected("new connection")
    assert sup.restoring
    assert sup.handle("the restore's reply")  # taken: its one step is answered
    assert not sup.restoring
    resume = sup.next_action(now)
    assert isinstance(resume, Resume)
    assert resume.channels == {1: "new channel 1"}
    recovered = sup.resume()
    assert recovered == Recovered(
        attempt=6,
        epoch=1,
        renamed_queues={"amq.gen-old": "amq.gen-new"},
        unknown_publishes=4 + 3,
        republished=2,
        dropped_deliveries=5,
        address="a:5672",  # the node it is on now
    )
    assert events[-1] == recovered
    assert state(sup) is RecoveryState.OPEN
    assert lost.resumed == 1
    assert sup.next_action(now) is None


def test_limits_and_refusals_give_up() -> None:
    cases: list[tuple[RecoveryPolicy, BaseException, int]] = [
        (RecoveryPolicy(max_attempts=2, jitter=0), ConnectionRefusedError("no"), 2),
        (RecoveryPolicy(max_duration=2.5, initial_delay=1, multiplier=1, jitter=0), LOST, 4),
        (RecoveryPolicy(), error_for_close(403, "ACCESS_REFUSED", connection=True), 1),
        (RecoveryPolicy(), error_for_close(530, "NOT_ALLOWED", connection=True), 1),
        (
            RecoveryPolicy(on_topology_error="give_up"),
            TopologyRecoveryError(
                RecoveryStep(kind="queue", channel=None, name="q", method=QueueDeclare(queue="q")),
                error_for_close(406, "PRECONDITION_FAILED", connection=False),
            ),
            1,
        ),
    ]
    for policy, error, attempts in cases:
        events: list[RecoveryEvent] = []
        sup = supervisor(policy, events)
        lost = ScriptedLost()
        sup.lost(lost, LOST, now=0)
        now = 0.0
        while True:
            action = sup.next_action(now)
            if isinstance(action, Wait):
                now = action.until
                continue
            if isinstance(action, GiveUp):
                break
            assert isinstance(action, Connect)
            sup.attempt_failed(error, now)
        assert action.cause is LOST
        assert lost.gave_up is LOST  # the consumers end with why the connection went
        assert events[-1] == RecoveryGaveUp(attempts=attempts, cause=error)
        assert state(sup) is RecoveryState.CLOSED
        assert sup.next_action(now) is None


def test_a_topology_refusal_is_retried_by_default() -> None:
    events: list[RecoveryEvent] = []
    sup = supervisor(RecoveryPolicy(jitter=0), events)
    sup.lost(ScriptedLost(), LOST, now=0)
    assert isinstance(sup.next_action(0), Connect)
    sup.connected("new connection")
    refused = TopologyRecoveryError(
        RecoveryStep(kind="queue", channel=None, name="q", method=QueueDeclare(queue="q")),
        error_for_close(405, "RESOURCE_LOCKED", connection=False),
    )
    with pytest.raises(TopologyRecoveryError):
        sup.handle(refused)
    sup.attempt_failed(refused, 0)
    # The attempt's connection had opened: what it delivered is stale too.
    assert sup.epoch.current == 2
    assert isinstance(sup.next_action(0), Wait)


def test_endpoints_in_turn() -> None:
    policy = RecoveryPolicy(
        endpoints=("amqp://u:secret@b:1/", "amqp://c:2/"), initial_delay=0, jitter=0
    )
    assert "secret" not in repr(policy)
    events: list[RecoveryEvent] = []
    sup = supervisor(policy, events)
    sup.lost(ScriptedLost(), LOST, now=0)
    hosts = []
    for _ in range(3):
        action = sup.next_action(0)
        assert isinstance(action, Connect)
        hosts.append(action.params.address)
        sup.attempt_failed(ConnectionRefusedError("no"), 0)
    assert hosts == ["b:1", "c:2", "b:1"]
    assert [e.url for e in events if isinstance(e, RecoveryAttempt)] == hosts
    assert all("secret" not in repr(e) for e in events)


def test_what_a_loss_triggers_and_what_waits() -> None:
    events: list[RecoveryEvent] = []
    sup = supervisor(RecoveryPolicy(publish_buffer=10), events)
    assert sup.recover_on(LOST)
    assert sup.recover_on(HeartbeatTimeoutError("a:5672", 1))  # a silent peer is a loss too
    assert sup.recover_on(error_for_close(320, "CONNECTION_FORCED", connection=True))
    assert not sup.recover_on(error_for_close(403, "ACCESS_REFUSED", connection=True))
    sup.lost(ScriptedLost(), LOST, now=0)
    assert not sup.recover_on(LOST)  # already lost: the loss stands
    sup.admit(6)
    with pytest.raises(ConnectionLostError, match="publish_buffer is full"):
        sup.admit(6)
    sup.release(6)
    sup.admit(6)
    assert isinstance(sup.next_action(0), Connect)
    assert sup.recover_on(error_for_close(403, "ACCESS_REFUSED", connection=True))  # attempt's
    assert "did not recover within 10.0 s" in str(sup.wait_expired())
    assert "took over 7 s" in str(sup.timeout_error())
    nowait = supervisor(RecoveryPolicy(publish_wait=0), [])
    nowait.lost(ScriptedLost(), LOST, now=0)
    with pytest.raises(ConnectionLostError, match="publish_wait is 0"):
        nowait.admit()
    no_policy: RecoverySupervisor[str, str] = RecoverySupervisor(
        PARAMS, None, emit=events.append, logger=LOG
    )
    assert not no_policy.recover_on(LOST)
    never_opened: RecoverySupervisor[str, str] = RecoverySupervisor(
        PARAMS, RecoveryPolicy(), emit=events.append, logger=LOG
    )
    assert not never_opened.recover_on(LOST)  # a failing first connect raises, as before


def test_closing_while_recovering_stops_it() -> None:
    events: list[RecoveryEvent] = []
    sup = supervisor(RecoveryPolicy(), events)
    lost = ScriptedLost()
    sup.lost(lost, LOST, now=0)
    assert sup.close()
    assert isinstance(lost.gave_up, ConnectionClosedError)
    assert state(sup) is RecoveryState.CLOSED
    assert sup.next_action(0) is None
    assert not sup.recover_on(LOST)
    assert [type(e) for e in events] == [RecoveryLost]
    sup.attempt_failed(LOST, 0)  # an attempt that ends after the close is ignored


def test_the_log_says_the_same_words_for_every_adapter(caplog: pytest.LogCaptureFixture) -> None:
    sup = supervisor(RecoveryPolicy(max_attempts=2, jitter=0), [])
    with caplog.at_level(logging.INFO, logger="tests.supervisor"):
        sup.lost(ScriptedLost(), LOST, now=0)
        for now in (100, 101):
            action = sup.next_action(now)
            assert isinstance(action, Connect)
            sup.attempt_failed(ConnectionRefusedError("refused"), now)
    assert caplog.messages == [
        "lost the connection to a:5672 (the link went): recovering",
        "recovery attempt 1 to a:5672 failed: refused",
        "recovery attempt 2 to a:5672 failed: refused",
        "gave up recovering the connection to a:5672 after 2 attempts: refused",
    ]


# --- driving a real router against the embedded broker's model --------------------------------


def test_a_backlog_recovers_with_no_delivery_refused_and_none_left() -> None:
    """The issue's reproduction: 300 messages, prefetch 50, 5 taken and acked, the connection
    cut: after recovery every delivery of the new connection is acked (none refused as
    stale), the consumer never stalls, and the queue ends empty."""
    server = memory_server()
    conn = MemoryConnection(server)
    conn.open()
    ch = conn.open_channel()
    conn.send(ch, QueueDeclare(queue="backlog", durable=True))
    conn.send(ch, ConfirmSelect())
    for n in range(300):
        conn.publish(ch, BasicPublish(routing_key="backlog"), BasicProperties(), b"%d" % n)
    conn.send(ch, BasicQos(prefetch_count=50))
    conn.pump()
    consumer = conn.consume(ch, "backlog", "c")
    conn.pump()
    assert consumer.buffered == 50
    for _ in range(5):
        message = consumer.take()
        assert message is not None
        assert message.ack()
    held = consumer.take()  # in the application's hands at the loss
    assert held is not None
    conn.pump()
    buffered = consumer.buffered
    assert buffered == 50 - 6 + 5  # the broker refilled what was acked
    conn.cut()
    recovered = conn.recover()
    assert recovered.dropped_deliveries == buffered
    with pytest.raises(StaleDeliveryError):
        held.ack()
    acked = 5
    while True:
        conn.pump()
        message = consumer.take()
        if message is None:
            break
        assert message.epoch == conn.epoch == 1
        assert message.ack()  # never refused: it came on the live connection
        acked += 1
    assert acked == 300
    assert server.broker.vhosts["/"].queues["backlog"].message_count == 0
    assert conn.refused_settles == 1


@pytest.mark.parametrize("republish", [True, False], ids=["republish", "unknown"])
def test_publishes_pending_at_the_loss_are_republished_in_order_or_unknown(
    republish: bool,
) -> None:
    """``republish_unknown``: the publishes left unconfirmed by the loss go out again on the
    new connection, oldest first and once, or end unknown and are not sent."""
    server = memory_server()
    conn = MemoryConnection(server, policy=RecoveryPolicy(jitter=0, republish_unknown=republish))
    conn.open()
    ch = conn.open_channel()
    conn.send(ch, QueueDeclare(queue="pending"))
    conn.send(ch, ConfirmSelect())
    conn.publish(ch, BasicPublish(routing_key="pending"), BasicProperties(), b"0")
    assert any(isinstance(e, PublishConfirmed) for e in conn.pump())
    for n in range(1, 21):  # cut before they leave: the broker never sees them
        conn.publish(ch, BasicPublish(routing_key="pending"), BasicProperties(), b"%d" % n)
    conn.cut()
    recovered = conn.recover()
    assert (recovered.republished, recovered.unknown_publishes) == (
        (20, 0) if republish else (0, 20)
    )
    confirmed = [
        n for e in conn.pump() if isinstance(e, PublishConfirmed) for n in e.publish_numbers
    ]
    assert confirmed == (list(range(1, 21)) if republish else [])  # the new channel's numbers
    bodies = []
    while True:
        conn.send(ch, BasicGet(queue="pending", no_ack=True))
        got = [e for e in conn.pump() if isinstance(e, MessageReceived)]
        if not got:
            break
        bodies.append(bytes(got[0].body))
    assert bodies == [b"0"] + ([b"%d" % n for n in range(1, 21)] if republish else [])
