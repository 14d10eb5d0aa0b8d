#!/usr/bin/env bash
# Log out everywhere with DELETE /sessions (yourself) or DELETE /admin/users/{username}/sessions
# (an admin, a user); print {"ended":N}, the number of sessions ended.
#
#   SESSIONS_USER            the user an admin logs out everywhere; unset: yourself
#   ACCESS_TOKEN             from scripts/login.sh
#   BASE_URL                 the service, default http://127.0.0.1:8080
#
# Every refresh token of the user is revoked, and every access token issued until now is
# refused within SESSION_CUTOFF_REFRESH seconds (5 by default) on every host.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

export SESSIONS_USER=${SESSIONS_USER:-}
path=/sessions
if [[ -n $SESSIONS_USER ]]; then
    path="/admin/users/$(jq -nr 'env.SESSIONS_USER | @uri')/sessions"
fi
bearer_header
request DELETE "$path" -H @"$AUTHORIZATION"
expect_json 200
expect_field '.ended | numbers' "no number of sessions ended in the answer"
print_json
