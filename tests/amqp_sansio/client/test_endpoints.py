"""Several endpoints in the client layer: what connect() walks (in order or shuffled), and the
recovery supervisor walking them from the node after the lost one, logging in with the
current secret. Sans-IO, on a fake clock."""

from __future__ import annotations

import random

import pytest

from amqp_sansio.client import (
    Connect,
    ConnectionParameters,
    RecoveryEvent,
    RecoveryPolicy,
    endpoint_parameters,
)

from .test_supervisor import LOST, ScriptedLost, supervisor

URLS = ("amqp://u:p@a:1/", "amqp://u:p@b:2/", "amqp://u:p@c:3/")


def test_connect_takes_one_endpoint_or_several_in_order_or_shuffled() -> None:
    assert [p.address for p in endpoint_parameters(URLS[0], None)] == ["a:1"]
    given = endpoint_parameters([*URLS, ConnectionParameters(host="d")], "app", "0-9")
    assert [p.address for p in given] == ["a:1", "b:2", "c:3", "d:5672"]
    assert {(p.connection_name, p.protocol) for p in given} == {("app", "0-9")}
    shuffled = endpoint_parameters(URLS, None, order="shuffled", rng=random.Random(3))
    assert sorted(p.address for p in shuffled) == ["a:1", "b:2", "c:3"]
    assert [p.address for p in shuffled] != ["a:1", "b:2", "c:3"]  # this seed moves them
    with pytest.raises(ValueError, match="no endpoint"):
        endpoint_parameters([], None)
    with pytest.raises(TypeError, match="sequence of them"):
        endpoint_parameters(5, None)  # type: ignore[arg-type]


def test_recovery_walks_the_endpoints_from_the_one_after_the_lost_node() -> None:
    events: list[RecoveryEvent] = []
    sup = supervisor(RecoveryPolicy(initial_delay=0, jitter=0), events)
    endpoints = endpoint_parameters(URLS, None)
    sup.endpoints = endpoints
    sup.in_use = endpoints[1]  # the first connect reached b
    sup.secret = "rotated"  # update_secret() succeeded
    sup.lost(ScriptedLost(), LOST, now=0)
    tried = []
    for _ in range(4):
        action = sup.next_action(0)
        assert isinstance(action, Connect)
        tried.append(action.params.address)
        assert action.params.password == "rotated"
        sup.attempt_failed(ConnectionRefusedError("down"), 0)
    assert tried == ["c:3", "a:1", "b:2", "c:3"]  # the lost node last in each round


def test_a_resolver_gives_the_endpoints_connect_walks() -> None:
    calls: list[int] = []

    def resolve() -> list[str]:
        calls.append(1)
        return list(URLS[1:])

    assert [p.address for p in endpoint_parameters(resolve, "app")] == ["b:2", "c:3"]
    assert calls == [1]  # once
    with pytest.raises(TypeError, match="not one str"):
        endpoint_parameters(lambda: URLS[0], None)  # a str is a Sequence[str] to mypy
    with pytest.raises(ValueError, match="no endpoint"):
        endpoint_parameters(list, None)


def test_recovery_asks_the_resolver_again_at_every_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A registry that moves the cluster between rounds, then fails: the round after a failure
    # walks the last endpoints it gave.
    answers: list[list[str] | Exception] = [
        [URLS[1], URLS[2]],
        [URLS[0]],
        RuntimeError("registry down"),
    ]

    def resolve() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    events: list[RecoveryEvent] = []
    sup = supervisor(RecoveryPolicy(initial_delay=0, jitter=0), events)
    sup.endpoints = endpoint_parameters(URLS[0], None)
    sup.in_use = sup.endpoints[0]
    sup.resolver = resolve
    sup.lost(ScriptedLost(), LOST, now=0)
    tried = []
    for _ in range(4):
        action = sup.next_action(0)
        assert isinstance(action, Connect)
        tried.append(action.params.address)
        sup.attempt_failed(ConnectionRefusedError("down"), 0)
    # round 1: b, c (a is gone from the registry); round 2: a; round 3: the registry fails,
    # a again
    assert tried == ["b:2", "c:3", "a:1", "a:1"]
    assert answers == []
    assert "the endpoint resolver failed (RuntimeError: registry down)" in caplog.text
