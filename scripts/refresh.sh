#!/usr/bin/env bash
# Get a new access token with POST /token; print {"accessToken":"..."} on one line.
#
#   scripts/refresh.sh [USERNAME [REFRESH_TOKEN]]
#   LOGIN_USERNAME, REFRESH_TOKEN   the same, when not given as arguments (the username
#                                   the refresh token was issued to, by scripts/login.sh)
#   EXPECT=ok (default)             a new access token
#   EXPECT=unauthorized             the 401 of a revoked, unknown or other user's token;
#                                   prints Unauthorized
#   BASE_URL                        the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok unauthorized)
export LOGIN_USERNAME=${1:-${LOGIN_USERNAME:-}} REFRESH_TOKEN=${2:-${REFRESH_TOKEN:-}}
[[ -n $LOGIN_USERNAME && -n $REFRESH_TOKEN ]] ||
    usage "$SCRIPT USERNAME REFRESH_TOKEN (or LOGIN_USERNAME, REFRESH_TOKEN)"

json_body '{username: env.LOGIN_USERNAME, refreshToken: env.REFRESH_TOKEN}'
request POST /token -H 'Content-Type: application/json' --data-binary @"$REQUEST_BODY"
if [[ $EXPECT == unauthorized ]]; then
    expect_unauthorized
    print_body
    exit
fi
[[ $STATUS != 401 ]] ||
    fail "$REQUEST: 401: the refresh token is revoked, unknown or not $LOGIN_USERNAME's"
expect_json 200
expect_field ".accessToken | strings | $JWT" "no accessToken (a JWT) in the answer"
print_json
