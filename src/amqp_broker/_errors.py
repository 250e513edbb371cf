"""The model's one exception: a refusal carrying RabbitMQ's reply code and text."""

from __future__ import annotations

from amqp_sansio import ReplyCode

__all__ = ["BrokerError"]


class BrokerError(Exception):
    """A refusal with RabbitMQ's reply code and text (``"NOT_FOUND - no queue 'q' ..."``).

    Soft codes (403, 404, 405, 406) close the channel; hard codes (503, 530, 540, ...) close
    the connection. An empty *text* gives the bare name (``"INTERNAL_ERROR"``).
    """

    def __init__(self, reply_code: int, text: str, *, caused_by_method: bool = True) -> None:
        name = ReplyCode(reply_code).name
        reply_text = f"{name} - {text}" if text else name
        super().__init__(reply_text)
        self.reply_code = reply_code
        self.reply_text = reply_text
        #: False when RabbitMQ names no method in the close (class and method 0): a consumer
        #: timeout, an internal error.
        self.caused_by_method = caused_by_method

    @property
    def is_hard(self) -> bool:
        """Whether the whole connection must close."""
        return not ReplyCode(self.reply_code).is_soft
