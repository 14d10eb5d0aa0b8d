"""One logging setup for gunicorn's own messages and the app's: one format, one redaction.

gunicorn.conf.py hands ``logging_config(settings)`` to gunicorn as its
``logconfig_dict``: every record, gunicorn's error log and ``app.logger`` alike,
goes to standard error through one formatter, which redacts the finished line.
The request log (app/http/request_log.py) writes its own lines to standard output in
the same format.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import orjson
from gunicorn.glogging import Logger as GunicornLogger

from app.observability.redaction import redact

#: Key under which the request log keeps a request's id in the WSGI environ.
REQUEST_ID_KEY = "token_service.request_id"
#: Attributes every log record has: anything else came in ``extra`` (``event``...).
RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


#: Characters that end a bare word of a text line, or start a quoted one.
WORD_BREAKS = frozenset(' "\\')


def quoted(text: str) -> str:
    """Return ``text`` as a JSON string whose every character is printable (one line, always)."""
    dumped = json.dumps(text, ensure_ascii=False)  # escapes C0 controls, quote and backslash
    if dumped.isprintable():
        return dumped
    # DEL, C1 controls, U+2028 and the like: line breaks to some readers, tricks to eyes
    return "".join(char if char.isprintable() else _escaped_code_point(char) for char in dumped)


def _escaped_code_point(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP: a UTF-16 surrogate pair, as JSON spells it
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def word(text: str | None) -> str:
    """Return ``text`` as one word of a text line: bare when plain, else quoted; None is -."""
    if text is None:
        return "-"
    if text and text != "-" and text.isprintable() and WORD_BREAKS.isdisjoint(text):
        return text
    return quoted(text)


def one_line(text: str) -> str:
    """Return ``text`` with every character that is not printable escaped: one line, always."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else quoted(char)[1:-1] for char in text)


def structured_fields(record: logging.LogRecord) -> dict[str, Any]:
    """Return the fields a record was given in ``extra``: ``event``, ``user``, ``family``..."""
    return {name: value for name, value in vars(record).items() if name not in RECORD_ATTRIBUTES}


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
    """One JSON object per line: time, level, logger, message (and request id, the fields
    given in ``extra``, traceback)."""

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
        for name, value in structured_fields(record).items():
            line.setdefault(name, value)  # never in place of one of the fields above
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        # redacted as a whole: a credential in a message, an argument, a field or a traceback
        return redact(orjson.dumps(line, default=str).decode())


class TextFormatter(logging.Formatter):
    """One human-readable line: ``<time> <LEVEL> <logger>: <message>``, then ``name=value``
    for the request id and each field given in ``extra``; the traceback below."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{timestamp(record.created)} {record.levelname} {record.name}: "
        line += one_line(record.getMessage())  # a message quoting client input stays one line
        request_id = _request_id()
        if request_id:
            line += f" request_id={request_id}"
        for name, value in structured_fields(record).items():
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            line += f" {name}={word(text)}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


FORMATTERS = {"json": JsonFormatter, "text": TextFormatter}


class ServiceGunicornLogger(GunicornLogger):
    """gunicorn's logger with its access log off for good: the request log replaces it.

    gunicorn takes a ``logconfig_dict`` as a sign that access lines are wanted, and
    then builds some 40 access-log atoms for every request even though its access
    logger writes nothing. Here ``access`` does nothing, and ``access_log_enabled``
    tells gunicorn's workers that asks it not to prepare anything for it.
    """

    @property
    def access_log_enabled(self) -> bool:
        return False

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        return None


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
