"""The tests' fixtures, loaded from tests/fixtures/ (one module per concern).

The helpers are importable from here too (``from tests.conftest import login``), as
they always were.
"""

from __future__ import annotations

import pytest

# Before the imports below, so that their asserts report like the tests' own.
pytest.register_assert_rewrite("tests.fixtures")

from tests.fixtures.apps import DEFAULT_ALGORITHM, ServiceKey  # noqa: E402
from tests.fixtures.servers import (  # noqa: E402
    Gunicorn,
    free_port,
    fresh,
    listening_socket,
    stop_process,
    wait_until,
)
from tests.fixtures.stores import STORE_BACKENDS, store_param, stored_contents  # noqa: E402
from tests.fixtures.tokens import (  # noqa: E402
    P256_ORDER,
    bearer,
    ecdsa_twin,
    es256_signature,
    login,
    make_token,
    unsigned_token,
    valid_claims,
    with_es256_signature,
)
from tests.fixtures.tools import IN_CI, ROOT, require_tool, which  # noqa: E402

pytest_plugins = [
    "tests.fixtures.apps",
    "tests.fixtures.servers",
    "tests.fixtures.stores",
]

__all__ = [
    "DEFAULT_ALGORITHM",
    "IN_CI",
    "P256_ORDER",
    "ROOT",
    "STORE_BACKENDS",
    "Gunicorn",
    "ServiceKey",
    "bearer",
    "ecdsa_twin",
    "es256_signature",
    "free_port",
    "fresh",
    "listening_socket",
    "login",
    "make_token",
    "require_tool",
    "stop_process",
    "store_param",
    "stored_contents",
    "unsigned_token",
    "valid_claims",
    "wait_until",
    "which",
    "with_es256_signature",
]
