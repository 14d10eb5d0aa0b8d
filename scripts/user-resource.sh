#!/usr/bin/env bash
# Read GET /user-accessible, open to any role; print {"message":"for all users","user":{...}}.
#
#   ACCESS_TOKEN             from scripts/login.sh
#   EXPECT=ok (default)      the resource
#   EXPECT=unauthorized      the 401 of a missing, bad or expired token; prints Unauthorized
#   BASE_URL                 the service, default http://127.0.0.1:8080
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok unauthorized)
bearer
request GET /user-accessible ${BEARER[@]+"${BEARER[@]}"}
if [[ $EXPECT == unauthorized ]]; then
    expect_unauthorized
    print_body
    exit
fi
expect_json 200
expect_field '.message == "for all users"' 'the message is not "for all users"'
expect_field '.user.role | IN("user", "admin")' "no user (the token's claims) in the answer"
print_json
