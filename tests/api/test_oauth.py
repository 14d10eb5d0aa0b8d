"""Third-party login routes and settings, without a provider (see test_oidc.py for one)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
from flask.sessions import SecureCookieSessionInterface

from app.config.parsers import ConfigError
from app.config.settings import Settings
from app.oidc.login_state import LOGIN_STATE_COOKIE, LoginStateSessionInterface
from tests.helpers.tools import ROOT

PROVIDER = {
    "OIDC_PROVIDERS": "corp",
    "OIDC_CORP_ISSUER": "https://id.example.com/",
    "OIDC_CORP_CLIENT_ID": "token-service",
    "OIDC_CORP_CLIENT_SECRET": "client-secret-value",
}


def test_providers_are_read_from_the_environment():
    settings = Settings.load(PROVIDER)
    (provider,) = settings.identity_providers
    assert provider.name == "corp"
    assert provider.issuer == "https://id.example.com"
    assert provider.discovery_url == "https://id.example.com/.well-known/openid-configuration"
    assert provider.scopes == "openid profile email"
    assert "client-secret-value" not in repr(settings)


def test_provider_names_map_to_variable_names():
    settings = Settings.load(
        {
            "OIDC_PROVIDERS": "my-idp",
            "OIDC_MY_IDP_ISSUER": "https://idp.example.org",
            "OIDC_MY_IDP_CLIENT_ID": "a",
            "OIDC_MY_IDP_CLIENT_SECRET": "b",
            "OIDC_MY_IDP_SCOPES": "openid email",
        }
    )
    assert settings.identity_provider("my-idp").scopes == "openid email"
    assert settings.identity_provider("other") is None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"OIDC_CORP_ISSUER": None}, "OIDC_CORP_ISSUER is required"),
        ({"OIDC_CORP_CLIENT_ID": ""}, "OIDC_CORP_CLIENT_ID is required"),
        ({"OIDC_CORP_CLIENT_SECRET": None}, "OIDC_CORP_CLIENT_SECRET is required"),
        ({"OIDC_CORP_ISSUER": "http://id.example.com"}, "must use https"),
        ({"OIDC_CORP_ISSUER": "ftp://id.example.com"}, "must be an http"),
        ({"OIDC_CORP_SCOPES": "profile email"}, "must include openid"),
        ({"OIDC_PROVIDERS": "Corp"}, "provider names are lowercase"),
        ({"OIDC_PROVIDERS": "corp,corp"}, "names a provider twice"),
        ({"LOGIN_REDIRECT_URL": "//evil.example"}, "LOGIN_REDIRECT_URL must be an http"),
        ({"PUBLIC_URL": "http://service.example.com"}, "PUBLIC_URL must use https"),
    ],
)
def test_bad_provider_settings_refuse_to_start(changes, message):
    settings = {**PROVIDER, **changes}
    with pytest.raises(ConfigError, match=message):
        Settings.load({key: value for key, value in settings.items() if value is not None})


def test_http_issuer_is_allowed_on_loopback():
    settings = Settings.load({**PROVIDER, "OIDC_CORP_ISSUER": "http://127.0.0.1:9000"})
    assert settings.identity_providers[0].issuer == "http://127.0.0.1:9000"


#: Prints which of the login's heavy libraries a process serving the app has imported.
IMPORTED_LOGIN_LIBRARIES = """
import sys
import wsgi
print(" ".join(sorted({name.split(".")[0] for name in sys.modules} & set(sys.argv[1:]))))
"""


@pytest.mark.processes
@pytest.mark.parametrize(
    ("providers", "imported"),
    [({}, ""), (PROVIDER, "authlib joserfc requests")],
    ids=["no provider", "a provider"],
)
def test_login_libraries_are_imported_only_when_a_provider_is_configured(
    signing_secret, instance_path, providers, imported
):
    environment = {
        "PATH": os.environ.get("PATH", ""),
        "SIGNING_SECRET": signing_secret,
        "INSTANCE_PATH": str(instance_path),
        **providers,
    }
    process = subprocess.run(
        [sys.executable, "-c", IMPORTED_LOGIN_LIBRARIES, "authlib", "joserfc", "requests"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert process.stdout.strip() == imported


def test_the_login_state_cookie_is_set_up_only_with_a_provider(make_app, signing_secret):
    plain = make_app()
    assert type(plain.session_interface) is SecureCookieSessionInterface  # Flask's own
    assert plain.config["SECRET_KEY"] is None
    assert plain.config["SESSION_COOKIE_NAME"] == "session"
    with_provider = make_app(**PROVIDER)
    assert isinstance(with_provider.session_interface, LoginStateSessionInterface)
    assert with_provider.config["SESSION_COOKIE_NAME"] == LOGIN_STATE_COOKIE
    assert with_provider.config["SESSION_COOKIE_HTTPONLY"] is True
    assert with_provider.config["SESSION_COOKIE_SAMESITE"] == "Lax"
    assert with_provider.config["SECRET_KEY"] not in (None, "", signing_secret)


def test_the_login_modules_never_import_their_own_package():
    """The package's __init__ imports the flow: the flow importing it back is a cycle."""
    package = ROOT / "app" / "oidc"
    for path in package.glob("*.py"):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "app.oidc", path.name
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
                assert "app.oidc" not in names, path.name


@pytest.mark.parametrize("providers", [{}, PROVIDER], ids=["no provider", "another provider"])
def test_unknown_provider_is_404_json(make_app, providers):
    client = make_app(**providers).test_client()
    for path in ["/auth/nobody/login", "/auth/nobody/callback?code=x&state=y"]:
        response = client.get(path)
        assert response.status_code == 404
        assert response.get_json() == {"message": "unknown identity provider"}


def test_unreachable_provider_is_502_not_500(make_app):
    client = make_app(
        **{**PROVIDER, "OIDC_CORP_ISSUER": "http://127.0.0.1:9"}  # discard port: refused
    ).test_client()
    response = client.get("/auth/corp/login")
    assert response.status_code == 502
    assert response.get_json() == {"message": "identity provider did not answer"}


def test_logout_clears_the_cookie_with_its_attributes(client):
    client.set_cookie("jwt", "anything")
    response = client.post("/auth/logout")
    assert response.status_code == 204
    assert response.data == b""
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("jwt=;")
    for attribute in ["Max-Age=0", "Path=/", "HttpOnly", "Secure", "SameSite=Lax"]:
        assert attribute in cookie
    assert client.get_cookie("jwt") is None


def test_logout_is_post_only(client):
    assert client.get("/auth/logout").status_code == 405
