"""The brokers the kombu transport's tests run against: RabbitMQ, in a virtual host of its own
that is deleted afterwards (kombu's and Celery's queues, exchanges and pidbox state go with
it), and an embedded broker of the module's own."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, NamedTuple, final
from urllib.parse import quote

import pytest

import amqp_broker
from amqp_sansio.client import ConnectionParameters
from tests.support.rabbitmqctl import rabbitmqctl

if TYPE_CHECKING:
    from collections.abc import Iterator


@final
class Broker(NamedTuple):
    """Where a test module's broker is, and the AMQP version the transport speaks to it."""

    #: ``user:password@host:port/vhost`` (append it to a scheme: ``f"amqp-sansio://{...}"``).
    address: str
    #: ``"0-9-1"``, or ``"0-10"`` (the ``protocol`` transport option).
    protocol: str

    @property
    def transport_options(self) -> dict[str, object]:
        return {} if self.protocol == "0-9-1" else {"protocol": self.protocol}


@pytest.fixture(scope="module", params=["rabbitmq", "embedded", "embedded-0-10"])
def broker(request: pytest.FixtureRequest) -> Iterator[Broker]:
    """A broker whose state no other test module shares: RabbitMQ, the embedded broker, and
    the embedded broker spoken to in AMQP 0-10."""
    if request.param == "rabbitmq":
        params = ConnectionParameters.from_url(request.getfixturevalue("rabbitmq_url"))
        vhost = f"kombu-tests-{uuid.uuid4().hex[:12]}"
        rabbitmqctl("add_vhost", vhost)
        try:
            rabbitmqctl("set_permissions", "-p", vhost, params.username, ".*", ".*", ".*")
            yield Broker(
                f"{params.username}:{params.password}@{params.host}:{params.port}/{vhost}",
                "0-9-1",
            )
        finally:
            rabbitmqctl("delete_vhost", vhost)
    else:
        with amqp_broker.run_in_thread(users={"guest": "guest"}) as url:
            params = ConnectionParameters.from_url(url)
            yield Broker(
                f"guest:guest@{params.host}:{params.port}/{quote('/', safe='')}",
                "0-10" if request.param == "embedded-0-10" else "0-9-1",
            )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (
            str(item.path).startswith(here)
            and callspec is not None
            and callspec.params.get("broker") == "rabbitmq"
        ):
            item.add_marker(pytest.mark.rabbitmq)
