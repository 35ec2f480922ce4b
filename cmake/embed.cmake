# embed.cmake - turn text files into a C array at build time, so the
# binary carries them with no file next to it and no network asset: the
# dashboard page (src/http/dashboard.html) and the Redis store's Lua
# (src/store/lua/*.lua).  The files are joined in the order given, byte
# for byte, and a NUL ends the array.
#   cmake -DIN="a;b" -DOUT=x.c -DNAME=sym [-DINCLUDE=h.h] -P embed.cmake
#     x.c defines const char sym[] and const size_t sym_len (the bytes
#     before the NUL), after #include "h.h" when given (its declarations)
#   cmake -DIN="a;b" -DOUT=x.inc -P embed.cmake
#     x.inc is only the array's initialiser (0x..,...,0x00), for a C file
#     to #include between the braces of its own definition
set(hex "")
set(names "")
foreach(f IN LISTS IN)
  file(READ "${f}" h HEX)
  string(APPEND hex "${h}")
  file(RELATIVE_PATH rel "${CMAKE_CURRENT_LIST_DIR}/.." "${f}")
  string(APPEND names " ${rel}")
endforeach()
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
set(head "/* Generated from${names} by cmake/embed.cmake. */\n")
if(NOT DEFINED NAME)
  file(WRITE "${OUT}" "${head}${bytes}0x00\n")
  return()
endif()
string(APPEND head "#include <stddef.h>\n")
if(DEFINED INCLUDE)
  string(APPEND head "#include \"${INCLUDE}\"\n")
endif()
file(WRITE "${OUT}" "${head}"
"const char ${NAME}[] = {\n${bytes}0x00};\n"
"const size_t ${NAME}_len = ${len};\n")
