#!/usr/bin/env bash
# Read GET /metrics (Prometheus's text format) and print it when it is the service's own.
#
#   BASE_URL   the service, default http://127.0.0.1:8080
#
# Fails in one line when the answer is not 200 text/plain with the service's counters
# (404: METRICS=off; 403 JSON: nginx refused an address outside the metrics network).
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

request GET /metrics
expect_status 200
[[ $CONTENT_TYPE == text/plain* ]] || fail "$REQUEST: expected text/plain, got $(answered)"
grep -q '^token_service_tokens_total{' "$BODY" ||
    fail "$REQUEST: no token_service_ counters: is this the token service?"
cat "$BODY"
