"""The gateway's rules (ACCESS_RULES_FILE): the file's checks, the first match, hosts, and
paths judged in every reading an upstream could make, never laxer than the canonical one."""

from __future__ import annotations

import json
import os
import unicodedata
from urllib.parse import unquote

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.config.parsers import ConfigError
from app.gateway.paths import FOLDS, host_name, path_readings, query_methods, remove_dot_segments
from app.gateway.rules import (
    AccessRulesFile,
    RulesFileError,
    Verdict,
    parse_rules,
    read_rules_file,
)
from app.instance import check_access_rules_file
from tests.helpers.paths import CANONICAL, UNREADABLE, method_named, rewritten, tricked
from tests.helpers.tools import ROOT

RULES = b"""
[[rules]]
paths = ["/public/", "/health"]
allow = "public"

[[rules]]
paths = ["/admin/", "re:^/api/v[0-9]+/admin"]
allow = "admin"

[[rules]]
hosts = ["internal.example.com"]
allow = "deny"

[[rules]]
hosts = ["*.example.com", "app.example.org"]
methods = ["DELETE"]
allow = "admin"

[[rules]]
paths = ["/"]
allow = "user"
"""
ACCESS = parse_rules(RULES)


def rules_toml(*rules: str) -> str:
    """Return a rules file of ``rules``, each its keys separated by ``; ``."""
    return "".join("[[rules]]\n" + rule.replace("; ", "\n") + "\n" for rule in rules)


def verdict(uri: str, method: str = "GET", host: str | None = "app.example.com") -> Verdict:
    return ACCESS.judge((method,), host, uri).verdict


# --- the first match, hosts and methods ------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("/public/logo.png", Verdict.PUBLIC),
        ("/health", Verdict.PUBLIC),
        ("/admin/panel", Verdict.ADMIN),
        ("/admin", Verdict.ADMIN),  # a prefix ending in / takes the path without it too
        ("/api/v2/admin/users", Verdict.ADMIN),
        ("/api/v2/items", Verdict.USER),
        ("/", Verdict.USER),
        ("/admin/panel?x=/public/", Verdict.ADMIN),  # the query is no part of the path
        ("/public/x#/admin/", Verdict.DENY),  # a raw # is never sent: one parser cuts there
        ("https://app.example.com/admin/x", Verdict.ADMIN),  # absolute form
    ],
)
def test_the_first_rule_that_matches_decides(uri, expected):
    assert verdict(uri) is expected


def test_a_request_no_rule_matches_is_denied():
    only = parse_rules(rules_toml('paths = ["/app/"]; allow = "user"').encode())
    judgment = only.judge(("GET",), "a.example.com", "/other")
    assert judgment.verdict is Verdict.DENY
    assert judgment.rule is None


@pytest.mark.parametrize(
    "host",
    ["a.example.com", "A.Example.COM", "a.example.com.", "a.example.com:8443", "x.y.example.com"],
)
def test_hosts_are_read_without_case_port_or_trailing_dot(host):
    assert verdict("/x", "DELETE", host) is Verdict.ADMIN


@pytest.mark.parametrize("host", ["example.com", "aexample.com", "example.com.evil", "[::1]:80"])
def test_a_wildcard_matches_the_names_below_its_domain_only(host):
    assert verdict("/x", "DELETE", host) is Verdict.USER


def test_host_name_reads_ipv6_and_empty_hosts():
    assert host_name("[::1]:8080") == "[::1]"
    assert host_name("") is None
    assert host_name("EXAMPLE.com.:80") == "example.com"


#: Hosts an upstream may read another name in than a splitter at the last colon.
BAD_HOSTS = [
    "a.example.com:80:81",
    "internal.example.com:80:81",
    "a.example.com@evil",
    "evil@a.example.com",
    "a.example.com;x",
    "a.example.com:",
    "a.example.com:8o",
    "a.example.com/x",
    "a b.example.com",
    "[::1",
    "[::1]x",
    "a.example.com:123456",
    "adm\u0131n.example.com",
    ".",
]


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_a_host_that_is_no_plain_name_is_denied_where_a_rule_names_hosts(host):
    assert host_name(host) is None
    judgment = ACCESS.judge(("GET",), host, "/public/x")
    assert judgment.verdict is Verdict.DENY
    assert judgment.unknown == "a readable host"


@pytest.mark.parametrize("host", BAD_HOSTS)
def test_a_host_that_is_no_plain_name_matters_not_where_no_rule_names_hosts(host):
    rules = parse_rules(
        rules_toml('paths = ["/admin/"]; allow = "admin"', 'allow = "user"').encode()
    )
    assert rules.judge(("GET",), host, "/x").verdict is Verdict.USER
    assert rules.judge(("GET",), host, "/admin/x").verdict is Verdict.ADMIN


def test_methods_match_as_listed():
    assert verdict("/x", "DELETE", "b.example.com") is Verdict.ADMIN
    assert verdict("/x", "GET", "b.example.com") is Verdict.USER
    assert verdict("/x", "GET", "internal.example.com") is Verdict.DENY


@pytest.mark.parametrize(
    ("methods", "host", "uri", "unknown"),
    [
        (("GET",), None, "/x", "the host"),  # rules[3] names hosts
        (None, "a.example.com", "/x", "the method"),  # rules[4] names methods
        (("GET",), "other.org", None, "the path"),  # rules[1] names paths
    ],
)
def test_a_rule_that_depends_on_what_the_request_does_not_tell_denies(methods, host, uri, unknown):
    judgment = ACCESS.judge(methods, host, uri)
    assert judgment.verdict is Verdict.DENY
    assert judgment.unknown == unknown


@pytest.mark.parametrize("methods", [("",), (" ",), ("", " ")])
def test_an_empty_method_names_none(methods):
    judgment = ACCESS.judge(methods, "a.example.com", "/x")
    assert (judgment.verdict, judgment.unknown) == (Verdict.DENY, "the method")


def test_a_rule_that_depends_on_nothing_unknown_still_decides():
    rules = parse_rules(rules_toml('allow = "user"').encode())
    assert rules.judge(None, None, None).verdict is Verdict.USER


# --- paths as an upstream could read them ------------------------------------------

#: Each with a user token would reach an admin upstream if judged by its spelling alone.
TRICKS = [
    "/ADMIN/panel",  # case
    "/Admin/Panel",
    "/x/..;/admin/panel",  # Tomcat: ..; is ..
    "/admin;/panel",  # ; parameters
    "/admin;jsessionid=1/panel",
    "/public/../admin/panel",  # dot segments
    "/public/./../admin/panel",
    "/./admin/panel",
    "/public/%2e%2e/admin/panel",  # encoded dots
    "/public/%2E%2E/admin/panel",
    "/public/.%2e/admin/panel",
    "//admin/panel",  # repeated slashes
    "/public//../admin/panel",
    "/public/..%2fadmin/panel",  # encoded slashes
    "/public/..%2Fadmin/panel",
    "/public%2f..%2fadmin/panel",
    "/public/..%5cadmin/panel",  # encoded backslash
    "/public\\..\\admin\\panel",  # backslashes
    "/public/%252e%252e/admin/panel",  # encoded twice
    "/public/%25252e%25252e/admin/panel",  # three times
    "/%61dmin/panel",  # percent-encoding generally
    "/public/..;jsessionid=x/admin/panel",
    "/public/%2e%2e;/admin/panel",
    "/public/..%3b/admin/panel",
    "/api/v1/../v2/ADMIN/x",
    "/api/v1/%61dmin",
    "/adm%C4%B1n/panel",  # Unicode case folds: dotless i, I with dot, long s, Kelvin sign
    "/adm\u0131n/panel",
    "/ADM%C4%B0N/panel",
    "/api/v1/%E2%84%AAadmin/../admin",
    "/%C4%B0%C5%BF/../admin/panel",
    "/admin./panel",  # trailing dots and spaces, dropped by Windows servers
    "/admin%20/panel",
    "/admin /panel",
    "/admin.%20./panel",
    "/public/.../admin/panel",
    "//host/admin/panel",  # a URL parser's authority, then the path
    "/%2fpublic/admin/panel",
    "/\\public/admin/panel",
    "/.//public/admin/panel",
    "/p%23/../admin/panel",  # an encoded # is a character of the path
]


@pytest.mark.parametrize("uri", TRICKS)
def test_no_spelling_of_an_admin_path_passes_a_user(uri):
    assert verdict(uri) >= Verdict.ADMIN


@pytest.mark.parametrize(
    "uri",
    [
        "/public/" + "a" * 8200,
        "/public/" + "a/" * 1100 + "%2e",
        "/public/%00",
        "/public/%0a/x",
        "/public/\x7f",
        "/%25252525252e",
        "admin/x",
        "*",
        "/public/#/../../admin/x",  # a raw #: one parser cuts there, another reads on
        "/public#",
        "/%u0061dmin/panel",  # IIS's %u escapes
        "/public/%25u002e%25u002e/admin",
        "/public/%C0%AE%C0%AE/admin/panel",  # overlong UTF-8 (../)
        "/public/%ff/x",  # no UTF-8 at all
        "/public/%E2%82/x",
    ],
)
def test_a_path_that_is_no_path_or_holds_a_control_character_is_denied(uri):
    assert verdict(uri) is Verdict.DENY


@pytest.mark.parametrize("uri", ["/admin%3F/panel", "/admin%23/panel", "/admin%253f/panel"])
def test_a_decoded_query_or_fragment_mark_ends_the_path_in_one_reading(uri):
    # an upstream that decodes the path and parses it again as a URL ends it there
    rules = parse_rules(
        rules_toml('paths = ["/admin/"]; allow = "admin"', 'allow = "user"').encode()
    )
    assert rules.judge(("GET",), None, uri).verdict is Verdict.ADMIN


def test_remove_dot_segments_is_rfc_3986s():
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/../../x") == "/x"
    assert remove_dot_segments("/a/..") == "/"
    assert remove_dot_segments("/a/.") == "/a/"


def test_an_ordinary_path_reads_only_as_itself_and_lowercased():
    assert path_readings("/App/items") == {"/App/items", "/app/items"}
    assert path_readings("/app/items.json") == {"/app/items.json"}


@given(data=st.data(), path=CANONICAL)
def test_no_rewriting_is_judged_laxer_than_the_canonical_path(data, path):
    spelled = data.draw(rewritten(path))
    assert verdict(spelled) >= verdict(path), spelled


@given(data=st.data(), path=CANONICAL)
def test_the_canonical_path_is_among_the_readings_of_any_rewriting(data, path):
    spelled, used = data.draw(tricked(path))
    readings = path_readings(spelled)
    # None: unreadable, or encoded more often than any upstream decodes: denied
    assert readings is None or path in readings
    assert readings is not None or used & UNREADABLE or "%2525" in spelled or no_utf8(spelled)


def no_utf8(spelled: str) -> bool:
    """Return whether a decoding of ``spelled`` is no UTF-8 (an escape of a character's
    bytes encoded again in part)."""
    for _ in range(4):
        spelled = unquote(spelled, errors="surrogateescape")
        if any("\udc80" <= character <= "\udcff" for character in spelled):
            return True
    return False


@given(data=st.data(), path=CANONICAL)
def test_no_method_a_query_names_is_judged_laxer_than_the_method_itself(data, path):
    method, _, query = data.draw(method_named("DELETE"))
    assume(query)  # the view reads the method's case and the override headers
    assert verdict(path + query, method) >= verdict(path, "DELETE"), (method, query)


def test_a_query_naming_a_method_makes_the_verdict_only_stricter():
    assert verdict("/x?_method=DELETE", "POST") is Verdict.ADMIN
    assert verdict("/x?a=1&%5Fmethod=delete", "GET") is Verdict.ADMIN
    assert verdict("/x?_method=DELETE", "POST", "other.org") is Verdict.USER
    assert verdict("/x?_method=", "POST") is Verdict.USER


@pytest.mark.parametrize(
    ("uri", "methods"),
    [
        ("/x?a=1", ()),
        ("/x?_method=put", ("PUT",)),
        ("/x?_METHOD=Put&_method=patch", ("PUT", "PATCH")),
        ("/x?%5F%6Dethod=DELETE", ("DELETE",)),
        ("/x?a=1;_method=delete", ("DELETE",)),
        ("/x?+_method+=+put+", ("PUT",)),
        ("/x?_method=&b", ()),
        ("/x?method=DELETE", ()),
        ("/x?.method=DELETE", ("DELETE",)),  # PHP reads . and [ in a name as _
        ("/x?[method=DELETE", ("DELETE",)),
        ("/x?%2Emethod=put", ("PUT",)),
        ("/x?xmethod=DELETE", ()),
    ],
)
def test_query_methods_reads_each_method_parameter(uri, methods):
    assert query_methods(uri) == methods


def test_the_fold_table_holds_every_character_whose_case_mapping_is_ascii():
    # Java maps case one character to one: a first character before combining marks counts
    found = {}
    for code in range(0x80, 0x110000):
        character = chr(code)
        if 0xD800 <= code < 0xE000:
            continue
        for mapped in (
            character.lower(),
            character.upper(),
            character.casefold(),
            character.upper().lower(),
        ):
            marks = mapped[1:]
            if mapped[:1].isascii() and all(unicodedata.combining(mark) for mark in marks):
                mapped = mapped[:1]
            if mapped.isascii():
                found[character] = mapped.lower()
    assert found == FOLDS


@pytest.mark.parametrize("character", sorted(FOLDS))
def test_each_folding_character_reads_as_its_ascii_letters(character):
    uri = "/x/" + character
    assert "/x/" + FOLDS[character] in path_readings(uri)


# --- the file, checked when it is read -------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (rules_toml('allow = "user"; path = ["/x"]'), "rules[1]: unknown key 'path'"),
        (
            rules_toml('allow = "user"', 'allow = "admn"'),
            "rules[2]: unknown verdict 'admn'",
        ),
        (rules_toml('allow = "Admin"'), "rules[1]: unknown verdict 'Admin'"),
        (rules_toml('paths = ["re:(x"]; allow = "user"'), "rules[1]: bad pattern '(x'"),
        (rules_toml('paths = ["admin/"]; allow = "user"'), "rules[1]: bad path 'admin/'"),
        (rules_toml('paths = ["/Admin/"]; allow = "user"'), "must be lower case"),
        (rules_toml('paths = ["/a/../b"]; allow = "user"'), "must be a plain path"),
        (rules_toml('paths = ["/a%2f"]; allow = "user"'), "must be a plain path"),
        (rules_toml('paths = []; allow = "user"'), "rules[1]: paths is empty"),
        (rules_toml('paths = "/x"; allow = "user"'), "rules[1]: paths must be a list"),
        (rules_toml('hosts = ["a.com:80"]; allow = "user"'), "rules[1]: bad host 'a.com:80'"),
        (rules_toml('methods = ["get"]; allow = "user"'), "rules[1]: bad method 'get'"),
        (rules_toml('paths = ["/x"]'), "rules[1]: allow is required"),
        ("rules = 1\n", "no [[rules]]"),
        ('x = 1\n[[rules]]\nallow = "user"\n', "unknown key 'x'"),
        ("[[rules]\n", "not TOML"),
        (
            rules_toml('allow = "user"', 'paths = ["/x"]; allow = "admin"'),
            "rules[2]: never matches: rules[1] matches every request it would",
        ),
        (
            rules_toml(
                'paths = ["/admin/"]; allow = "admin"', 'paths = ["/admin/x"]; allow = "user"'
            ),
            "rules[2]: never matches",
        ),
        (
            rules_toml(
                'hosts = ["*.a.com"]; allow = "admin"',
                'hosts = ["x.a.com"]; methods = ["GET"]; allow = "user"',
            ),
            "rules[2]: never matches",
        ),
        (
            rules_toml(
                'methods = ["GET", "POST"]; allow = "admin"', 'methods = ["GET"]; allow = "user"'
            ),
            "rules[2]: never matches",
        ),
        (
            rules_toml('paths = ["re:^/x"]; allow = "admin"', 'paths = ["re:^/x"]; allow = "user"'),
            "rules[2]: never matches",
        ),
        (  # every path a request names begins with /
            rules_toml('paths = ["/"]; allow = "user"', 'paths = ["re:^/admin"]; allow = "admin"'),
            "rules[2]: never matches",
        ),
        (  # never matching the lower-cased readings that a case-blind upstream serves
            rules_toml('paths = ["re:^/Reports/"]; allow = "admin"'),
            "rules[1]: bad pattern '^/Reports/': must be lower case",
        ),
        (  # every path read begins with /
            rules_toml('paths = ["re:^admin"]; allow = "admin"'),
            "rules[1]: bad pattern '^admin': never matches",
        ),
        (  # a prefix is no glob
            rules_toml('paths = ["/admin/*"]; allow = "admin"'),
            "rules[1]: bad path '/admin/*': a prefix is no pattern",
        ),
        (rules_toml('paths = ["re:x{4294967296}"]; allow = "user"'), "OverflowError"),
        (rules_toml('paths = ["re:[[a]"]; allow = "user"'), "Possible nested set"),
        (
            rules_toml('paths = ["re:' + "(" * 1200 + "x" + ")" * 1200 + '"]; allow = "user"'),
            "rules[1]: bad pattern",
        ),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deep"),
    ],
)
def test_a_bad_file_is_refused_in_one_line_naming_the_rule(text, message):
    with pytest.raises(RulesFileError) as raised:
        parse_rules(text.encode())
    assert message in str(raised.value)
    assert str(raised.value).startswith("ACCESS_RULES_FILE")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "text",
    [
        # a narrower rule first, then the wider: both can decide
        rules_toml('paths = ["/admin/x"]; allow = "user"', 'paths = ["/admin/"]; allow = "admin"'),
        rules_toml(
            'methods = ["GET"]; allow = "user"', 'methods = ["GET", "POST"]; allow = "admin"'
        ),
        rules_toml('hosts = ["x.a.com"]; allow = "user"', 'hosts = ["*.a.com"]; allow = "admin"'),
        rules_toml('paths = ["re:^/x"]; allow = "admin"', 'paths = ["/x"]; allow = "user"'),
        # an escape's capital is no case: \S, \W
        rules_toml('paths = ["re:^/r/\\\\S+/\\\\W"]; allow = "admin"', 'allow = "user"'),
    ],
)
def test_a_rule_after_a_narrower_one_is_no_shadow(text):
    assert len(parse_rules(text.encode()).rules) == 2


def test_a_changed_file_is_read_again_and_a_bad_change_keeps_the_rules_in_force(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(rules_toml('allow = "user"'))
    now = [0.0]
    problems: list[str] = []
    live = AccessRulesFile(str(path), monotonic=lambda: now[0], on_error=problems.append)
    assert live.current().rules[0].verdict is Verdict.USER
    path.write_text(rules_toml('allow = "admin"'))
    os.utime(path, ns=(1, 1))
    assert live.current().rules[0].verdict is Verdict.USER  # not looked at within the second
    now[0] = 1.0
    assert live.current().rules[0].verdict is Verdict.ADMIN
    path.write_text(rules_toml('allow = "nobody"'))
    os.utime(path, ns=(2, 2))
    now[0] = 2.0
    assert live.current().rules[0].verdict is Verdict.ADMIN
    assert problems == [
        "ACCESS_RULES_FILE rules[1]: unknown verdict 'nobody' (public, user, admin or deny)"
    ]


def test_a_file_read_well_before_in_this_process_is_never_refused_only_reported(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(rules_toml('allow = "admin"'))
    read_rules_file(str(path))  # as gunicorn's master does before it forks a worker
    path.write_text(rules_toml('allow = "nobody"'))
    problems: list[str] = []
    live = AccessRulesFile(str(path), monotonic=lambda: 0.0, on_error=problems.append)
    assert live.current().rules[0].verdict is Verdict.ADMIN
    assert problems == [
        "ACCESS_RULES_FILE rules[1]: unknown verdict 'nobody' (public, user, admin or deny)"
    ]
    check_access_rules_file(str(path))  # a reload of the settings does not stop either
    other = tmp_path / "other.toml"
    other.write_text(rules_toml('allow = "nobody"'))
    with pytest.raises(ConfigError, match="unknown verdict"):  # a first start does
        check_access_rules_file(str(other))


def test_a_missing_file_is_refused(tmp_path):
    with pytest.raises(RulesFileError, match="cannot be read"):
        AccessRulesFile(str(tmp_path / "none.toml"), monotonic=lambda: 0.0, on_error=print)


def test_the_documented_rules_file_reads():
    text = (ROOT / "docs" / "gateway.md").read_text()
    example = text.split("## Access rules", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    rules = parse_rules(example.encode())
    judgment = rules.judge(("POST",), "app.example.com", "/x/..;/admin/panel")
    assert judgment.verdict is Verdict.ADMIN


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.text(alphabet="^$()[]{}|?*+.\\/ax0-9,", max_size=40),
    prefix=st.text(max_size=20),
)
def test_any_path_in_a_file_loads_or_is_refused_in_one_line(pattern, prefix):
    # never another exception: at start it is the one line, on a reload the old rules stay
    text = rules_toml(
        f'paths = [{json.dumps("re:" + pattern)}, {json.dumps(prefix)}]; allow = "user"'
    )
    message = ""
    try:
        parse_rules(text.encode())
    except RulesFileError as error:
        message = str(error)
    assert "\n" not in message
