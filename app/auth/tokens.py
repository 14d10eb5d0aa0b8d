"""Access tokens, cookie tokens and refresh tokens: how they are made and checked."""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import secrets
import string
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt

from app.auth.json_text import may_repeat_a_key, repeats_a_key
from app.auth.key_files import is_low_s, twin_signature
from app.config.clock import SYSTEM_CLOCK, Clock
from app.config.settings import DEFAULT_CLOCK_SKEW, ES256
from app.config.usernames import MAX_USERNAME_LENGTH
from app.events import Reason

if TYPE_CHECKING:
    from app.auth.keys import KeyRing

ROLES = ("admin", "user")
REFRESH_TOKEN_LENGTH = 42
REFRESH_TOKEN_ALPHABET = string.ascii_letters + string.digits
#: Random bytes below this are kept (248 = 4 x 62), so each letter is equally likely.
_UNIFORM_BELOW = 256 - 256 % len(REFRESH_TOKEN_ALPHABET)
#: Byte b < 248 becomes letter b % 62; bytes from 248 up are dropped (rejection sampling).
_BYTE_TO_LETTER = bytes(
    ord(REFRESH_TOKEN_ALPHABET[byte % len(REFRESH_TOKEN_ALPHABET)]) for byte in range(256)
)
_REJECTED_BYTES = bytes(range(_UNIFORM_BELOW, 256))
#: Random bytes drawn per try: 42 of 64 survive all but once in about 10^20 tries.
_RANDOM_BYTES_PER_TRY = 64
#: A JWT longer than this is refused before any parsing. A username of 256 emoji is
#: about 4.3 KB once signed (JSON escapes each as 12 characters); headers stop at 8 KiB.
MAX_TOKEN_LENGTH = 8192

#: Verified access tokens remembered per process (at most 8 KiB each, so at most 8 MiB).
VERIFIED_TOKEN_CACHE_SIZE = 1024
#: Tokens refused for their signature or form, remembered per process (8 MiB at most).
REFUSED_TOKEN_CACHE_SIZE = 1024

ACCESS_TOKEN_CLAIMS = ("username", "role", "iat", "exp")
#: The claims an access token also carries, and must carry, with TOKEN_ISSUER set.
STANDARD_CLAIMS = ("iss", "sub", "aud", "jti")
#: The fields of the third-party user in a cookie token's ``sub``; each may be absent.
COOKIE_USER_FIELDS = ("source", "id", "shownName")


#: Why a token was refused (app/events.py names every reason).
MALFORMED, BAD_SIGNATURE, EXPIRED = Reason.MALFORMED, Reason.BAD_SIGNATURE, Reason.EXPIRED


class InvalidTokenError(Exception):
    """A token is missing, malformed, wrongly signed, expired or lacks a claim."""

    def __init__(
        self, message: str, reason: Reason = MALFORMED, *, permanent: bool = False
    ) -> None:
        super().__init__(message)
        #: ``malformed`` (anything not a valid token of ours), ``bad_signature`` or ``expired``
        self.reason = reason
        #: True when the token text and the key alone decide it (a signature, the form):
        #: no later moment can make this token valid.
        self.permanent = permanent


class _RefusedTokens:
    """The last tokens refused for good (see ``InvalidTokenError.permanent``), by text and ring.

    A client that keeps sending one bad token (signed with an old key, say) costs a
    dictionary look-up per request instead of PyJWT's whole verification. Only a
    refusal is remembered, never a token that verified, so it can only ever say no.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._reasons: dict[tuple[str, KeyRing], Reason] = {}
        self._lock = threading.Lock()

    def reason(self, token: str, keys: KeyRing) -> Reason | None:
        return self._reasons.get((token, keys))

    def add(self, token: str, keys: KeyRing, reason: Reason) -> None:
        with self._lock:
            if len(self._reasons) >= self.size:  # forget the oldest
                del self._reasons[next(iter(self._reasons))]
            self._reasons[(token, keys)] = reason


# Module state, like the cache of verified tokens below, and for the same reason: it holds
# only pure results (token text and key in, a refusal out).
_REFUSED = _RefusedTokens(REFUSED_TOKEN_CACHE_SIZE)


@dataclass(frozen=True)
class ExpectedClaims:
    """TOKEN_ISSUER and TOKEN_AUDIENCE: the ``iss`` every access token carries and must
    carry, and the audiences of which its ``aud`` must name one."""

    issuer: str
    audiences: tuple[str, ...]


def role_for(username: str, admin_username: str) -> str:
    """Return the role of ``username``: ``admin`` for the configured admin, else ``user``."""
    return "admin" if username == admin_username else "user"


def issue_access_token(
    username: str,
    role: str,
    keys: KeyRing,
    lifetime: int,
    now: int | None = None,
    *,
    clock: Clock = SYSTEM_CLOCK,
    expected: ExpectedClaims | None = None,
    audiences: tuple[str, ...] = (),
) -> str:
    """Return an access token for ``username``, signed with the current key, that expires
    ``lifetime`` seconds from ``now`` (by default, the ``clock``'s).

    With ``expected`` (TOKEN_ISSUER), the token also carries ``iss``, ``sub`` (the
    username), ``aud`` (``audiences``, by default all of TOKEN_AUDIENCE; one is written
    as a string) and a random ``jti``; without, SPEC.md's four claims only.
    """
    issued_at = int(clock()) if now is None else now
    claims: dict[str, Any] = {
        "username": username,
        "role": role,
        "iat": issued_at,
        "exp": issued_at + lifetime,
    }
    if expected is not None:
        named = audiences or expected.audiences
        claims.update(
            iss=expected.issuer,
            sub=username,
            aud=named[0] if len(named) == 1 else list(named),
            jti=secrets.token_urlsafe(16),
        )
    return keys.current.sign(claims)


def verify_access_token(
    token: str,
    keys: KeyRing,
    clock_skew: int = DEFAULT_CLOCK_SKEW,
    clock: Clock = SYSTEM_CLOCK,
    expected: ExpectedClaims | None = None,
) -> dict[str, Any]:
    """Return the claims of a valid access token, or raise InvalidTokenError.

    With ``expected``, the token must also carry its ``iss``, an ``aud`` naming one of its
    audiences, a ``sub`` equal to its ``username`` and a ``jti``: a token of another
    issuer or for another audience is refused as a forged one is.
    """
    refused = _REFUSED.reason(token, keys)
    if refused is not None:
        raise InvalidTokenError("token was refused before", refused, permanent=True)
    try:
        username, role, issued_at, expires_at, standard = _verified_access_claims(
            token, keys, clock_skew, clock, expected
        )
    except InvalidTokenError as error:
        if error.permanent:
            _REFUSED.add(token, keys, error.reason)
        raise
    # A cached verification must not outlive the token: expiry is checked every time.
    if clock() >= expires_at:
        raise InvalidTokenError("token has expired", EXPIRED)
    claims = {"username": username, "role": role, "iat": issued_at, "exp": expires_at}
    if standard:
        claims.update(standard)
    return claims


# A per-process cache is module state, which the service otherwise keeps out: it holds
# only pure results (token text and keys in, claims out), so it cannot leak between
# apps or go stale, and it takes PyJWT's verification off most requests.
@functools.lru_cache(maxsize=VERIFIED_TOKEN_CACHE_SIZE)
def _verified_access_claims(
    token: str, keys: KeyRing, clock_skew: int, clock: Clock, expected: ExpectedClaims | None
) -> tuple[str, str, int, int, dict[str, Any] | None]:
    # Clients send the same token for its whole lifetime, and PyJWT spends most of a
    # request's CPU on it; only tokens that verified are cached (a raise is not), keyed
    # by the exact token text, so a forged or altered token never hits the cache, and
    # by the key ring (compared by identity), so a token is only ever taken as verified
    # by the keys it was verified with, and by the clock it was checked against. A cached
    # iat stays acceptable: it only moves further into the past. The expected issuer
    # and audiences are part of the key, so a token is only taken by the app that expects them.
    if expected is None:
        claims = _decode(token, keys, clock_skew, clock, required=ACCESS_TOKEN_CLAIMS)
    else:
        claims = _decode(
            token,
            keys,
            clock_skew,
            clock,
            required=ACCESS_TOKEN_CLAIMS + STANDARD_CLAIMS,
            expected=expected,
        )
    username, role = claims["username"], claims["role"]
    if not isinstance(username, str) or not 0 < len(username) <= MAX_USERNAME_LENGTH:
        raise InvalidTokenError("username claim must be a non-empty string")
    if role not in ROLES:
        raise InvalidTokenError("role claim must be admin or user")
    if not (_is_integer(claims["iat"]) and _is_integer(claims["exp"])):
        raise InvalidTokenError("iat and exp claims must be integers")
    if expected is None:
        return username, role, claims["iat"], claims["exp"], None
    if claims["sub"] != username:
        raise InvalidTokenError("sub claim must be the username")
    if not isinstance(claims["jti"], str):
        raise InvalidTokenError("jti claim must be a string")
    standard = {name: claims[name] for name in STANDARD_CLAIMS}
    return username, role, claims["iat"], claims["exp"], standard


@dataclass(frozen=True)
class CookieUser:
    """A cookie token's third-party user, and what their login granted them.

    ``profile`` is the token's ``sub`` object ``{source, id, shownName}``, what
    ``GET /api/v1/me`` answers; ``role`` and ``email`` are claims beside it, so that
    answer never changes shape.
    """

    profile: dict[str, str]
    role: str = "user"
    email: str | None = None


def issue_cookie_token(
    user: dict[str, str],
    keys: KeyRing,
    lifetime: int,
    clock: Clock = SYSTEM_CLOCK,
    *,
    role: str = "user",
    email: str | None = None,
) -> str:
    """Return a cookie token, signed with the current key, naming the third-party ``user``
    as its ``sub`` object, with their ``role`` and their verified ``email`` beside it."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    # jti: a logout denies its token's signing input, and two logins of one user in the
    # same second would otherwise sign the same one, so that one logout ended both
    claims: dict[str, Any] = {
        "sub": user,
        "exp": int(clock()) + lifetime,
        "jti": secrets.token_urlsafe(16),
        "role": role,
    }
    if email is not None:
        claims["email"] = email
    return keys.current.sign(claims)


def verify_cookie_token(
    token: str, keys: KeyRing, clock_skew: int = DEFAULT_CLOCK_SKEW, clock: Clock = SYSTEM_CLOCK
) -> CookieUser:
    """Return the user of a valid cookie token, or raise.

    A token with no ``role`` (issued before roles were) is a ``user``'s.
    """
    # PyJWT 2.10 started to insist that ``sub`` is a string (RFC 7519); this token's
    # ``sub`` is an object by contract, so that one check is off here and nowhere else.
    # Signature, algorithm and expiry are still verified, and the type is checked below.
    claims = _decode(token, keys, clock_skew, clock, required=("sub", "exp"), verify_sub=False)
    user = claims["sub"]
    if not isinstance(user, dict):
        raise InvalidTokenError("sub claim must be an object")
    if not isinstance(claims["exp"], (int, float)) or isinstance(claims["exp"], bool):
        raise InvalidTokenError("exp claim must be a number")
    if any(not isinstance(user.get(name, ""), str) for name in COOKIE_USER_FIELDS):
        raise InvalidTokenError("sub fields must be strings")
    role, email = claims.get("role", "user"), claims.get("email")
    if role not in ROLES:
        raise InvalidTokenError("role claim must be user or admin")
    if email is not None and not isinstance(email, str):
        raise InvalidTokenError("email claim must be a string")
    profile = {name: user[name] for name in COOKIE_USER_FIELDS if name in user}
    return CookieUser(profile, role, email)


def logout_digest(token: str) -> str:
    """Return the SHA-256 hex digest a logout denies ``token`` by: that of its signing input
    (header and payload, as written), which its signer alone can change, never a signature."""
    signing_input = token.rpartition(".")[0]
    return hashlib.sha256(signing_input.encode("utf-8", "surrogatepass")).hexdigest()


def signed_texts(token: str, keys: KeyRing) -> tuple[str, ...]:
    """Return every text of a verified token that releases before this one accepted: the
    token itself and, for ES256, the twin (r, n - s) of its signature."""
    key = keys.key_for(token)
    if key is None or key.algorithm != ES256:
        return (token,)
    signing_input, _, signature = token.rpartition(".")
    twin = twin_signature(base64.urlsafe_b64decode(signature + "=="))
    return (token, f"{signing_input}.{base64.urlsafe_b64encode(twin).rstrip(b'=').decode()}")


def new_refresh_token() -> str:
    """Return a fresh refresh token: 42 random letters and digits (about 250 bits)."""
    # One draw of random bytes, mapped onto the alphabet; the bytes that would favour
    # some letters are dropped rather than folded in, so every letter is equally likely.
    while True:
        letters = secrets.token_bytes(_RANDOM_BYTES_PER_TRY).translate(
            _BYTE_TO_LETTER, _REJECTED_BYTES
        )
        if len(letters) >= REFRESH_TOKEN_LENGTH:
            return letters[:REFRESH_TOKEN_LENGTH].decode("ascii")


def _decode(
    token: str,
    keys: KeyRing,
    clock_skew: int,
    clock: Clock,
    *,
    required: tuple[str, ...],
    verify_sub: bool = True,
    expected: ExpectedClaims | None = None,
) -> dict[str, Any]:
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidTokenError("token is too long")
    # JWS compact serialization has no padding (RFC 7515, section 2); PyJWT accepts it,
    # and one token would then have several spellings, each its own entry in any list
    # or cache keyed on the token's text.
    if "=" in token:
        raise InvalidTokenError("token has base64 padding", permanent=True)
    key = keys.key_for(token)
    if key is None:
        raise InvalidTokenError("token names no key of this service", permanent=True)
    if key.algorithm == ES256:
        _check_low_s(token)
    try:
        # The key's one algorithm is pinned: a token naming any other, "none" included,
        # fails. No leeway: a token is expired from the second its exp names. PyJWT's
        # one leeway would stretch exp too, so iat and nbf are checked below instead.
        claims = jwt.decode(
            token,
            key.verifier,
            algorithms=key.algorithms,
            options={
                "require": list(required),
                "verify_sub": verify_sub,
                "verify_exp": False,  # checked below, by the app's clock
                "verify_iat": False,
                "verify_nbf": False,
            },
            leeway=0,
            issuer=None if expected is None else expected.issuer,
            audience=None if expected is None else list(expected.audiences),
        )
    except jwt.InvalidSignatureError as error:
        raise InvalidTokenError(str(error), BAD_SIGNATURE, permanent=True) from None
    except (jwt.DecodeError, jwt.InvalidAlgorithmError) as error:  # the text, not the time
        raise InvalidTokenError(str(error), permanent=True) from None
    except jwt.InvalidTokenError as error:
        raise InvalidTokenError(str(error)) from None
    _check_not_expired(claims, clock)
    _check_unique_claims(token, claims)
    _check_not_in_future(claims, clock_skew, clock)
    return claims


def _check_low_s(token: str) -> None:
    """Refuse an ES256 signature in any form but low-S, or with r or s out of range.

    The twin (r, n - s) of a signature verifies too, and anyone holding a token can
    write it: without this check one token would have two texts, each its own entry
    in any list or cache keyed on the token's text. The keys sign in low-S form only.
    """
    try:
        signature = base64.urlsafe_b64decode(token.rpartition(".")[2] + "==")
    except ValueError:  # binascii.Error (a bad length) or a character that is not ASCII
        raise InvalidTokenError("signature is not base64url", permanent=True) from None
    if not is_low_s(signature):
        raise InvalidTokenError(
            "ES256 signature is not in low-S form", BAD_SIGNATURE, permanent=True
        )


def _check_not_expired(claims: dict[str, Any], clock: Clock) -> None:
    """Refuse a token from the second its ``exp`` names, by ``clock`` (PyJWT's own check
    reads the system clock, which a test cannot set, and lets no number through cleanly)."""
    expires_at = claims["exp"]
    if (
        isinstance(expires_at, bool)
        or not isinstance(expires_at, (int, float))
        or not math.isfinite(expires_at)
    ):
        raise InvalidTokenError("exp claim must be a number", permanent=True)
    if clock() >= expires_at:
        raise InvalidTokenError("token has expired", EXPIRED)


def _check_unique_claims(token: str, claims: dict[str, Any]) -> None:
    """Refuse a payload that names a claim twice (RFC 8725, section 3.11): PyJWT keeps the
    last one, which a reader of the token may not. The header's are refused by the key ring."""
    # PyJWT found the segment canonical base64url; padding past its end is ignored
    payload = base64.urlsafe_b64decode(token.split(".", 2)[1] + "==")
    # as many key ends as keys parsed: nothing repeated, and no second parse
    if may_repeat_a_key(payload, claims) and repeats_a_key(payload):
        raise InvalidTokenError("token repeats a claim", permanent=True)


def _check_not_in_future(claims: dict[str, Any], clock_skew: int, clock: Clock) -> None:
    """Refuse an ``iat`` or ``nbf`` more than ``clock_skew`` seconds ahead of this host."""
    latest = clock() + clock_skew
    for name in ("iat", "nbf"):
        if name not in claims:
            continue
        value = claims[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidTokenError(f"{name} claim must be a number")
        if value > latest:
            raise InvalidTokenError(f"{name} claim is in the future")


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
