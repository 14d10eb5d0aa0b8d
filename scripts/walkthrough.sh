#!/usr/bin/env bash
# The README's curl walk-through, runnable against a live server: BASE=http://host:port
set -euo pipefail
BASE=${BASE:-http://127.0.0.1:8080}

# 1. Log in (JSON body; the password is not checked, any username is accepted)
LOGIN=$(curl -sS --fail-with-body -X POST "$BASE/login" \
  -H 'Content-Type: application/json' -d '{"username": "alice", "password": "any"}')
echo "$LOGIN"   # {"accessToken":"eyJ...","refreshToken":"<42 letters and digits>"}
ACCESS=$(echo "$LOGIN" | jq -r .accessToken)
REFRESH=$(echo "$LOGIN" | jq -r .refreshToken)

# 2. A resource for any authenticated user
curl -sS --fail-with-body "$BASE/user-accessible" -H "Authorization: Bearer $ACCESS"
# {"message":"for all users","user":{"username":"alice","role":"user","iat":...,"exp":...}}

# 3. Book a table: the guest count is echoed with the caller's claims
curl -sS --fail-with-body -X POST "$BASE/restaurant-reservation" \
  -H "Authorization: Bearer $ACCESS" -H 'Content-Type: application/json' -d '{"guestsCount": 4}'
# {"user":{"username":"alice",...},"guestsCount":4}

# 4. An admin-only resource: alice is a user, so 403 (-i shows the status and headers)
curl -sS -i "$BASE/admin-accessible" -H "Authorization: Bearer $ACCESS"
# HTTP/1.1 403 FORBIDDEN ... {"message":"No access"}

# 5. No token (or a bad or expired one): 401
curl -sS -i "$BASE/user-accessible"
# HTTP/1.1 401 UNAUTHORIZED ... Content-Type: text/plain ... WWW-Authenticate: Bearer ... Unauthorized

# 6. The admin (ADMIN_USERNAME, default "admin") passes; form bodies work too
ADMIN=$(curl -sS --fail-with-body -X POST "$BASE/login" -d username=admin -d password=any \
  | jq -r .accessToken)
curl -sS --fail-with-body "$BASE/admin-accessible" -H "Authorization: Bearer $ADMIN"
# {"message":"for admins only","user":{"username":"admin","role":"admin",...}}

# 7. A new access token from the refresh token and the same username
curl -sS --fail-with-body -X POST "$BASE/token" -d username=alice -d "refreshToken=$REFRESH"
# {"accessToken":"eyJ..."}

# 8. Revoke the refresh token: 204, known or not
curl -sS -w '%{http_code}\n' -X DELETE "$BASE/token/$REFRESH"
# 204

# 9. A revoked refresh token no longer refreshes
curl -sS -i -X POST "$BASE/token" -d username=alice -d "refreshToken=$REFRESH"
# HTTP/1.1 401 UNAUTHORIZED ... Unauthorized

# 10. The third-party login variant: /api/v1/me reads a cookie, never a Bearer header
curl -sS -i "$BASE/api/v1/me" -H "Authorization: Bearer $ACCESS"
# HTTP/1.1 401 UNAUTHORIZED ... Unauthorized   (log in through /auth/<provider>/login first)

# 11. Log out of the third-party login: the cookie is cleared
curl -sS -i -X POST "$BASE/auth/logout"
# HTTP/1.1 204 NO CONTENT ... Set-Cookie: jwt=; Expires=...; Max-Age=0; Secure; HttpOnly; Path=/; SameSite=Lax

# 12. Probes for the load balancer
curl -sS --fail-with-body "$BASE/healthz"; curl -sS --fail-with-body "$BASE/readyz"
# {"status":"ok"} {"status":"ready"}
