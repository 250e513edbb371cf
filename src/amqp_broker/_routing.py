"""Exchanges, bindings and how a routing key (or a message's headers) matches a binding.

An exchange knows nothing about queues: it is generic over the kind of destination a binding
may lead to besides another exchange (the model's :class:`~._queues.Queue`), so this module
sits below the queues in the import order.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final, Generic, TypeAlias, TypeVar, final

import attrs

from ._fields import same_value

if TYPE_CHECKING:
    from collections.abc import Iterator

    from amqp_sansio import FieldTable

__all__ = [
    "EXCHANGE_TYPES",
    "PREDECLARED",
    "Binding",
    "BindingKey",
    "Exchange",
    "topic_matches",
]

#: Exchange types this broker routes with.
EXCHANGE_TYPES: Final = frozenset(("direct", "fanout", "topic", "headers"))

#: The exchanges every virtual host starts with, besides the default one.
PREDECLARED: Final = (
    ("amq.direct", "direct"),
    ("amq.fanout", "fanout"),
    ("amq.topic", "topic"),
    ("amq.headers", "headers"),
    ("amq.match", "headers"),
)

#: What identifies a binding: (destination kind, id of the destination, key, frozen arguments).
BindingKey: TypeAlias = tuple[object, ...]

#: What a binding leads to besides an exchange (the model's queue class).
Q = TypeVar("Q")


@final
@attrs.frozen(slots=True)
class Binding(Generic[Q]):
    """One binding of an exchange to a queue or to another exchange."""

    destination: Q | Exchange[Q] = attrs.field(eq=False)
    routing_key: str
    arguments: FieldTable = attrs.field(eq=False)
    key: BindingKey


def topic_matches(pattern: str, routing_key: str) -> bool:
    """Whether a topic binding key matches a routing key: words are separated by ``.``,
    ``*`` matches exactly one word and ``#`` zero or more."""
    return _topic_match(_words(pattern), _words(routing_key))


def _words(key: str) -> tuple[str, ...]:
    # RabbitMQ: the empty key has no words; "a." has two ("a" and "").
    return tuple(key.split(".")) if key else ()


@functools.lru_cache(maxsize=8192)
def _topic_match(pattern: tuple[str, ...], words: tuple[str, ...]) -> bool:
    # Dynamic programming over (pattern position, word position); no recursion blow-up on
    # patterns like "#.#.#".
    reachable = {0}
    for word_index in range(len(words) + 1):
        # close over '#' that may match zero words
        frontier = list(reachable)
        while frontier:
            p = frontier.pop()
            if p < len(pattern) and pattern[p] == "#" and p + 1 not in reachable:
                reachable.add(p + 1)
                frontier.append(p + 1)
        if word_index == len(words):
            return len(pattern) in reachable
        word = words[word_index]
        following: set[int] = set()
        for p in reachable:
            if p >= len(pattern):
                continue
            part = pattern[p]
            if part == "#":
                following.add(p)  # '#' eats this word and may eat more
            elif part == "*" or part == word:
                following.add(p + 1)
        if not following:
            return False
        reachable = following
    raise AssertionError("unreachable")


def _headers_match(arguments: FieldTable, headers: FieldTable | None) -> bool:
    mode = arguments.get("x-match", "all")
    with_x = mode in ("all-with-x", "any-with-x")
    want_all = mode in ("all", "all-with-x")
    headers = headers or {}
    for key, expected in arguments.items():
        if key == "x-match" or (key.startswith("x-") and not with_x):
            continue
        matched = key in headers and (expected is None or same_value(headers[key], expected))
        if want_all and not matched:
            return False
        if not want_all and matched:
            return True
    return want_all


@final
class Exchange(Generic[Q]):
    """A named router: direct, fanout, topic or headers (or the nameless default)."""

    __slots__ = (
        "arguments",
        "auto_delete",
        "bindings",
        "by_key",
        "deleted",
        "durable",
        "incoming",
        "internal",
        "name",
        "policy_alternate",
        "type",
    )

    def __init__(
        self,
        name: str,
        type_: str,
        *,
        durable: bool = False,
        auto_delete: bool = False,
        internal: bool = False,
        arguments: FieldTable | None = None,
    ) -> None:
        self.name = name
        self.type = type_
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments: FieldTable = dict(arguments or {})
        #: Bindings with this exchange as source, by identity key.
        self.bindings: dict[BindingKey, Binding[Q]] = {}
        #: Direct exchanges: routing key -> bindings.
        self.by_key: dict[str, list[Binding[Q]]] = {}
        #: Bindings with this exchange as destination (exchange-to-exchange).
        self.incoming: dict[BindingKey, Exchange[Q]] = {}
        self.deleted = False
        #: The alternate exchange its policy names (its own argument wins), or None.
        self.policy_alternate: str | None = None

    def __repr__(self) -> str:
        return f"<Exchange {self.name!r} {self.type}>"

    def add(self, binding: Binding[Q]) -> bool:
        """Add *binding*; False when an identical one exists."""
        if binding.key in self.bindings:
            return False
        self.bindings[binding.key] = binding
        self.by_key.setdefault(binding.routing_key, []).append(binding)
        return True

    def remove(self, key: BindingKey) -> bool:
        """Remove the binding *key*; False when there is none."""
        binding = self.bindings.pop(key, None)
        if binding is None:
            return False
        same = self.by_key[binding.routing_key]
        same.remove(binding)
        if not same:
            del self.by_key[binding.routing_key]
        return True

    def matches(self, routing_key: str, headers: FieldTable | None) -> Iterator[Binding[Q]]:
        """The bindings a message with *routing_key* and *headers* follows."""
        kind = self.type
        if kind == "direct":
            yield from self.by_key.get(routing_key, ())
        elif kind == "fanout":
            yield from self.bindings.values()
        elif kind == "topic":
            words = _words(routing_key)
            for binding in self.bindings.values():
                if _topic_match(_words(binding.routing_key), words):
                    yield binding
        else:
            for binding in self.bindings.values():
                if _headers_match(binding.arguments, headers):
                    yield binding
