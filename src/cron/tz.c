/*
** tz.c - IANA time zones read from the system's TZif files.
**
** This is the only file of the cron engine that knows where time-zone rules
** come from. A zone is loaded once, by due__tz_open(), from the compiled zone
** database the operating system keeps up to date ($TZDIR, else
** /usr/share/zoneinfo; the format is RFC 8536). After that it is a read-only
** table: a list of transition instants with the UTC offset that starts at
** each, and the POSIX TZ rule (the file's footer, e.g.
** "CET-1CEST,M3.5.0,M10.5.0/3") that generates transitions after the last one
** listed. No TZ variable, no tzset(), and no global state that changes a
** result (two counters serve the tests: files read, and an allocation failure
** to inject): any number of threads may read one zone at once.
**
** Why not ICU: ICU carries its own copy of the rules, updated only with ICU,
** while the system's zone files are updated by the distribution. On Debian 12,
** ICU 72.1 still has tzdata 2022e (`icuinfo`) while the tzdata package had
** reached 2025b when this was written (/usr/share/zoneinfo/tzdata.zi). ICU 72.1
** therefore puts Asia/Almaty at +06 in 2026 (Kazakhstan moved to +05 in 2024)
** and still applies DST to Mexico (abolished in late 2022). A scheduler that
** fires an hour early for a whole country is worse than one more small
** reader; docs/internals/cron.md has the details.
**
** The one idea: the zone is a sequence of "periods" [start, end) of constant
** offset. period_at() finds the period holding an instant, from the table or
** from the rule. Local -> UTC walks the periods near the wall time in order;
** the first period whose wall-clock range holds the wall time gives the
** answer (so a repeated time resolves to its first occurrence), and a period
** whose wall-clock range starts after it means the wall time fell into a
** gap, whose first valid instant is that period's start.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* open, fstat, read */
#endif

#include "tz.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_OFFSET                                                             \
	(26 * 3600)	   /* |UT offset| stays below this (RFC 8536 3.2)      \
			    */
#define MAX_FILE (1 << 20) /* real TZif files are < 4 KiB */
#define MAX_NAME 255
#define MAX_TIMES 100000
#define DAY 86400

/* A date of a POSIX TZ rule and the local time of day the change happens. */
typedef struct rule_date {
	char kind; /* 'J': Julian day a (1-365, Feb 29 never counted);
		    * 'N': zero-based day a (0-365); 'M': month a, week b (5 =
		    * last), weekday c */
	int a, b, c;
	int32_t secs; /* local time of day, may be negative or >24h */
} rule_date;

/* A POSIX TZ rule such as "EST5EDT,M3.2.0,M11.1.0", offsets east-positive. */
typedef struct posix_rule {
	int32_t std_off;
	int32_t dst_off;
	bool has_dst;
	rule_date start; /* change to DST, in standard time */
	rule_date end;	 /* change back, in daylight time */
} posix_rule;

struct due_tz {
	char *name;
	size_t ntrans;
	int64_t *trans;	   /* transition instants, strictly increasing */
	int32_t *off;	   /* off[i] is in force from trans[i] to trans[i+1] */
	int32_t first_off; /* in force before trans[0] (local time type 0) */
	bool has_rule;
	posix_rule rule; /* in force from trans[ntrans-1] on, when has_rule */
};

/* A stretch of time [start, end) with one offset. */
typedef struct period {
	int64_t start;
	int64_t end;
	int32_t off;
} period;

/* The test counters (tz.h): any thread, lock-free. */
static atomic_long fail_countdown; /* > 0: the call that takes it to 0 fails */
static atomic_ulong files_read;

void *due__tz_malloc(size_t n)
{
	long left = atomic_load_explicit(&fail_countdown, memory_order_relaxed);

	while (left > 0 &&
	       !atomic_compare_exchange_weak(&fail_countdown, &left, left - 1))
		;
	return left == 1 ? NULL : malloc(n);
}

void due__tz_fail_alloc(long nth)
{
	atomic_store(&fail_countdown, nth > 0 ? nth : 0);
}

unsigned long due__tz_files_read(void) { return atomic_load(&files_read); }

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
** Copy at most 64 bytes of s into dst for an error message, replacing bytes
** that are not printable ASCII with '?', and marking a cut with "...".
*/
static const char *shown(char *dst, size_t dstlen, const char *s)
{
	size_t i, n = 0;

	for (i = 0; s[i] != '\0' && n + 4 < dstlen && i < 64; i++)
		dst[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (s[i] != '\0')
		for (int k = 0; k < 3 && n + 1 < dstlen; k++)
			dst[n++] = '.';
	dst[n] = '\0';
	return dst;
}

/* --- calendar arithmetic (H. Hinnant's algorithms, proleptic Gregorian) --- */

int64_t due__tz_days_from_civil(int64_t y, int m, int d)
{
	int64_t era, yoe, doy, doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

static bool is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int due__tz_days_in_month(int64_t y, int m)
{
	static const int len[12] = {31, 28, 31, 30, 31, 30,
				    31, 31, 30, 31, 30, 31};

	if (m < 1 || m > 12)
		return 0;
	return len[m - 1] + (m == 2 && is_leap(y));
}

int due__tz_weekday(int64_t y, int m, int d)
{
	int64_t w =
	    (due__tz_days_from_civil(y, m, d) + 4) % 7; /* 1970-01-01: Thu */

	return (int)(w < 0 ? w + 7 : w);
}

static int64_t floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* --- POSIX TZ rules (the TZif footer) --- */

/*
** The first day (days since the epoch) of rule date d in year y, plus its
** local time, minus the offset in force before the change: the UTC instant.
*/
static int64_t rule_instant(const rule_date *d, int64_t y, int32_t off_before)
{
	int64_t day = due__tz_days_from_civil(y, 1, 1);

	if (d->kind == 'J') {
		day += d->a - 1 + (is_leap(y) && d->a >= 60);
	} else if (d->kind == 'N') {
		day += d->a;
	} else {
		int first = due__tz_weekday(y, d->a, 1);
		int md = 1 + (d->c - first + 7) % 7 + 7 * (d->b - 1);

		while (md > due__tz_days_in_month(y, d->a))
			md -= 7;
		day = due__tz_days_from_civil(y, d->a, md);
	}
	return day * DAY + d->secs - off_before;
}

/*
** The period of the rule holding instant u.  The changes of two years
** either side of u's year are listed in order: a change may fall days
** outside its nominal year, so with one year either side the end of DST of
** year y-1 could land after the start of year y's and the offset at u would
** depend on the list (found by fuzz_tzif).  A stable sort keeps "end of DST
** in year y" before "start of DST in year y+1" when a zone is on DST all
** year and both fall on one instant; the last change at or before u gives
** the offset.
*/
static void rule_period(const posix_rule *r, int64_t u, period *p)
{
	struct change {
		int64_t at;
		int32_t off;
	} ch[10], tmp;
	int64_t y;
	int mo, dd, n = 0, i, j;

	*p = (period){INT64_MIN, INT64_MAX, r->std_off};
	if (!r->has_dst)
		return;
	civil_from_days(floor_div(u, DAY), &y, &mo, &dd);
	for (int64_t yy = y - 2; yy <= y + 2; yy++) {
		ch[n++] = (struct change){
		    rule_instant(&r->start, yy, r->std_off), r->dst_off};
		ch[n++] = (struct change){rule_instant(&r->end, yy, r->dst_off),
					  r->std_off};
	}
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && ch[j - 1].at > ch[j].at; j--)
			tmp = ch[j], ch[j] = ch[j - 1], ch[j - 1] = tmp;
	p->off = ch[0].off == r->dst_off ? r->std_off : r->dst_off;
	for (i = 0; i < n && ch[i].at <= u; i++)
		p->start = ch[i].at, p->off = ch[i].off;
	if (i < n)
		p->end = ch[i].at;
}

/* Parse up to `maxdig` decimal digits; NULL when there is none. */
static const char *parse_num(const char *s, int maxdig, int *out)
{
	int v = 0, n = 0;

	while (*s >= '0' && *s <= '9' && n < maxdig)
		v = v * 10 + (*s++ - '0'), n++;
	*out = v;
	return n > 0 ? s : NULL;
}

/* [+-]hh[:mm[:ss]] with hh <= maxh, as signed seconds. */
static const char *parse_hms(const char *s, int maxh, int32_t *out)
{
	int sign = 1, h, m = 0, sec = 0;

	if (*s == '+' || *s == '-')
		sign = *s++ == '-' ? -1 : 1;
	if ((s = parse_num(s, 3, &h)) == NULL || h > maxh)
		return NULL;
	if (*s == ':' && ((s = parse_num(s + 1, 2, &m)) == NULL || m > 59))
		return NULL;
	if (s != NULL && *s == ':' &&
	    ((s = parse_num(s + 1, 2, &sec)) == NULL || sec > 59))
		return NULL;
	*out = sign * (h * 3600 + m * 60 + sec);
	return s;
}

/* A zone abbreviation: 3+ letters, or <...> of letters, digits, '+', '-'. */
static const char *parse_abbr(const char *s)
{
	const char *p = s;

	if (*s == '<') {
		for (p = ++s;
		     (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		     (*p >= '0' && *p <= '9') || *p == '+' || *p == '-';
		     p++)
			;
		return (p - s >= 3 && *p == '>') ? p + 1 : NULL;
	}
	while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
		p++;
	return p - s >= 3 ? p : NULL;
}

/* A POSIX offset (west-positive, hh <= 24) as an east-positive offset. */
static const char *parse_offset(const char *s, int32_t *off)
{
	int32_t v;

	if ((s = parse_hms(s, 24, &v)) == NULL)
		return NULL;
	*off = -v;
	return s;
}

static const char *parse_rule_date(const char *s, rule_date *d)
{
	d->secs = 2 * 3600;
	d->b = d->c = 0;
	if (*s == 'J') {
		d->kind = 'J';
		if ((s = parse_num(s + 1, 3, &d->a)) == NULL || d->a < 1 ||
		    d->a > 365)
			return NULL;
	} else if (*s == 'M') {
		d->kind = 'M';
		if ((s = parse_num(s + 1, 2, &d->a)) == NULL || d->a < 1 ||
		    d->a > 12 || *s != '.' ||
		    (s = parse_num(s + 1, 1, &d->b)) == NULL || d->b < 1 ||
		    d->b > 5 || *s != '.' ||
		    (s = parse_num(s + 1, 1, &d->c)) == NULL || d->c > 6)
			return NULL;
	} else {
		d->kind = 'N';
		if ((s = parse_num(s, 3, &d->a)) == NULL || d->a > 365)
			return NULL;
	}
	if (*s == '/')
		s = parse_hms(s + 1, 167, &d->secs);
	return s;
}

/* Parse a whole TZ string; false when it is not one. */
static bool parse_posix(const char *s, posix_rule *r)
{
	memset(r, 0, sizeof *r);
	if ((s = parse_abbr(s)) == NULL ||
	    (s = parse_offset(s, &r->std_off)) == NULL)
		return false;
	if (*s == '\0')
		return true;
	r->has_dst = true;
	r->dst_off = r->std_off + 3600;
	if ((s = parse_abbr(s)) == NULL)
		return false;
	if (*s != ',' && *s != '\0' &&
	    (s = parse_offset(s, &r->dst_off)) == NULL)
		return false;
	if (*s != ',' || (s = parse_rule_date(s + 1, &r->start)) == NULL ||
	    *s != ',' || (s = parse_rule_date(s + 1, &r->end)) == NULL)
		return false;
	return *s == '\0' && r->dst_off > -MAX_OFFSET &&
	       r->dst_off < MAX_OFFSET;
}

/* --- TZif files --- */

typedef struct tzif_counts {
	uint32_t isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt;
} tzif_counts;

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static int64_t be_time(const unsigned char *p, size_t tsize)
{
	uint64_t v =
	    tsize == 8 ? (uint64_t)be32(p) << 32 | be32(p + 4) : be32(p);

	if (tsize == 4)
		return (int32_t)v;
	return v > INT64_MAX ? -(int64_t)(~v) - 1 : (int64_t)v;
}

/* Read a 44-byte header at p; NULL reason on success, else what is wrong. */
static const char *read_header(const unsigned char *p, size_t len,
			       tzif_counts *c)
{
	if (len < 44 || memcmp(p, "TZif", 4) != 0)
		return "not a TZif file";
	c->isutcnt = be32(p + 20);
	c->isstdcnt = be32(p + 24);
	c->leapcnt = be32(p + 28);
	c->timecnt = be32(p + 32);
	c->typecnt = be32(p + 36);
	c->charcnt = be32(p + 40);
	if (c->typecnt == 0 || c->typecnt > 256 || c->charcnt == 0 ||
	    c->charcnt > 65536 || c->timecnt > MAX_TIMES ||
	    c->leapcnt > MAX_TIMES ||
	    (c->isutcnt != 0 && c->isutcnt != c->typecnt) ||
	    (c->isstdcnt != 0 && c->isstdcnt != c->typecnt))
		return "bad header counts";
	return NULL;
}

static size_t block_len(const tzif_counts *c, size_t tsize)
{
	return c->timecnt * (tsize + 1) + c->typecnt * 6 + c->charcnt +
	       c->leapcnt * (tsize + 4) + c->isstdcnt + c->isutcnt;
}

/* Fill tz's table from a data block; NULL on success, else the reason. */
static const char *load_block(due_tz *tz, const unsigned char *p,
			      const tzif_counts *c, size_t tsize)
{
	const unsigned char *idx = p + c->timecnt * tsize,
			    *types = idx + c->timecnt;

	for (uint32_t t = 0; t < c->typecnt; t++) {
		int32_t off = (int32_t)be32(types + 6 * t);

		if (off <= -MAX_OFFSET || off >= MAX_OFFSET)
			return "UT offset out of range";
	}
	tz->ntrans = c->timecnt;
	if (c->timecnt > 0) {
		tz->trans = due__tz_malloc(c->timecnt * sizeof *tz->trans);
		tz->off = due__tz_malloc(c->timecnt * sizeof *tz->off);
		if (tz->trans == NULL || tz->off == NULL)
			return "";
	}
	for (uint32_t i = 0; i < c->timecnt; i++) {
		tz->trans[i] = be_time(p + i * tsize, tsize);
		if (idx[i] >= c->typecnt)
			return "bad type index";
		if (i > 0 && tz->trans[i] <= tz->trans[i - 1])
			return "transitions out of order";
		tz->off[i] = (int32_t)be32(types + 6 * idx[i]);
	}
	tz->first_off = (int32_t)be32(types);
	return NULL;
}

/*
** Parse the footer of a version 2+ file, "\n<TZ string>\n", n bytes at p.
** An empty TZ string means no rule. Returns NULL or what is wrong.
*/
static const char *load_footer(due_tz *tz, const unsigned char *p, size_t n)
{
	const unsigned char *nl;
	char buf[128];
	size_t slen;

	if (n == 0)
		return NULL; /* tolerated: no footer at all */
	if (p[0] != '\n' || (nl = memchr(p + 1, '\n', n - 1)) == NULL)
		return "bad footer";
	if ((slen = (size_t)(nl - p - 1)) == 0)
		return NULL;
	if (slen >= sizeof buf)
		return "footer too long";
	memcpy(buf, p + 1, slen);
	buf[slen] = '\0';
	if (!parse_posix(buf, &tz->rule))
		return "bad footer";
	tz->has_rule = true;
	return NULL;
}

/*
** Parse TZif bytes into tz: the 64-bit block and footer for version 2 and
** later, the 32-bit block for version 1. Returns NULL, "" when out of memory,
** or what is wrong.
*/
static const char *load_tzif(due_tz *tz, const unsigned char *p, size_t len)
{
	tzif_counts c;
	const char *why;
	size_t tsize = 4, at = 44, n;

	if ((why = read_header(p, len, &c)) != NULL)
		return why;
	if (p[4] >= '2') {
		at += block_len(&c, 4);
		if (at > len ||
		    (why = read_header(p + at, len - at, &c)) != NULL)
			return why ? why : "truncated";
		at += 44, tsize = 8;
	}
	if (c.leapcnt != 0)
		return "leap-second zones are not supported";
	if ((n = block_len(&c, tsize)) > len - at)
		return "truncated";
	if ((why = load_block(tz, p + at, &c, tsize)) != NULL)
		return why;
	at += n;
	return tsize == 8 ? load_footer(tz, p + at, len - at) : NULL;
}

static due_tz *tz_new(const char *name)
{
	due_tz *tz = due__tz_malloc(sizeof *tz);

	if (tz != NULL)
		memset(tz, 0, sizeof *tz);
	if (tz == NULL ||
	    (tz->name = due__tz_malloc(strlen(name) + 1)) == NULL) {
		free(tz);
		return NULL;
	}
	memcpy(tz->name, name, strlen(name) + 1);
	return tz;
}

void due__tz_free(due_tz *tz)
{
	if (tz == NULL)
		return;
	free(tz->name);
	free(tz->trans);
	free(tz->off);
	free(tz);
}

int due__tz_from_tzif(due_tz **out, const char *name, const void *data,
		      size_t len, char *err, size_t errlen)
{
	char show[80];
	const char *why;
	due_tz *tz;

	if (out == NULL || name == NULL || (data == NULL && len > 0)) {
		seterr(err, errlen, "time zone: missing argument");
		return DUE_TZ_EINVAL;
	}
	*out = NULL;
	if ((tz = tz_new(name)) == NULL)
		goto nomem;
	why = load_tzif(tz, data, len);
	if (why != NULL && why[0] == '\0')
		goto nomem;
	if (why != NULL) {
		seterr(err, errlen, "time zone '%s': unusable zone data (%s)",
		       shown(show, sizeof show, name), why);
		due__tz_free(tz);
		return DUE_TZ_EZONE;
	}
	*out = tz;
	return 0;
nomem:
	due__tz_free(tz);
	seterr(err, errlen, "time zone '%s': out of memory",
	       shown(show, sizeof show, name));
	return DUE_TZ_ENOMEM;
}

/* True when name can only be a zone name: no "..", no absolute path. */
static bool name_ok(const char *name)
{
	size_t n, comp = 0;

	for (n = 0; name[n] != '\0'; n++) {
		char ch = name[n];

		if (n >= MAX_NAME)
			return false;
		if (ch == '/') {
			if (comp == 0)
				return false;
			comp = 0;
			continue;
		}
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		      ch == '+'))
			return false;
		comp++;
	}
	return comp > 0 && strcmp(name, "localtime") != 0 &&
	       strcmp(name, "posixrules") != 0;
}

/*
** Read a whole regular file of at most MAX_FILE bytes into *out (the caller
** frees it). Returns 0, DUE_TZ_ENOMEM, or DUE_TZ_EZONE for every other
** failure (missing, not a regular file, too big, unreadable).
*/
static int read_file(const char *path, unsigned char **out, size_t *outlen)
{
	struct stat st;
	unsigned char *buf = NULL;
	size_t got = 0;
	int rc = DUE_TZ_EZONE, fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return DUE_TZ_EZONE;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_size > MAX_FILE)
		goto done;
	if ((buf = due__tz_malloc((size_t)st.st_size + 1)) == NULL) {
		rc = DUE_TZ_ENOMEM;
		goto done;
	}
	while (got < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);

		if (r <= 0)
			goto done;
		got += (size_t)r;
	}
	atomic_fetch_add(&files_read, 1);
	*out = buf;
	*outlen = got;
	buf = NULL;
	rc = 0;
done:
	free(buf);
	close(fd);
	return rc;
}

/*
** Read the TZif file of zone (a name not yet checked) into *data (the caller
** frees it). Returns 0, DUE_TZ_ENOMEM, or DUE_TZ_EZONE when the name is not
** a zone name or no TZif file has it.
*/
static int read_zone_file(const char *zone, unsigned char **data, size_t *len)
{
	const char *dir = getenv("TZDIR");
	char path[512];
	int rc;

	if (dir == NULL || dir[0] != '/')
		dir = "/usr/share/zoneinfo";
	if (!name_ok(zone) ||
	    snprintf(path, sizeof path, "%s/%s", dir, zone) >= (int)sizeof path)
		return DUE_TZ_EZONE;
	if ((rc = read_file(path, data, len)) < 0)
		return rc;
	if (*len < 4 || memcmp(*data, "TZif", 4) != 0) {
		free(*data);
		*data = NULL;
		return DUE_TZ_EZONE;
	}
	return 0;
}

int due__tz_open(due_tz **out, const char *zone, char *err, size_t errlen)
{
	char show[80];
	unsigned char *data = NULL;
	size_t len = 0;
	int rc;

	if (out == NULL || zone == NULL || zone[0] == '\0') {
		seterr(err, errlen, "time zone: empty name");
		return DUE_TZ_EINVAL;
	}
	*out = NULL;
	if (strcmp(zone, "UTC") == 0 || strcmp(zone, "Etc/UTC") == 0) {
		/* Built in, so UTC works on a machine without tzdata. */
		if ((*out = tz_new(zone)) != NULL)
			return 0;
		seterr(err, errlen, "time zone '%s': out of memory", zone);
		return DUE_TZ_ENOMEM;
	}
	if ((rc = read_zone_file(zone, &data, &len)) == DUE_TZ_ENOMEM)
		seterr(err, errlen, "time zone '%s': out of memory",
		       shown(show, sizeof show, zone));
	else if (rc < 0)
		seterr(err, errlen, "unknown time zone '%s'",
		       shown(show, sizeof show, zone));
	if (rc < 0)
		return rc;
	rc = due__tz_from_tzif(out, zone, data, len, err, errlen);
	free(data);
	return rc;
}

const char *due__tz_name(const due_tz *tz)
{
	return tz == NULL ? "UTC" : tz->name;
}

/* --- conversions --- */

/* The period holding instant u. A NULL zone is UTC. */
static void period_at(const due_tz *tz, int64_t u, period *p)
{
	size_t lo, hi;

	if (tz == NULL) {
		*p = (period){INT64_MIN, INT64_MAX, 0};
		return;
	}
	if (tz->ntrans == 0 && tz->has_rule) {
		rule_period(&tz->rule, u, p);
		return;
	}
	if (tz->ntrans == 0 || u < tz->trans[0]) {
		*p = (period){INT64_MIN, tz->ntrans ? tz->trans[0] : INT64_MAX,
			      tz->first_off};
		return;
	}
	for (lo = 0, hi = tz->ntrans;
	     hi - lo > 1;) { /* trans[lo] <= u < trans[hi] */
		size_t mid = lo + (hi - lo) / 2;

		if (tz->trans[mid] <= u)
			lo = mid;
		else
			hi = mid;
	}
	if (hi < tz->ntrans || !tz->has_rule) {
		*p = (period){tz->trans[lo],
			      hi < tz->ntrans ? tz->trans[hi] : INT64_MAX,
			      tz->off[lo]};
		return;
	}
	rule_period(&tz->rule, u, p);
	if (p->start < tz->trans[lo])
		p->start = tz->trans[lo];
}

int due__tz_offset(const due_tz *tz, int64_t utc_sec, int32_t *out_offset_sec)
{
	period p;

	if (out_offset_sec == NULL)
		return DUE_TZ_EINVAL;
	if (utc_sec < DUE_TZ_MIN_UTC || utc_sec > DUE_TZ_MAX_UTC)
		return DUE_TZ_ERANGE;
	period_at(tz, utc_sec, &p);
	*out_offset_sec = p.off;
	return 0;
}

int due__tz_to_local(const due_tz *tz, int64_t utc_sec, due_tz_civil *out)
{
	int32_t off;
	int64_t local, secs, y;
	int rc;

	if (out == NULL)
		return DUE_TZ_EINVAL;
	if ((rc = due__tz_offset(tz, utc_sec, &off)) < 0)
		return rc;
	local = utc_sec + off;
	civil_from_days(floor_div(local, DAY), &y, &out->month, &out->day);
	secs = local - floor_div(local, DAY) * DAY;
	out->year = (int)y;
	out->hour = (int)(secs / 3600);
	out->minute = (int)(secs / 60 % 60);
	out->second = (int)(secs % 60);
	return 0;
}

int due__tz_to_utc(const due_tz *tz, const due_tz_civil *lt,
		   int64_t *out_utc_sec)
{
	int64_t local, cand;
	period p;

	if (lt == NULL || out_utc_sec == NULL || lt->year < 1 ||
	    lt->year > 9999 || lt->month < 1 || lt->month > 12 || lt->day < 1 ||
	    lt->day > due__tz_days_in_month(lt->year, lt->month) ||
	    lt->hour < 0 || lt->hour > 23 || lt->minute < 0 ||
	    lt->minute > 59 || lt->second < 0 || lt->second > 59)
		return DUE_TZ_EINVAL;
	local = due__tz_days_from_civil(lt->year, lt->month, lt->day) * DAY +
		lt->hour * 3600 + lt->minute * 60 + lt->second;
	/*
	** Every instant showing `local` lies within MAX_OFFSET of it, so start
	** at the period before that window and walk forward. Periods come in
	** time order, so the first one whose wall-clock range holds `local`
	** gives the first occurrence; one whose range starts after `local`
	** (cand < start) means `local` was skipped, and its start is the first
	** valid instant after the gap. The walk ends: periods move forward,
	** and any period starting beyond local + MAX_OFFSET ends it.
	*/
	period_at(tz, local - MAX_OFFSET, &p);
	for (;;) {
		cand = local - p.off;
		if (cand < p.start) {
			*out_utc_sec = p.start;
			return 0;
		}
		if (cand < p.end) {
			*out_utc_sec = cand;
			return 0;
		}
		period_at(tz, p.end, &p);
	}
}
