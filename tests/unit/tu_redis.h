/*
** tu_redis.h - the Redis fixture of the store suites (test_util.h): a
** fresh store is a new key prefix on the server of DUE_TEST_REDIS_URL,
** unique per process and test; dropping it deletes that prefix's keys
** (SCAN MATCH + DEL: fine in a test, never in the store itself).
*/
#ifndef DUE_TU_REDIS_H
#define DUE_TU_REDIS_H

#include <hiredis/hiredis.h>

static char tu_redis_prefix[64];

static inline const char *tu_redis_unavailable(void)
{
	const char *u = getenv("DUE_TEST_REDIS_URL");
	return u && *u ? NULL : "DUE_TEST_REDIS_URL is not set";
}

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

static inline int tu_redis_fresh(char *url, size_t n, char *dir, size_t dn)
{
	static int counter;
	const char *base = getenv("DUE_TEST_REDIS_URL");

	(void)dn;
	dir[0] = '\0';
	snprintf(tu_redis_prefix, sizeof(tu_redis_prefix), "t%d_%d",
		 (int)getpid(), ++counter);
	snprintf(url, n, "%s%sprefix=%s", base, strchr(base, '?') ? "&" : "?",
		 tu_redis_prefix);
	return 0;
}

/* Delete every key of prefix `name` ({due:name}:*). */
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
		for (size_t i = 0; i < r->element[1]->elements; i++)
			freeReplyObject(redisCommand(
			    c, "DEL %b", r->element[1]->element[i]->str,
			    (size_t)r->element[1]->element[i]->len));
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	redisFree(c);
}

static inline void tu_redis_drop(const char *url, const char *dir)
{
	(void)url;
	(void)dir;
	tu_redis_delete(tu_redis_prefix);
}

#endif
