#!/usr/bin/env bash
# Read GET /admin-accessible, for the admin role only.
#
#   ACCESS_TOKEN             from scripts/login.sh
#   EXPECT=ok (default)      the resource: a token of ADMIN_USERNAME (default admin);
#                            prints {"message":"for admins only","user":{...}}
#   EXPECT=denied            the 403 of a valid token of another role; prints {"message":"No access"}
#   EXPECT=unauthorized      the 401 of a missing, bad or expired token; prints Unauthorized
#   BASE_URL                 the service, default http://127.0.0.1:8080
#
# Each expectation is the only answer that passes: a 403 fails unless EXPECT=denied.
# shellcheck source=scripts/lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

EXPECT=$(expectation ok denied unauthorized)
bearer
request GET /admin-accessible ${BEARER[@]+"${BEARER[@]}"}
case $EXPECT in
unauthorized)
    expect_unauthorized
    print_body
    ;;
denied)
    expect_json 403
    expect_field '. == {message: "No access"}' 'expected the body {"message": "No access"}'
    print_json
    ;;
ok)
    expect_json 200
    expect_field '.message == "for admins only"' 'the message is not "for admins only"'
    expect_field '.user.role == "admin"' "no admin user (the token's claims) in the answer"
    print_json
    ;;
esac
