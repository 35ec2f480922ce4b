#!/usr/bin/env bash
# test_store_limits.sh - each store's own limits, said before anything is
# sent (issue 36, points 13 to 16):
#
# 13. A payload the store cannot hold in one task is refused with exit 2,
#     one line naming the limit and the setting that raises it, and nothing
#     is written: MariaDB's max_allowed_packet (read from the server: the
#     payload at the limit is taken, one byte more refused), Redis's
#     proto-max-bulk-len (lowered on a private server; a 10 MiB task on a
#     default server is taken as one task, no "split").  (SQLite's and
#     PostgreSQL's fixed limits are met to the byte, on every store, by
#     tests/unit/test_store_limits.c, with buffers it never touches.)  A
#     batch whose payloads each fit but together pass one statement's bound
#     is one transaction on the SQL stores (MariaDB: over max_allowed_packet
#     in one multi-row INSERT, which gave 1153; PostgreSQL: two statements,
#     one xmin); on Redis it is refused, told to split.
# 14. A batch of 10,001 lines is one call on the SQL stores and refused on
#     Redis naming its bound of 10,000, which `due add --help` states.
# 15. A Redis at maxmemory with noeviction (a private server): add, pause
#     and claims say "Redis is full (maxmemory N bytes) ... prune or raise
#     maxmemory", exit 5, never Redis's raw "OOM command not allowed";
#     reads answer; cancel, kill and prune succeed (with the function
#     library flushed too: EVALSHA's fallback); after prune and a
#     raised maxmemory, add works again.
# 16. An unsharded URL over a store made with shards=4 (and the reverse)
#     names the shards= that opens it, where it said "run `due init`".
#
# DUE_MAX_PAYLOAD is raised to 1 GiB here so that the stores' own limits,
# not the default 1 MiB, are met.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export DUE_MAX_PAYLOAD=1073741824
CLEANUP=()
RDIR=
cleanup() {
	kill $(jobs -p) 2>/dev/null || true
	for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	[ -n "$RDIR" ] && "$ROOT/scripts/redis-test-server" stop "$RDIR" >/dev/null 2>&1
	rm -rf "$T" "$RDIR"
}
trap cleanup EXIT

# how many tasks the store holds (the ls table's rows)
count() { "$DUE" ls --db "$1" --limit 10000 | sed 1d | wc -l; }
# line SIZE: one batch line of kind b with a payload of SIZE bytes
line() {
	printf '{"kind":"b","payload":"'
	head -c "$1" /dev/zero | tr '\0' a
	printf '"}\n'
}
for i in $(seq 10001); do echo "{\"kind\":\"b\",\"payload\":\"p$i\"}"; done >"$T/b10001"
"$DUE" add --help | grep -q "At most 10,000 tasks" && ok ||
	bad "due add --help does not state Redis's bound on a batch"

limits() {
	local label=$1 url=$2 rc
	"$DUE" init --db "$url" >/dev/null
	case $label in
	postgres)
		# (the 1 GB limits of SQLite and PostgreSQL are met to the byte
		# in tests/unit/test_store_limits.c, without sending a gigabyte)
		# two payloads of 8 MiB + 1: two statements, one transaction
		{ line 8388609; line 8388609; } >"$T/b16"
		"$DUE" add --batch "$T/b16" --db "$url" >"$T/ids" 2>"$T/err" && ok || bad "postgres 16 MiB batch: $(cat "$T/err")"
		# (psql on the scratch store's own URL: its search_path is the
		# scratch schema)
		expect_eq "postgres: a batch over 16 MiB is one transaction" "2 1" \
			"$(psql -qAtX "$url" -c "SELECT count(*), count(DISTINCT xmin::text) FROM due_task WHERE kind = 'b'" | tr '|' ' ')"
		;;
	mysql)
		mysql_url_parts "$DUE_TEST_MYSQL_URL"
		local packet max
		packet=$(MYSQL_PWD="$mypass" mariadb --no-defaults -h "$myhost" -P "$myport" ${mysock:+-S "$mysock"} \
			-u "$myuser" -Nse 'SELECT @@max_allowed_packet')
		max=$(((packet - 16384) / 2))
		truncate -s $((max + 1)) "$T/over"
		expect_err 2 "over the $max bytes this server takes in one task (max_allowed_packet = $packet; a payload is sent as hex" \
			"$DUE" add big --db "$url" --payload-file "$T/over"
		grep -qF "SET GLOBAL max_allowed_packet = " "$T/err" && ok || bad "mariadb: no way to raise it: $(cat "$T/err")"
		expect_eq "mariadb: the refused payload wrote nothing" 0 "$(count "$url")"
		# (sent only up to MariaDB's default packet, 16 MiB: a server set
		# higher would make this test send hundreds of megabytes)
		if [ "$max" -le 8380416 ]; then
			truncate -s "$max" "$T/at"
			"$DUE" add big --db "$url" --payload-file "$T/at" >/dev/null 2>"$T/err" && ok ||
				bad "mariadb: the payload at the limit ($max bytes) was refused: $(cat "$T/err")"
			# 1 MB then one at the limit: one INSERT would be over the packet
			{ line 1000000; line "$max"; line 10; } >"$T/bmix"
			"$DUE" add --batch "$T/bmix" --db "$url" >"$T/ids" 2>"$T/err" && ok || bad "mariadb mixed batch: $(cat "$T/err")"
			expect_eq "mariadb: the mixed batch's tasks" 3 "$(wc -l <"$T/ids")"
		else
			echo "NOTE: max_allowed_packet is $packet: the payload at the limit is not sent"
		fi
		;;
	redis)
		# one task of 10 MiB on a server with Redis's defaults: one task
		truncate -s 10485760 "$T/ten"
		"$DUE" add big --db "$url" --payload-file "$T/ten" >/dev/null 2>"$T/err" && ok ||
			bad "redis: a 10 MiB task was refused: $(cat "$T/err")"
		;;
	esac
	# 14. 10,001 lines: one call on the SQL stores, refused on Redis
	rc=0
	"$DUE" add --batch "$T/b10001" --db "$url" >"$T/ids" 2>"$T/err" || rc=$?
	if [ "$label" = redis ]; then
		expect_eq "redis: 10,001 lines refused" 2 "$rc"
		grep -qF "a batch of 10001 tasks is over the 10000 one call takes on Redis" "$T/err" && ok ||
			bad "redis: the batch bound is not named: $(cat "$T/err")"
		expect_eq "redis: nothing of the refused batch written" 1 "$(count "$url")"
	else
		expect_eq "$label: 10,001 lines in one call" "0 10001" "$rc $(wc -l <"$T/ids")"
	fi
}
on_each_store limits limits

# 15. Redis at maxmemory (noeviction), and its own proto-max-bulk-len, on
#     a private server
if need DUE_TEST_REDIS_URL redis && has_backend redis; then
	RDIR=$(mktemp -d /tmp/due-limits-redis-XXXXXX)
	R=$("$ROOT/scripts/redis-test-server" start "$RDIR")
	port=${R##*:}
	port=${port%%/*}
	rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
	U="$R?prefix=lim"
	"$DUE" init --db "$U" >/dev/null

	# 13. proto-max-bulk-len lowered to 1 MB: that many bytes are taken,
	#     one more refused naming it; two payloads that each fit but
	#     together do not are told to split
	rcli config set proto-max-bulk-len 1mb >/dev/null
	truncate -s 1048576 "$T/at"
	truncate -s 1048577 "$T/over"
	"$DUE" add big --db "$U" --payload-file "$T/at" >/dev/null 2>"$T/err" && ok ||
		bad "redis: 1 MB at proto-max-bulk-len 1mb refused: $(cat "$T/err")"
	expect_err 2 "payload is 1048577 bytes, over the 1048576 bytes this server takes in one argument (proto-max-bulk-len = 1048576): raise it (CONFIG SET proto-max-bulk-len 2mb" \
		"$DUE" add big --db "$U" --payload-file "$T/over"
	grep -q split "$T/err" && bad "redis: one task told to split: $(cat "$T/err")" || ok
	{ line 700000; line 700000; } >"$T/b2"
	expect_err 2 "a batch of 2 tasks carries 1400000 payload bytes, over the 1048576 one submit takes" \
		"$DUE" add --batch "$T/b2" --db "$U"
	grep -q "split it into smaller calls" "$T/err" && ok || bad "redis: a batch over the bound not told to split"
	expect_eq "redis: the refused payloads wrote nothing" 1 "$(count "$U")"
	rcli config set proto-max-bulk-len 512mb >/dev/null

	# 15. fill it: maxmemory just under what it holds
	l=$(line 10000)
	for i in $(seq 300); do echo "$l"; done >"$T/fill"
	"$DUE" add --batch "$T/fill" --db "$U" >"$T/ids"
	first=$(sed -n 1p "$T/ids")
	second=$(sed -n 2p "$T/ids")
	used=$(rcli info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')
	rcli config set maxmemory $((used - 200000)) >/dev/null
	mm=$(rcli config get maxmemory | sed -n 2p)
	[[ $(rcli set probe x) == *OOM* ]] && ok || bad "the private Redis is not at maxmemory (used $used, maxmemory $mm)"
	full="Redis is full (maxmemory $mm bytes): prune"
	expect_err 5 "submit refused: $full" "$DUE" add k --db "$U" --payload x
	grep -q "raise maxmemory" "$T/err" && ok || bad "redis full: no way out named: $(cat "$T/err")"
	expect_err 5 "set kind refused: $full" "$DUE" kind set b --pause --db "$U"
	# a worker's claims: the same message in its log, never the raw one
	"$DUE" work --db "$U" --exec true --poll 100ms >"$T/work.log" 2>&1 &
	wpid=$!
	wait_for "the worker's claims refused as full" 20 grep -q "claim refused: $full" "$T/work.log" || true
	kill "$wpid" 2>/dev/null
	wait "$wpid" 2>/dev/null || true
	cat "$T/err" "$T/work.log" | grep -q "OOM command not allowed" && bad "Redis's raw OOM reply reached the user" || ok
	# the way out: cancel, kill and prune work on the full store, even
	# with its function library gone (FUNCTION LOAD is refused on a full
	# server: the handle falls back to EVALSHA, whose SCRIPT LOAD is not)
	expect_eq "a read on a full Redis" SCHEDULED "$("$DUE" show "$first" --db "$U" --json 2>&1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>&1)"
	rcli function flush >/dev/null
	[[ $(rcli function load "#!lua name=due_probe_full
redis.register_function('p', function() return 1 end)") == *OOM* ]] && ok || bad "FUNCTION LOAD is not refused on the full Redis"
	expect_eq "cancel on a full Redis" CANCELLED "$("$DUE" cancel "$first" --db "$U" 2>&1)"
	expect_eq "kill on a full Redis" DEAD "$("$DUE" kill "$second" --db "$U" 2>&1)"
	expect_eq "prune on a full Redis" "deleted 1 tasks" "$("$DUE" prune --older-than 0s --db "$U" 2>&1)"
	[[ $(rcli config get maxmemory | sed -n 2p) == "$mm" ]] && ok || bad "maxmemory changed under the test"
	rcli config set maxmemory 0 >/dev/null
	"$DUE" add k --db "$U" --payload x >/dev/null 2>"$T/err" && ok || bad "add after maxmemory raised: $(cat "$T/err")"

	# 16. the other layout of a prefix is named, both ways
	"$DUE" init --db "$R?prefix=sh4&shards=4" >/dev/null
	expect_err 6 "a store of this prefix made with shards=4 exists: open it with ?shards=4" \
		"$DUE" add x --db "$R?prefix=sh4"
	expect_err 6 "an unsharded store of this prefix exists: open it without ?shards=" \
		"$DUE" add x --db "$U&shards=3"
	expect_err 6 "has no due schema: run \`due init\`" "$DUE" add x --db "$R?prefix=none"
fi

finish
