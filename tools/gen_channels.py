#!/usr/bin/env python3
"""Generate each client adapter's channel methods (and 0-10 session methods) from the client
layer's requests tables.

``amqp_sansio.client.REQUESTS`` declares every channel method that sends one request (the method
class, the arguments with their types and defaults, what it returns and how the reply is read,
the docstring). This tool writes one module per adapter, ``src/<adapter>/_generated_channel.py``,
holding a base class of the adapter's ``Channel`` with those methods, in the adapter's flavour:
``async`` in ``amqp_trio`` and ``amqp_asyncio``, blocking with a ``timeout`` argument in
``amqp_blocking``. The methods call a few hooks the hand-written ``Channel`` supplies (declared
abstract here, so mypy checks that each adapter has them): ``_call`` (send a request and wait
for its reply), ``_send_no_reply``, ``_has_reply`` (whether the connection's version answers a
method: a request with no reply in some version, 0-9's ``basic.recover``, asks it before
waiting), ``_check_open``, ``_got_message``, and its router book.

``amqp_sansio.v0_10.client.SESSION_REQUESTS`` does the same for the 0-10 session methods that
execute one command; they go to ``src/<adapter>/_generated_session.py``, a base class of the
adapter's ``Session010`` whose one hook is ``execute``.

``python tools/gen_channels.py`` rewrites the modules; ``--check`` exits 1 when one is stale.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

import amqp_sansio
import amqp_sansio.v0_10
from amqp_sansio.client import REQUESTS, Param, Request
from amqp_sansio.v0_10.client import SESSION_REQUESTS, SessionRequest

if TYPE_CHECKING:
    from collections.abc import Sequence

ROOT: Final = Path(__file__).resolve().parent.parent

#: The names annotations may use besides builtins: from amqp_sansio, or the adapter's own.
_BUILTINS: Final = frozenset({"None", "bool", "bytes", "float", "int", "str"})
_ADAPTER_NAMES: Final = frozenset({"Message"})


@attrs.frozen
class Adapter:
    """How one adapter's channel methods look."""

    #: The import package (``amqp_trio``).
    package: str
    #: ``async def`` methods that ``await`` the hooks.
    is_async: bool
    #: Requests with a reply take ``timeout: float | None = None`` (seconds) last.
    timeout: bool
    #: The module, relative to the package, that defines the adapter's ``Message``.
    message_module: str

    @property
    def path(self) -> Path:
        return ROOT / "src" / self.package / "_generated_channel.py"

    @property
    def session_path(self) -> Path:
        return ROOT / "src" / self.package / "_generated_session.py"


ADAPTERS: Final = (
    Adapter("amqp_trio", is_async=True, timeout=False, message_module="._message"),
    Adapter("amqp_asyncio", is_async=True, timeout=False, message_module="._channel"),
    Adapter("amqp_blocking", is_async=False, timeout=True, message_module="._channel"),
)

_TIMEOUT: Final = Param("timeout", "float | None", None, keyword_only=True)


def check(request: Request) -> None:
    """Refuse a table entry the generated code could not honour."""
    fields = {name for name, _ in request.method.FIELDS}
    for param in request.params:
        if param.target not in fields:
            raise SystemExit(
                f"{request.name}: {param.name} fills {param.target!r}, which "
                f"{request.method.__name__} does not have"
            )
        if param.table and param.default is not None:
            raise SystemExit(
                f"{request.name}: the table argument {param.name} must default to None"
            )
    seen_default = False
    for param in request.params:
        if param.keyword_only:
            continue
        if param.required and seen_default:
            raise SystemExit(f"{request.name}: {param.name} has no default after one that has")
        seen_default = seen_default or not param.required
    if request.reader is not None and request.adapt is not None:
        raise SystemExit(f"{request.name}: a reader or an adapt hook, not both")
    if request.no_reply_in and (
        request.returns != "None" or request.reader or request.adapt or request.once
    ):
        versions = ", ".join(version.value for version in request.no_reply_in)
        raise SystemExit(
            f"{request.name}: AMQP {versions} gives it no reply, so it can return nothing"
        )
    if (
        request.reader is not None
        and getattr(amqp_sansio.client, request.reader.__name__, None) is not request.reader
    ):
        raise SystemExit(f"{request.name}: the reader must be public in amqp_sansio.client")


def names_in(annotation: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", annotation)) - _BUILTINS


def signature(adapter: Adapter, request: Request) -> list[str]:
    params = list(request.params)
    if adapter.timeout and request.expects_reply:
        params.append(_TIMEOUT)
    return parameter_list(params)


def parameter_list(params: Sequence[Param]) -> list[str]:
    parts = ["self"]
    star = False
    for param in params:
        if param.keyword_only and not star:
            parts.append("*")
            star = True
        default = "" if param.required else f" = {param.default!r}"
        parts.append(f"{param.name}: {param.annotation}{default}")
    return parts


def docstring(text: str, indent: str) -> str:
    if '"""' in text or "\\" in text or text.endswith('"'):
        raise SystemExit(f"docstring needs escaping, which this tool does not do: {text!r}")
    lines = text.splitlines()
    body = "\n".join(f"{indent}{line}" if line else "" for line in lines[1:])
    if len(lines) == 1:
        return f'{indent}"""{lines[0]}"""'
    return f'{indent}"""{lines[0]}\n{body}"""'


def method_source(adapter: Adapter, request: Request) -> list[str]:
    await_ = "await " if adapter.is_async else ""
    define = "async def" if adapter.is_async else "def"
    params = ", ".join(signature(adapter, request))
    lines = [
        f"    {define} {request.name}({params}) -> {request.returns}:",
        docstring(request.doc_for(adapter.package), " " * 8),
    ]
    if request.once is not None:
        lines += [
            f"        if self._book.{request.once}:",
            "            self._check_open()",
            "            return",
        ]
    fields = ", ".join(
        f"{param.target}={param.name} or {{}}" if param.table else f"{param.target}={param.name}"
        for param in request.params
    )
    built = f"{request.method.__name__}({fields})"
    if not request.expects_reply:
        lines.append(f"        {await_}self._send_no_reply({built})")
        return lines
    if request.no_reply_in:
        # waiting for a reply the negotiated version does not have would never end
        versions = ", ".join(version.value for version in request.no_reply_in)
        lines += [
            f"        request = {built}",
            f"        if not self._has_reply(request):  # none in AMQP {versions}",
            f"            {await_}self._send_no_reply(request)",
            "            return",
        ]
        built = "request"
    call = (
        f"{await_}self._call({built}, timeout)"
        if adapter.timeout
        else f"{await_}self._call({built})"
    )
    if request.reader is not None:
        lines.append(f"        return {request.reader.__name__}({call})")
    elif request.adapt is not None:
        lines.append(f"        return self.{request.adapt}({call})")
    else:
        lines.append(f"        {call}")
    return lines


def hooks(adapter: Adapter) -> list[str]:
    define = "async def" if adapter.is_async else "def"
    timeout = ", timeout: float | None" if adapter.timeout else ""
    lines = [
        "    #: The router's book of the channel (its flags: ``confirm_mode``, ...).",
        "    _book: ChannelBook",
        "",
        "    @abstractmethod",
        f"    {define} _call(self, method: Method{timeout}) -> Reply:",
        '        """Send *method* and wait for its reply (raised when it is an error)."""',
        "",
        "    @abstractmethod",
        f"    {define} _send_no_reply(self, method: Method) -> None:",
        '        """Send *method*, which has no reply."""',
        "",
        "    @abstractmethod",
        "    def _has_reply(self, method: Method) -> bool:",
        '        """Whether the connection\'s version answers *method* (0-9\'s basic.recover does',
        '        not)."""',
        "",
        "    @abstractmethod",
        "    def _check_open(self) -> None:",
        '        """Raise the channel\'s or the connection\'s error unless both are open."""',
    ]
    for adapt in sorted({r.adapt for r in REQUESTS if r.adapt is not None}):
        returns = next(r.returns for r in REQUESTS if r.adapt == adapt)
        lines += [
            "",
            "    @abstractmethod",
            f"    def {adapt}(self, reply: Reply) -> {returns}:",
            '        """The return value of a request whose reply the adapter reads itself."""',
        ]
    return lines


def generate(adapter: Adapter) -> str:
    for request in REQUESTS:
        check(request)
    classes = sorted({r.method.__name__ for r in REQUESTS})
    readers = sorted({r.reader.__name__ for r in REQUESTS if r.reader is not None})
    annotated: set[str] = {"Method"}
    for request in REQUESTS:
        annotated |= names_in(request.returns)
        for param in request.params:
            annotated |= names_in(param.annotation)
    unknown = annotated - _ADAPTER_NAMES - set(amqp_sansio.__all__)
    if unknown:
        raise SystemExit(f"annotations name what this tool cannot import: {sorted(unknown)}")
    core_types = sorted(annotated - _ADAPTER_NAMES)
    local_types = sorted(annotated & _ADAPTER_NAMES)
    kind = "awaitable" if adapter.is_async else "blocking"
    lines = [
        "# ******* WARNING: AUTOGENERATED! ALL EDITS WILL BE LOST ******",
        "# Generated by tools/gen_channels.py from amqp_sansio.client.REQUESTS, the channel API",
        "# declared once; `python tools/gen_channels.py --check` fails when this file is stale.",
        f'"""The {kind} channel methods of ``{adapter.package}`` that send one request each.',
        "",
        f"``{adapter.package}.Channel`` inherits them and supplies the hooks they call; what only",
        "this adapter does (publishing, consuming, closing) is written there.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from abc import abstractmethod",
        "from typing import TYPE_CHECKING",
        "",
        f"from amqp_sansio import {', '.join(classes)}",
    ]
    if readers:
        lines.append(f"from amqp_sansio.client import {', '.join(readers)}")
    lines += [
        "",
        "if TYPE_CHECKING:",
        f"    from amqp_sansio import {', '.join(core_types)}",
        "    from amqp_sansio.client import ChannelBook, Reply",
    ]
    if local_types:
        lines.append(f"    from {adapter.message_module} import {', '.join(local_types)}")
    lines += [
        "",
        '__all__ = ["ChannelMethods"]',
        "",
        "",
        "class ChannelMethods:",
        f'    """The channel methods of ``{adapter.package}`` from the requests table."""',
        "",
        "    __slots__ = ()",
        "",
        *hooks(adapter),
    ]
    for request in REQUESTS:
        lines += ["", *method_source(adapter, request)]
    return format_source("\n".join(lines) + "\n", adapter.path)


# --- The 0-10 session methods ----------------------------------------------------------------


def check_session(request: SessionRequest) -> None:
    """Refuse a session table entry the generated code could not honour."""
    fields = {name for name, _ in request.command.FIELDS}
    for param in request.params:
        if param.target not in fields or param.table:
            raise SystemExit(
                f"{request.name}: {param.name} is not a field of {request.command.__name__}"
            )
    if request.result is not None and request.command.RESULT is not request.result:
        raise SystemExit(f"{request.name}: {request.command.__name__} has no such result")


def session_method_source(adapter: Adapter, request: SessionRequest) -> list[str]:
    await_ = "await " if adapter.is_async else ""
    define = "async def" if adapter.is_async else "def"
    params = ", ".join(parameter_list(request.params))
    returns = "None" if request.result is None else request.result.__name__
    fields = ", ".join(f"{param.target}={param.name}" for param in request.params)
    call = f"{await_}self.execute({request.command.__name__}({fields}))"
    lines = [
        f"    {define} {request.name}({params}) -> {returns}:",
        docstring(request.doc, " " * 8),
    ]
    if request.result is None:
        return [*lines, f"        {call}"]
    return [
        *lines,
        f"        result = {call}",
        f"        assert isinstance(result, {returns})",
        "        return result",
    ]


def generate_session(adapter: Adapter) -> str:
    for request in SESSION_REQUESTS:
        check_session(request)
    names = {r.command.__name__ for r in SESSION_REQUESTS}
    names |= {r.result.__name__ for r in SESSION_REQUESTS if r.result is not None}
    annotated = {"Command", "Struct"}
    for request in SESSION_REQUESTS:
        for param in request.params:
            annotated |= names_in(param.annotation)
    unknown = (annotated | names) - set(amqp_sansio.v0_10.__all__)
    if unknown:
        raise SystemExit(f"annotations name what this tool cannot import: {sorted(unknown)}")
    kind = "awaitable" if adapter.is_async else "blocking"
    define = "async def" if adapter.is_async else "def"
    lines = [
        "# ******* WARNING: AUTOGENERATED! ALL EDITS WILL BE LOST ******",
        "# Generated by tools/gen_channels.py from amqp_sansio.v0_10.client.SESSION_REQUESTS, the",
        "# 0-10 session API declared once; `python tools/gen_channels.py --check` fails when this",
        "# file is stale.",
        f'"""The {kind} 0-10 session methods of ``{adapter.package}``, one command each.',
        "",
        f"``{adapter.package}.Session010`` inherits them and supplies ``execute``; what only this",
        "adapter does (transfers, subscriptions, closing) is written there.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from abc import abstractmethod",
        "from typing import TYPE_CHECKING",
        "",
        f"from amqp_sansio.v0_10 import {', '.join(sorted(names))}",
        "",
        "if TYPE_CHECKING:",
        f"    from amqp_sansio.v0_10 import {', '.join(sorted(annotated - names))}",
        "",
        '__all__ = ["SessionMethods"]',
        "",
        "",
        "class SessionMethods:",
        f'    """The 0-10 session methods of ``{adapter.package}`` from the session table."""',
        "",
        "    __slots__ = ()",
        "",
        "    @abstractmethod",
        f"    {define} execute(",
        "        self,",
        "        command: Command,",
        "        *,",
        "        headers: tuple[Struct, ...] | None = None,",
        "        body: bytes | None = None,",
        "    ) -> Struct | None:",
        '        """Send any command with the sync bit; return its result (None without one)."""',
    ]
    for request in SESSION_REQUESTS:
        lines += ["", *session_method_source(adapter, request)]
    return format_source("\n".join(lines) + "\n", adapter.session_path)


def format_source(source: str, path: Path) -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        raise SystemExit("ruff is needed to format the generated code (make test installs it)")
    for args in (["check", "--fix-only", "--exit-zero", "--quiet"], ["format", "--quiet"]):
        source = subprocess.run(
            [ruff, *args, "--stdin-filename", str(path), "-"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
    return source


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if a generated module is stale"
    )
    args = parser.parse_args(argv)
    stale = []
    for adapter in ADAPTERS:
        for path, source in (
            (adapter.path, generate(adapter)),
            (adapter.session_path, generate_session(adapter)),
        ):
            if args.check:
                if not path.exists() or path.read_text() != source:
                    stale.append(path.relative_to(ROOT))
            else:
                path.write_text(source)
                print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(
            "Generated sources are stale; run `python tools/gen_channels.py`:", *stale, sep="\n  "
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
