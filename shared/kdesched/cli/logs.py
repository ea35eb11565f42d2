"""Logging for every ``kdesched`` command: text for people, or one JSON object a line.

Why a module of its own: the commands (:mod:`kdesched.cli.main`) only choose the level and the
format (``-v``/``-q``, ``--log-format``, ``$LOG_FORMAT``); what a line holds, and what the
standard library need not collect for it, is decided here once.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

_RECORD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, msg, and every field a caller passed in
    ``extra=`` (the reactor's profile/strategy/node/pod/trigger, the functions' function/ce_type/
    ce_id/status...), whatever its name: a list of known keys here silently dropped the others."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRIBUTES and key not in data:
                data[key] = value
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(verbosity: int, fmt: str | None = None) -> None:
    level = logging.WARNING if verbosity < 0 else (logging.INFO if verbosity == 0 else logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    if (fmt or os.environ.get("LOG_FORMAT", "text")) == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    # neither format shows threads, processes or source lines: do not collect them per record
    # (a 150,000-pod simulate logs ~33,000 lines; docs/benchmarks.md)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # urllib3 logs each transport retry as a WARNING in its own words ("Retrying (Retry(total=1...");
    # kdesched reports the final failure itself, naming the server. Shown with -vv.
    logging.getLogger("urllib3").setLevel(logging.DEBUG if verbosity > 1 else logging.ERROR)
