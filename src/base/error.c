/*
** error.c - the per-thread "last error" of the library.
**
** Every public function returns an int code; the human message that goes
** with a failure is kept in thread-local storage so that handles can be used
** from many threads (one handle per thread) without sharing error state.
** Messages are truncated to fit the buffer; they are never NULL.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static _Thread_local char err_msg[1024];
static _Thread_local int err_code;
static _Thread_local char warn_msg[512];

int due__error_set(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err_msg, sizeof(err_msg), fmt, ap);
	va_end(ap);
	err_code = code;
	return code;
}

void due__error_clear(void)
{
	err_msg[0] = '\0';
	err_code = 0;
}

const char *due_error_last(void) { return err_msg[0] ? err_msg : "no error"; }

int due_error_last_code(void) { return err_code; }

const char *due_error_name(int code)
{
	switch (code) {
	case DUE_OK: return "DUE_OK";
	case DUE_ERROR: return "DUE_ERROR";
	case DUE_EINVAL: return "DUE_EINVAL";
	case DUE_ENOTFOUND: return "DUE_ENOTFOUND";
	case DUE_ESTATE: return "DUE_ESTATE";
	case DUE_EBUSY: return "DUE_EBUSY";
	case DUE_ESCHEMA: return "DUE_ESCHEMA";
	case DUE_ETOOBIG: return "DUE_ETOOBIG";
	case DUE_ESTORE: return "DUE_ESTORE";
	case DUE_ENOMEM: return "DUE_ENOMEM";
	case DUE_ECONFLICT: return "DUE_ECONFLICT";
	case DUE_EUNSUPPORTED: return "DUE_EUNSUPPORTED";
	case DUE_ETIMEDOUT: return "DUE_ETIMEDOUT";
	default: return "DUE_UNKNOWN";
	}
}

void due__open_warning_set(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(warn_msg, sizeof(warn_msg), fmt, ap);
	va_end(ap);
}

char *due__open_warning_take(void)
{
	char *w = warn_msg[0] ? strdup(warn_msg) : NULL;
	warn_msg[0] = '\0';
	return w;
}
