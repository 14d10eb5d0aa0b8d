"""bench/scale_postgres.py: its prefill writes tokens as the PostgreSQL store keeps them."""

from __future__ import annotations

import pytest

from bench import scale_postgres
from tests.helpers.stores import open_store

pytestmark = pytest.mark.postgres


def test_the_prefill_writes_live_tokens_of_the_stores_own_layout(postgres_url):
    scale_postgres.prefill(postgres_url, 10, batch=4)
    store = open_store(postgres_url, timeout=2)
    assert store.count() == 10
    assert [len(store.tokens_of(f"user{n}")) for n in range(3)] == [4, 4, 2]
