/**
 * tz.h - IANA time zones for the cron engine.
 *
 * A due_tz is one IANA zone ("Europe/Berlin") read from the system's compiled
 * time-zone database (TZif files, RFC 8536, under $TZDIR or
 * /usr/share/zoneinfo). It converts between UTC instants and local wall-clock
 * times without touching the process-wide TZ variable, tzset() or localtime():
 * it is safe in threaded programs.
 *
 * Threads: a due_tz is immutable once due__tz_open() returns. Any number of
 * threads may use the same object at the same time; only due__tz_free() needs
 * the caller to know that no other thread still uses it.
 *
 * A NULL `const due_tz *` is accepted everywhere a zone is read and means UTC.
 *
 * Errors: functions return 0 or one of the negative DUE_TZ_E* codes. Those that
 * take `char *err, size_t errlen` also write a one-line message there (always
 * NUL-terminated when errlen > 0; err may be NULL).
 *
 * Global state: none that changes a result; two counters for tests (the zone
 * files read, and an allocation failure to inject), at the end of this file.
 */
#ifndef DUE_CRON_TZ_H
#define DUE_CRON_TZ_H

#include <stddef.h>
#include <stdint.h>

/**
 * Error codes, the same numbers as the cron engine's (cron.h). EINVAL and
 * ENOMEM have the values of due.h's DUE_EINVAL and DUE_ENOMEM, as the wheel's
 * shared codes do (wheel.h), so a caller may pass them through; EZONE and
 * ERANGE are the engine's own, outside due.h's range and the wheel's.
 */
enum {
	DUE_TZ_EINVAL =
	    -2, /**< bad argument (NULL pointer, civil time out of range) */
	DUE_TZ_ENOMEM = -9, /**< allocation failed */
	DUE_TZ_EZONE = -66, /**< unknown zone name or unusable zone data */
	DUE_TZ_ERANGE =
	    -67 /**< instant outside DUE_TZ_MIN_UTC..DUE_TZ_MAX_UTC */
};

/**
 * Supported instants, in seconds since 1970-01-01T00:00:00Z: from
 * 0001-01-03T00:00:00Z to 9999-12-29T23:59:59Z, so that every local time
 * stays within the years 1..9999 of the proleptic Gregorian calendar.
 */
#define DUE_TZ_MIN_UTC (-INT64_C(62135424000))
#define DUE_TZ_MAX_UTC (INT64_C(253402127999))

/** A zone. Opaque; see due__tz_open(). */
typedef struct due_tz due_tz;

/**
 * A wall-clock time: proleptic Gregorian, month 1-12, day 1-31, hour 0-23,
 * minute 0-59, second 0-59. No zone and no offset: it means nothing until it is
 * read in a zone.
 */
typedef struct due_tz_civil {
	int year;
	int month;
	int day;
	int hour;
	int minute;
	int second;
} due_tz_civil;

/**
 * Open the zone named `zone` (an IANA name such as "America/New_York", or
 * "UTC"). On success *out is a new zone the caller frees with due__tz_free().
 * Names are checked before any file is opened: components of letters, digits,
 * '_', '-' and '+', separated by '/'; "localtime" and "posixrules" (machine
 * configuration, not zones) and leap-second ("right/...") zones are refused.
 * Returns 0, DUE_TZ_EZONE ("unknown time zone 'Europe/Berln'"), DUE_TZ_EINVAL
 * or DUE_TZ_ENOMEM; on error *out is NULL.
 */
int due__tz_open(due_tz **out, const char *zone, char *err, size_t errlen);

/**
 * Build a zone from TZif bytes already in memory (`name` is only recorded and
 * shown in messages). Same result and errors as due__tz_open(); `data` is not
 * kept. Meant for tests and for programs that ship their own zone data.
 */
int due__tz_from_tzif(due_tz **out, const char *name, const void *data,
		      size_t len, char *err, size_t errlen);

/** Free a zone. NULL is allowed. */
void due__tz_free(due_tz *tz);

/** The name the zone was opened with; "UTC" for NULL. Borrowed from tz. */
const char *due__tz_name(const due_tz *tz);

/**
 * Store in *out_offset_sec the zone's offset from UTC (east positive, DST
 * included) at the instant utc_sec. Returns 0, DUE_TZ_EINVAL or DUE_TZ_ERANGE.
 */
int due__tz_offset(const due_tz *tz, int64_t utc_sec, int32_t *out_offset_sec);

/**
 * Convert the instant utc_sec to the wall-clock time shown in the zone.
 * Returns 0, DUE_TZ_EINVAL or DUE_TZ_ERANGE.
 */
int due__tz_to_local(const due_tz *tz, int64_t utc_sec, due_tz_civil *out);

/**
 * Convert a wall-clock time in the zone to an instant. Every wall time maps to
 * exactly one instant:
 *  - a time that occurs once maps to that instant;
 *  - a time that occurs twice (clocks set back) maps to its FIRST occurrence;
 *  - a time that does not occur (clocks set forward over it) maps to the first
 *    valid instant after the gap, i.e. the instant of the transition itself
 *    (02:30 on a New York spring-forward day -> 03:00 EDT).
 * The mapping never decreases as the wall time increases. Returns 0,
 * DUE_TZ_EINVAL (a field out of range, e.g. February 30) or DUE_TZ_ERANGE.
 */
int due__tz_to_utc(const due_tz *tz, const due_tz_civil *local,
		   int64_t *out_utc_sec);

/* Proleptic Gregorian calendar arithmetic; no zone involved. */

/** Days from 1970-01-01 to y-m-d (negative before). Any y; m 1-12, d 1-31. */
int64_t due__tz_days_from_civil(int64_t y, int m, int d);

/** The number of days in month m (1-12) of year y. */
int due__tz_days_in_month(int64_t y, int m);

/** The weekday of y-m-d: 0 = Sunday ... 6 = Saturday. */
int due__tz_weekday(int64_t y, int m, int d);

/* The engine's allocations, and what tests observe of it. */

/**
 * malloc(n), or NULL when due__tz_fail_alloc() says this allocation fails.
 * Every allocation of the cron engine (cron.c, tz.c) and of the zone cache
 * of the scheduler pass (src/core/cron_sched.c) goes through it; free with
 * free().
 */
void *due__tz_malloc(size_t n);

/**
 * For tests (curl's "torture" mode): make the nth call of due__tz_malloc()
 * from now on fail, 1 being the next; 0 turns failures off. Only that one
 * call fails. Process-wide: set it while no other thread allocates.
 */
void due__tz_fail_alloc(long nth);

/**
 * For tests: how many zone files due__tz_open() has read since the process
 * started (built-in UTC reads none). Any thread may call it.
 */
unsigned long due__tz_files_read(void);

#endif /* DUE_CRON_TZ_H */
