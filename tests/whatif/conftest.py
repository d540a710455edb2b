"""`hami whatif` tests call the CLI in process; its logging setup must not outlive the test's capture."""

from __future__ import annotations

import pytest
import structlog


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    structlog.reset_defaults()
