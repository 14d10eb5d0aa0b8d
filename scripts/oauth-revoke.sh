#!/usr/bin/env bash
# Revoke a refresh token with POST /oauth/revoke (RFC 7009); prints nothing.
#
#   scripts/oauth-revoke.sh [TOKEN]
#   TOKEN                      the refresh token, when not given as an argument
#   CLIENT_ID, CLIENT_SECRET   optional: a registered client; unset, the token's holder asks
#   BASE_URL                   the service, default http://127.0.0.1:8080
#
# The service answers 200 whether it knew the token or not, as DELETE /token/{t} does 204.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

export TOKEN=${1:-${TOKEN:-}}
[[ -n $TOKEN ]] || usage "$SCRIPT TOKEN (or TOKEN)"
CLIENT=()
if [[ -n ${CLIENT_ID:-} ]]; then
    client_header
    CLIENT=(-H @"$AUTHORIZATION")
fi
form_body '{token: env.TOKEN, token_type_hint: "refresh_token"}'
request POST /oauth/revoke ${CLIENT[@]+"${CLIENT[@]}"} \
    -H 'Content-Type: application/x-www-form-urlencoded' --data-binary @"$REQUEST_BODY"
expect_empty 200
[[ -z $CONTENT_TYPE ]] || fail "$REQUEST: expected no content type, got $(answered)"
