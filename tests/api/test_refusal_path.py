"""The 403 of a protected endpoint: a copy of a response built once, byte for byte the one
``render_http_error`` would build, and never shared between requests."""

from __future__ import annotations

from flask import Response

from app.http.errors import FORBIDDEN_BODY, forbidden_response
from tests.helpers.tokens import bearer, login


def test_the_copied_403_is_a_freshly_built_one():
    built = Response(FORBIDDEN_BODY, 403, content_type="application/json")
    copy = forbidden_response()
    assert type(copy) is type(built)
    assert (copy.status, copy.status_code) == (built.status, built.status_code)
    assert list(copy.headers.items()) == list(built.headers.items())
    assert copy.get_data() == built.get_data() == b'{"message":"No access"}\n'
    assert set(vars(copy)) == set(vars(built))


def test_each_403_has_headers_and_a_body_of_its_own():
    first = forbidden_response()
    first.headers["X-Changed"] = "1"
    first.set_data(b"changed")
    first.call_on_close(lambda: None)
    second = forbidden_response()
    assert "X-Changed" not in second.headers
    assert second.get_data() == FORBIDDEN_BODY
    assert second.headers["Content-Length"] == str(len(FORBIDDEN_BODY))
    assert second._on_close == []


def test_the_403_answer_and_its_line(client, capfd):
    token = login(client)["accessToken"]
    capfd.readouterr()
    for _ in range(2):
        response = client.get("/admin-accessible", headers=bearer(token))
        assert response.status_code == 403
        assert response.data == FORBIDDEN_BODY
        assert response.headers["Content-Type"] == "application/json"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
    line = capfd.readouterr().out.splitlines()[-1]
    assert '"user":"alice"' in line
    assert '"reason":"wrong_role"' in line
