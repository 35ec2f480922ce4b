/*
** log.c - `due serve`'s log on stderr, aggregated by kind.
**
** Whatever a client does, and however long the store is away, the log
** stays readable: the first event of a kind is printed at once, the next
** ones within 10 s are only counted, and when the 10 s are over one line
** says how many there were and shows the last.  A flood of a thousand bad
** requests is two lines per 10 s, not a thousand.
**
** Kinds are short keys chosen by the caller: an error code for our 5xx
** replies ("store_busy"), the status for refused requests, the format of
** a libmicrohttpd message.  At most MAX_KINDS are tracked; beyond that
** everything shares the last slot.
**
** libmicrohttpd's messages: those about clients that went away (resets,
** broken pipes, half-sent requests, our own deadline closing them) are
** not logged at all, as docs/HTTP.md promises; those that explain why a
** request is refused are kept (per thread) for mhd_errors.c, which logs
** the refusal once, with its status; the rest are logged by kind.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http/internal.h"

#define WINDOW_US 10000000
#define MAX_KINDS 64

typedef struct kind {
	char key[64];
	bool open;	  /* a window runs: events are counted, not printed */
	int64_t since_us; /* start of the window */
	unsigned more;	  /* events counted in it */
	char last[400];	  /* the last of them */
} kind;

/* Guards kinds[] and serialises the lines on stderr.  Any thread. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static kind kinds[MAX_KINDS];
static int n_kinds;

/* The reason libmicrohttpd gave for the refusal it is about to send. */
static _Thread_local char mhd_reason[200];

int64_t http_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static kind *find(const char *key)
{
	for (int i = 0; i < n_kinds; i++)
		if (!strcmp(kinds[i].key, key))
			return &kinds[i];
	if (n_kinds == MAX_KINDS)
		return &kinds[MAX_KINDS - 1];
	snprintf(kinds[n_kinds].key, sizeof(kinds[0].key), "%s", key);
	return &kinds[n_kinds++];
}

/* End k's window if it is over: print its count (mu held). */
static void flush_one(kind *k, int64_t now_us, bool all)
{
	if (!k->open || (!all && now_us - k->since_us < WINDOW_US))
		return;
	if (k->more) {
		fprintf(stderr,
			"due serve: %u more like this in the last %d s, "
			"the last: %s\n",
			k->more, WINDOW_US / 1000000, k->last);
		k->more = 0;
		k->since_us = now_us; /* a flood goes on: one line per window */
		if (!all)
			return;
	}
	k->open = false;
}

void http_log(const char *key, const char *fmt, ...)
{
	int64_t now = http_now_us();
	char msg[400];
	va_list ap;
	kind *k;
	size_t n;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	pthread_mutex_lock(&mu);
	k = find(key);
	flush_one(k, now, false);
	if (k->open) {
		k->more++;
		snprintf(k->last, sizeof(k->last), "%s", msg);
	} else {
		fprintf(stderr, "due serve: %s\n", msg);
		k->open = true;
		k->since_us = now;
	}
	pthread_mutex_unlock(&mu);
}

void http_log_flush(int64_t now_us, bool all)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n_kinds; i++)
		flush_one(&kinds[i], now_us, all);
	pthread_mutex_unlock(&mu);
}

/* Messages about a client that went away: never logged. */
static const char *const gone[] = {
    "Failed to send",		"closed by remote",
    "has been disconnected",	"socket is closed when reading",
    "forcibly closed",		"not connected",
    "no longer available",	"failed to queue error response",
    "Error processing request", NULL};

/* Messages that say why a request is refused: kept for mhd_errors.c. */
static const char *const reasons[] = {"without `Host'", "Content-Length",
				      "Not enough memory in pool", NULL};

static bool has_any(const char *msg, const char *const *list)
{
	for (int i = 0; list[i]; i++)
		if (strstr(msg, list[i]))
			return true;
	return false;
}

void http_log_mhd(void *cls, const char *fmt, va_list ap)
{
	char msg[400], key[64];

	(void)cls;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (has_any(msg, gone))
		return;
	if (has_any(msg, reasons)) {
		snprintf(mhd_reason, sizeof(mhd_reason), "%.*s",
			 (int)strcspn(msg, "\n"), msg);
		return;
	}
	snprintf(key, sizeof(key), "mhd %.40s", fmt);
	http_log(key, "%s", msg);
}

const char *http_log_mhd_reason(void) { return mhd_reason; }

void http_log_mhd_forget_reason(void) { mhd_reason[0] = '\0'; }
