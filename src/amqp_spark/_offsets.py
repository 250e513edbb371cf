"""Stream offsets: the ``startingOffsets``/``endingOffsets`` grammar, the offset dicts Spark
checkpoints, admission control across queues, and splitting offset ranges into partitions.

Everything here is pure and picklable; the broker is asked only in ``_connections``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from pyspark.sql.datasource import InputPartition

from ._errors import AmqpOptionError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "EVERY_QUEUE",
    "OffsetKind",
    "OffsetRange",
    "OffsetSpec",
    "allocate_rows",
    "checkpoint_offsets",
    "parse_offsets_option",
    "plan_ranges",
]

OffsetKind: TypeAlias = Literal["first", "last", "next", "offset", "timestamp"]

#: The key of an offsets option that applies to every queue read (no queue name is empty).
EVERY_QUEUE: Final = ""

# Largest offset a stream can hand out (x-stream-offset is a signed 64-bit long).
_MAX_OFFSET: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start (or end) reading one stream queue before it is resolved to a number.

    ``first``: the oldest offset still stored; ``last``: the newest message (it is included);
    ``next``: the offset the next published message will get (only new messages); ``offset``:
    :attr:`value` itself; ``timestamp``: the first message stored at or after :attr:`value`
    (seconds since the epoch).
    """

    kind: OffsetKind
    value: int = 0

    def describe(self) -> str:
        """The spec written as the option accepts it."""
        if self.kind == "offset":
            return str(self.value)
        if self.kind == "timestamp":
            return f"timestamp:{self.value}"
        return self.kind


def _parse_one(option: str, text: object, allowed: frozenset[OffsetKind]) -> OffsetSpec:
    kinds = " or ".join(sorted(k for k in allowed if k not in ("offset", "timestamp")))
    accepted = ", ".join(
        [kinds]
        + (["a non-negative offset"] if "offset" in allowed else [])
        + (["'timestamp:<epoch seconds>'"] if "timestamp" in allowed else [])
    )
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise AmqpOptionError(option, f"expected {accepted}, got {text!r}")
    if isinstance(text, int):
        spec = OffsetSpec("offset", text)
    else:
        word = text.strip().lower()
        if word == "latest":  # Kafka's name for the same position
            word = "next"
        if word == "first":
            spec = OffsetSpec("first")
        elif word == "last":
            spec = OffsetSpec("last")
        elif word == "next":
            spec = OffsetSpec("next")
        elif word.startswith("timestamp:"):
            seconds = word.partition(":")[2].strip()
            if not seconds.isdecimal():
                raise AmqpOptionError(
                    option, f"expected 'timestamp:<epoch seconds>' with an integer, got {text!r}"
                )
            spec = OffsetSpec("timestamp", int(seconds))
        elif word.isdecimal():
            spec = OffsetSpec("offset", int(word))
        else:
            raise AmqpOptionError(option, f"expected {accepted}, got {text!r}")
    if spec.kind not in allowed:
        raise AmqpOptionError(option, f"expected {accepted}, got {text!r}")
    if not 0 <= spec.value <= _MAX_OFFSET:
        raise AmqpOptionError(option, f"{spec.value} is outside 0..{_MAX_OFFSET}")
    return spec


def parse_offsets_option(
    option: str, text: str, queues: Sequence[str], allowed: frozenset[OffsetKind]
) -> dict[str, OffsetSpec]:
    """Parse one spec for every queue, or a JSON object with one entry per queue.

    ``'first'``, ``'42'``, ``'timestamp:1700000000'`` or ``'{"orders": 42, "audit": "first"}'``.
    A JSON object must name exactly the queues being read.
    """
    stripped = text.strip()
    if not stripped.startswith("{"):
        spec = _parse_one(option, stripped, allowed)
        return dict.fromkeys(queues, spec)
    try:
        loaded: object = json.loads(stripped)
    except ValueError as exc:
        raise AmqpOptionError(option, f"not valid JSON: {exc}") from None
    if not isinstance(loaded, dict):
        raise AmqpOptionError(option, "expected a JSON object of queue name to offset")
    unknown = sorted(set(loaded) - set(queues))
    if unknown:
        raise AmqpOptionError(option, f"names queues that are not read: {', '.join(unknown)}")
    missing = [q for q in queues if q not in loaded]
    if missing:
        raise AmqpOptionError(option, f"has no entry for queue(s): {', '.join(missing)}")
    return {q: _parse_one(option, loaded[q], allowed) for q in queues}


def checkpoint_offsets(offset: Mapping[str, object], queues: Sequence[str]) -> dict[str, int]:
    """Validate an offset dict from Spark (a checkpoint or our own output) for ``queues``.

    A checkpoint written for a different set of queues is refused: silently starting a new
    queue somewhere, or forgetting one, would break the exactly-once promise.
    """
    if set(offset) != set(queues):
        raise ValueError(
            f"the checkpoint holds offsets for queue(s) {sorted(offset)} but the query reads "
            f"{sorted(queues)}; start the query with a new checkpoint location"
        )
    out: dict[str, int] = {}
    for queue in queues:
        value = offset[queue]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"offset for queue {queue!r} is not a non-negative integer: {value!r}")
        out[queue] = value
    return out


def allocate_rows(available: Mapping[str, int], budget: int) -> dict[str, int]:
    """Share ``budget`` rows between queues with ``available`` rows each, fairly.

    Water-filling: every queue gets an equal share; what a short queue does not use goes to
    the others. The result never exceeds ``available`` and sums to
    ``min(budget, sum(available))``; leftovers of an uneven split go to queues in name order,
    so the result is deterministic.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, not {budget}")
    remaining = budget
    granted = dict.fromkeys(available, 0)
    hungry = sorted(q for q, n in available.items() if n > 0)
    while remaining > 0 and hungry:
        share, extra = divmod(remaining, len(hungry))
        if share == 0:
            for queue in hungry[:extra]:
                granted[queue] += 1
            remaining = 0
            break
        still_hungry: list[str] = []
        for queue in hungry:
            take = min(share, available[queue] - granted[queue])
            granted[queue] += take
            remaining -= take
            if granted[queue] < available[queue]:
                still_hungry.append(queue)
        hungry = still_hungry
    return granted


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one stream queue, read on an executor."""

    queue: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end:
            raise ValueError(f"empty or inverted offset range [{self.start}, {self.end})")

    @property
    def count(self) -> int:
        """How many offsets the range spans."""
        return self.end - self.start


def plan_ranges(
    start: Mapping[str, int],
    end: Mapping[str, int],
    *,
    num_partitions: int,
    max_messages_per_partition: int | None,
) -> list[OffsetRange]:
    """Split each queue's ``[start, end)`` into contiguous ranges of nearly equal size.

    Each queue gets ``num_partitions`` ranges, more if a range would exceed
    ``max_messages_per_partition``, never more than it has offsets. Queues whose range is
    empty get none, so ``start == end`` plans nothing.
    """
    ranges: list[OffsetRange] = []
    for queue in sorted(end):
        first, stop = start[queue], end[queue]
        count = stop - first
        if count < 0:
            raise ValueError(f"queue {queue!r}: end offset {stop} is before start {first}")
        if count == 0:
            continue
        parts = num_partitions
        if max_messages_per_partition is not None:
            parts = max(parts, math.ceil(count / max_messages_per_partition))
        parts = min(parts, count)
        size, extra = divmod(count, parts)
        lower = first
        for index in range(parts):
            upper = lower + size + (1 if index < extra else 0)
            ranges.append(OffsetRange(queue, lower, upper))
            lower = upper
    return ranges
