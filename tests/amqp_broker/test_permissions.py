"""Users, per-vhost permissions and the vhost connection limit on the wire, against RabbitMQ
(set up with one ``rabbitmqctl eval`` each way) and the embedded broker (the same users given
as options) with the same expectations: RabbitMQ's 403 and 530 texts."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Final, final

import pytest
import trio

import amqp_broker
import amqp_trio
from amqp_broker import BrokerOptions, Permission, User
from amqp_sansio.client import (
    AccessRefused,
    ConnectionParameters,
    NotAllowed,
    NotFound,
)
from tests.support.rabbitmqctl import rabbitmqctl

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

pytestmark = pytest.mark.trio

LIMIT: Final = 30
CONFIGURE: Final = "^cfg-"
WRITE: Final = "^cfg-|^w-"
READ: Final = "^cfg-|^r-"


@final
class Setup:
    """A broker with a restricted user on ``/`` and a vhost it may not use, where guest may
    open at most two connections."""

    def __init__(self, url: str, suffix: str) -> None:
        self.params = ConnectionParameters.from_url(url)
        self.suffix = suffix
        self.user = f"test-perm-{suffix}"
        self.password = f"pw-{suffix}"
        self.vhost = f"test-perm-{suffix}"

    def url(self, *, restricted: bool = True, vhost: str = "/") -> str:
        quoted = "%2F" if vhost == "/" else vhost
        user, password = (self.user, self.password) if restricted else ("guest", "guest")
        return f"amqp://{user}:{password}@{self.params.host}:{self.params.port}/{quoted}"


def _erlang_setup(setup: Setup) -> str:
    def b(text: str) -> str:
        return f'<<"{text}">>'

    return (
        f'ok = rabbit_vhost:add({b(setup.vhost)}, <<"test">>),'
        f"ok = rabbit_auth_backend_internal:add_user({b(setup.user)}, {b(setup.password)},"
        ' <<"test">>),'
        f'ok = rabbit_auth_backend_internal:set_permissions({b(setup.user)}, <<"/">>,'
        f' {b(CONFIGURE)}, {b(WRITE)}, {b(READ)}, <<"test">>),'
        f'ok = rabbit_auth_backend_internal:set_permissions(<<"guest">>, {b(setup.vhost)},'
        ' <<".*">>, <<".*">>, <<".*">>, <<"test">>),'
        f'ok = rabbit_vhost_limit:set({b(setup.vhost)}, [{{<<"max-connections">>, 2}}],'
        ' <<"test">>).'
    )


def _erlang_teardown(setup: Setup) -> str:
    return (
        f'rabbit_auth_backend_internal:delete_user(<<"{setup.user}">>, <<"test">>),'
        f' rabbit_vhost:delete(<<"{setup.vhost}">>, <<"test">>).'
    )


@pytest.fixture(
    scope="module", params=[pytest.param("rabbitmq", marks=pytest.mark.rabbitmq), "embedded"]
)
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    suffix = uuid.uuid4().hex[:10]
    if request.param == "rabbitmq":
        url = request.getfixturevalue("rabbitmq_url")
        assert isinstance(url, str)
        made = Setup(url, suffix)
        rabbitmqctl("eval", _erlang_setup(made))
        try:
            yield made
        finally:
            rabbitmqctl("eval", _erlang_teardown(made))
        return
    user, vhost = f"test-perm-{suffix}", f"test-perm-{suffix}"
    users: dict[str, str | User] = {
        "guest": "guest",
        user: User(f"pw-{suffix}", {"/": Permission(CONFIGURE, WRITE, READ)}),
    }
    options = BrokerOptions(vhost_max_connections={vhost: 2})
    with amqp_broker.run_in_thread(users=users, vhosts=["/", vhost], options=options) as url:
        yield Setup(url, suffix)


async def test_a_vhost_without_permissions_is_refused_at_open(setup: Setup) -> None:
    with trio.fail_after(LIMIT), pytest.raises(NotAllowed) as refused:
        async with amqp_trio.connect(setup.url(vhost=setup.vhost)):
            raise AssertionError("opened a vhost without permissions")
    assert refused.value.reply_code == 530
    assert refused.value.reply_text == (
        f"NOT_ALLOWED - access to vhost '{setup.vhost}' refused for user '{setup.user}'"
    )


async def test_refused_operations_get_rabbitmqs_403(setup: Setup) -> None:
    mine, other = f"cfg-{setup.suffix}", f"x-{setup.suffix}"

    async def refused(
        conn: amqp_trio.Connection,
        operation: Callable[[amqp_trio.Channel], Awaitable[object]],
        kind: str,
        name: str,
    ) -> None:
        async with conn.channel() as ch:
            with pytest.raises(AccessRefused) as caught:
                await operation(ch)
            assert caught.value.reply_text == (
                f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user "
                f"'{setup.user}'"
            )

    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(setup.url()) as conn:
            await refused(conn, lambda ch: ch.queue_declare(other), "queue", other)
            await refused(conn, lambda ch: ch.exchange_declare(other, "direct"), "exchange", other)
            await refused(conn, lambda ch: ch.queue_delete(other), "queue", other)
            await refused(conn, lambda ch: ch.basic_get(other), "queue", other)
            await refused(conn, lambda ch: ch.queue_purge(other), "queue", other)
            async with conn.channel() as ch:
                with pytest.raises(NotFound):  # passive declares are not checked
                    await ch.queue_declare(other, passive=True)
            async with conn.channel() as ch:
                await ch.queue_declare(mine)
                await ch.exchange_declare(mine, "fanout", auto_delete=True)
                await ch.queue_bind(mine, mine)  # write on the queue, read on the exchange
                await ch.confirm_select()
                await ch.basic_publish(b"allowed", exchange=mine)
                got = await ch.basic_get(mine, no_ack=True)
                assert got is not None
                assert got.body == b"allowed"
            await refused(
                conn, lambda ch: ch.queue_bind(mine, "amq.direct"), "exchange", "amq.direct"
            )

            async def publish_to_default(ch: amqp_trio.Channel) -> None:
                await ch.basic_publish(b"refused", routing_key=mine)
                await ch.queue_declare(mine, passive=True)  # the refusal comes before this

            await refused(conn, publish_to_default, "exchange", "amq.default")
            async with conn.channel() as ch:
                await ch.queue_delete(mine)
                await ch.exchange_delete(mine)


async def test_the_vhost_connection_limit_is_530(setup: Setup) -> None:
    url = setup.url(restricted=False, vhost=setup.vhost)
    with trio.fail_after(LIMIT):
        async with amqp_trio.connect(url), amqp_trio.connect(url):
            with pytest.raises(NotAllowed) as refused:
                async with amqp_trio.connect(url):
                    raise AssertionError("opened a third connection")
            assert refused.value.reply_text == (
                f"NOT_ALLOWED - access to vhost '{setup.vhost}' refused for user 'guest': "
                "connection limit (2) is reached"
            )
        async with amqp_trio.connect(url) as again:  # below the limit again
            assert not again.is_closed
