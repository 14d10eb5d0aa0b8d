"""Browser users through the gateway: the login's way back (LOGIN_RETURN_DOMAINS), the role a
provider's claims grant (OIDC_<NAME>_ADMIN_*), and the verified email, to the check."""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterator
from urllib.parse import quote, urlsplit

import jwt
import pytest
import requests
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth.tokens import InvalidTokenError, issue_cookie_token, verify_cookie_token
from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.extensions import KEY_RING
from app.oidc.flow import MAX_PENDING_LOGINS
from app.oidc.return_url import MAX_RETURN_URL_LENGTH
from tests.helpers.hostile_provider import CLIENT_ID, CLIENT_SECRET, HostileProvider
from tests.helpers.onward_page import onward_url

pytestmark = pytest.mark.store("sqlite")

FALLBACK = "/welcome"
ALLOWED = "app.example.com,.apps.example.org"
#: Return URLs a login must never send the browser to: each falls back to FALLBACK.
TRICKS = [
    "https://evil.test/",
    "//evil.test/",
    "/\\evil.test",
    "https:evil.test",
    "https://app.example.com@evil.test/",
    "/%2f%2fevil.test",
    "/%5cevil.test",
    "/\t/evil.test",
    "/\n/evil.test",
    "javascript:alert(1)",
    "https://apps.example.org/",
]


@pytest.fixture
def provider() -> Iterator[HostileProvider]:
    provider = HostileProvider()
    yield provider
    provider.stop()


def browser_of(make_app, provider: HostileProvider, **settings: str) -> FlaskClient:
    defaults = {
        "OIDC_PROVIDERS": "evil",
        "OIDC_EVIL_ISSUER": provider.issuer,
        "OIDC_EVIL_CLIENT_ID": CLIENT_ID,
        "OIDC_EVIL_CLIENT_SECRET": CLIENT_SECRET,
        "AUTH_COOKIE_SECURE": "false",
        "AUTH_CHECK_COOKIE": "on",
        "LOGIN_REDIRECT_URL": FALLBACK,
        "LOGIN_RETURN_DOMAINS": ALLOWED,
    }
    return make_app(**{**defaults, **settings}).test_client()


@pytest.fixture
def browser(make_app, provider) -> FlaskClient:
    return browser_of(make_app, provider)


def start(browser: FlaskClient, query: str = "", headers: dict[str, str] | None = None):
    started = browser.get(f"/auth/evil/login{query}", headers=headers)
    assert started.status_code == 302, started.data
    return started


def finish(browser: FlaskClient, started):
    """Let the provider answer the authorization request, then call our callback."""
    answer = requests.get(started.headers["Location"], allow_redirects=False, timeout=5)
    callback = urlsplit(answer.headers["Location"])
    return browser.get(f"{callback.path}?{callback.query}")


def landing(browser: FlaskClient, query: str = "", headers: dict[str, str] | None = None) -> str:
    """Log in from a login start of ``query``; return where the callback sends the browser:
    LOGIN_REDIRECT_URL by a 302, the page the login started for by a page of its own."""
    return onward(finish(browser, start(browser, query, headers)))


def onward(finished) -> str:
    if finished.status_code == 302:
        assert finished.headers["Location"] == FALLBACK
        return FALLBACK
    assert finished.status_code == 200, finished.data
    assert finished.mimetype == "text/html"
    return onward_url(finished.get_data(as_text=True))


def cookie_claims(browser: FlaskClient) -> dict:
    cookie = browser.get_cookie("jwt")
    assert cookie is not None
    return jwt.decode(cookie.value, options={"verify_signature": False})


# --- the way back -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/reports?month=11&year=2026",
        "https://app.example.com/reports?x=1&y=2",
        "https://team.apps.example.org/",
    ],
)
def test_the_login_returns_to_an_allowed_url(browser, url):
    assert landing(browser, "?rd=" + quote(url, safe="")) == url


@pytest.mark.parametrize("url", TRICKS)
def test_a_return_url_elsewhere_falls_back_to_the_login_redirect_url(browser, url, caplog):
    assert landing(browser, "?rd=" + quote(url, safe="")) == FALLBACK
    assert f"return URL {url!r} refused" in caplog.text


def test_a_refused_return_urls_query_is_never_logged(browser, caplog):
    assert (
        landing(browser, "?rd=" + quote("https://evil.test/x?token=s3cret#k", safe="")) == FALLBACK
    )
    assert "return URL 'https://evil.test/x' refused" in caplog.text
    assert "s3cret" not in caplog.text


@pytest.mark.parametrize("url", ["/reports?a=1&b=2", "https://evil.test/"])
def test_the_proxys_header_names_the_return_url_as_oauth2_proxy_reads_it(browser, url):
    expected = url if url.startswith("/") else FALLBACK
    assert landing(browser, headers={"X-Auth-Request-Redirect": url}) == expected


def test_with_no_return_url_the_login_goes_to_the_login_redirect_url(browser):
    assert landing(browser) == FALLBACK


def test_pending_logins_with_the_longest_return_urls_fit_in_the_login_state_cookie(browser):
    # no %: the escapes it would start at random are refused
    characters = string.ascii_letters + string.digits + "\"'<>&-._~!$()*+,;=:@"
    urls = [
        "/" + "".join(secrets.choice(characters) for _ in range(MAX_RETURN_URL_LENGTH - 1))
        for _ in range(MAX_PENDING_LOGINS + 1)
    ]
    started = [start(browser, "?rd=" + quote(url, safe="")) for url in urls]
    cookie = browser.get_cookie("login_state")
    assert len(f"login_state={cookie.value}; HttpOnly; Path=/; SameSite=Lax") < 4000
    for url, login in list(zip(urls, started, strict=True))[-MAX_PENDING_LOGINS:]:
        expected = url.replace("'", "%27").replace('"', "%22").replace("<", "%3C")
        assert onward(finish(browser, login)) == expected.replace(">", "%3E")


def test_a_return_url_longer_than_the_cookie_holds_falls_back(browser):
    assert landing(browser, "?rd=/" + "a" * MAX_RETURN_URL_LENGTH) == FALLBACK
    assert landing(browser, "?rd=/" + "a" * (MAX_RETURN_URL_LENGTH - 1)) != FALLBACK


def test_each_login_returns_where_it_started_for(browser):
    first = start(browser, "?rd=/first")
    second = start(browser, "?rd=/second")
    assert onward(finish(browser, second)) == "/second"
    assert onward(finish(browser, first)) == "/first"


def test_the_host_that_finishes_the_login_checks_the_return_url_again(make_app, provider):
    first = browser_of(make_app, provider)
    started = start(first, "?rd=" + quote("https://app.example.com/x", safe=""))
    narrower = browser_of(make_app, provider, LOGIN_RETURN_DOMAINS=".apps.example.org")
    narrower.set_cookie("login_state", first.get_cookie("login_state").value)
    assert onward(finish(narrower, started)) == FALLBACK


#: Pieces of return URLs, hostile and not, that Hypothesis strings together.
PIECES = [
    "/", "//", "\\", "http:", "https:", "javascript:", "://", "app.example.com",
    "x.apps.example.org", "apps.example.org", "evil.test", ".", "..", "@", ":", ":443",
    "%2f", "%5c", "%25", "%2e", "?", "#", "&", "\t", "\n", " ", "\u3002",
]  # fmt: skip


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(url=st.lists(st.sampled_from(PIECES), max_size=8).map("".join))
def test_a_login_never_lands_on_a_host_that_is_not_allowed(browser, url):
    location = landing(browser.application.test_client(), "?rd=" + quote(url, safe=""))
    if location != FALLBACK:
        assert location == url
        parts = urlsplit(location)
        if parts.scheme or parts.netloc:
            assert parts.scheme in {"http", "https"}
            assert parts.hostname == "app.example.com" or str(parts.hostname).endswith(
                ".apps.example.org"
            )
            assert "@" not in parts.netloc
        else:
            assert location.startswith("/")
            assert location[1:2] not in {"/", "\\"}
        assert not any(character in location for character in "\\\t\n\r ")


def test_the_page_back_is_this_sites_own_request_and_writes_the_url_safely(browser):
    url = "/reports?q=%22&x='<b>&y=1"
    finished = finish(browser, start(browser, "?rd=" + quote(url, safe="")))
    page = finished.get_data(as_text=True)
    assert onward_url(page) == "/reports?q=%22&x=%27%3Cb%3E&y=1"
    assert "<b>" not in page
    assert finished.headers["Cache-Control"] == "no-store"
    assert (
        finished.headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"
    )
    assert finished.headers["Referrer-Policy"] == "no-referrer"
    assert "Location" not in finished.headers
    assert browser.get_cookie("jwt") is not None


# --- roles and email --------------------------------------------------------------------


def test_a_third_party_user_is_a_user_with_no_mapping(browser, provider):
    provider.claim_changes = {"groups": ["admins"]}
    landing(browser)
    assert cookie_claims(browser)["role"] == "user"
    assert browser.get("/auth/check?role=admin").status_code == 403
    answer = browser.get("/auth/check?role=user")
    assert answer.status_code == 200
    assert answer.headers["X-Auth-Request-Groups"] == "user"


@pytest.mark.parametrize(
    ("settings", "id_claims"),
    [
        ({"OIDC_EVIL_ADMIN_GROUPS": "ops, admins"}, {"groups": ["staff", "admins"]}),
        ({"OIDC_EVIL_ADMIN_SUBJECTS": "bob,alice"}, {}),
        (
            {"OIDC_EVIL_ADMIN_EMAILS": "Alice@Example.com"},
            {"email": "alice@example.COM", "email_verified": True},
        ),
    ],
    ids=["group", "subject", "verified-email"],
)
def test_the_provider_settings_make_a_third_party_user_an_admin(
    make_app, provider, settings, id_claims
):
    browser = browser_of(make_app, provider, **settings)
    provider.claim_changes = id_claims
    landing(browser)
    assert cookie_claims(browser)["role"] == "admin"
    answer = browser.get("/auth/check?role=admin")
    assert answer.status_code == 200
    assert answer.headers["X-Auth-Request-Groups"] == "admin"
    assert set(browser.get("/api/v1/me").get_json()) == {"source", "id", "shownName"}


@pytest.mark.parametrize(
    ("id_claims", "userinfo"),
    [
        ({"groups": "admins"}, {}),  # not a list
        ({"groups": ["Admins", "admins2"]}, {}),  # compared exactly
        ({"groups": [["admins"]]}, {}),
        ({"groups": None}, {"groups": "admins"}),
        ({"groups": ["staff"]}, {"groups": ["admins"]}),  # the ID token's own claim counts
    ],
)
def test_groups_that_are_not_an_admin_group_grant_nothing(make_app, provider, id_claims, userinfo):
    browser = browser_of(make_app, provider, OIDC_EVIL_ADMIN_GROUPS="admins")
    provider.claim_changes = id_claims
    provider.userinfo_changes = userinfo
    landing(browser)
    assert cookie_claims(browser)["role"] == "user"


def test_groups_missing_from_the_id_token_come_from_userinfo(make_app, provider):
    browser = browser_of(make_app, provider, OIDC_EVIL_ADMIN_GROUPS="admins")
    provider.claim_changes = {"email": "alice@example.com", "email_verified": True}
    provider.userinfo_changes = {"groups": ["admins"]}
    landing(browser)
    assert cookie_claims(browser)["role"] == "admin"
    assert len(provider.userinfo_requests) == 1


@pytest.mark.parametrize(
    ("id_claims", "userinfo", "email"),
    [
        ({"email": "alice@example.com", "email_verified": True}, {}, "alice@example.com"),
        ({}, {"email_verified": True}, "alice@example.com"),  # both from userinfo
        ({"email": "alice@example.com", "email_verified": False}, {}, None),
        ({"email": "alice@example.com", "email_verified": "true"}, {}, None),
        ({"email": "alice@example.com"}, {"email_verified": True}, None),  # never mixed
        ({"email_verified": True}, {}, None),  # the ID token's word on userinfo's email
        ({}, {}, None),  # userinfo's email, unverified
        ({}, {"email_verified": 1}, None),
        ({"email": ["alice@example.com"], "email_verified": True}, {}, None),
        ({"email": "a\nb@example.com", "email_verified": True}, {}, None),
    ],
)
def test_only_a_verified_email_reaches_the_cookie_token_and_the_gateway(
    make_app, provider, id_claims, userinfo, email
):
    browser = browser_of(make_app, provider, OIDC_EVIL_ADMIN_EMAILS="alice@example.com")
    provider.claim_changes = id_claims
    provider.userinfo_changes = userinfo
    landing(browser)
    claims = cookie_claims(browser)
    assert claims.get("email") == email
    assert claims["role"] == ("admin" if email else "user")
    answer = browser.get("/auth/check")
    assert answer.status_code == 200
    assert answer.headers.get("X-Auth-Request-Email") == email
    assert set(browser.get("/api/v1/me").get_json()) == {"source", "id", "shownName"}


# --- the cookie token and the settings ----------------------------------------------------


def test_the_check_passes_an_email_percent_encoded(make_app):
    client = make_app(AUTH_CHECK_COOKIE="on").test_client()
    ring = client.application.extensions[KEY_RING]
    token = issue_cookie_token({"id": "1"}, ring, 60, role="admin", email="j\u00f6rg+x@example.com")
    client.set_cookie("jwt", token)
    answer = client.get("/auth/check?role=admin")
    assert answer.status_code == 200
    assert answer.headers["X-Auth-Request-Email"] == "j%C3%B6rg%2Bx@example.com"
    assert answer.headers["X-Auth-Request-Groups"] == "admin"


def test_a_cookie_token_from_before_roles_is_a_users(make_app):
    client = make_app(AUTH_CHECK_COOKIE="on").test_client()
    ring = client.application.extensions[KEY_RING]
    token = ring.current.sign({"sub": {"id": "1"}, "exp": 2**40})
    assert verify_cookie_token(token, ring).role == "user"
    client.set_cookie("jwt", token)
    assert client.get("/auth/check?role=admin").status_code == 403
    assert "X-Auth-Request-Email" not in client.get("/auth/check").headers


@pytest.mark.parametrize(
    "claims",
    [{"role": "superuser"}, {"role": ["admin"]}, {"role": None}, {"email": 1}, {"email": {}}],
)
def test_a_cookie_token_with_a_bad_role_or_email_is_refused(make_app, claims):
    client = make_app(AUTH_CHECK_COOKIE="on").test_client()
    ring = client.application.extensions[KEY_RING]
    token = ring.current.sign({"sub": {"id": "1"}, "exp": 2**40, **claims})
    with pytest.raises(InvalidTokenError):
        verify_cookie_token(token, ring)
    client.set_cookie("jwt", token)
    assert client.get("/auth/check").status_code == 401


def test_a_cookie_token_is_issued_for_a_known_role_only(make_app):
    ring = make_app().extensions[KEY_RING]
    with pytest.raises(ValueError, match="unknown role"):
        issue_cookie_token({"id": "1"}, ring, 60, role="root")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LOGIN_RETURN_DOMAINS", "https://app.example.com"),
        ("LOGIN_RETURN_DOMAINS", "app.example.com:443"),
        ("LOGIN_RETURN_DOMAINS", "*.example.com"),
        ("LOGIN_RETURN_DOMAINS", "app.example.com/x"),
        ("LOGIN_RETURN_DOMAINS", "..example.com"),
        ("OIDC_EVIL_ADMIN_GROUPS", "admins,admins"),
        ("OIDC_EVIL_ADMIN_EMAILS", "a\x00@example.com"),
    ],
)
def test_a_bad_browser_setting_stops_the_start_naming_it(variable, value):
    provider = {
        "OIDC_PROVIDERS": "evil",
        "OIDC_EVIL_ISSUER": "https://idp.example.com",
        "OIDC_EVIL_CLIENT_ID": "c",
        "OIDC_EVIL_CLIENT_SECRET": "s",
    }
    with pytest.raises(ConfigError, match=variable):
        Settings.load({**provider, variable: value}, environ={})


def test_the_browser_settings_are_read():
    settings = Settings.load(
        {
            "LOGIN_RETURN_DOMAINS": "App.Example.com, .apps.example.org",
            "OIDC_PROVIDERS": "evil",
            "OIDC_EVIL_ISSUER": "https://idp.example.com",
            "OIDC_EVIL_CLIENT_ID": "c",
            "OIDC_EVIL_CLIENT_SECRET": "s",
            "OIDC_EVIL_ADMIN_GROUPS": "ops,admins",
            "OIDC_EVIL_ADMIN_SUBJECTS": "248289761001",
            "OIDC_EVIL_ADMIN_EMAILS": "Root@Example.com",
        },
        environ={},
    )
    assert settings.login_return_domains == ("app.example.com", ".apps.example.org")
    (provider,) = settings.identity_providers
    assert provider.admin_groups == ("ops", "admins")
    assert provider.admin_subjects == ("248289761001",)
    assert provider.admin_emails == ("root@example.com",)


@pytest.mark.parametrize(
    ("variable", "meant"),
    [
        ("OIDC_CORP_ADMIN_GROUP", "OIDC_CORP_ADMIN_GROUPS"),
        ("OIDC_MY_IDP_ADMIN_EMAIL", "OIDC_MY_IDP_ADMIN_EMAILS"),
        ("OIDC_CORP_ADMINS_SUBJECTS", "OIDC_CORP_ADMIN_SUBJECTS"),
        ("LOGIN_RETURN_DOMAIN", "LOGIN_RETURN_DOMAINS"),
    ],
)
def test_a_misspelled_browser_setting_stops_the_start(variable, meant):
    with pytest.raises(ConfigError, match=f"did you mean {meant}"):
        Settings.load(environ={variable: "x"})
