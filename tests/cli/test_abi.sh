#!/usr/bin/env bash
# test_abi.sh - libdue.so exports exactly the functions (and the one table)
# that include/due.h declares with DUE_EXTERN: nothing internal leaks into
# the ABI, and nothing public is missing.  Internal functions are named
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
finish
