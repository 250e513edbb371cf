"""When a connection asks its credentials provider again (refresh_delay, which the three
adapters' refreshers share): ``refresh_margin`` before expiry, never in a loop."""

from __future__ import annotations

import pytest

from amqp_sansio.client import Credentials, refresh_delay

NOW = 1_000_000.0


def test_credentials_that_never_expire_are_never_refreshed() -> None:
    assert refresh_delay(Credentials(password="p"), NOW, 60.0) is None


def test_the_margin_before_expiry() -> None:
    assert refresh_delay(Credentials(password="p", expires_at=NOW + 100), NOW, 60.0) == 40.0
    assert refresh_delay(Credentials(password="p", expires_at=NOW + 100), NOW, 0.0) == 100.0


@pytest.mark.parametrize("expires_in", [60.0, 30.0, 0.0, -10.0])
def test_credentials_inside_the_margin_are_asked_for_again_a_second_later(
    expires_in: float,
) -> None:
    # not at once: a provider whose tokens live less than the margin (or that returns its
    # cached token until it renews it) would be asked in a loop, each answer an update-secret
    credentials = Credentials(password="p", expires_at=NOW + expires_in)
    assert refresh_delay(credentials, NOW, 60.0) == 1.0
