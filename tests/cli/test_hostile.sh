#!/usr/bin/env bash
# test_hostile.sh - the command line against odd files and hostile stored
# text (issue 22, CLI points): input errors name the real problem and
# change nothing; text output escapes control characters so a stored value
# cannot fake a row or drive the terminal.
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
finish
