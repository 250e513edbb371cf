# kombu has inline types but leaves most functions unannotated.
# mypy: disable-error-code="no-untyped-call"
"""kombu's settings as the amqp-sansio transport reads them: what it supports reaches the
connection, anything else is refused with an error that names it, before any socket."""

from __future__ import annotations

import ssl
from decimal import Decimal

import pytest
from kombu.connection import Connection as KombuConnection

import amqp_broker
import amqp_kombu
from amqp_kombu import connection_parameters
from amqp_sansio.client import ConnectionParameters


def _params(**overrides: object) -> tuple[object, ssl.SSLContext | None]:
    settings: dict[str, object] = {
        "hostname": "localhost",
        "port": 5672,
        "userid": "guest",
        "password": "guest",
        "virtual_host": "/",
        "login_method": None,
        "ssl_option": False,
        "connect_timeout": 4,
        "heartbeat": 30,
        "transport_options": {},
    }
    settings.update(overrides)
    return connection_parameters(**settings)  # type: ignore[arg-type]


def test_kombus_settings_become_the_connection_parameters() -> None:
    params, context = _params(
        login_method="amqplain",
        password=lambda: "fresh",  # kombu's credential refresh
        transport_options={"connection_name": "worker-1", "frame_max": 65536, "max_retries": 3},
    )
    assert context is None
    assert (
        params
        == amqp_kombu.connection_parameters(
            hostname="127.0.0.1",
            port=5672,
            userid="guest",
            password="fresh",
            virtual_host="/",
            login_method="AMQPLAIN",
            ssl_option=None,
            connect_timeout=4,
            heartbeat=30,
            transport_options={"connection_name": "worker-1", "frame_max": 65536},
        )[0]
    )


def test_tls_from_kombus_ssl_dict() -> None:
    params, context = _params(
        ssl_option={"cert_reqs": ssl.CERT_NONE, "server_hostname": "broker.example"}
    )
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE
    assert not context.check_hostname
    assert params.tls  # type: ignore[attr-defined]
    assert params.tls_server_hostname == "broker.example"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"transport_options": {"read_timeout": 5}}, "unknown transport option.*read_timeout"),
        ({"login_method": "GSSAPI"}, "login_method 'GSSAPI'"),
        ({"ssl_option": {"ciphers": "ALL"}}, "ssl: unknown key.*ciphers"),
        ({"ssl_option": "yes"}, "ssl: expected a bool"),
        ({"transport_options": {"protocol": "1-0"}}, "protocol: expected"),
        ({"transport_options": {"frame_max": "big"}}, "frame_max: expected an integer"),
    ],
)
def test_what_the_transport_does_not_support_is_refused_by_name(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _params(**overrides)


def test_the_scheme_and_the_module_path_select_the_transport() -> None:
    by_scheme = KombuConnection("amqp-sansio://guest:guest@127.0.0.1:1//")
    by_path = KombuConnection("amqp://127.0.0.1:1//", transport="amqp_kombu:Transport")
    tls = KombuConnection("amqps-sansio://127.0.0.1:1//")
    assert type(by_scheme.transport) is amqp_kombu.Transport
    assert type(by_path.transport) is amqp_kombu.Transport
    assert type(tls.transport) is amqp_kombu.SSLTransport
    assert tls.ssl is True


def test_protocol_0_10_opens_a_0_10_connection_and_refuses_what_0_10_lacks() -> None:
    with amqp_broker.run_in_thread(users={"guest": "guest"}) as url:
        port = ConnectionParameters.from_url(url).port
        with KombuConnection(
            f"amqp-sansio://guest:guest@127.0.0.1:{port}//",
            transport_options={"protocol": "0-10"},
        ) as conn:
            assert isinstance(conn.connection, amqp_kombu.Connection010)
            channel = conn.channel()
            assert isinstance(channel, amqp_kombu.Channel010)
            with pytest.raises(NotImplementedError, match="exchange-to-exchange"):
                channel.exchange_bind("a", "b")
            message = channel.prepare_message(b"x", headers={"price": Decimal("1.5")})
            with pytest.raises(ValueError, match="price: a Decimal"):
                channel.basic_publish(message, routing_key="nowhere")
            assert channel.is_open  # refused before anything was sent
