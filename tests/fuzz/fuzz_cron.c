/*
** fuzz_cron.c - due__cron_parse() and due__cron_next() (src/cron/cron.h).
**
** The input, as a C string, is a cron expression. When it does not parse, the
** result is DUE_CRON_EINVAL with a message, and a short err buffer is never
** overrun. When it parses:
**
**   - due__cron_text() is the input, and parsing it again gives the same sets
**     (due__cron_inspect());
**   - from a few fixed instants, in UTC and in a zone built here from TZif
**     bytes (a Lord Howe-like zone: half-hour DST from a POSIX rule, after two
**     listed transitions), due__cron_next() gives an instant strictly after
**     `after` or DUE_CRON_ENOTFOUND; nothing else, since every `after` is in
**     range. In UTC the instant's wall clock matches the expression; in the
**     zone it does too, unless the instant ends a gap (a skipped wall time
**     fires at the first valid instant after it, cron.h);
**   - due__cron_next_n() gives a strictly increasing series that starts with
**     due__cron_next()'s answer, and due__cron_format_next() never overruns
**     its buffer.
*/
#include <stdbool.h>

#include "cron/cron.h"
#include "fuzz.h"

/* The instants `after`, chosen around the zone's transitions and the ends. */
static const int64_t afters[] = {
    0,		  /* 1970-01-01T00:00:00Z */
    -2203845904,  /* 1900-03-01T12:34:56Z, before the zone's rule */
    1772323200,	  /* 2026-03-01T00:00:00Z */
    1775315400,	  /* 2026-04-04T15:10:00Z: second pass of the zone's repeat */
    1791041399,	  /* 2026-10-03T15:29:59Z: one second before its gap ends */
    4102444799,	  /* 2099-12-31T23:59:59Z */
    253401264000, /* 9999-12-20T00:00:00Z: the search meets year 9999 */
    DUE_TZ_MIN_UTC,
};

static unsigned char *put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
	return p + 4;
}

/* A TZif header: version '2', then the six counts. */
static unsigned char *header(unsigned char *p, uint32_t timecnt,
			     uint32_t typecnt, uint32_t charcnt)
{
	memcpy(p, "TZif2", 5);
	memset(p + 5, 0, 15);
	p = put32(p + 20, 0); /* isutcnt */
	p = put32(p, 0);      /* isstdcnt */
	p = put32(p, 0);      /* leapcnt */
	p = put32(p, timecnt);
	p = put32(p, typecnt);
	return put32(p, charcnt);
}

/*
** The zone: LMT +10:36:20 until 1895-01-31T13:23:40Z, +10 until
** 1981-02-28T14:00Z, then "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0" (DST from
** the first Sunday of October, 02:00 -> 02:30, to the first Sunday of April,
** 02:00 -> 01:30). A version 2 file with an empty 32-bit block.
*/
static due_tz *build_zone(void)
{
	static const int32_t offs[] = {38180, 36000, 37800};
	static const char footer[] = "\n<+1030>-10:30<+11>-11,M10.1.0,M4.1.0\n";
	unsigned char buf[256], *p = buf;
	due_tz *tz = NULL;

	p = header(p, 0, 1, 1);
	memset(p, 0, 7); /* one type (offset 0, std, abbreviation 0) and "\0" */
	p = header(p + 7, 2, 3, 4);
	p = put32(put32(p, UINT32_MAX), (uint32_t)-2364114980LL);
	p = put32(put32(p, 0), 352216800);
	*p++ = 1, *p++ = 2;
	for (int i = 0; i < 3; i++) {
		p = put32(p, (uint32_t)offs[i]);
		*p++ = 0, *p++ = 0; /* not DST, abbreviation "LMT" */
	}
	memcpy(p, "LMT", 4), p += 4;
	memcpy(p, footer, sizeof footer - 1), p += sizeof footer - 1;
	if (due__tz_from_tzif(&tz, "Fuzz/Lord_Howe", buf, (size_t)(p - buf),
			      NULL, 0) != 0)
		abort();
	return tz;
}

/* Does the wall time t match every field of f (with Vixie's day rule)? */
static bool matches(const due_cron_fields *f, const due_tz_civil *t)
{
	bool dom = f->dom >> t->day & 1;
	bool dow = f->dow >> due__tz_weekday(t->year, t->month, t->day) & 1;

	if (!(f->second >> t->second & 1) || !(f->minute >> t->minute & 1) ||
	    !(f->hour >> t->hour & 1) || !(f->month >> t->month & 1))
		return false;
	return (f->dom_star || f->dow_star) ? dom && dow : dom || dow;
}

/* Is u the first instant after a gap: the offset went up at u? */
static bool ends_gap(const due_tz *tz, int64_t u)
{
	int32_t before, at;

	return due__tz_offset(tz, u - 1, &before) == 0 &&
	       due__tz_offset(tz, u, &at) == 0 && at > before;
}

static void check_next(const due_cron *c, const due_cron_fields *f,
		       const due_tz *tz, int64_t after)
{
	int64_t u, series[3];
	size_t n;
	due_tz_civil t;
	int rc = due__cron_next(c, tz, after, &u);

	FUZZ_CHECK(rc == 0 || rc == DUE_CRON_ENOTFOUND,
		   "'%s' in %s after %lld: rc %d", due__cron_text(c),
		   due__tz_name(tz), (long long)after, rc);
	if (rc == 0) {
		FUZZ_CHECK(u > after && u <= DUE_TZ_MAX_UTC,
			   "'%s' in %s after %lld gave %lld", due__cron_text(c),
			   due__tz_name(tz), (long long)after, (long long)u);
		FUZZ_CHECK(due__tz_to_local(tz, u, &t) == 0,
			   "%lld has no wall time", (long long)u);
		FUZZ_CHECK(matches(f, &t) || (tz != NULL && ends_gap(tz, u)),
			   "'%s' in %s after %lld gave %lld = %04d-%02d-%02d "
			   "%02d:%02d:%02d",
			   due__cron_text(c), due__tz_name(tz),
			   (long long)after, (long long)u, t.year, t.month,
			   t.day, t.hour, t.minute, t.second);
	}
	rc = due__cron_next_n(series, 3, &n, c, tz, after);
	FUZZ_CHECK(n <= 3 && (rc == 0) == (n == 3), "next_n: rc %d with %zu",
		   rc, n);
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(series[i] > (i ? series[i - 1] : after) &&
			       (i || series[0] == u),
			   "'%s' in %s: next_n[%zu] = %lld", due__cron_text(c),
			   due__tz_name(tz), i, (long long)series[i]);
}

static void check_format(const due_cron *c, const due_tz *tz, int64_t after)
{
	char big[4 * 25 + 1], small[30], err[16] = "";

	due__cron_format_next(big, sizeof big, c, tz, after, 4,
			      DUE_CRON_FMT_MILLIS, err, sizeof err);
	FUZZ_CHECK(memchr(big, '\0', sizeof big) &&
		       memchr(err, '\0', sizeof err),
		   "format_next left a buffer unterminated");
	int rc = due__cron_format_next(small, sizeof small, c, tz, after, 2, 0,
				       NULL, 0);
	FUZZ_CHECK(rc != 0, "two lines fit in %zu bytes", sizeof small);
	FUZZ_CHECK(memchr(small, '\0', sizeof small) != NULL,
		   "small buffer unterminated");
}

static void check_same_fields(const due_cron_fields *a,
			      const due_cron_fields *b, const char *text)
{
	FUZZ_CHECK(a->second == b->second && a->minute == b->minute &&
		       a->hour == b->hour && a->dom == b->dom &&
		       a->month == b->month && a->dow == b->dow &&
		       a->dom_star == b->dom_star &&
		       a->dow_star == b->dow_star &&
		       a->has_seconds == b->has_seconds,
		   "'%s' parses to other sets from its own text", text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static due_tz *zone;
	char *text = fuzz_cstr(data, size), err[128], tiny[8];
	due_cron *c = NULL, *again = NULL;
	due_cron_fields f, g;
	int rc;

	if (zone == NULL)
		zone =
		    build_zone(); /* kept for the process, like a real zone */
	err[0] = '\0';
	if ((rc = due__cron_parse(&c, text, err, sizeof err)) != 0) {
		FUZZ_CHECK(rc == DUE_CRON_EINVAL && c == NULL && err[0] != '\0',
			   "'%s': rc %d, message '%s'", text, rc, err);
		memset(tiny, 'x',
		       sizeof tiny); /* must come back NUL-terminated */
		FUZZ_CHECK(due__cron_parse(&c, text, tiny, sizeof tiny) == rc &&
			       memchr(tiny, '\0', sizeof tiny) != NULL,
			   "'%s' with a short err buffer", text);
		goto done;
	}
	FUZZ_CHECK(strcmp(due__cron_text(c), text) == 0, "text '%s' of '%s'",
		   due__cron_text(c), text);
	due__cron_inspect(&f, c);
	FUZZ_CHECK(
	    due__cron_parse(&again, due__cron_text(c), err, sizeof err) == 0,
	    "'%s' does not parse again: %s", text, err);
	due__cron_inspect(&g, again);
	check_same_fields(&f, &g, text);
	for (size_t i = 0; i < sizeof afters / sizeof afters[0]; i++) {
		check_next(c, &f, NULL, afters[i]);
		check_next(c, &f, zone, afters[i]);
	}
	check_format(c, zone, afters[2]);
done:
	due__cron_free(c);
	due__cron_free(again);
	free(text);
	return 0;
}
