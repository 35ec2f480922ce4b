/*
** time.c - durations, RFC 3339 times, the host clock and the backoff rule.
**
** All times inside `due` are microseconds since the Unix epoch, UTC.  Text
** forms are the ones INTERFACE.md fixes: durations like "250ms", "1h30m";
** times in RFC 3339 with an explicit offset; output in UTC with milliseconds.
** Parsers accept only what they fully understand: a trailing character, a
** missing unit, a value out of range or an overflow is an error that names
** the text, never a silent truncation.
*/
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/base.h"

#define US_PER_MS 1000LL
#define US_PER_S 1000000LL
#define MAX_DURATION_US (100LL * 366 * 86400 * US_PER_S) /* ~100 years */

/* Multiplier for a duration unit at *p; advances *p.  0 when unknown. */
static int64_t unit_us(const char **p)
{
	static const struct {
		const char *name;
		int64_t us;
	} units[] = {{"ms", US_PER_MS},	     {"us", 1},
		     {"s", US_PER_S},	     {"m", 60 * US_PER_S},
		     {"h", 3600 * US_PER_S}, {"d", 86400 * US_PER_S}};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t n = strlen(units[i].name);
		if (strncmp(*p, units[i].name, n) == 0) {
			*p += n;
			return units[i].us;
		}
	}
	return 0;
}

int due_duration_parse(int64_t *out_us, const char *text)
{
	const char *p = text;
	int64_t total = 0;

	if (!text || !*text)
		return due__error_set(DUE_EINVAL, "invalid duration '': empty");
	if (*text == '-')
		return due__error_set(
		    DUE_EINVAL,
		    "invalid duration '%s': negative durations are not allowed",
		    text);
	if (strcmp(text, "0") == 0) {
		*out_us = 0;
		return 0;
	}
	while (*p) {
		int64_t v = 0, mul;
		if (!isdigit((unsigned char)*p))
			return due__error_set(
			    DUE_EINVAL,
			    "invalid duration '%s': expected a number at '%s'"
			    " (use e.g. 250ms, 10s, 30m, 2h, 1d, 1h30m)",
			    text, p);
		while (isdigit((unsigned char)*p)) {
			if (v > (MAX_DURATION_US - 9) / 10)
				return due__error_set(
				    DUE_EINVAL,
				    "invalid duration '%s': too large", text);
			v = v * 10 + (*p++ - '0');
		}
		mul = unit_us(&p);
		if (mul == 0)
			return due__error_set(
			    DUE_EINVAL,
			    "invalid duration '%s': missing or unknown unit"
			    " (ms, s, m, h, d)",
			    text);
		if (v > (MAX_DURATION_US - total) / mul)
			return due__error_set(
			    DUE_EINVAL,
			    "invalid duration '%s': more than 100 years", text);
		total += v * mul;
	}
	*out_us = total;
	return 0;
}

void due_duration_format(char *buf, size_t len, int64_t us)
{
	static const struct {
		const char *u;
		int64_t v;
	} parts[] = {{"d", 86400 * US_PER_S}, {"h", 3600 * US_PER_S},
		     {"m", 60 * US_PER_S},    {"s", US_PER_S},
		     {"ms", US_PER_MS},	      {"us", 1}};
	size_t off = 0;

	if (len == 0)
		return;
	buf[0] = '\0';
	if (us <= 0) {
		snprintf(buf, len, "0s");
		return;
	}
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]) && us; i++) {
		int64_t n = us / parts[i].v;
		if (n == 0)
			continue;
		us -= n * parts[i].v;
		int w = snprintf(buf + off, len - off, "%lld%s", (long long)n,
				 parts[i].u);
		if (w < 0 || (size_t)w >= len - off)
			return;
		off += (size_t)w;
	}
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	unsigned yoe = (unsigned)(y - era * 400);
	unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + (int64_t)doe - 719468;
}

static int days_in_month(int y, int m)
{
	static const int dm[] = {31, 28, 31, 30, 31, 30,
				 31, 31, 30, 31, 30, 31};
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : dm[m - 1];
}

/* Read exactly n digits at *p into *out; advances.  false if not digits. */
static bool digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)(*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

static int bad_time(const char *text, const char *why)
{
	return due__error_set(
	    DUE_EINVAL,
	    "invalid time '%s': %s (expected RFC 3339, e.g. "
	    "2026-12-01T02:00:00Z or 2026-12-01T10:00:00+08:00)",
	    text, why);
}

/* Parse the offset part ("Z" or "+HH:MM") into seconds east of UTC. */
static int parse_offset(const char *text, const char *p, int64_t *off)
{
	int oh, om;

	if (*p == 'Z' || *p == 'z') {
		*off = 0;
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1;
		if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om))
			return bad_time(text, "bad UTC offset");
		if (oh > 23 || om > 59)
			return bad_time(text, "UTC offset out of range");
		*off = sign * (oh * 3600 + om * 60);
	} else {
		return bad_time(text, "missing UTC offset (Z or +HH:MM)");
	}
	if (*p)
		return bad_time(text, "trailing characters");
	return 0;
}

int due_time_parse(due_time *out, const char *text)
{
	const char *p = text;
	int Y, M, D, h, mi, s;
	int64_t frac_us = 0, off = 0;
	int rc;

	if (!text || !*text)
		return bad_time("", "empty");
	if (!digits(&p, 4, &Y) || *p++ != '-' || !digits(&p, 2, &M) ||
	    *p++ != '-' || !digits(&p, 2, &D))
		return bad_time(text, "bad date");
	if (*p != 'T' && *p != 't' && *p != ' ')
		return bad_time(text, "missing 'T' between date and time");
	p++;
	if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi) ||
	    *p++ != ':' || !digits(&p, 2, &s))
		return bad_time(text, "bad time of day");
	if (*p == '.') {
		int64_t scale = 100000;
		p++;
		if (!isdigit((unsigned char)*p))
			return bad_time(text, "empty fraction of a second");
		for (; isdigit((unsigned char)*p); p++, scale /= 10)
			frac_us += (*p - '0') * scale;
	}
	if ((rc = parse_offset(text, p, &off)) < 0)
		return rc;
	/* 1969 may still be 1970 in UTC (1969-12-31T23:00:00-01:00); the
	   instant itself is checked below */
	if (Y < 1969)
		return bad_time(text, "before 1970-01-01T00:00:00Z");
	if (Y > 9999 || M < 1 || M > 12)
		return bad_time(text, "year or month out of range");
	if (D < 1 || D > days_in_month(Y, M))
		return bad_time(text, "day out of range for that month");
	if (h > 23 || mi > 59 || s > 59)
		return bad_time(text, "hour, minute or second out of range");
	int64_t secs = days_from_civil(Y, (unsigned)M, (unsigned)D) * 86400 +
		       h * 3600 + mi * 60 + s - off;
	if (secs < 0)
		return bad_time(text, "before 1970-01-01T00:00:00Z");
	/* the fields are in range, but an offset can still push the instant
	   past what RFC 3339 (four-digit years) can write back */
	if (secs > 253402300799LL)
		return bad_time(text, "after 9999-12-31T23:59:59Z");
	*out = secs * US_PER_S + frac_us;
	return 0;
}

void due_time_format(char *buf, size_t len, due_time t)
{
	time_t secs = (time_t)(t / US_PER_S);
	int64_t ms = (t % US_PER_S) / US_PER_MS;
	struct tm tm;

	if (t < 0) {
		secs = 0;
		ms = 0;
	}
	gmtime_r(&secs, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
		 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		 tm.tm_min, tm.tm_sec, (int)ms);
}

due_time due_time_now_host(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (due_time)ts.tv_sec * US_PER_S + ts.tv_nsec / 1000;
}

int64_t due_backoff_us(int64_t base_us, int64_t cap_us, int32_t attempt)
{
	int64_t d = base_us;

	if (base_us <= 0)
		return 0;
	for (int32_t i = 1; i < attempt; i++) {
		if (d >= cap_us || d > INT64_MAX / 2)
			return cap_us;
		d *= 2;
	}
	return d < cap_us ? d : cap_us;
}

/* The monotonic clock in microseconds: paces local waits (never due time). */
int64_t due__mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
