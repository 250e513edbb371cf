"""The 0-10 fuzz property with a fixed budget (``fuzz/fuzz_connection_0_10.py`` runs it longer):
mutated conversations and random octets, for both roles, whole or in pieces, with or without
an end of stream, give events or a RemoteProtocolError and nothing else."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqp_sansio.v0_10 import ConnectionClosed, ConnectionOpened, MessageReceived, Role
from tests.amqp_sansio.v0_10.fuzzing import corpus, mutate, random_input, replay

CORPUS = corpus()


@pytest.mark.parametrize(("role", "data"), CORPUS[:2], ids=["server", "client"])
def test_the_recorded_conversations_replay_cleanly(role: Role, data: bytes) -> None:
    whole = replay(role, data, None, eof=False)
    assert whole.error is None
    kinds = {type(e) for e in whole.events}
    assert ConnectionOpened in kinds
    assert ConnectionClosed in kinds
    assert MessageReceived in kinds
    for cut in (random.Random(1), 1):  # random pieces, then one octet at a time
        pieces = replay(role, data, cut, eof=False)
        assert pieces.error is None
        assert [type(e) for e in pieces.events] == [type(e) for e in whole.events]
        assert [getattr(e, "body", None) for e in pieces.events] == [
            getattr(e, "body", None) for e in whole.events
        ]


FUZZ = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@FUZZ
@given(
    st.sampled_from(range(len(CORPUS))),
    st.integers(0, 2**32 - 1),
    st.none() | st.integers(0, 2**32 - 1),
    st.booleans(),
)
def test_mutated_conversations_give_events_or_remote_errors(
    index: int, seed: int, pieces: int | None, eof: bool
) -> None:
    role, data = CORPUS[index]
    mutated = mutate(data, random.Random(seed))
    replay(role, mutated, None if pieces is None else random.Random(pieces), eof=eof)


@FUZZ
@given(st.integers(0, 2**32 - 1), st.none() | st.integers(0, 2**32 - 1), st.booleans())
def test_random_octets_give_events_or_remote_errors(
    seed: int, pieces: int | None, eof: bool
) -> None:
    role, data = random_input(random.Random(seed))
    replay(role, data, None if pieces is None else random.Random(pieces), eof=eof)


@pytest.mark.parametrize("index", [4, 5], ids=["server", "client"])
def test_the_largest_sequence_sets_replay_cleanly(index: int) -> None:
    role, data = CORPUS[index]
    outcome = replay(role, data, random.Random(index), eof=False)
    assert outcome.error is None
    assert ConnectionOpened in {type(e) for e in outcome.events}


def test_bodies_that_never_end_are_refused_past_the_bound() -> None:
    role, data = CORPUS[6]
    outcome = replay(role, data, random.Random(6), eof=True)
    assert outcome.error is not None
    assert outcome.error.reply_code == 320
    assert "bound of 98304" in outcome.error.reply_text
