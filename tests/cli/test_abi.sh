#!/usr/bin/env bash
# test_abi.sh - libdue.so exports exactly the functions (and the one table)
# that include/due.h declares with DUE_EXTERN: nothing internal leaks into
# the ABI, and nothing public is missing; and the due binary defines no
# due_* function that due.h does not declare.  Internal functions are named
# due__* (libuv's uv__ convention).
. "$(dirname "$0")/lib.sh"
build=$(dirname "$DUE")
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=$(ls "$build"/libdue.so.* 2>/dev/null | head -1)
[ -n "$lib" ] && ok || bad "no libdue.so in $build"
# (__odr_asan.* are AddressSanitizer's ODR markers in the ASan build, not ABI)
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -v '^__odr_asan\.' |
	sort -u >"$T/exported"
grep -E '^(extern )?DUE_EXTERN ' "$root/include/due.h" |
	grep -oE '\bdue_[a-z0-9_]+\b *(\(|\[)' | sed 's/ *[([]$//' | sort -u >"$T/declared"
expect_eq "exported = declared (diff: $(diff "$T/declared" "$T/exported" | grep '^[<>]' | tr '\n' ' '))" \
	"$(cat "$T/declared")" "$(cat "$T/exported")"
[ "$(wc -l <"$T/declared")" -gt 60 ] && ok || bad "too few public functions found: $(wc -l <"$T/declared")"
# no internal (due__) or unprefixed function is exported
if grep -vE '^due_[a-z]' "$T/exported" | has .; then
	bad "exported without the public prefix: $(grep -vE '^due_[a-z]' "$T/exported" | tr '\n' ' ')"
else
	ok
fi
# The public prefix is due.h's alone, in the due binary too: the CLI, the
# HTTP service and fmt link libdue statically, and their own shared
# functions are due__* (or cli_*, http_*), so no function there may look
# public without being declared.
nm --defined-only "$DUE" | awk '$2 ~ /^[TDBR]$/ {print $3}' | grep -E '^due_[a-z]' |
	sort -u >"$T/binary"
extra=$(comm -13 "$T/declared" "$T/binary" | tr '\n' ' ')
[ -z "$extra" ] && ok || bad "the due binary defines with the public prefix, not in due.h: $extra"
[ "$(wc -l <"$T/binary")" -gt 60 ] && ok || bad "too few public functions in the due binary: $(wc -l <"$T/binary")"
finish
