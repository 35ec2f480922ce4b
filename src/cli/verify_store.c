/*
** verify_store.c - the scratch stores of `due verify`, one per case, on
** every backend: which backend a URL names, how to make a private store
** of it beside the user's, and how to throw that store away.
**
**   sqlite:    a new database file in the case's directory (cmd_verify.c)
**   postgres:  a new schema in the same database, DROP SCHEMA ... CASCADE
**   redis:     the same server and DB with a private ?prefix= (a store per
**              prefix); dropped by deleting the keys that carry it (SCAN
**              MATCH, never KEYS, so a busy server is not blocked)
**   mysql:     a new database on the same server (the URL's user needs
**              CREATE and DROP), DROP DATABASE afterwards
**
** The user's own store is never read or written: every name made here
** carries `due_verify_<pid>_<seq>`.  A scratch store that cannot be
** dropped is reported on stderr and left, never retried blindly.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DUE_WITH_PG
#include <libpq-fe.h>
#endif
#ifdef DUE_WITH_REDIS
#include <hiredis/hiredis.h>
#endif
#ifdef DUE_WITH_MYSQL
#include <mysql.h>
#endif

#include "cli/verify.h"

v_backend v_backend_of(const char *url)
{
	static const struct {
		const char *prefix;
		v_backend b;
	} schemes[] = {
	    {"sqlite:", V_SQLITE},   {"postgres://", V_PG},
	    {"postgresql://", V_PG}, {"redis://", V_REDIS},
	    {"rediss://", V_REDIS},  {"mysql://", V_MYSQL},
	    {"mariadb://", V_MYSQL},
	};
	for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (strncmp(url, schemes[i].prefix,
			    strlen(schemes[i].prefix)) == 0)
			return schemes[i].b;
	return V_OTHER;
}

/*
** The parts of a redis:// or mysql:// URL the scratch code needs, split
** in place in a copy: userinfo, host, port, path (DB number or database),
** query.  Percent-escapes in user and password are decoded.  0, or -1
** when the URL has no "//".
*/
#define VURL_HOSTS 16

typedef struct vurl {
	char buf[2400];
	char *user, *pass, *host, *path, *query;
	int port;
	/* every host of a multi-host URL (h1:p1,h2:p2: a Galera cluster, a
	 * Redis Cluster's seeds), in order; host/port above are the first */
	char *hosts[VURL_HOSTS];
	int ports[VURL_HOSTS], nhosts;
} vurl;

static void pct_decode(char *s)
{
	char *o = s;
	for (; *s; s++) {
		unsigned x;
		if (*s == '%' && sscanf(s + 1, "%2x", &x) == 1) {
			*o++ = (char)x;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

static int vurl_split(vurl *u, const char *url, int default_port)
{
	char *p, *at, *slash, *colon;

	memset(u, 0, sizeof(*u));
	snprintf(u->buf, sizeof(u->buf), "%s", url);
	if (!(p = strstr(u->buf, "//")))
		return -1;
	p += 2;
	if ((u->query = strchr(p, '?')))
		*u->query++ = '\0';
	if ((slash = strchr(p, '/'))) {
		*slash = '\0';
		u->path = slash + 1;
	}
	if ((at = strrchr(p, '@'))) {
		*at = '\0';
		u->user = p;
		if ((colon = strchr(p, ':'))) {
			*colon = '\0';
			u->pass = colon + 1;
			pct_decode(u->pass);
		}
		pct_decode(u->user);
		p = at + 1;
	}
	for (char *h = p, *comma; h && u->nhosts < VURL_HOSTS; h = comma) {
		if ((comma = strchr(h, ',')))
			*comma++ = '\0';
		u->ports[u->nhosts] = default_port;
		if ((colon = strrchr(h, ':'))) {
			*colon = '\0';
			u->ports[u->nhosts] = atoi(colon + 1);
		}
		u->hosts[u->nhosts++] = *h ? h : "127.0.0.1";
	}
	u->host = u->hosts[0];
	u->port = u->ports[0];
	return 0;
}

/* The URL's query without its `name=` parameter, "&"-joined, into out. */
static void query_without(const char *query, const char *name, char *out,
			  size_t n)
{
	size_t off = 0, len = strlen(name);

	out[0] = '\0';
	for (const char *p = query; p && *p;) {
		size_t k = strcspn(p, "&");
		if (!(k > len && strncmp(p, name, len) == 0 && p[len] == '='))
			off += (size_t)snprintf(out + off, n - off, "%s%.*s",
						off ? "&" : "", (int)k, p);
		if (off >= n)
			break;
		p += k + (p[k] == '&');
	}
}

#ifdef DUE_WITH_PG
static void quiet_notice(void *arg, const char *msg)
{
	(void)arg;
	(void)msg; /* "drop cascades to ..." is expected for scratch schemas */
}

static int pg_exec(const char *url, const char *sql)
{
	PGconn *c = PQconnectdb(url);
	int ok = PQstatus(c) == CONNECTION_OK;
	if (ok) {
		PQsetNoticeProcessor(c, quiet_notice, NULL);
		PGresult *r = PQexec(c, sql);
		ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		if (!ok)
			fprintf(stderr, "due verify: %s", PQerrorMessage(c));
		PQclear(r);
	} else {
		fprintf(stderr, "due verify: %s", PQerrorMessage(c));
	}
	PQfinish(c);
	return ok ? 0 : -1;
}
#endif

#ifdef DUE_WITH_REDIS
/* A connection to host:port, authenticated as the URL says; NULL when
 * it cannot be had (*why says why, for the message). */
static redisContext *rd_open(const vurl *u, const char *host, int port,
			     char *why, size_t n)
{
	struct timeval tv = {10, 0};
	redisContext *c = redisConnectWithTimeout(host, port, tv);
	redisReply *r;

	if (!c || c->err) {
		snprintf(why, n, "%s:%d: %s", host, port,
			 c ? c->errstr : "out of memory");
		redisFree(c);
		return NULL;
	}
	if (u->pass && *u->pass) {
		r = u->user && *u->user
			? redisCommand(c, "AUTH %s %s", u->user, u->pass)
			: redisCommand(c, "AUTH %s", u->pass);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			snprintf(why, n, "%s:%d: AUTH: %s", host, port,
				 r && r->str ? r->str : c->errstr);
			freeReplyObject(r);
			redisFree(c);
			return NULL;
		}
		freeReplyObject(r);
	}
	return c;
}

/* UNLINK every key of this node that matches; 0 or -1 (*why set). */
static int rd_unlink_matching(redisContext *c, const char *match, char *why,
			      size_t n)
{
	char cursor[32] = "0";
	redisReply *r;

	do {
		r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor,
				 match);
		if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
			snprintf(why, n, "SCAN: %s",
				 r && r->str ? r->str : c->errstr);
			freeReplyObject(r);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
		for (size_t i = 0; i < r->element[1]->elements; i++) {
			redisReply *d = redisCommand(
			    c, "UNLINK %b", r->element[1]->element[i]->str,
			    r->element[1]->element[i]->len);
			freeReplyObject(d);
		}
		freeReplyObject(r);
	} while (strcmp(cursor, "0") != 0);
	return 0;
}

/*
** Delete every key of the scratch prefix v->schema on the server of
** v->base_url.  The prefix is followed by a character that cannot
** continue it (the backend's hash tag closes with '}'), so dropping
** due_verify_1_1 leaves due_verify_1_10 alone.  On a Redis Cluster (the
** URL's seeds answer CLUSTER NODES) every master is scanned: the keys
** live in one slot, but the slot may have moved while the case ran.
*/
static int redis_drop(vctx *v)
{
	vurl u;
	redisContext *c = NULL;
	redisReply *r = NULL;
	char match[96], why[512] = "cannot reach the server";
	int rc = -1;

	if (strncmp(v->base_url, "rediss:", 7) == 0 ||
	    vurl_split(&u, v->base_url, 6379) < 0)
		goto done;
	for (int i = 0; i < u.nhosts && !c; i++)
		c = rd_open(&u, u.hosts[i], u.ports[i], why, sizeof(why));
	if (!c)
		goto done;
	snprintf(match, sizeof(match), "*%s[^0-9]*", v->schema);
	r = redisCommand(c, "CLUSTER NODES");
	if (r && r->type != REDIS_REPLY_ERROR && r->str) {
		/* "<id> <ip:port@cport> <flags> ..." a line per node */
		rc = 0;
		for (char *line = r->str, *end; line && *line; line = end) {
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
			m = rd_open(&u, addr, atoi(colon + 1), why,
				    sizeof(why));
			if (!m ||
			    rd_unlink_matching(m, match, why, sizeof(why)) < 0)
				rc = -1;
			redisFree(m);
		}
	} else {
		freeReplyObject(r);
		r = redisCommand(c, "SELECT %d", u.path ? atoi(u.path) : 0);
		if (!r || r->type == REDIS_REPLY_ERROR) {
			snprintf(why, sizeof(why), "SELECT: %s",
				 r && r->str ? r->str : c->errstr);
			goto done;
		}
		rc = rd_unlink_matching(c, match, why, sizeof(why));
	}
done:
	if (rc < 0)
		fprintf(stderr,
			"due verify: could not delete the scratch keys of "
			"prefix %s: %s\n",
			v->schema, why);
	freeReplyObject(r);
	redisFree(c);
	return rc;
}
#endif

#ifdef DUE_WITH_MYSQL
struct st_mysql *v_mysql_connect(const char *url, bool with_db)
{
	vurl u;
	char sock[1024] = "";

	if (vurl_split(&u, url, 3306) < 0) {
		fprintf(stderr, "due verify: cannot read the MySQL URL\n");
		return NULL;
	}
	for (const char *p = u.query; p && *p;) {
		size_t k = strcspn(p, "&");
		if (strncmp(p, "socket=", 7) == 0 && k > 7) {
			snprintf(sock, sizeof(sock), "%.*s", (int)k - 7, p + 7);
			pct_decode(sock);
		}
		p += k + (p[k] == '&');
	}
	/* a multi-host URL (Galera): the first node that answers, as the
	 * store itself does; a scratch database made there replicates */
	for (int i = 0; i < u.nhosts; i++) {
		MYSQL *m = mysql_init(NULL);
		if (!m)
			break;
		if (mysql_real_connect(
			m, u.hosts[i], u.user, u.pass, with_db ? u.path : NULL,
			(unsigned)u.ports[i], sock[0] ? sock : NULL, 0))
			return m;
		if (i + 1 == u.nhosts)
			fprintf(stderr, "due verify: %s\n", mysql_error(m));
		mysql_close(m);
	}
	return NULL;
}

/* Run one statement on the server of v->base_url (no database). */
static int mysql_exec(vctx *v, const char *sql)
{
	MYSQL *m = v_mysql_connect(v->base_url, false);
	int rc = 0;

	if (!m)
		return -1;
	if (mysql_query(m, sql) != 0) {
		fprintf(stderr, "due verify: %s: %s\n", sql, mysql_error(m));
		rc = -1;
	}
	mysql_close(m);
	return rc;
}
#endif

/* A scratch URL for redis:// and mysql:// (v->schema names the store). */
static int scratch_url_kv(vctx *v)
{
	vurl u;
	char q[1024];
	const char *rest = strstr(v->base_url, "//") + 2;
	/* scheme://userinfo@host:port, kept as the user wrote it */
	int head = (int)(rest - v->base_url) + (int)strcspn(rest, "/?");

	if (vurl_split(&u, v->base_url, 0) < 0)
		return -1;
	if (v->backend == V_REDIS)
		query_without(u.query, "prefix", q, sizeof(q));
	else
		snprintf(q, sizeof(q), "%s", u.query ? u.query : "");
	if (v->backend == V_REDIS)
		snprintf(v->url, sizeof(v->url), "%.*s/%s?%s%sprefix=%s", head,
			 v->base_url, u.path && *u.path ? u.path : "0", q,
			 q[0] ? "&" : "", v->schema);
	else
		snprintf(v->url, sizeof(v->url), "%.*s/%s%s%s", head,
			 v->base_url, v->schema, q[0] ? "?" : "", q);
	return 0;
}

int v_scratch_url(vctx *v)
{
	char sql[160];

	if (v->backend == V_SQLITE) {
		/* the user's options (sync=, busy_ms=) carry over: a case
		 * measures the store as it was given */
		const char *q = strchr(v->base_url, '?');
		snprintf(v->url, sizeof(v->url), "sqlite:%.1200s/due.db%.900s",
			 v->dir, q ? q : "");
		return 0;
	}
	snprintf(v->schema, sizeof(v->schema), "due_verify_%d_%d",
		 (int)getpid(), v->seq);
	switch (v->backend) {
	case V_PG:
#ifdef DUE_WITH_PG
		snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", v->schema);
		if (pg_exec(v->base_url, sql) < 0)
			return -1;
		snprintf(v->url, sizeof(v->url),
			 "%s%soptions=-csearch_path%%3D%s", v->base_url,
			 strchr(v->base_url, '?') ? "&" : "?", v->schema);
		return 0;
#else
		break;
#endif
	case V_REDIS: return scratch_url_kv(v);
	case V_MYSQL:
#ifdef DUE_WITH_MYSQL
		snprintf(sql, sizeof(sql),
			 "CREATE DATABASE %s CHARACTER SET utf8mb4", v->schema);
		if (mysql_exec(v, sql) < 0)
			return -1;
		return scratch_url_kv(v);
#else
		break;
#endif
	default: break;
	}
	(void)sql;
	return -1;
}

int v_pg_reset_storage(vctx *v)
{
#ifdef DUE_WITH_PG
	static const char sql[] =
	    "DO $$ DECLARE t text; BEGIN"
	    " FOR t IN SELECT c.relname FROM pg_class c"
	    "  WHERE c.relnamespace = current_schema()::text::regnamespace"
	    "  AND c.relkind = 'r' AND c.reloptions IS NOT NULL LOOP"
	    "  EXECUTE format('ALTER TABLE %I RESET (fillfactor,"
	    "   autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
	    "   autovacuum_vacuum_insert_scale_factor,"
	    "   autovacuum_vacuum_insert_threshold,"
	    "   autovacuum_analyze_scale_factor, autovacuum_analyze_threshold,"
	    "   autovacuum_vacuum_cost_delay, autovacuum_vacuum_cost_limit)',"
	    "   t);"
	    " END LOOP; END $$";
	return pg_exec(v->url, sql);
#else
	(void)v;
	return -1;
#endif
}

void v_scratch_drop(vctx *v)
{
	char sql[160];

	if (!v->schema[0] || v->keep)
		return;
	snprintf(sql, sizeof(sql), "%s %s",
		 v->backend == V_PG ? "DROP SCHEMA" : "DROP DATABASE",
		 v->schema);
	switch (v->backend) {
#ifdef DUE_WITH_PG
	case V_PG:
		strcat(sql, " CASCADE");
		pg_exec(v->base_url, sql);
		break;
#endif
#ifdef DUE_WITH_REDIS
	case V_REDIS: redis_drop(v); break;
#endif
#ifdef DUE_WITH_MYSQL
	case V_MYSQL: mysql_exec(v, sql); break;
#endif
	default: break;
	}
}
