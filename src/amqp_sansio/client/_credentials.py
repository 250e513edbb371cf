"""Credentials that change while a connection lives (RabbitMQ's OAuth 2 tokens): what a
credentials provider returns, and when the adapter asks it again."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, TypeAlias, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = [
    "DEFAULT_REFRESH_MARGIN",
    "AsyncCredentialsProvider",
    "Credentials",
    "CredentialsProvider",
    "check_refresh_margin",
    "refresh_delay",
]

#: Seconds before a secret's expiry that the client sends the next one (RabbitMQ refuses
#: every permission check once a token expired; a minute covers a slow provider and a busy
#: broker).
DEFAULT_REFRESH_MARGIN: Final = 60.0
#: When what the provider gave expires within the margin already: ask again this much later,
#: not at once. A provider whose tokens live less than the margin, or that hands out its cached
#: token until it renews it, would otherwise be asked in a loop, each answer an update-secret.
_INSIDE_MARGIN_DELAY: Final = 1.0


def _check_expiry(
    instance: Credentials, attribute: attrs.Attribute[float | None], value: float | None
) -> None:
    if value is not None and (type(value) not in (int, float) or not math.isfinite(value)):
        raise ValueError(f"expires_at must be seconds since the epoch, not {value!r}")


@final
@attrs.frozen(kw_only=True)
class Credentials:
    """What a credentials provider returns: the ``password`` (for OAuth 2, the access token)
    the connection logs in and updates its secret with, and when it stops being valid:
    ``expires_at`` in seconds since the epoch (``time.time()``'s clock, a JWT's ``exp``), or
    None for never. The password never appears in a ``repr``."""

    password: str = attrs.field(repr=False)
    expires_at: float | None = attrs.field(default=None, validator=_check_expiry)


#: A blocking adapter's provider: called on the caller's thread at connect, on the I/O
#: thread's refresher before expiry and before each recovery attempt.
CredentialsProvider: TypeAlias = "Callable[[], Credentials]"
#: An async adapter's provider: awaited in the connection's own task.
AsyncCredentialsProvider: TypeAlias = "Callable[[], Awaitable[Credentials]]"


def check_refresh_margin(margin: float) -> float:
    """*margin* as given, once checked: a finite number of seconds, zero or more."""
    if type(margin) not in (int, float) or not 0 <= margin < math.inf:
        raise ValueError(f"refresh_margin must be a number of seconds >= 0, not {margin!r}")
    return float(margin)


def refresh_delay(credentials: Credentials, wall_now: float, margin: float) -> float | None:
    """Seconds from *wall_now* (``time.time()``) until the provider is asked again: *margin*
    before ``expires_at``, or a second from now when that moment passed already (so such
    credentials are refreshed once a second, not in a loop); None when they never expire."""
    if credentials.expires_at is None:
        return None
    delay = credentials.expires_at - margin - wall_now
    return delay if delay > 0 else _INSIDE_MARGIN_DELAY
