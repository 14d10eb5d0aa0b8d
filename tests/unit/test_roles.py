"""The role rule on its own: admin passes where user does, and no unknown role is named."""

from __future__ import annotations

import pytest

from app.http.guards import requires_roles, role_allows


@pytest.mark.parametrize(
    ("role", "required", "allowed"),
    [
        ("user", (), True),
        ("admin", (), True),
        ("user", ("user",), True),
        ("admin", ("user",), True),
        ("user", ("admin",), False),
        ("admin", ("admin",), True),
        ("user", ("admin", "user"), True),
    ],
)
def test_role_rule(role, required, allowed):
    assert role_allows(role, required) is allowed


def test_unknown_role_is_refused_when_decorating():
    with pytest.raises(ValueError, match="unknown roles"):
        requires_roles("superuser")
