"""`hami whatif` tests call the CLI in process; its logging setup must not outlive the test's capture."""

from __future__ import annotations

import pytest
import structlog


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    structlog.reset_defaults()


@pytest.fixture
def cli_out(capsys):
    """capsys for in-process CLI runs: logging is reset before capsys closes (and before an
    `apiserver` requested earlier stops and logs)."""
    yield capsys
    structlog.reset_defaults()
