/*
** cron.c - parse cron expressions and compute their fire times.
**
** An expression becomes six bitmasks (second, minute, hour, day-of-month,
** month, day-of-week) and two flags saying whether the day fields start with
** '*' (Vixie cron's rule for combining them). The parsed object never changes
** afterwards, so threads may share it.
**
** Next fire time. The search runs on the zone's WALL CLOCK, where the calendar
** is plain arithmetic: from the wall time of `after`, find_local() moves
** forward field by field (month, day, hour, minute, second), jumping to the
** next set bit and carrying into the field above, until every field matches.
** Only the candidate it finds is turned into an instant, by due__tz_to_utc(),
** which maps a skipped wall time to the end of its gap and a repeated one to
** its first occurrence. That map never decreases, so:
**
**   - the first candidate whose instant is after `after` is the answer;
**   - candidates whose instant is not after `after` are skipped. This happens
**     only when `after` lies in the second pass of a repeated hour: the
**     wall times of that hour were already served by their first pass;
**   - several wall times that land on one instant (02:00, 02:15 ... in a
**     spring-forward gap and 03:00 itself) give one fire: after it fires,
**     `after` is that instant and they are all skipped.
**
** The search gives up after DUE_CRON_SEARCH_YEARS years of wall clock, so an
** expression that can never match ("0 0 30 2 *") ends with
** DUE_CRON_ENOTFOUND. Each step of find_local() moves to a later wall time and
** one year holds at most 12 * 31 * 24 * 60 of its restarts, so the work is
** bounded; in practice a call costs a few dozen steps.
**
** This file does no I/O, keeps no state and takes no locks; everything about
** time zones goes through tz.h, and its allocations through due__tz_malloc()
** (so tests can make any of them fail).
*/
#include "cron.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXPR 1024 /* longer expressions are refused */

/* tz errors are passed through unchanged, so the codes must agree. */
_Static_assert((int)DUE_CRON_EINVAL == (int)DUE_TZ_EINVAL &&
		   (int)DUE_CRON_EZONE == (int)DUE_TZ_EZONE &&
		   (int)DUE_CRON_ENOMEM == (int)DUE_TZ_ENOMEM &&
		   (int)DUE_CRON_ERANGE == (int)DUE_TZ_ERANGE,
	       "cron and tz error codes must agree");

enum { F_SECOND, F_MINUTE, F_HOUR, F_DOM, F_MONTH, F_DOW, NFIELDS };

/* Levels of a wall time, for bump(): most significant first. */
enum { L_YEAR, L_MONTH, L_DAY, L_HOUR, L_MINUTE, L_SECOND };

struct due_cron {
	uint64_t mask[NFIELDS];
	bool dom_star;
	bool dow_star;
	bool has_seconds;
	char *text;
};

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR",
					  "MAY", "JUN", "JUL", "AUG",
					  "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED",
					"THU", "FRI", "SAT"};

/* One field: its name in messages, its range, and its names (first = min). */
typedef struct field_spec {
	const char *name;
	int min;
	int max;
	const char *const *names;
	int nnames;
	const char *name_range;
} field_spec;

static const field_spec specs[NFIELDS] = {
    {"second", 0, 59, NULL, 0, NULL},
    {"minute", 0, 59, NULL, 0, NULL},
    {"hour", 0, 23, NULL, 0, NULL},
    {"day-of-month", 1, 31, NULL, 0, NULL},
    {"month", 1, 12, month_names, 12, "JAN-DEC"},
    {"day-of-week", 0, 7, day_names, 7, "SUN-SAT"},
};

static const struct macro {
	const char *name;
	const char *expansion;
} macros[] = {
    {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
    {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
    {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
** Copy n bytes of s (at most 48) into dst for a message: bytes that are not
** printable ASCII become '?', a cut is marked with "...". Returns dst.
*/
static const char *shown(char *dst, size_t dstlen, const char *s, size_t n)
{
	size_t i, k = 0;

	for (i = 0; i < n && i < 48 && k + 4 < dstlen; i++)
		dst[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (i < n)
		for (int j = 0; j < 3 && k + 1 < dstlen; j++)
			dst[k++] = '.';
	dst[k] = '\0';
	return dst;
}

static bool is_space(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' ||
	       ch == '\v' || ch == '\f';
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static bool is_alpha(char ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

static int upper(char ch)
{
	return ch >= 'a' && ch <= 'z' ? ch - 'a' + 'A' : ch;
}

/* --- parser --- */

/* What parse_item() is working on, for its messages. */
typedef struct item_ctx {
	const field_spec *spec;
	const char *item; /* the whole list item */
	size_t len;
	char *err;
	size_t errlen;
} item_ctx;

static int bad_char(const item_ctx *x, const char *p)
{
	char show[64], ch[8];

	if (*p >= 0x20 && *p < 0x7f)
		snprintf(ch, sizeof ch, "'%c'", *p);
	else
		snprintf(ch, sizeof ch, "0x%02x", (unsigned)(unsigned char)*p);
	seterr(x->err, x->errlen, "%s: unexpected character %s in '%s'",
	       x->spec->name, ch, shown(show, sizeof show, x->item, x->len));
	return DUE_CRON_EINVAL;
}

/*
** Parse one value (a number or, where the field has them, a name) at *pp,
** which must lie before end. Advances *pp past it. Returns 0 or
** DUE_CRON_EINVAL with the message written.
*/
static int parse_value(const item_ctx *x, const char **pp, const char *end,
		       int *out)
{
	const field_spec *f = x->spec;
	const char *p = *pp, *s = p;
	char show[64];
	long v = 0;

	if (p < end && is_digit(*p)) {
		for (; p < end && is_digit(*p); p++)
			v = v < 100000 ? v * 10 + (*p - '0') : v;
		if (v < f->min || v > f->max) {
			seterr(x->err, x->errlen,
			       "%s: %s is out of range %d-%d", f->name,
			       shown(show, sizeof show, s, (size_t)(p - s)),
			       f->min, f->max);
			return DUE_CRON_EINVAL;
		}
		*out = (int)v;
		*pp = p;
		return 0;
	}
	if (p >= end || !is_alpha(*p)) {
		if (p < end)
			return bad_char(x, p);
		seterr(x->err, x->errlen,
		       "%s: missing value at the end of '%s'", f->name,
		       shown(show, sizeof show, x->item, x->len));
		return DUE_CRON_EINVAL;
	}
	for (; p < end && is_alpha(*p); p++)
		;
	for (int i = 0; p - s == 3 && i < f->nnames; i++)
		if (upper(s[0]) == f->names[i][0] &&
		    upper(s[1]) == f->names[i][1] &&
		    upper(s[2]) == f->names[i][2]) {
			*out = f->min + i;
			*pp = p;
			return 0;
		}
	if (f->names == NULL)
		seterr(x->err, x->errlen,
		       "%s: invalid value '%s' (names are allowed only in "
		       "month and day-of-week)",
		       f->name, shown(show, sizeof show, s, (size_t)(p - s)));
	else
		seterr(x->err, x->errlen, "%s: unknown name '%s' (expected %s)",
		       f->name, shown(show, sizeof show, s, (size_t)(p - s)),
		       f->name_range);
	return DUE_CRON_EINVAL;
}

/* Parse the digits of a step at *pp into *out (capped), NULL-safe messages. */
static int parse_step(const item_ctx *x, const char **pp, const char *end,
		      int *out)
{
	const field_spec *f = x->spec;
	const char *p = *pp, *s = p;
	int span = f->max - f->min + 1;
	char show[64];
	long v = 0;

	if (p >= end) {
		seterr(x->err, x->errlen, "%s: missing step after '/' in '%s'",
		       f->name, shown(show, sizeof show, x->item, x->len));
		return DUE_CRON_EINVAL;
	}
	if (!is_digit(*p))
		return bad_char(x, p);
	for (; p < end && is_digit(*p); p++)
		v = v < 100000 ? v * 10 + (*p - '0') : v;
	if (v < 1 || v > span) {
		seterr(x->err, x->errlen, "%s: step %s is out of range 1-%d",
		       f->name, shown(show, sizeof show, s, (size_t)(p - s)),
		       span);
		return DUE_CRON_EINVAL;
	}
	*out = (int)v;
	*pp = p;
	return 0;
}

/*
** Parse one list item - "*", "N", "A-B", each with an optional "/STEP", or
** "N/STEP" meaning N to the maximum - and add its values to *mask.
*/
static int parse_item(const item_ctx *x, uint64_t *mask)
{
	const field_spec *f = x->spec;
	const char *p = x->item, *end = x->item + x->len;
	int lo, hi, step = 1, rc;
	bool single = false;
	char show[64];

	if (*p == '*') {
		lo = f->min, hi = f->max, p++;
	} else {
		if ((rc = parse_value(x, &p, end, &lo)) < 0)
			return rc;
		hi = lo, single = true;
		if (p < end && *p == '-') {
			p++, single = false;
			if ((rc = parse_value(x, &p, end, &hi)) < 0)
				return rc;
		}
	}
	if (p < end && *p == '/') {
		p++;
		if ((rc = parse_step(x, &p, end, &step)) < 0)
			return rc;
		if (single)
			hi = f->max;
	}
	if (p < end)
		return bad_char(x, p);
	if (lo > hi) {
		seterr(x->err, x->errlen, "%s: range %s is reversed (%d > %d)",
		       f->name, shown(show, sizeof show, x->item, x->len), lo,
		       hi);
		return DUE_CRON_EINVAL;
	}
	for (int v = lo; v <= hi; v += step)
		*mask |= UINT64_C(1) << v;
	return 0;
}

/* Parse one whitespace-free field of n bytes at s into *mask. */
static int parse_field(const field_spec *f, const char *s, size_t n,
		       uint64_t *mask, char *err, size_t errlen)
{
	const char *end = s + n, *p = s;
	char show[64];
	int rc;

	*mask = 0;
	for (;;) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		item_ctx x = {f, p, (size_t)((comma ? comma : end) - p), err,
			      errlen};

		if (x.len == 0) {
			seterr(err, errlen, "%s: empty list item in '%s'",
			       f->name, shown(show, sizeof show, s, n));
			return DUE_CRON_EINVAL;
		}
		if ((rc = parse_item(&x, mask)) < 0)
			return rc;
		if (comma == NULL)
			return 0;
		p = comma + 1;
	}
}

/* Find the macro named by the n bytes at s (any case); NULL if none. */
static const char *find_macro(const char *s, size_t n)
{
	for (size_t i = 0; i < sizeof macros / sizeof macros[0]; i++) {
		size_t k = 0;

		if (strlen(macros[i].name) != n)
			continue;
		while (k < n && upper(s[k]) == upper(macros[i].name[k]))
			k++;
		if (k == n)
			return macros[i].expansion;
	}
	return NULL;
}

/*
** Split expr into fields and parse them into c. Returns 0 or DUE_CRON_EINVAL
** with the message written.
*/
static int parse_fields(due_cron *c, const char *expr, char *err, size_t errlen)
{
	const char *tok[7];
	size_t len[7], n = 0, first;
	const char *p = expr;
	char show[64];
	int rc;

	while (*p != '\0') {
		const char *s;

		while (is_space(*p))
			p++;
		if (*p == '\0')
			break;
		for (s = p; *p != '\0' && !is_space(*p); p++)
			;
		if (n < 7)
			tok[n] = s, len[n] = (size_t)(p - s);
		n++;
	}
	if (n > 1 && tok[0][0] == '@') {
		seterr(err, errlen, "macro '%s' must be the whole expression",
		       shown(show, sizeof show, tok[0], len[0]));
		return DUE_CRON_EINVAL;
	}
	if (n == 1 && tok[0][0] == '@') {
		const char *exp = find_macro(tok[0], len[0]);

		if (exp == NULL) {
			seterr(err, errlen,
			       "unknown macro '%s' (expected @yearly, "
			       "@annually, @monthly, "
			       "@weekly, @daily, @midnight or @hourly)",
			       shown(show, sizeof show, tok[0], len[0]));
			return DUE_CRON_EINVAL;
		}
		return parse_fields(c, exp, err, errlen);
	}
	if (n != 5 && n != 6) {
		seterr(err, errlen,
		       n == 0 ? "empty expression"
			      : "expected 5 fields (minute hour day-of-month "
				"month day-of-week) "
				"or 6 (with a leading second), got %zu",
		       n);
		return DUE_CRON_EINVAL;
	}
	c->has_seconds = n == 6;
	first = c->has_seconds ? F_SECOND : F_MINUTE;
	c->mask[F_SECOND] = 1; /* five fields: second 0 */
	for (size_t i = 0; i < n; i++)
		if ((rc = parse_field(&specs[first + i], tok[i], len[i],
				      &c->mask[first + i], err, errlen)) < 0)
			return rc;
	if (c->mask[F_DOW] & UINT64_C(1) << 7) /* 7 is Sunday too */
		c->mask[F_DOW] = (c->mask[F_DOW] & ~(UINT64_C(1) << 7)) | 1;
	c->dom_star = tok[n - 3][0] == '*';
	c->dow_star = tok[n - 1][0] == '*';
	return 0;
}

int due__cron_parse(due_cron **out, const char *expr, char *err, size_t errlen)
{
	due_cron *c;
	size_t n;
	int rc;

	if (out == NULL || expr == NULL) {
		seterr(err, errlen, "empty expression");
		return DUE_CRON_EINVAL;
	}
	*out = NULL;
	if ((n = strlen(expr)) > MAX_EXPR) {
		seterr(err, errlen,
		       "expression too long (%zu bytes, at most %d)", n,
		       MAX_EXPR);
		return DUE_CRON_EINVAL;
	}
	if ((c = due__tz_malloc(sizeof *c)) != NULL)
		memset(c, 0, sizeof *c);
	if (c == NULL || (c->text = due__tz_malloc(n + 1)) == NULL) {
		free(c);
		seterr(err, errlen, "out of memory");
		return DUE_CRON_ENOMEM;
	}
	memcpy(c->text, expr, n + 1);
	if ((rc = parse_fields(c, expr, err, errlen)) < 0) {
		due__cron_free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void due__cron_free(due_cron *c)
{
	if (c == NULL)
		return;
	free(c->text);
	free(c);
}

const char *due__cron_text(const due_cron *c) { return c->text; }

void due__cron_inspect(due_cron_fields *out, const due_cron *c)
{
	out->second = c->mask[F_SECOND];
	out->minute = c->mask[F_MINUTE];
	out->hour = c->mask[F_HOUR];
	out->dom = c->mask[F_DOM];
	out->month = c->mask[F_MONTH];
	out->dow = c->mask[F_DOW];
	out->dom_star = c->dom_star;
	out->dow_star = c->dow_star;
	out->has_seconds = c->has_seconds;
}

/* --- next fire time --- */

/* The smallest value >= from in mask, or -1. */
static int next_bit(uint64_t mask, int from)
{
	mask &= ~UINT64_C(0) << from;
	if (mask == 0)
		return -1;
#if defined(__GNUC__)
	return __builtin_ctzll(mask);
#else
	for (int v = from;; v++)
		if (mask & UINT64_C(1) << v)
			return v;
#endif
}

/* Vixie cron: both day fields restricted -> either matches; else both. */
static bool day_matches(const due_cron *c, int y, int m, int d)
{
	bool dom = c->mask[F_DOM] >> d & 1;
	bool dow = c->mask[F_DOW] >> due__tz_weekday(y, m, d) & 1;

	return (c->dom_star || c->dow_star) ? dom && dow : dom || dow;
}

/* The first matching day >= t->day in t's month, or -1. */
static int next_day(const due_cron *c, const due_tz_civil *t)
{
	int dim = due__tz_days_in_month(t->year, t->month);

	for (int d = t->day; d <= dim; d++)
		if (day_matches(c, t->year, t->month, d))
			return d;
	return -1;
}

/* Add one at `level` of t, zero everything below it, carry upward. */
static void bump(due_tz_civil *t, int level)
{
	if (level == L_SECOND && ++t->second <= 59)
		return;
	t->second = 0;
	if (level >= L_MINUTE && ++t->minute <= 59)
		return;
	t->minute = 0;
	if (level >= L_HOUR && ++t->hour <= 23)
		return;
	t->hour = 0;
	if (level >= L_DAY &&
	    ++t->day <= due__tz_days_in_month(t->year, t->month))
		return;
	t->day = 1;
	if (level >= L_MONTH && ++t->month <= 12)
		return;
	t->month = 1;
	t->year++;
}

/*
** Move t forward to the first wall time >= t that matches every field.
** Returns 0, or DUE_CRON_ENOTFOUND once t passes the end of year ylimit.
*/
static int find_local(const due_cron *c, due_tz_civil *t, int ylimit)
{
	int v;

	while (t->year <= ylimit) {
		if ((v = next_bit(c->mask[F_MONTH], t->month)) < 0) {
			bump(t, L_YEAR);
			continue;
		}
		if (v != t->month)
			*t = (due_tz_civil){t->year, v, 1, 0, 0, 0};
		if ((v = next_day(c, t)) < 0) {
			bump(t, L_MONTH);
			continue;
		}
		if (v != t->day)
			t->day = v, t->hour = t->minute = t->second = 0;
		if ((v = next_bit(c->mask[F_HOUR], t->hour)) < 0) {
			bump(t, L_DAY);
			continue;
		}
		if (v != t->hour)
			t->hour = v, t->minute = t->second = 0;
		if ((v = next_bit(c->mask[F_MINUTE], t->minute)) < 0) {
			bump(t, L_HOUR);
			continue;
		}
		if (v != t->minute)
			t->minute = v, t->second = 0;
		if ((v = next_bit(c->mask[F_SECOND], t->second)) < 0) {
			bump(t, L_MINUTE);
			continue;
		}
		t->second = v;
		return 0;
	}
	return DUE_CRON_ENOTFOUND;
}

int due__cron_next(const due_cron *c, const due_tz *zone, int64_t after_utc_sec,
		   int64_t *out_utc_sec)
{
	due_tz_civil t;
	int64_t u;
	int rc, ylimit;

	if (c == NULL || out_utc_sec == NULL)
		return DUE_CRON_EINVAL;
	if ((rc = due__tz_to_local(zone, after_utc_sec, &t)) < 0)
		return rc;
	ylimit = t.year + DUE_CRON_SEARCH_YEARS > 9999
		     ? 9999
		     : t.year + DUE_CRON_SEARCH_YEARS;
	/* Candidates after the wall time of `after`; see the note at the top.
	 */
	for (bump(&t, L_SECOND);; bump(&t, L_SECOND)) {
		if ((rc = find_local(c, &t, ylimit)) < 0)
			return rc;
		if ((rc = due__tz_to_utc(zone, &t, &u)) < 0)
			return rc;
		if (u > after_utc_sec) {
			if (u > DUE_TZ_MAX_UTC)
				return DUE_CRON_ENOTFOUND;
			*out_utc_sec = u;
			return 0;
		}
	}
}

int due__cron_next_n(int64_t *out, size_t n, size_t *out_count,
		     const due_cron *c, const due_tz *zone,
		     int64_t after_utc_sec)
{
	size_t i;
	int rc = 0;

	if ((out == NULL && n > 0) || out_count == NULL)
		return DUE_CRON_EINVAL;
	for (i = 0; i < n; i++) {
		if ((rc = due__cron_next(c, zone, after_utc_sec, &out[i])) < 0)
			break;
		after_utc_sec = out[i];
	}
	*out_count = i;
	return rc;
}

/* --- output --- */

int due__cron_format_time(char *buf, size_t buflen, int64_t utc_sec,
			  unsigned flags)
{
	due_tz_civil t;
	int n;

	if (buf == NULL || buflen == 0)
		return DUE_CRON_ERANGE;
	buf[0] = '\0';
	if (due__tz_to_local(NULL, utc_sec, &t) < 0)
		return DUE_CRON_ERANGE;
	n = snprintf(buf, buflen, "%04d-%02d-%02dT%02d:%02d:%02d%sZ", t.year,
		     t.month, t.day, t.hour, t.minute, t.second,
		     (flags & DUE_CRON_FMT_MILLIS) ? ".000" : "");
	if (n < 0 || (size_t)n >= buflen) {
		buf[0] = '\0';
		return DUE_CRON_ERANGE;
	}
	return 0;
}

/* Write the message for a due__cron_next() failure at `after`; return rc. */
static int next_failed(const due_cron *c, int64_t after, int rc, char *err,
		       size_t errlen)
{
	char when[32], show[64];

	if (rc != DUE_CRON_ENOTFOUND) {
		seterr(err, errlen, "%s", due__cron_strerror(rc));
		return rc;
	}
	due__cron_format_time(when, sizeof when, after, 0);
	seterr(err, errlen, "'%s' does not fire after %s within %d years",
	       shown(show, sizeof show, c->text, strlen(c->text)), when,
	       DUE_CRON_SEARCH_YEARS);
	return rc;
}

int due__cron_format_next(char *buf, size_t buflen, const due_cron *c,
			  const due_tz *zone, int64_t after_utc_sec,
			  size_t count, unsigned flags, char *err,
			  size_t errlen)
{
	char line[32];
	size_t used = 0, n;
	int64_t u;
	int rc;

	if (buf == NULL || buflen == 0 || c == NULL) {
		seterr(err, errlen, "missing argument");
		return DUE_CRON_EINVAL;
	}
	buf[0] = '\0';
	for (size_t i = 0; i < count; i++, after_utc_sec = u) {
		if ((rc = due__cron_next(c, zone, after_utc_sec, &u)) < 0)
			return next_failed(c, after_utc_sec, rc, err, errlen);
		if ((rc = due__cron_format_time(line, sizeof line, u, flags)) <
		    0)
			return next_failed(c, after_utc_sec, rc, err, errlen);
		if (used + (n = strlen(line)) + 2 > buflen) {
			seterr(err, errlen,
			       "output buffer of %zu bytes too small for %zu "
			       "lines",
			       buflen, count);
			return DUE_CRON_ERANGE;
		}
		memcpy(buf + used, line, n);
		used += n;
		buf[used++] = '\n';
		buf[used] = '\0';
	}
	return 0;
}

const char *due__cron_strerror(int code)
{
	switch (code) {
	case 0: return "success";
	case DUE_CRON_EINVAL: return "invalid argument";
	case DUE_CRON_EZONE: return "unknown time zone";
	case DUE_CRON_ENOMEM: return "out of memory";
	case DUE_CRON_ENOTFOUND: return "no fire time within the search window";
	case DUE_CRON_ERANGE: return "time out of range or buffer too small";
	default: return "unknown error";
	}
}
