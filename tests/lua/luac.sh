#!/usr/bin/env bash
# luac.sh - the tree's Lua parses as the Lua that runs it: Lua 5.1, which
# Redis embeds (the Redis store's script, src/store/lua/) and whose
# dialect wrk's LuaJIT speaks (bench/http/wrk.lua).  Parse only (luac -p):
# a few tenths of a second.
#   bash tests/lua/luac.sh PART.lua...
# The arguments are the Redis script's parts in the order the build joins
# them (DUE_REDIS_LUA in CMakeLists.txt; tests/CMakeLists.txt passes it).
#
# luac5.1 and not luac5.4: 5.4 accepts what Redis's 5.1 refuses (goto and
# labels, // and the bitwise operators, <const> and <close>, the \x, \z
# and \u{} escapes) and allows 255 upvalues a function where 5.1 allows
# 60, so a script that luac5.4 passes can still fail to load in Redis.
# What neither checks is the run time: unpack is table.unpack in 5.4, and
# the bit, struct and cjson libraries are Redis's own; the store's tests
# (unit/test_store, unit/test_redis_store) run the script on a server.
# Under CI=true a missing luac5.1 (Debian: lua5.1, in scripts/deps) fails
# the test; elsewhere it is a note.
. "$(dirname "$0")/../cli/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LUAC=${DUE_LUAC:-luac5.1}

command -v "$LUAC" >/dev/null || cannot_test "the Lua check" "$LUAC is missing (apt-get install lua5.1)"
[ $# -gt 0 ] && ok || bad "no parts of the Redis script given (see tests/CMakeLists.txt)"

# The compiler refuses a syntax error and what Lua 5.1 lacks, so its
# passes below mean something.
for bad_lua in 'x = = 1' 'goto done' 'x = 7 // 2' 'x = 1 & 2' 'local x <const> = 1'; do
	if printf '%s\n' "$bad_lua" | "$LUAC" -p - 2>/dev/null; then
		bad "$LUAC accepts '$bad_lua': not Lua 5.1's parser"
	else ok; fi
done
{
	for i in $(seq 61); do echo "local u$i = $i"; done
	printf 'local function f() return u1'
	for i in $(seq 2 61); do printf ' + u%s' "$i"; done
	echo ' end'
} >"$T/upvalues.lua"
"$LUAC" -p "$T/upvalues.lua" 2>/dev/null && bad "$LUAC accepts a function of 61 upvalues" || ok

# Every Lua file of the tree parses alone.
mapfile -t all < <(cd "$ROOT" && find src tests bench examples -name '*.lua' | LC_ALL=C sort)
[ ${#all[@]} -ge $# ] && ok || bad "found ${#all[@]} .lua files, fewer than the $# parts"
for f in "${all[@]}"; do
	"$LUAC" -p "$ROOT/$f" 2>"$T/err" && ok || bad "$f: $(cat "$T/err")"
done

# Every file of src/store/lua/ is a part of the script: none is left out
# of the build.
parts=$(for p in "$@"; do echo "src/store/lua/$(basename "$p")"; done | LC_ALL=C sort)
files=$(printf '%s\n' "${all[@]}" | grep '^src/store/lua/' || true)
expect_eq "src/store/lua/ files that are parts of the Redis script" "$files" "$parts"

# The whole script parses: the prelude redis.c writes (build_script: six
# locals) stood in for, then the parts in order.  One chunk, so Lua 5.1's
# limits of one function (200 locals, 60 upvalues) are checked on the
# whole, across the files.
{
	echo 'local TC = {} local F = {} local SC = {} local KC = {}'
	echo 'local CL = false'
	echo 'local HB = {}'
	cat "$@"
} >"$T/script.lua"
"$LUAC" -p "$T/script.lua" 2>"$T/err" && ok || bad "the joined script: $(cat "$T/err")"

# No Lua is left in the C files of the store (it was in string literals
# that clang-format split mid-line).
lua_in_c=$(cd "$ROOT" && grep -l -E 'redis\.p?call\(' src/store/*.c src/store/*.h || true)
expect_eq "C files of src/store/ with Lua in them" "" "$lua_in_c"
finish
