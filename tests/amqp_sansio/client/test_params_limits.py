"""The inbound message cap in ConnectionParameters and the URL's query, for both families."""

from __future__ import annotations

import pytest

from amqp_sansio.client import DEFAULT_MAX_MESSAGE_SIZE, ConnectionParameters
from amqp_sansio.v0_10.client import config_from


def test_default_is_the_cores_128_mib() -> None:
    params = ConnectionParameters.from_url("amqp://h/")
    assert params.max_message_size == DEFAULT_MAX_MESSAGE_SIZE == 128 * 1024 * 1024
    assert params.to_config().max_message_size == DEFAULT_MAX_MESSAGE_SIZE


@pytest.mark.parametrize("size", [0, 1, 4096, 2**40])
def test_url_query_sets_the_cap_of_both_families(size: int) -> None:
    params = ConnectionParameters.from_url(f"amqp://h/?max_message_size={size}")
    assert params.max_message_size == size
    assert params.to_config().max_message_size == size
    assert config_from(params).max_message_size == size  # 0-10's core


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "outside"), ("ten", "expected an integer"), (str(2**64), "outside")],
)
def test_bad_values_name_the_parameter(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"max_message_size: .*{message}"):
        ConnectionParameters.from_url(f"amqp://h/?max_message_size={value}")


def test_constructor_checks_the_range() -> None:
    assert ConnectionParameters(max_message_size=10).to_config().max_message_size == 10
    with pytest.raises(ValueError, match="max_message_size"):
        ConnectionParameters(max_message_size=-1)
