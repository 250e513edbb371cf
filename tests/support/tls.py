"""A throw-away TLS certificate for tests: self-signed, for ``localhost``, valid for a day."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["self_signed_certificate"]


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """Write ``cert.pem`` and ``key.pem`` for ``localhost`` into *directory* (openssl)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key
