#!/usr/bin/env bash
# Ask POST /oauth/introspect whether a token is active, and whose; print the answer
# on one line ({"active":false} for an expired, revoked or unknown token).
#
#   scripts/introspect.sh [TOKEN]
#   TOKEN                      an access token or a refresh token, when not an argument
#   CLIENT_ID, CLIENT_SECRET   the registered client that asks
#   BASE_URL                   the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

export TOKEN=${1:-${TOKEN:-}}
[[ -n $TOKEN ]] || usage "$SCRIPT TOKEN (or TOKEN), with CLIENT_ID and CLIENT_SECRET"
client_header
form_body '{token: env.TOKEN}'
request POST /oauth/introspect -H @"$AUTHORIZATION" \
    -H 'Content-Type: application/x-www-form-urlencoded' --data-binary @"$REQUEST_BODY"
expect_json 200
expect_field '.active | type == "boolean"' "no active member in the answer"
print_json
