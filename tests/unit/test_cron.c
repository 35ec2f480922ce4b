/*
** test_cron.c - unit tests of the cron engine (src/cron/cron.c, src/cron/tz.c).
**
** Expected instants are written by hand as RFC 3339 UTC strings and turned into
** seconds with the C library's timegm(), never by the code under test. The DST
** instants were derived from the zone rules and checked against `zdump -v`:
**
**   America/New_York     2026-03-08 07:00Z  01:59:59 EST -> 03:00 EDT
**                        2026-11-01 06:00Z  01:59:59 EDT -> 01:00 EST
**   Europe/Berlin        2026-03-29 01:00Z  01:59:59 CET -> 03:00 CEST
**                        2026-10-25 01:00Z  02:59:59 CEST -> 02:00 CET
**   Australia/Lord_Howe  2026-10-03 15:30Z  01:59:59 +1030 -> 02:30 +11
**                        2026-04-04 15:00Z  01:59:59 +11 -> 01:30 +1030
**
** The zone tests read the system's tzdata (/usr/share/zoneinfo).
**
** The last tests run cron schedules over a fresh SQLite store
** (src/core/cron_sched.c): its zone cache (a zone file is read once per
** schedule change, not per pass), and its error mapping (out of memory is
** DUE_ENOMEM, an unknown zone DUE_EINVAL naming it), with the engine's
** allocations made to fail one by one (due__tz_fail_alloc).
*/
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* timegm */
#endif

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cron/cron.h"

#define TU_FIXTURE
#include "test_util.h"

/* --- helpers --- */

/* "YYYY-MM-DDTHH:MM:SSZ" -> seconds since the epoch, by the C library. */
static int64_t T(const char *s)
{
	struct tm tm = {0};

	assert_int_equal(sscanf(s, "%d-%d-%dT%d:%d:%dZ", &tm.tm_year,
				&tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
				&tm.tm_min, &tm.tm_sec),
			 6);
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}

static due_cron *P(const char *expr)
{
	char err[256] = "";
	due_cron *c = NULL;
	int rc = due__cron_parse(&c, expr, err, sizeof err);

	if (rc != 0)
		fail_msg("parse '%s': %s", expr, err);
	return c;
}

static due_tz *Z(const char *zone)
{
	char err[256] = "";
	due_tz *tz = NULL;

	if (due__tz_open(&tz, zone, err, sizeof err) != 0)
		fail_msg("zone '%s': %s", zone, err);
	return tz;
}

/* A mask from a list of values ending in -1. */
static uint64_t bits(int v, ...)
{
	uint64_t m = 0;
	va_list ap;

	va_start(ap, v);
	for (; v >= 0; v = va_arg(ap, int))
		m |= UINT64_C(1) << v;
	va_end(ap);
	return m;
}

/* Values lo..hi, every step. */
static uint64_t span(int lo, int hi, int step)
{
	uint64_t m = 0;

	for (int v = lo; v <= hi; v += step)
		m |= UINT64_C(1) << v;
	return m;
}

static due_cron_fields fields_of(const char *expr)
{
	due_cron_fields f;
	due_cron *c = P(expr);

	due__cron_inspect(&f, c);
	due__cron_free(c);
	return f;
}

/* Check the next fires of expr in zone (NULL = UTC) after `after`. */
static void expect_fires(const char *expr, const char *zone, const char *after,
			 const char *const *want, size_t n)
{
	due_cron *c = P(expr);
	due_tz *tz = zone ? Z(zone) : NULL;
	int64_t at = T(after), got;
	char buf[32];

	for (size_t i = 0; i < n; i++) {
		assert_int_equal(due__cron_next(c, tz, at, &got), 0);
		due__cron_format_time(buf, sizeof buf, got, 0);
		if (got != T(want[i]))
			fail_msg("'%s' in %s after %s: fire %zu is %s, want %s",
				 expr, zone ? zone : "UTC", after, i, buf,
				 want[i]);
		at = got;
	}
	due__cron_free(c);
	due__tz_free(tz);
}

#define EXPECT(expr, zone, after, ...)                                         \
	do {                                                                   \
		static const char *const want_[] = {__VA_ARGS__};              \
		expect_fires(expr, zone, after, want_,                         \
			     sizeof want_ / sizeof want_[0]);                  \
	} while (0)

/* Every fire of expr in zone in [from, to); returns how many (at most cap). */
static size_t fires_between(const char *expr, const char *zone,
			    const char *from, const char *to, int64_t *out,
			    size_t cap)
{
	due_cron *c = P(expr);
	due_tz *tz = Z(zone);
	int64_t at = T(from) - 1, end = T(to), got;
	size_t n = 0;

	while (due__cron_next(c, tz, at, &got) == 0 && got < end && n < cap)
		out[n++] = at = got;
	due__cron_free(c);
	due__tz_free(tz);
	return n;
}

/*
** Check a transition day for a sub-daily expression: exactly `count` fires in
** [from, to), the first at `from`, increasing, every gap `step` seconds except
** one gap of `odd_gap` seconds ending at `odd_at` (when odd_at is not NULL).
*/
static void check_day(const char *expr, const char *zone, const char *from,
		      const char *to, size_t count, int64_t step,
		      const char *odd_at, int64_t odd_gap)
{
	int64_t f[200];
	size_t n = fires_between(expr, zone, from, to, f, 200);
	int odd_seen = 0;

	if (n != count)
		fail_msg("'%s' in %s on [%s, %s): %zu fires, want %zu", expr,
			 zone, from, to, n, count);
	assert_int_equal(f[0], T(from));
	for (size_t i = 1; i < n; i++) {
		int64_t gap = f[i] - f[i - 1];

		if (odd_at != NULL && f[i] == T(odd_at)) {
			assert_int_equal(gap, odd_gap);
			odd_seen++;
		} else if (gap != step) {
			fail_msg("'%s' in %s: gap %lld s before fire %zu", expr,
				 zone, (long long)gap, i);
		}
	}
	assert_int_equal(odd_seen, odd_at != NULL);
}

/* --- parsing --- */

static void test_parse_plain_fields(void **state)
{
	due_cron_fields f = fields_of("5 * * * *");

	(void)state;
	assert_int_equal(f.second, bits(0, -1));
	assert_int_equal(f.minute, bits(5, -1));
	assert_int_equal(f.hour, span(0, 23, 1));
	assert_int_equal(f.dom, span(1, 31, 1));
	assert_int_equal(f.month, span(1, 12, 1));
	assert_int_equal(f.dow, span(0, 6, 1));
	assert_false(f.has_seconds);
	assert_true(f.dom_star);
	assert_true(f.dow_star);
}

static void test_parse_lists_ranges_steps(void **state)
{
	(void)state;
	assert_int_equal(fields_of("1,3,5 * * * *").minute, bits(1, 3, 5, -1));
	assert_int_equal(fields_of("10-15 * * * *").minute, span(10, 15, 1));
	assert_int_equal(fields_of("*/15 * * * *").minute,
			 bits(0, 15, 30, 45, -1));
	assert_int_equal(fields_of("5-20/5 * * * *").minute,
			 bits(5, 10, 15, 20, -1));
	assert_int_equal(fields_of("7/20 * * * *").minute, bits(7, 27, 47, -1));
	assert_int_equal(fields_of("0 */6 * * *").hour, bits(0, 6, 12, 18, -1));
	assert_int_equal(fields_of("0 0 1-31/10 * *").dom,
			 bits(1, 11, 21, 31, -1));
	assert_int_equal(fields_of("1-3,10-14/2,*/30 * * * *").minute,
			 bits(0, 1, 2, 3, 10, 12, 14, 30, -1));
	assert_int_equal(fields_of("59 23 31 12 6").minute, bits(59, -1));
	assert_int_equal(fields_of("0 0 * * *").dom, span(1, 31, 1));
	assert_int_equal(fields_of("*/60 * * * *").minute, bits(0, -1));
	assert_int_equal(fields_of("00 007 * * *").hour, bits(7, -1));
}

static void test_parse_names(void **state)
{
	due_cron_fields f = fields_of("0 0 * jan-Mar,DEC mon-FRI");

	(void)state;
	assert_int_equal(f.month, bits(1, 2, 3, 12, -1));
	assert_int_equal(f.dow, bits(1, 2, 3, 4, 5, -1));
	assert_int_equal(fields_of("0 0 * * sun,SAT").dow, bits(0, 6, -1));
	assert_int_equal(fields_of("0 0 1 JAN/3 *").month,
			 bits(1, 4, 7, 10, -1));
	assert_int_equal(fields_of("0 0 * aug *").month, bits(8, -1));
	assert_int_equal(fields_of("0 0 * * wEd").dow, bits(3, -1));
}

static void test_parse_dow_seven_is_sunday(void **state)
{
	(void)state;
	assert_int_equal(fields_of("0 0 * * 7").dow, bits(0, -1));
	assert_int_equal(fields_of("0 0 * * 5-7").dow, bits(0, 5, 6, -1));
	assert_int_equal(fields_of("0 0 * * 0-7").dow, span(0, 6, 1));
	assert_int_equal(fields_of("0 0 * * 0,7").dow, bits(0, -1));
}

static void test_parse_seconds_field(void **state)
{
	due_cron_fields f = fields_of("*/10 * * * * *");

	(void)state;
	assert_true(f.has_seconds);
	assert_int_equal(f.second, bits(0, 10, 20, 30, 40, 50, -1));
	assert_int_equal(f.minute, span(0, 59, 1));
	assert_int_equal(fields_of("30 0 12 * * *").second, bits(30, -1));
	assert_int_equal(fields_of("30 0 12 * * *").hour, bits(12, -1));
}

static void test_parse_macros(void **state)
{
	static const struct {
		const char *macro;
		uint64_t minute, hour, dom, month, dow;
	} m[] = {
	    {"@yearly", 1, 1, 1 << 1, 1 << 1, 0x7f},
	    {"@annually", 1, 1, 1 << 1, 1 << 1, 0x7f},
	    {"@monthly", 1, 1, 1 << 1, 0x1ffe, 0x7f},
	    {"@weekly", 1, 1, 0xfffffffe, 0x1ffe, 1},
	    {"@daily", 1, 1, 0xfffffffe, 0x1ffe, 0x7f},
	    {"@midnight", 1, 1, 0xfffffffe, 0x1ffe, 0x7f},
	    {"@hourly", 1, 0xffffff, 0xfffffffe, 0x1ffe, 0x7f},
	    {"  @HOURLY\t", 1, 0xffffff, 0xfffffffe, 0x1ffe, 0x7f},
	};

	(void)state;
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
		due_cron_fields f = fields_of(m[i].macro);

		assert_int_equal(f.second, 1);
		assert_int_equal(f.minute, m[i].minute);
		assert_int_equal(f.hour, m[i].hour);
		assert_int_equal(f.dom, m[i].dom);
		assert_int_equal(f.month, m[i].month);
		assert_int_equal(f.dow, m[i].dow);
	}
	due_cron *c = P("@daily");
	assert_string_equal(due__cron_text(c), "@daily");
	due__cron_free(c);
}

static void test_parse_whitespace_and_star_flags(void **state)
{
	due_cron_fields f = fields_of("  0\t0  13 *   5 \n");

	(void)state;
	assert_int_equal(f.dom, bits(13, -1));
	assert_false(f.dom_star);
	assert_false(f.dow_star);
	f = fields_of("0 0 */2 * 5");
	assert_true(f.dom_star);
	assert_false(f.dow_star);
	f = fields_of("0 0 1 * *");
	assert_false(f.dom_star);
	assert_true(f.dow_star);
}

static void test_parse_errors(void **state)
{
	static const struct {
		const char *expr;
		const char *msg; /* must appear in the message */
	} bad[] = {
	    {"", "empty expression"},
	    {"   \t ", "empty expression"},
	    {"* * * *", "expected 5 fields"},
	    {"* * * *", "got 4"},
	    {"* * * * * * *", "got 7"},
	    {"60 * * * *", "minute: 60 is out of range 0-59"},
	    {"* 24 * * *", "hour: 24 is out of range 0-23"},
	    {"* * 32 * *", "day-of-month: 32 is out of range 1-31"},
	    {"* * 0 * *", "day-of-month: 0 is out of range 1-31"},
	    {"* * * 13 *", "month: 13 is out of range 1-12"},
	    {"* * * 0 *", "month: 0 is out of range 1-12"},
	    {"* * * * 8", "day-of-week: 8 is out of range 0-7"},
	    {"60 * * * * *", "second: 60 is out of range 0-59"},
	    {"99999999999999999999 * * * *",
	     "minute: 99999999999999999999 is out of range"},
	    {"1-99 * * * *", "minute: 99 is out of range 0-59"},
	    {"*/0 * * * *", "minute: step 0 is out of range 1-60"},
	    {"* 1-5/0 * * *", "hour: step 0 is out of range 1-24"},
	    {"*/61 * * * *", "minute: step 61 is out of range 1-60"},
	    {"*/ * * * *", "minute: missing step after '/' in '*/'"},
	    {"5-3 * * * *", "minute: range 5-3 is reversed"},
	    {"* * * FEB-JAN *", "month: range FEB-JAN is reversed"},
	    {"* * * * FRI-MON", "day-of-week: range FRI-MON is reversed"},
	    {"5x * * * *", "minute: unexpected character 'x' in '5x'"},
	    {"* * * * 1#2", "day-of-week: unexpected character '#' in '1#2'"},
	    {"*x * * * *", "minute: unexpected character 'x' in '*x'"},
	    {"-5 * * * *", "minute: unexpected character '-' in '-5'"},
	    {"1- * * * *", "minute: missing value at the end of '1-'"},
	    {"? * * * *", "minute: unexpected character '?'"},
	    {"*/2/3 * * * *", "minute: unexpected character '/' in '*/2/3'"},
	    {"* * L * *", "day-of-month: invalid value 'L'"},
	    {"* MON * * *", "hour: invalid value 'MON'"},
	    {"* * * * FOO",
	     "day-of-week: unknown name 'FOO' (expected SUN-SAT)"},
	    {"* * * JANUARY *",
	     "month: unknown name 'JANUARY' (expected JAN-DEC)"},
	    {"1,,2 * * * *", "minute: empty list item in '1,,2'"},
	    {"1, * * * *", "minute: empty list item in '1,'"},
	    {"* ,5 * * *", "hour: empty list item in ',5'"},
	    {"* * * * \xc3\xa9", "day-of-week: unexpected character 0xc3"},
	    {"@fortnightly", "unknown macro '@fortnightly'"},
	    {"@daily 5", "macro '@daily' must be the whole expression"},
	};
	char err[256];
	due_cron *c;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		c = (due_cron *)&c; /* must be reset to NULL */
		err[0] = '\0';
		assert_int_equal(
		    due__cron_parse(&c, bad[i].expr, err, sizeof err),
		    DUE_CRON_EINVAL);
		assert_null(c);
		if (strstr(err, bad[i].msg) == NULL)
			fail_msg("'%s': message \"%s\" lacks \"%s\"",
				 bad[i].expr, err, bad[i].msg);
	}
}

static void test_parse_error_buffers(void **state)
{
	char small[12], big[2048];
	due_cron *c = NULL;

	(void)state;
	memset(small, 'x', sizeof small);
	assert_int_equal(due__cron_parse(&c, "* * 32 * *", small, sizeof small),
			 DUE_CRON_EINVAL);
	assert_int_equal(strlen(small), sizeof small - 1);
	assert_int_equal(due__cron_parse(&c, "* * 32 * *", NULL, 0),
			 DUE_CRON_EINVAL);
	assert_int_equal(due__cron_parse(&c, NULL, small, sizeof small),
			 DUE_CRON_EINVAL);
	memset(big, '1', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(due__cron_parse(&c, big, small, sizeof small),
			 DUE_CRON_EINVAL);
	assert_null(c);
}

/* --- next fire time: UTC and fixed-offset zones --- */

static void test_next_utc(void **state)
{
	(void)state;
	/* strictly after: an `after` that is itself a fire time is skipped */
	EXPECT("0 0 * * *", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z");
	EXPECT("0 0 * * *", NULL, "2025-12-31T23:59:59Z",
	       "2026-01-01T00:00:00Z");
	EXPECT("30 4 1 * *", NULL, "2026-01-15T10:00:00Z",
	       "2026-02-01T04:30:00Z", "2026-03-01T04:30:00Z");
	EXPECT("0 0 1 1 *", NULL, "2026-06-01T00:00:00Z",
	       "2027-01-01T00:00:00Z");
	EXPECT("*/20 9-10 * * MON-FRI", NULL, "2026-01-02T10:41:00Z", /* Fri */
	       "2026-01-05T09:00:00Z", "2026-01-05T09:20:00Z");
	EXPECT("59 23 31 12 *", NULL, "2026-12-31T23:59:00Z",
	       "2027-12-31T23:59:00Z");
}

static void test_next_tokyo(void **state)
{
	(void)state;
	/* JST is UTC+9 all year: no DST transition on US or EU dates */
	EXPECT("0 9 * * *", "Asia/Tokyo", "2026-03-07T12:00:00Z",
	       "2026-03-08T00:00:00Z", "2026-03-09T00:00:00Z");
	EXPECT("30 2 * * *", "Asia/Tokyo", "2026-03-07T00:00:00Z",
	       "2026-03-07T17:30:00Z", "2026-03-08T17:30:00Z",
	       "2026-03-09T17:30:00Z");
	EXPECT("0 0 1 * *", "Asia/Tokyo", "2026-10-30T00:00:00Z",
	       "2026-10-31T15:00:00Z", "2026-11-30T15:00:00Z");
}

/* --- next fire time across DST --- */

static void test_new_york_spring_forward(void **state)
{
	(void)state;
	/* 02:30 does not exist on 2026-03-08: fires at 03:00 EDT = 07:00Z */
	EXPECT("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
	       "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z");
	EXPECT("0 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
	       "2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z");
	EXPECT("0 3 * * *", "America/New_York", "2026-03-07T12:00:00Z",
	       "2026-03-08T07:00:00Z", "2026-03-09T07:00:00Z");
	EXPECT("59 1 * * *", "America/New_York", "2026-03-07T12:00:00Z",
	       "2026-03-08T06:59:00Z", "2026-03-09T05:59:00Z");
	/* 2040 lies past the table of transitions: the zone's POSIX rule
	 * answers */
	EXPECT("30 2 * * *", "America/New_York", "2040-03-10T12:00:00Z",
	       "2040-03-11T07:00:00Z", "2040-03-12T06:30:00Z");
}

static void test_new_york_fall_back(void **state)
{
	(void)state;
	/* 01:30 happens twice on 2026-11-01: fires once, at 01:30 EDT = 05:30Z
	 */
	EXPECT("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
	       "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z");
	/* asked during the second 01:xx (01:10 EST): today's 01:30 already
	 * fired */
	EXPECT("30 1 * * *", "America/New_York", "2026-11-01T06:10:00Z",
	       "2026-11-02T06:30:00Z");
	EXPECT("30 2 * * *", "America/New_York", "2026-10-31T12:00:00Z",
	       "2026-11-01T07:30:00Z");
	EXPECT("30 1 * * *", "America/New_York", "2040-11-03T12:00:00Z",
	       "2040-11-04T05:30:00Z", "2040-11-05T06:30:00Z");
}

static void test_berlin(void **state)
{
	(void)state;
	EXPECT("0 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
	       "2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z");
	EXPECT("0 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
	       "2026-10-25T00:00:00Z", "2026-10-26T01:00:00Z");
	/* 02:30 CEST (00:30Z) fired; neither pass of 02:xx fires it again */
	EXPECT("30 2 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z",
	       "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z");
	EXPECT("30 2 * * *", "Europe/Berlin", "2026-10-25T00:45:00Z",
	       "2026-10-26T01:30:00Z");
	EXPECT("30 2 * * *", "Europe/Berlin", "2026-10-25T01:15:00Z",
	       "2026-10-26T01:30:00Z");
}

static void test_lord_howe(void **state)
{
	(void)state;
	/* 2026-10-04 02:00 -> 02:30: 02:15 is skipped, fires at 02:30 +11 */
	EXPECT("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
	       "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z");
	/* 2026-04-05 02:00 -> 01:30: 01:45 happens twice, fires at the first */
	EXPECT("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00:00Z",
	       "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z");
	EXPECT("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T15:00:00Z",
	       "2026-04-05T15:15:00Z");
	EXPECT("30 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00:00Z",
	       "2026-10-03T15:30:00Z", "2026-10-04T15:30:00Z");
}

static void test_hourly_across_transitions(void **state)
{
	(void)state;
	/* New York spring: 23 fires, 02:00 becomes 03:00 EDT and fires once */
	check_day("0 * * * *", "America/New_York", "2026-03-08T05:00:00Z",
		  "2026-03-09T04:00:00Z", 23, 3600, NULL, 0);
	/* New York fall: 25 hours, 24 fires; 01:00 EST (06:00Z) does not fire
	 */
	check_day("0 * * * *", "America/New_York", "2026-11-01T04:00:00Z",
		  "2026-11-02T05:00:00Z", 24, 3600, "2026-11-01T07:00:00Z",
		  7200);
	check_day("@hourly", "Europe/Berlin", "2026-03-28T23:00:00Z",
		  "2026-03-29T22:00:00Z", 23, 3600, NULL, 0);
	check_day("@hourly", "Europe/Berlin", "2026-10-24T22:00:00Z",
		  "2026-10-25T23:00:00Z", 24, 3600, "2026-10-25T02:00:00Z",
		  7200);
}

static void test_quarter_hour_across_transitions(void **state)
{
	(void)state;
	/* 02:00-02:45 all map to 03:00 EDT, which is a slot itself: 96 - 4 */
	check_day("*/15 * * * *", "America/New_York", "2026-03-08T05:00:00Z",
		  "2026-03-09T04:00:00Z", 92, 900, NULL, 0);
	/* 01:45 EDT (05:45Z), then the repeated 01:xx is skipped, then 02:00
	 * EST */
	check_day("*/15 * * * *", "America/New_York", "2026-11-01T04:00:00Z",
		  "2026-11-02T05:00:00Z", 96, 900, "2026-11-01T07:00:00Z",
		  4500);
	check_day("*/15 * * * *", "Europe/Berlin", "2026-03-28T23:00:00Z",
		  "2026-03-29T22:00:00Z", 92, 900, NULL, 0);
	check_day("*/15 * * * *", "Europe/Berlin", "2026-10-24T22:00:00Z",
		  "2026-10-25T23:00:00Z", 96, 900, "2026-10-25T02:00:00Z",
		  4500);
	/* Lord Howe: 02:00 and 02:15 are skipped and land on 02:30: 96 - 2 */
	check_day("*/15 * * * *", "Australia/Lord_Howe", "2026-10-03T13:30:00Z",
		  "2026-10-04T13:00:00Z", 94, 900, NULL, 0);
	/* 01:45 +11 (14:45Z), then 02:00 +1030 (15:30Z) */
	check_day("*/15 * * * *", "Australia/Lord_Howe", "2026-04-04T13:00:00Z",
		  "2026-04-05T13:30:00Z", 96, 900, "2026-04-04T15:30:00Z",
		  2700);
}

static void test_seconds_across_fall_back(void **state)
{
	int64_t f[200];
	size_t n;

	(void)state;
	/* every 30 s from 01:58 EDT: 01:58:00 .. 01:59:30 EDT, then 02:00:00
	 * EST */
	n = fires_between("*/30 * * * * *", "America/New_York",
			  "2026-11-01T05:58:00Z", "2026-11-01T07:01:00Z", f,
			  200);
	assert_int_equal(n, 4 + 2);
	assert_int_equal(f[3], T("2026-11-01T05:59:30Z"));
	assert_int_equal(f[4], T("2026-11-01T07:00:00Z"));
}

/* --- calendar corners --- */

static void test_leap_day(void **state)
{
	(void)state;
	EXPECT("0 0 29 2 *", NULL, "2026-01-01T00:00:00Z",
	       "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z");
	EXPECT("0 0 29 2 *", "Europe/Berlin", "2026-01-01T00:00:00Z",
	       "2028-02-28T23:00:00Z");
	/* 2100 is no leap year: 8 years of search still reach 2104 */
	EXPECT("0 0 29 2 *", NULL, "2096-03-01T00:00:00Z",
	       "2104-02-29T00:00:00Z");
}

static void test_end_of_month(void **state)
{
	(void)state;
	EXPECT("0 0 31 * *", NULL, "2026-01-31T00:00:00Z",
	       "2026-03-31T00:00:00Z", "2026-05-31T00:00:00Z",
	       "2026-07-31T00:00:00Z", "2026-08-31T00:00:00Z",
	       "2026-10-31T00:00:00Z", "2026-12-31T00:00:00Z",
	       "2027-01-31T00:00:00Z");
}

static void test_dom_dow_rule(void **state)
{
	(void)state;
	/* both restricted: the 13th OR a Friday; Fri 13 Feb fires once */
	EXPECT("0 0 13 * 5", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z",
	       "2026-01-13T00:00:00Z", "2026-01-16T00:00:00Z",
	       "2026-01-23T00:00:00Z", "2026-01-30T00:00:00Z",
	       "2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z",
	       "2026-02-20T00:00:00Z");
	/* day-of-month starts with '*': both must match (odd days that are
	 * Fridays) */
	EXPECT("0 0 */2 * FRI", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-09T00:00:00Z", "2026-01-23T00:00:00Z",
	       "2026-02-13T00:00:00Z");
	EXPECT("0 0 13 * *", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-13T00:00:00Z", "2026-02-13T00:00:00Z");
	EXPECT("0 0 * * 5", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-02T00:00:00Z", "2026-01-09T00:00:00Z");
	EXPECT("0 0 * * 7", NULL, "2026-01-01T00:00:00Z",
	       "2026-01-04T00:00:00Z", "2026-01-11T00:00:00Z");
}

static void test_seconds_field(void **state)
{
	(void)state;
	EXPECT("*/10 * * * * *", NULL, "2026-01-01T12:00:05Z",
	       "2026-01-01T12:00:10Z", "2026-01-01T12:00:20Z",
	       "2026-01-01T12:00:30Z", "2026-01-01T12:00:40Z",
	       "2026-01-01T12:00:50Z", "2026-01-01T12:01:00Z");
	EXPECT("30 0 0 * * *", NULL, "2026-01-01T00:00:30Z",
	       "2026-01-02T00:00:30Z");
	/* five fields fire at second 0 even when `after` has seconds */
	EXPECT("* * * * *", NULL, "2026-01-01T12:00:05Z",
	       "2026-01-01T12:01:00Z");
}

static void test_macros_next(void **state)
{
	(void)state;
	EXPECT("@hourly", NULL, "2026-01-01T12:30:00Z", "2026-01-01T13:00:00Z",
	       "2026-01-01T14:00:00Z");
	EXPECT("@weekly", NULL, "2026-01-01T00:00:00Z", "2026-01-04T00:00:00Z",
	       "2026-01-11T00:00:00Z");
	EXPECT("@monthly", "Europe/Berlin", "2026-01-15T00:00:00Z",
	       "2026-01-31T23:00:00Z", "2026-02-28T23:00:00Z");
	EXPECT("@yearly", NULL, "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z");
	EXPECT("@midnight", "Asia/Tokyo", "2026-01-01T00:00:00Z",
	       "2026-01-01T15:00:00Z");
}

static void test_impossible_expression(void **state)
{
	static const char *const never[] = {
	    "0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *", "0 0 30 FEB *"};
	char buf[256], err[256];
	int64_t got = 12345;

	(void)state;
	for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
		due_cron *c = P(never[i]);

		assert_int_equal(
		    due__cron_next(c, NULL, T("2026-01-01T00:00:00Z"), &got),
		    DUE_CRON_ENOTFOUND);
		assert_int_equal(got, 12345);
		due__cron_free(c);
	}
	due_cron *c = P("0 0 30 2 *");
	assert_int_equal(due__cron_format_next(buf, sizeof buf, c, NULL,
					       T("2026-01-01T00:00:00Z"), 3, 0,
					       err, sizeof err),
			 DUE_CRON_ENOTFOUND);
	assert_string_equal(buf, "");
	assert_non_null(strstr(
	    err, "does not fire after 2026-01-01T00:00:00Z within 8 years"));
	due__cron_free(c);
}

static void test_range_limits(void **state)
{
	due_cron *c = P("0 0 * * *");
	int64_t got;

	(void)state;
	assert_int_equal(due__cron_next(c, NULL, INT64_MAX, &got),
			 DUE_CRON_ERANGE);
	assert_int_equal(due__cron_next(c, NULL, INT64_MIN, &got),
			 DUE_CRON_ERANGE);
	assert_int_equal(
	    due__cron_next(c, NULL, T("9999-12-29T12:00:00Z"), &got),
	    DUE_CRON_ENOTFOUND);
	assert_int_equal(due__cron_next(NULL, NULL, 0, &got), DUE_CRON_EINVAL);
	assert_int_equal(due__cron_next(c, NULL, 0, NULL), DUE_CRON_EINVAL);
	assert_int_equal(
	    due__cron_next(c, NULL, T("0001-01-03T00:00:00Z"), &got), 0);
	assert_int_equal(got, T("0001-01-04T00:00:00Z"));
	due__cron_free(c);
}

/* --- output --- */

static void test_format(void **state)
{
	char buf[256], err[256], tiny[30];
	due_cron *c = P("0 2 * * *");
	due_tz *tz = Z("Europe/Berlin");
	int64_t t[3];
	size_t n;

	(void)state;
	assert_int_equal(due__cron_format_time(buf, sizeof buf,
					       T("2026-03-29T01:00:00Z"), 0),
			 0);
	assert_string_equal(buf, "2026-03-29T01:00:00Z");
	assert_int_equal(
	    due__cron_format_time(buf, sizeof buf, 0, DUE_CRON_FMT_MILLIS), 0);
	assert_string_equal(buf, "1970-01-01T00:00:00.000Z");
	assert_int_equal(due__cron_format_time(buf, 20, 0, 0), DUE_CRON_ERANGE);
	assert_int_equal(due__cron_format_next(buf, sizeof buf, c, tz,
					       T("2026-03-28T00:00:00Z"), 3, 0,
					       err, sizeof err),
			 0);
	assert_string_equal(buf, "2026-03-28T01:00:00Z\n2026-03-29T01:00:00Z\n"
				 "2026-03-30T00:00:00Z\n");
	assert_int_equal(due__cron_format_next(tiny, sizeof tiny, c, tz,
					       T("2026-03-28T00:00:00Z"), 2, 0,
					       err, sizeof err),
			 DUE_CRON_ERANGE);
	assert_string_equal(tiny, "2026-03-28T01:00:00Z\n");
	assert_int_equal(due__cron_format_next(buf, sizeof buf, c, tz, 0, 0, 0,
					       err, sizeof err),
			 0);
	assert_string_equal(buf, "");
	assert_int_equal(
	    due__cron_next_n(t, 3, &n, c, tz, T("2026-10-24T12:00:00Z")), 0);
	assert_int_equal(n, 3);
	assert_int_equal(t[0], T("2026-10-25T00:00:00Z"));
	assert_int_equal(t[2], T("2026-10-27T01:00:00Z"));
	assert_string_equal(due__cron_strerror(DUE_CRON_ENOTFOUND),
			    "no fire time within the search window");
	due__cron_free(c);
	due__tz_free(tz);
}

/* --- time zones --- */

static void test_unknown_zone(void **state)
{
	static const char *const bad[] = {
	    "Europe/Berln",   "Mars/Olympus_Mons", "../../etc/passwd",
	    "/etc/localtime", "Europe//Berlin",	   "Europe/",
	    "localtime",      "zone.tab",	   "Europe/Berlin ",
	    "europe/berlin"};
	char err[256], want[300];
	due_tz *tz;

	(void)state;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		tz = (due_tz *)&tz;
		assert_int_equal(due__tz_open(&tz, bad[i], err, sizeof err),
				 DUE_TZ_EZONE);
		assert_null(tz);
		snprintf(want, sizeof want, "unknown time zone '%s'", bad[i]);
		assert_string_equal(err, want);
	}
	assert_int_equal(due__tz_open(&tz, "", err, sizeof err), DUE_TZ_EINVAL);
	assert_int_equal(due__tz_open(&tz, NULL, err, sizeof err),
			 DUE_TZ_EINVAL);
	assert_int_equal((int)DUE_CRON_EZONE, (int)DUE_TZ_EZONE);
}

static void test_tz_conversions(void **state)
{
	due_tz *ny = Z("America/New_York");
	due_tz_civil lt;
	int64_t u;
	int32_t off;

	(void)state;
	assert_string_equal(due__tz_name(ny), "America/New_York");
	assert_string_equal(due__tz_name(NULL), "UTC");
	assert_int_equal(due__tz_offset(ny, T("2026-03-08T06:59:59Z"), &off),
			 0);
	assert_int_equal(off, -18000);
	assert_int_equal(due__tz_offset(ny, T("2026-03-08T07:00:00Z"), &off),
			 0);
	assert_int_equal(off, -14400);
	assert_int_equal(due__tz_to_local(ny, T("2026-11-01T06:30:00Z"), &lt),
			 0);
	assert_int_equal(lt.year, 2026);
	assert_int_equal(lt.month, 11);
	assert_int_equal(lt.day, 1);
	assert_int_equal(lt.hour, 1);
	assert_int_equal(lt.minute, 30);
	assert_int_equal(lt.second, 0);
	lt = (due_tz_civil){2026, 3, 8, 2, 30, 0}; /* skipped */
	assert_int_equal(due__tz_to_utc(ny, &lt, &u), 0);
	assert_int_equal(u, T("2026-03-08T07:00:00Z"));
	lt = (due_tz_civil){2026, 11, 1, 1, 30, 0}; /* repeated */
	assert_int_equal(due__tz_to_utc(ny, &lt, &u), 0);
	assert_int_equal(u, T("2026-11-01T05:30:00Z"));
	lt = (due_tz_civil){2026, 2, 29, 0, 0, 0};
	assert_int_equal(due__tz_to_utc(ny, &lt, &u), DUE_TZ_EINVAL);
	lt = (due_tz_civil){2026, 1, 1, 24, 0, 0};
	assert_int_equal(due__tz_to_utc(ny, &lt, &u), DUE_TZ_EINVAL);
	assert_int_equal(due__tz_offset(ny, INT64_MAX, &off), DUE_TZ_ERANGE);
	assert_int_equal(due__tz_weekday(2026, 2, 13), 5);
	assert_int_equal(due__tz_days_in_month(2100, 2), 28);
	assert_int_equal(due__tz_days_in_month(2000, 2), 29);
	assert_int_equal(due__tz_days_from_civil(2026, 1, 1) * 86400,
			 T("2026-01-01T00:00:00Z"));
	due__tz_free(ny);
	due__tz_free(NULL);

	due_tz *utc = Z("UTC");
	assert_int_equal(due__tz_offset(utc, T("2026-07-01T00:00:00Z"), &off),
			 0);
	assert_int_equal(off, 0);
	due__tz_free(utc);
	due_tz *almaty = Z("Asia/Almaty"); /* +05 since 2024-03-01 */
	assert_int_equal(
	    due__tz_offset(almaty, T("2026-07-01T00:00:00Z"), &off), 0);
	assert_int_equal(off, 5 * 3600);
	due__tz_free(almaty);
}

/*
** A version-2 TZif image with no transitions and one local time type of
** offset `utoff`, `leaps` leap-second records, and the footer `footer`.
*/
static size_t make_tzif(unsigned char *b, int32_t utoff, unsigned leaps,
			const char *footer)
{
	size_t n = 0;

	for (int v = 0; v < 2; v++) {
		size_t tsize = v == 0 ? 4 : 8;
		uint32_t counts[6] = {0, 0, leaps, 0, 1, 4};

		memcpy(b + n, "TZif2", 5);
		memset(b + n + 5, 0, 15);
		n += 20;
		for (int i = 0; i < 6; i++, n += 4)
			b[n] = 0, b[n + 1] = 0, b[n + 2] = 0,
			b[n + 3] = (unsigned char)counts[i];
		b[n++] = (unsigned char)((uint32_t)utoff >> 24);
		b[n++] = (unsigned char)((uint32_t)utoff >> 16);
		b[n++] = (unsigned char)((uint32_t)utoff >> 8);
		b[n++] = (unsigned char)utoff;
		b[n++] = 0, b[n++] = 0;
		memcpy(b + n, "XXX", 4);
		n += 4;
		memset(b + n, 0, leaps * (tsize + 4));
		n += leaps * (tsize + 4);
	}
	n += (size_t)snprintf((char *)b + n, 128, "\n%s\n", footer);
	return n;
}

static void test_tzif_rules_and_bad_data(void **state)
{
	unsigned char img[512];
	char err[256];
	due_tz *tz = NULL;
	size_t n;
	int32_t off;

	(void)state;
	/* POSIX rule only: New York's rule reproduces the 2026 transitions */
	n = make_tzif(img, -18000, 0, "EST5EDT,M3.2.0,M11.1.0");
	assert_int_equal(
	    due__tz_from_tzif(&tz, "test/NY", img, n, err, sizeof err), 0);
	due__tz_offset(tz, T("2026-03-08T06:59:59Z"), &off);
	assert_int_equal(off, -18000);
	due__tz_offset(tz, T("2026-03-08T07:00:00Z"), &off);
	assert_int_equal(off, -14400);
	due__tz_offset(tz, T("2026-11-01T05:59:59Z"), &off);
	assert_int_equal(off, -14400);
	due__tz_offset(tz, T("2026-11-01T06:00:00Z"), &off);
	assert_int_equal(off, -18000);
	due__tz_free(tz);

	/* Lord Howe's rule: half-hour DST in the southern hemisphere */
	n = make_tzif(img, 37800, 0, "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0");
	assert_int_equal(
	    due__tz_from_tzif(&tz, "test/LH", img, n, err, sizeof err), 0);
	due__tz_offset(tz, T("2026-10-03T15:29:59Z"), &off);
	assert_int_equal(off, 37800);
	due__tz_offset(tz, T("2026-10-03T15:30:00Z"), &off);
	assert_int_equal(off, 39600);
	due__tz_offset(tz, T("2026-04-04T14:59:59Z"), &off);
	assert_int_equal(off, 39600);
	due__tz_offset(tz, T("2026-04-04T15:00:00Z"), &off);
	assert_int_equal(off, 37800);
	due__tz_free(tz);

	/* DST all year (zic's "0/0,J365/25" idiom) */
	n = make_tzif(img, -10800, 0, "<-03>3<-02>,0/0,J365/25");
	assert_int_equal(
	    due__tz_from_tzif(&tz, "test/perm", img, n, err, sizeof err), 0);
	due__tz_offset(tz, T("2026-01-01T02:00:00Z"), &off);
	assert_int_equal(off, -7200);
	due__tz_offset(tz, T("2026-07-01T00:00:00Z"), &off);
	assert_int_equal(off, -7200);
	due__tz_free(tz);

	/* every truncation of a valid image is refused cleanly */
	n = make_tzif(img, 3600, 0, "CET-1CEST,M3.5.0,M10.5.0/3");
	for (size_t cut = 0; cut < n; cut++) {
		if (cut == n - 1 - strlen("CET-1CEST,M3.5.0,M10.5.0/3") - 1)
			continue; /* image ends exactly before the footer:
				     tolerated */
		tz = (due_tz *)&tz;
		assert_int_equal(
		    due__tz_from_tzif(&tz, "cut", img, cut, err, sizeof err),
		    DUE_TZ_EZONE);
		assert_null(tz);
	}
	n = make_tzif(img, 3600, 0, "CET-1CEST,M13.5.0,M10.5.0/3");
	assert_int_equal(due__tz_from_tzif(&tz, "bad", img, n, err, sizeof err),
			 DUE_TZ_EZONE);
	assert_string_equal(err,
			    "time zone 'bad': unusable zone data (bad footer)");
	n = make_tzif(img, 3600, 1, "CET-1");
	assert_int_equal(
	    due__tz_from_tzif(&tz, "leap", img, n, err, sizeof err),
	    DUE_TZ_EZONE);
	assert_non_null(strstr(err, "leap-second"));
	n = make_tzif(img, 100000, 0, "CET-1");
	assert_int_equal(due__tz_from_tzif(&tz, "far", img, n, err, sizeof err),
			 DUE_TZ_EZONE);
	img[0] = 'X';
	assert_int_equal(
	    due__tz_from_tzif(&tz, "magic", img, n, err, sizeof err),
	    DUE_TZ_EZONE);
}

/* --- threads --- */

struct shared {
	const due_cron *c;
	const due_tz *tz;
	int ok;
};

static void *worker(void *arg)
{
	struct shared *s = arg;
	int64_t at = T("2026-10-24T22:00:00Z") - 1, got;
	size_t n = 0;

	while (due__cron_next(s->c, s->tz, at, &got) == 0 &&
	       got < T("2026-10-25T23:00:00Z"))
		at = got, n++;
	s->ok = n == 96;
	return NULL;
}

static void test_shared_between_threads(void **state)
{
	struct shared s[4];
	pthread_t th[4];
	due_cron *c = P("*/15 * * * *");
	due_tz *tz = Z("Europe/Berlin");

	(void)state;
	for (int i = 0; i < 4; i++) {
		s[i] = (struct shared){c, tz, 0};
		assert_int_equal(pthread_create(&th[i], NULL, worker, &s[i]),
				 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_true(s[i].ok);
	}
	due__cron_free(c);
	due__tz_free(tz);
}

/* --- allocation failures in the engine --- */

static void test_engine_out_of_memory(void **state)
{
	char err[256];
	due_cron *c = NULL;
	due_tz *tz = NULL;
	int rc = -1, n;

	(void)state;
	assert_int_equal((int)DUE_CRON_EINVAL, (int)DUE_EINVAL);
	assert_int_equal((int)DUE_CRON_ENOMEM, (int)DUE_ENOMEM);
	assert_int_equal((int)DUE_TZ_ENOMEM, (int)DUE_ENOMEM);
	/* fail the 1st, 2nd ... allocation until the call needs no more */
	for (n = 1; n < 20 && rc != 0; n++) {
		due__tz_fail_alloc(n);
		rc = due__tz_open(&tz, "Europe/Berlin", err, sizeof err);
		due__tz_fail_alloc(0);
		if (rc != 0) {
			assert_int_equal(rc, DUE_TZ_ENOMEM);
			assert_null(tz);
			assert_string_equal(
			    err, "time zone 'Europe/Berlin': out of memory");
		}
	}
	assert_int_equal(rc, 0);
	assert_true(n > 3); /* file buffer, object, name: each failed once */
	due__tz_free(tz);
	for (n = 1, rc = -1; n < 20 && rc != 0; n++) {
		due__tz_fail_alloc(n);
		rc = due__cron_parse(&c, "0 3 * * *", err, sizeof err);
		due__tz_fail_alloc(0);
		if (rc != 0) {
			assert_int_equal(rc, DUE_CRON_ENOMEM);
			assert_null(c);
		}
	}
	assert_int_equal(rc, 0);
	assert_true(n > 2);
	due__cron_free(c);
}

/* --- cron schedules over a store (src/core/cron_sched.c) --- */

static due_cron_def sched_def(const char *name, const char *expr,
			      const char *tz)
{
	due_cron_def d = DUE_CRON_DEF_INIT;

	d.name = name;
	d.expr = expr;
	d.kind = "k";
	d.tz = tz;
	return d;
}

/* Put the schedules in a child process, so this process has no zone cached. */
static void put_elsewhere(const due_cron_def *defs, int n)
{
	int st;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		due_db *db = NULL;
		if (due_open(&db, url, NULL) < 0)
			_exit(2);
		for (int i = 0; i < n; i++)
			if (due_cron_put(db, &defs[i]) < 0)
				_exit(3);
		due_close(db);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void test_zone_read_once_per_change(void **state)
{
	due_db *db = open_db(), *db2 = open_db();
	due_cron_def d = sched_def("chatham", "* * * * * *", "Pacific/Chatham");
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_cron_tick_result r;
	unsigned long n0 = due__tz_files_read();

	(void)state;
	o.lookahead_us = 3000000;
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due__tz_files_read(), n0 + 1);
	assert_int_equal(due_cron_tick(db, &r, &o), 0);
	assert_true(r.materialized >= 1); /* the pass did use the zone */
	for (int pass = 0; pass < 3; pass++) {
		assert_int_equal(due_cron_tick(pass % 2 ? db2 : db, &r, &o), 0);
		assert_int_equal(due__tz_files_read(), n0 + 1);
	}
	/* a new zone is read once; a new expression in a known zone, never */
	d.tz = "Asia/Kathmandu";
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, &o), 0);
	assert_int_equal(due_cron_tick(db2, &r, &o), 0);
	assert_int_equal(due__tz_files_read(), n0 + 2);
	d.expr = "*/2 * * * * *";
	assert_int_equal(due_cron_put(db, &d), 0);
	assert_int_equal(due_cron_tick(db, &r, &o), 0);
	assert_int_equal(due__tz_files_read(), n0 + 2);
	due_close(db2);
	due_close(db);
}

static void copy_file(const char *from, const char *to)
{
	char buf[4096];
	size_t n;
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");

	assert_non_null(in);
	assert_non_null(out);
	while ((n = fread(buf, 1, sizeof buf, in)) > 0)
		assert_int_equal(fwrite(buf, 1, n, out), n);
	fclose(in);
	assert_int_equal(fclose(out), 0);
}

static void test_tick_unknown_zone(void **state)
{
	char zones[300], zone[400];
	const due_cron_def defs[] = {
	    sched_def("gone", "* * * * * *", "Test/Gone"),
	    sched_def("good", "* * * * * *", "UTC")};
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_cron_tick_result r;
	due_db *db;
	int rc;

	(void)state;
	/* a zone that exists when the schedule is put, and is gone at the pass
	 */
	snprintf(zones, sizeof zones, "%s/zones", dir);
	snprintf(zone, sizeof zone, "%s/Test", zones);
	assert_int_equal(mkdir(zones, 0700), 0);
	assert_int_equal(mkdir(zone, 0700), 0);
	snprintf(zone, sizeof zone, "%s/Test/Gone", zones);
	copy_file("/usr/share/zoneinfo/Europe/Berlin", zone);
	assert_int_equal(setenv("TZDIR", zones, 1), 0);
	put_elsewhere(defs, 2);
	assert_int_equal(unlink(zone), 0);
	db = open_db();
	o.lookahead_us = 2000000;
	rc = due_cron_tick(db, &r, &o);
	unsetenv("TZDIR");
	assert_int_equal(rc, DUE_EINVAL);
	assert_string_equal(due_error_last(), "unknown time zone 'Test/Gone'");
	assert_true(r.materialized >=
		    1); /* the broken one did not stop "good" */
	due_close(db);
}

static void test_tick_out_of_memory(void **state)
{
	const due_cron_def d =
	    sched_def("oom", "* * * * * *", "America/St_Johns");
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_cron_tick_result r;
	due_time t[3];
	size_t got;
	due_db *db;
	int rc = -1, n;

	(void)state;
	put_elsewhere(&d, 1);
	db = open_db();
	o.lookahead_us = 2000000;
	/* each failed pass leaves the zone uncached: the next one reads it
	 * again */
	for (n = 1; n < 40 && rc != 0; n++) {
		due__tz_fail_alloc(n);
		rc = due_cron_tick(db, &r, &o);
		due__tz_fail_alloc(0);
		if (rc != 0) {
			assert_int_equal(rc, DUE_ENOMEM);
			assert_string_equal(due_error_last(), "out of memory");
			assert_int_equal(r.materialized, 0);
		}
	}
	assert_int_equal(rc, 0);
	assert_true(
	    n > 5); /* expression (2), cache entry, zone (3+): each failed */
	assert_true(r.materialized >= 1);
	/* the same for a preview, in a zone not yet cached */
	for (n = 1, rc = -1; n < 40 && rc != 0; n++) {
		due__tz_fail_alloc(n);
		rc = due_cron_preview(t, 3, &got, "0 3 * * *",
				      "America/Halifax", 0);
		due__tz_fail_alloc(0);
		if (rc != 0) {
			assert_int_equal(rc, DUE_ENOMEM);
			assert_string_equal(due_error_last(), "out of memory");
		}
	}
	assert_int_equal(rc, 0);
	assert_int_equal(got, 3);
	due_close(db);
}

static void test_preview_errors(void **state)
{
	due_time t[2];
	size_t got;

	(void)state;
	assert_int_equal(
	    due_cron_preview(t, 2, &got, "0 3 * * *", "Mars/Olympus", 0),
	    DUE_EINVAL);
	assert_string_equal(due_error_last(),
			    "unknown time zone 'Mars/Olympus'");
	assert_int_equal(due_cron_preview(t, 2, &got, "0 3 * 13 *", "UTC", 0),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(),
			       "invalid cron expression '0 3 * 13 *': month"));
	assert_int_equal(
	    due_cron_preview(t, 2, &got, "0 0 30 2 *", "Europe/Paris", 0),
	    DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "never fires"));
}

static void test_tick_opts(void **state)
{
	due_db *db = open_db();
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_cron_tick_result r;

	(void)state;
	assert_int_equal(due_cron_tick(db, &r, NULL), 0);
	assert_int_equal(due_cron_tick(db, &r, &o), 0);
	o.version = 0;
	assert_int_equal(due_cron_tick(db, &r, &o), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "version 0"));
	o = (due_cron_tick_opts)DUE_CRON_TICK_OPTS_INIT;
	o.lookahead_us = -1;
	assert_int_equal(due_cron_tick(db, &r, &o), DUE_EINVAL);
	o = (due_cron_tick_opts)DUE_CRON_TICK_OPTS_INIT;
	o.misfire_grace_us = 2 * 86400 * INT64_C(1000000);
	assert_int_equal(due_cron_tick(db, &r, &o), DUE_EINVAL);
	due_close(db);
}

/* More zones than the cache holds (128), formatted by 4 threads at once. */
#define NZONES 140
static char zone_names[NZONES][64];
static char zone_want[NZONES][40];

static void *format_zones(void *arg)
{
	char buf[40];
	int *ok = arg;

	*ok = 1;
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < NZONES; i++)
			if (due_time_format_zone(buf, sizeof buf,
						 INT64_C(1790000000000000),
						 zone_names[i]) != 0 ||
			    strcmp(buf, zone_want[i]) != 0)
				*ok = 0;
	return NULL;
}

static void test_zone_cache_threads(void **state)
{
	FILE *f = fopen("/usr/share/zoneinfo/zone1970.tab", "r");
	char line[512];
	pthread_t th[4];
	int ok[4], n = 0;

	(void)state;
	assert_non_null(f);
	while (n < NZONES && fgets(line, sizeof line, f)) {
		/* country, coordinates, zone name, comments */
		if (line[0] == '#' ||
		    sscanf(line, "%*s %*s %63s", zone_names[n]) != 1)
			continue;
		assert_int_equal(due_time_format_zone(
				     zone_want[n], sizeof zone_want[n],
				     INT64_C(1790000000000000), zone_names[n]),
				 0);
		n++;
	}
	fclose(f);
	assert_int_equal(n, NZONES);
	for (int i = 0; i < 4; i++)
		assert_int_equal(
		    pthread_create(&th[i], NULL, format_zones, &ok[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_true(ok[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_plain_fields),
	    cmocka_unit_test(test_parse_lists_ranges_steps),
	    cmocka_unit_test(test_parse_names),
	    cmocka_unit_test(test_parse_dow_seven_is_sunday),
	    cmocka_unit_test(test_parse_seconds_field),
	    cmocka_unit_test(test_parse_macros),
	    cmocka_unit_test(test_parse_whitespace_and_star_flags),
	    cmocka_unit_test(test_parse_errors),
	    cmocka_unit_test(test_parse_error_buffers),
	    cmocka_unit_test(test_next_utc),
	    cmocka_unit_test(test_next_tokyo),
	    cmocka_unit_test(test_new_york_spring_forward),
	    cmocka_unit_test(test_new_york_fall_back),
	    cmocka_unit_test(test_berlin),
	    cmocka_unit_test(test_lord_howe),
	    cmocka_unit_test(test_hourly_across_transitions),
	    cmocka_unit_test(test_quarter_hour_across_transitions),
	    cmocka_unit_test(test_seconds_across_fall_back),
	    cmocka_unit_test(test_leap_day),
	    cmocka_unit_test(test_end_of_month),
	    cmocka_unit_test(test_dom_dow_rule),
	    cmocka_unit_test(test_seconds_field),
	    cmocka_unit_test(test_macros_next),
	    cmocka_unit_test(test_impossible_expression),
	    cmocka_unit_test(test_range_limits),
	    cmocka_unit_test(test_format),
	    cmocka_unit_test(test_unknown_zone),
	    cmocka_unit_test(test_tz_conversions),
	    cmocka_unit_test(test_tzif_rules_and_bad_data),
	    cmocka_unit_test(test_shared_between_threads),
	    cmocka_unit_test(test_engine_out_of_memory),
	    cmocka_unit_test(test_preview_errors),
	    cmocka_unit_test_setup_teardown(test_zone_read_once_per_change,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tick_unknown_zone, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tick_out_of_memory, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_tick_opts, setup, teardown),
	    cmocka_unit_test(test_zone_cache_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
