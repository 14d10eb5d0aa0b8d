#!/usr/bin/env bash
# Probe GET /healthz (the process serves) and GET /readyz (the token store answers);
# print {"status":"ok"} and {"status":"ready"}, one a line, when both pass.
#
#   BASE_URL   the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

request GET /healthz
expect_json 200
expect_field '. == {status: "ok"}' 'expected the body {"status": "ok"}'
healthz=$(print_json)

request GET /readyz
expect_json 200
expect_field '. == {status: "ready"}' 'expected the body {"status": "ready"}'
printf '%s\n' "$healthz"
print_json
