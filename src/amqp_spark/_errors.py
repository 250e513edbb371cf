"""The exceptions the data source raises itself (broker errors are ``amqp_sansio.client``'s)."""

from __future__ import annotations

__all__ = ["AmqpDataLossError", "AmqpOptionError"]


class AmqpOptionError(ValueError):
    """An option of the ``amqp`` data source is missing, unknown or has a bad value.

    Raised when Spark creates the data source (``load()``, ``save()``, ``start()``), before
    anything touches the broker. :attr:`option` is the option's documented name.
    """

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"amqp data source option {option!r}: {problem}")
        self.option = option
        self.problem = problem


class AmqpDataLossError(RuntimeError):
    """A stream queue no longer holds offsets that the query still has to read.

    Retention (``x-max-age``, ``x-max-length-bytes``) removed them before the query got there.
    Raised only with ``failOnDataLoss=true`` (the default); otherwise the reader logs a warning
    and continues with the oldest offset still stored.
    """

    def __init__(self, queue: str, expected: int, first_available: int | None) -> None:
        if first_available is None:
            where = "the stream delivered nothing from there"
        else:
            where = f"the oldest offset it still delivers there is {first_available}"
        super().__init__(
            f"stream queue {queue!r}: offset {expected} is needed but {where}; retention "
            "removed data before the query read it (set failOnDataLoss=false to skip the gap)"
        )
        self.queue = queue
        self.expected = expected
        self.first_available = first_available
