"""The broker's ``connection.update-secret``: Broker(secret_check=...) decides it, without
sockets; a refusal closes the connection with 530 as RabbitMQ does."""

from __future__ import annotations

from amqp_sansio import ConnectionClosed, ConnectionUpdateSecretOk, MethodReceived

from .test_session import Net, open_client


def test_the_check_sees_the_user_and_the_secret_and_decides() -> None:
    net = Net()
    seen: list[tuple[str, bytes]] = []

    def check(user: str, secret: bytes) -> bool:
        seen.append((user, secret))
        return secret == b"fresh"

    net.broker.secret_check = check
    client = open_client(net)
    client.core.update_secret(b"fresh", "refresh")
    net.pump()
    events = client.take()
    assert [type(e.method) for e in events if isinstance(e, MethodReceived)] == [
        ConnectionUpdateSecretOk
    ]
    client.core.update_secret(b"stale", "refresh")
    net.pump()
    closed = [e for e in client.take() if isinstance(e, ConnectionClosed)]
    assert [(e.reply_code, e.reply_text) for e in closed] == [
        (530, "NOT_ALLOWED - New secret was refused by one of the backends")
    ]
    assert seen == [("guest", b"fresh"), ("guest", b"stale")]
