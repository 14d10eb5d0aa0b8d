#!/usr/bin/env bash
# Log out of the third-party login with POST /auth/logout; prints nothing.
#
#   AUTH_COOKIE_NAME   the cookie that must be cleared, default jwt (the service's setting)
#   COOKIE_JAR         optional: a curl cookie jar, sent and updated (the cookie leaves it)
#   BASE_URL           the service, default http://127.0.0.1:8080
#
# Succeeds on a 204 whose Set-Cookie clears the cookie (empty, Max-Age=0), set or not.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

name=${AUTH_COOKIE_NAME:-jwt}
[[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || usage "AUTH_COOKIE_NAME must be one word"
jar=()
if [[ -n ${COOKIE_JAR:-} ]]; then
    jar=(--cookie "$COOKIE_JAR" --cookie-jar "$COOKIE_JAR")
fi

request POST /auth/logout ${jar[@]+"${jar[@]}"}
expect_empty 204
awk -v name="$name" '
    tolower($0) ~ /^set-cookie:/ && index($0, " " name "=;") && tolower($0) ~ /max-age=0/ { found = 1 }
    END { exit !found }' "$HEADERS" ||
    fail "$REQUEST: no Set-Cookie that clears the $name cookie"
