"""The errors the 0-10 clients raise: ``execution.exception`` as typed errors, and a session's
end.

Connection-level failures reuse the 0-9-1 client's classes (:class:`ConnectionClosedError`,
:class:`ConnectionLostError`, :class:`ConnectionTimeoutError`): the meaning is the same.
"""

from __future__ import annotations

from typing import Final

from ...client._errors import AMQPError
from .._generated.spec_0_10 import ErrorCode, ExecutionException

__all__ = [
    "ExecutionError",
    "IllegalArgument",
    "IllegalState",
    "InvalidArgument",
    "NotAllowedError",
    "NotFoundError",
    "NotImplementedByPeer",
    "PeerInternalError",
    "PreconditionFailedError",
    "ResourceDeleted",
    "ResourceLimitExceeded",
    "ResourceLockedError",
    "SessionBusy",
    "SessionEndedError",
    "UnauthorizedAccess",
    "UnknownCommand",
    "execution_error",
]


class ExecutionError(AMQPError):
    """The peer raised ``execution.exception`` about one of our commands; the session is over
    (the peer detaches it). ``error_code`` is an :class:`~amqp_sansio.v0_10.ErrorCode`;
    ``command_id`` the command it names (None: none), ``class_code``/``command_code`` that
    command's codes, ``field_index`` the field at fault, ``description`` the peer's text."""

    def __init__(
        self,
        error_code: int,
        description: str,
        *,
        command_id: int | None = None,
        class_code: int | None = None,
        command_code: int | None = None,
        field_index: int | None = None,
    ) -> None:
        super().__init__(error_code, description)
        self.error_code: Final = error_code
        self.description: Final = description
        self.command_id: Final = command_id
        self.class_code: Final = class_code
        self.command_code: Final = command_code
        self.field_index: Final = field_index

    def __str__(self) -> str:
        return f"execution.exception {self.error_code}: {self.description}"

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), self.error_code, self.description, self.command_id))


def _rebuild(
    cls: type[ExecutionError], error_code: int, description: str, command_id: int | None
) -> ExecutionError:
    return cls(error_code, description, command_id=command_id)


class UnauthorizedAccess(ExecutionError):
    """403 unauthorized-access."""


class NotFoundError(ExecutionError):
    """404 not-found (a queue or exchange that does not exist)."""


class ResourceLockedError(ExecutionError):
    """405 resource-locked (an exclusive queue of another session)."""


class PreconditionFailedError(ExecutionError):
    """406 precondition-failed (a redeclare that differs, a queue in use, ...)."""


class ResourceDeleted(ExecutionError):
    """408 resource-deleted (the queue a subscription reads was deleted)."""


class IllegalState(ExecutionError):
    """409 illegal-state."""


class UnknownCommand(ExecutionError):
    """503 command-invalid."""


class ResourceLimitExceeded(ExecutionError):
    """506 resource-limit-exceeded (a limit of the broker)."""


class NotAllowedError(ExecutionError):
    """530 not-allowed."""


class IllegalArgument(ExecutionError):
    """531 illegal-argument."""


class NotImplementedByPeer(ExecutionError):
    """540 not-implemented."""


class PeerInternalError(ExecutionError):
    """541 internal-error."""


class InvalidArgument(ExecutionError):
    """542 invalid-argument (an unknown exchange type, a bad argument)."""


_BY_CODE: Final[dict[int, type[ExecutionError]]] = {
    ErrorCode.UNAUTHORIZED_ACCESS: UnauthorizedAccess,
    ErrorCode.NOT_FOUND: NotFoundError,
    ErrorCode.RESOURCE_LOCKED: ResourceLockedError,
    ErrorCode.PRECONDITION_FAILED: PreconditionFailedError,
    ErrorCode.RESOURCE_DELETED: ResourceDeleted,
    ErrorCode.ILLEGAL_STATE: IllegalState,
    ErrorCode.COMMAND_INVALID: UnknownCommand,
    ErrorCode.RESOURCE_LIMIT_EXCEEDED: ResourceLimitExceeded,
    ErrorCode.NOT_ALLOWED: NotAllowedError,
    ErrorCode.ILLEGAL_ARGUMENT: IllegalArgument,
    ErrorCode.NOT_IMPLEMENTED: NotImplementedByPeer,
    ErrorCode.INTERNAL_ERROR: PeerInternalError,
    ErrorCode.INVALID_ARGUMENT: InvalidArgument,
}


def execution_error(exception: ExecutionException) -> ExecutionError:
    """The typed error for an ``execution.exception``."""
    code = exception.error_code or 0
    return _BY_CODE.get(code, ExecutionError)(
        code,
        exception.description or "",
        command_id=exception.command_id,
        class_code=exception.class_code,
        command_code=exception.command_code,
        field_index=exception.field_index,
    )


class SessionEndedError(AMQPError):
    """The session was detached (by us or the peer) or could not be attached; ``code`` is a
    :class:`~amqp_sansio.v0_10.DetachCode` (None: the connection ended)."""

    def __init__(self, text: str, code: int | None = None) -> None:
        super().__init__(text)
        self.code: Final = code


class SessionBusy(SessionEndedError):
    """``attach`` was refused: a session of that name is attached elsewhere."""
