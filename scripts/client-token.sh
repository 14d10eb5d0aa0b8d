#!/usr/bin/env bash
# Get a registered client's access token with POST /oauth/token (client_credentials);
# print {"access_token":"...","token_type":"Bearer","expires_in":60} on one line.
#
#   CLIENT_ID, CLIENT_SECRET   the client, as `flask clients add` registered it
#   BASE_URL                   the service, default http://127.0.0.1:8080
#
# Needs CLIENTS_FILE on the service. The secret goes in HTTP Basic, from a file, never
# on a command line.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

client_header
form_body '{grant_type: "client_credentials"}'
request POST /oauth/token -H @"$AUTHORIZATION" \
    -H 'Content-Type: application/x-www-form-urlencoded' --data-binary @"$REQUEST_BODY"
expect_json 200
expect_field ".access_token | strings | $JWT" "no access_token (a JWT) in the answer"
expect_field '.token_type == "Bearer"' "the token_type is not Bearer"
print_json
