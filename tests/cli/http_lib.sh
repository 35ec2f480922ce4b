# http_lib.sh - helpers for the `due serve` tests (sourced after lib.sh):
# start a server on a free port, make a request, read its JSON body.

# start_server NAME ARGS... : start `due serve`, wait for its address ->
# $URL, $PORT, $SPID (also added to PIDS, which the test's trap stops)
start_server() {
	local name=$1
	shift
	"$DUE" serve "$@" >"$T/$name.out" 2>"$T/$name.err" &
	SPID=$!
	PIDS+=("$SPID")
	wait_for "$name listening" 60 grep -q '^listening on http://' "$T/$name.out"
	URL=$(sed -n 's#^listening on \(http://[^ ]*\)/$#\1#p' "$T/$name.out")
	PORT=${URL##*:}
}

# req METHOD PATH [BODY] [CURL ARGS...] : -> $STATUS, body in $T/body,
# headers in $T/hdr
req() {
	local method=$1 path=$2 body=${3-}
	shift 2
	[ $# -gt 0 ] && shift
	local data=()
	[ -n "$body" ] && data=(--data-binary "$body" -H 'Content-Type: application/json')
	STATUS=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' --max-time 20 \
		-X "$method" "${data[@]}" "$@" "$URL$path") || STATUS=curl-failed
}

# jf EXPR : evaluate a Python expression over the JSON body `j`
jf() {
	python3 - "$T/body" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
v = eval(sys.argv[2])
print(v if isinstance(v, str) else json.dumps(v))
PY
}

# expect STATUS WHAT : the last request's status
# (a mismatch shows the start of the reply's body: a 503's error says why)
expect() {
	if [ "$STATUS" = "$1" ]; then
		ok
	else
		bad "$2: status: expected '$1', got '$STATUS': $(head -c 300 "$T/body" 2>/dev/null)"
	fi
}

# header NAME : the first value of that header in the last reply
header() { grep -i "^$1:" "$T/hdr" | head -1 | cut -d' ' -f2- | tr -d '\r'; }
