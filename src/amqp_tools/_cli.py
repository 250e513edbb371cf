"""What the three commands share: exit statuses, error messages without tracebacks, and the
handling of Ctrl-C and of a closed pipe (``amqp-decode x.pcap | head``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "EXIT_AMQP_ERROR",
    "EXIT_COMMAND_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PROBLEMS",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "ArgumentParser",
    "UsageError",
    "run",
]

EXIT_OK: Final = 0
#: amqp-decode: the capture was decoded, with problems (malformed frames, missing octets, ...).
EXIT_PROBLEMS: Final = 1
#: amqp-publish/amqp-consume: the broker refused or closed something, or the link was lost.
EXIT_AMQP_ERROR: Final = 1
#: A bad option or URL; amqp-decode: a file that is not a capture.
EXIT_USAGE: Final = 2
#: The broker could not be reached (refused, timed out, unknown host, TLS failed).
EXIT_UNREACHABLE: Final = 3
#: amqp-consume: the command run for a message failed.
EXIT_COMMAND_FAILED: Final = 4
#: Interrupted (Ctrl-C), as shells report SIGINT.
EXIT_INTERRUPTED: Final = 130


class UsageError(Exception):
    """A problem with the command line that argparse cannot see (conflicting options, ...)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the exit status of :data:`EXIT_USAGE` and the program's name on errors."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def run(prog: str, main: Callable[[Sequence[str]], int], argv: Sequence[str] | None) -> int:
    """Run *main* with Ctrl-C and a closed stdout handled: never a traceback for those."""
    args = sys.argv[1:] if argv is None else argv
    try:
        status = main(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (| head): stop quietly, and keep Python from complaining
        # about the unflushed stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_OK
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return status
