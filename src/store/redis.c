/*
** redis.c - the Redis store: the contract of store.h on one Redis server
** (or one Redis Cluster shard), over hiredis' synchronous API.
**
** Model.  Every transition is ONE operation of one Lua script (the
** files in src/store/lua/), run with FCALL as a Redis 7 function (or
** EVALSHA where functions are not there or not allowed: load_lib): a
** script runs atomically
** on the server, so each predicate of store.h (state, attempt, lease_until <
** now, the kinds' limits) is checked in the same step that writes, and
** nothing interleaves.  The script is loaded at connect and again when
** the server answers NOSCRIPT or "Function not found" (a flush, a
** restart).  Scripts read
** the clock with TIME; the client never sends a time it read itself
** (CONTRACT §3.1), so due times and leases are judged by the server's
** clock alone.  No HOST_CLOCK: a worker asks the store for now (TIME).
**
** Keys.  Every key of one store is "{due:NAME}:..." (NAME from
** ?prefix=, default "default"): one hash tag, so one slot, so every
** script touches one shard, the one master of that slot.  The layout
** (task hashes, the due indexes, the lease set, per-state indexes, the
** unique-key hash) is in docs/internals/redis.md and at the top of
** the Lua files' operations.
**
** URL.  redis://[[user]:password@]host[:port][,host[:port]...][/DB]
** [?prefix=NAME&durability=unsafe&wait=R&wait_timeout=DUR].  rediss://
** is refused: Debian's hiredis 0.14 has no TLS.
**
** Cluster.  hiredis 0.14 has no cluster client, so this file is one, for
** one slot.  Whether the server is a cluster is asked of the first seed
** that answers (INFO cluster); several hosts that are not a cluster are
** refused, and a cluster has only DB 0.  The store's slot is CRC16 of
** "due:NAME" mod 16384 (key_slot); CLUSTER SLOTS names its master, and
** every node it names is kept to ask again later.  A reply the server
** gives without running the script is retried for at most
** FAILOVER_WAIT_US (and never past the call's bound: Waits): MOVED (the
** slot moved or a replica was promoted: dial the named master),
** TRYAGAIN, CLUSTERDOWN, LOADING and ASK (wait: see redirect() for why
** ASK is not followed), NOSCRIPT (load it on the new master).  A lost or
** refused connection asks the nodes for the map again until a master of
** the slot answers, for at most the same time.  A connection lost (or
** silent) AFTER a script was sent is never retried here (it may have
** run): the caller gets DUE_ESTORE and retries as it does on one server.
** The scripts refuse to run while the slot is MIGRATING (the probe at
** the top of lua/base.lua), so no script ever stops half-way on a key
** that is already on the other node.
**
** WAIT.  Redis replicates asynchronously: a master that acknowledged a
** write and died before its replica received it loses the write when
** the replica is promoted.  With wait=R (default 1 on a cluster, 0 on one
** server) every operation that writes is followed, on the same
** connection, by WAIT R timeout, and is acknowledged only when R
** replicas hold it; fewer is DUE_ESTORE ("written on the master but
** acknowledged by k of R replicas"): the write happened and may survive
** or not.  docs/internals/redis.md says what WAIT does not promise.
**
** Durability.  At open the store reads CONFIG GET appendonly and
** maxmemory-policy (when the server allows CONFIG; when it refuses, it
** says nothing): a server without an append-only file loses acknowledged
** tasks in a crash, and one that may evict keys can drop a lease or a
** unique key and strand a task, so both are refused with DUE_ESTORE
** naming the setting, unless the URL says ?durability=unsafe (throw-away
** use).  appendfsync everysec and no are accepted with a warning
** (due_db_warning, printed by due init and due work): they keep working
** but can lose the last acknowledged writes in a crash.
**
** Waits.  No call waits for ever (issue 35).  Every open is given a
** bound (due_open_params.timeout_us: the URL's timeout=, default 10 s,
** or less when the caller lowers it: the worker's lease/3).  A call (one
** script and what it takes to reach its node: connect, AUTH, SELECT,
** SCRIPT LOAD, the search for a cluster's master, a failover's retries)
** ends within one bound from its start (s->end, set by begin()).  Each
** command is written with SO_SNDTIMEO at the bound, and its reply is
** polled for until that end (exchange()): hiredis' blocking read never
** waits on its own.  A connect waits for what is left.  A node asked
** among several (the seeds, a cluster's nodes for the slot map) gets at
** most DIAL_WAIT_US for its connect and its answer (probe()), so that a
** silent one (a partitioned master) leaves time to ask the others; its
** "no answer" says 2 s.  WAIT R T is the one command the server holds
** on purpose: its reply is awaited for T + the bound, so wait_timeout=
** keeps its meaning (T is not silence).
** The SUBSCRIBE connection waits the same way for its connect and its
** confirmation; then nothing blocks on it (the caller polls its socket,
** listen_drain reads what is there).  No blocking command (BLPOP and the
** like) is used.  A node silent until the end is DUE_ESTORE "no answer
** from the store at HOST:PORT in N s", naming the node addressed
** (due__store_no_answer); its connection is dropped (a late reply would
** answer the next command) and rd_ok(), the one place that connects,
** makes it again on the next call.  A script whose answer did not come
** may have run: as for a lost connection it is not sent again here and
** the caller hears DUE_ESTORE, outcome unknown; when the call's time is
** spent before a script is sent, nothing is sent.  A paged operation
** (list, reclaim, prune, completions by the 1000) is a call per page.
** Not bounded: resolving a host name (hiredis calls getaddrinfo).
**
** Errors.  A refused or lost connection is DUE_ESTORE naming the store;
** the connection is dropped and the next call connects again (the
** worker retries with backoff).  There is no transaction a caller can
** join: no TX_SUBMIT, and a completion hook (due_complete_tx) answers
** DUE_EUNSUPPORTED before anything is written.
**
** Wake-ups.  Submits (and retries, requeues, reclaims, kind changes)
** PUBLISH on "{due:NAME}:wake" inside their script; listen() SUBSCRIBEs
** on a second connection and hands out its socket.
*/
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "base/base.h"
#include "store/redis_shard.h"
#include "store/row.h"
#include "store/store.h"

/*
** One due_schedule_batch is one script, so it is all-or-none like a
** transaction on the SQL stores, and it cannot be split without losing
** that.  So a call has bounds of its own, refused with DUE_ETOOBIG before
** anything is sent (docs/INTERFACE.md, `due add --help`):
**   - at most SUBMIT_MAX_ITEMS tasks: a script blocks the server while it
**     runs, about 20 to 50 us a task here (10,000: 0.2 to 0.5 s on the
**     loaded test machine; 100,000 took 2 to 7 s, past Redis's 5 s
**     busy-reply-threshold, when every other client hears BUSY);
**   - payloads (each, and all of a call together) of at most what the
**     server takes in one argument (rd_payloads_fit): proto-max-bulk-len
**     (512 MB by default), or client-query-buffer-limit (1 GB) when that
**     is lower: Redis drops the connection of a command with a larger
**     argument.  A call's arguments together are not bounded by either
**     (measured: each is read into its own buffer), but the server holds
**     them, their copies in the script and the tasks at once.
** Payloads up to RD_LIMIT_FLOOR fit whatever the settings say (their
** smallest values are 1 MB), so the settings are read (CONFIG GET) only
** for a call that carries more.
*/
#define SUBMIT_MAX_ITEMS 10000
#define RD_LIMIT_FLOOR ((1u << 20) - 1024)
#define RD_DEFAULT_BULK (512ull << 20)
#define RD_DEFAULT_QBUF (1024ull << 20)

extern const char due__redis_lua[];

/*
** Cluster.  A URL may name several seed nodes; whether the store runs on
** a Redis Cluster is asked of the first seed that answers (INFO cluster).
** On a cluster the store keeps the master of its slot (CLUSTER SLOTS),
** every node it has heard of (to ask again when the master is lost), and
** retries what the server refused before running it (MOVED, ASK,
** TRYAGAIN, CLUSTERDOWN, LOADING) for at most FAILOVER_WAIT_US.
*/
#define RD_MAX_SEEDS 16
#define RD_MAX_SHARDS 64
#define RD_MAX_KNOWN 64
#define FAILOVER_WAIT_US 10000000LL
#define WAIT_TIMEOUT_US 2000000LL
/*
** The connect to one node while several may be asked in turn (a cluster's
** nodes, several seeds): a dead host must not take the whole bound.
*/
#define DIAL_WAIT_US 2000000LL

typedef struct rd_node {
	char host[256];
	int port;
} rd_node;

/* What the URL says (parse_url). */
typedef struct rd_cfg {
	char *user, *password, *name;
	rd_node seed[RD_MAX_SEEDS];
	size_t nseed;
	int db;
	int wait_n;	 /* ?wait=R; -1: 1 on a cluster, 0 on one server */
	int64_t wait_us; /* ?wait_timeout=DUR */
	bool unsafe;	 /* ?durability=unsafe */
	int shards;	 /* ?shards=N (redis_shard.c); 0 or 1: one prefix */
	int shard;	 /* which of them this handle is (0 .. shards-1) */
	char label[512];
} rd_cfg;

struct due_store {
	int64_t timeout_us; /* the bound of every wait (due_open_params) */
	int64_t end;	    /* monotonic: when the call under way gives up */
	bool silent;	    /* the call under way got no answer (no_answer) */
	redisContext *c;
	redisContext *sub; /* listen(): SUBSCRIBEd */
	rd_cfg cfg;
	char meta[160];	   /* "{due:NAME}:meta", the script's KEYS[1] */
	char chan[160];	   /* "{due:NAME}:wake" */
	char sha[48];	   /* of the script, as loaded */
	char sha_oom[48];  /* its allow-oom twin (oom_free), "" until loaded */
	char *script;	   /* prelude + due__redis_lua + "return run(...)" */
	char *lib;	   /* the same as a function library (load_script) */
	char fname[3][40]; /* its functions: due_<16 hex>, _ro, _oom */
	bool fn;	   /* call it with FCALL (else EVALSHA) */
	bool cluster;	   /* the seed said cluster_enabled:1 */
	int slot;	   /* of the hash tag "due:NAME" */
	int wait_n;	   /* replicas a write waits for (WAIT), 0: none */
	bool degraded;	   /* the last WAIT fell short: check before writing */
	rd_node master;	   /* of slot, as last heard (port 0: unknown) */
	rd_node known[RD_MAX_KNOWN]; /* every node CLUSTER SLOTS named */
	rd_node shun;		     /* the node last silent (no_answer) */
	rd_node last; /* shun when a search began: candidate() asks it last */
	size_t nknown;
	/* due_wait: "{due:NAME}:done", and this shard's "someone waits"
	   mark, "{tag}:waiters" (lua done_wake) */
	char done_chan[160];
	char waiters[160];
	bool sub_done;	    /* sub is SUBSCRIBEd to done_chan, not chan */
	struct written *wr; /* WRITTEN_MAX, oldest first; NULL until needed */
	size_t n_wr;
	bool outbox; /* a script said its outbox has messages (unwrap_outbox) */
};

/* ------------------------------------------------------------------ */
/* URL                                                                 */
/* ------------------------------------------------------------------ */

static void cfg_free(rd_cfg *c)
{
	free(c->user);
	free(c->password);
	free(c->name);
}

static void rd_free_cfg(void *cfg)
{
	if (cfg) {
		cfg_free(cfg);
		free(cfg);
	}
}

static int bad_url(const due_url *u, const char *why)
{
	return due__error_set(DUE_EINVAL, "malformed store URL '%s': %s",
			      u->text, why);
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (; *s; s++)
		if (!(*s >= 'a' && *s <= 'z') && !(*s >= 'A' && *s <= 'Z') &&
		    !(*s >= '0' && *s <= '9') && !strchr("_-.", *s))
			return false;
	return true;
}

/* ?wait=R (0..64) and ?wait_timeout=DUR (1ms..60s). */
static int parse_wait(rd_cfg *c, const due_url *u, const char *opt)
{
	char *end;
	long n;

	if (strncmp(opt, "wait=", 5) == 0) {
		errno = 0;
		n = strtol(opt + 5, &end, 10);
		if (errno || *end || end == opt + 5 || n < 0 || n > 64)
			return bad_url(u, "wait must be a number of replicas, "
					  "0 to 64");
		c->wait_n = (int)n;
		return 0;
	}
	if (due_duration_parse(&c->wait_us, opt + 13) < 0 ||
	    c->wait_us < 1000 || c->wait_us > 30000000)
		return bad_url(u, "wait_timeout must be a duration from 1ms "
				  "to 30s (wait_timeout=2s)");
	return 0;
}

/*
** The query: prefix=NAME, durability=unsafe|safe, wait=R, wait_timeout=.
** strtok_r: two threads opening stores at once (a worker's connections,
** a program's handles) must not share strtok's state — with strtok one
** of them lost its shards=2 and was refused ("a store of this prefix
** made with shards=2 exists"), 2 runs in 8 of test_after_race_shards.
*/
static int parse_query(rd_cfg *c, const due_url *u, char *q)
{
	char *save = NULL;
	int rc;

	for (char *opt = strtok_r(q, "&", &save); opt;
	     opt = strtok_r(NULL, "&", &save)) {
		if (strncmp(opt, "wait=", 5) == 0 ||
		    strncmp(opt, "wait_timeout=", 13) == 0) {
			if ((rc = parse_wait(c, u, opt)) < 0)
				return rc;
		} else if (strncmp(opt, "prefix=", 7) == 0) {
			if (!name_ok(opt + 7))
				return bad_url(u, "prefix must be 1 to 64 "
						  "letters, digits, _ - .");
			free(c->name);
			if (!(c->name =
				  due__strdup_n(opt + 7, strlen(opt + 7))))
				return due__error_set(DUE_ENOMEM,
						      "out of memory");
		} else if (strncmp(opt, "shards=", 7) == 0) {
			char *end;
			long n;
			errno = 0;
			n = strtol(opt + 7, &end, 10);
			if (errno || end == opt + 7 || *end || n < 1 ||
			    n > RD_MAX_SHARDS)
				return bad_url(u, "shards must be a number "
						  "from 1 to 64 (shards=4)");
			c->shards = (int)n;
		} else if (strcmp(opt, "durability=unsafe") == 0) {
			c->unsafe = true;
		} else if (strcmp(opt, "durability=safe") == 0) {
			c->unsafe = false;
		} else {
			return due__error_set(
			    DUE_EINVAL,
			    "malformed store URL '%s': unknown option '%s' "
			    "(expected prefix=NAME, shards=N, "
			    "durability=unsafe, wait=R or wait_timeout=DUR)",
			    u->text, opt);
		}
	}
	return 0;
}

/* host[:port] into the next seed of c (hp is modified). */
static int parse_host(rd_cfg *c, const due_url *u, char *hp)
{
	char *colon, *end;
	long port = 6379;

	if (c->nseed == RD_MAX_SEEDS)
		return bad_url(u, "at most 16 hosts");
	if ((colon = strrchr(hp, ':')) != NULL) {
		*colon = '\0';
		errno = 0;
		port = strtol(colon + 1, &end, 10);
		if (errno || *end || end == colon + 1 || port < 1 ||
		    port > 65535)
			return bad_url(u, "port must be 1..65535");
	}
	if (!*hp || strlen(hp) >= sizeof(c->seed[0].host))
		return bad_url(u, "no host (or one over 255 bytes)");
	snprintf(c->seed[c->nseed].host, sizeof(c->seed[0].host), "%s", hp);
	c->seed[c->nseed++].port = (int)port;
	return 0;
}

/*
** [[user]:password@]host[:port][,host[:port]]... into c (hp is
** modified): several hosts are seeds of one Redis Cluster.
*/
static int parse_authority(rd_cfg *c, const due_url *u, char *hp)
{
	char *at = strrchr(hp, '@'), *colon, *comma;
	int rc;

	if (at) {
		*at = '\0';
		colon = strchr(hp, ':');
		if (!colon)
			return bad_url(u, "credentials must be "
					  "[user]:password@");
		*colon = '\0';
		if ((*hp && !(c->user = due__strdup_n(hp, strlen(hp)))) ||
		    !(c->password =
			  due__strdup_n(colon + 1, strlen(colon + 1))))
			return due__error_set(DUE_ENOMEM, "out of memory");
		hp = at + 1;
	}
	for (;; hp = comma + 1) {
		if ((comma = strchr(hp, ',')) != NULL)
			*comma = '\0';
		if ((rc = parse_host(c, u, hp)) < 0)
			return rc;
		if (!comma)
			return 0;
	}
}

/* "redis://h1:p1,h2:p2/DB?prefix=NAME" (no credentials) into c->label. */
static void make_label(rd_cfg *c)
{
	size_t off = (size_t)snprintf(c->label, sizeof(c->label), "redis://");

	for (size_t i = 0; i < c->nseed && off < sizeof(c->label); i++)
		off += (size_t)snprintf(c->label + off, sizeof(c->label) - off,
					"%s%s:%d", i ? "," : "",
					c->seed[i].host, c->seed[i].port);
	if (off < sizeof(c->label))
		off += (size_t)snprintf(c->label + off, sizeof(c->label) - off,
					"/%d?prefix=%s", c->db, c->name);
	if (c->shards > 1 && off < sizeof(c->label))
		snprintf(c->label + off, sizeof(c->label) - off, "&shards=%d",
			 c->shards);
}

static int parse_rest(rd_cfg *c, const due_url *u, char *rest)
{
	char *q = strchr(rest, '?'), *slash, *end;
	int rc;

	c->wait_n = -1;
	c->wait_us = WAIT_TIMEOUT_US;
	if (q)
		*q++ = '\0';
	if ((slash = strchr(rest, '/')) != NULL) {
		*slash = '\0';
		if (slash[1]) {
			errno = 0;
			long db = strtol(slash + 1, &end, 10);
			if (errno || *end || db < 0 || db > 65535)
				return bad_url(u,
					       "the database must be a "
					       "number (redis://host:port/0)");
			c->db = (int)db;
		}
	}
	if ((rc = parse_authority(c, u, rest)) < 0 ||
	    (q && (rc = parse_query(c, u, q)) < 0))
		return rc;
	if (!c->name && !(c->name = due__strdup_n("default", 7)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	make_label(c);
	return 0;
}

static int rd_parse_url(void **cfg, const due_url *u)
{
	rd_cfg *c;
	char *rest;
	int rc;

	*cfg = NULL;
	if (strcmp(u->scheme, "rediss") == 0)
		return due__error_set(
		    DUE_EINVAL,
		    "store URL '%s': rediss:// (TLS) is not supported: this "
		    "build's hiredis has no TLS; use redis:// over a trusted "
		    "network or a TLS tunnel",
		    u->text);
	if (strncmp(u->rest, "//", 2) != 0)
		return bad_url(u, "use redis://[:password@]host:port/DB"
				  "[?prefix=NAME]");
	if (!(c = calloc(1, sizeof(*c))) ||
	    !(rest = due__strdup_n(u->rest + 2, strlen(u->rest + 2)))) {
		free(c);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	rc = parse_rest(c, u, rest);
	free(rest);
	if (rc < 0) {
		rd_free_cfg(c);
		return rc;
	}
	*cfg = c;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Connection, errors, the script                                      */
/* ------------------------------------------------------------------ */

/* An integer from a reply element (integer or numeric string). */
static int64_t rint_of(const redisReply *r)
{
	if (!r)
		return 0;
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type == REDIS_REPLY_STRING)
		return strtoll(r->str, NULL, 10);
	return 0;
}

static bool is_array(const redisReply *r, size_t min)
{
	return r && r->type == REDIS_REPLY_ARRAY && r->elements >= min;
}

/* DUE_ESTORE naming the store; drops a broken connection. */
static int rd_error(due_store *s, const char *what, const char *detail)
{
	int rc = due__error_set(DUE_ESTORE, "redis store %s: %s: %s",
				s->cfg.label, what, detail);
	if (s->c && s->c->err) {
		redisFree(s->c);
		s->c = NULL;
	}
	return rc;
}

/* An error reply as DUE_ESTORE for `what` (the reply freed), else 0. */
static int rd_check(due_store *s, redisReply *r, const char *what)
{
	char msg[512];

	if (!r)
		return rd_error(s, what, "connection lost");
	if (r->type != REDIS_REPLY_ERROR)
		return 0;
	snprintf(msg, sizeof(msg), "%s", r->str);
	freeReplyObject(r);
	return rd_error(s, what, msg);
}

static void drop(redisContext **c)
{
	if (*c)
		redisFree(*c);
	*c = NULL;
}

/*
** The start of a call: every wait it makes for the server (a connect,
** the search for a cluster's master, each reply but WAIT's) ends by now
** + the bound.
*/
static void begin(due_store *s)
{
	s->end = due__mono_us() + s->timeout_us;
	s->silent = false;
}

/* What the call under way has left, in microseconds (<= 0: spent). */
static int64_t left_us(const due_store *s) { return s->end - due__mono_us(); }

/* Sleep ms milliseconds, or what the call has left when that is less. */
static void nap_ms(const due_store *s, long ms)
{
	int64_t us = left_us(s);
	struct timespec t;

	if (us > ms * 1000LL)
		us = ms * 1000LL;
	if (us <= 0)
		return;
	t.tv_sec = (time_t)(us / 1000000);
	t.tv_nsec = (long)(us % 1000000) * 1000L;
	nanosleep(&t, NULL);
}

static struct timeval tv_of(int64_t us)
{
	struct timeval tv = {(time_t)(us / 1000000),
			     (suseconds_t)(us % 1000000)};
	return tv;
}

/*
** How long a connect or a reply is awaited: until `end` (monotonic),
** and the wait a "no answer" names (`in`).
*/
typedef struct patience {
	int64_t end, in;
} patience;

/* The call's: until its end, named as the bound. */
static patience whole(const due_store *s)
{
	return (patience){s->end, s->timeout_us};
}

/*
** One node's among several that may be asked in turn (a cluster's nodes
** for the slot map, several seeds): at most half the bound, and at most
** DIAL_WAIT_US, so that a silent node (a partitioned master) leaves time
** to ask the others; with one node, the call's.
*/
static patience probe(const due_store *s)
{
	patience p = whole(s);
	int64_t in = s->timeout_us / 2, end;

	if (in > DIAL_WAIT_US)
		in = DIAL_WAIT_US;
	end = due__mono_us() + in;
	if ((s->cluster || s->cfg.nseed > 1) && end < p.end)
		p.end = end, p.in = in;
	return p;
}

/*
** DUE_ESTORE "no answer from the store at HOST:PORT in N s" (the node
** addressed, the wait `in`).  The call is marked silent, so that
** redis_shard.c asks no other shard of that node in the same call, and
** the node is asked last in a cluster's next search (candidate).
*/
static int no_answer(due_store *s, const char *host, int port, int64_t in)
{
	char at[300];

	snprintf(at, sizeof(at), "%s:%d", host, port);
	snprintf(s->shun.host, sizeof(s->shun.host), "%s", host);
	s->shun.port = port;
	s->silent = true;
	return due__store_no_answer(at, in);
}

/*
** Whether c failed because a wait ran out rather than because the
** connection broke: a connect (ETIMEDOUT), a write (SO_SNDTIMEO: EAGAIN
** in hiredis 0.14's blocking mode), or REDIS_ERR_TIMEOUT in hiredis 1.x.
*/
static bool timed_out(const redisContext *c)
{
#ifdef REDIS_ERR_TIMEOUT
	if (c->err == REDIS_ERR_TIMEOUT)
		return true;
#endif
	return c->err == REDIS_ERR_IO &&
	       (strcmp(c->errstr, strerror(EAGAIN)) == 0 ||
		strcmp(c->errstr, strerror(EWOULDBLOCK)) == 0 ||
		strcmp(c->errstr, strerror(ETIMEDOUT)) == 0);
}

/*
** Send what c's output buffer holds and read one reply, waiting for it
** until `end` (monotonic): 0 and *out (an error reply is a reply), 1 when
** the server said nothing in time, -1 when the connection failed
** (c->errstr says how).  The write waits at most the bound per write(2)
** (SO_SNDTIMEO, set by dial); the reply is polled for, so the wait ends
** at `end` exactly, whatever hiredis' own read would do.  After 1 or -1,
** c is unusable (a late reply would answer the next command): the caller
** drops it.
*/
static int exchange(redisContext *c, int64_t end, redisReply **out)
{
	void *r = NULL;
	int done = 0;

	*out = NULL;
	do {
		if (redisBufferWrite(c, &done) != REDIS_OK)
			return timed_out(c) ? 1 : -1;
	} while (!done);
	while (redisGetReplyFromReader(c, &r) == REDIS_OK && !r) {
		struct pollfd p = {c->fd, POLLIN, 0};
		int64_t left = end - due__mono_us();
		int n;

		if (left <= 0)
			return 1;
		n = poll(&p, 1, (int)((left + 999) / 1000));
		if (n == 0 || (n < 0 && errno == EINTR))
			continue; /* the clock says whether time is up */
		if (n < 0) {
			c->err = REDIS_ERR_IO;
			snprintf(c->errstr, sizeof(c->errstr), "poll: %s",
				 strerror(errno));
			return -1;
		}
		if (redisBufferRead(c) != REDIS_OK)
			return -1;
	}
	if (!r)
		return -1; /* a protocol error: c->err says which */
	*out = r;
	return 0;
}

/*
** The reply to what c's output buffer holds (a redisAppendCommand*),
** awaited as p says: 0 and *out (the caller frees it; an error reply is
** a reply), or DUE_ESTORE: no_answer() naming c's node when it said
** nothing in time, else c's error for `what`.  c must be dropped after a
** failure.
*/
static int await_reply(due_store *s, redisContext *c, patience p,
		       redisReply **out, const char *what)
{
	int rc = exchange(c, p.end, out);

	if (rc == 0)
		return 0;
	if (rc > 0)
		return no_answer(s, c->tcp.host, c->tcp.port, p.in);
	return due__error_set(DUE_ESTORE, "redis store %s: %s: %s",
			      s->cfg.label, what,
			      c->errstr[0] ? c->errstr : "connection lost");
}

/*
** One command on connection c (s->c, s->sub or one of dial()'s) and its
** reply, awaited as p says: see await_reply.  Nothing is sent when p's
** end has passed (DUE_ESTORE, no_answer).
*/
static int vcmd(due_store *s, redisContext *c, patience p, redisReply **out,
		const char *what, const char *fmt, va_list ap)
{
	*out = NULL;
	if (p.end <= due__mono_us())
		return no_answer(s, c->tcp.host, c->tcp.port, p.in);
	if (redisvAppendCommand(c, fmt, ap) != REDIS_OK)
		return due__error_set(DUE_ENOMEM, "out of memory");
	return await_reply(s, c, p, out, what);
}

/* One command on connection c (vcmd); c is the caller's to drop. */
static int node_cmd(due_store *s, redisContext *c, patience p, redisReply **out,
		    const char *what, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vcmd(s, c, p, out, what, fmt, ap);
	va_end(ap);
	return rc;
}

/*
** One command on s->c (connected: rd_ok), its reply awaited as p says
** (whole(s) but for WAIT and a probe): 0 and *out, or DUE_ESTORE with
** s->c dropped, so the next call connects again (rd_ok).
*/
static int rd_cmd(due_store *s, patience p, redisReply **out, const char *what,
		  const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vcmd(s, s->c, p, out, what, fmt, ap);
	va_end(ap);
	if (rc < 0)
		drop(&s->c);
	return rc;
}

/* SCRIPT LOAD head + the script; its sha into sha (48 bytes). */
static int load_text(due_store *s, const char *head, char *sha)
{
	redisReply *r;
	int rc;

	if ((rc = rd_cmd(s, whole(s), &r, "load script", "SCRIPT LOAD %s%s",
			 head, s->script)) < 0 ||
	    (rc = rd_check(s, r, "load script")) < 0)
		return rc;
	if (r->type != REDIS_REPLY_STRING || r->len >= 48) {
		freeReplyObject(r);
		return rd_error(s, "load script", "unexpected reply");
	}
	memcpy(sha, r->str, (size_t)r->len + 1);
	freeReplyObject(r);
	return 0;
}

/*
** The script's allow-oom twin (Redis 7 script flags): the same text, run
** only for the operations that free memory (oom_free) after the server
** refused them for being over maxmemory.
*/
#define OOM_HEAD "#!lua flags=allow-oom\n"

/*
** Redis 7 functions.  EVALSHA runs the whole chunk at each call: every
** function of every operation defined again, the field maps and column
** lists built again, before the operation runs (about 288,000
** redis-server instructions a call, docs/internals/redis.md "Issue
** 39").  A function library runs the chunk once, when it is loaded, and
** each FCALL runs only run() (dispatch.lua).  The library is named by a
** hash of the script's text (due_<FNV-1a 64>), so every process of one
** build shares one library on a server, another build loads its own
** beside it, and a name that exists holds this text: "already exists"
** is a success.  Its three functions are run() with three sets of flags:
** due_H (may write; refused at its start when the server is over
** maxmemory), due_H_ro for the operations that only read (op_reads:
** no-writes, so they answer on a full server, as EVALSHA's reads do) and
** due_H_oom for the ones that free memory (oom_free: allow-oom, the
** script twin's role).  A server without functions (Redis 6), a user
** refused FUNCTION or FCALL (ACL), or any refusal of the load falls
** back to EVALSHA for this handle (s->fn false), which behaves the same,
** slower.  FUNCTION FLUSH (or a library lost otherwise) answers
** "Function not found": the library is loaded again, as on NOSCRIPT.
*/
#define FN_LOAD_FAILED 1

static bool starts(const redisReply *r, const char *word)
{
	return r && r->type == REDIS_REPLY_ERROR &&
	       strncmp(r->str, word, strlen(word)) == 0;
}

/*
** FUNCTION LOAD s->lib: 0 (loaded, or there), FN_LOAD_FAILED (this
** server or user will not run it: no such command, NOPERM, full, the
** library refused), or < 0: a refusal that passes (LOADING after a
** restart, BUSY, a replica's READONLY) is the call's error, and the next
** call tries the library again rather than EVALSHA for good.
*/
static int load_lib(due_store *s)
{
	redisReply *r;
	int rc;

	if ((rc = rd_cmd(s, whole(s), &r, "load function", "FUNCTION LOAD %s",
			 s->lib)) < 0)
		return rc;
	if (r->type != REDIS_REPLY_ERROR || strstr(r->str, "already exists"))
		rc = 0;
	else if (starts(r, "ERR unknown") || starts(r, "NOPERM") ||
		 starts(r, "OOM") || strstr(r->str, "rror registering") ||
		 strstr(r->str, "rror compiling"))
		rc = FN_LOAD_FAILED;
	else
		return rd_check(s, r, "load function"); /* frees r */
	freeReplyObject(r);
	return rc;
}

/*
** Load the library (s->fn), or on a server that refuses it the script
** (and its allow-oom twin when it was in use).
*/
static int load_script(due_store *s)
{
	int rc;

	if (s->fn) {
		if ((rc = load_lib(s)) <= 0)
			return rc;
		s->fn = false; /* for this handle's life */
	}
	rc = load_text(s, "", s->sha);
	if (rc == 0 && s->sha_oom[0])
		rc = load_text(s, OOM_HEAD, s->sha_oom);
	return rc;
}

/* The value of CONFIG GET name into buf ("" when CONFIG is refused). */
static int config_get(due_store *s, const char *name, char *buf, size_t n)
{
	redisReply *r;
	int rc;

	buf[0] = '\0';
	if ((rc = rd_cmd(s, whole(s), &r, "read configuration", "CONFIG GET %s",
			 name)) < 0)
		return rc;
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[1]->type == REDIS_REPLY_STRING)
		snprintf(buf, n, "%s", r->element[1]->str);
	freeReplyObject(r);
	return 0;
}

/*
** Leave a warning (due_db_warning) when the AOF is not fsynced before the
** reply: everysec loses up to the last second of acknowledged writes in a
** power loss or kernel crash, no leaves the flush to the kernel (about 30
** seconds).  Called only with appendonly yes; 0 or the CONFIG error.
*/
static int warn_fsync(due_store *s)
{
	char v[64];
	int rc;

	if ((rc = config_get(s, "appendfsync", v, sizeof(v))) < 0)
		return rc;
	if (strcmp(v, "everysec") == 0)
		due__open_warning_set(
		    "redis store %s: appendfsync everysec: the last second of "
		    "acknowledged writes can be lost in a crash; set "
		    "appendfsync always",
		    s->cfg.label);
	else if (strcmp(v, "no") == 0)
		due__open_warning_set(
		    "redis store %s: appendfsync no: the kernel decides when "
		    "the AOF reaches the disk, so the last seconds (about 30) "
		    "of acknowledged writes can be lost in a crash; set "
		    "appendfsync always",
		    s->cfg.label);
	return 0;
}

/*
** Refuse a server that can lose acknowledged tasks (no AOF) or strand
** them (eviction), unless ?durability=unsafe; warn about an AOF that is
** not fsynced before the reply (warn_fsync).  A server that refuses
** CONFIG (a managed service, a renamed command) is taken as it is.
*/
static int check_durability(due_store *s)
{
	char v[64], aof[8];
	int rc;

	if (s->cfg.unsafe)
		return 0;
	if ((rc = config_get(s, "appendonly", aof, sizeof(aof))) < 0)
		return rc;
	if (strcmp(aof, "no") == 0)
		return due__error_set(
		    DUE_ESTORE,
		    "redis store %s: the server runs with appendonly no, so "
		    "a crash loses acknowledged tasks: set appendonly yes "
		    "(or add ?durability=unsafe to the URL for throw-away "
		    "use)",
		    s->cfg.label);
	if ((rc = config_get(s, "maxmemory-policy", v, sizeof(v))) < 0)
		return rc;
	if (v[0] && strcmp(v, "noeviction") != 0)
		return due__error_set(
		    DUE_ESTORE,
		    "redis store %s: the server runs with maxmemory-policy "
		    "%s, which can evict a lease or a unique key and strand "
		    "tasks: set maxmemory-policy noeviction (or add "
		    "?durability=unsafe to the URL for throw-away use)",
		    s->cfg.label, v);
	return strcmp(aof, "yes") == 0 ? warn_fsync(s) : 0;
}

/*
** AUTH and SELECT on a new connection c, awaited as p says: 0, or
** DUE_ESTORE (a refusal, or no_answer).
*/
static int hello(due_store *s, redisContext *c, patience p)
{
	redisReply *r = NULL;
	int rc = 0;

	if (s->cfg.password)
		rc = s->cfg.user ? node_cmd(s, c, p, &r, "AUTH", "AUTH %s %s",
					    s->cfg.user, s->cfg.password)
				 : node_cmd(s, c, p, &r, "AUTH", "AUTH %s",
					    s->cfg.password);
	if (rc == 0 && (!r || r->type != REDIS_REPLY_ERROR) && s->cfg.db) {
		freeReplyObject(r);
		rc = node_cmd(s, c, p, &r, "SELECT", "SELECT %d", s->cfg.db);
	}
	if (rc == 0 && r && r->type == REDIS_REPLY_ERROR)
		rc = due__error_set(DUE_ESTORE, "redis store %s: %s",
				    s->cfg.label, r->str);
	freeReplyObject(r);
	return rc;
}

/*
** A new connection to node n, AUTH, SELECT, within what the call has
** left; while several nodes may be asked in turn (a cluster, several
** seeds) all of it within DIAL_WAIT_US (probe).  Each write on it waits
** at most the bound (SO_SNDTIMEO; replies: exchange()).  *out NULL on
** failure: DUE_ESTORE, no_answer() when the node did not answer in time.
*/
static int dial(due_store *s, const rd_node *n, redisContext **out)
{
	patience p = probe(s);
	int64_t wait = p.end - due__mono_us();
	redisContext *c;
	int rc = 0;

	*out = NULL;
	if (wait <= 0)
		return no_answer(s, n->host, n->port, p.in);
	c = redisConnectWithTimeout(n->host, n->port, tv_of(wait));
	if (c && c->err && timed_out(c))
		rc = no_answer(s, n->host, n->port, p.in);
	else if (!c || c->err ||
		 redisSetTimeout(c, tv_of(s->timeout_us)) != REDIS_OK)
		rc = due__error_set(
		    DUE_ESTORE, "redis store %s: connect to %s:%d: %s",
		    s->cfg.label, n->host, n->port,
		    c ? c->errstr : "cannot allocate a connection");
	if (rc == 0)
		rc = hello(s, c, p);
	if (rc < 0) {
		redisFree(c);
		return rc;
	}
	*out = c;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Cluster: the master of the store's slot                             */
/* ------------------------------------------------------------------ */

/*
** CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the hash of the
** Redis Cluster specification: a key's slot is CRC16(tag) mod 16384,
** where tag is the text between the first { and the next }.
*/
static int key_slot(const char *tag)
{
	unsigned crc = 0;

	for (; *tag; tag++) {
		crc ^= (unsigned)(unsigned char)*tag << 8;
		for (int i = 0; i < 8; i++)
			crc = crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1;
		crc &= 0xffff;
	}
	return (int)(crc & 16383);
}

static bool same_node(const rd_node *a, const rd_node *b)
{
	return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* Remember node n (a seed of later refreshes) unless known or full. */
static void know(due_store *s, const rd_node *n)
{
	for (size_t i = 0; i < s->nknown; i++)
		if (same_node(&s->known[i], n))
			return;
	if (s->nknown < RD_MAX_KNOWN)
		s->known[s->nknown++] = *n;
}

/*
** One node of a CLUSTER SLOTS entry ([ip, port, id, ...]) into *n; an
** empty ip means the node that answered (from).  False when malformed.
*/
static bool node_of(const redisReply *e, const rd_node *from, rd_node *n)
{
	if (!is_array(e, 2) || e->element[0]->type != REDIS_REPLY_STRING ||
	    e->element[1]->type != REDIS_REPLY_INTEGER ||
	    e->element[0]->len >= (int)sizeof(n->host))
		return false;
	snprintf(n->host, sizeof(n->host), "%s",
		 e->element[0]->len && strcmp(e->element[0]->str, "?")
		     ? e->element[0]->str
		     : from->host);
	n->port = (int)e->element[1]->integer;
	return true;
}

/*
** Read CLUSTER SLOTS from the connection to node from: every node into
** known, the master of the store's slot into s->master.  0, or
** DUE_ESTORE when the reply names no master for the slot.
*/
static int read_slots(due_store *s, redisContext *c, const rd_node *from)
{
	redisReply *r;
	rd_node n;
	bool found = false;
	int rc;

	if ((rc = node_cmd(s, c, probe(s), &r, "read CLUSTER SLOTS",
			   "CLUSTER SLOTS")) < 0)
		return rc;
	for (size_t i = 0; is_array(r, 1) && i < r->elements; i++) {
		const redisReply *e = r->element[i];
		if (!is_array(e, 3))
			continue;
		for (size_t j = 2; j < e->elements; j++)
			if (node_of(e->element[j], from, &n))
				know(s, &n);
		if (rint_of(e->element[0]) <= s->slot &&
		    s->slot <= rint_of(e->element[1]) &&
		    node_of(e->element[2], from, &n))
			s->master = n, found = true;
	}
	freeReplyObject(r);
	return found ? 0
		     : due__error_set(DUE_ESTORE,
				      "redis store %s: %s:%d names no master "
				      "for slot %d",
				      s->cfg.label, from->host, from->port,
				      s->slot);
}

/* The i-th of the master, the seeds, the known nodes. */
static const rd_node *any_node(const due_store *s, size_t i)
{
	if (s->master.port && i-- == 0)
		return &s->master;
	if (i < s->cfg.nseed)
		return &s->cfg.seed[i];
	i -= s->cfg.nseed;
	return i < s->nknown ? &s->known[i] : NULL;
}

/*
** The i-th node to ask: the master, then the seeds, then the known, but
** the node silent when the search began (s->last, from s->shun) last of
** all: a partitioned master asked first would take a whole short bound
** every time, and the search would never reach the replica promoted in
** its place.  A search sets s->last once, so its order holds while it
** runs.
*/
static const rd_node *candidate(const due_store *s, size_t i)
{
	const rd_node *n;
	size_t k = 0;

	for (size_t j = 0; (n = any_node(s, j)) != NULL; j++)
		if (!(s->last.port && same_node(n, &s->last)) && k++ == i)
			return n;
	return s->last.port && i == k ? &s->last : NULL;
}

/*
** Ask the nodes (candidate order) for the slot map until one answers,
** while the call has time: 0 with s->master set, or the last node's
** error.
*/
static int refresh_map(due_store *s)
{
	const rd_node *n;
	redisContext *c;
	int rc =
	    due__error_set(DUE_ESTORE, "redis store %s: no node", s->cfg.label);

	s->last = s->shun;
	for (size_t i = 0; (n = candidate(s, i)) != NULL; i++) {
		rd_node at = *n; /* know() may not move it, but be plain */
		if ((rc = dial(s, &at, &c)) == 0) {
			rc = read_slots(s, c, &at);
			redisFree(c);
			if (rc == 0)
				return 0;
		}
		if (left_us(s) <= 0)
			break;
	}
	return rc;
}

/*
** Connect s->c to the master of the store's slot, with the script
** loaded: ask the nodes for the slot map and dial the master it names,
** again every 200 ms while none answers (a failover in progress) for at
** most FAILOVER_WAIT_US, and never past the call's bound.  0, or
** DUE_ESTORE with the last failure.
*/
static int cl_connect(due_store *s)
{
	int64_t end = due__mono_us() + FAILOVER_WAIT_US,
		span = FAILOVER_WAIT_US;
	char last[512], dur[48];
	int rc;

	if (end > s->end)
		end = s->end;
	for (;;) {
		drop(&s->c);
		if ((rc = refresh_map(s)) == 0 &&
		    (rc = dial(s, &s->master, &s->c)) == 0 &&
		    (rc = load_script(s)) == 0)
			return 0;
		if (due__mono_us() >= end)
			break;
		nap_ms(s, 200);
	}
	drop(&s->c);
	snprintf(last, sizeof(last), "%s", due_error_last());
	if (span > s->timeout_us) /* the call's bound ended the search */
		span = s->timeout_us;
	if (span % 1000000 == 0)
		snprintf(dur, sizeof(dur), "%lld s",
			 (long long)(span / 1000000));
	else
		due_duration_format(dur, sizeof(dur), span);
	return due__error_set(DUE_ESTORE,
			      "%s (no master of slot %d answered in %s)", last,
			      s->slot, dur);
}

/*
** True when an idle connection has something to read: the server closed
** it (a node killed or restarted) or sent what no request asked for.
*/
static bool stale(redisContext *c)
{
	struct pollfd p = {c->fd, POLLIN, 0};
	return poll(&p, 1, 0) > 0;
}

/*
** Connect when not connected: the first call, or the call after one that
** lost its connection or got no answer in time (every failure drops s->c).
** The one place that connects again, within what the call has left.
*/
static int rd_ok(due_store *s)
{
	int rc;

	if (s->c && s->cluster && stale(s->c))
		drop(&s->c);
	if (s->c)
		return 0;
	if (s->cluster)
		return cl_connect(s);
	if ((rc = dial(s, &s->cfg.seed[0], &s->c)) < 0)
		return rc;
	return load_script(s);
}

/* The arguments of one operation, binary-safe. */
typedef struct rarg {
	const char *p; /* NULL: num */
	size_t n;
	char *own; /* an owned copy ("=" + text of an optional value) */
	char num[24];
} rarg;

typedef struct rargs {
	rarg *a;
	size_t n, cap;
	bool oom;
} rargs;

static rarg *arg_new(rargs *v)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 32;
		rarg *a = realloc(v->a, cap * sizeof(*a));
		if (!a) {
			v->oom = true;
			return NULL;
		}
		v->a = a, v->cap = cap;
	}
	memset(&v->a[v->n], 0, sizeof(rarg));
	return &v->a[v->n++];
}

static void arg_s(rargs *v, const void *p, size_t n)
{
	rarg *a = arg_new(v);
	if (a)
		a->p = p ? p : "", a->n = p ? n : 0;
}

static void arg_z(rargs *v, const char *s) { arg_s(v, s, strlen(s)); }

static void arg_i(rargs *v, int64_t x)
{
	rarg *a = arg_new(v);
	if (a)
		a->n = (size_t)snprintf(a->num, sizeof(a->num), "%lld",
					(long long)x);
}

/* An optional text: "" for none, "=" + text when given. */
static void arg_opt(rargs *v, const char *s)
{
	rarg *a = arg_new(v);
	size_t n;

	if (!a || !s)
		return;
	n = strlen(s);
	if (!(a->own = malloc(n + 2))) {
		v->oom = true;
		return;
	}
	a->own[0] = '=';
	memcpy(a->own + 1, s, n + 1);
	a->p = a->own, a->n = n + 1;
}

/* A text the args own from now on (freed by args_free); NULL: oom. */
static void arg_own(rargs *v, char *own, size_t n)
{
	rarg *a = arg_new(v);

	if (!a || !own) {
		free(own);
		v->oom = true;
		return;
	}
	a->own = own, a->p = own, a->n = n;
}

static void args_free(rargs *v)
{
	for (size_t i = 0; i < v->n; i++)
		free(v->a[i].own);
	free(v->a);
}

static bool op_reads(const char *op);

/*
** EVALSHA sha 1 meta op args... (or FCALL fn 1 meta op args...: twin
** picks the allow-oom script or function) on s->c, its reply awaited until the
** call's end: 0 and *out (an error reply too: redirect() reads it), or
** DUE_ESTORE with s->c dropped (the script may have run: see rd_eval).
*/
static int eval_once(due_store *s, bool twin, const char *op, rargs *v,
		     redisReply **out, const char *what)
{
	size_t n = v->n + 5;
	const char **argv = malloc(n * sizeof(*argv));
	size_t *len = malloc(n * sizeof(*len));
	int rc;

	*out = NULL;
	if (!argv || !len || left_us(s) <= 0) {
		free(argv);
		free(len);
		if (argv && len) /* the call's time is spent: nothing sent */
			rc = no_answer(s, s->c->tcp.host, s->c->tcp.port,
				       s->timeout_us);
		else
			rc = due__error_set(DUE_ENOMEM, "out of memory");
		drop(&s->c);
		return rc;
	}
	if (s->fn) /* fname: 0 may write, 1 reads only, 2 allow-oom */
		argv[0] = "FCALL", argv[1] = s->fname[twin ? 2 : op_reads(op)];
	else
		argv[0] = "EVALSHA", argv[1] = twin ? s->sha_oom : s->sha;
	argv[2] = "1";
	argv[3] = s->meta, argv[4] = op;
	for (size_t i = 0; i < 5; i++)
		len[i] = strlen(argv[i]);
	for (size_t i = 0; i < v->n; i++) {
		argv[i + 5] = v->a[i].p ? v->a[i].p : v->a[i].num;
		len[i + 5] = v->a[i].n;
	}
	if (redisAppendCommandArgv(s->c, (int)n, argv, len) != REDIS_OK)
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	else
		rc = await_reply(s, s->c, whole(s), out, what);
	free(argv);
	free(len);
	if (rc < 0)
		drop(&s->c);
	return rc;
}

/*
** "MOVED slot host:port": the new master of the slot into s->master (its
** connection dropped, so the next rd_ok dials it).  False if malformed.
*/
static bool moved_to(due_store *s, const redisReply *r)
{
	const char *sp = strrchr(r->str, ' '), *colon;
	rd_node n;

	if (!sp || !(colon = strrchr(sp, ':')) ||
	    (size_t)(colon - sp - 1) >= sizeof(n.host))
		return false;
	snprintf(n.host, sizeof(n.host), "%.*s", (int)(colon - sp - 1), sp + 1);
	n.port = (int)strtol(colon + 1, NULL, 10);
	if (n.port < 1 || n.port > 65535)
		return false;
	s->master = n;
	know(s, &n);
	drop(&s->c);
	return true;
}

/* An error naming the command FCALL ('fcall' in Redis 7, `FCALL` in 6). */
static bool names_fcall(const char *e)
{
	return strstr(e, "'fcall'") || strstr(e, "'FCALL'") ||
	       strstr(e, "`fcall`") || strstr(e, "`FCALL`");
}

/*
** What to do with a reply the server gave WITHOUT running the script:
** 1 send again at once (NOSCRIPT: loaded again; MOVED: the new master is
** dialled by rd_ok), 2 send again after a pause (the slot is migrating
** or the cluster is failing over), 0 keep the reply, or the error of
** loading the script again (DUE_ESTORE, no reply kept).  ASK is not
** followed: the script touches keys it does not declare, and during a
** migration some are still on the source and some already on the target,
** so it can run safely on neither; it waits for the migration to end
** (MOVED), like the script's own guard (TRYAGAIN).
*/
static int redirect(due_store *s, const redisReply *r)
{
	int rc;

	if (starts(r, "NOSCRIPT") || starts(r, "ERR Function not found"))
		return (rc = load_script(s)) < 0 ? rc : 1;
	if (s->fn && r && r->type == REDIS_REPLY_ERROR && names_fcall(r->str) &&
	    (starts(r, "ERR unknown command") || starts(r, "NOPERM"))) {
		s->fn = false; /* no functions here, or FCALL refused */
		return (rc = load_script(s)) < 0 ? rc : 1;
	}
	if (!s->cluster)
		return 0;
	if (starts(r, "MOVED "))
		return moved_to(s, r) ? 1 : 0;
	if (starts(r, "READONLY")) {
		s->master.port = 0;
		drop(&s->c);
		return 1;
	}
	return starts(r, "ASK ") || starts(r, "TRYAGAIN") ||
		       starts(r, "CLUSTERDOWN") || starts(r, "LOADING") ||
		       starts(r, "MASTERDOWN")
		   ? 2
		   : 0;
}

/* Operations that never write what a caller relies on: no WAIT. */
static bool op_reads(const char *op)
{
	static const char *const ro[] = {
	    "version",	    "get",	 "list",     "stats",	  "metrics",
	    "kind_get",	    "kind_list", "cron_get", "cron_list", "upcoming",
	    "after_states", "outbox",	 NULL};
	for (size_t i = 0; ro[i]; i++)
		if (strcmp(op, ro[i]) == 0)
			return true;
	return false;
}

/*
** WAIT for s->wait_n replicas after a write on this connection: 0 when
** they acknowledged it; DUE_ESTORE when fewer did within the timeout or
** the connection was lost: the write IS on the master (and stays there
** while it lives) but a failover may promote a replica without it.
*/
static int rd_wait(due_store *s, const char *what)
{
	/* the server answers WAIT when its timeout is up at the latest: its
	   own wait does not count against the bound */
	patience p = {due__mono_us() + s->cfg.wait_us + s->timeout_us,
		      s->timeout_us};
	redisReply *r;
	long long got;
	int rc;

	if ((rc = rd_cmd(s, p, &r, what, "WAIT %d %lld", s->wait_n,
			 (long long)(s->cfg.wait_us / 1000))) < 0 ||
	    (rc = rd_check(s, r, what)) < 0)
		return rc;
	got = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	freeReplyObject(r);
	s->degraded = got < s->wait_n;
	if (got >= s->wait_n)
		return 0;
	return due__error_set(
	    DUE_ESTORE,
	    "redis store %s: %s: written on the master but acknowledged by "
	    "%lld of %d replicas (WAIT, %lld ms): a failover now could lose "
	    "it%s",
	    s->cfg.label, what, got < 0 ? 0 : got, s->wait_n,
	    (long long)(s->cfg.wait_us / 1000),
	    strcmp(what, "submit") == 0
		? "; retrying adds it again unless the task has a key"
		: "");
}

/*
** Before a write while degraded (the last WAIT fell short): 0 when the
** master now has s->wait_n replicas online (INFO replication), else
** DUE_ESTORE with nothing written.  Without this, a master that lost its
** replica would go on writing every operation and reporting each as
** failed: a claim takes its tasks (attempt + 1, a lease) and hands none
** out, and each lease's expiry spends an attempt, until the tasks are
** DEAD without having run.  A replica lost between this check and the
** next WAIT still costs that one operation (the usual unknown outcome).
*/
static int rd_replicas_ready(due_store *s, const char *what)
{
	redisReply *r;
	int online = 0, rc;

	if ((rc = rd_cmd(s, whole(s), &r, what, "INFO replication")) < 0 ||
	    (rc = rd_check(s, r, what)) < 0)
		return rc;
	for (const char *p = r->type == REDIS_REPLY_STRING ? r->str : NULL;
	     p && (p = strstr(p, "\nslave")); p++) {
		const char *eol = strchr(p + 1, '\n');
		const char *st = strstr(p, "state=online");
		if (st && (!eol || st < eol))
			online++;
	}
	freeReplyObject(r);
	if (online >= s->wait_n) {
		s->degraded = false;
		return 0;
	}
	return due__error_set(
	    DUE_ESTORE,
	    "redis store %s: %s refused, nothing written: the master has %d "
	    "of the %d replicas online that ?wait= asks for (the last WAIT "
	    "fell short)",
	    s->cfg.label, what, online, s->wait_n);
}

/*
** A Redis at maxmemory (maxmemory-policy noeviction, as the store asks)
** refuses a script's first write that may grow memory: "OOM command not
** allowed when used memory > 'maxmemory'", before anything is written
** (the check is at the first such write of a script that has written
** nothing yet: the Lua scripts never catch a failed call).  The
** operations an operator frees memory with run again, at once, as the
** script's allow-oom twin (Redis 7's script flags), so they work on a
** full store: cancel, kill (they end tasks that prune then deletes; each
** writes a few hundred bytes) and prune.  Every other refusal becomes
** oom_full()'s message.
*/
static bool oom_free(const char *op)
{
	return strcmp(op, "cancel") == 0 || strcmp(op, "kill") == 0 ||
	       strcmp(op, "prune") == 0;
}

/*
** The refusal: "OOM command not allowed ..." (Redis 7 keeps the code of
** the call that failed in the script; Redis 6 wrapped it in "ERR Error
** running script ... -OOM command not allowed").
*/
static bool is_oom(const redisReply *r)
{
	return starts(r, "OOM ") ||
	       (r && r->type == REDIS_REPLY_ERROR &&
		strstr(r->str, "OOM command not allowed") != NULL);
}

/* DUE_ESTORE: "Redis is full (maxmemory N): prune or raise maxmemory". */
static int oom_full(due_store *s, const char *what)
{
	char mm[32] = "";

	/* CONFIG GET is allowed at maxmemory; refused (a managed service):
	   the message has no number */
	if (config_get(s, "maxmemory", mm, sizeof(mm)) < 0)
		mm[0] = '\0';
	return due__error_set(
	    DUE_ESTORE,
	    "redis store %s: %s refused: Redis is full (maxmemory%s%s%s): "
	    "prune (`due prune`, after `due cancel` or `due kill` of what "
	    "need not run) or raise maxmemory",
	    s->cfg.label, what, mm[0] ? " " : "", mm, mm[0] ? " bytes" : "");
}

/*
** Run operation op with args v: 0 and the reply in *out (the caller
** frees it), or DUE_ESTORE (a lost connection, a server error, a write
** that fewer replicas than ?wait= acknowledged, a full server: oom_full).
** One call: everything
** but the WAIT ends within the bound (begin).  A reply the server gave
** without running the script (redirect) is retried for at most
** FAILOVER_WAIT_US within that; a connection lost, or silent, after
** sending is not retried (the script may have run): the caller sees
** DUE_ESTORE.  v is freed either way.
*/
static int rd_eval_w(due_store *s, const char *op, rargs *v, redisReply **out,
		     const char *what, bool *written);

/*
** A script that left messages in its shard's outbox (lua/after.lua)
** wraps its reply as {"due:outbox", reply}: unwrapped here, and the
** handle remembers it for redis_shard.c's forwarder (due__redis_outbox).
*/
static void unwrap_outbox(due_store *s, redisReply **out)
{
	redisReply *r = *out, *in;

	if (!is_array(r, 2) || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "due:outbox") != 0)
		return;
	s->outbox = true;
	in = r->element[1];
	r->element[1] = NULL;
	r->elements = 1;
	freeReplyObject(r);
	*out = in;
}

static int rd_eval(due_store *s, const char *op, rargs *v, redisReply **out,
		   const char *what)
{
	return rd_eval_w(s, op, v, out, what, NULL);
}

/*
** rd_eval, but when the script ran and only its WAIT fell short, and
** written is given: *written is true and *out is the script's reply (the
** caller frees it) beside the error, so that the caller knows what it
** wrote (remember).
*/
static int rd_eval_w(due_store *s, const char *op, rargs *v, redisReply **out,
		     const char *what, bool *written)
{
	int64_t end = 0;
	bool twin = false;
	int rc, act;

	*out = NULL;
	if (v->oom) {
		args_free(v);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	begin(s);
again:
	for (int tries = 0;; tries++) {
		if ((rc = rd_ok(s)) < 0 ||
		    (s->degraded && s->wait_n > 0 && !op_reads(op) &&
		     (rc = rd_replicas_ready(s, what)) < 0) ||
		    (rc = eval_once(s, twin, op, v, out, what)) < 0)
			goto done;
		if ((act = redirect(s, *out)) <= 0 || tries > 1000)
			break;
		if (!end)
			end = due__mono_us() + FAILOVER_WAIT_US;
		if (due__mono_us() >= end || left_us(s) <= 0)
			break;
		freeReplyObject(*out);
		*out = NULL;
		if (act == 2 || tries > 2) /* or nodes disagree: MOVED back */
			nap_ms(s, 50);
	}
	if (act < 0) {
		freeReplyObject(*out);
		*out = NULL;
		rc = act;
		goto done;
	}
	if (is_oom(*out)) { /* nothing was written (oom_free) */
		freeReplyObject(*out);
		*out = NULL;
		if (!twin && oom_free(op) &&
		    (s->fn || s->sha_oom[0] ||
		     load_text(s, OOM_HEAD, s->sha_oom) == 0)) {
			twin = true;
			end = 0;
			goto again;
		}
		if (!s->c) { /* the connection was lost loading the twin */
			rc = due_error_last_code();
			goto done;
		}
		rc = oom_full(s, what);
		goto done;
	}
	unwrap_outbox(s, out);
	if ((rc = rd_check(s, *out, what)) < 0)
		*out = NULL;
	else if (s->wait_n > 0 && !op_reads(op) &&
		 (rc = rd_wait(s, what)) < 0) {
		if (written)
			*written = true;
		else {
			freeReplyObject(*out);
			*out = NULL;
		}
	}
done:
	args_free(v);
	return rc;
}

static int bad_reply(due_store *s, redisReply *r, const char *what)
{
	freeReplyObject(r);
	return due__error_set(DUE_ESTORE,
			      "redis store %s: %s: unexpected "
			      "reply",
			      s->cfg.label, what);
}

/* ------------------------------------------------------------------ */
/* A row.h cursor over reply rows                                      */
/* ------------------------------------------------------------------ */

typedef struct rcur {
	redisReply **rows;
	size_t n, i;
	redisReply *row;
	char num[24];
} rcur;

static int cur_next(void *p)
{
	rcur *c = p;
	if (c->i >= c->n)
		return 0;
	c->row = c->rows[c->i++];
	return 1;
}

static redisReply *cell(rcur *c, int col)
{
	if (!c->row || c->row->type != REDIS_REPLY_ARRAY ||
	    (size_t)col >= c->row->elements)
		return NULL;
	return c->row->element[col];
}

static bool cur_is_null(void *p, int col)
{
	redisReply *r = cell(p, col);
	return !r || r->type == REDIS_REPLY_NIL;
}

static int64_t cur_i64(void *p, int col) { return rint_of(cell(p, col)); }

static due_time cur_time(void *p, int col) { return rint_of(cell(p, col)); }

static const void *cur_bytes(void *p, int col, size_t *len)
{
	rcur *c = p;
	redisReply *r = cell(c, col);

	*len = 0;
	if (!r || r->type == REDIS_REPLY_NIL)
		return NULL;
	if (r->type == REDIS_REPLY_INTEGER) {
		*len = (size_t)snprintf(c->num, sizeof(c->num), "%lld",
					r->integer);
		return c->num;
	}
	*len = (size_t)r->len;
	return r->str;
}

static const due_row_ops cur_ops = {cur_next, cur_is_null, cur_i64, cur_time,
				    cur_bytes};

/* A cursor over the elements of array reply a (or nothing). */
static due_rows rows_of(rcur *c, redisReply *a)
{
	memset(c, 0, sizeof(*c));
	if (is_array(a, 0))
		c->rows = a->element, c->n = a->elements;
	return (due_rows){&cur_ops, c};
}

/*
** A task hash's one-letter field of each row.h task column (a listpack
** stores each field name in every task): the prelude's F for the script
** (tcall, row()) and the claim rows' decoder (claim_col) are both made
** from this list.  The id is the key's, not a field.
*/
/* clang-format off */
#define DUE_RD_FIELDS(X)                                                       \
	X(KIND, kind, 'k') X(PAYLOAD, payload, 'p') X(STATE, state, 's')        \
	X(DUE_AT, due_at, 'd') X(ATTEMPT, attempt, 'a')                         \
	X(ATTEMPT_BASE, attempt_base, 'b') X(MAX_ATTEMPTS, max_attempts, 'm')   \
	X(BACKOFF_US, backoff_us, 'o') X(BACKOFF_CAP_US, backoff_cap_us, 'c')   \
	X(LEASE_OWNER, lease_owner, 'w') X(LEASE_UNTIL, lease_until, 'l')       \
	X(CANCEL_REQUESTED, cancel_requested, 'x') X(KEY, key, 'y')             \
	X(RESULT, result, 'r') X(LAST_ERROR, last_error, 'e')                   \
	X(CREATED_AT, created_at, 't') X(UPDATED_AT, updated_at, 'u')           \
	X(PRIORITY, priority, 'q') X(GRP, grp, 'g') X(TIMEOUT_US, timeout_us, 'z') \
	X(AFTER_N, after_n, 'v') X(AFTER_LEFT, after_left, 'h')                 \
	X(AFTER_ANY_END, after_any_end, 'f')
/* clang-format on */
#define RD_F_(e, name, letter) #name " = " #letter ", "
#define RD_CASE_(e, name, letter)                                              \
	case letter: return DUE_TC_##e;

/* The task column of hash field `letter`, or -1. */
static int claim_col(char letter)
{
	switch (letter) {
		DUE_RD_FIELDS(RD_CASE_)
	default: return -1;
	}
}

/*
** A cursor over a claim's rows (claim.lua's take): each row is the task's
** id, then its hash's fields and values as HGETALL read them before the
** claim (a field whose value is 0 is left out: 0 then, as rint_of reads a
** missing cell), then the kind's time limit ('z') when the task has none.
** What the claim wrote the caller knows and puts over them: CLAIMED,
** attempt + 1, its owner, the lease until t + lease, updated at t (the
** claim's clock, in the reply).  Half the bulk strings of a row.h row
** and no Lua table of 24 columns a task.
*/
typedef struct ccur {
	redisReply **rows;
	size_t n, i;
	const redisReply *col[DUE_TC_COUNT];
	const char *owner;
	int64_t t, lease_us;
	char num[24];
} ccur;

static int ccur_next(void *p)
{
	ccur *c = p;

	memset(c->col, 0, sizeof(c->col));
	if (c->i >= c->n)
		return 0;
	redisReply *row = c->rows[c->i++];
	if (!is_array(row, 1))
		return 1; /* no id: skipped by the decoder */
	c->col[DUE_TC_ID] = row->element[0];
	for (size_t j = 1; j + 1 < row->elements; j += 2) {
		const redisReply *f = row->element[j];
		int col = f->type == REDIS_REPLY_STRING && f->len == 1
			      ? claim_col(f->str[0])
			      : -1;
		if (col >= 0)
			c->col[col] = row->element[j + 1];
	}
	return 1;
}

static int64_t ccur_i64(void *p, int col)
{
	ccur *c = p;

	switch (col) {
	case DUE_TC_ATTEMPT: return rint_of(c->col[col]) + 1;
	case DUE_TC_LEASE_UNTIL: return c->t + c->lease_us;
	case DUE_TC_UPDATED_AT: return c->t;
	default: return rint_of(c->col[col]);
	}
}

static due_time ccur_time(void *p, int col) { return ccur_i64(p, col); }

static bool ccur_is_null(void *p, int col)
{
	ccur *c = p;

	switch (col) {
	case DUE_TC_STATE:
	case DUE_TC_ATTEMPT:
	case DUE_TC_LEASE_OWNER:
	case DUE_TC_LEASE_UNTIL:
	case DUE_TC_UPDATED_AT: return false;
	default: return !c->col[col] || c->col[col]->type == REDIS_REPLY_NIL;
	}
}

static const void *ccur_bytes(void *p, int col, size_t *len)
{
	ccur *c = p;
	const redisReply *r = c->col[col];

	switch (col) {
	case DUE_TC_STATE: *len = strlen("CLAIMED"); return "CLAIMED";
	case DUE_TC_LEASE_OWNER: *len = strlen(c->owner); return c->owner;
	case DUE_TC_ATTEMPT:
	case DUE_TC_LEASE_UNTIL:
	case DUE_TC_UPDATED_AT:
		*len = (size_t)snprintf(c->num, sizeof(c->num), "%lld",
					(long long)ccur_i64(c, col));
		return c->num;
	default: break;
	}
	*len = 0;
	if (!r || r->type != REDIS_REPLY_STRING)
		return NULL;
	*len = (size_t)r->len;
	return r->str;
}

static const due_row_ops ccur_ops = {ccur_next, ccur_is_null, ccur_i64,
				     ccur_time, ccur_bytes};

/* ------------------------------------------------------------------ */
/* Open, schema, clock                                                 */
/* ------------------------------------------------------------------ */

#define LQ_(e, name) "'" #name "',"
#define LQ_LAST_(e, name) "'" #name "'"
#define FALSE_(e, name) "false,"

/*
** The prelude: the column lists of row.h, the histogram bounds, and CL:
** whether the server is a cluster node (only there can the store's slot
** migrate, so only there does a script probe for it first).  Then the
** Lua, then how it is run: s->script (EVALSHA) ends by running the call,
** s->lib (FUNCTION LOAD) registers run() as three functions (load_lib),
** named after a hash of s->script.
*/
static int build_script(due_store *s)
{
	/* clang-format off */
	static const char cols[] =
	    "local TC = {" DUE_TASK_COLUMNS(LQ_, LQ_LAST_) "}\n"
	    "local F = {" DUE_RD_FIELDS(RD_F_) "}\n"
	    "local SC = {" DUE_SCHED_COLUMNS(LQ_, LQ_LAST_) "}\n"
	    "local KC = {" DUE_KIND_COLUMNS(LQ_, LQ_LAST_) "}\n";
	/* a task row of #TC falses, made in one step (lua row()) */
	static const char row0[] =
	    "local function ROW0() return {"
	    DUE_TASK_COLUMNS(FALSE_, FALSE_) "} end\n";
	/* clang-format on */
	static const char tail[] = "\nreturn run(KEYS, ARGV)\n";
	static const char reg[] =
	    "\nredis.register_function('%1$s', run)\n"
	    "redis.register_function{function_name = '%1$s_ro', "
	    "callback = run, flags = {'no-writes'}}\n"
	    "redis.register_function{function_name = '%1$s_oom', "
	    "callback = run, flags = {'allow-oom'}}\n";
	size_t n = sizeof(cols) + sizeof(row0) + 32 * DUE_HIST_N +
		   strlen(due__redis_lua) + sizeof(tail) + 40;
	char *p = malloc(n);
	size_t off;
	uint64_t h = 14695981039346656037ULL; /* FNV-1a 64 */

	if (!p)
		return due__error_set(DUE_ENOMEM, "out of memory");
	off = (size_t)snprintf(p, n, "%s%slocal CL = %s\nlocal HB = {", cols,
			       row0, s->cluster ? "true" : "false");
	for (int i = 0; i < DUE_HIST_N; i++)
		off += (size_t)snprintf(p + off, n - off, "%s%g", i ? "," : "",
					due_hist_bounds_ms[i]);
	off += (size_t)snprintf(p + off, n - off, "}\n%s", due__redis_lua);
	snprintf(p + off, n - off, "%s", tail);
	s->script = p;
	for (const unsigned char *c = (const unsigned char *)p; *c; c++)
		h = (h ^ *c) * 1099511628211ULL;
	for (int i = 0; i < 3; i++)
		snprintf(s->fname[i], sizeof(s->fname[i]), "due_%016llx%s",
			 (unsigned long long)h,
			 (const char *[]){"", "_ro", "_oom"}[i]);
	n = 32 + off + sizeof(reg) + 3 * sizeof(s->fname[0]);
	if (!(s->lib = malloc(n)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	snprintf(s->lib, n, "#!lua name=%s\n%.*s", s->fname[0], (int)off, p);
	off = strlen(s->lib);
	snprintf(s->lib + off, n - off, reg, s->fname[0]);
	s->fn = true;
	return 0;
}

static int copy_cfg(rd_cfg *dst, const rd_cfg *src)
{
	*dst = *src;
	dst->name = due__strdup_n(src->name, strlen(src->name));
	dst->user =
	    src->user ? due__strdup_n(src->user, strlen(src->user)) : NULL;
	dst->password =
	    src->password ? due__strdup_n(src->password, strlen(src->password))
			  : NULL;
	if (!dst->name || (src->user && !dst->user) ||
	    (src->password && !dst->password))
		return due__error_set(DUE_ENOMEM, "out of memory");
	return 0;
}

/*
** Connect s->c to the first seed that answers INFO cluster, and say
** whether it is a cluster node (cluster_enabled:1).  Several seeds that are
** not a cluster are refused (one server has one address).  The seeds are
** asked in turn while the call (the open) has time.
*/
static int first_seed(due_store *s)
{
	const char *what = "read INFO cluster";
	redisReply *r = NULL;
	int rc = 0;

	for (size_t i = 0; i < s->cfg.nseed; i++) {
		if ((rc = dial(s, &s->cfg.seed[i], &s->c)) == 0 &&
		    (rc = rd_cmd(s, probe(s), &r, what, "INFO cluster")) == 0 &&
		    (rc = rd_check(s, r, what)) == 0)
			break;
		r = NULL; /* rd_check freed an error reply */
		drop(&s->c);
		if (left_us(s) <= 0)
			break;
	}
	if (rc < 0)
		return rc;
	s->cluster = r->type == REDIS_REPLY_STRING &&
		     strstr(r->str, "cluster_enabled:1") != NULL;
	freeReplyObject(r);
	if (!s->cluster && s->cfg.nseed > 1)
		return due__error_set(
		    DUE_EINVAL,
		    "redis store %s: several hosts name the seeds of a Redis "
		    "Cluster, but the first that answered is not a cluster "
		    "node (cluster_enabled:0): name one server",
		    s->cfg.label);
	return 0;
}

/*
** Connect, check the server's durability settings, load the script.
** `create` means nothing more here: init_schema writes the meta hash.
*/
static int rd_open(due_store **out, const void *cfg, const due_open_params *p)
{
	due_store *s = calloc(1, sizeof(*s));
	int rc;

	*out = s;
	if (!s)
		return due__error_set(DUE_ENOMEM, "out of memory");
	s->timeout_us = p->timeout_us;
	begin(s); /* the open is one call: within one bound */
	if ((rc = copy_cfg(&s->cfg, cfg)) < 0)
		return rc;
	{
		/* shard i of a sharded store: its own hash tag, so its own
		   slot; the wake channel is the store's (lua wake) */
		char tag[96];
		if (s->cfg.shards > 1)
			snprintf(tag, sizeof(tag), "due:%s:%d", s->cfg.name,
				 s->cfg.shard);
		else
			snprintf(tag, sizeof(tag), "due:%s", s->cfg.name);
		snprintf(s->meta, sizeof(s->meta), "{%s}:meta", tag);
		snprintf(s->waiters, sizeof(s->waiters), "{%s}:waiters", tag);
		s->slot = key_slot(tag);
	}
	snprintf(s->chan, sizeof(s->chan), "{due:%s}:wake", s->cfg.name);
	snprintf(s->done_chan, sizeof(s->done_chan), "{due:%s}:done",
		 s->cfg.name);
	if ((rc = first_seed(s)) < 0)
		return rc;
	if ((rc = build_script(s)) < 0)
		return rc;
	s->wait_n = s->cfg.wait_n >= 0 ? s->cfg.wait_n : s->cluster ? 1 : 0;
	if (s->cluster && (rc = cl_connect(s)) < 0)
		return rc;
	if ((rc = check_durability(s)) < 0)
		return rc;
	return s->cluster ? 0 : load_script(s);
}

static void rd_close(due_store *s)
{
	if (!s)
		return;
	if (s->c)
		redisFree(s->c);
	if (s->sub)
		redisFree(s->sub);
	cfg_free(&s->cfg);
	free(s->script);
	free(s->lib);
	free(s->wr);
	free(s);
}

/* The script's "version" or "init" (it writes a new store): its answer. */
static int schema_raw(due_store *s, const char *op, int *v)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, DUE_SCHEMA_VERSION);
	arg_i(&a, s->cfg.shards > 1 ? s->cfg.shards : 1);
	arg_i(&a, s->cfg.shard);
	if ((rc = rd_eval(s, op, &a, &r, "read schema version")) < 0)
		return rc;
	*v = (int)rint_of(r);
	freeReplyObject(r);
	return 0;
}

/* The script's refusals among those answers (version(), init's upgrade):
   the error, or 0 for a schema version (or -1: none) to judge. */
static int schema_answer(due_store *s, const int *v)
{
	if (*v <= -10000) /* init: the layout upgrade under live leases */
		return due__error_set(
		    DUE_ESTATE,
		    "redis store %s: %d task(s) run under live leases of "
		    "workers of an earlier build: stop the store's workers "
		    "and let those leases end (or the tasks finish), then run "
		    "`due init` again to upgrade the layout (nothing written)",
		    s->cfg.label, -10000 - *v);
	if (*v <= -1000) /* lua version(): made with other shards= */
		return due__error_set(
		    DUE_ESCHEMA,
		    "redis store %s: this store was made with shards=%d, not "
		    "%d: open it with ?shards=%d (the number of shards is "
		    "fixed when the store is made: a task's id names its "
		    "shard)",
		    s->cfg.label, -1000 - *v,
		    s->cfg.shards > 1 ? s->cfg.shards : 1, -1000 - *v);
	if (*v == -3) /* lua version(): layout 3, or its upgrade cut short */
		return due__error_set(
		    DUE_ESCHEMA,
		    "redis store %s: its layout of tasks and indexes is an "
		    "older one (3, or an upgrade from it cut short): run "
		    "`due init` to upgrade it (stop the store's workers "
		    "first)",
		    s->cfg.label);
	if (*v == -5) /* lua version(): layout 4 */
		return due__error_set(
		    DUE_ESCHEMA,
		    "redis store %s: its layout of tasks is 4, an earlier "
		    "build's: stop every process of that build that uses the "
		    "store (workers, `due serve`), then run `due init` to "
		    "upgrade it to 5 (a quick step that moves no task)",
		    s->cfg.label);
	if (*v == -2) /* lua version(): another layout */
		return due__error_set(
		    DUE_ESCHEMA,
		    "redis store %s: written by another build of due, with "
		    "another layout of tasks and indexes than this build's "
		    "(5): open it with a build that knows that layout (a "
		    "later build, or the development build that wrote it); "
		    "nothing written",
		    s->cfg.label);
	return 0;
}

static int schema_op(due_store *s, const char *op, int *v)
{
	int rc = schema_raw(s, op, v);
	return rc < 0 ? rc : schema_answer(s, v);
}

static int rd_check_schema(due_store *s)
{
	int v, rc = schema_op(s, "version", &v);
	return rc < 0 ? rc : due__schema_verdict(s->cfg.label, v, "");
}

/*
** Redis stores begin at the schema version the SQL stores reached (4);
** init writes it into an empty prefix and leaves any other alone, and
** the verdict refuses what is not current.
*/
static int rd_init_schema(due_store *s)
{
	int v, rc;
	int64_t steps = 0;

	/* -4: the layout's upgrade moved a step of ids and has more */
	while ((rc = schema_raw(s, "init", &v)) == 0 && v == -4)
		due__progress(
		    "upgrade the Redis layout to 4 (20,000 ids a step)",
		    steps++, 0);
	if (rc < 0 || (rc = schema_answer(s, &v)) < 0)
		return rc;
	return due__schema_verdict(s->cfg.label, v, "");
}

static int rd_now(due_store *s, due_time *out)
{
	redisReply *r;
	int rc;

	begin(s);
	if ((rc = rd_ok(s)) < 0 ||
	    (rc = rd_cmd(s, whole(s), &r, "read the clock", "TIME")) < 0 ||
	    (rc = rd_check(s, r, "read the clock")) < 0)
		return rc;
	if (!is_array(r, 2))
		return bad_reply(s, r, "read the clock");
	*out = rint_of(r->element[0]) * 1000000 + rint_of(r->element[1]);
	freeReplyObject(r);
	return 0;
}

static void *rd_native(due_store *s) { return s->c; }

/* ------------------------------------------------------------------ */
/* Producer                                                            */
/* ------------------------------------------------------------------ */

/*
** Run after's parents as lua/task.lua's after_link reads them: "41,42r,"
** (marks: NULL, or one letter a parent, '.' for none: redis_shard.c's
** 'r' for another shard's live parent, 'd' for one that counts as done).
*/
static void arg_parents(rargs *a, const due_schedule_opts *o, const char *marks)
{
	size_t cap = o->n_after * 24 + 1, len = 0;
	char *p = malloc(cap);

	for (size_t k = 0; p && k < o->n_after; k++)
		len += (size_t)snprintf(p + len, cap - len, "%lld%s,",
					(long long)o->after[k],
					marks && marks[k] == 'r'   ? "r"
					: marks && marks[k] == 'd' ? "d"
								   : "");
	if (p)
		p[len] = '\0';
	arg_own(a, p, len);
}

/*
** The 14 arguments of one submit (lua submit_one): on_key by name, then
** after_any_end and the parents (arg_parents).
*/
static void arg_submit_m(rargs *a, const due_submit *it, const char *marks)
{
	const due_schedule_opts *o = &it->opts;

	arg_z(a, it->kind);
	arg_s(a, it->payload, it->payload_len);
	if (o->at != DUE_TIME_NONE)
		arg_i(a, o->at);
	else
		arg_z(a, "");
	arg_i(a, o->delay_us);
	arg_i(a, o->max_attempts);
	arg_i(a, o->backoff_us);
	arg_i(a, o->backoff_cap_us);
	arg_opt(a, o->key);
	arg_i(a, o->priority);
	arg_opt(a, o->group);
	arg_i(a, o->timeout_us > 0 ? o->timeout_us : 0);
	arg_z(a,
	      due_on_key_name(o->on_key) ? due_on_key_name(o->on_key) : "keep");
	arg_z(a, o->after_any_end ? "1" : "0");
	if (o->n_after)
		arg_parents(a, o, marks);
	else
		arg_z(a, "");
}

static void arg_submit(rargs *a, const due_submit *it)
{
	arg_submit_m(a, it, NULL);
}

/* A setting read with CONFIG GET: *v, or false when CONFIG is refused. */
static int config_size(due_store *s, const char *name, unsigned long long *v,
		       bool *known)
{
	char buf[32], *end;
	int rc;

	if ((rc = config_get(s, name, buf, sizeof(buf))) < 0)
		return rc;
	*known = buf[0] != '\0';
	if (*known)
		*v = strtoull(buf, &end, 10);
	return 0;
}

/*
** The largest payload this server takes (SUBMIT_MAX_ITEMS's comment):
** *max, and into why (n bytes) the setting that bounds it, for
** due__store_payload_too_big; `len` is the payload to suggest a value for.
*/
static int payload_max(due_store *s, size_t *max, char *why, size_t n,
		       size_t len)
{
	unsigned long long bulk = RD_DEFAULT_BULK, qbuf = RD_DEFAULT_QBUF, v;
	unsigned long long need = (len + 1024 + (1u << 20) - 1) >> 20;
	const char *name = "proto-max-bulk-len";
	bool kb = false, kq = false;
	int rc;

	begin(s);
	if ((rc = rd_ok(s)) < 0 ||
	    (rc = config_size(s, "proto-max-bulk-len", &bulk, &kb)) < 0 ||
	    (rc = config_size(s, "client-query-buffer-limit", &qbuf, &kq)) < 0)
		return rc;
	v = bulk;
	if (qbuf < bulk + 1024) { /* the whole argument must fit the buffer */
		name = "client-query-buffer-limit";
		v = qbuf;
		bulk = qbuf > 1024 ? qbuf - 1024 : 0;
	}
	*max = bulk > SIZE_MAX ? SIZE_MAX : (size_t)bulk;
	if (kb && kq)
		snprintf(why, n,
			 "this server takes in one argument (%s = %llu): raise "
			 "it (CONFIG SET %s %llumb, and in redis.conf)",
			 name, v, name, need);
	else
		snprintf(why, n,
			 "Redis takes in one argument by default (%s = %llu; "
			 "this server refuses CONFIG GET): raise it in the "
			 "server's configuration if it is lower",
			 name, v);
	return 0;
}

/*
** 0 when every payload of the call, and all of them together, fit what
** the server takes in one argument; else DUE_ETOOBIG before anything is
** sent.  One task over it is refused as one task (no "split": it cannot
** be); a batch whose payloads each fit but together do not is told to
** split (each call all or none).
*/
static int rd_payloads_fit(due_store *s, const due_submit *items, size_t n)
{
	size_t total = 0, big = 0, max, i;
	char why[384], who[600];
	int rc;

	for (i = 0; i < n; i++) {
		total += items[i].payload_len;
		if (items[i].payload_len > items[big].payload_len)
			big = i;
	}
	if (n == 0 || total <= RD_LIMIT_FLOOR)
		return 0;
	if ((rc = payload_max(s, &max, why, sizeof(why),
			      items[big].payload_len)) < 0)
		return rc;
	snprintf(who, sizeof(who), "redis store %s", s->cfg.label);
	if ((i = due__payload_over(items, n, max)) < n)
		return due__store_payload_too_big(
		    who, i, n, items[i].payload_len, max, "%s", why);
	if (total > max)
		return due__error_set(
		    DUE_ETOOBIG,
		    "%s: a batch of %zu tasks carries %zu payload bytes, over "
		    "the %zu one submit takes (one script, all or none, "
		    "carries at most what one task may): split it into "
		    "smaller calls",
		    who, n, total, max);
	return 0;
}

/*
** A submit refused for a parent (lua after_check): {"REFUSED", NOTFOUND
** or STATE, id, state}, before anything was written; else 0.
*/
static int refused(due_store *s, redisReply *r)
{
	redisReply *w, *id, *st;

	if (!is_array(r, 4) || r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "REFUSED") != 0)
		return 0;
	w = r->element[1], id = r->element[2], st = r->element[3];
	if (w->type != REDIS_REPLY_STRING || id->type != REDIS_REPLY_STRING ||
	    st->type != REDIS_REPLY_STRING)
		return bad_reply(s, r, "submit");
	if (strcmp(w->str, "NOTFOUND") == 0)
		due__error_set(DUE_ENOTFOUND, "parent task %s not found",
			       id->str);
	else
		due__error_set(DUE_ESTATE,
			       "parent task %s is %s (add with after_any_end "
			       "to run after any end)",
			       id->str, st->str);
	freeReplyObject(r);
	return due_error_last_code();
}

static int rd_schedule_m(due_store *s, due_submitted *out,
			 const due_submit *items, size_t n,
			 const char *const *marks);

/*
** The whole call in one script (all or none), refused with DUE_ETOOBIG
** when it is over SUBMIT_MAX_ITEMS items or what the server takes
** (rd_payloads_fit).
*/
static int rd_schedule(due_store *s, due_submitted *out,
		       const due_submit *items, size_t n)
{
	return rd_schedule_m(s, out, items, n, NULL);
}

/* rd_schedule, with redis_shard.c's marks of each item's parents. */
static int rd_schedule_m(due_store *s, due_submitted *out,
			 const due_submit *items, size_t n,
			 const char *const *marks)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	if (n > SUBMIT_MAX_ITEMS)
		return due__error_set(
		    DUE_ETOOBIG,
		    "redis store %s: a batch of %zu tasks is over the %d one "
		    "call takes on Redis (one script, all or none, which "
		    "blocks the server while it runs): split it into calls of "
		    "at most %d",
		    s->cfg.label, n, SUBMIT_MAX_ITEMS, SUBMIT_MAX_ITEMS);
	if ((rc = rd_payloads_fit(s, items, n)) < 0)
		return rc;
	arg_i(&a, (int64_t)n);
	for (size_t i = 0; i < n; i++)
		arg_submit_m(&a, &items[i], marks ? marks[i] : NULL);
	if ((rc = rd_eval(s, "submit", &a, &r, "submit")) < 0)
		return rc;
	if ((rc = refused(s, r)) < 0)
		return rc;
	if (!is_array(r, 3 * n))
		return bad_reply(s, r, "submit");
	for (size_t i = 0; i < n; i++) {
		out[i].id = rint_of(r->element[3 * i]);
		out[i].existed = rint_of(r->element[3 * i + 1]) != 0;
		out[i].moved = rint_of(r->element[3 * i + 2]) != 0;
	}
	freeReplyObject(r);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Claim, complete                                                     */
/* ------------------------------------------------------------------ */

static void arg_completions(rargs *a, const due_completion *items, size_t n)
{
	arg_i(a, (int64_t)n);
	for (size_t i = 0; i < n; i++) {
		arg_i(a, items[i].id);
		arg_i(a, items[i].attempt);
		arg_s(a, items[i].result, items[i].result_len);
	}
}

/* The outcome letters of a completion batch ("DCS..."). */
static void read_outcomes(const redisReply *r, due_completion *items, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char o =
		    r && r->type == REDIS_REPLY_STRING && (size_t)r->len > i
			? r->str[i]
			: 'S';
		items[i].outcome = o == 'D' ? DUE_COMPLETE_DONE
				   : o == 'C'
				       ? DUE_COMPLETE_CANCELLED_BEFORE_COMMIT
				       : DUE_COMPLETE_REJECTED_STALE;
	}
}

/*
** Completions a call wrote and then failed: its WAIT fell short (the
** script's reply said what it wrote), or on a sharded store another
** shard of the same call failed (redis_shard.c: due__redis_remember).
** Kept by (id, attempt), up to WRITTEN_MAX, oldest first, and each
** answered once.  The caller retries the call on the same handle (the
** worker does); the retry is answered from here instead of being sent
** again, which would answer REJECTED_STALE for a try whose result was
** kept.  What stays unknown is a reply lost with its connection: nothing
** says what that script wrote.
*/
#define WRITTEN_MAX 1024
struct written {
	due_id id;
	int32_t attempt;
	int outcome;
};

/* Keep the outcomes of items for a retry; the oldest go when full. */
void due__redis_remember(due_store *s, const due_completion *items, size_t n)
{
	if (!s->wr && !(s->wr = malloc(WRITTEN_MAX * sizeof(*s->wr))))
		return; /* out of memory: the retry hears them stale */
	for (size_t i = 0; i < n; i++) {
		if (s->n_wr == WRITTEN_MAX)
			memmove(s->wr, s->wr + 1, --s->n_wr * sizeof(*s->wr));
		s->wr[s->n_wr++] = (struct written){
		    items[i].id, items[i].attempt, (int)items[i].outcome};
	}
}

/* c's outcome from the memory, which forgets it; false when none. */
static bool recall(due_store *s, due_completion *c)
{
	for (size_t i = 0; i < s->n_wr; i++)
		if (s->wr[i].id == c->id && s->wr[i].attempt == c->attempt) {
			c->outcome = (due_complete_outcome)s->wr[i].outcome;
			memmove(s->wr + i, s->wr + i + 1,
				(s->n_wr - i - 1) * sizeof(*s->wr));
			s->n_wr--;
			return true;
		}
	return false;
}

/*
** The items the memory does not answer, to be sent: items itself when
** the memory is empty, else a copy (*send, *k, the index of each in
** items after it); answered() copies their outcomes back.
*/
typedef struct unsent {
	due_completion *send;
	size_t k;
	size_t *at; /* NULL: send is items */
} unsent;

static int to_send(due_store *s, due_completion *items, size_t n, unsent *u)
{
	*u = (unsent){items, n, NULL};
	if (!s->n_wr || n == 0)
		return 0;
	if (!(u->send = malloc(n * (sizeof(*u->send) + sizeof(*u->at)))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	u->at = (size_t *)(u->send + n);
	u->k = 0;
	for (size_t j = 0; j < n; j++)
		if (!recall(s, &items[j])) {
			u->at[u->k] = j;
			u->send[u->k++] = items[j];
		}
	return 0;
}

static void answered(due_completion *items, unsent *u)
{
	if (!u->at)
		return;
	for (size_t m = 0; m < u->k; m++)
		items[u->at[m]].outcome = u->send[m].outcome;
	free(u->send);
}

/*
** The claim, with completions first when items is given (complete_claim):
** one script, so the completions and the claim are one atomic step.
** Claims are capped at 1000 per script.
*/
static int claim_op(due_store *s, due_completion *items, size_t n,
		    due_task_list **out, const char *owner,
		    const char *const *kinds, size_t n_kinds, bool exclude,
		    int limit, int64_t lease_us, due_id only_id)
{
	due_task_list *l = NULL;
	rargs a = {0};
	redisReply *r = NULL;
	bool written = false;
	int rc;

	*out = NULL;
	if (limit > 1000)
		limit = 1000;
	arg_z(&a, owner);
	arg_i(&a, lease_us);
	arg_i(&a, limit);
	arg_i(&a, only_id);
	arg_z(&a, exclude ? "1" : "0");
	arg_i(&a, (int64_t)n_kinds);
	for (size_t i = 0; i < n_kinds; i++)
		arg_z(&a, kinds[i]);
	arg_completions(&a, items, n);
	if ((rc = rd_eval_w(s, "claim", &a, &r, "claim", &written)) < 0) {
		/* the claimed tasks are lost to this try (their leases
		   expire); the completions are kept for the retry */
		if (written && is_array(r, 3)) {
			read_outcomes(r->element[1], items, n);
			due__redis_remember(s, items, n);
		}
		freeReplyObject(r);
		return rc;
	}
	if (!is_array(r, 4))
		return bad_reply(s, r, "claim");
	read_outcomes(r->element[1], items, n);
	if ((rc = due__task_list_alloc(&l, (size_t)limit)) == 0) {
		ccur c = {.owner = owner,
			  .t = rint_of(r->element[3]),
			  .lease_us = lease_us};
		due_rows rows = {&ccur_ops, &c};
		if (is_array(r->element[2], 0))
			c.rows = r->element[2]->element,
			c.n = r->element[2]->elements;
		l->retry_in_us = rint_of(r->element[0]);
		if ((rc = due__rows_tasks(&rows, l, (size_t)limit)) < 0) {
			due_task_list_free(l);
			l = NULL;
		}
	}
	freeReplyObject(r);
	*out = l;
	return rc;
}

static int rd_claim(due_store *s, due_task_list **out, const char *owner,
		    const char *const *kinds, size_t n_kinds, bool exclude,
		    int limit, int64_t lease_us, due_id only_id)
{
	return claim_op(s, NULL, 0, out, owner, kinds, n_kinds, exclude, limit,
			lease_us, only_id);
}

static int rd_complete_claim(due_store *s, due_completion *items, size_t n,
			     const char *owner, const char *const *kinds,
			     size_t n_kinds, bool exclude, int limit,
			     int64_t lease_us, due_task_list **out)
{
	unsent u;
	int rc;

	if ((rc = to_send(s, items, n, &u)) < 0)
		return rc;
	rc = claim_op(s, u.send, u.k, out, owner, kinds, n_kinds, exclude,
		      limit, lease_us, 0);
	answered(items, &u);
	return rc;
}

/*
** A completion hook runs inside the caller's SQL transaction with the
** result; Redis has none to offer, so a hook is refused before anything
** is written.
*/
static int rd_complete(due_store *s, due_completion *items, size_t n,
		       due_tx_hook hook, void *payload)
{
	redisReply *r;
	unsent u;
	int rc = 0;

	(void)payload;
	if (hook)
		return due__error_set(
		    DUE_EUNSUPPORTED,
		    "redis store %s: a completion hook cannot run: Redis has "
		    "no transaction to commit the hook's rows with the result "
		    "(complete without a hook; make the effect idempotent by "
		    "the task id)",
		    s->cfg.label);
	if ((rc = to_send(s, items, n, &u)) < 0)
		return rc;
	for (size_t done = 0; done < u.k;) {
		size_t k = u.k - done < 1000 ? u.k - done : 1000;
		rargs a = {0};
		bool written = false;
		r = NULL;
		arg_completions(&a, u.send + done, k);
		/* arg_completions put k first, as "complete" reads it */
		rc = rd_eval_w(s, "complete", &a, &r, "complete", &written);
		if (rc == 0 || written) {
			read_outcomes(r, u.send + done, k);
			done += k;
		}
		freeReplyObject(r);
		if (rc < 0) {
			/* the batches before it and, when only its WAIT fell
			   short, this one are written */
			due__redis_remember(s, u.send, done);
			break;
		}
	}
	answered(items, &u);
	return rc;
}

static int rd_extend(due_store *s, due_extend_outcome *out, due_id id,
		     int32_t attempt, int64_t lease_us)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, id);
	arg_i(&a, attempt);
	arg_i(&a, lease_us);
	if ((rc = rd_eval(s, "extend", &a, &r, "extend")) < 0)
		return rc;
	switch (rint_of(r)) {
	case 0: *out = DUE_EXTEND_OK; break;
	case 2: *out = DUE_EXTEND_CANCEL_REQUESTED; break;
	default: *out = DUE_EXTEND_LOST;
	}
	freeReplyObject(r);
	return 0;
}

/* A state name in a reply; -1 when it is none ("NONE", "STALE"). */
static int state_in(const redisReply *r, due_state *st)
{
	if (!r || r->type != REDIS_REPLY_STRING)
		return -1;
	return due__state_from_store(r->str, (size_t)r->len, st) < 0 ? -1 : 0;
}

static int rd_fail(due_store *s, due_fail_outcome *out, due_id id,
		   int32_t attempt, const char *error, due_outcome as)
{
	rargs a = {0};
	redisReply *r;
	due_state st;
	int rc;

	arg_i(&a, id);
	arg_i(&a, attempt);
	arg_opt(&a, error);
	arg_z(&a, as == DUE_OUT_TIMED_OUT ? "TIMED_OUT" : "FAILED");
	if ((rc = rd_eval(s, "fail", &a, &r, "fail")) < 0)
		return rc;
	if (r->type == REDIS_REPLY_STRING && strcmp(r->str, "STALE") == 0)
		*out = DUE_FAIL_REJECTED_STALE;
	else if (state_in(r, &st) == 0)
		*out = due__fail_outcome_of(st);
	else
		return bad_reply(s, r, "fail");
	freeReplyObject(r);
	return 0;
}

/* Batches of 1000 expired leases, each one script, until none is left. */
static int rd_reclaim(due_store *s, due_reclaimed *out)
{
	bool more = true;

	memset(out, 0, sizeof(*out));
	while (more) {
		rargs a = {0};
		redisReply *r;
		int rc;
		if ((rc = rd_eval(s, "reclaim", &a, &r, "reclaim")) < 0)
			return rc;
		if (!is_array(r, 6))
			return bad_reply(s, r, "reclaim");
		out->rescheduled += rint_of(r->element[0]);
		out->dead += rint_of(r->element[1]);
		out->cancelled += rint_of(r->element[2]);
		out->now = rint_of(r->element[3]);
		out->next_expiry = rint_of(r->element[4]);
		more = rint_of(r->element[5]) != 0;
		freeReplyObject(r);
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Cancel, get, list                                                   */
/* ------------------------------------------------------------------ */

static int rd_cancel(due_store *s, due_cancel_outcome *out, due_id id)
{
	rargs a = {0};
	redisReply *r;
	due_state st = DUE_SCHEDULED;
	bool found;
	int rc;

	arg_i(&a, id);
	if ((rc = rd_eval(s, "cancel", &a, &r, "cancel")) < 0)
		return rc;
	found = state_in(r, &st) == 0; /* before st is read */
	*out = due__cancel_outcome_of(found, st);
	freeReplyObject(r);
	return 0;
}

/* One script (cold.lua: reschedule): the state found, moved when waiting. */
static int rd_reschedule(due_store *s, due_reschedule_outcome *out, due_id id,
			 const due_reschedule_opts *o)
{
	due_submit one = {.payload = o->payload, .payload_len = o->payload_len};
	rargs a = {0};
	redisReply *r;
	due_state st = DUE_SCHEDULED;
	bool found;
	int rc;

	if (o->set_payload && (rc = rd_payloads_fit(s, &one, 1)) < 0)
		return rc;
	arg_i(&a, id);
	if (o->at != DUE_TIME_NONE)
		arg_i(&a, o->at);
	else
		arg_z(&a, "");
	arg_i(&a, o->delay_us);
	arg_z(&a, o->set_payload ? "1" : "0");
	if (o->set_payload)
		arg_s(&a, o->payload, o->payload_len);
	if ((rc = rd_eval(s, "reschedule", &a, &r, "reschedule")) < 0)
		return rc;
	found = state_in(r, &st) == 0; /* before st is read */
	*out = due__reschedule_outcome_of(found, st);
	freeReplyObject(r);
	return 0;
}

/* Task e = {row, {attempt rows}} into t. */
static int task_entry(redisReply *e, due_task *t, bool attempts)
{
	rcur c;
	due_rows rows;
	int rc;

	if (!is_array(e, 2))
		return due__error_set(DUE_ESTORE, "redis store: bad task row");
	memset(&c, 0, sizeof(c));
	c.rows = e->element, c.n = 1;
	rows = (due_rows){&cur_ops, &c};
	if ((rc = cur_next(&c)) <= 0 || (rc = due__row_task(&rows, t)) < 0)
		return rc < 0 ? rc : DUE_ERROR;
	if (!attempts)
		return 0;
	rows = rows_of(&c, e->element[1]);
	return due__rows_attempts(&rows, t, 1);
}

/* get's third element: the parents' ids, ascending (none: NULL). */
static int parents_of(const redisReply *r, due_task *t)
{
	const redisReply *p = r->elements > 2 ? r->element[2] : NULL;

	t->after = NULL;
	if (!is_array(p, 1) || t->after_n <= 0)
		return 0;
	if (!(t->after = malloc(p->elements * sizeof(*t->after))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->elements; i++)
		t->after[i] = rint_of(p->element[i]);
	return 0;
}

static int rd_get(due_store *s, due_task **out, due_id id)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	*out = NULL;
	arg_i(&a, id);
	if ((rc = rd_eval(s, "get", &a, &r, "get")) < 0)
		return rc;
	if (!is_array(r, 2)) {
		freeReplyObject(r);
		return due__error_set(DUE_ENOTFOUND, "no task with id %lld",
				      (long long)id);
	}
	if (!(*out = calloc(1, sizeof(**out))))
		rc = due__error_set(DUE_ENOMEM, "out of memory");
	else if ((rc = task_entry(r, *out, true)) < 0 ||
		 (rc = parents_of(r, *out)) < 0) {
		due_task_free(*out);
		*out = NULL;
	}
	freeReplyObject(r);
	return rc;
}

/*
** The script looks at no more than 1000 ids per call and says where it
** stopped; the pages are asked for here until the limit is met or the
** ids run out, so a rare kind among millions costs many short scripts,
** never one long one.  The pages are separate reads (as `ls` paging is).
*/
static int rd_list(due_store *s, due_task_list **out, const due_list_opts *o)
{
	due_task_list *l = NULL;
	redisReply **pages = NULL;
	size_t n_pages = 0, total = 0, k = 0;
	due_id after = o->after;
	int rc = 0;

	*out = NULL;
	for (;;) {
		rargs a = {0};
		redisReply *r, **p;

		arg_z(&a,
		      o->state >= 0 ? due_state_name((due_state)o->state) : "");
		arg_z(&a, o->kind ? o->kind : "");
		arg_i(&a, after);
		arg_i(&a, o->limit - (int64_t)total);
		arg_z(&a, o->attempts ? "1" : "0");
		arg_z(&a, o->held ? "1" : "0");
		if ((rc = rd_eval(s, "list", &a, &r, "list")) < 0)
			goto done;
		if (!is_array(r, 3) || !is_array(r->element[0], 0)) {
			rc = bad_reply(s, r, "list");
			goto done;
		}
		if (!(p = realloc(pages, (n_pages + 1) * sizeof(*p)))) {
			freeReplyObject(r);
			rc = due__error_set(DUE_ENOMEM, "out of memory");
			goto done;
		}
		pages = p;
		pages[n_pages++] = r;
		total += r->element[0]->elements;
		after = rint_of(r->element[1]);
		if (total >= (size_t)o->limit || rint_of(r->element[2]) == 0)
			break;
	}
	if ((rc = due__task_list_alloc(&l, total)) < 0)
		goto done;
	for (size_t i = 0; rc == 0 && i < n_pages; i++) {
		redisReply *e = pages[i]->element[0];
		for (size_t j = 0; rc == 0 && j < e->elements; j++, k++) {
			rc = task_entry(e->element[j], &l->items[k],
					o->attempts);
			l->count = k + 1;
		}
	}
	if (rc < 0) {
		due_task_list_free(l);
		l = NULL;
	}
done:
	for (size_t i = 0; i < n_pages; i++)
		freeReplyObject(pages[i]);
	free(pages);
	*out = l;
	return rc;
}

/* ------------------------------------------------------------------ */
/* Operator                                                            */
/* ------------------------------------------------------------------ */

/*
** retry, requeue, kill: {"OK", final state} or {"WRONG", state found}
** or {"CONFLICT"} (retry of a task whose key a live task holds).
*/
static int operator_op(due_store *s, const char *op, due_id id,
		       const char *needed, due_state *final)
{
	rargs a = {0};
	redisReply *r;
	const char *verdict;
	int rc;

	arg_i(&a, id);
	if ((rc = rd_eval(s, op, &a, &r, op)) < 0)
		return rc;
	if (!is_array(r, 1) || r->element[0]->type != REDIS_REPLY_STRING)
		return bad_reply(s, r, op);
	verdict = r->element[0]->str;
	if (strcmp(verdict, "CONFLICT") == 0)
		rc = due__store_retry_conflict(id);
	else if (strcmp(verdict, "WRONG") == 0 && r->elements > 1)
		rc = due__store_wrong_state(id, op,
					    strcmp(r->element[1]->str, "NONE")
						? r->element[1]->str
						: NULL,
					    needed);
	else if (final && r->elements > 1 && state_in(r->element[1], final) < 0)
		rc = due__error_set(DUE_ESTORE, "redis store: bad state");
	freeReplyObject(r);
	return rc;
}

static int rd_retry(due_store *s, due_id id)
{
	return operator_op(s, "retry", id, "DEAD", NULL);
}

static int rd_requeue(due_store *s, due_id id)
{
	due_state final;
	return operator_op(s, "requeue", id, "CLAIMED", &final);
}

static int rd_kill(due_store *s, due_state *out, due_id id)
{
	return operator_op(s, "kill", id, "SCHEDULED, CLAIMED or DEAD", out);
}

/* ------------------------------------------------------------------ */
/* Stats, prune                                                        */
/* ------------------------------------------------------------------ */

/* Lateness percentiles over the claims of the window (reply array). */
static int lateness(due_stats *out, const redisReply *late)
{
	size_t n = late->elements;
	int64_t *v = n ? malloc(n * sizeof(*v)) : NULL;

	if (n && !v)
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		v[i] = rint_of(late->element[i]);
	due__lateness_fill(out, v, n);
	free(v);
	return 0;
}

static int rd_stats(due_store *s, due_stats *out)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, DUE_STATS_WINDOW_US);
	if ((rc = rd_eval(s, "stats", &a, &r, "stats")) < 0)
		return rc;
	if (!is_array(r, 9) || !is_array(r->element[8], 0))
		return bad_reply(s, r, "stats");
	out->now = rint_of(r->element[0]);
	for (int i = 0; i < 5 && i < DUE_STATE_COUNT; i++)
		out->counts[i] = rint_of(r->element[1 + i]);
	out->dead = out->counts[DUE_DEAD];
	out->due_unclaimed = rint_of(r->element[6]);
	if (r->element[7]->type == REDIS_REPLY_STRING && r->element[7]->len)
		out->oldest_due_unclaimed_ms =
		    (out->now - rint_of(r->element[7])) / 1000;
	out->window_us = DUE_STATS_WINDOW_US;
	out->estimated = 0; /* ZCARD of each state's index: exact, O(1) */
	rc = lateness(out, r->element[8]);
	freeReplyObject(r);
	return rc;
}

/*
** Bounded batches of at most DUE_PRUNE_BATCH finished tasks, oldest end
** first, each one script, until none is left or max_rows (0: no limit)
** are gone.
*/
static int rd_prune(due_store *s, int64_t *deleted, int64_t older_than_us,
		    int64_t max_rows)
{
	int64_t looked;

	*deleted = 0;
	do {
		int64_t want = DUE_PRUNE_BATCH;
		rargs a = {0};
		redisReply *r;
		int rc;
		if (max_rows > 0 && max_rows - *deleted < want)
			want = max_rows - *deleted;
		if (want <= 0)
			break;
		arg_i(&a, older_than_us);
		arg_i(&a, want);
		if ((rc = rd_eval(s, "prune", &a, &r, "prune")) < 0)
			return rc;
		if (!is_array(r, 2))
			return bad_reply(s, r, "prune");
		looked = rint_of(r->element[0]);
		*deleted += rint_of(r->element[1]);
		freeReplyObject(r);
	} while (looked > 0);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Schedules                                                           */
/* ------------------------------------------------------------------ */

static int rd_cron_get(due_store *s, due_cron_info **out, const char *name)
{
	rargs a = {0};
	redisReply *r;
	rcur c;
	int rc;

	*out = NULL;
	arg_z(&a, name);
	if ((rc = rd_eval(s, "cron_get", &a, &r, "read schedule")) < 0)
		return rc;
	due_rows rows = rows_of(&c, r);
	rc = due__rows_sched_get(&rows, out, name);
	freeReplyObject(r);
	return rc;
}

static int rd_cron_list(due_store *s, due_cron_info_list **out)
{
	rargs a = {0};
	redisReply *r;
	rcur c;
	int rc;

	*out = NULL;
	if ((rc = rd_eval(s, "cron_list", &a, &r, "list schedules")) < 0)
		return rc;
	due_rows rows = rows_of(&c, r);
	rc = due__rows_sched_list(&rows, out);
	freeReplyObject(r);
	return rc;
}

static int rd_cron_put(due_store *s, const due_cron_def *d, due_time next_slot)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	{
		due_submit it = {.kind = d->kind,
				 .payload = d->payload,
				 .payload_len = d->payload_len};
		if ((rc = rd_payloads_fit(s, &it, 1)) < 0)
			return rc;
	}
	arg_z(&a, d->name);
	arg_z(&a, d->expr);
	arg_z(&a, d->kind);
	arg_z(&a, d->tz ? d->tz : "UTC");
	arg_s(&a, d->payload, d->payload_len);
	arg_z(&a, due__misfire_name(d->misfire));
	arg_z(&a, due__overlap_name(d->overlap));
	arg_i(&a, d->max_attempts);
	arg_i(&a, d->backoff_us);
	arg_i(&a, d->backoff_cap_us);
	arg_i(&a, next_slot);
	if ((rc = rd_eval(s, "cron_put", &a, &r, "save schedule")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

static int rd_cron_remove(due_store *s, const char *name)
{
	rargs a = {0};
	redisReply *r;
	int64_t n;
	int rc;

	arg_z(&a, name);
	if ((rc = rd_eval(s, "cron_remove", &a, &r, "remove schedule")) < 0)
		return rc;
	n = rint_of(r);
	freeReplyObject(r);
	return n ? 0 : due__store_no_schedule(name);
}

/*
** One script: compare-and-set next_slot, insert the slot's task through
** the same unique-key path as a submit, the bookkeeping.
*/
static int rd_cron_fire(due_store *s, const due_cron_fire *f, bool *won,
			due_id *task_id)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	*won = false;
	*task_id = 0;
	arg_z(&a, f->name);
	arg_i(&a, f->expect);
	arg_i(&a, f->next);
	arg_i(&a, f->slot);
	arg_i(&a, f->missed);
	arg_i(&a, f->missed > 0 ? f->last_missed : 0);
	arg_z(&a, f->task ? "1" : "0");
	if (f->task)
		arg_submit(&a, f->task);
	if ((rc = rd_eval(s, "cron_fire", &a, &r, "fire schedule")) < 0)
		return rc;
	if (!is_array(r, 2))
		return bad_reply(s, r, "fire schedule");
	*won = rint_of(r->element[0]) != 0;
	*task_id = rint_of(r->element[1]);
	freeReplyObject(r);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Metrics, worker reports                                             */
/* ------------------------------------------------------------------ */

static int cmp_kind(const void *a, const void *b)
{
	return strcmp(((const due_kind_counts *)a)->kind,
		      ((const due_kind_counts *)b)->kind);
}

/* m->kinds and every kind name in it freed; none set. */
static void metric_kinds_clear(due_metrics *m)
{
	for (size_t i = 0; m->kinds && i < m->n_kinds; i++)
		free((void *)m->kinds[i].kind);
	free(m->kinds);
	m->kinds = NULL;
	m->n_kinds = 0;
}

/* The (state:kind -> count) pairs into m->kinds, sorted by kind, the
   first 1000 kinds by name; on an error none is left set. */
static int metric_kinds(due_metrics *m, const redisReply *kc)
{
	size_t cap = kc->elements / 2 + 1;

	m->n_kinds = 0;
	if (!(m->kinds = calloc(cap, sizeof(*m->kinds))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i + 1 < kc->elements; i += 2) {
		const char *f = kc->element[i]->str, *colon = strchr(f, ':');
		due_state st;
		size_t j;
		if (!colon ||
		    due__state_from_store(f, (size_t)(colon - f), &st) < 0)
			continue;
		for (j = 0; j < m->n_kinds; j++)
			if (strcmp(m->kinds[j].kind, colon + 1) == 0)
				break;
		if (j == m->n_kinds) {
			if (!(m->kinds[j].kind = due__strdup_n(
				  colon + 1, strlen(colon + 1)))) {
				metric_kinds_clear(m);
				return due__error_set(DUE_ENOMEM,
						      "out of memory");
			}
			m->n_kinds++;
		}
		m->kinds[j].counts[st] = rint_of(kc->element[i + 1]);
	}
	if (m->n_kinds)
		qsort(m->kinds, m->n_kinds, sizeof(*m->kinds), cmp_kind);
	/* at most 1000 kinds, the first by name, as on the SQL stores */
	while (m->n_kinds > 1000)
		free((void *)m->kinds[--m->n_kinds].kind);
	return 0;
}

/* One counter of the metrics hash into m. */
static void metric_counter(due_metrics *m, const char *f, int64_t v)
{
	due_histogram *h = strncmp(f, "late", 4) == 0  ? &m->lateness
			   : strncmp(f, "dur", 3) == 0 ? &m->duration
						       : NULL;
	const char *colon = strchr(f, ':');

	if (h && strstr(f, "_sum")) {
		h->sum_ms += (double)v / 1000.0;
	} else if (h && colon) {
		long b = strtol(colon + 1, NULL, 10);
		if (b >= 0 && b <= DUE_HIST_N) {
			h->buckets[b] += v;
			h->count += v;
		}
	} else if (strncmp(f, "out:", 4) == 0) {
		int i = due__outcome_parse(f + 4);
		if (i >= 0 && i < DUE_OUT_REJECTED_STALE)
			m->outcomes[i] += v;
	} else if (strcmp(f, "stale") == 0) {
		m->outcomes[DUE_OUT_REJECTED_STALE] += v;
	}
}

static int rd_metrics(due_store *s, due_metrics *m)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, DUE_METRICS_WINDOW_US);
	if ((rc = rd_eval(s, "metrics", &a, &r, "metrics")) < 0)
		return rc;
	if (!is_array(r, 6) || !is_array(r->element[0], 0) ||
	    !is_array(r->element[1], 0) || !is_array(r->element[2], 15) ||
	    !is_array(r->element[3], 7))
		return bad_reply(s, r, "metrics");
	if ((rc = metric_kinds(m, r->element[0])) == 0) {
		redisReply *h = r->element[1], *w = r->element[3];
		for (size_t i = 0; i + 1 < h->elements; i += 2)
			metric_counter(m, h->element[i]->str,
				       rint_of(h->element[i + 1]));
		for (int i = 0; i < 15; i++)
			m->done_per_min[i] = rint_of(r->element[2]->element[i]);
		m->workers = rint_of(w->element[0]);
		m->claim_queries = rint_of(w->element[1]);
		m->empty_claims = rint_of(w->element[2]);
		m->reclaim_queries = rint_of(w->element[3]);
		m->store_errors = rint_of(w->element[4]);
		m->pruned = rint_of(w->element[5]);
		m->lease_lost = rint_of(w->element[6]);
		m->n_schedules = (size_t)rint_of(r->element[4]);
		/* counted by the minute of the claim: the oldest minute
		   read is the one holding now - window (element 5 says how
		   far back that minute began) */
		m->window_us = DUE_METRICS_WINDOW_US;
		m->kinds_estimated = 0; /* the (state, kind) counters: exact */
	}
	freeReplyObject(r);
	return rc;
}

static int rd_worker_report(due_store *s, const char *owner,
			    const due_worker_stats *w)
{
#define NAME_(c) #c,
	static const char *const names[] = {DUE_WORKER_COUNTERS(NAME_, NAME_)};
#undef NAME_
	int64_t v[DUE_WORKER_N_COUNTERS];
	rargs a = {0};
	redisReply *r;
	int rc;

	due__worker_counters(w, v);
	arg_z(&a, owner);
	for (int i = 0; i < DUE_WORKER_N_COUNTERS; i++) {
		arg_z(&a, names[i]);
		arg_i(&a, v[i]);
	}
	arg_z(&a, "pruned");
	arg_i(&a, w->pruned);
	if ((rc = rd_eval(s, "worker_report", &a, &r, "worker report")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Discovery: upcoming tasks and wake-ups                              */
/* ------------------------------------------------------------------ */

static int rd_upcoming(due_store *s, due_upcoming *out,
		       const char *const *kinds, size_t n_kinds, bool exclude,
		       due_time until, int limit)
{
	rargs a = {0};
	redisReply *r;
	rcur c;
	int rc;

	arg_i(&a, until);
	arg_i(&a, limit);
	arg_z(&a, exclude ? "1" : "0");
	arg_i(&a, (int64_t)n_kinds);
	for (size_t i = 0; i < n_kinds; i++)
		arg_z(&a, kinds[i]);
	if ((rc = rd_eval(s, "upcoming", &a, &r, "upcoming")) < 0)
		return rc;
	if (!is_array(r, 4))
		return bad_reply(s, r, "upcoming");
	out->now = rint_of(r->element[0]);
	out->next_expiry = rint_of(r->element[1]);
	due_rows rows = rows_of(&c, r->element[3]);
	rc = due__rows_upcoming(&rows, out, limit);
	if (rint_of(r->element[2]))
		out->truncated = true;
	freeReplyObject(r);
	return rc;
}

/*
** A connection to any node: on one server, the server; on a cluster the
** master, a seed or a known node, the first that answers (a PUBLISH
** reaches every node of a cluster, so any can carry a subscription).
*/
static int dial_any(due_store *s, redisContext **out)
{
	const rd_node *n;
	int rc = 0;

	if (!s->cluster)
		return dial(s, &s->cfg.seed[0], out);
	s->last = s->shun;
	for (size_t i = 0; (n = candidate(s, i)) != NULL; i++) {
		rd_node at = *n; /* as refresh_map */
		if ((rc = dial(s, &at, out)) == 0 || left_us(s) <= 0)
			return rc;
	}
	return rc;
}

/*
** SUBSCRIBE on a second connection; *fd is its socket, readable when a
** wake-up arrived.  A lost subscription connects again on the next call
** (on a cluster, to another node when its node is gone).  Connecting and
** the SUBSCRIBE's answer wait within one bound; after that nothing here
** blocks: the caller polls *fd and listen_drain reads what is there.
*/
static int subscribe(due_store *s, int *fd, bool done)
{
	const char *chan = done ? s->done_chan : s->chan;
	redisReply *r = NULL;
	int rc;

	if (s->sub && s->sub->err)
		drop(&s->sub);
	if (s->sub && s->sub_done != done)
		return due__error_set(DUE_ESTATE,
				      "redis store %s: this handle listens for "
				      "%s tasks; open another",
				      s->cfg.label,
				      s->sub_done ? "finished" : "new");
	if (!s->sub) {
		begin(s);
		if ((rc = dial_any(s, &s->sub)) < 0)
			return rc;
		s->sub_done = done;
		if ((rc = node_cmd(s, s->sub, whole(s), &r, "subscribe",
				   "SUBSCRIBE %s", chan)) == 0 &&
		    r->type == REDIS_REPLY_ERROR)
			rc = due__error_set(DUE_ESTORE,
					    "redis store %s: subscribe failed: "
					    "%s",
					    s->cfg.label, r->str);
		freeReplyObject(r);
		if (rc < 0) {
			drop(&s->sub);
			return rc;
		}
	}
	*fd = s->sub->fd;
	return 0;
}

static int rd_listen(due_store *s, int *fd) { return subscribe(s, fd, false); }

/*
** Finished tasks (due_wait).  The scripts PUBLISH on done_chan, once per
** call that finished a task, only while this shard's "waiters" key lives
** (lua done_wake): with nobody waiting a completion costs one GET, and
** on a Redis Cluster no PUBLISH crosses the cluster bus.  Each call sets
** the key for WAITERS_MS (the core calls again within 10 s while it
** waits), then SUBSCRIBEs as rd_listen does (fd NULL: only the key).
*/
#define WAITERS_MS 30000
static int rd_listen_done(due_store *s, int *fd)
{
	redisReply *r;
	int rc;

	begin(s);
	if ((rc = rd_ok(s)) < 0 ||
	    (rc = rd_cmd(s, whole(s), &r, "say that a task is waited for",
			 "SET %s 1 PX %d", s->waiters, WAITERS_MS)) < 0 ||
	    (rc = rd_check(s, r, "say that a task is waited for")) < 0)
		return rc;
	freeReplyObject(r);
	return fd ? subscribe(s, fd, true) : 0;
}

/* Count the messages that arrived, without blocking. */
static int rd_listen_drain(due_store *s, int *count)
{
	struct pollfd p;
	void *r;

	*count = 0;
	if (!s->sub)
		return 0;
	p.fd = s->sub->fd, p.events = POLLIN, p.revents = 0;
	while (poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP))) {
		if (redisBufferRead(s->sub) != REDIS_OK)
			return 0; /* a broken connection: re-listen later */
		p.revents = 0;
	}
	while (redisGetReplyFromReader(s->sub, &r) == REDIS_OK && r) {
		(*count)++;
		freeReplyObject(r);
	}
	return 0;
}

static int rd_notify(due_store *s)
{
	redisReply *r;
	int rc;

	begin(s);
	if ((rc = rd_ok(s)) < 0 ||
	    (rc = rd_cmd(s, whole(s), &r, "notify", "PUBLISH %s 1", s->chan)) <
		0 ||
	    (rc = rd_check(s, r, "notify")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Flow control: the kinds' settings                                   */
/* ------------------------------------------------------------------ */

static int rd_kind_put(due_store *s, const char *kind,
		       const due_kind_settings *set)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_z(&a, kind);
	arg_i(&a, set->paused);
	arg_i(&a, set->rate_n);
	arg_i(&a, set->rate_us);
	arg_i(&a, set->max_running);
	arg_i(&a, set->max_running_per_group);
	arg_i(&a, set->timeout_us);
	if ((rc = rd_eval(s, "kind_put", &a, &r, "set kind")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

/* Rows {settings, {running, rate_used, due, group_running}} into *out. */
static int kinds_of(due_store *s, redisReply *r, due_kind_info_list **out)
{
	redisReply **rows = NULL;
	rcur c;
	int rc;

	if (!is_array(r, 0))
		return bad_reply(s, r, "read kinds");
	if ((rc = due__kind_info_list_alloc(out, 0)) < 0)
		return rc;
	if (r->elements && !(rows = calloc(r->elements, sizeof(*rows))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t i = 0; i < r->elements; i++) {
		if (!is_array(r->element[i], 2)) {
			free(rows);
			return due__error_set(DUE_ESTORE,
					      "redis store: bad kind row");
		}
		rows[i] = r->element[i]->element[0];
	}
	memset(&c, 0, sizeof(c));
	c.rows = rows, c.n = r->elements;
	due_rows dr = {&cur_ops, &c};
	rc = due__rows_kinds(&dr, *out, NULL);
	for (size_t i = 0; rc == 0 && i < (*out)->count; i++) {
		redisReply *live = r->element[i]->element[1];
		if (!is_array(live, 4))
			continue;
		(*out)->items[i].running = rint_of(live->element[0]);
		(*out)->items[i].rate_used = rint_of(live->element[1]);
		(*out)->items[i].due = rint_of(live->element[2]);
		(*out)->items[i].group_running = rint_of(live->element[3]);
	}
	free(rows);
	return rc;
}

static int kind_read(due_store *s, const char *op, const char *kind,
		     const char *group, due_kind_info_list **out)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	*out = NULL;
	if (kind) {
		arg_z(&a, kind);
		arg_opt(&a, group);
	}
	if ((rc = rd_eval(s, op, &a, &r, "read kinds")) < 0)
		return rc;
	rc = kinds_of(s, r, out);
	if (rc != DUE_ESTORE || *out)
		freeReplyObject(r);
	if (rc < 0) {
		due_kind_info_list_free(*out);
		*out = NULL;
	}
	return rc;
}

static int rd_kind_get(due_store *s, due_kind_info **out, const char *kind,
		       const char *group)
{
	due_kind_info_list *l = NULL;
	int rc;

	*out = NULL;
	if ((rc = kind_read(s, "kind_get", kind, group, &l)) < 0)
		return rc;
	return due__kind_info_take_one(out, l, kind);
}

static int rd_kind_list(due_store *s, due_kind_info_list **out)
{
	return kind_read(s, "kind_list", NULL, NULL, out);
}

static int rd_kind_remove(due_store *s, const char *kind)
{
	rargs a = {0};
	redisReply *r;
	int64_t n;
	int rc;

	arg_z(&a, kind);
	if ((rc = rd_eval(s, "kind_remove", &a, &r, "remove kind")) < 0)
		return rc;
	n = rint_of(r);
	freeReplyObject(r);
	return n ? 0 : due__store_no_kind(kind);
}

/* ------------------------------------------------------------------ */
/* Retention's lease, size                                             */
/* ------------------------------------------------------------------ */

/* One script on TIME (lua lock_take): :lock:<name> (owner, until). */
static int rd_lock_take(due_store *s, bool *held, const char *name,
			const char *owner, int64_t ttl_us)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	*held = false;
	arg_z(&a, name);
	arg_z(&a, owner);
	arg_i(&a, ttl_us);
	if ((rc = rd_eval(s, "lock_take", &a, &r, "take lock")) < 0)
		return rc;
	*held = rint_of(r) == 1;
	freeReplyObject(r);
	return 0;
}

/* INFO memory's used_memory: the whole server's, not only this prefix's. */
static int rd_bytes(due_store *s, int64_t *out)
{
	redisReply *r;
	const char *p;
	int rc;

	*out = 0;
	begin(s);
	if ((rc = rd_ok(s)) < 0 ||
	    (rc = rd_cmd(s, whole(s), &r, "store size", "INFO memory")) < 0 ||
	    (rc = rd_check(s, r, "store size")) < 0)
		return rc;
	if (r->type != REDIS_REPLY_STRING)
		return bad_reply(s, r, "store size");
	if (!(p = strstr(r->str, "used_memory:")))
		return bad_reply(s, r, "store size");
	*out = strtoll(p + strlen("used_memory:"), NULL, 10);
	freeReplyObject(r);
	return 0;
}

static const char *const schemes[] = {"redis", "rediss", NULL};

/*
** Shards (redis_shard.c, declared in redis_shard.h).
*/
int due__redis_shards(const void *cfg)
{
	const rd_cfg *c = cfg;
	return c->shards > 1 ? c->shards : 1;
}

int due__redis_shard_cfg(void **out, const void *cfg, int shards, int i)
{
	rd_cfg *c = calloc(1, sizeof(*c));
	int rc;

	*out = c;
	if (!c)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = copy_cfg(c, cfg)) < 0)
		return rc;
	if (shards > 0)
		c->shards = shards;
	c->shard = i;
	return 0;
}

int due__redis_node(due_store *s, char *buf, size_t n)
{
	const rd_node *at = s->cluster ? &s->master : &s->cfg.seed[0];
	return snprintf(buf, n, "%s:%d", at->host, at->port);
}

bool due__redis_silent(const due_store *s) { return s->silent; }

bool due__redis_same_node(const due_store *a, const due_store *b)
{
	const rd_node *x = a->cluster ? &a->master : &a->cfg.seed[0];
	const rd_node *y = b->cluster ? &b->master : &b->cfg.seed[0];
	return x->port && same_node(x, y);
}

const char *due__redis_label(const due_store *s) { return s->cfg.label; }

void due__redis_where(const void *cfg, due_redis_where *out)
{
	const rd_cfg *c = cfg;

	out->user = c->user;
	out->password = c->password;
	out->db = c->db;
	out->n = c->nseed;
	for (size_t i = 0; i < c->nseed; i++) {
		out->host[i] = c->seed[i].host;
		out->port[i] = c->seed[i].port;
	}
}

int due__redis_payloads_fit(due_store *s, const due_submit *items, size_t n)
{
	return rd_payloads_fit(s, items, n);
}

int due__redis_version(due_store *s, int *v)
{
	return schema_raw(s, "version", v);
}

/* ------------------------------------------------------------------ */
/* Run after across shards (redis_shard.c's forwarder, lua/after.lua)  */
/* ------------------------------------------------------------------ */

int due__redis_schedule_marked(due_store *s, due_submitted *out,
			       const due_submit *items, size_t n,
			       const char *const *marks)
{
	return rd_schedule_m(s, out, items, n, marks);
}

bool due__redis_outbox(due_store *s)
{
	bool was = s->outbox;
	s->outbox = false;
	return was;
}

/* A string reply into st (n bytes); "" for anything else. */
static void copy_str(const redisReply *r, char *st, size_t n)
{
	snprintf(st, n, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
}

int due__redis_states(due_store *s, const due_id *ids, size_t n, char (*st)[16])
{
	rargs a = {0};
	redisReply *r;
	int rc;

	for (size_t i = 0; i < n; i++)
		arg_i(&a, ids[i]);
	if ((rc = rd_eval(s, "after_states", &a, &r, "read parents")) < 0)
		return rc;
	if (!is_array(r, n))
		return bad_reply(s, r, "read parents");
	for (size_t i = 0; i < n; i++)
		copy_str(r->element[i], st[i], sizeof(st[i]));
	freeReplyObject(r);
	return 0;
}

int due__redis_link(due_store *s, due_id parent, due_id child, char st[16])
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, parent);
	arg_i(&a, child);
	if ((rc = rd_eval(s, "after_link", &a, &r, "link a parent")) < 0)
		return rc;
	copy_str(r, st, 16);
	freeReplyObject(r);
	return 0;
}

int due__redis_ended(due_store *s, due_id child, due_id parent, const char *how)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_i(&a, child);
	arg_i(&a, parent);
	arg_z(&a, how);
	if ((rc = rd_eval(s, "after_ended", &a, &r, "release a child")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

int due__redis_outbox_read(due_store *s, char ***msgs, size_t *n)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	*msgs = NULL, *n = 0;
	if ((rc = rd_eval(s, "outbox", &a, &r, "read the outbox")) < 0)
		return rc;
	if (!is_array(r, 0))
		return bad_reply(s, r, "read the outbox");
	if (r->elements && !(*msgs = calloc(r->elements, sizeof(char *)))) {
		freeReplyObject(r);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < r->elements; i++)
		if (r->element[i]->type == REDIS_REPLY_STRING &&
		    ((*msgs)[*n] = strdup(r->element[i]->str)))
			(*n)++;
	freeReplyObject(r);
	return 0;
}

int due__redis_outbox_del(due_store *s, const char *msg)
{
	rargs a = {0};
	redisReply *r;
	int rc;

	arg_z(&a, msg);
	if ((rc = rd_eval(s, "outbox_del", &a, &r, "clear the outbox")) < 0)
		return rc;
	freeReplyObject(r);
	return 0;
}

/*
** Every method is rd_<method> (store.h lists them): one store in one
** slot.  The backend registered as "redis" is redis_shard.c's, which
** runs one of these per shard.
*/
#define OP(m) .m = rd_##m,
const due_store_ops due__store_redis_slot = {.version = DUE_STORE_OPS_VERSION,
					     .name = "redis",
					     .schemes = schemes,
					     .caps = DUE_STORE_CAP_NOTIFY,
					     DUE_STORE_METHODS(OP)
						 DUE_STORE_NOTIFY_METHODS(OP)};
#undef OP
