"""Errors that say what to do, shared by the adapters: a failed TCP connect with its reason in
the message, and a ``basic_consume(...)`` iterated or a ``publisher(...)`` used without
entering it first."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar, final

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType

__all__ = ["ConsumeBlock", "PublisherBlock", "connect_failed"]

_T = TypeVar("_T")

_REFUSED_HINT = (
    " (no broker listens there: start one, e.g. `rabbitmq-server -detached` or "
    "`python -m amqp_broker`, or check the URL's host and port)"
)


def _reasons(exc: BaseException) -> list[OSError]:
    """The OSErrors behind *exc*: itself, or the attempts of a happy-eyeballs connect (Trio
    reports "all attempts to connect ... failed" with the reasons only in its cause)."""
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        found = [e for e in cause.exceptions if isinstance(e, OSError)]
        if found:
            return found
    if isinstance(cause, OSError):
        return [cause]
    return [exc] if isinstance(exc, OSError) else []


def connect_failed(address: str, exc: OSError) -> OSError:
    """The error an adapter raises when the TCP connection to *address* failed: the class and
    ``errno`` of the underlying failure (``ConnectionRefusedError``, ``socket.gaierror``, ...),
    with the address, the reason and, for a refusal, what to do in the message itself.

    Raise it ``from exc``.
    """
    reasons = _reasons(exc) or [exc]
    first = reasons[0]
    texts: list[str] = []
    for reason in reasons:
        text = (
            os.strerror(reason.errno) if isinstance(reason.errno, int) and reason.errno > 0 else ""
        )
        text = reason.strerror if not text and reason.strerror else text or str(reason)
        if text not in texts:
            texts.append(text)
    message = f"could not connect to {address}: {'; '.join(texts)}"
    if any(isinstance(reason, ConnectionRefusedError) for reason in reasons):
        message += _REFUSED_HINT
    cls = type(first)
    try:
        error = cls(first.errno, message) if first.errno is not None else cls(message)
    except TypeError:  # an OSError subclass with its own constructor
        error = OSError(first.errno, message)
    return error


@final
class ConsumeBlock(Generic[_T]):
    """What ``basic_consume(...)`` returns in the async adapters: an async context manager that
    starts the consumer on entry and cancels it on exit. Iterating it without entering it first
    is a ``TypeError`` that shows the right spelling."""

    __slots__ = ("_manager",)

    def __init__(self, manager: AbstractAsyncContextManager[_T]) -> None:
        self._manager = manager

    async def __aenter__(self) -> _T:
        return await self._manager.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._manager.__aexit__(exc_type, exc, traceback)

    # Hidden from type checkers, so that they flag the mistake before it runs.
    if not TYPE_CHECKING:

        def __aiter__(self) -> NoReturn:
            raise TypeError(
                "basic_consume() starts a consumer for the length of a block: write "
                "`async with channel.basic_consume(queue) as consumer:` and then "
                "`async for message in consumer:` (or `await consumer.get(timeout=...)`)"
            )


@final
class PublisherBlock(Generic[_T]):
    """What ``publisher(window)`` returns in the async adapters: an async context manager that
    puts the channel in confirm mode on entry and waits for every confirm on exit. Using it as
    the publisher itself (amqp_blocking's ``pub = ch.publisher(); with pub: pub.publish()``) is
    a ``TypeError`` that shows the right spelling, instead of an ``AttributeError``."""

    __slots__ = ("_manager",)

    def __init__(self, manager: AbstractAsyncContextManager[_T]) -> None:
        self._manager = manager

    async def __aenter__(self) -> _T:
        return await self._manager.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._manager.__aexit__(exc_type, exc, traceback)

    # Hidden from type checkers, so that they flag the mistake before it runs.
    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> NoReturn:
            if name.startswith("__"):
                raise AttributeError(name)
            raise TypeError(
                f"publisher() has no {name!r} of its own: it is an async context manager that "
                "gives the publisher, so write `async with channel.publisher(window=...) as "
                f"pub:` and then `pub.{name}...` inside the block"
            )
