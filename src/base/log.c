/*
** log.c - one line on stderr for what the library says on its own.
**
** A store that changes how it works (a wake-up channel lost or back, a slow
** call) says so with due__log(): host time, pid, level, who, the handle's
** label, the message.  It lives apart from error.c because it reads the
** clock (time.c) and time.c sets errors (error.c): one file would make a
** circle of the two.
*/
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "base/base.h"

void due__log(const char *level, const char *who, const char *label,
	      const char *fmt, ...)
{
	char ts[40], msg[1024];
	va_list ap;

	due_time_format(ts, sizeof(ts), due_time_now_host());
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s due[%d] %s: %s%s%s: %s\n", ts, (int)getpid(), level,
		who, label ? ": " : "", label ? label : "", msg);
}
