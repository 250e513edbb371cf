"""TLS for amqp_blocking and amqp_asyncio, through a TLS-terminating proxy in front of RabbitMQ.

The local broker listens without TLS, so the test starts a small proxy (asyncio, in a thread)
that accepts TLS with a throw-away certificate for ``localhost`` and forwards the plain bytes
to RabbitMQ. The clients verify that certificate (``cacertfile``) and the host name.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from typing import TYPE_CHECKING, Final, final

import pytest

import amqp_asyncio
import amqp_blocking
from amqp_sansio import BasicProperties
from amqp_sansio.client import ConnectionParameters

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.rabbitmq

_BODY: Final = b"x" * 300_000  # several TLS records and AMQP frames each way


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@final
class _TLSProxy:
    """Accepts TLS on 127.0.0.1 and forwards to the broker; runs its own loop in a thread."""

    def __init__(self, context: ssl.SSLContext, target: tuple[str, int]) -> None:
        self._context = context
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self._context)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stop.wait()

    def __enter__(self) -> _TLSProxy:
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        stop = self._stop
        assert stop is not None
        self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture(scope="module")
def tls_params(
    rabbitmq_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConnectionParameters]:
    cert, key = _certificate(tmp_path_factory.mktemp("tls"))
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    broker = ConnectionParameters.from_url(rabbitmq_url)
    with _TLSProxy(server_context, (broker.host, broker.port)) as proxy:
        yield ConnectionParameters.from_url(
            f"amqps://{broker.username}:{broker.password}@127.0.0.1:{proxy.port}/"
            f"?cacertfile={cert}&server_name_indication=localhost&name=tls-test"
        )


def test_blocking_over_tls(tls_params: ConnectionParameters) -> None:
    with amqp_blocking.connect(tls_params) as conn, conn.channel() as ch:
        queue = ch.queue_declare(exclusive=True).queue
        ch.confirm_select()
        for n in range(3):
            ch.basic_publish(_BODY, routing_key=queue, properties=BasicProperties(priority=n))
        ch.basic_qos(3)
        got = [(m.body, m.properties.priority) for m in ch.consume(queue, timeout=1.0)]
        assert got == [(_BODY, 0), (_BODY, 1), (_BODY, 2)]


def test_asyncio_over_tls(tls_params: ConnectionParameters) -> None:
    async def main() -> None:
        async with amqp_asyncio.connect(tls_params) as conn, conn.channel() as ch:
            queue = (await ch.queue_declare(exclusive=True)).queue
            await ch.confirm_select()
            await ch.basic_publish(_BODY, routing_key=queue)
            msg = await ch.basic_get(queue)
            assert msg is not None
            assert msg.body == _BODY

    asyncio.run(main())


def test_a_certificate_for_another_name_is_refused(tls_params: ConnectionParameters) -> None:
    context = tls_params.ssl_context()
    assert context is not None
    with pytest.raises(ssl.SSLCertVerificationError):
        amqp_blocking.connect(tls_params, ssl_context=ssl.create_default_context())
    wrong_name = ConnectionParameters(
        host=tls_params.host,
        port=tls_params.port,
        tls=True,
        cafile=tls_params.cafile,
        server_hostname="not-localhost",
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        amqp_blocking.connect(wrong_name)
