#!/usr/bin/env bash
# Read the server's OAuth metadata, GET /.well-known/oauth-authorization-server (RFC 8414);
# print it on one line.
#
#   BASE_URL   the service, default http://127.0.0.1:8080
#
# Needs TOKEN_ISSUER on the service (else 404).
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

request GET /.well-known/oauth-authorization-server
expect_json 200
expect_field '.issuer | strings' "no issuer in the answer"
print_json
