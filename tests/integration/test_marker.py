"""Integration tests carry the ``integration`` marker without declaring it themselves."""

from __future__ import annotations

import pytest


def test_integration_tests_carry_the_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is not None
