# embed.cmake - turn the dashboard page into a C array at build time, so
# the `due` binary serves it with no file next to it and no network asset.
#   cmake -DIN=dashboard.html -DOUT=dashboard_html.c -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}"
"/* Generated from src/http/dashboard.html by src/http/embed.cmake. */\n"
"#include <stddef.h>\n#include \"http/http.h\"\n"
"const char due_http_dashboard[] = {\n${bytes}0x00};\n"
"const size_t due_http_dashboard_len = ${len};\n")
