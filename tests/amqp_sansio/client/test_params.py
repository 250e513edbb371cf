"""ConnectionParameters: RabbitMQ-style URLs, validation, the core config and TLS contexts."""

from __future__ import annotations

import pickle
import re
import ssl

import pytest

from amqp_sansio import ConnectionConfig, ProtocolHeader, ProtocolVersion, header_for
from amqp_sansio.client import (
    DEFAULT_URL,
    ConnectionParameters,
    ProtocolFallback,
    ProtocolVersionRefused,
    RecoveryPolicy,
    connection_parameters,
    wants_0_10,
)

parse = ConnectionParameters.from_url


# --- URLs: the examples of RabbitMQ's URI spec ------------------------------------------------


def test_full_url() -> None:
    params = parse("amqp://user:pass@host:10000/vhost")
    assert (params.username, params.password) == ("user", "pass")
    assert (params.host, params.port, params.virtual_host) == ("host", 10000, "vhost")
    assert not params.tls


def test_percent_decoding_of_user_password_host_and_vhost() -> None:
    params = parse("amqp://user%61:%61pass@ho%61st:10000/v%2fhost")
    assert (params.username, params.password) == ("usera", "apass")
    assert params.host == "hoast"
    assert params.virtual_host == "v/host"


def test_reserved_characters_in_credentials() -> None:
    params = parse("amqp://us%40er:p%3A%2F%40ss@h/")
    assert (params.username, params.password) == ("us@er", "p:/@ss")


def test_everything_absent_uses_defaults() -> None:
    params = parse("amqp://")
    assert params == ConnectionParameters()
    assert (params.host, params.port, params.virtual_host) == ("127.0.0.1", 5672, "/")
    assert (params.username, params.password) == ("guest", "guest")


def test_empty_user_and_password() -> None:
    params = parse("amqp://:@host")
    assert (params.username, params.password) == ("", "")


def test_user_without_password_keeps_the_default_password() -> None:
    params = parse("amqp://user@host")
    assert (params.username, params.password) == ("user", "guest")


def test_port_without_host() -> None:
    params = parse("amqp://:10000")
    assert (params.host, params.port) == ("127.0.0.1", 10000)


def test_vhost_without_host() -> None:
    assert parse("amqp:///vhost").virtual_host == "vhost"


@pytest.mark.parametrize(
    ("url", "vhost"),
    [
        ("amqp://host", "/"),
        ("amqp://host/", "/"),  # pika/aio-pika's reading; the URI spec would say ""
        ("amqp://host/%2F", "/"),
        ("amqp://host/%2f", "/"),
        ("amqp://host/%2Fprod", "/prod"),
        ("amqp://host/prod", "prod"),
        ("amqp://host/a%20b", "a b"),
    ],
)
def test_virtual_host(url: str, vhost: str) -> None:
    assert parse(url).virtual_host == vhost


def test_unescaped_slash_in_vhost_is_refused() -> None:
    with pytest.raises(ValueError, match=r"virtual_host: .*%2F"):
        parse("amqp://host/a/b")


def test_amqps_default_port_and_tls() -> None:
    params = parse("amqps://host")
    assert params.tls
    assert params.port == 5671
    assert parse("amqps://host:5999").port == 5999
    assert ConnectionParameters(tls=True).port == 5671


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("amqp://[::1]", "::1", 5672),
        ("amqp://[::1]:5673/", "::1", 5673),
        ("amqp://user:pw@[fe80::1%25eth0]:5673/", "fe80::1%eth0", 5673),
    ],
)
def test_ipv6_literal_host(url: str, host: str, port: int) -> None:
    params = parse(url)
    assert (params.host, params.port) == (host, port)
    assert params.address == f"[{host}]:{port}"


def test_scheme_is_case_insensitive() -> None:
    assert parse("AMQPS://host").tls


# --- Query parameters -------------------------------------------------------------------------


def test_query_parameters() -> None:
    params = parse(
        "amqp://h/?heartbeat=5&frame_max=8192&channel_max=10&connection_timeout=2500"
        "&auth_mechanism=amqplain&name=orders-service"
    )
    assert params.heartbeat == 5
    assert params.frame_max == 8192
    assert params.channel_max == 10
    assert params.connection_timeout == 2.5  # milliseconds in the URL, seconds here
    assert params.auth_mechanism == "AMQPLAIN"
    assert params.connection_name == "orders-service"


def test_tls_query_parameters() -> None:
    params = parse(
        "amqps://h/?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem"
        "&server_name_indication=broker.example&verify=verify_none&auth_mechanism=external"
    )
    assert (params.cafile, params.certfile, params.keyfile) == ("/ca.pem", "/c.pem", "/k.pem")
    assert params.server_hostname == "broker.example"
    assert params.tls_server_hostname == "broker.example"
    assert not params.verify
    assert params.auth_mechanism == "EXTERNAL"


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("amqp://h/?colour=blue", "colour"),
        ("amqp://h/?heartbeat=often", "heartbeat"),
        ("amqp://h/?heartbeat=-1", "heartbeat"),
        ("amqp://h/?heartbeat=70000", "heartbeat"),
        ("amqp://h/?frame_max=100", "frame_max"),
        ("amqp://h/?channel_max=x", "channel_max"),
        ("amqp://h/?connection_timeout=0", "connection_timeout"),
        ("amqp://h/?auth_mechanism=kerberos", "auth_mechanism"),
        ("amqp://h/?heartbeat=1&heartbeat=2", "heartbeat"),
        ("amqp://h/?cacertfile=/ca.pem", "cacertfile"),  # TLS options need amqps
        ("amqps://h/?verify=maybe", "verify"),
        ("amqp://h/?name=", "name"),
        ("amqp://h:port/", "port"),
        ("amqp://h:99999/", "port"),
        ("amqp://h:0/", "port"),
        ("http://h/", "scheme"),
        ("amqp://h/#frag", "fragment"),
        ("amqp://[::1/", "url"),
    ],
)
def test_bad_urls_name_the_culprit(url: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse(url)


def test_bad_port_message_hides_the_password() -> None:
    with pytest.raises(ValueError, match="port") as info:
        parse("amqp://user:secret@h:port/")
    assert "secret" not in str(info.value)


def test_not_a_string() -> None:
    with pytest.raises(TypeError):
        parse(b"amqp://h/")  # type: ignore[arg-type]


# --- Validation, repr, config, TLS ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"port": 0},
        {"port": 70000},
        {"auth_mechanism": "GSSAPI"},
        {"connection_timeout": 0},
        {"connection_timeout": float("inf")},
        {"heartbeat": -1},
        {"frame_max": 10},
    ],
)
def test_constructor_validates(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ConnectionParameters(**kwargs)  # type: ignore[arg-type]


def test_repr_never_shows_the_password() -> None:
    params = parse("amqp://user:s3cr3t-pw@h/")
    assert "s3cr3t-pw" not in repr(params)
    assert "user" in repr(params)


def test_to_config() -> None:
    params = parse("amqp://u:p@h/v?heartbeat=7&frame_max=8192&channel_max=9&name=n")
    config = params.to_config()
    assert isinstance(config, ConnectionConfig)
    assert (config.username, config.password, config.virtual_host) == ("u", "p", "v")
    assert (config.heartbeat, config.frame_max, config.channel_max) == (7, 8192, 9)
    assert config.connection_name == "n"
    assert config.sasl_mechanism == "PLAIN"
    assert config.sasl_response is None


def test_to_config_external_sends_an_empty_response() -> None:
    config = parse("amqps://h/?auth_mechanism=external").to_config()
    assert config.sasl_mechanism == "EXTERNAL"
    assert config.sasl_response == b""


def test_ssl_context() -> None:
    assert parse("amqp://h/").ssl_context() is None
    context = parse("amqps://h/").ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname
    relaxed = parse("amqps://h/?verify=verify_none").ssl_context()
    assert relaxed is not None
    assert relaxed.verify_mode is ssl.CERT_NONE
    assert not relaxed.check_hostname


def test_ssl_context_reports_a_missing_ca_file() -> None:
    with pytest.raises(OSError, match="No such file"):
        parse("amqps://h/?cacertfile=/nonexistent/ca.pem").ssl_context()


def test_default_url() -> None:
    params = parse(DEFAULT_URL)
    assert (params.host, params.port, params.virtual_host) == ("127.0.0.1", 5672, "/")


# --- the protocol version ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["0-9-1", "0-9", "0-8", "auto"])
def test_protocol_query_parameter(name: str) -> None:
    params = parse(f"amqp://h/?protocol={name}&heartbeat=5")
    assert (params.protocol, params.heartbeat) == (name, 5)
    # "auto" is resolved by connect(); the core's config is its first attempt, 0-9-1
    assert params.to_config().protocol.version.value == ("0-9-1" if name == "auto" else name)


def test_protocol_defaults_to_0_9_1_and_takes_a_version() -> None:
    assert parse("amqp://h/").protocol == "0-9-1"
    assert ConnectionParameters(protocol=ProtocolVersion.AMQP_0_8).protocol == "0-8"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "amqp://h/?protocol=1.0",
            "protocol: expected '0-9-1', '0-9', '0-8', '0-10' or 'auto', got '1.0'",
        ),
        ("amqp://h/?protocol=0-9-2", "got '0-9-2'"),
        ("amqp://h/?protocol=AUTO", "got 'AUTO'"),
        ("amqp://h/?protocol=", "got ''"),
        ("amqp://h/?protocol=0-8&protocol=0-9", "protocol: query parameter given more than once"),
    ],
)
def test_bad_protocols_are_named(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(url)


def test_protocol_argument_wins_over_the_url() -> None:
    params = connection_parameters("amqp://h/?protocol=0-8", None, "auto")
    assert params.protocol == "auto"
    assert connection_parameters(params, "n", None).protocol == "auto"
    assert connection_parameters("amqp://h/", None, "0-10").protocol == "0-10"
    # the 0-9 family's loop refuses it: 0-10 connections are another type
    with pytest.raises(ValueError, match=r"connect\(url, protocol='0-10'\)"):
        ProtocolFallback(parse("amqp://h/?protocol=0-10"))
    with pytest.raises(ValueError, match="got 'x'"):
        ConnectionParameters(protocol="x")


def _refused(requested: str, offered: str) -> ProtocolVersionRefused:
    return ProtocolVersionRefused(
        "refused",
        requested=ProtocolVersion(requested),
        offered=ProtocolHeader(header_for(offered)),
    )


def test_fallback_of_one_version_never_retries() -> None:
    fallback = ProtocolFallback(parse("amqp://h/?protocol=0-9"))
    assert fallback.params.protocol == "0-9"
    assert not fallback.retry(_refused("0-9", "0-8"))


def test_fallback_of_auto_follows_the_server() -> None:
    fallback = ProtocolFallback(parse("amqp://h/?protocol=auto&name=app"))
    assert fallback.params.protocol == "0-9-1"
    assert fallback.params.connection_name == "app"
    assert fallback.retry(_refused("0-9-1", "0-8"))  # the server speaks 0-8: that next
    assert str(fallback.params.protocol) == "0-8"
    assert not fallback.retry(_refused("0-8", "0-8"))  # refused what it offered: give up
    assert fallback.tried == [ProtocolVersion.AMQP_0_9_1, ProtocolVersion.AMQP_0_8]


def test_fallback_of_auto_without_a_useful_answer_tries_each_version() -> None:
    fallback = ProtocolFallback(parse("amqp://h/?protocol=auto"))
    seen = [fallback.params.protocol]
    while fallback.retry(_refused(seen[-1], "1.0")):
        seen.append(fallback.params.protocol)
    assert seen == ["0-9-1", "0-9", "0-8"]


def test_fallback_to_0_10_is_the_adapters_clear_error() -> None:
    fallback = ProtocolFallback(parse("amqp://h/?protocol=auto"))
    refused = _refused("0-9-1", "0-10")
    with pytest.raises(ValueError, match="the server speaks AMQP 0-10 only") as info:
        fallback.retry(refused)
    assert info.value.__cause__ is refused


def test_refusal_pickles() -> None:
    refused = _refused("0-9-1", "0-8")
    again = pickle.loads(pickle.dumps(refused))
    assert type(again) is ProtocolVersionRefused
    assert (again.requested, again.offered, again.reply_code) == (
        refused.requested,
        refused.offered,
        540,
    )


def test_a_0_10_connect_refuses_the_0_9_family_s_options() -> None:
    assert not wants_0_10(None)
    assert not wants_0_10("0-9-1", recovery=RecoveryPolicy())
    assert wants_0_10("0-10")
    assert wants_0_10(ProtocolVersion.AMQP_0_10)
    assert wants_0_10("0-10", recovery=RecoveryPolicy())  # issue 28: 0-10 recovers too
    with pytest.raises(ValueError, match="OpenTelemetry instruments AMQP 0-9-1"):
        wants_0_10("0-10", tracer_provider=object())
    with pytest.raises(ValueError, match="OpenTelemetry instruments AMQP 0-9-1"):
        wants_0_10("0-10", meter_provider=object())
