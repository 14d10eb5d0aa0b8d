#!/usr/bin/env bash
# Log in with POST /login; print {"accessToken":"...","refreshToken":"..."} on one line.
#
#   scripts/login.sh USERNAME [PASSWORD]
#   LOGIN_USERNAME, LOGIN_PASSWORD   the same, when not given as arguments
#   BASE_URL                         the service, default http://127.0.0.1:8080
#
# The service accepts any username and does not check the password, which is sent only
# when given. Keep the tokens for the other scripts:
#   LOGIN=$(scripts/login.sh alice)
#   export ACCESS_TOKEN=$(jq -r .accessToken <<<"$LOGIN") REFRESH_TOKEN=$(jq -r .refreshToken <<<"$LOGIN")
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

export LOGIN_USERNAME=${1:-${LOGIN_USERNAME:-}} LOGIN_PASSWORD=${2:-${LOGIN_PASSWORD:-}}
[[ -n $LOGIN_USERNAME ]] || usage "$SCRIPT USERNAME [PASSWORD] (or LOGIN_USERNAME, LOGIN_PASSWORD)"

json_body '{username: env.LOGIN_USERNAME}
    + if env.LOGIN_PASSWORD == "" then {} else {password: env.LOGIN_PASSWORD} end'
request POST /login -H 'Content-Type: application/json' --data-binary @"$REQUEST_BODY"
expect_json 200
expect_field ".accessToken | strings | $JWT" "no accessToken (a JWT) in the answer"
expect_field '.refreshToken | strings | test("^[A-Za-z0-9]{42}$")' \
    "no refreshToken (42 letters and digits) in the answer"
print_json
