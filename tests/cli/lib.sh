# lib.sh - helpers for the CLI tests: a temp dir per test script, and
# assertions that print what was expected and what came.
set -euo pipefail
DUE=${DUE_BIN:-$(cd "$(dirname "$0")/../.." && pwd)/build/due}
T=$(mktemp -d /tmp/due-cli-XXXXXX)
# on exit, also stop what the test left running in the background (a
# failed check ends the script early): an orphaned worker would hold
# ctest's output pipe open and hang the run
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
export DUE_DB="sqlite:$T/due.db"
PASS=0
FAIL=0

ok() { PASS=$((PASS + 1)); }
bad() { FAIL=$((FAIL + 1)); echo "FAIL: $*" >&2; }
# has GREP-ARGS : grep -q for a pipeline's end. Under pipefail, `cmd |
# grep -q` fails at random: grep quits at the first match and a cmd still
# writing dies of SIGPIPE (ldd did, in an ASan CI run). has reads it all.
has() { [ "$(grep -c "$@")" != 0 ]; }

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
	if [ "$2" == "$3" ]; then ok; else bad "$1: expected '$2', got '$3'"; fi
}

# expect_err CODE SUBSTRING CMD... : exit code and a stderr message naming it
expect_err() {
	local code=$1 sub=$2 rc=0
	shift 2
	"$@" >"$T/out" 2>"$T/err" || rc=$?
	if [ "$rc" != "$code" ]; then
		bad "$*: exit $rc, expected $code (stderr: $(cat "$T/err"))"
	elif ! grep -qF -- "$sub" "$T/err"; then
		bad "$*: stderr lacks '$sub': $(cat "$T/err")"
	elif [ "$(wc -l <"$T/err")" -gt 2 ]; then
		bad "$*: error is not one line (+hint): $(cat "$T/err")"
	else
		ok
	fi
}

# wait_for DESCRIPTION SECONDS CMD... : poll a condition with a deadline
wait_for() {
	local what=$1 secs=$2 end
	shift 2
	end=$(($(date +%s%N) + secs * 1000000000))
	until "$@" >/dev/null 2>&1; do
		if [ "$(date +%s%N)" -gt "$end" ]; then
			bad "timed out waiting for: $what"
			return 1
		fi
		sleep 0.02
	done
	ok
}

# wait_drain WHAT STALL CMD...: CMD prints how many are left; done at 0.
# Fails only when that number has not gone down for STALL seconds: a
# drain on a slow machine (ASan, 2 CPUs, servers of a cluster sharing
# them) may take minutes and is not a fault, a drain that stops is.
wait_drain() {
	local what=$1 stall=$2 left best= since
	shift 2
	since=$(date +%s)
	while :; do
		left=$("$@" 2>/dev/null) || left=
		if [ "$left" = 0 ]; then
			ok
			return 0
		fi
		if [ -n "$left" ] && { [ -z "$best" ] || [ "$left" -lt "$best" ]; }; then
			best=$left
			since=$(date +%s)
		elif [ $(($(date +%s) - since)) -ge "$stall" ]; then
			bad "timed out waiting for: $what (${best:-?} left, none done in ${stall}s)"
			return 1
		fi
		sleep 0.5
	done
}

# need VAR LABEL: is this store's server there? (CI=true: it must be)
need() {
	[ -n "${!1:-}" ] && return 0
	if [ "${CI:-}" = true ]; then bad "CI=true but $1 is unset"; else echo "NOTE: $1 not set: $2 not tested"; fi
	return 1
}

# on_each_store FN NAME: FN BACKEND URL on a new scratch store of every
# backend this build has, as `due scratch list` reads them from the table
# of src/store/registry.c (a new backend is picked up by its line there):
# a store in files in a directory of $T; the others a schema / prefix /
# database beside the server their variable names (DUE_TEST_PG_URL,
# DUE_TEST_REDIS_URL, DUE_TEST_MYSQL_URL: under CI=true each must be
# there).  The backend makes and drops them (`due scratch make|drop`).
# The caller declares CLEANUP=() and runs its entries at exit (they drop
# what this made).  FN's stdin is the script's, not the list's.
# has_backend NAME: this build of due has the store backend NAME (as `due
# scratch list` names them: sqlite, postgres, redis, mysql).
has_backend() {
	"$DUE" scratch list | awk '{print $1}' | grep -qx "$1"
}

on_each_store() {
	local fn=$1 name=$2 b var url
	local -a where
	while read -r b var <&3; do
		if [ "$var" = - ]; then
			mkdir -p "$T/$name-$b"
			where=(--backend "$b" --dir "$T/$name-$b")
		else
			need "$var" "$b" || continue
			where=(--db "${!var}")
		fi
		if ! url=$("$DUE" scratch make "${where[@]}" "due_${name}_$$"); then
			bad "$b: no scratch store for $name"
			continue
		fi
		CLEANUP+=("$(printf '%q ' "$DUE" scratch drop "${where[@]}" "due_${name}_$$")")
		"$fn" "$b" "$url"
	done 3< <("$DUE" scratch list)
}

# ran_once_on_time LABEL URL ID LATE_MS: task ID of the store at URL ran
# exactly once, claimed no earlier than its due time (as the store holds
# it now: a moved task's new one) and at most LATE_MS after it.
ran_once_on_time() {
	local v
	v=$("$DUE" show "$3" --json --db "$2" | python3 -c '
import json, sys
t, label, late = json.load(sys.stdin), sys.argv[1], int(sys.argv[2])
a, tid = t["attempts"], t["id"]
if len(a) != 1:
    print("FAIL: %s: task %d ran %d times" % (label, tid, len(a)))
elif a[0]["claimed_at"] < t["due_at"]:
    print("FAIL: %s: task %d claimed %s before its due time %s" % (label, tid, a[0]["claimed_at"], t["due_at"]))
elif a[0]["lateness_ms"] > late:
    print("FAIL: %s: task %d claimed %s ms after its due time (bound %d)" % (label, tid, a[0]["lateness_ms"], late))
else:
    print("ok")
' "$1" "$4")
	[ "$v" = ok ] && ok || bad "${v#FAIL: }"
}

finish() {
	echo "$PASS passed, $FAIL failed"
	[ "$FAIL" -eq 0 ]
}

# cannot_test WHAT WHY: this test cannot run here (a missing package or
# server).  Under CI=true that fails it; elsewhere a note, and it ends.
cannot_test() {
	if [ "${CI:-}" = true ]; then
		bad "CI=true but $1 cannot run: $2"
		finish || exit 1
	fi
	echo "NOTE: $1 not tested: $2"
	finish
	exit 0
}

# mysql_url_parts URL: split mysql://user[:password]@host[:port]/db[?socket=PATH]
# into myauth (user[:password]), myuser, mypass, myhostport, myhost, myport
# (3306 when absent), myquery ("?..." or empty) and mysock, for the tests
# that reach the server with the mariadb client.
mysql_url_parts() {
	local rest=${1#*://}
	myquery=; case "$rest" in *\?*) myquery="?${rest#*\?}"; rest=${rest%%\?*};; esac
	myauth=root; case "$rest" in *@*) myauth=${rest%%@*}; rest=${rest#*@};; esac
	myhostport=${rest%%/*}
	myuser=${myauth%%:*}; mypass=; case "$myauth" in *:*) mypass=${myauth#*:};; esac
	myhost=${myhostport%%:*}; myport=3306; case "$myhostport" in *:*) myport=${myhostport#*:};; esac
	mysock=; case "$myquery" in *socket=*) mysock=${myquery#*socket=}; mysock=${mysock%%&*};; esac
}
