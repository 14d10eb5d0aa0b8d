#!/usr/bin/env bash
# Read GET /api/v1/me, the user of a third-party login; print {"source":...,"id":...,"shownName":...}.
#
#   AUTH_COOKIE          the cookie token the login's callback set (copy it from the browser)
#   AUTH_COOKIE_NAME     its name, default jwt (the service's setting of the same name)
#   COOKIE_JAR           or: a curl cookie jar holding that cookie (curl -c / -b)
#   EXPECT=ok (default)  the user
#   EXPECT=unauthorized  the 401 of a missing, bad or expired cookie; prints Unauthorized
#   BASE_URL             the service, default http://127.0.0.1:8080
#
# The endpoint reads the cookie alone: a Bearer access token from /login never works here.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok unauthorized)
cookie=()
if [[ -n ${AUTH_COOKIE:-} ]]; then
    name=${AUTH_COOKIE_NAME:-jwt}
    [[ $name =~ ^[A-Za-z0-9_.-]+$ && $AUTH_COOKIE =~ ^[[:graph:]]+$ ]] ||
        usage "AUTH_COOKIE_NAME and AUTH_COOKIE must be one word each"
    printf 'Cookie: %s=%s\n' "$name" "$AUTH_COOKIE" >"$SCRATCH/cookie"
    cookie=(-H @"$SCRATCH/cookie")
elif [[ -n ${COOKIE_JAR:-} ]]; then
    [[ -r $COOKIE_JAR ]] || usage "COOKIE_JAR: no readable file '$COOKIE_JAR'"
    cookie=(--cookie "$COOKIE_JAR")
elif [[ $EXPECT == ok ]]; then
    usage "$SCRIPT needs AUTH_COOKIE (the cookie token) or COOKIE_JAR (a curl cookie jar)"
fi

request GET /api/v1/me ${cookie[@]+"${cookie[@]}"}
if [[ $EXPECT == unauthorized ]]; then
    expect_unauthorized
    print_body
    exit
fi
expect_json 200
expect_field '.id | strings' "no id (the provider's id of the user) in the answer"
expect_field 'keys - ["source", "id", "shownName"] == [] and all(.[]; type == "string")' \
    "the user has other fields than source, id and shownName, or ones that are not strings"
print_json
