"""``flask rules check``: which rule of ACCESS_RULES_FILE judges a request, and its verdict,
as Authelia's ``access-control check-policy`` does."""

from __future__ import annotations

from urllib.parse import urlsplit

import click
from flask.cli import AppGroup

from app.auth.tokens import ROLES, InvalidTokenError, verify_access_token
from app.extensions import (
    current_settings,
    get_access_rules,
    get_clock,
    get_expected_claims,
    get_key_ring,
)
from app.gateway.rules import Judgment, Verdict

rules = AppGroup("rules", help="Try the gateway's access rules (ACCESS_RULES_FILE).")


@rules.command("check")
@click.argument("method")
@click.argument("url")
@click.option("--role", type=click.Choice(ROLES), help="The caller's role.")
@click.option("--token", help="The caller's access token, verified as the check does.")
def check_command(method: str, url: str, role: str | None, token: str | None) -> None:
    """Print the rule that judges METHOD URL (a full URL, or a path alone, which names no
    host: a rule with hosts then denies it, as the check does) and the verdict for a
    caller of --role or of --token (neither: no token)."""
    access = get_access_rules()
    if access is None:
        raise click.ClickException("ACCESS_RULES_FILE is not set: the check judges by ?role=")
    if role is not None and token is not None:
        raise click.ClickException("give --role or --token, not both")
    if token is not None:
        role = _token_role(token)
    host, uri = _host_and_target(url)
    # judged as the gateway judges the method a proxy names (app/gateway/rules.py,
    # method_readings): upper-cased, and a HEAD as its GET too
    judgment = access.current().judge((method,), host, uri)
    click.echo(_rule_line(judgment))
    click.echo(f"verdict: {_verdict(judgment, role)}")


def _host_and_target(url: str) -> tuple[str | None, str]:
    """Return a URL's host (None for a path alone) and its target as a client sends it:
    the path (``/`` for none) and the query, never the fragment, still encoded."""
    if not url.lower().startswith(("http://", "https://")):  # a path: //a/b is one too
        return None, url.partition("#")[0]
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.netloc.rpartition("@")[2] or None, target


def _token_role(token: str) -> str | None:
    settings = current_settings()
    try:
        claims = verify_access_token(
            token, get_key_ring(), settings.clock_skew, get_clock(), get_expected_claims()
        )
    except InvalidTokenError as error:
        click.echo(f"token: refused ({error.reason})")
        return None
    role: str = claims["role"]
    click.echo(f"token: {claims['username']}, {role}")
    return role


def _rule_line(judgment: Judgment) -> str:
    if judgment.rule is None:
        if judgment.unknown is not None:
            return f"no rule: the request names no {judgment.unknown.removeprefix('a ')}"
        return "no rule matches: denied"
    line = f"rules[{judgment.rule.number}]: {judgment.rule.text}"
    if judgment.unknown is not None:
        line += f" (needs {judgment.unknown}, which the request does not name: denied)"
    return line


def _verdict(judgment: Judgment, role: str | None) -> str:
    """Return the check's answer for a caller of ``role`` (None: no valid token)."""
    verdict = judgment.verdict
    if verdict is Verdict.PUBLIC:
        return "200 (public)"
    if verdict is Verdict.DENY:
        return "403 (denied)"
    if role is None:
        return f"401 ({verdict.word}; no valid token)"
    if verdict is Verdict.ADMIN and role != "admin":
        return f"403 (admin only; the caller is {role})"
    return f"200 ({verdict.word}; the caller is {role})"
