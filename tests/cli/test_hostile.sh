#!/usr/bin/env bash
# test_hostile.sh - the command line against odd files and hostile stored
# text (issue 22, CLI points): input errors name the real problem and
# change nothing; text output escapes control characters so a stored value
# cannot fake a row or drive the terminal.  Text fields must be UTF-8
# (issue 36, point 12): refused on every store this run has, and what a
# store already holds that is not is shown as <name>_b64, never dropped.
. "$(dirname "$0")/lib.sh"
"$DUE" init >/dev/null
count() { "$DUE" ls --json | python3 -c "import json,sys; print(len(json.load(sys.stdin)))"; }

# an oversized payload file: its real size, not the bytes read so far
head -c 13631488 /dev/zero >"$T/big"
expect_err 2 "is 13631488 bytes, over the limit of 1048576 bytes" \
	"$DUE" add k --payload-file "$T/big"
# a pipe over the limit: the size is unknown, say so
rc=0; head -c 3000000 /dev/zero | "$DUE" add k --payload-stdin 2>"$T/err" || rc=$?
expect_eq "stdin over the limit: exit" 2 "$rc"
grep -q "more than 1048576 bytes, over the limit" "$T/err" && ok || bad "stdin size: $(cat "$T/err")"
# a directory is no batch file
expect_err 2 "is a directory" "$DUE" add --batch "$T"
expect_err 2 "is a directory" "$DUE" add k --payload-file "$T"
expect_eq "nothing was added" 0 "$(count)"

# control characters in stored text are escaped in text output
id=$("$DUE" add hostile --key $'k\e[31mred\rX' --max-attempts 1)
"$DUE" work --once -q --owner $'own\e]0;title\a' \
	--exec 'printf "boom\n2   DONE   k2 fake row\n\033[2J" >&2; exit 1'
"$DUE" ls >"$T/ls.txt"
expect_eq "ls: header and one row" 2 "$(wc -l <"$T/ls.txt")"
grep -qF 'boom\n2   DONE   k2 fake row' "$T/ls.txt" && ok || bad "newline not escaped: $(cat "$T/ls.txt")"
grep -qF 'k\x1b[31mred\rX' "$T/ls.txt" && ok || bad "ESC/CR in key not escaped: $(cat "$T/ls.txt")"
"$DUE" dead >"$T/dead.txt"
expect_eq "dead: header and one row" 2 "$(wc -l <"$T/dead.txt")"
"$DUE" show "$id" >"$T/show.txt"
grep -qF 'own\x1b]0;title\x07' "$T/show.txt" && ok || bad "owner not escaped: $(cat "$T/show.txt")"
if LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/ls.txt" "$T/dead.txt" "$T/show.txt"; then
	bad "raw control characters in text output"
else
	ok
fi
# JSON keeps the exact bytes
"$DUE" show "$id" --json | python3 -c "
import json,sys; d=json.load(sys.stdin)
sys.exit(0 if d['key'] == 'k\x1b[31mred\rX' and d['last_error'].startswith('exit 1: boom\n2   DONE') else 1)" \
	&& ok || bad "JSON changed the stored text"

# Text a caller sets must be UTF-8, one rule in the library for every text
# field (issue 36, point 12): a key, a group and a worker's owner that are
# not are refused, naming the field and the byte, exit 2, nothing written,
# on every store (PostgreSQL refused them too, but as a store error, exit
# 5; SQLite, Redis and MariaDB took them).
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT
utf8_on() {
	local label=$1 url=$2
	"$DUE" init --db "$url" >/dev/null || { bad "$label: init"; return; }
	expect_err 2 "invalid key: not UTF-8 at byte 2" "$DUE" add k --db "$url" --key $'k\xff'
	expect_err 2 "invalid key: not UTF-8 at byte 3" "$DUE" add k --db "$url" --key $'ok\xc3('
	expect_err 2 "invalid group: not UTF-8 at byte 1" "$DUE" add k --db "$url" --group $'\xe2\x82'
	expect_err 2 "invalid owner: not UTF-8 at byte 2" \
		"$DUE" work --once -q --db "$url" --owner $'o\xff' --exec true
	expect_eq "$label: nothing written" "[]" "$("$DUE" ls --db "$url" --json | tr -d ' \n')"
	# UTF-8 beyond ASCII is text like any other
	local id
	id=$("$DUE" add k --db "$url" --key 'clé-€-😀' --group 'équipe')
	"$DUE" show "$id" --db "$url" --json | python3 -c "
import json,sys; d=json.load(sys.stdin)
sys.exit(0 if d['key'] == 'clé-€-😀' and d['group'] == 'équipe' else 1)" \
		&& ok || bad "$label: UTF-8 key or group changed"
}
on_each_store utf8_on hostile

# What a store already holds that is not UTF-8 (written before the rule,
# or by SQL of the operator's own) is shown as <name>_b64, as a payload
# is, never dropped: SQLite (columns rewritten in the file), Redis (a
# field of the task's hash) and MariaDB (its key is VARBINARY).
# PostgreSQL's text is UTF-8 by the database's encoding.
sid=$("$DUE" add legacy --key kk --group gg)
python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute(\"UPDATE due_task SET key = CAST(? AS TEXT), grp = CAST(? AS TEXT), last_error = CAST(? AS TEXT) WHERE id = ?\",
          (b'k\\xff', b'g\\xfe', b'e\\xc3', int(sys.argv[2])))
c.execute(\"UPDATE due_attempt SET worker = CAST(? AS TEXT) WHERE task_id = ?\", (b'w\\xff', int(sys.argv[3])))
c.commit()" "$T/due.db" "$sid" "$id"
check_b64() { # WHAT JSON-FILE: key_b64, group_b64, last_error_b64 of task $sid
	python3 - "$2" "$sid" "$id" <<'PY' && ok || bad "$1: not-UTF-8 text not shown as _b64: $(cat "$2")"
import base64, json, sys
d = json.load(open(sys.argv[1]))
tasks = d if isinstance(d, list) else [d]
t = [x for x in tasks if x["id"] == int(sys.argv[2])]
w = [x for x in tasks if x["id"] == int(sys.argv[3])]
t = t[0]
ok = ("key" not in t and base64.b64decode(t["key_b64"]) == b"k\xff"
      and "group" not in t and base64.b64decode(t["group_b64"]) == b"g\xfe"
      and "last_error" not in t and base64.b64decode(t["last_error_b64"]) == b"e\xc3")
if w:  # the hostile task's attempt: its worker
    a = w[0]["attempts"][0]
    ok = ok and "worker" not in a and base64.b64decode(a["worker_b64"]) == b"w\xff"
sys.exit(0 if ok else 1)
PY
}
"$DUE" show "$sid" --json >"$T/legacy.json"
check_b64 "show --json" "$T/legacy.json"
"$DUE" ls --json >"$T/legacy-ls.json"
check_b64 "ls --json" "$T/legacy-ls.json"
"$DUE" ls | grep -qF 'k\xff' && ok || bad "ls: not-UTF-8 key not escaped: $("$DUE" ls)"
# a kind row whose name is not UTF-8: kind_b64 in every JSON that lists
# kinds, escaped in text (the raw byte never reaches the terminal)
python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute(\"INSERT INTO due_kind (kind, paused, updated_at) VALUES (CAST(? AS TEXT), 1, 1)\", (b'q\\xff',))
c.commit()" "$T/due.db"
"$DUE" kind ls --json | python3 -c "
import base64, json, sys
ks = json.load(sys.stdin)
sys.exit(0 if any('kind' not in k and base64.b64decode(k['kind_b64']) == b'q\xff' for k in ks) else 1)" \
	&& ok || bad "kind ls --json: not-UTF-8 kind not shown as kind_b64: $("$DUE" kind ls --json)"
"$DUE" kind ls >"$T/kinds.txt"
grep -qF 'q\xff' "$T/kinds.txt" && ! grep -q $'\xff' "$T/kinds.txt" && ok \
	|| bad "kind ls: not-UTF-8 kind not escaped: $(cat -v "$T/kinds.txt")"
# /metrics must stay UTF-8 (one bad label fails the whole scrape): the bad
# byte of a kind label is U+FFFD
. "$(dirname "$0")/http_lib.sh"
PIDS=()
start_server metrics --listen 127.0.0.1:0
curl -s --max-time 10 "$URL/metrics" >"$T/metrics.txt"
python3 -c "
import sys
t = open(sys.argv[1], 'rb').read().decode('utf-8')
sys.exit(0 if 'kind=\"q\ufffd\"' in t else 1)" "$T/metrics.txt" && ok \
	|| bad "/metrics: a kind that is not UTF-8 is not U+FFFD in its label (or the page is not UTF-8)"
kill "$SPID"
wait "$SPID" 2>/dev/null || true
if need DUE_TEST_REDIS_URL redis; then
	sep='?'; case "$DUE_TEST_REDIS_URL" in *\?*) sep='&';; esac
	rurl="$DUE_TEST_REDIS_URL${sep}prefix=legacy$$"
	CLEANUP+=("redis-cli -u '$DUE_TEST_REDIS_URL' --scan --pattern '{due:legacy$$}*' | xargs -r redis-cli -u '$DUE_TEST_REDIS_URL' del")
	"$DUE" init --db "$rurl" >/dev/null
	rid=$("$DUE" add legacy --db "$rurl" --key kk)
	printf 'k\xff' | redis-cli -u "$DUE_TEST_REDIS_URL" -x hset "{due:legacy$$}:t:$rid" y >/dev/null
	"$DUE" show "$rid" --db "$rurl" --json | python3 -c "
import base64, json, sys; d = json.load(sys.stdin)
sys.exit(0 if 'key' not in d and base64.b64decode(d['key_b64']) == b'k\xff' else 1)" \
		&& ok || bad "redis: not-UTF-8 key not shown as key_b64"
fi
if need DUE_TEST_MYSQL_URL mariadb; then
	mysql_url_parts "$DUE_TEST_MYSQL_URL"
	my() { MYSQL_PWD="$mypass" mariadb --no-defaults -h "$myhost" -P "$myport" ${mysock:+-S "$mysock"} -u "$myuser" "$@"; }
	my -e "CREATE DATABASE due_legacy_$$ CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	CLEANUP+=("MYSQL_PWD='$mypass' mariadb --no-defaults -h '$myhost' -P '$myport' ${mysock:+-S '$mysock'} -u '$myuser' -e 'DROP DATABASE IF EXISTS due_legacy_$$'")
	murl="mysql://$myauth@$myhostport/due_legacy_$$$myquery"
	"$DUE" init --db "$murl" >/dev/null
	mid=$("$DUE" add legacy --db "$murl" --key kk)
	my "due_legacy_$$" -e "UPDATE due_task SET \`key\` = X'6BFF' WHERE id = $mid"
	"$DUE" show "$mid" --db "$murl" --json | python3 -c "
import base64, json, sys; d = json.load(sys.stdin)
sys.exit(0 if 'key' not in d and base64.b64decode(d['key_b64']) == b'k\xff' else 1)" \
		&& ok || bad "mariadb: not-UTF-8 key not shown as key_b64"
fi
finish
