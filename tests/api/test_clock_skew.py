"""Clock skew between hosts: an ``iat`` a little in the future passes, ``exp`` has no leeway."""

from __future__ import annotations

import time

import pytest

from tests.helpers.clock import ManualClock
from tests.helpers.tokens import bearer, make_token, valid_claims

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA")

SKEW = 30  # CLOCK_SKEW's default
USER = {"source": "corp", "id": "248289761001", "shownName": "Jane Doe"}


@pytest.fixture
def clock() -> ManualClock:
    """The service's clock, frozen on a whole second, so that +1 s is exactly +1 s."""
    return ManualClock()


@pytest.fixture
def now(clock, monkeypatch) -> int:
    """Return the frozen second, which the claims the tests make read too."""
    frozen = int(clock())
    monkeypatch.setattr(time, "time", lambda: float(frozen))
    return frozen


@pytest.fixture
def client(make_app, clock):
    return make_app(clock=clock).test_client()


def bearer_status(client, key, **claims) -> int:
    token = make_token(key, valid_claims(**claims))
    return client.get("/user-accessible", headers=bearer(token)).status_code


def cookie_status(client, key, **claims) -> int:
    client.set_cookie("jwt", make_token(key, {"sub": USER, **claims}))
    return client.get("/api/v1/me").status_code


@pytest.mark.parametrize(("ahead", "status"), [(1, 200), (SKEW, 200), (SKEW + 1, 401)])
def test_bearer_token_iat_may_be_ahead_by_the_skew_only(client, signing_key, now, ahead, status):
    assert bearer_status(client, signing_key, iat=now + ahead, exp=now + 120) == status


@pytest.mark.parametrize(("ahead", "status"), [(1, 200), (SKEW, 200), (SKEW + 1, 401)])
def test_cookie_token_iat_may_be_ahead_by_the_skew_only(client, signing_key, now, ahead, status):
    assert cookie_status(client, signing_key, iat=now + ahead, exp=now + 120) == status


@pytest.mark.parametrize(("ahead", "status"), [(SKEW, 200), (SKEW + 1, 401)])
def test_nbf_gets_the_same_skew(client, signing_key, now, ahead, status):
    assert bearer_status(client, signing_key, nbf=now + ahead) == status
    assert cookie_status(client, signing_key, nbf=now + ahead, exp=now + 120) == status


@pytest.mark.parametrize(
    ("skew", "ahead", "status"), [(0, 1, 401), (0, 0, 200), (5, 5, 200), (5, 6, 401)]
)
def test_clock_skew_is_a_setting(make_app, clock, signing_key, now, skew, ahead, status):
    client = make_app(CLOCK_SKEW=str(skew), clock=clock).test_client()
    assert bearer_status(client, signing_key, iat=now + ahead, exp=now + 120) == status


def test_exp_has_no_leeway_whatever_the_skew(client, signing_key, now):
    assert bearer_status(client, signing_key, iat=now - 60, exp=now) == 401
    assert bearer_status(client, signing_key, iat=now - 60, exp=now + 1) == 200
    assert cookie_status(client, signing_key, exp=now) == 401


@pytest.mark.parametrize("iat", ["soon", True, None])
def test_cookie_token_iat_of_the_wrong_type_is_401(client, signing_key, now, iat):
    claims = {"exp": now + 60} if iat is None else {"iat": iat, "exp": now + 60}
    expected = 200 if iat is None else 401
    assert cookie_status(client, signing_key, **claims) == expected


@pytest.mark.parametrize("exp", [float("nan"), float("inf"), "9999999999", True, None, [1]])
def test_an_exp_that_is_no_finite_number_is_401(client, signing_key, now, exp):
    assert bearer_status(client, signing_key, iat=now - 60, exp=exp) == 401
    assert cookie_status(client, signing_key, exp=exp) == 401


def test_exp_is_read_by_the_services_clock_not_the_systems(client, clock, signing_key, now):
    clock.advance(3600)  # the system's is `now`
    assert bearer_status(client, signing_key, iat=now - 60, exp=now + 120) == 401
    clock.advance(-7200)
    assert bearer_status(client, signing_key, iat=now - 7200, exp=now - 60) == 200
