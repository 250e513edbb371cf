"""HTTP/1.1 over Trio streams with h11 (a sans-IO parser, as the rest of this project): no
hand-written parsing; one request at a time per connection, keep-alive honoured."""

from __future__ import annotations

import functools
import http
import logging
from typing import TYPE_CHECKING, Final

import h11
import trio

if TYPE_CHECKING:
    from ._api import ManagementApi

__all__ = ["serve_management"]

logger: Final = logging.getLogger("amqp_broker.management")

#: The largest request body read (definitions imports are the big ones).
MAX_BODY: Final = 16 * 1024 * 1024
_READ: Final = 65536
_KNOWN_STATUSES: Final = frozenset(s.value for s in http.HTTPStatus)


async def _respond(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    status: int,
    headers: list[tuple[str, str]],
    body: bytes,
) -> None:
    headers = [*headers, ("content-length", str(len(body))), ("server", "amqp_broker")]
    # The reason phrase as RabbitMQ's (cowboy) gives it: clients put it in their errors
    # (requests: "401 Client Error: Unauthorized for url: ...").
    reason = http.HTTPStatus(status).phrase.encode() if status in _KNOWN_STATUSES else b""
    response = h11.Response(status_code=status, headers=headers, reason=reason)
    await stream.send_all(conn.send(response) or b"")
    await stream.send_all(conn.send(h11.Data(data=body)) or b"")
    await stream.send_all(conn.send(h11.EndOfMessage()) or b"")


async def _next_event(
    stream: trio.abc.Stream, conn: h11.Connection
) -> h11.Event | type[h11.PAUSED]:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event  # type: ignore[return-value]  # h11's sentinels are classes
        conn.receive_data(bytes(await stream.receive_some(_READ)))


async def _handle(api: ManagementApi, stream: trio.abc.Stream) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            event = await _next_event(stream, conn)
            if not isinstance(event, h11.Request):
                return  # closed, or paused after a response that must close
            body = bytearray()
            too_large = False
            while True:
                part = await _next_event(stream, conn)
                if isinstance(part, h11.Data):
                    body += part.data
                    if len(body) > MAX_BODY:
                        too_large = True
                        break
                elif isinstance(part, h11.EndOfMessage):
                    break
                else:
                    return
            if too_large:
                await _respond(stream, conn, 413, [("connection", "close")], b"")
                return
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            response = api.handle(
                event.method.decode("ascii"), event.target.decode("latin-1"), headers, bytes(body)
            )
            await _respond(stream, conn, response.status, response.headers, response.body)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            await _respond(stream, conn, exc.error_status_hint, [("connection", "close")], b"")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the client went away
    finally:
        await trio.aclose_forcefully(stream)


async def serve_management(
    api: ManagementApi,
    host: str | None,
    port: int,
    *,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve *api* over HTTP on *host*:*port* (0: a free port) until cancelled."""
    await trio.serve_tcp(functools.partial(_handle, api), port, host=host, task_status=task_status)
