"""A logger's records, captured in a test.

NOTE: ``configure_logging()`` stops propagation to the root logger, so ``caplog`` misses
the gateway's records once any test of the run has started a server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from gateway.server import logger as server_logger


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def captured(logger: logging.Logger) -> Iterator[list[logging.LogRecord]]:
    """The records ``logger`` emits at INFO and above inside the ``with``."""
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(name="records")
def records_fixture() -> Iterator[list[logging.LogRecord]]:
    """``records``: the gateway server logger's records during the test. A test module
    that imports this function has the fixture."""
    with captured(server_logger) as found:
        yield found
