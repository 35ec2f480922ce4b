/**
 * cron.h - cron expressions and their fire times in an IANA time zone.
 *
 * Syntax (docs/internals/cron.md has the whole story):
 *
 *     [second] minute hour day-of-month month day-of-week
 *
 * Five fields, or six with a leading seconds field. Each field is a list
 * "a,b,..." of items; an item is "*", "N", "A-B", each optionally followed by
 * "/STEP", or "N/STEP" (N to the field's maximum). Months may be named
 * JAN..DEC and weekdays SUN..SAT (any case); day-of-week 7 is Sunday. Macros:
 * @yearly @annually @monthly @weekly @daily @midnight @hourly.
 *
 * Day-of-month and day-of-week combine as in Vixie cron: when both fields are
 * restricted (neither starts with '*') a day matches if EITHER matches;
 * otherwise both must match.
 *
 * Objects: a due_cron is immutable after due__cron_parse() and may be shared by
 * any number of threads. The engine takes no locks, keeps no global state that
 * changes a result (tz.h has two counters for tests) and does no I/O;
 * time-zone rules come from a due_tz (tz.h), itself immutable.
 *
 * Errors: 0 or a negative DUE_CRON_E* code (the same numbers as DUE_TZ_E*;
 * those due.h also has, EINVAL, ENOTFOUND and ENOMEM, carry due.h's numbers).
 * Functions taking `char *err, size_t errlen` write a one-line message there
 * naming the field and the offending text, e.g.
 * "day-of-month: 32 is out of range 1-31" (err may be NULL).
 */
#ifndef DUE_CRON_CRON_H
#define DUE_CRON_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "tz.h"

/**
 * Error codes. As in the wheel (wheel.h), a code due.h also has carries the
 * value of its DUE_E* counterpart without this pure header including due.h
 * (src/core/cron_sched.c checks they agree); the engine's own codes lie
 * outside due.h's range and the wheel's. They are the tz codes of tz.h.
 */
enum {
	DUE_CRON_EINVAL =
	    -2, /**< invalid expression or argument (DUE_EINVAL) */
	DUE_CRON_ENOTFOUND =
	    -3,		      /**< no fire time within DUE_CRON_SEARCH_YEARS */
	DUE_CRON_ENOMEM = -9, /**< allocation failed (DUE_ENOMEM) */
	DUE_CRON_EZONE = -66, /**< unknown time zone (from due__tz_open) */
	DUE_CRON_ERANGE =
	    -67 /**< time out of range, or output buffer too small */
};

/** How many years past `after` due__cron_next() looks before giving up. */
#define DUE_CRON_SEARCH_YEARS 8

/** Flag for the format functions: print milliseconds (".000"). */
#define DUE_CRON_FMT_MILLIS 1u

/** A parsed expression. Opaque. */
typedef struct due_cron due_cron;

/**
 * The sets an expression selects, as bitmasks: bit v set when value v is in
 * the set (second and minute 0-59, hour 0-23, dom 1-31, month 1-12,
 * dow 0-6 with 0 = Sunday).
 */
typedef struct due_cron_fields {
	uint64_t second;
	uint64_t minute;
	uint64_t hour;
	uint64_t dom;
	uint64_t month;
	uint64_t dow;
	int dom_star;	 /**< day-of-month field starts with '*' */
	int dow_star;	 /**< day-of-week field starts with '*' */
	int has_seconds; /**< six fields were given */
} due_cron_fields;

/**
 * Parse `expr`. On success *out is a new object the caller frees with
 * due__cron_free(). On failure returns DUE_CRON_EINVAL (or DUE_CRON_ENOMEM),
 * leaves *out NULL and writes a message naming the field and the offending
 * value into err.
 */
int due__cron_parse(due_cron **out, const char *expr, char *err, size_t errlen);

/** Free an expression. NULL is allowed. */
void due__cron_free(due_cron *c);

/** The text the expression was parsed from. Borrowed from c. */
const char *due__cron_text(const due_cron *c);

/** Copy the selected sets of c into *out. */
void due__cron_inspect(due_cron_fields *out, const due_cron *c);

/**
 * Store in *out_utc_sec the first fire instant strictly after after_utc_sec,
 * computed on the wall clock of `zone` (NULL means UTC). Five-field
 * expressions fire at second 0. Across DST: a wall time that does not occur
 * fires once, at the first valid instant after the gap; a wall time that
 * occurs twice fires once, at its first occurrence; two slots that land on one
 * instant fire once. Returns 0, DUE_CRON_ENOTFOUND when nothing fires within
 * DUE_CRON_SEARCH_YEARS years (e.g. "0 0 30 2 *"), DUE_CRON_ERANGE when
 * after_utc_sec is outside DUE_TZ_MIN_UTC..DUE_TZ_MAX_UTC, DUE_CRON_EINVAL for
 * NULL arguments.
 */
int due__cron_next(const due_cron *c, const due_tz *zone, int64_t after_utc_sec,
		   int64_t *out_utc_sec);

/**
 * Fill out[0..n-1] with the next n fire instants after after_utc_sec, each
 * strictly after the one before. *out_count receives how many were found.
 * Returns 0 when all n were found, else the error of the due__cron_next() call
 * that stopped the series (typically DUE_CRON_ENOTFOUND).
 */
int due__cron_next_n(int64_t *out, size_t n, size_t *out_count,
		     const due_cron *c, const due_tz *zone,
		     int64_t after_utc_sec);

/**
 * Write utc_sec as RFC 3339 UTC, "2026-03-29T01:00:00Z" (with
 * DUE_CRON_FMT_MILLIS: "2026-03-29T01:00:00.000Z"), NUL-terminated. Returns 0,
 * DUE_CRON_ERANGE when buf is too small (24 bytes always suffice) or the time
 * is out of range.
 */
int due__cron_format_time(char *buf, size_t buflen, int64_t utc_sec,
			  unsigned flags);

/**
 * Write the next `count` fire times after after_utc_sec into buf, one RFC 3339
 * UTC time per line, each line ending in '\n' (what `due cron next` prints).
 * Returns 0; DUE_CRON_ENOTFOUND when the series ends early (the lines found so
 * far are in buf and err says so); DUE_CRON_ERANGE when buf is too small (25
 * bytes per line plus one suffice); DUE_CRON_EINVAL for bad arguments. buf is
 * always NUL-terminated when buflen > 0.
 */
int due__cron_format_next(char *buf, size_t buflen, const due_cron *c,
			  const due_tz *zone, int64_t after_utc_sec,
			  size_t count, unsigned flags, char *err,
			  size_t errlen);

/** A static English description of a DUE_CRON_E* code. */
const char *due__cron_strerror(int code);

#endif /* DUE_CRON_CRON_H */
