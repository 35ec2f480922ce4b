#!/usr/bin/env bash
# test_cli.sh - the `due` command line against a real SQLite store: every
# command, the five cancel outcomes, and every kind of bad input, which
# must give a one-line error naming the problem, a documented exit code,
# and leave the store unchanged.
. "$(dirname "$0")/lib.sh"

# Before init: every command refuses, nothing is created.
expect_err 6 "due init" "$DUE" add demo
expect_err 6 "due init" "$DUE" ls
[ ! -e "$T/due.db" ] && ok || bad "add without init created the file"

"$DUE" init >"$T/init.out" && ok || bad "init"
# the schema version this build writes (the upgrade checks below)
SV=$(sed -n 's/.*(schema \([0-9][0-9]*\)).*/\1/p' "$T/init.out")
[[ "$SV" =~ ^[0-9]+$ ]] && ok || bad "init names the schema version: $(cat "$T/init.out")"
"$DUE" init >/dev/null && ok || bad "init is idempotent"

# --help everywhere.
for c in init add cancel show ls dead retry requeue kill stats health prune; do
	"$DUE" "$c" --help | has "^usage: due $c" && ok || bad "$c --help"
done
"$DUE" --help | has "Exit codes" && ok || bad "due --help"
expect_err 2 "unknown command" "$DUE" frobnicate

# Global options before the command, as git takes them (issue 36, point
# 17): --db URL, --db=URL and --json; the same option after the command
# wins; --help and --version still stand alone; anything else before the
# command is refused by name.
G="sqlite:$T/global.db"
"$DUE" --db "$G" init | has "global.db (schema" && ok || bad "due --db URL init"
expect_eq "due --db=URL add" 1 "$("$DUE" --db="$G" add g1)"
"$DUE" --json --db "$G" ls | python3 -c "import json,sys; sys.exit(0 if [t['kind'] for t in json.load(sys.stdin)] == ['g1'] else 1)" \
	&& ok || bad "due --json --db URL ls: not the global store's list as JSON"
expect_eq "due --db URL cron ls --json" "[]" "$("$DUE" --db "$G" cron ls --json)"
expect_eq "the --db after the command wins" g1 \
	"$("$DUE" --db "sqlite:$T/none.db" show 1 --db "$G" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['kind'])")"
[ ! -e "$T/none.db" ] && ok || bad "the overridden --db was opened"
"$DUE" --db "$G" --help | has "^usage: due \[--db URL\] \[--json\] COMMAND" && ok || bad "due --db URL --help"
"$DUE" --version | has "^due .*(schema $SV)" && ok || bad "due --version"
"$DUE" -h | has "^usage: due" && ok || bad "due -h"
expect_err 2 "unknown option '--frob' before the command" "$DUE" --frob init
expect_err 2 "unknown option '-q' before the command" "$DUE" -q --db "$G" ls
expect_err 2 "option '--db' needs a value" "$DUE" --db
expect_err 2 "missing command after the global options" "$DUE" --db "$G" --json
expect_err 2 "unknown command 'frob'" "$DUE" --db "$G" frob
expect_err 2 "unknown option '--state'" "$DUE" --state DONE ls

# add / show
id=$("$DUE" add demo --in 1s --payload '{"order": 42}')
[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "add prints an id: '$id'"
"$DUE" show "$id" --json >"$T/show.json"
for f in id kind state due_at attempt max_attempts lease_owner lease_until \
	cancel_requested key result last_error created_at updated_at attempts payload; do
	python3 -c "import json,sys; d=json.load(open('$T/show.json')); sys.exit(0 if '$f' in d else 1)" \
		&& ok || bad "show --json lacks $f"
done
expect_eq "payload round trip" '{"order": 42}' \
	"$(python3 -c "import json; print(json.load(open('$T/show.json'))['payload'])")"
"$DUE" show "$id" | has "state *SCHEDULED" && ok || bad "show text"

# binary payload from stdin comes back as base64
printf 'a\0b\377' | "$DUE" add bin --payload-stdin >"$T/bid"
"$DUE" show "$(cat "$T/bid")" --json | has '"payload_b64": "YQBi/w=="' && ok || bad "binary payload"

# --json add, --key idempotence
j=$("$DUE" add demo --key order-7 --json)
echo "$j" | has '"key": "order-7"' && ok || bad "add --json"
k1=$(echo "$j" | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
k2=$("$DUE" add demo --key order-7 2>"$T/err")
expect_eq "same key same id" "$k1" "$k2"
grep -q "exists" "$T/err" && ok || bad "existing key noted on stderr"

# cancel: CANCELLED, ALREADY_CANCELLED, NOT_FOUND (exit 3)
expect_eq "cancel waiting" CANCELLED "$("$DUE" cancel "$id")"
expect_eq "cancel again" ALREADY_CANCELLED "$("$DUE" cancel "$id")"
rc=0; out=$("$DUE" cancel 999999) || rc=$?
expect_eq "cancel unknown" "NOT_FOUND/3" "$out/$rc"

# snapshot for "bad input changes nothing"
snap() { "$DUE" ls --json --limit 10000 | md5sum; }
before=$(snap)

expect_err 2 "negative" "$DUE" add demo --in -5s
expect_err 2 "invalid duration '5'" "$DUE" add demo --in 5
expect_err 2 "invalid duration 'soon'" "$DUE" add demo --in soon
expect_err 2 "more than 100 years" "$DUE" add demo --in 99999d
expect_err 2 "invalid time '2026-13-01T00:00:00Z'" "$DUE" add demo --at 2026-13-01T00:00:00Z
expect_err 2 "missing UTC offset" "$DUE" add demo --at 2026-12-01T02:00:00
expect_err 2 "exclusive" "$DUE" add demo --in 1s --at 2026-12-01T02:00:00Z
expect_err 2 "invalid kind" "$DUE" add 'bad kind'
expect_err 2 "missing KIND" "$DUE" add
expect_err 2 "--max-attempts" "$DUE" add demo --max-attempts 0
expect_err 2 "--max-attempts" "$DUE" add demo --max-attempts lots
expect_err 2 "base <= cap" "$DUE" add demo --backoff 2h --backoff-cap 1h
head -c 1048577 /dev/zero | tr '\0' 'x' >"$T/big"
expect_err 2 "over the limit of 1048576 bytes (set \$DUE_MAX_PAYLOAD to raise it" "$DUE" add demo --payload-file "$T/big"
# a batch line over the limit: the library's refusal names the setting too
printf '{"kind":"demo","payload":"%s"}\n' "$(head -c 200 /dev/zero | tr '\0' 'y')" >"$T/bigline"
expect_err 2 "item 1: payload is 200 bytes, over the limit of 100 bytes (raise it with due_open_opts.max_payload; \$DUE_MAX_PAYLOAD" env DUE_MAX_PAYLOAD=100 "$DUE" add --batch "$T/bigline"
head -c 1048576 /dev/zero | tr '\0' 'x' >"$T/max"
expect_err 2 "over the limit of 100 bytes" env DUE_MAX_PAYLOAD=100 "$DUE" add demo --payload-file "$T/max"
expect_err 2 "cannot read" "$DUE" add demo --payload-file "$T/nope"
expect_err 2 "is a directory" "$DUE" add demo --payload-file "$T"
expect_err 2 "invalid task id 'abc'" "$DUE" show abc
expect_err 2 "invalid task id '-1'" "$DUE" cancel -1
# a cluster of letters getopt stops at names itself, not the argument before
expect_err 2 "invalid task id '-5x'" "$DUE" cancel -5x
expect_err 2 "invalid task id '-5x'" "$DUE" show -5x
expect_err 2 "unknown option '-zq'" "$DUE" ls -zq
expect_err 2 "due add -- -1" "$DUE" add -1
expect_err 2 "needs a value" "$DUE" add demo --in
expect_err 2 "invalid task id '12x'" "$DUE" retry 12x
expect_err 3 "no task with id 424242" "$DUE" show 424242
expect_err 3 "no task with id 424242" "$DUE" retry 424242
expect_err 2 "unknown state 'zombie'" "$DUE" ls --state zombie
expect_err 2 "--limit" "$DUE" ls --limit 0
expect_err 2 "unsupported scheme 'mysqlx'" "$DUE" ls --db mysqlx://h/db
# a build without an optional backend says how to get it (the CI's builds
# without each one run this file)
for b in postgres:PG postgresql:PG redis:REDIS rediss:REDIS mysql:MYSQL \
	mariadb:MYSQL; do
	case ${b%%:*} in postgres*) name=postgres ;; redis*) name=redis ;;
	*) name=mysql ;; esac
	has_backend "$name" && continue
	expect_err 2 "build it with -DDUE_WITH_${b#*:}=ON" \
		"$DUE" ls --db "${b%%:*}://h/db"
done
expect_err 2 "unknown option 'sync=fast'" "$DUE" ls --db "sqlite:$T/due.db?sync=fast"
expect_err 2 "empty file path" "$DUE" ls --db sqlite:
expect_err 6 "no store at" "$DUE" ls --db "sqlite:$T/other.db"
mkdir -p "$T/ro" && chmod 555 "$T/ro"
if [ "$(id -u)" != 0 ]; then
	expect_err 5 "cannot open" "$DUE" init --db "sqlite:$T/ro/x.db"
else
	expect_err 5 "sqlite store" "$DUE" init --db "sqlite:/proc/due-test.db"
fi
expect_err 2 "--older-than DUR is required" "$DUE" prune
expect_err 2 "unknown option" "$DUE" ls --frobnicate

# batch: a bad line 3 writes nothing; the error names the line
printf '{"kind":"a"}\n{"kind":"b","in":"1s"}\n{"kind":"c","in":"-1s"}\n' >"$T/b1"
expect_err 2 "line 3" "$DUE" add --batch "$T/b1"
printf '{"kind":"a"}\n{"kind":"b", "colour":"red"}\n' >"$T/b2"
expect_err 2 "unknown field 'colour'" "$DUE" add --batch "$T/b2"
printf '{"kind":"a"}\n{"kind":\n' >"$T/b3"
expect_err 2 "malformed JSON" "$DUE" add --batch "$T/b3"
printf '{"kind":"a","max_attempts":"3"}\n' >"$T/b4"
expect_err 2 "max_attempts" "$DUE" add --batch "$T/b4"

after=$(snap)
expect_eq "bad input changed nothing" "$before" "$after"

# a good batch, from stdin: one id per line
n=$(printf '{"kind":"a","payload":"x"}\n\n{"kind":"b","in":"1h","key":"k"}\n{"kind":"c","payload_b64":"AAE="}\n' |
	"$DUE" add --batch - | wc -l)
expect_eq "batch ids" 3 "$n"

# ls filters, stats, health
"$DUE" ls --kind a | has " a " && ok || bad "ls --kind"
"$DUE" ls --state CANCELLED --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if len(d)==1 and d[0]['state']=='CANCELLED' else 1)" \
	&& ok || bad "ls --state --json"
"$DUE" stats --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if {'counts','dead','oldest_due_unclaimed_ms'} <= d.keys() else 1)" \
	&& ok || bad "stats --json fields"
# A small SQLite store counts exactly (estimated: []), each count equal to
# the tasks `ls --state` lists; nothing pruned by retention.
"$DUE" stats --json >"$T/stats.json"
expect_eq "stats --json: estimated [] and workers.pruned 0" "[] 0" \
	"$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d['estimated']), d['workers']['pruned'])" "$T/stats.json")"
for st in SCHEDULED CLAIMED DONE CANCELLED DEAD; do
	expect_eq "stats: exact $st" \
		"$("$DUE" ls --state "$st" --limit 10000 --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)))")" \
		"$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['counts'][sys.argv[2]])" "$T/stats.json" "$st")"
done
"$DUE" stats >"$T/stats.txt"
grep -Eq '~|estimate' "$T/stats.txt" && bad "stats text marks an exact count as an estimate" || ok
grep -q "^SCHEDULED  *[0-9][0-9]*$" "$T/stats.txt" && ok || bad "stats text: SCHEDULED line"
grep -q "^tasks pruned by retention: 0 " "$T/stats.txt" && ok || bad "stats text: pruned line"
# ls --state S --limit N: the first N of that state in id order, then
# --after pages on from the last one.
for i in 1 2 3; do "$DUE" add lim --in 1h >/dev/null; done
ids=$("$DUE" ls --state SCHEDULED --kind lim --json | python3 -c "import json,sys; print(' '.join(str(t['id']) for t in json.load(sys.stdin)))")
read -r l1 l2 l3 <<<"$ids"
expect_eq "ls --limit 2" "$l1 $l2" "$("$DUE" ls --state SCHEDULED --kind lim --limit 2 --json | python3 -c "import json,sys; print(' '.join(str(t['id']) for t in json.load(sys.stdin)))")"
expect_eq "ls --limit 2 --after" "$l3" "$("$DUE" ls --state SCHEDULED --kind lim --limit 2 --after "$l2" --json | python3 -c "import json,sys; print(' '.join(str(t['id']) for t in json.load(sys.stdin)))")"
expect_eq "ls --limit 1 table: header and one row" 2 "$("$DUE" ls --state SCHEDULED --limit 1 | wc -l)"
# --after 0 is "from the start", the default (issue 36, point 16)
expect_eq "ls --after 0 = ls" "$("$DUE" ls --json | md5sum)" "$("$DUE" ls --after 0 --json | md5sum)"
expect_eq "ls --after 0 --limit 1: the first task" "$l1" "$("$DUE" ls --state SCHEDULED --kind lim --after 0 --limit 1 --json | python3 -c "import json,sys; print(json.load(sys.stdin)[0]['id'])")"
expect_err 2 "invalid --after '-1': expected 0 or a task id" "$DUE" ls --after -1
expect_err 2 "invalid --after 'x'" "$DUE" ls --after x
expect_eq "health UP" UP "$("$DUE" health)"

# kill makes a dead letter: health DOWN (exit 1), dead lists it, retry clears
victim=$("$DUE" add demo --in 1h)
expect_eq "kill" DEAD "$("$DUE" kill "$victim")"
rc=0; "$DUE" health >"$T/h" || rc=$?
expect_eq "health DOWN exit" 1 "$rc"
grep -q "DOWN: 1 dead letter" "$T/h" && ok || bad "health DOWN text"
"$DUE" dead --json | has "\"id\": $victim" && ok || bad "dead lists it"
expect_eq "retry" SCHEDULED "$("$DUE" retry "$victim")"
expect_err 4 "not DEAD" "$DUE" retry "$victim"
expect_err 4 "not CLAIMED" "$DUE" requeue "$victim"
expect_eq "health UP again" UP "$("$DUE" health)"
expect_eq "cancel after kill+retry" CANCELLED "$("$DUE" cancel "$victim")"
expect_err 4 "it is CANCELLED" "$DUE" kill "$victim"
# kill dismisses a dead letter that must not run: CANCELLED, health UP again
dl=$("$DUE" add demo --in 1h); "$DUE" kill "$dl" >/dev/null
expect_eq "dead letter" DEAD "$("$DUE" show "$dl" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")"
expect_eq "dismiss dead letter" CANCELLED "$("$DUE" kill "$dl")"
expect_eq "health UP after dismissal" UP "$("$DUE" health)"

# prune: finished tasks go, DEAD and live ones stay
"$DUE" prune --older-than 0s | has "deleted [1-9]" && ok || bad "prune"
expect_eq "live task survives prune" SCHEDULED \
	"$("$DUE" show "$k1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['state'])")"

# schema 2 -> 3 (SQLite rebuilds due_task and due_attempt): a store left by
# due 0.1.0 at schema 2 (fixtures/sqlite-schema2.sql: one task of each
# state, attempts, a schedule, ids up to 12 handed out, 8-12 pruned)
FX="$(dirname "$0")/fixtures/sqlite-schema2.sql"
V2="sqlite:$T/v2.db"
sqlite3 "$T/v2.db" <"$FX"
expect_err 6 "older than $SV" "$DUE" ls --db "$V2"
expect_eq "refused store untouched" 2 \
	"$(sqlite3 "$T/v2.db" "SELECT value FROM due_meta WHERE name = 'schema_version'")"
# an upgrade that fails half-way leaves version 2 whole
sqlite3 "$T/v2.db" "CREATE TABLE due_attempt_v3 (x)"
expect_err 5 "due_attempt_v3" "$DUE" init --db "$V2"
expect_eq "failed upgrade: still 2" "2|4" "$(sqlite3 "$T/v2.db" \
	"SELECT (SELECT value FROM due_meta WHERE name = 'schema_version'), count(*) FROM due_task")"
sqlite3 "$T/v2.db" "DROP TABLE due_attempt_v3"
"$DUE" init --db "$V2" | has "schema $SV" && ok || bad "init upgrades to $SV"
expect_eq "schema $SV, integrity" "$SV|ok" "$(sqlite3 "$T/v2.db" \
	"SELECT (SELECT value FROM due_meta WHERE name = 'schema_version'), (SELECT integrity_check FROM pragma_integrity_check)")"
expect_eq "CHECKs without IN lists" 0 "$(sqlite3 "$T/v2.db" "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name IN ('due_task', 'due_attempt') AND (sql LIKE '%state IN%' OR sql LIKE '%outcome IN%')")"
expect_eq "every task kept" "4 SCHEDULED|5 DEAD|6 CANCELLED|7 CLAIMED" "$("$DUE" ls --db "$V2" --json | python3 -c "import json,sys; print('|'.join('%d %s' % (t['id'], t['state']) for t in json.load(sys.stdin)))")"
expect_eq "attempts kept" "RUNNING run" "$("$DUE" show 7 --db "$V2" --json | python3 -c "import json,sys; t=json.load(sys.stdin); print(t['attempts'][0]['outcome'], t['payload'])")"
expect_eq "key still live" 4 "$("$DUE" add later --key k1 --db "$V2" 2>/dev/null)"
fresh=$("$DUE" add fresh --db "$V2")
[ "$fresh" -gt 12 ] && ok || bad "id $fresh handed out again (pruned ids went to 12)"
"$DUE" cron ls --db "$V2" | has nightly && ok || bad "schedule kept"
expect_eq "bad state still refused" 1 "$(sqlite3 "$T/v2.db" "UPDATE due_task SET state = 'LOST' WHERE id = 4" 2>&1 | grep -c "CHECK constraint failed")"

finish
