/*
** redis_lua.c - the Lua of the Redis store: every transition of store.h as
** one operation of one script (docs/internals/redis.md).  redis.c loads it
** once per connection (FUNCTION LOAD, or SCRIPT LOAD where functions are
** refused; again when the server lost it) and runs an operation with
** FCALL due_<hash> 1 <prefix>:meta <op> <args...> (or EVALSHA); the column
** lists (TC, SC, KC) and the histogram bounds (HB) are prepended by
** redis.c from row.h and core, so the script and the decoders agree.
**
** Every operation reads the clock with TIME inside the script, never a
** time from the client, and checks its predicate (state, attempt, lease)
** in the same script that writes: a script runs atomically on the server.
**
** The script's text is the Lua files of src/store/lua/ (base.lua, the
** first, says how they make one chunk): the build joins them, in the
** order of DUE_REDIS_LUA (CMakeLists.txt), into the bytes of
** generated/store/redis_lua.inc in the build directory (cmake/embed.cmake),
** and this file makes them a NUL-ended array.  tests/lua/luac.sh checks
** that each file and the whole parse as Redis's Lua 5.1.
*/

extern const char due__redis_lua[];

const char due__redis_lua[] = {
#include "store/redis_lua.inc"
};
