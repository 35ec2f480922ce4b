#!/usr/bin/env bash
# test_scratch.sh - `due scratch make|drop` reach scratch stores only
# (issue 37, the attack on the admin group): a NAME is the schema,
# database, key prefix or file due_scratch_NAME, so no drop reaches the
# user's store, public, information_schema or mysql; make refuses a name
# that exists (Redis too); drop refuses what holds anything but due's
# tables; every name the help allows works on every store; a frozen
# server fails make and drop within the URL's timeout=; the PostgreSQL
# scratch URL keeps the user's own options=.  On SQLite and on every
# server of DUE_TEST_*_URL (`due scratch list`); fast.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROXY=$ROOT/tests/cli/stallproxy.py
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$T"' EXIT

# --- SQLite: a file of its own per NAME in an existing --dir
d=$T/sq
mkdir "$d"
echo "the user's own" >"$d/due.db"
expect_eq "make: the name's own file" "sqlite:$d/due_scratch_s_1.db" \
	"$("$DUE" scratch make --backend sqlite --dir "$d" s_1)"
"$DUE" init --db "sqlite:$d/due_scratch_s_1.db" >/dev/null && ok || bad "init of the scratch file"
expect_err 5 "already exists" "$DUE" scratch make --backend sqlite --dir "$d" s_1
"$DUE" scratch drop --backend sqlite --dir "$d" s_1 && ok || bad "sqlite drop"
expect_eq "drop: only the name's files gone" "due.db" "$(ls -A "$d")"
expect_eq "drop: the user's due.db untouched" "the user's own" "$(cat "$d/due.db")"
"$DUE" scratch drop --backend sqlite --dir "$d" s_1 && ok || bad "drop of a name not there: exit 0"
echo "not a store" >"$d/due_scratch_s_2.db"
expect_err 5 "not a SQLite database" "$DUE" scratch drop --backend sqlite --dir "$d" s_2
expect_eq "a refused drop keeps the file" "not a store" "$(cat "$d/due_scratch_s_2.db")"
expect_err 2 "scratch directory $T/none" "$DUE" scratch make --backend sqlite --dir "$T/none" s_3
expect_eq "no directory made" "" "$(ls -d "$T/none" 2>/dev/null || true)"
expect_err 2 "give --dir DIR" "$DUE" scratch drop --backend sqlite s_3
expect_err 2 "give --dir DIR" "$DUE" scratch make --backend sqlite s_3
expect_err 2 "list takes no arguments" "$DUE" scratch list extra
# the name rule, the same on every store, said with the rule
long=$(printf 'a%.0s' $(seq 52))
for n in A_B a-b "" "$long" "x y"; do
	expect_err 2 "lowercase letters, digits or _" "$DUE" scratch make --backend sqlite --dir "$d" "$n"
done
"$DUE" scratch make --backend sqlite --dir "$d" "${long:1}" >/dev/null && ok || bad "a name of 51 bytes"

# --- every store: the names the help allows, make twice, drop of names
# that are not scratch stores
server() { # BACKEND URL
	local b=$1 u=$2 x n v
	echo "== $b"
	# made and dropped; one of them used as a store (all are the same
	# kind of identifier now: due_scratch_NAME)
	for n in 1abc 123 select user "${long:1}"; do
		x=$("$DUE" scratch make --db "$u" "$n" 2>"$T/err") &&
			{ [ "$n" != 1abc ] || { "$DUE" init --db "$x" >/dev/null &&
				"$DUE" add k --db "$x" >/dev/null; } 2>>"$T/err"; } &&
			"$DUE" scratch drop --db "$u" "$n" 2>>"$T/err" &&
			ok || bad "$b: name '$n': $(cat "$T/err")"
	done
	v=$("$DUE" scratch make --db "$u" "victim_$$")
	expect_err 5 "already exists" "$DUE" scratch make --db "$u" "victim_$$"
	"$DUE" init --db "$v" >/dev/null
	id=$("$DUE" add k --db "$v")
	expect_err 5 "already exists" "$DUE" scratch make --db "$u" "victim_$$"
	# neither the store's physical name nor the server's own are reachable
	for n in "due_scratch_victim_$$" public information_schema mysql sys due; do
		"$DUE" scratch drop --db "$u" "$n" >/dev/null 2>&1 && ok || bad "$b: drop $n: not a no-op"
	done
	expect_eq "$b: the store survives every drop" SCHEDULED \
		"$("$DUE" show "$id" --db "$v" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")"
	expect_err 2 "--dir is for a store in files" "$DUE" scratch drop --db "$u" --dir "$T" "victim_$$"
	"$DUE" scratch drop --db "$u" "victim_$$" && ok || bad "$b: drop victim"
	"$DUE" ls --db "$v" >/dev/null 2>&1 && bad "$b: victim left after drop" || ok
	frozen "$b" "$u"
}

# frozen BACKEND URL: a server that answers nothing (a frozen TCP proxy,
# tests/cli/stallproxy.py: the same as SIGSTOP for the client) fails make
# and drop within timeout=2s and a few seconds, naming what failed
frozen() {
	local b=$1 u=$2 port p pu s e
	port=$(sed -nE 's#.*127\.0\.0\.1:([0-9]+).*#\1#p' <<<"$u")
	[ -n "$port" ] || { echo "  $b: not over TCP on loopback, no path to freeze"; return 0; }
	rm -f "$T/proxy.port"
	python3 "$PROXY" "$port" "$T/proxy.port" &
	p=$!
	PIDS+=("$p")
	wait_for "$b: the proxy listens" 30 test -s "$T/proxy.port"
	pu=$(sed -E "s#127\.0\.0\.1:[0-9]+#127.0.0.1:$(cat "$T/proxy.port")#" <<<"$u")
	case $pu in *\?*) pu="$pu&timeout=2s" ;; *) pu="$pu?timeout=2s" ;; esac
	kill -STOP "$p"
	for verb in make drop; do
		s=$(date +%s%N)
		expect_err 5 "scratch" timeout 30 "$DUE" scratch "$verb" --db "$pu" "frozen_$$"
		e=$((($(date +%s%N) - s) / 1000000))
		[ "$e" -lt 7000 ] && ok || bad "$b: $verb on a frozen server took ${e} ms (timeout=2s)"
	done
	kill -CONT "$p"
	kill "$p"
	"$DUE" scratch drop --db "$u" "frozen_$$" >/dev/null 2>&1 || true
}

while read -r b var; do
	[ "$var" = - ] && continue
	need "$var" "$b" || continue
	server "$b" "${!var}"
done < <("$DUE" scratch list)

# --- PostgreSQL: the user's options= kept, search_path merged into it
if need DUE_TEST_PG_URL postgres; then
	u=$DUE_TEST_PG_URL
	case $u in *\?*) u="$u&" ;; *) u="$u?" ;; esac
	x=$("$DUE" scratch make --db "${u}options=-cstatement_timeout%3D5s" "opt_$$")
	expect_eq "one options= in the scratch URL" 1 "$(grep -o 'options=' <<<"$x" | wc -l)"
	has -e '-cstatement_timeout%3D5s%20-csearch_path%3Ddue_scratch_opt_' <<<"$x" && ok || bad "options merged: $x"
	"$DUE" init --db "$x" >/dev/null && ok || bad "init on the merged URL"
	if command -v psql >/dev/null; then
		expect_eq "the user's option holds" 5s "$(psql -XAtq "$x" -c 'SHOW statement_timeout')"
		psql -XAtq "$DUE_TEST_PG_URL" -c "CREATE SCHEMA due_scratch_mine_$$; CREATE TABLE due_scratch_mine_$$.t (x int)"
		expect_err 5 "holds tables but no due store" "$DUE" scratch drop --db "$DUE_TEST_PG_URL" "mine_$$"
		expect_eq "a refused drop keeps the schema" 0 \
			"$(psql -XAtq "$DUE_TEST_PG_URL" -c "SELECT count(*) FROM due_scratch_mine_$$.t")"
		psql -XAtq "$DUE_TEST_PG_URL" -c "DROP SCHEMA due_scratch_mine_$$ CASCADE"
	else
		echo "NOTE: no psql: the options and refusal checks on PostgreSQL skipped"
	fi
	"$DUE" scratch drop --db "$DUE_TEST_PG_URL" "opt_$$" && ok || bad "drop opt"
fi

finish
