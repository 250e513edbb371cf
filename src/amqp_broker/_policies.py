"""Policies, as ``rabbitmqctl set_policy``: a name, a regular expression over queue (and
exchange) names, what it applies to, a priority and a definition (``{"max-length": 10,
"dead-letter-exchange": "dlx"}``). A queue or exchange follows the one matching policy of the
highest priority; where the queue also has the argument, RabbitMQ 3.10's rule says which wins
(:data:`RESOLUTION`; an exchange's own ``alternate-exchange`` wins over its policy's).

Only the settings the broker implements are accepted (:data:`POLICY_KEYS`); anything else is
refused as ``rabbitmqctl`` refuses an unknown setting.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final, final

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = [
    "APPLY_TO",
    "OPERATOR_POLICY_KEYS",
    "POLICY_KEYS",
    "RESOLUTION",
    "Policy",
    "matching",
    "matching_exchange",
]


#: What a policy may apply to: RabbitMQ 3.10's three, and 3.13's queue types.
APPLY_TO: Final = frozenset(
    ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
)

_MODES: Final = frozenset(("drop-head", "reject-publish", "reject-publish-dlx"))
_STRATEGIES: Final = frozenset(("at-most-once", "at-least-once"))
_LOCATORS: Final = frozenset(("client-local", "balanced", "random", "least-leaders"))


def _non_negative(what: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"{value!r} is not a valid {what}"
        return None

    return check


def _positive(what: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{value!r} is not a valid {what}"
        return None

    return check


def _one_of(what: str, values: frozenset[str]) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if value not in values:
            return f"{value!r} is not a valid {what}"
        return None

    return check


def _text(what: str) -> Callable[[object], str | None]:
    def check(value: object) -> str | None:
        if not isinstance(value, str):
            return f"{value!r} is not a valid {what}"
        return None

    return check


#: The queue settings a policy may hold here, each with its check.
POLICY_KEYS: Final[dict[str, Callable[[object], str | None]]] = {
    "message-ttl": _non_negative("message TTL"),
    "expires": _positive("expiry"),
    "max-length": _non_negative("maximum length"),
    "max-length-bytes": _non_negative("maximum length in bytes"),
    "overflow": _one_of("overflow", _MODES),
    "dead-letter-exchange": _text("dead-letter exchange"),
    "dead-letter-routing-key": _text("dead-letter routing key"),
    "delivery-limit": _non_negative("delivery limit"),
    "dead-letter-strategy": _one_of("dead-letter strategy", _STRATEGIES),
    "queue-leader-locator": _one_of("queue leader locator", _LOCATORS),
    "alternate-exchange": _text("alternate exchange"),
}

#: What an operator policy may hold (RabbitMQ 3.10's operator policy validator, less the
#: in-memory limits, which mean nothing here): caps, the lower value winning.
OPERATOR_POLICY_KEYS: Final = frozenset(
    ("expires", "message-ttl", "max-length", "max-length-bytes", "delivery-limit")
)

#: How a queue's argument and its policy's value combine, as RabbitMQ 3.10's
#: ``args_policy_lookup``: ``min`` the lower, ``argument`` the argument when given. (Quorum
#: queues let the policy's ``overflow`` win; see :meth:`~._queues.Queue.apply_policy`.)
RESOLUTION: Final = {
    "message-ttl": "min",
    "expires": "min",
    "max-length": "min",
    "max-length-bytes": "min",
    "delivery-limit": "min",
    "overflow": "argument",
    "dead-letter-exchange": "argument",
    "dead-letter-routing-key": "argument",
    "dead-letter-strategy": "argument",
}


def _check_definition(
    instance: object, attribute: object, definition: Mapping[str, object]
) -> None:
    unknown = sorted(key for key in definition if key not in POLICY_KEYS)
    if unknown:
        raise ValueError(
            f"{', '.join(map(repr, unknown))}: not recognised policy settings (the broker "
            f"applies {', '.join(sorted(POLICY_KEYS))})"
        )
    for key, value in definition.items():
        problem = POLICY_KEYS[key](value)
        if problem is not None:
            raise ValueError(f"{key}: {problem}")


def _as_dict(definition: Mapping[str, object]) -> dict[str, object]:
    return dict(definition)


def _check_apply_to(instance: object, attribute: object, value: str) -> None:
    if value not in APPLY_TO:
        raise ValueError(f"apply_to is one of {', '.join(sorted(APPLY_TO))}, not {value!r}")


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"bad policy pattern {pattern!r}: {exc}") from None


@final
@attrs.frozen
class Policy:
    """One policy of a virtual host (``rabbitmqctl set_policy -p VHOST --priority PRIORITY
    --apply-to APPLY_TO NAME PATTERN DEFINITION``).

    :raises ValueError: an unknown setting or a bad value in *definition*, a bad pattern, an
        unknown *apply_to*.
    """

    name: str
    #: A regular expression, searched (not anchored) in queue names, as RabbitMQ does.
    pattern: str
    definition: Mapping[str, object] = attrs.field(converter=_as_dict, validator=_check_definition)
    priority: int = 0
    apply_to: str = attrs.field(default="all", validator=_check_apply_to)
    _regex: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_regex", _compile(self.pattern))

    def applies_to_queue(self, name: str, queue_type: str) -> bool:
        """Whether this policy would apply to a queue *name* of *queue_type*."""
        scope = self.apply_to
        if scope == "exchanges":
            return False
        if scope not in ("all", "queues"):
            wanted = {"classic_queues": "classic", "quorum_queues": "quorum"}.get(scope, "stream")
            if queue_type != wanted:
                return False
        return self._regex.search(name) is not None

    def applies_to_exchange(self, name: str) -> bool:
        """Whether this policy would apply to the exchange *name*."""
        return self.apply_to in ("all", "exchanges") and self._regex.search(name) is not None


def matching_exchange(policies: Mapping[str, Policy], name: str) -> Policy | None:
    """The policy that applies to the exchange *name* (as :func:`matching` for queues)."""
    found: Policy | None = None
    for policy in sorted(policies.values(), key=lambda p: p.name):
        if policy.applies_to_exchange(name) and (found is None or policy.priority > found.priority):
            found = policy
    return found


def matching(policies: Mapping[str, Policy], name: str, queue_type: str) -> Policy | None:
    """The policy that applies to the queue *name*: of those that match, the one of the
    highest priority (among equals, the first by name; RabbitMQ leaves it undefined)."""
    found: Policy | None = None
    for policy in sorted(policies.values(), key=lambda p: p.name):
        if policy.applies_to_queue(name, queue_type) and (
            found is None or policy.priority > found.priority
        ):
            found = policy
    return found
