#!/usr/bin/env bash
# The walk-through of docs/walkthrough.md, runnable against a live server:
#
#   scripts/walkthrough.sh
#   BASE_URL   the service, default http://127.0.0.1:8080
#
# Prints each step's answer; stops at the first step that answers otherwise than expected.
set -euo pipefail
case ${1-} in
-h | --help) sed -n '2,/^[^#]/{/^#/!d; s/^# \{0,1\}//; p}' "$0"; exit 0 ;;
?*) printf 'usage: %s takes no arguments; try: %s --help\n' "${0##*/}" "${0##*/}" >&2; exit 2 ;;
esac
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
BASE_URL=${BASE_URL:-http://127.0.0.1:8080}
export BASE_URL   # read by every scripts/*.sh
# Access tokens last ACCESS_TOKEN_LIFETIME seconds, 60 by default: typed by hand, these
# steps outlive the token and answer 401. Start the service with a longer lifetime,
# ACCESS_TOKEN_LIFETIME=600 make run, or log in again (step 1) when a step answers 401.

# 1. Log in (JSON body; the password is not checked, any username is accepted)
LOGIN=$(scripts/login.sh alice any)
echo "$LOGIN"   # {"accessToken":"eyJ...","refreshToken":"<42 letters and digits>"}
ACCESS_TOKEN=$(jq -r .accessToken <<<"$LOGIN")
REFRESH_TOKEN=$(jq -r .refreshToken <<<"$LOGIN")
export ACCESS_TOKEN REFRESH_TOKEN   # the next scripts read them

# 2. A resource for any authenticated user (Authorization: Bearer $ACCESS_TOKEN)
scripts/user-resource.sh
# {"message":"for all users","user":{"username":"alice","role":"user","iat":...,"exp":...}}

# 3. Book a table: the guest count is echoed with the caller's claims
scripts/reservation.sh 4
# {"user":{"username":"alice",...},"guestsCount":4}

# 4. An admin-only resource: alice is a user, so 403 (-i shows the status and headers)
curl -sS -i "$BASE_URL/admin-accessible" -H "Authorization: Bearer $ACCESS_TOKEN"
# HTTP/1.1 403 FORBIDDEN ... {"message":"No access"}
EXPECT=denied scripts/admin-resource.sh   # the same, checked: it fails on any other answer

# 5. No token (or a bad or expired one): 401
curl -sS -i -w '\n' "$BASE_URL/user-accessible"
# HTTP/1.1 401 UNAUTHORIZED ... Content-Type: text/plain ... WWW-Authenticate: Bearer ... Unauthorized

# 6. The admin (ADMIN_USERNAME, default "admin") passes; form bodies work too
ADMIN=$(curl -sS --fail-with-body -X POST "$BASE_URL/login" -d username=admin -d password=any \
  | jq -r .accessToken)
ACCESS_TOKEN=$ADMIN scripts/admin-resource.sh
# {"message":"for admins only","user":{"username":"admin","role":"admin",...}}

# 7. A new access token from the refresh token and the same username
scripts/refresh.sh alice
# {"accessToken":"eyJ..."}

# 8. Revoke the refresh token: 204, known or not (nothing printed)
scripts/revoke.sh

# 9. A revoked refresh token no longer refreshes: 401
EXPECT=unauthorized scripts/refresh.sh alice
# Unauthorized

# 10. The third-party login variant: /api/v1/me reads a cookie, never a Bearer header
curl -sS -i -w '\n' "$BASE_URL/api/v1/me" -H "Authorization: Bearer $ACCESS_TOKEN"
# HTTP/1.1 401 UNAUTHORIZED ... Unauthorized
# (log in through /auth/<provider>/login first, then: AUTH_COOKIE=<the cookie> scripts/me.sh)

# 11. Log out of the third-party login: 204, and the cookie is cleared (nothing printed)
scripts/logout.sh   # checks for Set-Cookie: jwt=; Expires=...; Max-Age=0; ...

# 12. Probes for the load balancer
scripts/health.sh
# {"status":"ok"}
# {"status":"ready"}

# 13. The API document, the public keys and the metrics
curl -sS --fail-with-body "$BASE_URL/openapi.json" | jq -r .openapi
# 3.1.0
curl -sS -o /dev/null -w '%{http_code}\n' "$BASE_URL/.well-known/jwks.json"
# 404 (HS256, the default: a secret is never published; EdDSA or ES256 publish their keys)
scripts/metrics.sh | grep -c '^token_service_'
# the number of counter lines (Prometheus text format)
