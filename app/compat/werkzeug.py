"""What the service changes of Werkzeug's request: a query that is not UTF-8 is a 400.

Werkzeug decodes ``request.args`` from the raw query strictly, so a byte 0x80-0xFF that
no percent-encoding hides raises UnicodeDecodeError: a 500 wherever an endpoint reads
its query (``?after=``, ``?role=``, ``?rd=``). The service's request refuses it with a
400 instead, for every endpoint at once. It overrides a public property of a class Flask
lets an app replace (``Flask.request_class``).

tests/unit/test_compat.py checks on the installed release that Werkzeug still raises.
"""

from __future__ import annotations

from flask import Request
from werkzeug.datastructures import MultiDict
from werkzeug.exceptions import BadRequest
from werkzeug.utils import cached_property

#: The distribution and the release (major.minor) whose behaviour was checked.
DISTRIBUTION = "Werkzeug"
CHECKED_VERSION = "3.1"


class ServiceRequest(Request):
    """Flask's request, whose query is a 400 rather than a 500 when it is not UTF-8."""

    @cached_property
    def args(self) -> MultiDict[str, str]:
        try:
            self.query_string.decode()
        except UnicodeDecodeError:
            raise BadRequest("the query is not UTF-8 (percent-encode other bytes)") from None
        return super().args
