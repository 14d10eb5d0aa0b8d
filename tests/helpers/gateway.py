"""What the tests of the shipped gateways share, whichever proxy runs them: an upstream
that echoes what it received, requests sent exactly as written, the identity headers a
client may forge, and the spellings of an admin path an upstream could route to its
admin pages."""

from __future__ import annotations

import http.client
from urllib.parse import unquote

from hypothesis import strategies as st

#: Identity headers a client may write, in the spellings it may choose.
FORGED = {
    "X-Auth-Request-User": "mallory",
    "x-auth-request-groups": "admin",
    "X-Auth-Request-Expires": "99999999999",
    "X-AUTH-REQUEST-SOURCE": "forged",
    "X-Auth-Request-Name": "forged",
    "X-Auth-Request-Email": "mallory@example.com",
    "X-Auth-Request-Preferred-Username": "mallory",
    "Remote-User": "mallory",
    "Remote-Groups": "admin",
    "Remote-Name": "forged",
    "Remote-Email": "mallory@example.com",
    "X-Forwarded-User": "mallory",
    "X-Forwarded-Groups": "admin",
    "X_Auth_Request_User": "mallory",  # an underscore: a WSGI upstream reads it as X-
    "X-Remote-User": "mallory",  # names upstreams commonly trust, which the check never sets
    "x-user": "mallory",
    "X-AUTH-USER": "mallory",
    "X-Email": "mallory@example.com",
    "X-WEBAUTH-USER": "mallory",
    "X-Auth-Request-Role": "admin",
}

#: The rules the service judges by: one host for admins, a public folder, the admin
#: pages (any path that begins with /admin), deleting for admins, the rest for users.
ACCESS_RULES = """
[[rules]]
hosts = ["admin.example.com"]
allow = "admin"

[[rules]]
paths = ["/public/"]
allow = "public"

[[rules]]
paths = ["/admin"]
allow = "admin"

[[rules]]
methods = ["DELETE"]
allow = "admin"

[[rules]]
allow = "user"
"""
SERVICE_401 = (401, "text/plain", b"Unauthorized")
SERVICE_403 = (403, "application/json", b'{"message":"No access"}\n')


def get(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", body: bytes | None = None
):
    """Send one request as written (header names kept); return status, headers, body."""
    parts = url.split("/", 3)
    connection = http.client.HTTPConnection(parts[2], timeout=10)
    try:
        connection.request(method, "/" + parts[3], body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


#: Spellings of /admin/panel that nginx once matched outside /admin/ and that upstreams
#: route to their admin pages: Express reads paths case-insensitively, Tomcat and Spring
#: drop `;` parameters, some read `\` as `/`, decode twice, or resolve dot segments
#: without merging slashes first.
ADMIN_SPELLINGS = [
    "/ADMIN/panel",
    "/Admin/panel",
    "/aDmIn/panel",
    "/admin",
    "/ADMIN",
    "/admin.json",
    "/%41DMIN/panel",
    "/%61dmin/panel",
    "/admin;/panel",
    "/admin;jsessionid=1/panel",
    "/;/admin/panel",
    "/x/..;/admin/panel",
    "/x/../admin/panel",
    "/./admin/panel",
    "/admin/./panel",
    "/admin/panel/.",
    "/x/..",
    "/admin//../panel",
    "/x/%2e%2e/admin/panel",
    "/x/%2E./admin/panel",
    "/x/.%2e/admin/panel",
    "/%2e/admin/panel",
    "//admin/panel",
    "///ADMIN//panel",
    "/admin%2Fpanel",
    "/admin%2fpanel",
    "/x%2F..%2Fadmin/panel",
    "/x%2f..%2fadmin/panel",
    "/x/..%5Cadmin/panel",
    "/x/..%5cadmin/panel",
    "/..%3B/admin/panel",
    "/x/..%3b/admin/panel",
    "/x\\..\\admin\\panel",
    "/x/..\\admin/panel",
    "/admin\\panel",
    "/x/%252e%252e/admin/panel",
    "/x%252F..%252Fadmin/panel",
    "/x#/../admin/panel",
    "/x/%00/../admin/panel",
    "/x/%0a/../admin/panel",
    "/adm%C4%B1n/panel",  # the dotless i: /admin to a case-insensitive Java or .NET
    "/ADM%C4%B0N/panel",
    "/%EF%AC%81x/../admin/panel",
]


#: How an upstream may read each piece of /admin/panel: the separators, a detour that
#: resolves to nothing, each letter of "admin", and `;` parameters.
SEPARATORS = st.sampled_from(["/", "//", "%2F", "%2f", "\\", "%5C", "%5c"])
DETOURS = st.sampled_from(
    ["", "./", "x/../", "x/..;/", "x/..%3B/", "x/%2e%2e/", "x/.%2E/", "%2e/", ";/"]
)
PARAMETERS = st.sampled_from(["", ";", ";jsessionid=1", ";x=%2F"])


@st.composite
def admin_spellings(draw) -> str:
    letters = []
    for letter in "admin":
        how = draw(st.sampled_from(["lower", "upper", "hex", "HEX", "twice"]))
        if how in ("lower", "upper"):
            letters.append(letter.upper() if how == "upper" else letter)
        else:
            code = f"{ord(draw(st.sampled_from([letter, letter.upper()]))):02x}"
            hex_code = code.upper() if how == "HEX" else code
            letters.append(f"%25{hex_code}" if how == "twice" else f"%{hex_code}")
    separator = draw(SEPARATORS)
    detour = draw(DETOURS).replace("/", separator)
    lead = draw(st.sampled_from(["/", "//"]))
    return f"{lead}{detour}{''.join(letters)}{draw(PARAMETERS)}{draw(SEPARATORS)}panel"


def laxest_reading(path: str) -> str:
    """Return ``path`` as the laxest upstream could route it: decoded three times, in lower
    case, ``\\`` as ``/``, ``;`` parameters dropped, dot segments resolved, slashes merged."""
    path = path.split("?", 1)[0]
    for _ in range(3):
        path = unquote(path)
    segments: list[str] = []
    for segment in path.replace("\\", "/").lower().split("/"):
        segment = segment.split(";", 1)[0]
        if segment == "..":
            segments = segments[:-1]
        elif segment not in ("", "."):
            segments.append(segment)
    return "/" + "/".join(segments)
