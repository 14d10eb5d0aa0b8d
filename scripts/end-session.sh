#!/usr/bin/env bash
# End one session with DELETE /sessions/{id} (one of your own) or
# DELETE /admin/users/{username}/sessions/{id} (an admin ending a user's); prints nothing.
#
#   scripts/end-session.sh [SESSION_ID]
#   SESSION_ID               the same, when not given as an argument (an id from scripts/sessions.sh)
#   SESSIONS_USER            the user whose session an admin ends; unset: one of your own
#   ACCESS_TOKEN             from scripts/login.sh
#   EXPECT=ok (default)      the session ended: its refresh tokens are revoked
#   EXPECT=unknown           the 404 of an id that names no session of that user (another
#                            user's id too); prints {"message":"no such session"}
#   BASE_URL                 the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok unknown)
export SESSION_ID=${1:-${SESSION_ID:-}} SESSIONS_USER=${SESSIONS_USER:-}
[[ -n $SESSION_ID ]] || usage "$SCRIPT SESSION_ID (or SESSION_ID)"
path=/sessions
if [[ -n $SESSIONS_USER ]]; then
    path="/admin/users/$(jq -nr 'env.SESSIONS_USER | @uri')/sessions"
fi
bearer_header
request DELETE "$path/$(jq -nr 'env.SESSION_ID | @uri')" -H @"$AUTHORIZATION"
if [[ $EXPECT == unknown ]]; then
    expect_json 404
    expect_field '. == {message: "no such session"}' 'expected the body {"message": "no such session"}'
    print_json
    exit
fi
expect_empty 204
