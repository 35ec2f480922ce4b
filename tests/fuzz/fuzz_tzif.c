/*
** fuzz_tzif.c - due__tz_from_tzif() and the conversions of src/cron/tz.h.
**
** The input is the raw bytes of a TZif file. Loading it gives 0 or one of the
** header's codes. When it loads, every instant of a spread (the supported
** range's ends, 1900-2100 in uneven steps, and both sides of each offset
** change the spread reveals, found by bisection) is checked against what
** tz.h promises:
**
**   - due__tz_offset() and due__tz_to_local() succeed, and the wall time lies
**     in the years 1..9999 with every field in range;
**   - due__tz_to_utc() maps that wall time back to an instant no later than the
**     original one (a repeated wall time maps to its FIRST occurrence), where
**     the zone shows that same wall time, or, when the wall time was skipped
**     before, to the first instant after that gap (an offset change);
**   - the mapping never decreases: the wall time one second later maps to an
**     instant no earlier.
**
** An exact round trip for wall times outside any gap or repeat is not asserted
** separately: with arbitrary zone data a wall time that occurs once may have
** been skipped by an earlier gap, and tz.h maps it to that gap's end. Where no
** change is near, the two rules above already force the exact instant. Last,
** one cron expression is run in the zone to see that its search ends.
*/
#include <stdbool.h>

#include "cron/cron.h"
#include "cron/tz.h"
#include "fuzz.h"

#define MAX_POINTS 400

/* The wall time one second after t (t is valid; carries into the year). */
static due_tz_civil next_second(due_tz_civil t)
{
	if (++t.second < 60)
		return t;
	t.second = 0;
	if (++t.minute < 60)
		return t;
	t.minute = 0;
	if (++t.hour < 24)
		return t;
	t.hour = 0;
	if (++t.day <= due__tz_days_in_month(t.year, t.month))
		return t;
	t.day = 1;
	if (++t.month <= 12)
		return t;
	t.month = 1;
	t.year++;
	return t;
}

static bool same_civil(const due_tz_civil *a, const due_tz_civil *b)
{
	return a->year == b->year && a->month == b->month && a->day == b->day &&
	       a->hour == b->hour && a->minute == b->minute &&
	       a->second == b->second;
}

static int cmp_civil(const due_tz_civil *a, const due_tz_civil *b)
{
	const int x[] = {a->year, a->month,  a->day,
			 a->hour, a->minute, a->second};
	const int y[] = {b->year, b->month,  b->day,
			 b->hour, b->minute, b->second};

	for (int i = 0; i < 6; i++)
		if (x[i] != y[i])
			return x[i] < y[i] ? -1 : 1;
	return 0;
}

static int32_t offset_at(const due_tz *tz, int64_t u)
{
	int32_t off;

	FUZZ_CHECK(due__tz_offset(tz, u, &off) == 0, "no offset at %lld",
		   (long long)u);
	return off;
}

/* Check the instant u as the header comment says. */
static void check_instant(const due_tz *tz, int64_t u)
{
	due_tz_civil lt, back, later;
	int64_t v, w;

	if (u < DUE_TZ_MIN_UTC || u > DUE_TZ_MAX_UTC)
		return;
	offset_at(tz, u);
	FUZZ_CHECK(due__tz_to_local(tz, u, &lt) == 0, "no wall time at %lld",
		   (long long)u);
	FUZZ_CHECK(lt.year >= 1 && lt.year <= 9999 && lt.month >= 1 &&
		       lt.month <= 12 && lt.day >= 1 &&
		       lt.day <= due__tz_days_in_month(lt.year, lt.month) &&
		       lt.hour >= 0 && lt.hour <= 23 && lt.minute >= 0 &&
		       lt.minute <= 59 && lt.second >= 0 && lt.second <= 59,
		   "%lld shows %d-%d-%d %d:%d:%d", (long long)u, lt.year,
		   lt.month, lt.day, lt.hour, lt.minute, lt.second);
	FUZZ_CHECK(due__tz_to_utc(tz, &lt, &v) == 0,
		   "wall time of %lld has no instant", (long long)u);
	FUZZ_CHECK(v <= u, "wall time of %lld maps to the later %lld",
		   (long long)u, (long long)v);
	if (v >= DUE_TZ_MIN_UTC) {
		FUZZ_CHECK(due__tz_to_local(tz, v, &back) == 0,
			   "no wall time at %lld", (long long)v);
		FUZZ_CHECK(same_civil(&back, &lt) ||
			       (cmp_civil(&back, &lt) > 0 &&
				v > DUE_TZ_MIN_UTC &&
				offset_at(tz, v - 1) != offset_at(tz, v)),
			   "wall time of %lld maps to %lld, neither an "
			   "occurrence nor a gap's end",
			   (long long)u, (long long)v);
	}
	later = next_second(lt);
	if (later.year <= 9999) {
		FUZZ_CHECK(due__tz_to_utc(tz, &later, &w) == 0,
			   "no instant after %lld", (long long)u);
		FUZZ_CHECK(
		    w >= v,
		    "to_utc decreases after the wall time of %lld: %lld, %lld",
		    (long long)u, (long long)v, (long long)w);
	}
}

/* An instant in (lo, hi] where the offset differs from the one at lo. */
static int64_t bisect(const due_tz *tz, int64_t lo, int64_t hi)
{
	int32_t off = offset_at(tz, lo);

	while (hi - lo > 1) {
		int64_t mid = lo + (hi - lo) / 2;

		if (offset_at(tz, mid) == off)
			lo = mid;
		else
			hi = mid;
	}
	return hi;
}

static size_t spread(int64_t *pts)
{
	size_t n = 0;

	pts[n++] = DUE_TZ_MIN_UTC;
	pts[n++] = DUE_TZ_MIN_UTC + 1;
	for (int64_t u = -2208988800;
	     u < 4102444800 && n < MAX_POINTS - 4; /* 1900-2100 */
	     u += 7919 * 3600 + 17)
		pts[n++] = u;
	pts[n++] = 0;
	pts[n++] = INT32_MAX; /* where 32-bit times end */
	pts[n++] = DUE_TZ_MAX_UTC - 1;
	pts[n++] = DUE_TZ_MAX_UTC;
	return n;
}

static void check_zone(const due_tz *tz)
{
	static int64_t pts[MAX_POINTS];
	size_t n = spread(pts);
	due_cron *c;
	int64_t fire;
	int rc;

	for (size_t i = 0; i < n; i++) {
		check_instant(tz, pts[i]);
		if (i > 0 && pts[i] > pts[i - 1] &&
		    offset_at(tz, pts[i - 1]) != offset_at(tz, pts[i])) {
			int64_t t = bisect(tz, pts[i - 1], pts[i]);

			check_instant(tz, t - 1);
			check_instant(tz, t);
		}
	}
	if (due__cron_parse(&c, "30 2 * * *", NULL, 0) != 0)
		abort();
	for (int64_t after = 1700000000; after < 1800000000;
	     after += 30000000) {
		rc = due__cron_next(c, tz, after, &fire);
		FUZZ_CHECK(rc == DUE_CRON_ENOTFOUND ||
			       (rc == 0 && fire > after),
			   "cron in the zone after %lld: rc %d, %lld",
			   (long long)after, rc, (long long)fire);
	}
	due__cron_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[96];
	due_tz *tz = NULL;
	int rc;

	err[0] = '\0';
	rc = due__tz_from_tzif(&tz, "Fuzz/Zone", data, size, err, sizeof err);
	if (rc != 0) {
		FUZZ_CHECK((rc == DUE_TZ_EZONE || rc == DUE_TZ_ENOMEM) &&
			       tz == NULL && err[0] != '\0',
			   "load: rc %d, message '%s'", rc, err);
		return 0;
	}
	FUZZ_CHECK(strcmp(due__tz_name(tz), "Fuzz/Zone") == 0, "name '%s'",
		   due__tz_name(tz));
	check_zone(tz);
	due__tz_free(tz);
	return 0;
}
