"""Stream queues (``x-queue-type: stream``) as RabbitMQ 3.10 serves them over AMQP 0-9-1.

A stream is an append-only log: every message gets the next offset (0, 1, 2, ...) and stays
until retention removes it; consumers read from an offset of their choice without taking
anything away. The log is kept in segments of ``x-stream-max-segment-size-bytes``; when a
segment is full a new one starts and, as in RabbitMQ, retention then drops the oldest whole
segments while the stream holds more than ``x-max-length-bytes`` (or their newest message is
older than ``x-max-age``). As in RabbitMQ, every segment after the first starts with a record
that takes an offset and is never delivered, so offsets have gaps. Each message is its own
chunk, so ``x-stream-offset: last`` starts at the last message.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from datetime import datetime
from typing import TYPE_CHECKING, Final, final

from amqp_sansio import FieldValue, Timestamp, TypedValue

from ._errors import BrokerError

if TYPE_CHECKING:
    from ._message import Message

__all__ = [
    "DEFAULT_SEGMENT_SIZE",
    "MAX_SEGMENT_SIZE",
    "StreamLog",
    "parse_max_age",
]

#: RabbitMQ's default ``x-stream-max-segment-size-bytes`` (500 MB) and its largest value.
DEFAULT_SEGMENT_SIZE: Final = 500_000_000
MAX_SEGMENT_SIZE: Final = 3_000_000_000

_UNITS_MS: Final = {
    "Y": 365 * 24 * 3600 * 1000,
    "M": 30 * 24 * 3600 * 1000,
    "D": 24 * 3600 * 1000,
    "h": 3600 * 1000,
    "m": 60 * 1000,
    "s": 1000,
}
_AGE: Final = re.compile(r"([0-9]*)(.*)", re.DOTALL)


def parse_max_age(text: str) -> int | None:
    """An ``x-max-age`` string (``"7D"``, ``"1h"``) in milliseconds; None when it is not one
    (RabbitMQ's ``invalid_max_age``).

    :raises ValueError: no digits at all (RabbitMQ crashes on those: ``list_to_integer``).
    """
    match = _AGE.fullmatch(text)
    assert match is not None  # the pattern matches any text
    digits, unit = match.groups()
    value = int(digits)  # ValueError for "": the caller reproduces RabbitMQ's crash
    if value <= 0 or unit not in _UNITS_MS:
        return None
    return value * _UNITS_MS[unit]


@final
class _Segment:
    __slots__ = ("first", "messages", "size", "times")

    def __init__(self, first: int) -> None:
        #: Offset of the segment's first entry.
        self.first = first
        #: The entries by offset; None is the record that starts every segment after the
        #: first (RabbitMQ's writer puts a tracking chunk there: an offset no one is sent).
        self.messages: list[Message | None] = []
        #: Wall-clock milliseconds at which each entry was appended.
        self.times: list[int] = []
        self.size = 0


@final
class StreamLog:
    """The messages of one stream queue, by offset."""

    __slots__ = (
        "count",
        "held",
        "max_age_ms",
        "max_bytes",
        "next_offset",
        "segment_size",
        "segments",
    )

    def __init__(
        self,
        *,
        max_bytes: int | None = None,
        max_age_ms: int | None = None,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age_ms = max_age_ms
        self.segment_size = segment_size
        self.segments: deque[_Segment] = deque([_Segment(0)])
        #: The offset the next entry gets.
        self.next_offset = 0
        #: Messages retained.
        self.count = 0
        #: Octets of the retained messages (the broker's memory accounting).
        self.held = 0

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"<StreamLog offsets {self.first_offset}..{self.next_offset}>"

    @property
    def first_offset(self) -> int:
        """The oldest offset still retained (``next_offset`` when the stream is empty)."""
        return self.segments[0].first

    def start_at(self, first: int, now_ms: int) -> None:
        """An empty log whose oldest retained offset is *first* (rebuilt from the store):
        past 0 it is a segment's first record, which carries no message."""
        segment = _Segment(max(first - 1, 0))
        if first > 0:
            segment.messages.append(None)
            segment.times.append(now_ms)
        self.segments = deque([segment])
        self.next_offset = first

    def append(self, message: Message, now_ms: int) -> list[Message]:
        """Append *message*; returns the messages retention dropped (to release them)."""
        segment = self.segments[-1]
        segment.messages.append(message)
        segment.times.append(now_ms)
        segment.size += message.held
        self.held += message.held
        self.count += 1
        self.next_offset += 1
        if segment.size < self.segment_size:
            return []
        rolled = _Segment(self.next_offset)
        rolled.messages.append(None)
        rolled.times.append(now_ms)
        self.next_offset += 1
        self.segments.append(rolled)
        return self._retain(now_ms)

    def _retain(self, now_ms: int) -> list[Message]:
        dropped: list[Message] = []
        while len(self.segments) > 1:
            oldest = self.segments[0]
            too_big = self.max_bytes is not None and self.held > self.max_bytes
            too_old = (
                self.max_age_ms is not None
                and bool(oldest.times)
                and oldest.times[-1] < now_ms - self.max_age_ms
            )
            if not (too_big or too_old):
                break
            self.segments.popleft()
            self.held -= oldest.size
            gone = [m for m in oldest.messages if m is not None]
            self.count -= len(gone)
            dropped += gone
        return dropped

    def clear(self) -> list[Message]:
        """Drop everything (the queue was deleted); returns what was held."""
        dropped = [m for segment in self.segments for m in segment.messages if m is not None]
        self.segments = deque([_Segment(self.next_offset)])
        self.held = 0
        self.count = 0
        return dropped

    def read(self, offset: int) -> Message | None:
        """The message at *offset*; None when it is gone, not written yet, or the record that
        starts a segment."""
        if offset >= self.next_offset or offset < self.first_offset:
            return None
        segments = self.segments
        last = segments[-1]
        if offset >= last.first:
            return last.messages[offset - last.first]
        index = bisect.bisect_right([s.first for s in segments], offset) - 1
        segment = segments[index]
        return segment.messages[offset - segment.first]

    def last_message_offset(self) -> int:
        """The offset of the newest message (``next_offset`` when there is none)."""
        offset = self.next_offset - 1
        while offset >= self.first_offset:
            if self.read(offset) is not None:
                return offset
            offset -= 1
        return self.next_offset

    def resolve(self, spec: FieldValue, now_ms: int, where: str) -> int:
        """Where a consumer with ``x-stream-offset`` *spec* starts (None: ``next``).

        :raises BrokerError: 406 for an interval string that is not one, 541 where RabbitMQ
            3.10 crashes (a value that is neither an offset, a timestamp nor a string).
        """
        value = spec.value if isinstance(spec, TypedValue) else spec
        if spec is None:
            return self.next_offset
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, str):
            if value == "first":
                return self.first_offset
            if value == "last":
                return self.last_message_offset()
            if value == "next":
                return self.next_offset
            try:
                age = parse_max_age(value)
            except ValueError:
                raise BrokerError(541, "", caused_by_method=False) from None
            if age is None:
                raise BrokerError(
                    406,
                    f"invalid arg 'x-stream-offset' for {where}: "
                    f'{{invalid_stream_offset_arg,{{longstr,<<"{value}">>}}}}',
                )
            return self._at_time(now_ms - age)
        if isinstance(spec, Timestamp):
            return self._at_time(spec.value * 1000)
        if isinstance(value, datetime):
            return self._at_time(int(value.timestamp()) * 1000)
        if isinstance(value, int) and not isinstance(value, bool):
            return min(max(value, self.first_offset), self.next_offset)
        raise BrokerError(541, "", caused_by_method=False)

    def _at_time(self, when_ms: int) -> int:
        """The first offset appended at or after *when_ms*."""
        for segment in self.segments:
            if segment.times and segment.times[-1] >= when_ms:
                return segment.first + bisect.bisect_left(segment.times, when_ms)
        return self.next_offset
