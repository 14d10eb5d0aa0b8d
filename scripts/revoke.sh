#!/usr/bin/env bash
# Revoke a refresh token with DELETE /token/{refreshToken}; prints nothing.
#
#   scripts/revoke.sh [REFRESH_TOKEN]
#   REFRESH_TOKEN   the same, when not given as an argument
#   BASE_URL        the service, default http://127.0.0.1:8080
#
# The service answers 204 whether it knew the token or not, so success means only that
# the token no longer refreshes (try: EXPECT=unauthorized scripts/refresh.sh).
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

export REFRESH_TOKEN=${1:-${REFRESH_TOKEN:-}}
[[ -n $REFRESH_TOKEN ]] || usage "$SCRIPT REFRESH_TOKEN (or REFRESH_TOKEN)"

request DELETE "/token/$(jq -nr 'env.REFRESH_TOKEN | @uri')"
expect_empty 204
