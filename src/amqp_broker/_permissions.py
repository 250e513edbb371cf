"""Users and what they may do in each virtual host, as RabbitMQ's ``set_permissions``.

A user has a password and, per virtual host, three regular expressions matched against the
names of queues and exchanges: *configure* (declare, delete), *write* (publish to an exchange,
bind a queue or exchange as destination) and *read* (consume, get, purge; the source of a
binding). A user given without permissions may use every virtual host and everything in it
(the broker's behaviour before permissions existed, and what ``--user NAME:PASSWORD`` means).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
from typing import TYPE_CHECKING, Final, final

import attrs

from ._errors import BrokerError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "FULL_ACCESS",
    "Permission",
    "User",
    "UserRegistry",
    "check",
    "hash_password",
    "resource_name",
]

_MATCH_ALL: Final = ".*"


def _compile(pattern: str) -> re.Pattern[str]:
    # RabbitMQ: the empty string means "nothing", like ^$; otherwise an unanchored match.
    return re.compile(pattern or "^$")


@final
@attrs.frozen
class Permission:
    """The *configure*, *write* and *read* patterns of one user in one virtual host."""

    configure: str = _MATCH_ALL
    write: str = _MATCH_ALL
    read: str = _MATCH_ALL
    _configure: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)
    _write: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)
    _read: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        for name in ("configure", "write", "read"):
            try:
                compiled = _compile(getattr(self, name))
            except re.error as exc:
                raise ValueError(f"bad {name} pattern {getattr(self, name)!r}: {exc}") from exc
            object.__setattr__(self, f"_{name}", compiled)

    def allows(self, kind: str, name: str) -> bool:
        """Whether *kind* (``configure``, ``write`` or ``read``) is allowed on *name*."""
        pattern = self._configure if kind == "configure" else self._write
        if kind == "read":
            pattern = self._read
        return pattern.search(name) is not None


#: What a user without explicit permissions gets in every virtual host.
FULL_ACCESS: Final = Permission()


def hash_password(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256``: base64 of a 4-byte salt followed by
    SHA-256 of the salt and the UTF-8 password."""
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def _hash_matches(password_hash: str, password: str) -> bool:
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except binascii.Error:
        return False
    if len(raw) != 4 + hashlib.sha256().digest_size:  # "" too: no password logs in
        return False
    return hmac.compare_digest(raw, base64.b64decode(hash_password(password, raw[:4])))


@final
@attrs.frozen
class User:
    """A user: a password, and permissions per virtual host (None: everything everywhere)."""

    password: str = attrs.field(repr=False)
    permissions: Mapping[str, Permission] | None = None
    #: RabbitMQ's user tags; the management API admits ``management``, ``policymaker``,
    #: ``monitoring`` and ``administrator``. A user given without tags is an administrator,
    #: as guest is in RabbitMQ.
    tags: tuple[str, ...] = ("administrator",)
    #: The password as RabbitMQ stores it (:func:`hash_password`); None: not hashed yet
    #: (:meth:`UserRegistry.add` hashes *password*). A user given a hash alone (the
    #: management API's ``password_hash``) logs in with whatever password matches it.
    password_hash: str | None = attrs.field(default=None, eq=False, repr=False)


@final
class UserRegistry:
    """The users a broker knows; changed at run time by its in-process API."""

    def __init__(self, users: Mapping[str, str | User] | None = None) -> None:
        self._users: dict[str, User] = {}
        for name, user in (users or {}).items():
            self.add(name, user)

    def __repr__(self) -> str:
        return f"<UserRegistry {sorted(self._users)}>"

    def __contains__(self, name: object) -> bool:
        return name in self._users

    def __len__(self) -> int:
        return len(self._users)

    def names(self) -> list[str]:
        """The user names, in the order they were added."""
        return list(self._users)

    def add(self, name: str, user: str | User) -> None:
        """Add (or replace) user *name*; a bare password means full access everywhere."""
        if not name:
            raise ValueError("a user needs a name")
        record = User(user) if isinstance(user, str) else user
        if record.password_hash is None:
            record = attrs.evolve(record, password_hash=hash_password(record.password))
        self._users[name] = record

    def delete(self, name: str) -> None:
        """Remove user *name* (open connections stay open, as in RabbitMQ)."""
        self._users.pop(name, None)

    def get(self, name: str) -> User | None:
        """User *name*, or None."""
        return self._users.get(name)

    def password(self, name: str) -> str | None:
        """The password of *name*, or None."""
        user = self._users.get(name)
        return None if user is None else user.password

    def authenticate(self, name: str, password: str) -> bool:
        """Whether *password* is *name*'s (checked against its hash, as RabbitMQ does)."""
        user = self._users.get(name)
        if user is None:
            return False
        if user.password_hash is None:
            return user.password == password
        return _hash_matches(user.password_hash, password)

    def set_permissions(
        self,
        name: str,
        vhost: str,
        configure: str = _MATCH_ALL,
        write: str = _MATCH_ALL,
        read: str = _MATCH_ALL,
    ) -> None:
        """Like ``rabbitmqctl set_permissions -p VHOST NAME CONF WRITE READ``: from now on
        *name* has exactly these permissions in *vhost* (and only the vhosts so set)."""
        user = self._users.get(name)
        if user is None:
            raise KeyError(f"no user {name!r}")
        permissions = dict(user.permissions or {})
        permissions[vhost] = Permission(configure, write, read)
        self._users[name] = attrs.evolve(user, permissions=permissions)

    def clear_permissions(self, name: str, vhost: str) -> None:
        """Like ``rabbitmqctl clear_permissions``: *name* may no longer use *vhost*."""
        user = self._users.get(name)
        if user is None:
            raise KeyError(f"no user {name!r}")
        permissions = dict(user.permissions or {})
        permissions.pop(vhost, None)
        self._users[name] = attrs.evolve(user, permissions=permissions)

    def permission(self, name: str, vhost: str) -> Permission | None:
        """What *name* may do in *vhost*; None when it may not use the vhost at all."""
        user = self._users.get(name)
        if user is None:
            return None
        if user.permissions is None:
            return FULL_ACCESS
        return user.permissions.get(vhost)


def resource_name(kind: str, name: str) -> str:
    """A resource as RabbitMQ names it in a refusal (the default exchange is amq.default)."""
    return "amq.default" if kind == "exchange" and name == "" else name


def check(permission: Permission, access: str, kind: str, name: str, vhost: str, user: str) -> None:
    """403 with RabbitMQ's text unless *permission* allows *access* on the *kind* *name*."""
    shown = resource_name(kind, name)
    if not permission.allows(access, shown):
        raise BrokerError(
            403, f"access to {kind} '{shown}' in vhost '{vhost}' refused for user '{user}'"
        )
