"""One logging setup for gunicorn's own messages and the app's: one format, one redaction.

gunicorn.conf.py hands ``logging_config(settings)`` to gunicorn as its
``logconfig_dict``: every record, gunicorn's error log and ``app.logger`` alike,
goes to standard error through one formatter, which redacts the finished line.
The request log (app/request_log.py) writes its own lines to standard output in
the same format.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from app.redaction import redact

#: Key under which the request log keeps a request's id in the WSGI environ.
REQUEST_ID_KEY = "token_service.request_id"


def timestamp(seconds: float) -> str:
    """Return a Unix time as ISO 8601 in UTC, to the millisecond: ``2026-01-31T12:00:00.123Z``."""
    whole = int(seconds)
    millis = int((seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def _request_id() -> str | None:
    """Return the id of the request being handled, if a record is logged during one."""
    from flask import has_request_context, request  # logging works without Flask too

    if has_request_context():
        return request.environ.get(REQUEST_ID_KEY)
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and request id, traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = _request_id()
        if request_id:
            line["request_id"] = request_id
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        # redacted as a whole: a credential in a message, an argument or a traceback
        return redact(orjson.dumps(line).decode())


class TextFormatter(logging.Formatter):
    """One human-readable line: ``<time> <LEVEL> <logger>: <message>``, traceback below."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record.created)} {record.levelname} {record.name}: "
        line += record.getMessage()
        request_id = _request_id()
        if request_id:
            line += f" request_id={request_id}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


FORMATTERS = {"json": JsonFormatter, "text": TextFormatter}


def logging_config(log_format: str, level: str) -> dict[str, Any]:
    """Return the ``logging.config.dictConfig`` of the service (gunicorn's logconfig_dict)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"service": {"()": FORMATTERS[log_format]}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "service",
                "stream": "ext://sys.stderr",
            }
        },
        # everything reaches the root's one handler; Flask sees it and adds none of its own
        "root": {"level": level, "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level, "handlers": [], "propagate": True},
            # gunicorn's access log is off (accesslog = None): the request log replaces it
            "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
    }
