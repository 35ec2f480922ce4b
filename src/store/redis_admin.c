/*
** redis_admin.c - the admin group of the Redis store (store.h,
** due_store_admin), the backend redis_shard.c registers: what `due
** verify`, `due bench` and the tests need of it besides the store.
**
** Scratch stores.  A store is the keys of one prefix ({due:NAME}..., or
** {due:NAME:i} per shard), so a scratch store is the same server and
** database with ?prefix=due_scratch_NAME: nothing to make, once no key
** has that prefix (make looks, and refuses one in use).  Dropping it
** deletes the keys that carry the prefix (SCAN MATCH, never KEYS, so a
** busy server is not blocked), with UNLINK: "{due:NAME}..." and a shard's
** "{due:NAME:i}...", so dropping due_verify_1_1 leaves due_verify_1_10
** (and due_verify_1_1s) alone.
** On a Redis Cluster (the URL's seeds answer CLUSTER NODES) every master
** is scanned: a store's keys live in its slots, but a slot may have moved
** while the scratch store was used.
**
** Counters.  INFO commandstats: the calls of each command, by its name;
** INFO itself (this reading's own command) is left out.  INFO memory's
** used_memory: the bytes the whole server holds.
**
** Redis has no SQL, so none of the SQL capabilities; no_* say why, as
** `due verify` prints it.  Every connection here is a plain hiredis one
** to the seeds the store's parser read (redis.c), with the URL's AUTH and
** database, connecting and each command within the URL's timeout= (10 s
** by default), as redis.c's own.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/base.h"
#include "store/redis_shard.h"
#include "store/store.h"

#define SLOT (&due__store_redis_slot)

struct due_store_srv {
	redisContext *c;
};

/*
** A connection to host:port with the URL's AUTH, connecting and every
** command within bound_us (as redis.c's own); NULL with the error set.
*/
static redisContext *dial(const due_redis_where *w, const char *host, int port,
			  int64_t bound_us)
{
	struct timeval tv = {(time_t)(bound_us / 1000000),
			     (long)(bound_us % 1000000)};
	redisContext *c = redisConnectWithTimeout(host, port, tv);
	redisReply *r;

	if (c && !c->err && redisSetTimeout(c, tv) != REDIS_OK)
		c->err = REDIS_ERR_IO;
	if (!c || c->err) {
		due__error_set(DUE_ESTORE, "redis %s:%d: %s", host, port,
			       c ? c->errstr : "out of memory");
		redisFree(c);
		return NULL;
	}
	if (!w->password)
		return c;
	r = w->user ? redisCommand(c, "AUTH %s %s", w->user, w->password)
		    : redisCommand(c, "AUTH %s", w->password);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		due__error_set(DUE_ESTORE, "redis %s:%d: AUTH: %s", host, port,
			       r && r->str ? r->str : c->errstr);
		freeReplyObject(r);
		redisFree(c);
		return NULL;
	}
	freeReplyObject(r);
	return c;
}

/*
** A connection to the first seed of url that answers, on the URL's
** database unless bare (CLUSTER NODES wants none); w filled.  NULL with
** the error set.  *cfg is the parsed URL w borrows from: free_cfg it.
*/
static redisContext *seed(const due_url *url, void **cfg, due_redis_where *w,
			  bool bare)
{
	redisContext *c = NULL;
	redisReply *r;

	*cfg = NULL;
	if (SLOT->parse_url(cfg, url) < 0)
		return NULL;
	due__redis_where(*cfg, w);
	for (size_t i = 0; i < w->n && !c; i++)
		c = dial(w, w->host[i], w->port[i], due__admin_bound_us(url));
	if (!c || bare || !w->db)
		return c;
	r = redisCommand(c, "SELECT %d", w->db);
	if (!r || r->type == REDIS_REPLY_ERROR) {
		due__error_set(DUE_ESTORE, "redis: SELECT: %s",
			       r && r->str ? r->str : c->errstr);
		redisFree(c);
		c = NULL;
	}
	freeReplyObject(r);
	return c;
}

/* why, or, when it is hiredis's word for a read that timed out, that. */
static const char *timed_out(const char *why, const due_url *url)
{
	static _Thread_local char buf[96];

	if (!strstr(why, "Resource temporarily unavailable"))
		return why;
	snprintf(buf, sizeof(buf),
		 "redis: no answer in %.1f s (the URL's timeout=)",
		 (double)due__admin_bound_us(url) / 1e6);
	return buf;
}

/*
** Every key of this node that matches: UNLINKed when unlink, else counted
** into *found (stopping at the first); 0 or DUE_ESTORE.
*/
static int each_key(redisContext *c, const char *match, bool unlink,
		    size_t *found)
{
	char cursor[32] = "0";
	redisReply *r;

	do {
		r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor,
				 match);
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			int rc =
			    due__error_set(DUE_ESTORE, "redis: SCAN: %s",
					   r && r->str ? r->str : c->errstr);
			freeReplyObject(r);
			return rc;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		*found += r->element[1]->elements;
		for (size_t i = 0; unlink && i < r->element[1]->elements; i++)
			freeReplyObject(redisCommand(
			    c, "UNLINK %b", r->element[1]->element[i]->str,
			    r->element[1]->element[i]->len));
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0 && (unlink || !*found));
	return 0;
}

/* Every master of CLUSTER NODES (a line per node: "<id> <ip:port@cport>
   <flags> ..."), each_key on it; 0 or the last error. */
static int each_master(const due_redis_where *w, char *nodes, int64_t bound,
		       const char *match, bool unlink, size_t *found)
{
	int rc = 0;

	for (char *line = nodes, *end; line && *line; line = end) {
		char addr[256], flags[256], *at, *colon;
		redisContext *m;
		if ((end = strchr(line, '\n')))
			*end++ = '\0';
		if (sscanf(line, "%*s %255s %255s", addr, flags) != 2 ||
		    !strstr(flags, "master") || strstr(flags, "fail"))
			continue;
		if ((at = strchr(addr, '@')))
			*at = '\0';
		if (!(colon = strrchr(addr, ':')))
			continue;
		*colon = '\0';
		m = dial(w, addr, atoi(colon + 1), bound);
		if (!m || each_key(m, match, unlink, found) < 0)
			rc = DUE_ESTORE;
		redisFree(m);
	}
	return rc;
}

/*
** The keys of prefix name on url's server (every master of a cluster):
** deleted when unlink, else counted into *found.  0, or DUE_ESTORE
** "cannot DOING: why".
*/
static int prefix_keys(const due_url *url, const char *name, bool unlink,
		       size_t *found, const char *doing)
{
	void *cfg = NULL;
	due_redis_where w;
	redisContext *c;
	redisReply *r = NULL;
	char match[96];
	int rc = DUE_ESTORE;

	*found = 0;
	snprintf(match, sizeof(match), "{due:%s[}:]*", name);
	if (!(c = seed(url, &cfg, &w, true)))
		goto done;
	r = redisCommand(c, "CLUSTER NODES");
	if (r && r->type != REDIS_REPLY_ERROR && r->str) {
		rc = each_master(&w, r->str, due__admin_bound_us(url), match,
				 unlink, found);
	} else if (!r) {
		due__error_set(DUE_ESTORE, "redis: %s", c->errstr);
	} else {
		freeReplyObject(r);
		r = redisCommand(c, "SELECT %d", w.db);
		if (!r || r->type == REDIS_REPLY_ERROR)
			due__error_set(DUE_ESTORE, "redis: SELECT: %s",
				       r && r->str ? r->str : c->errstr);
		else
			rc = each_key(c, match, unlink, found);
	}
done:
	if (rc < 0) {
		char why[512];
		snprintf(why, sizeof(why), "%s", due_error_last());
		due__error_set(DUE_ESTORE, "cannot %s: %s", doing,
			       timed_out(why, url));
	}
	freeReplyObject(r);
	redisFree(c);
	SLOT->free_cfg(cfg);
	return rc;
}

/*
** The marker of a made scratch store, "{due:NAME}:scratch" (SET NX, so of
** two makes of one name one wins): 0 set, 1 there already, DUE_ESTORE.
** On a cluster whose seed does not hold its slot (MOVED) no marker is
** set: the scan for the prefix's keys is all that make checks there.
*/
static int mark(const due_url *url, const char *name)
{
	void *cfg = NULL;
	due_redis_where w;
	redisContext *c = seed(url, &cfg, &w, false);
	redisReply *r = NULL;
	char key[128];
	int rc = DUE_ESTORE;

	snprintf(key, sizeof(key), "{due:%s}:scratch", name);
	if (c && (r = redisCommand(c, "SET %s 1 NX", key))) {
		if (r->type == REDIS_REPLY_NIL)
			rc = 1;
		else if (r->type != REDIS_REPLY_ERROR ||
			 strncmp(r->str, "MOVED", 5) == 0)
			rc = 0;
		else
			due__error_set(DUE_ESTORE, "redis: SET: %s", r->str);
	} else if (c) {
		due__error_set(DUE_ESTORE, "redis: %s", c->errstr);
	}
	freeReplyObject(r);
	redisFree(c);
	SLOT->free_cfg(cfg);
	return rc;
}

/* Nothing to make but the URL and its marker, once no key has the
   prefix. */
static int rd_scratch_make(const due_url *url, const char *name,
			   const char *dir, char *out, size_t n)
{
	char doing[128];
	size_t found;
	int rc;

	(void)dir;
	snprintf(doing, sizeof(doing), "make scratch prefix %s", name);
	if ((rc = prefix_keys(url, name, false, &found, doing)) < 0)
		return rc;
	if (found || (rc = mark(url, name)) > 0)
		return due__error_set(DUE_ESTORE,
				      "cannot %s: it already exists (its "
				      "keys are on the server)",
				      doing);
	if (rc < 0) {
		char why[512];
		snprintf(why, sizeof(why), "%s", due_error_last());
		return due__error_set(DUE_ESTORE, "cannot %s: %s", doing,
				      timed_out(why, url));
	}
	return due__url_set_option(out, n, url->text, "prefix", name);
}

static int rd_scratch_drop(const due_url *url, const char *name,
			   const char *dir)
{
	char doing[128];
	size_t found;

	(void)dir;
	snprintf(doing, sizeof(doing), "delete the keys of scratch prefix %s",
		 name);
	return prefix_keys(url, name, true, &found, doing);
}

static int rd_server_open(due_store_srv **out, const due_url *url)
{
	void *cfg = NULL;
	due_redis_where w;

	if (!(*out = calloc(1, sizeof(**out))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	(*out)->c = seed(url, &cfg, &w, false);
	SLOT->free_cfg(cfg);
	return (*out)->c ? 0 : DUE_ESTORE;
}

/* INFO SECTION's text, or NULL with the error set (caller frees r). */
static const char *info(redisContext *c, const char *section, redisReply **r)
{
	*r = redisCommand(c, "INFO %s", section);
	if (*r && (*r)->type == REDIS_REPLY_STRING)
		return (*r)->str;
	due__error_set(DUE_ESTORE, "redis: INFO %s: %s", section,
		       *r && (*r)->str ? (*r)->str : c->errstr);
	return NULL;
}

static int rd_server_read(due_store_srv *s, due_counters *out)
{
	redisReply *r;
	const char *p, *t;
	int rc = 0;

	if (!(t = info(s->c, "commandstats", &r))) {
		freeReplyObject(r);
		return DUE_ESTORE;
	}
	/* "cmdstat_NAME:calls=N,usec=..." a line per command */
	for (p = t; rc == 0 && (p = strstr(p, "cmdstat_"));) {
		const char *c = strchr(p, ':'), *k = strstr(p, "calls=");
		char name[64];
		if (!c || !k)
			break;
		snprintf(name, sizeof(name), "%.*s", (int)(c - p - 8), p + 8);
		if (strcmp(name, "info") != 0) /* the readings' own */
			rc = due__counter_add(out, name,
					      (double)strtoll(k + 6, NULL, 10),
					      DUE_COUNTER_QUERY);
		p = k;
	}
	freeReplyObject(r);
	r = NULL;
	if (rc == 0 && (t = info(s->c, "memory", &r)) &&
	    (p = strstr(t, "used_memory:")))
		rc = due__counter_add(out, "used_memory",
				      (double)strtoll(p + 12, NULL, 10),
				      DUE_COUNTER_BYTES);
	freeReplyObject(r);
	return rc;
}

static void rd_server_close(due_store_srv *s)
{
	if (s)
		redisFree(s->c);
	free(s);
}

#define OP(m) .m = rd_##m,
const due_store_admin due__store_redis_admin = {
    .test_env = "DUE_TEST_REDIS_URL",
    .counters = DUE_COUNTER_QUERY | DUE_COUNTER_BYTES,
    .no_sql = "redis_has_no_sql (the control writes its own naive tables "
	      "with SQL)",
    .no_row_locks = "redis_has_no_row_locks (each transition is one "
		    "script; scripts do not interleave)",
    .no_stall = "redis_cannot_stall_one_call (no client holds a lock "
		"another's call waits on: each call is one script, run "
		"whole; a frozen TCP proxy stalls it in tests/cli)",
    .no_plan = "redis_has_no_query_plan (claims pop a sorted set scored by "
	       "due time; no index to check)",
    .scratch_root = due__scratch_root_tmp,
    OP(scratch_make) OP(scratch_drop) OP(server_open) OP(server_read)
	OP(server_close)};
#undef OP
