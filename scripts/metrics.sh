#!/usr/bin/env bash
# Check a running service's Prometheus metrics and print them:
#
#   scripts/metrics.sh [BASE_URL]        # default: $BASE_URL, else http://127.0.0.1:8080
#
# Exits 0 after printing the metrics when GET /metrics answers as it should: 200, the
# Prometheus text format, the service's own metrics. Otherwise it prints one line saying
# what is wrong on standard error and exits 1. Needs only bash and curl.
set -u

BASE_URL=${1:-${BASE_URL:-http://127.0.0.1:8080}}
URL="${BASE_URL%/}/metrics"
body=$(mktemp) && errors=$(mktemp) || exit 1
trap 'rm -f "$body" "$errors"' EXIT

fail() {
  echo "metrics.sh: $URL $*" >&2
  exit 1
}

if ! answer=$(curl -sS --max-time 10 -o "$body" -w '%{http_code} %{content_type}' "$URL" 2>"$errors"); then
  fail "did not answer: $(head -n 1 "$errors")"
fi
status=${answer%% *}
content_type=${answer#* }
[ "$status" = 200 ] || fail "answered $status, not 200 (is METRICS=off?)"
case $content_type in
  text/plain*) ;;
  *) fail "answered Content-Type '$content_type', not Prometheus's text/plain" ;;
esac
grep -q '^token_service_tokens_total{' "$body" \
  || fail "answered no token_service_ metrics: is this the token service?"
cat "$body"
