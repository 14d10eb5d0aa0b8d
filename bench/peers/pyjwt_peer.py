"""SPEC.md in plain Flask and PyJWT, as their documentation shows: no cache, no hardening.

Settings come from ``FLASK_*`` variables (``app.config.settings.from_prefixed_env``):
FLASK_SECRET_KEY, FLASK_DATABASE, FLASK_ACCESS_TOKEN_LIFETIME, FLASK_ADMIN_USERNAME.
"""

import secrets
import string
import time
from functools import wraps

import jwt
from flask import Flask, g, jsonify, request

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
token_db.init_app(app)

ALPHABET = string.ascii_letters + string.digits


def fields() -> dict:
    """Return the request's JSON object or form fields."""
    return request.get_json() if request.is_json else request.form


def unauthorized():
    return "Unauthorized", 401, {"Content-Type": "text/plain"}


def role_of(username: str) -> str:
    return "admin" if username == app.config["ADMIN_USERNAME"] else "user"


def access_token(username: str) -> str:
    now = int(time.time())
    claims = {
        "username": username,
        "role": role_of(username),
        "iat": now,
        "exp": now + app.config["ACCESS_TOKEN_LIFETIME"],
    }
    return jwt.encode(claims, app.config["SECRET_KEY"], algorithm="HS256")


def requires_roles(*roles: str):
    """Let only a valid Bearer token (else 401) of one of ``roles`` (else 403) through."""

    def decorator(view):
        @wraps(view)
        def wrapper(*args, **kwargs):
            scheme, _, token = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer":
                return unauthorized()
            try:
                g.user = jwt.decode(token, app.config["SECRET_KEY"], algorithms=["HS256"])
            except jwt.InvalidTokenError:
                return unauthorized()
            role = g.user["role"]
            if roles and role not in roles and not (role == "admin" and "user" in roles):
                return jsonify(message="No access"), 403
            return view(*args, **kwargs)

        return wrapper

    return decorator


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
    return jsonify(user=g.user, guestsCount=fields()["guestsCount"])


@app.get("/user-accessible")
@requires_roles("user")
def user_accessible():
    return jsonify(message="for all users", user=g.user)


@app.get("/admin-accessible")
@requires_roles("admin")
def admin_accessible():
    return jsonify(message="for admins only", user=g.user)
