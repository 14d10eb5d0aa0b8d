#!/usr/bin/env bash
# List sessions with GET /sessions (your own) or GET /admin/users/{username}/sessions (an
# admin's view of a user's); print {"sessions":[...],"next":...} on one line.
#
#   SESSIONS_USER            the user whose sessions an admin lists; unset: your own
#   LIMIT                    sessions per page, 1 to 100 (the service's default: 50)
#   AFTER                    the "next" of the page before, for the page after it
#   ACCESS_TOKEN             from scripts/login.sh
#   EXPECT=ok (default)      a page of sessions, newest login first
#   EXPECT=denied            the 403 of a token that is not an admin's, with SESSIONS_USER
#   EXPECT=unauthorized      the 401 of a missing, bad or expired token; prints Unauthorized
#   BASE_URL                 the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok denied unauthorized)
export SESSIONS_USER=${SESSIONS_USER:-} LIMIT=${LIMIT:-} AFTER=${AFTER:-}
path=/sessions
if [[ -n $SESSIONS_USER ]]; then
    path="/admin/users/$(jq -nr 'env.SESSIONS_USER | @uri')/sessions"
fi
query=$(jq -nr '[if env.LIMIT != "" then "limit=\(env.LIMIT | @uri)" else empty end,
    if env.AFTER != "" then "after=\(env.AFTER | @uri)" else empty end] | join("&")')
bearer
request GET "$path${query:+?$query}" ${BEARER[@]+"${BEARER[@]}"}
case $EXPECT in
unauthorized)
    expect_unauthorized
    print_body
    ;;
denied)
    expect_json 403
    expect_field '. == {message: "No access"}' 'expected the body {"message": "No access"}'
    print_json
    ;;
ok)
    expect_json 200
    expect_field '.sessions | arrays | all(.id | strings)' "no list of sessions in the answer"
    expect_field '.next | type | IN("string", "null")' "no next cursor (or null) in the answer"
    print_json
    ;;
esac
