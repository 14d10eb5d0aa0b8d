"""TOKEN_ISSUER and TOKEN_AUDIENCE: the claims they add, and a foreign token refused as a
forged one is; without them, SPEC.md's tokens byte for byte."""

from __future__ import annotations

import base64
import json

import pytest

from app.config.parsers import ConfigError
from tests.helpers.tokens import bearer, login, make_token, valid_claims

pytestmark = pytest.mark.store("sqlite")

ISSUER = "https://auth.example.com"
AUDIENCE = "https://api.example.com"
OAUTH = {"TOKEN_ISSUER": ISSUER, "TOKEN_AUDIENCE": f"{AUDIENCE},reports"}


def segments(token: str) -> tuple[bytes, bytes]:
    header, payload, _ = token.split(".")
    return tuple(base64.urlsafe_b64decode(part + "==") for part in (header, payload))  # type: ignore[return-value]


def test_default_access_token_carries_exactly_the_four_claims_of_spec(client, signing_key):
    token = login(client)["accessToken"]
    header, payload = segments(token)
    assert header == b'{"alg":"HS256","kid":"%s","typ":"JWT"}' % signing_key.kid.encode()
    claims = json.loads(payload)
    assert list(claims) == ["username", "role", "iat", "exp"]
    assert payload == json.dumps(claims, separators=(",", ":")).encode()
    assert claims["exp"] - claims["iat"] == 60
    echoed = client.get("/user-accessible", headers=bearer(token)).get_json()["user"]
    assert list(echoed) == ["username", "role", "iat", "exp"]


def test_issuer_and_audience_add_iss_sub_aud_and_a_random_jti(make_app, signing_key):
    client = make_app(**OAUTH).test_client()
    first, second = login(client)["accessToken"], login(client)["accessToken"]
    claims = signing_key.decode(first, audience=AUDIENCE, issuer=ISSUER)
    assert claims["iss"] == ISSUER
    assert claims["sub"] == claims["username"] == "alice"
    assert claims["aud"] == [AUDIENCE, "reports"]
    assert claims["jti"] != signing_key.decode(second, audience="reports")["jti"]
    echoed = client.get("/user-accessible", headers=bearer(first)).get_json()["user"]
    assert echoed == claims  # the token's claims, all of them
    assert client.get("/auth/check", headers=bearer(first)).status_code == 200


def test_one_audience_is_written_as_a_string(make_app, signing_key):
    client = make_app(TOKEN_ISSUER=ISSUER, TOKEN_AUDIENCE=AUDIENCE).test_client()
    token = login(client)["accessToken"]
    assert signing_key.decode(token, audience=AUDIENCE)["aud"] == AUDIENCE


def standard(**changes):
    claims = valid_claims(iss=ISSUER, aud=AUDIENCE, sub="alice", jti="j1")
    claims.update(changes)
    return {key: value for key, value in claims.items() if value is not None}


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(standard(iss="https://evil.example.com"), id="another-issuer"),
        pytest.param(standard(iss=ISSUER + "/"), id="issuer-with-a-slash"),
        pytest.param(standard(aud="https://other.example.com"), id="another-audience"),
        pytest.param(standard(aud=["x", "y"]), id="no-audience-of-ours"),
        pytest.param(standard(aud=None), id="no-audience"),
        pytest.param(standard(iss=None), id="no-issuer"),
        pytest.param(standard(sub=None), id="no-sub"),
        pytest.param(standard(sub="bob"), id="sub-not-the-username"),
        pytest.param(standard(jti=None), id="no-jti"),
        pytest.param(valid_claims(), id="spec-token"),
    ],
)
def test_a_token_of_another_issuer_or_audience_is_401_as_a_bad_signature(
    make_app, signing_key, claims
):
    client = make_app(**OAUTH).test_client()
    forged = client.get("/user-accessible", headers=bearer(make_token("x" * 40, standard()) + "x"))
    for path in ("/user-accessible", "/admin-accessible", "/auth/check"):
        answer = client.get(path, headers=bearer(make_token(signing_key, claims)))
        assert answer.status_code == 401
        assert answer.data == forged.data == b"Unauthorized"
        assert answer.headers.get("WWW-Authenticate") == forged.headers["WWW-Authenticate"]
    good = client.get("/user-accessible", headers=bearer(make_token(signing_key, standard())))
    assert good.status_code == 200


def test_a_token_with_an_audience_is_refused_where_none_is_configured(client, signing_key):
    token = make_token(signing_key, standard())
    assert client.get("/user-accessible", headers=bearer(token)).status_code == 401


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TOKEN_ISSUER": ISSUER}, "go together"),
        ({"TOKEN_AUDIENCE": AUDIENCE}, "go together"),
        ({"TOKEN_ISSUER": "ftp://x", "TOKEN_AUDIENCE": "a"}, "http(s) URL"),
        ({"TOKEN_ISSUER": "http://auth.example.com", "TOKEN_AUDIENCE": "a"}, "https"),
        ({"TOKEN_ISSUER": ISSUER + "/?a=1", "TOKEN_AUDIENCE": "a"}, "no query"),
        ({"TOKEN_ISSUER": ISSUER + "#f", "TOKEN_AUDIENCE": "a"}, "no query"),
        ({"TOKEN_ISSUER": ISSUER, "TOKEN_AUDIENCE": "a b"}, "no space"),
        ({"TOKEN_ISSUER": ISSUER, "TOKEN_AUDIENCE": "a,a"}, "twice"),
        ({"CLIENTS_FILE": "/tmp/c.json", "ADMIN_USERNAME": "client:x"}, "client:"),
    ],
)
def test_bad_issuer_or_audience_settings_stop_the_service(make_app, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_app(**overrides)
