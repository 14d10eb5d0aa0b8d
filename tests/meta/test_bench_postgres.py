"""The bench's prefill on PostgreSQL: through the store's own ``issue``, in its own layout."""

from __future__ import annotations

import pytest

from bench import servers
from tests.helpers.stores import open_store

pytestmark = pytest.mark.postgres


def test_the_prefill_writes_live_tokens_through_the_store(postgres_url):
    servers.prefill(postgres_url, 10)
    assert servers.stored(postgres_url) == 10
    store = open_store(postgres_url, timeout=2)
    assert [len(store.tokens_of(f"user{n}")) for n in range(3)] == [4, 4, 2]
