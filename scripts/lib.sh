# shellcheck shell=bash
# Sourced by every scripts/*.sh: where the service is, one checked curl call, one-line failures.
#
#   BASE_URL   the service, default http://127.0.0.1:8080 (no trailing slash needed)
#
# A script prints its result on stdout and exits 0 only when the service answered exactly
# as expected; otherwise it prints one line on stderr and exits 1 (2 for a usage error).
# Tokens never appear on a command line (other users see those in `ps`) nor in a message:
# they go to curl through files in a private temporary folder, removed on exit.
set -euo pipefail

SCRIPT=${0##*/}

# help: the calling script's header comment (its lines after the shebang up to the first
# line that is not a comment, without "# "), on stdout.
help() {
    sed -n '2,/^[^#]/{/^#/!d; /^# shellcheck/d; s/^# \{0,1\}//; p}' "$0"
}

# -h or --help prints the script's usage; `--` ends the options, so an argument that
# starts with a dash (a username, say) follows it; any other option is a usage error
# (never taken for a username or a token).
case ${1-} in
-h | --help) help; exit 0 ;;
--) shift ;;
-[A-Za-z-]*) printf 'usage: unknown option %s; try: %s --help\n' "${1//[^[:graph:]]/?}" "$SCRIPT" >&2; exit 2 ;;
esac

BASE_URL=${BASE_URL:-http://127.0.0.1:8080}
BASE_URL=${BASE_URL%/}
SCRATCH=$(mktemp -d)
trap 'rm -rf -- "$SCRATCH"' EXIT

# Every request: no ~/.curlrc (-q), quiet but for errors, no URL globbing, http(s) only,
# no redirect followed (a 3xx is an unexpected answer), bounded in time and size.
CURL_OPTIONS=(-q -sS --globoff --proto "=http,https" --connect-timeout 5 --max-time 20
    --max-filesize 1048576)

# one_line TEXT: TEXT without control characters (newlines included), at most 300 bytes.
one_line() {
    printf '%s' "$1" | tr -s '\000-\037\177' ' ' | cut -c1-300
}

# fail MESSAGE: print "script: MESSAGE" as one line on stderr, exit 1.
fail() {
    printf '%s: %s\n' "$SCRIPT" "$(one_line "$*")" >&2
    exit 1
}

# usage MESSAGE: print the script's usage as one line on stderr, exit 2.
usage() {
    printf 'usage: %s\n' "$(one_line "$*")" >&2
    exit 2
}

[[ $BASE_URL =~ ^https?://[[:graph:]]+$ ]] || usage "BASE_URL must be an http(s) URL"

# expectation ALLOWED...: the value of EXPECT (default: the first one), or a usage error.
expectation() {
    local wanted=${EXPECT:-$1} allowed
    for allowed in "$@"; do
        [[ $wanted == "$allowed" ]] && { printf '%s' "$wanted"; return; }
    done
    usage "EXPECT must be one of: $* (not '$wanted')"
}

# request METHOD PATH [CURL_OPTION...]: send one request to BASE_URL and set STATUS,
# CONTENT_TYPE, BODY (a file) and HEADERS (a file); fail when no HTTP answer comes back.
request() {
    local method=$1 path=$2 url meta
    shift 2
    if [[ $path == /token/* ]]; then
        REQUEST="$method /token/<redacted>"  # a refresh token is a secret
    else
        REQUEST="$method $path"
    fi
    url=$BASE_URL$path
    url=${url//\\/\\\\}
    printf 'url = "%s"\n' "${url//\"/\\\"}" >"$SCRATCH/url"
    BODY=$SCRATCH/body HEADERS=$SCRATCH/headers
    if ! meta=$(curl "${CURL_OPTIONS[@]}" --request "$method" --config "$SCRATCH/url" \
        --output "$BODY" --dump-header "$HEADERS" --write-out '%{http_code} %{content_type}' \
        "$@" 2>"$SCRATCH/error"); then
        fail "$REQUEST: no answer from $BASE_URL: $(sed -n '1s/^curl: //p' "$SCRATCH/error")"
    fi
    read -r STATUS CONTENT_TYPE <<<"$meta" || true
}

# answered: a short description of the answer, for a failure message.
answered() {
    local message=''
    if [[ $CONTENT_TYPE == application/json* ]]; then
        message=$(jq -r 'objects | (.message // .error) | strings' "$BODY" 2>/dev/null || true)
    elif [[ $CONTENT_TYPE == text/plain* ]]; then
        message=$(head -c 80 "$BODY")
    fi
    printf '%s %s%s' "$STATUS" "${CONTENT_TYPE:-(no content type)}" "${message:+ \"$message\"}"
}

# expect_status CODE: fail unless the answer has status CODE.
expect_status() {
    [[ $STATUS == "$1" ]] || fail "$REQUEST: expected $1, got $(answered)"
}

# expect_json CODE: fail unless the answer is CODE with a JSON object as its body.
expect_json() {
    expect_status "$1"
    [[ $CONTENT_TYPE == application/json* ]] || fail "$REQUEST: expected JSON, got $(answered)"
    jq -e 'type == "object"' "$BODY" >/dev/null 2>&1 ||
        fail "$REQUEST: the body is not a JSON object"
}

# expect_field JQ_TEST WHAT: fail with "WHAT" unless JQ_TEST holds on the JSON body.
expect_field() {
    jq -e "$1" "$BODY" >/dev/null 2>&1 || fail "$REQUEST: $2"
}

# expect_empty CODE: fail unless the answer is CODE with no body.
expect_empty() {
    expect_status "$1"
    [[ ! -s $BODY ]] || fail "$REQUEST: expected no body, got $(wc -c <"$BODY") bytes"
}

# expect_unauthorized: fail unless the answer is the contract's 401, plain-text Unauthorized.
expect_unauthorized() {
    expect_status 401
    [[ $CONTENT_TYPE == text/plain* ]] || fail "$REQUEST: expected text/plain, got $(answered)"
    [[ $(<"$BODY") == Unauthorized ]] || fail "$REQUEST: expected the body Unauthorized"
}

# print_json: print the JSON body on one line.
print_json() {
    jq -c . "$BODY"
}

# print_body: print the body as it came, and a newline.
print_body() {
    cat "$BODY"
    echo
}

# json_body JQ_PROGRAM: write the JSON request body that JQ_PROGRAM builds to the file
# REQUEST_BODY, for `--data-binary @file`. The program reads its values from exported
# variables (env.NAME): never pasted into JSON as text, never on jq's command line.
REQUEST_BODY=$SCRATCH/request
json_body() {
    jq -n "$1" >"$REQUEST_BODY"
}

# form_body JQ_OBJECT: write the form request body (application/x-www-form-urlencoded)
# of the object JQ_OBJECT builds to the file REQUEST_BODY, each value percent-encoded.
form_body() {
    jq -jn "$1 | to_entries | map(\"\\(.key)=\\(.value | @uri)\") | join(\"&\")" >"$REQUEST_BODY"
}

# client_header: write the HTTP Basic header of CLIENT_ID and CLIENT_SECRET (each
# form-urlencoded first, RFC 6749 section 2.3.1) to the file AUTHORIZATION, for `-H @file`.
client_header() {
    [[ -n ${CLIENT_ID:-} && -n ${CLIENT_SECRET:-} ]] ||
        usage "$SCRIPT needs CLIENT_ID and CLIENT_SECRET (from flask clients add)"
    printf 'Authorization: Basic %s\n' \
        "$(jq -rn '"\(env.CLIENT_ID | @uri):\(env.CLIENT_SECRET | @uri)" | @base64')" >"$AUTHORIZATION"
}

# bearer_header: write `Authorization: Bearer $ACCESS_TOKEN` to the file AUTHORIZATION,
# for `-H @file`.
AUTHORIZATION=$SCRATCH/authorization
bearer_header() {
    [[ ${ACCESS_TOKEN:-} =~ ^[[:graph:]]+$ ]] ||
        usage "ACCESS_TOKEN must hold one access token (see scripts/login.sh)"
    printf 'Authorization: Bearer %s\n' "$ACCESS_TOKEN" >"$AUTHORIZATION"
}

# bearer: set BEARER to the curl options that send ACCESS_TOKEN; none when EXPECT is
# unauthorized and no token is set (a request without a token).
bearer() {
    BEARER=()
    if [[ -n ${ACCESS_TOKEN:-} || ${EXPECT:-} != unauthorized ]]; then
        bearer_header
        # shellcheck disable=SC2034 # for the sourcing script
        BEARER=(-H @"$AUTHORIZATION")
    fi
}

# An access token, for expect_field: three base64url parts (a JWT).
# shellcheck disable=SC2034 # for the sourcing script
JWT='test("^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$")'
