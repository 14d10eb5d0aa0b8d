"""The request body's fast paths read exactly what werkzeug would have read."""

from __future__ import annotations

import pytest
from werkzeug.sansio.utils import get_content_length
from werkzeug.test import EnvironBuilder
from werkzeug.wrappers import Request

from app.request_body import PLAIN_TYPES, _content_length
from tests.conftest import bearer, login

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
