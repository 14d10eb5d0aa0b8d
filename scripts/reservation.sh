#!/usr/bin/env bash
# Book a table with POST /restaurant-reservation; print {"user":{...},"guestsCount":N}.
#
#   scripts/reservation.sh [GUESTS_COUNT]
#   GUESTS_COUNT             the same, when not given as an argument; a JSON number, default 2
#   ACCESS_TOKEN             from scripts/login.sh (any role)
#   EXPECT=ok (default)      the reservation, echoing the guest count
#   EXPECT=unauthorized      the 401 of a missing, bad or expired token; prints Unauthorized
#   BASE_URL                 the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok unauthorized)
export GUESTS_COUNT=${1:-${GUESTS_COUNT:-2}}
jq -ne 'env.GUESTS_COUNT | tonumber | isinfinite or isnan | not' >/dev/null 2>&1 ||
    usage "$SCRIPT [GUESTS_COUNT]: a number, not '$GUESTS_COUNT'"

bearer
json_body '{guestsCount: env.GUESTS_COUNT | tonumber}'
request POST /restaurant-reservation ${BEARER[@]+"${BEARER[@]}"} \
    -H 'Content-Type: application/json' --data-binary @"$REQUEST_BODY"
if [[ $EXPECT == unauthorized ]]; then
    expect_unauthorized
    print_body
    exit
fi
expect_json 200
expect_field '.user.username | strings' "no user (the token's claims) in the answer"
expect_field '.guestsCount == (env.GUESTS_COUNT | tonumber)' "guestsCount is not the one sent"
print_json
