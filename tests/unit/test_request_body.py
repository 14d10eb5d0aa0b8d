"""The request body's fast paths read exactly what werkzeug would have read."""

from __future__ import annotations

from urllib.parse import parse_qsl

import pytest
from werkzeug.exceptions import BadRequest
from werkzeug.sansio.utils import get_content_length
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from app.http.request_body import MAX_FORM_FIELDS, PLAIN_TYPES, _content_length, _form_fields
from tests.helpers.tokens import bearer, login

pytestmark = pytest.mark.store("sqlite")  # no store is involved


@pytest.mark.parametrize(
    "length", ["0", "12", "00012", "1" * 30, " 12", "12 ", "+12", "-12", "1_2", "١٢", "1e3", ""]
)
@pytest.mark.parametrize("transfer_encoding", [None, "chunked", "gzip"])
def test_the_content_length_is_werkzeugs(app, length, transfer_encoding):
    environ = {"CONTENT_LENGTH": length}
    if transfer_encoding is not None:
        environ["HTTP_TRANSFER_ENCODING"] = transfer_encoding
    with app.test_request_context(environ_overrides=environ):
        assert _content_length(environ) == get_content_length(length, transfer_encoding)


def test_no_content_length_is_none(app):
    with app.test_request_context():
        assert _content_length({}) is None


@pytest.mark.parametrize("content_type", sorted(PLAIN_TYPES))
def test_a_plain_content_type_is_its_own_mimetype(content_type):
    request = Request(EnvironBuilder(content_type=content_type).get_environ())
    assert request.mimetype == content_type


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        ("application/json", 200),
        ("Application/JSON", 200),  # not the plain spelling: werkzeug reads it
        ("application/json; charset=utf-8", 200),
        (" application/json", 200),
        ("application/jsonx", 415),
        ("application/x-www-form-urlencoded", 400),  # a form whose one field is the JSON
    ],
)
def test_every_spelling_of_a_type_gets_the_same_answer(client, content_type, status):
    token = login(client)["accessToken"]
    answer = client.post(
        "/restaurant-reservation",
        data='{"guestsCount": 4}',
        headers={**bearer(token), "Content-Type": content_type},
    )
    assert answer.status_code == status, answer.get_data(as_text=True)


@pytest.mark.parametrize(
    "body",
    [
        "", "&", "&&", "a", "a=", "=", "=x", "a=b=c", "a=1&b=2", "a=1&&b=2&", "&a=1",
        "username=bench&password=x", "a=1&a", "é=ü", "a=%41", "a+b=c+d", "a=%41&b=x",
        "x" * 300 + "=1", "a=1;b=2",
    ],
)  # fmt: skip
def test_a_form_reads_as_parse_qsl_reads_it(body):
    expected = parse_qsl(body, keep_blank_values=True, errors="strict")
    if len({name for name, _ in expected}) < len(expected):
        with pytest.raises(BadRequest, match="must be given once"):
            _form_fields(body.encode())
    else:
        assert _form_fields(body.encode()) == dict(expected)


@pytest.mark.parametrize("escaped", [False, True])
def test_a_form_of_too_many_fields_is_refused_with_or_without_escapes(escaped):
    fields = [f"f{number}={'%41' if escaped else 'a'}" for number in range(MAX_FORM_FIELDS)]
    assert len(_form_fields("&".join(fields).encode())) == MAX_FORM_FIELDS
    with pytest.raises(BadRequest, match="more than"):
        _form_fields("&".join([*fields, "one=more"]).encode())
    with pytest.raises(BadRequest, match="more than"):
        _form_fields("&".join([*fields, ""]).encode())  # parse_qsl counts the separators
