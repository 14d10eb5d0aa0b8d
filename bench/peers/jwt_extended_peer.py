"""SPEC.md with Flask-JWT-Extended, as its documentation shows: no cache, no hardening.

The role travels as an additional claim and a custom decorator checks it
("Custom Decorators" in the docs); the error loaders give SPEC.md's plain-text 401.
Settings come from ``FLASK_*`` variables (``app.config.settings.from_prefixed_env``):
FLASK_SECRET_KEY, FLASK_DATABASE, FLASK_ACCESS_TOKEN_LIFETIME, FLASK_ADMIN_USERNAME.
"""

import secrets
import string
from functools import wraps

from flask import Flask, jsonify, request
from flask_jwt_extended import JWTManager, create_access_token, get_jwt, verify_jwt_in_request

from bench.peers import token_db

app = Flask(__name__)
# the Flask tutorial's defaults; FLASK_SECRET_KEY replaces the "dev" key
app.config.from_mapping(
    SECRET_KEY="dev",  # noqa: S106
    DATABASE="peer.sqlite3",
    ACCESS_TOKEN_LIFETIME=60,
    ADMIN_USERNAME="admin",
)
app.config.from_prefixed_env()
app.config["JWT_ACCESS_TOKEN_EXPIRES"] = app.config["ACCESS_TOKEN_LIFETIME"]
app.config["JWT_IDENTITY_CLAIM"] = "username"
jwt = JWTManager(app)
token_db.init_app(app)

ALPHABET = string.ascii_letters + string.digits


def unauthorized(*args):
    return "Unauthorized", 401, {"Content-Type": "text/plain"}


jwt.unauthorized_loader(unauthorized)
jwt.invalid_token_loader(unauthorized)
jwt.expired_token_loader(unauthorized)


def fields() -> dict:
    """Return the request's JSON object or form fields."""
    return request.get_json() if request.is_json else request.form


def access_token(username: str) -> str:
    role = "admin" if username == app.config["ADMIN_USERNAME"] else "user"
    return create_access_token(identity=username, additional_claims={"role": role})


def requires_roles(*roles: str):
    """Let only a valid Bearer token (else 401) of one of ``roles`` (else 403) through."""

    def decorator(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            verify_jwt_in_request()
            role = get_jwt()["role"]
            if roles and role not in roles and not (role == "admin" and "user" in roles):
                return jsonify(message="No access"), 403
            return view(*args, **kwargs)

        return wrapper

    return decorator


def current_user() -> dict:
    claims = get_jwt()
    return {name: claims[name] for name in ("username", "role", "iat", "exp")}


@app.post("/login")
def login():
    username = fields()["username"]
    refresh_token = "".join(secrets.choice(ALPHABET) for _ in range(42))
    token_db.record(refresh_token, username)
    return jsonify(accessToken=access_token(username), refreshToken=refresh_token)


@app.post("/token")
def refresh():
    body = fields()
    if token_db.owner_of(body["refreshToken"]) != body["username"]:
        return unauthorized()
    return jsonify(accessToken=access_token(body["username"]))


@app.delete("/token/<refresh_token>")
def revoke(refresh_token: str):
    token_db.forget(refresh_token)
    return "", 204


@app.post("/restaurant-reservation")
@requires_roles()
def restaurant_reservation():
    return jsonify(user=current_user(), guestsCount=fields()["guestsCount"])


@app.get("/user-accessible")
@requires_roles("user")
def user_accessible():
    return jsonify(message="for all users", user=current_user())


@app.get("/admin-accessible")
@requires_roles("admin")
def admin_accessible():
    return jsonify(message="for admins only", user=current_user())
