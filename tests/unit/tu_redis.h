/*
** tu_redis.h - raw Redis commands for the tests that look at a Redis
** store's keys themselves (test_store.c's Redis versions of its few SQL
** statements, test_redis_store.c), on the server of DUE_TEST_REDIS_URL.
** The fixture itself (a fresh store per test: a scratch key prefix) is
** the backend's (test_util.h, core/admin.h); tu_redis_prefix is its
** prefix.  Included by test_util.h under DUE_WITH_REDIS.
*/
#ifndef DUE_TU_REDIS_H
#define DUE_TU_REDIS_H

#include <stdarg.h>

#include <hiredis/hiredis.h>

/* The key prefix of this test's store: its scratch store's. */
#define tu_redis_prefix tu_scratch_store

/* A connection to the server of DUE_TEST_REDIS_URL (redis://host:port/db). */
static inline redisContext *tu_redis_connect(void)
{
	const char *u = getenv("DUE_TEST_REDIS_URL");
	char host[128] = "127.0.0.1";
	int port = 6379, db = 0;
	redisContext *c;

	if (!u || sscanf(u, "redis://%127[^:/]:%d/%d", host, &port, &db) < 2)
		return NULL;
	c = redisConnect(host, port);
	if (!c || c->err) {
		fprintf(stderr, "redis connect %s: %s\n", u,
			c ? c->errstr : "no memory");
		redisFree(c);
		return NULL;
	}
	if (db)
		freeReplyObject(redisCommand(c, "SELECT %d", db));
	return c;
}

/* Delete every key of prefix `name` ({due:name}:*): a shard's prefix
   (test_redis_store.c), which no scratch store names. */
static inline void tu_redis_delete(const char *name)
{
	redisContext *c = tu_redis_connect();
	char match[128], cursor[32] = "0";

	if (!c)
		return;
	snprintf(match, sizeof(match), "{due:%s}:*", name);
	do {
		redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000",
					     cursor, match);
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			freeReplyObject(r);
			break;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		redisReply *keys = r->element[1];
		size_t n = keys->elements;
		const char **argv = calloc(n + 1, sizeof(*argv));
		size_t *len = calloc(n + 1, sizeof(*len));
		if (n && argv && len) { /* one UNLINK for the page's keys */
			argv[0] = "UNLINK", len[0] = 6;
			for (size_t i = 0; i < n; i++)
				argv[i + 1] = keys->element[i]->str,
					 len[i + 1] = keys->element[i]->len;
			freeReplyObject(
			    redisCommandArgv(c, (int)n + 1, argv, len));
		}
		free(argv);
		free(len);
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	redisFree(c);
}

/*
** The conformance suite's own versions of its few SQL statements
** (test_store.c): raw commands on the keys of this test's prefix, written
** the way redis_lua.c writes them (docs/internals/redis.md, "Keys").
*/

/* "{due:PREFIX}:" + the formatted rest, in one of a few rotating
   buffers, so that one command can hold several keys. */
static inline const char *tu_rd_key(const char *fmt, ...)
{
	static char pool[8][160];
	static unsigned k;
	char *b = pool[k++ % 8];
	int n = snprintf(b, 160, "{due:%s}:", tu_redis_prefix);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(b + n, 160 - (size_t)n, fmt, ap);
	va_end(ap);
	return b;
}

/*
** One command: its integer (a string reply read as one, an array as its
** length), -1 for nil, -2 for an error or no server.  `text`, when not
** NULL, receives a string reply ("" otherwise).
*/
static inline long long tu_rd_v(char *text, size_t n, const char *fmt,
				va_list ap)
{
	redisContext *c = tu_redis_connect();
	redisReply *r = c ? redisvCommand(c, fmt, ap) : NULL;
	long long v = -2;

	if (text)
		text[0] = '\0';
	if (r && r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r && r->type == REDIS_REPLY_STRING) {
		v = strtoll(r->str, NULL, 10);
		if (text)
			snprintf(text, n, "%s", r->str);
	} else if (r && r->type == REDIS_REPLY_ARRAY)
		v = (long long)r->elements;
	else if (r && r->type == REDIS_REPLY_NIL)
		v = -1;
	if (r && r->type == REDIS_REPLY_ERROR)
		fprintf(stderr, "redis: %s: %s\n", fmt, r->str);
	freeReplyObject(r);
	redisFree(c);
	return v;
}

static inline long long tu_rd(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	long long v = tu_rd_v(NULL, 0, fmt, ap);
	va_end(ap);
	return v;
}

static inline const char *tu_rd_text(char *text, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	tu_rd_v(text, n, fmt, ap);
	va_end(ap);
	return text;
}

/* Audit entries ("<time> <action>: <detail>") of task id, or of every
   task when id is 0, with this action (and detail, unless NULL). */
static inline long long tu_rd_audit_count(long long id, const char *action,
					  const char *detail)
{
	long long n = 0, last = id ? id : tu_rd("GET %s", tu_rd_key("seq"));
	char want[128];

	snprintf(want, sizeof(want), " %s: %s", action, detail ? detail : "");
	for (long long i = id ? id : 1; i <= last; i++) {
		redisContext *c = tu_redis_connect();
		redisReply *r = c ? redisCommand(c, "LRANGE %s 0 -1",
						 tu_rd_key("audit:%lld", i))
				  : NULL;
		for (size_t e = 0;
		     r && r->type == REDIS_REPLY_ARRAY && e < r->elements;
		     e++) {
			const char *sp = strchr(r->element[e]->str, ' ');
			if (sp &&
			    (detail ? strcmp(sp, want) == 0
				    : strncmp(sp, want, strlen(want)) == 0))
				n++;
		}
		freeReplyObject(r);
		redisFree(c);
	}
	return n;
}

/* The histogram bucket of a value in microseconds, as redis_lua.c's
   bucket() counts it: the first bound (ms) it does not exceed. */
static inline int tu_rd_bucket(long long us, const double *bounds, int nb)
{
	double ms = (double)us / 1000.0;
	int b = 0;
	while (b < nb && ms > bounds[b])
		b++;
	return b;
}

/*
** A try of a task that does not exist, at past times (the attempt record
** and the metrics counters redis_lua.c's take() and end_attempt() keep):
** claimed `claimed`, due `due`, ended `ended` (-1: still RUNNING).
*/
static inline void tu_rd_attempt(long long id, long long claimed, long long due,
				 long long ended, const char *outcome,
				 int stale, const double *bounds, int nb)
{
	const char *a = tu_rd_key("a:%lld", id);
	char m[256];
	long long late = claimed - due;

	/* the minute of the claim's hash (redis_lua.c mw()) */
	snprintf(m, sizeof(m), "%s", tu_rd_key("mw:%lld", claimed / 60000000));

	tu_rd("HSET %s 1:worker w 1:claimed_at %lld 1:due_at %lld "
	      "1:outcome %s",
	      a, claimed, due, outcome);
	tu_rd("HINCRBY %s late:%d 1", m, tu_rd_bucket(late, bounds, nb));
	tu_rd("HINCRBY %s late_sum %lld", m, late);
	tu_rd("HINCRBY %s out:%s 1", m, outcome);
	if (stale) {
		tu_rd("HSET %s 1:late_commit REJECTED_STALE", a);
		tu_rd("HINCRBY %s stale 1", m);
	}
	if (ended < 0)
		return;
	tu_rd("HSET %s 1:ended_at %lld", a, ended);
	tu_rd("HINCRBY %s dur:%d 1", m,
	      tu_rd_bucket(ended - claimed, bounds, nb));
	tu_rd("HINCRBY %s dur_sum %lld", m, ended - claimed);
	if (strcmp(outcome, "DONE") == 0)
		tu_rd("HINCRBY %s %lld 1", tu_rd_key("dpm"), ended / 1000000);
}

/* Every member of sorted set `key` with its score moved by `by`. */
static inline void tu_rd_zshift(const char *key, long long by)
{
	redisContext *c = tu_redis_connect();
	redisReply *r =
	    c ? redisCommand(c, "ZRANGE %s 0 -1 WITHSCORES", key) : NULL;

	for (size_t i = 0;
	     r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2)
		freeReplyObject(
		    redisCommand(c, "ZADD %s %lld %s", key,
				 strtoll(r->element[i + 1]->str, NULL, 10) + by,
				 r->element[i]->str));
	freeReplyObject(r);
	redisFree(c);
}

/* Every try's record and what the metrics count of them, gone. */
static inline void tu_rd_attempts_clear(long long from, long long to)
{
	for (long long id = from; id <= to; id++)
		tu_rd("DEL %s", tu_rd_key("a:%lld", id));
	redisContext *c = tu_redis_connect();
	redisReply *r =
	    c ? redisCommand(c, "KEYS %s", tu_rd_key("mw:*")) : NULL;
	for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements;
	     i++)
		tu_rd("DEL %s", r->element[i]->str);
	freeReplyObject(r);
	redisFree(c);
	tu_rd("DEL %s", tu_rd_key("dpm"));
}

/* One task in `state` for each kind z<from>..z<to> (the per-(state, kind)
   counts the metrics read), written in one pipeline. */
static inline void tu_rd_kind_tasks(int from, int to, const char *state)
{
	redisContext *c = tu_redis_connect();
	if (!c)
		return;
	for (int i = from; i <= to; i++)
		redisAppendCommand(c, "HINCRBY %s %s:z%d 1", tu_rd_key("kc"),
				   state, i);
	for (int i = from; i <= to; i++) {
		void *r = NULL;
		if (redisGetReply(c, &r) != REDIS_OK)
			break;
		freeReplyObject(r);
	}
	redisFree(c);
}

#endif
