"""Server role: checking PLAIN and AMQPLAIN credentials with the core's helpers, on responses a
real client core writes."""

from __future__ import annotations

import pytest

from amqp_sansio import (
    AuthenticationRequested,
    ConnectionConfig,
    ConnectionState,
    check_credentials,
    parse_credentials,
)
from amqp_sansio.testing import ConnectionPair

USERS = {"guest": "guest", "alice": "s3cret"}


@pytest.mark.parametrize(
    ("mechanism", "response", "expected"),
    [
        ("PLAIN", b"\0guest\0guest", ("guest", "guest")),
        ("PLAIN", b"authz\0alice\0pw", ("alice", "pw")),
        ("PLAIN", b"guest\0guest", None),
        ("PLAIN", b"\0\xff\0x", None),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01a\x08PASSWORDS\x00\x00\x00\x01b", ("a", "b")),
        ("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x01a", None),
        ("AMQPLAIN", b"\x05LOGINS\xff", None),
        ("EXTERNAL", b"", None),
    ],
)
def test_parse_credentials(
    mechanism: str, response: bytes, expected: tuple[str, str] | None
) -> None:
    assert parse_credentials(mechanism, response) == expected


def _requested(username: str, password: str, mechanism: str) -> AuthenticationRequested:
    config = ConnectionConfig(username=username, password=password, sasl_mechanism=mechanism)
    pair = ConnectionPair(client_config=config)
    pair.transfer(pair.client)  # the protocol header: the server core answers with start
    pair.transfer(pair.server)  # the client core answers with start-ok
    [event] = pair.transfer(pair.client)
    assert isinstance(event, AuthenticationRequested)
    return event


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_check_credentials_on_what_a_client_sends(mechanism: str) -> None:
    assert check_credentials(_requested("alice", "s3cret", mechanism), USERS) == "alice"
    assert check_credentials(_requested("alice", "guest", mechanism), USERS) is None
    assert check_credentials(_requested("mallory", "s3cret", mechanism), USERS) is None
    assert check_credentials(_requested("alice", "s3cret", mechanism), {}) is None


def test_check_credentials_then_accept_or_refuse() -> None:
    config = ConnectionConfig(username="guest", password="wrong")
    pair = ConnectionPair(client_config=config)
    pair.transfer(pair.client)
    pair.transfer(pair.server)
    [event] = pair.transfer(pair.client)
    assert isinstance(event, AuthenticationRequested)
    assert check_credentials(event, USERS) is None
    pair.server.refuse_authentication("Login was refused")
    pair.transfer(pair.server)
    assert pair.client.state is not ConnectionState.OPEN
