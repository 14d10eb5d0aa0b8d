"""What the bench measures, as data: the requests, the apps they go to, and the pairs.

A pair (``Case``) is one request sent to two apps at once, the service on one side, the app
it is held against on the other (bench/paired.py runs it); an app (``App``) says which
program, on which store, prefilled with how many tokens, behind which proxy. Every mode of
the bench is a list of pairs: ``cases`` builds them, group by group.
"""

from __future__ import annotations

from dataclasses import dataclass

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
#: Username of the token holder (a user, not the admin) and of the flooded logins.
HOLDER = "alice"
#: Logins of the holder at the service before a run: the sessions ``GET /sessions`` lists.
HOLDER_SESSIONS = 10


@dataclass(frozen=True)
class Request:
    """One request shape and the status every app must answer it with."""

    key: str
    title: str
    method: str
    path: str
    status: int
    bearer: str | None = None  # the Bearer token: "user", "bad" (forged) or "many" (cycled)
    content_type: str | None = None
    body: str | None = None  # may name {refresh_token} and {access_token}
    client: bool = False  # HTTP Basic with the service's registered client (client_secret_basic)
    headers: tuple[tuple[str, str], ...] = ()  # more headers, as a proxy would send them
    #: How many values "{n}" in a header takes, one request after another (0: none)
    distinct: int = 0

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"


#: The original URIs request r cycles through: more than a worker keeps judgments of
#: (app/views/gateway.py), so that each request walks the rules, as distinct pages do.
DISTINCT_URIS = 10_000

REQUESTS = {
    request.key: request
    for request in [
        Request("a", "GET /user-accessible", "GET", "/user-accessible", 200, "user"),
        Request("a*", "GET /user-accessible, distinct tokens", "GET", "/user-accessible", 200,
                "many"),
        Request("b", "POST /login, form", "POST", "/login", 200, None, FORM,
                "username=bench&password=x"),
        Request("c", "POST /token, JSON", "POST", "/token", 200, None, JSON,
                f'{{"username": "{HOLDER}", "refreshToken": "{{refresh_token}}"}}'),
        Request("d", "GET /admin-accessible, 403", "GET", "/admin-accessible", 403, "user"),
        Request("e", "GET /user-accessible, bad signature, 401", "GET", "/user-accessible",
                401, "bad"),
        Request("f", "POST /restaurant-reservation", "POST", "/restaurant-reservation", 200,
                "user", JSON, '{"guestsCount": 4}'),
        Request("g", "GET /auth/check (the gateway's check)", "GET", "/auth/check", 200,
                "user"),
        Request("h", "POST /oauth/token, client_credentials", "POST", "/oauth/token", 200,
                None, FORM, "grant_type=client_credentials", client=True),
        Request("i", "POST /oauth/introspect, an access token", "POST", "/oauth/introspect",
                200, None, FORM, "token={access_token}", client=True),
        Request("s", f"GET /sessions, {HOLDER_SESSIONS} sessions", "GET", "/sessions", 200,
                "user"),
        Request("p", "GET /app through the proxy", "GET", "/app", 200, "user"),
        Request("r", "GET /auth/check, 100 rules, the match the last", "GET", "/auth/check",
                200, "user", headers=(("X-Original-Method", "GET"),
                                      ("X-Original-URI", "/app/items/{n}?page=2")),
                distinct=DISTINCT_URIS),
        Request("v", "GET /auth/ext-authz/app/items (Envoy's prefix)", "GET",
                "/auth/ext-authz/app/items", 200, "user"),
    ]
}  # fmt: skip
#: The upstream's answer behind nginx (request p): a constant JSON.
UPSTREAM_ANSWER = {
    "status": 200,
    "headers": [["Content-Type", "application/json"]],
    "body": '{"message":"hello"}\n',
}
STORES = ("sqlite", "redis", "postgresql")
PEERS = ("pyjwt", "jwt-extended")


@dataclass(frozen=True)
class App:
    """One side of a pair: which app, on which store, with how many tokens, behind what."""

    kind: str  # "service", "floor", or a peer: "pyjwt", "jwt-extended"
    store: str = "sqlite"  # the service's TOKEN_STORE_URL; the floor's FLOOR_STORE_URL
    store_floor: bool = False  # the floor makes one store operation per login or refresh
    prefill: int = 0  # refresh tokens put in the store before the app starts
    #: "nginx" or "caddy" (proxied straight), "gateway" (nginx's auth_request first) or
    #: "caddy-gateway" (Caddy's forward_auth first, deploy/caddy/Caddyfile)
    proxy: str | None = None
    settings: tuple[tuple[str, str], ...] = ()  # more of the service's settings

    @property
    def name(self) -> str:
        name = {"pyjwt": "Flask+PyJWT", "jwt-extended": "Flask-JWT-Extended"}.get(
            self.kind, self.kind
        )
        if self.store != "sqlite" or self.store_floor:
            name += f" on {self.store}"
        if self.store_floor:
            name += " (one store call)"
        if self.prefill:
            name += f", {self.prefill:,} tokens stored"
        if self.proxy in ("gateway", "caddy-gateway"):
            name = f"{self.proxy_name} + {name}'s check + floor upstream"
        elif self.proxy:
            name = f"{self.proxy_name} + {name} upstream"
        return name + "".join(f", {key}={value}" for key, value in self.settings)

    @property
    def proxy_name(self) -> str:
        """Return the proxy in front: Caddy, or nginx."""
        return "Caddy" if self.proxy in ("caddy", "caddy-gateway") else "nginx"

    @property
    def own_credentials(self) -> bool:
        """Whether the app issues its own tokens (else it takes the service side's)."""
        return self.kind != "floor"


SERVICE = App("service")
FLOOR = App("floor")


@dataclass(frozen=True)
class Case:
    """One pair: ``request`` to the service side, ``other_request`` to the other side at once.

    ``target`` is the highest ratio of their CPU per request allowed (service over other);
    ``below``: the ratio must be under it (the peers), not at most.
    """

    group: str
    request: str
    service: App
    other: App
    other_request: str = ""
    target: float | None = None
    below: bool = False

    @property
    def answered(self) -> str:
        return self.other_request or self.request


#: Highest CPU per request of the service over the floor's, by request (the floor's a for
#: a*, e, g and i; its b, a login without a store write, for h; s has none: reported).
FLOOR_TARGETS = {"a": 1.00, "d": 1.00, "f": 1.00, "e": 1.10, "b": 1.25, "c": 1.25, "g": 0.95,
                 "h": 1.00, "i": 1.05}  # fmt: skip
FLOOR_REQUEST = {"a*": "a", "e": "a", "g": "a", "h": "b", "i": "a"}
#: The requests of the main group, and those the peers answer too (SPEC.md's own).
MAIN_REQUESTS = ("a", "a*", "b", "c", "d", "e", "f", "g", "h", "i", "s")
PEER_REQUESTS = ("a", "a*", "b", "c", "d", "e", "f")
#: The store matrix: the service over a floor making one store call on the same store.
MATRIX_TARGET = 1.10
#: The service on a full store over the same on an empty one, POST /token and GET /sessions.
SCALE_TARGET = 1.05
GROUPS = ("main", "matrix", "gateway", "rules", "scale")
#: The service's check with the 100 rules of this file (request r), trusting the bench client
#: as the proxy that names the original request.
RULES_FILE = "bench/access-rules-100.toml"
#: Highest CPU per request of the check over the floor's GET: with rules, and Envoy's route.
RULES_TARGET = 1.00


def cases(groups: tuple[str, ...], stores: tuple[str, ...], stored_tokens: int) -> list[Case]:
    """Return every pair of ``groups``, in the order they run."""
    found: list[Case] = []
    if "main" in groups:
        for key in MAIN_REQUESTS:
            found.append(
                Case(
                    "main", key, SERVICE, FLOOR, FLOOR_REQUEST.get(key, key), FLOOR_TARGETS.get(key)
                )
            )
            if key in PEER_REQUESTS:  # the check, OAuth and sessions are the service's own
                found += [Case("main", key, SERVICE, App(peer), target=1.0, below=True)
                          for peer in PEERS]  # fmt: skip
    if "matrix" in groups:
        for store in stores:
            floor = App("floor", store, store_floor=True)
            found += [Case("matrix", key, App("service", store), floor, target=MATRIX_TARGET)
                      for key in ("b", "c")]  # fmt: skip
    if "gateway" in groups:
        straight = App("floor", proxy="nginx")
        behind = (("TRUSTED_PROXIES", "127.0.0.1/32"), ("OPEN_LOGIN", "true"))  # as behind nginx
        cached = App(
            "service", proxy="gateway", settings=(*behind, ("AUTH_CHECK_CACHE_SECONDS", "5"))
        )
        found += [Case("gateway", "p", App("service", proxy="gateway", settings=behind), straight),
                  Case("gateway", "p", cached, straight)]  # fmt: skip
        # The same through Caddy, which keeps no verdicts: the cache's setting changes only
        # the service's answer (X-Accel-Expires, which Caddy ignores).
        caddy = App("floor", proxy="caddy")
        found += [
            Case("gateway", "p", App("service", proxy="caddy-gateway", settings=settings), caddy)
            for settings in (behind, (*behind, ("AUTH_CHECK_CACHE_SECONDS", "5")))
        ]
    if "rules" in groups:  # the check with 100 rules, and Envoy's route, over the floor's GET
        ruled = App("service", settings=(("ACCESS_RULES_FILE", RULES_FILE),
                                         ("TRUSTED_PROXIES", "127.0.0.1/32"),
                                         ("OPEN_LOGIN", "true")))  # fmt: skip
        found += [Case("rules", "g", SERVICE, FLOOR, "a", RULES_TARGET),
                  Case("rules", "r", ruled, FLOOR, "a", RULES_TARGET),
                  Case("rules", "v", SERVICE, FLOOR, "a", RULES_TARGET)]  # fmt: skip
    if "scale" in groups:  # the holder's sessions are listed among every stored token
        found += [
            Case("scale", key, App("service", store, prefill=stored_tokens), App("service", store),
                 target=SCALE_TARGET)
            for store in stores for key in ("c", "s")
        ]  # fmt: skip
    return found
