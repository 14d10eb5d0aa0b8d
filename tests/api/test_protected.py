"""The protected resources and the authentication rule of SPEC.md section 5."""

from __future__ import annotations

import string
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.apps import ServiceKey
from tests.helpers.clock import ManualClock
from tests.helpers.tokens import bearer, login, make_token, unsigned_token, valid_claims

pytestmark = pytest.mark.signing_algorithms("HS256", "EdDSA", "ES256")

ENDPOINTS = [
    ("get", "/user-accessible", {}),
    ("get", "/admin-accessible", {}),
    ("post", "/restaurant-reservation", {"json": {"guestsCount": 2}}),
]


def assert_unauthenticated(response) -> None:
    assert response.status_code == 401
    assert response.mimetype == "text/plain"
    assert response.data == b"Unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"


def call(client, endpoint, headers=None):
    method, path, body = endpoint
    return getattr(client, method)(path, headers=headers or {}, **body)


def reserve_with_raw_json_count(client, raw: str):
    """Book with ``guestsCount`` written exactly as ``raw`` in the JSON text."""
    return client.post(
        "/restaurant-reservation",
        headers=bearer(login(client)["accessToken"]),
        data='{"guestsCount": ' + raw + "}",
        content_type="application/json",
    )


@pytest.fixture
def shared_client(shared_app):
    """Return a client of the module's one app, for the reservation's body tests: the body
    is read the same whatever key signed the token, and they only read answers."""
    return shared_app().test_client()


# --- success -------------------------------------------------------------------------


def test_user_accessible_answers_a_user(client):
    tokens = login(client, "alice")
    response = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
    assert response.status_code == 200
    body = response.get_json()
    assert body["message"] == "for all users"
    assert set(body["user"]) == {"username", "role", "iat", "exp"}
    assert body["user"]["username"] == "alice"
    assert body["user"]["role"] == "user"
    assert body["user"]["exp"] == body["user"]["iat"] + 60


def test_user_accessible_answers_an_admin(client):
    tokens = login(client, "admin")
    response = client.get("/user-accessible", headers=bearer(tokens["accessToken"]))
    assert response.status_code == 200
    assert response.get_json()["user"]["role"] == "admin"


def test_admin_accessible_answers_an_admin(client):
    tokens = login(client, "admin")
    response = client.get("/admin-accessible", headers=bearer(tokens["accessToken"]))
    assert response.status_code == 200
    assert response.get_json() == {
        "message": "for admins only",
        "user": response.get_json()["user"],
    }
    assert response.get_json()["user"]["username"] == "admin"


def test_admin_accessible_is_403_for_a_user(client):
    tokens = login(client, "alice")
    response = client.get("/admin-accessible", headers=bearer(tokens["accessToken"]))
    assert response.status_code == 403
    assert response.mimetype == "application/json"
    assert response.get_json() == {"message": "No access"}


def test_claims_are_echoed_exactly_as_signed(client, signing_key):
    claims = valid_claims(username="dave", role="admin")
    token = make_token(signing_key, claims)
    response = client.get("/user-accessible", headers=bearer(token))
    assert response.get_json()["user"] == claims


@pytest.mark.parametrize("body_kind", ["json", "form"])
@pytest.mark.parametrize(
    ("sent", "echoed"),
    [(2, 2), (0, 0), (2.5, 2.5), (-1, -1), (10**20, 10**20), (4.0, 4), (-0.5, -0.5)],
)
def test_reservation_echoes_guests_count_as_a_number(shared_client, body_kind, sent, echoed):
    tokens = login(shared_client, "alice")
    body = (
        {"json": {"guestsCount": sent}}
        if body_kind == "json"
        else {"data": {"guestsCount": str(sent)}}
    )
    response = shared_client.post(
        "/restaurant-reservation", headers=bearer(tokens["accessToken"]), **body
    )
    assert response.status_code == 200
    payload = response.get_json()
    assert payload["guestsCount"] == echoed
    assert type(payload["guestsCount"]) is type(echoed)
    assert payload["user"]["username"] == "alice"
    assert set(payload) == {"user", "guestsCount"}


@pytest.mark.parametrize(
    ("raw", "echoed"), [("1e3", "1000"), ("4.0", "4"), ("-0.0", "0"), ("2.50", "2.5")]
)
def test_reservation_echoes_json_numbers_as_javascript_would(shared_client, raw, echoed):
    response = reserve_with_raw_json_count(shared_client, raw)
    assert response.data.rstrip().endswith(b'"guestsCount":' + echoed.encode() + b"}")


def test_reservation_is_open_to_admins(client):
    tokens = login(client, "admin")
    response = client.post(
        "/restaurant-reservation", headers=bearer(tokens["accessToken"]), json={"guestsCount": 4}
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "guestsCount is required"),
        ({"guestsCount": None}, "guestsCount is required"),
        ({"guestsCount": "2"}, "guestsCount must be a number"),
        ({"guestsCount": True}, "guestsCount must be a number"),
        ({"guestsCount": [2]}, "guestsCount must be a number"),
        ({"guestsCount": {"n": 2}}, "guestsCount must be a number"),
    ],
)
def test_reservation_bad_guests_count_is_400(shared_client, body, message):
    tokens = login(shared_client)
    response = shared_client.post(
        "/restaurant-reservation", headers=bearer(tokens["accessToken"]), json=body
    )
    assert response.status_code == 400
    assert response.get_json() == {"message": message}


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_reservation_non_finite_json_number_is_400(shared_client, raw):
    assert reserve_with_raw_json_count(shared_client, raw).status_code == 400


@pytest.mark.parametrize("raw", ["two", "", " 2", "2 ", "1e3", "0x10", "+2", "2.", ".5", "nan"])
def test_reservation_form_value_must_be_a_decimal(shared_client, raw):
    tokens = login(shared_client)
    response = shared_client.post(
        "/restaurant-reservation", headers=bearer(tokens["accessToken"]), data={"guestsCount": raw}
    )
    assert response.status_code == 400


def test_protected_endpoint_authenticates_before_reading_the_body(client):
    response = client.post(
        "/restaurant-reservation",
        headers=bearer("bad"),
        data="{not json",
        content_type="application/json",
    )
    assert_unauthenticated(response)
    response = client.post("/restaurant-reservation", data="x" * 20_000, content_type="text/plain")
    assert_unauthenticated(response)


# --- 401: missing, malformed, invalid, expired ---------------------------------------


#: Authorization headers that carry no usable token ({token} is a valid one; None: no header).
BAD_AUTHORIZATIONS = [
    None,
    "",
    "Bearer",
    "Bearer ",
    "Bearer  {token}",
    "Bearer {token} ",
    " Bearer {token}",
    "Bearer {token} extra",
    "Bearer\t{token}",
    "Basic {token}",
    "Token {token}",
    "{token}",
    "Bearer {token}x",
    "Bearer x{token}",
    "Bearer not.a.jwt",
    "Bearer abc",
    "Bearer {token},Bearer {token}",
]


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=lambda e: e[1])
def test_bad_authorization_header_is_401(client, endpoint):
    """Each header on one app: a refused header changes nothing for the next."""
    token = login(client, "admin")["accessToken"]
    for authorization in BAD_AUTHORIZATIONS:
        headers = (
            {} if authorization is None else {"Authorization": authorization.format(token=token)}
        )
        assert_unauthenticated(call(client, endpoint, headers))


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_bearer_scheme_is_case_insensitive(client, scheme):
    token = login(client)["accessToken"]
    response = client.get("/user-accessible", headers={"Authorization": f"{scheme} {token}"})
    assert response.status_code == 200


def test_two_authorization_headers_are_401(client):
    token = login(client)["accessToken"]
    headers = [("Authorization", f"Bearer {token}"), ("Authorization", f"Bearer {token}")]
    assert_unauthenticated(client.get("/user-accessible", headers=headers))


def test_token_outside_the_authorization_header_never_authenticates(client):
    token = login(client)["accessToken"]
    assert_unauthenticated(client.get(f"/user-accessible?access_token={token}"))
    assert_unauthenticated(client.get("/user-accessible", headers={"X-Access-Token": token}))
    client.set_cookie("jwt", token)
    assert_unauthenticated(client.get("/user-accessible"))
    response = client.post("/restaurant-reservation", json={"guestsCount": 1, "accessToken": token})
    assert_unauthenticated(response)


def test_wrong_signature_is_401(client):
    token = make_token("another-secret-that-is-long-enough-32b", valid_claims())
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_tampered_payload_is_401(client, signing_key):
    header, _, signature = make_token(signing_key, valid_claims()).split(".")
    forged = make_token(signing_key, valid_claims(role="admin")).split(".")[1]
    token = f"{header}.{forged}.{signature}"
    assert_unauthenticated(client.get("/admin-accessible", headers=bearer(token)))


def test_alg_none_is_401(client):
    token = unsigned_token(valid_claims(role="admin"))
    assert_unauthenticated(client.get("/admin-accessible", headers=bearer(token)))


@pytest.mark.parametrize("algorithm", ["HS384", "HS512"])
def test_other_hmac_algorithms_with_the_right_secret_are_401(client, signing_secret, algorithm):
    token = make_token(signing_secret, valid_claims(), algorithm=algorithm)
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_unknown_critical_header_is_401(client, signing_key):
    token = make_token(signing_key, valid_claims(), crit=["exp-ext"], **{"exp-ext": 1})
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


@pytest.mark.parametrize("claim", ["username", "role", "iat", "exp"])
def test_token_missing_a_claim_is_401(client, signing_key, claim):
    token = make_token(signing_key, valid_claims(**{claim: None}))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


@pytest.mark.parametrize(
    "changes",
    [
        {"username": ""},
        {"username": 5},
        {"username": ["alice"]},
        {"username": "x" * 257},
        {"role": "root"},
        {"role": "Admin"},
        {"role": ["admin"]},
        {"role": None},
        {"exp": "9999999999"},
        {"exp": True},
        {"exp": 9999999999.5},
        {"iat": "1"},
        {"iat": False},
    ],
    ids=repr,
)
def test_token_with_a_wrongly_typed_claim_is_401(client, signing_key, changes):
    claims = valid_claims()
    claims.update(changes)
    token = make_token(signing_key, {k: v for k, v in claims.items() if v is not None})
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_expired_token_is_401_when_now_equals_exp(client, signing_key):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now - 60, exp=now))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_expired_token_is_401_after_exp(client, signing_key):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now - 120, exp=now - 1))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_token_is_valid_before_exp(client, signing_key):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now - 58, exp=now + 2))
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200


def test_issued_token_expires_after_its_lifetime(make_app):
    clock = ManualClock(int(time.time()) + 0.5)
    client = make_app(ACCESS_TOKEN_LIFETIME="30", clock=clock).test_client()
    token = login(client)["accessToken"]
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    clock.advance(29.4)
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    clock.advance(0.1)  # 30 s after the whole second it was issued in: exp is whole seconds
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_token_issued_in_the_future_is_401(client, signing_key):
    now = int(time.time())
    token = make_token(signing_key, valid_claims(iat=now + 600, exp=now + 660))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_username_of_256_emoji_makes_a_token_that_verifies(client):
    username = "\N{GRINNING FACE}" * 256
    token = login(client, username)["accessToken"]
    response = client.get("/user-accessible", headers=bearer(token))
    assert response.status_code == 200
    assert response.get_json()["user"]["username"] == username


def test_oversized_token_is_401(client, signing_key):
    token = make_token(signing_key, valid_claims(padding="x" * 9000))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def test_authentication_failure_wins_over_role_failure(client, signing_key):
    now = int(time.time())
    expired_user = make_token(signing_key, valid_claims(iat=now - 61, exp=now - 1))
    assert_unauthenticated(client.get("/admin-accessible", headers=bearer(expired_user)))


# --- the verified-token cache, through the app ---------------------------------------


def test_a_token_cached_a_moment_before_exp_is_refused_at_exp(make_app, signing_key):
    now = int(time.time())
    clock = ManualClock(now + 0.999)
    client = make_app(clock=clock).test_client()
    token = make_token(signing_key, valid_claims(iat=now - 59, exp=now + 1))
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200  # cached
    clock.advance(0.001)
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(token)))


def forgeries(key: ServiceKey, token: str) -> dict[str, str]:
    """Return tokens made from a valid one: altered, re-signed or signed otherwise."""
    header, payload, signature = token.split(".")
    admin_payload = make_token(key, valid_claims(role="admin")).split(".")[1]
    secret = key.secret
    flipped = signature[:10] + ("A" if signature[10] != "A" else "B") + signature[11:]
    return {
        "tampered payload": f"{header}.{admin_payload}.{signature}",
        "tampered signature": f"{header}.{payload}.{flipped}",
        "no signature": f"{header}.{payload}.",
        "wrong key": make_token("another-secret-that-is-long-enough-32b", valid_claims()),
        "HS512 with the right key": make_token(secret + secret, valid_claims(), algorithm="HS512"),
        "alg none": unsigned_token(valid_claims(role="admin")),
    }


@pytest.mark.parametrize("cached_first", [True, False], ids=["valid token cached", "cold"])
@pytest.mark.parametrize(
    "kind",
    [
        "tampered payload",
        "tampered signature",
        "no signature",
        "wrong key",
        "HS512 with the right key",
        "alg none",
    ],
)
def test_forged_tokens_are_401_whether_or_not_a_valid_one_is_cached(
    client, signing_key, cached_first, kind
):
    token = make_token(signing_key, valid_claims())
    if cached_first:
        assert client.get("/user-accessible", headers=bearer(token)).status_code == 200
    forged = forgeries(signing_key, token)[kind]
    assert_unauthenticated(client.get("/admin-accessible", headers=bearer(forged)))
    assert_unauthenticated(client.get("/user-accessible", headers=bearer(forged)))
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 200


# --- the Bearer parse on its own -----------------------------------------------------
# The header is read before any key is used: one app of the module's, on whatever key, for
# the parse's tests (not one for each test, on each algorithm).


@pytest.mark.parametrize(
    ("value", "token"),
    [
        ("Bearer abc", "abc"),
        ("bEaReR abc", "abc"),
        ("Bearer a-b.c_d~e+f/g==", "a-b.c_d~e+f/g=="),
        ("Bearer abc=", "abc="),
        ("Bearer =", None),
        ("Bearer a=b", None),
        ("Bearer ", None),
        ("Bearer  abc", None),
        ("Bearer abc ", None),
        ("Bearer\tabc", None),
        ("Bearer abc,Bearer abc", None),
        ("Bearerabc", None),
        ("Beare abc", None),
        ("Bearerr abc", None),
        ("B\u0117arer abc", None),
        ("Bearer ab\u00e7", None),
        ("Basic abc", None),
        ("", None),
    ],
)
def test_bearer_token_follows_rfc_6750(shared_app, value, token):
    from app.http.guards import bearer_token

    with shared_app().test_request_context(headers={"Authorization": value}):
        assert bearer_token() == token


B64TOKEN_ALPHABET = string.ascii_letters + string.digits + "-._~+/"


@settings(max_examples=300, deadline=None)
@given(token=st.text(alphabet=B64TOKEN_ALPHABET + "= ,\t\n\u0117\u0661\uff21", max_size=12))
def test_a_bearer_token_is_exactly_an_rfc_6750_b64token(shared_app, token):
    from app.http.guards import bearer_token

    # 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=", spelled out plainly
    body = token.rstrip("=")
    expected = token if body and all(c in B64TOKEN_ALPHABET for c in body) else None
    environ = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    with shared_app().test_request_context(environ_overrides=environ):
        assert bearer_token() == expected


def test_no_authorization_header_is_no_bearer_token(shared_app):
    from app.http.guards import bearer_token

    with shared_app().test_request_context():
        assert bearer_token() is None
