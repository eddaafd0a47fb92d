"""Hermes' agent.log written the way Hermes writes it, for the tests of the log watch."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

HERMES_FORMAT = "%(asctime)s %(levelname)s%(session_tag)s %(name)s: %(message)s"


class _SessionTag(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        sid = getattr(record, "session_id", None)
        record.session_tag = f" [{sid}]" if sid else ""
        return True


def hermes_logger(
    logs_dir: Path, name: str, *, max_bytes: int = 5 * 2**20, backups: int = 3
) -> logging.Logger:
    """A logger writing agent.log exactly as Hermes configures it (RotatingFileHandler)."""
    logger = logging.getLogger(f"hermes-test.{logs_dir}.{name}")
    logger.handlers.clear()
    logger.propagate = False
    handler = logging.handlers.RotatingFileHandler(
        logs_dir / "agent.log", maxBytes=max_bytes, backupCount=backups
    )
    handler.setFormatter(logging.Formatter(HERMES_FORMAT))
    handler.addFilter(_SessionTag())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    return logger


def malformed(logger: logging.Logger) -> None:
    try:
        raise RuntimeError("database disk image is malformed")
    except RuntimeError:
        logger.exception(
            "gateway.session: state.db routing save failed: database disk image is malformed"
        )
