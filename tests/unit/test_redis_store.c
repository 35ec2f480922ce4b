/*
** test_redis_store.c - what only the Redis store has, on a real server:
** the script reloaded after SCRIPT FLUSH (NOSCRIPT), a server without an
** append-only file refused (and accepted with ?durability=unsafe), one
** hash tag on every key of a store, a warning at open for appendfsync
** everysec or no, rediss:// refused, a completion hook
** refused with DUE_EUNSUPPORTED and nothing changed, a refused connection
** as DUE_ESTORE naming the store, wake-ups through SUBSCRIBE, the
** per-kind lease index kept only for a kind with max_running (and built
** when the limit is set on running tries), a group-limited claim that
** looks at a bounded number of members, a kind-filtered list paged in
** bounded scripts, a submit batch that is one script (all or none, capped
** by items and bytes), the cluster options of the URL (wait=,
** wait_timeout= out of range refused; seeds tried in order; several hosts
** that are not a cluster refused), a write ?wait=1 cannot get
** acknowledged (no replica: DUE_ESTORE, the write is there, reads do not
** wait), no slot-migration probe in the scripts on one server, the
** memory a pending task takes (printed, not asserted), and a frozen path
** (tests/cli/stallproxy.py stopped, a connect that never completes):
** every call, the reconnect, SUBSCRIBE and the open give up at the bound
** with "no answer from the store at HOST:PORT in N s", one bound for a
** call over four shards of the frozen server, and the handle works again
** when the path thaws.  The store on a
** real cluster is tests/cli/test_redis_cluster.sh.  Every transition
** both SQL stores share is in the conformance suite (test_store.c),
** which runs on Redis too.
**
** It runs when DUE_TEST_REDIS_URL names a server (scripts/redis-test-server
** start DIR prints one); unset, it prints a note and passes, except under
** CI=true, where it fails.  Each test works under its own key prefix
** (tu_redis.h), deleted after it.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/internal.h" /* due__lock_take */
#include "store/store.h"   /* due__url_set_option */
#include "due.h"
#define TU_FIXTURE /* setup, teardown, open_db, url, dir */
#define TU_TASKS   /* add, claim_one, get, state_of */
#include "test_util.h"

#ifdef DUE_WITH_REDIS

#define LONG_LEASE 60000000LL

/* One command on the test server; the reply (caller frees) or NULL. */
static redisReply *cmd(const char *fmt, ...)
{
	redisContext *c = tu_redis_connect();
	redisReply *r = NULL;
	va_list ap;

	if (!c)
		return NULL;
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return r;
}

static void cmd_ok(const char *fmt, const char *arg)
{
	redisReply *r = cmd(fmt, arg);
	assert_non_null(r);
	assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
	freeReplyObject(r);
}

/* Wake-ups a listener (db, its fd) got within 60 s: 0 if none came. */
static int wake_count(due_db *db, int fd)
{
	int n = 0;
	for (int tries = 0; n == 0 && tries < 600; tries++) {
		fd_set rd;
		struct timeval tv = {0, 100000};
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		select(fd + 1, &rd, NULL, NULL, &tv);
		assert_int_equal(due_listen_drain(db, &n), 0);
	}
	return n;
}

/* The sharded store's prefix of test_shards (the fixture's is unsharded). */
static char sh_prefix[96];

/* Whether task id lives under {due:sh_prefix:shard}. */
static bool in_shard(due_id id, int shard)
{
	redisReply *r =
	    cmd("EXISTS {due:%s:%d}:t:%lld", sh_prefix, shard, (long long)id);
	bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return yes;
}

/* url (the scratch store's) with its prefix= replaced by prefix, and
   more (options) after it: a URL names an option once (url.c). */
static void with_prefix(char *out, size_t n, const char *prefix,
			const char *more)
{
	char base[600];

	assert_int_equal(
	    due__url_set_option(base, sizeof(base), url, "prefix", prefix), 0);
	assert_true((size_t)snprintf(out, n, "%s%s", base, more) < n);
}

/*
** ?shards=3 (redis_shard.c): each task lives in shard id mod 3, submits
** without a key take turns, upcoming merges the shards in due order, a
** key always lands on its shard (a second handle finds the task),
** wake-ups come from every shard, list and one
** claim see every shard, a completion and claim over several shards in one
** call, kind settings reach every shard and a limited kind's tasks shard
** 0, the store's size counts the server once; another shards= is refused,
** and `due init` with the other layout of an existing prefix too.
*/
static void test_shards(void **state)
{
	char u3[700], u2[700], plain[700], fix3[700];
	due_db *a = NULL, *b = NULL;
	due_id ids[30], kid;
	due_submitted sub;
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	int per[3] = {0};

	(void)state;
	oo.create = true;
	snprintf(sh_prefix, sizeof(sh_prefix), "%ss", tu_redis_prefix);
	with_prefix(u3, sizeof(u3), sh_prefix, "&shards=3");
	with_prefix(u2, sizeof(u2), sh_prefix, "&shards=2");
	with_prefix(plain, sizeof(plain), sh_prefix, "");
	snprintf(fix3, sizeof(fix3), "%s&shards=3", url);
	assert_int_equal(due_open(&a, u3, &oo), 0);
	for (int i = 0; i < 30; i++) {
		ids[i] = add(a, "k", 0, 5);
		per[ids[i] % 3]++;
		assert_true(in_shard(ids[i], (int)(ids[i] % 3)));
	}
	for (int i = 0; i < 3; i++) /* one handle: strictly in turn */
		assert_int_equal(per[i], 10);
	{ /* upcoming merges the shards in due order, cut to the limit */
		due_upcoming *u = NULL;
		assert_int_equal(
		    due_upcoming_get(a, &u, NULL, 0, false, INT64_MAX / 2, 12),
		    0);
		assert_int_equal(u->count, 12);
		assert_true(u->truncated);
		for (size_t k = 0; k < u->count; k++) {
			assert_int_equal(u->ids[k], ids[k]);
			if (k)
				assert_true(u->due_at[k - 1] <= u->due_at[k]);
		}
		due_upcoming_free(u);
	}

	o.key = "order-7";
	assert_int_equal(due_schedule(a, &sub, "k", "p", 1, &o), 0);
	kid = sub.id;
	assert_int_equal(due_open(&b, u3, NULL), 0);
	for (int i = 0; i < 3; i++) { /* whatever the handle's turn */
		assert_int_equal(due_schedule(b, &sub, "k", "p", 1, &o), 0);
		assert_true(sub.existed);
		assert_int_equal(sub.id, kid);
	}

	/* one wake-up channel: a submit to every shard wakes a listener */
	int fd = -1;
	assert_int_equal(due_listen(b, &fd), 0);
	for (int i = 0; i < 3; i++) {
		due_id id = add(a, "w", 0, 5);
		if (wake_count(b, fd) < 1)
			fail_msg("no wake-up for task %lld (shard %lld)",
				 (long long)id, (long long)(id % 3));
		due_cancel_outcome cx;
		assert_int_equal(due_cancel(a, &cx, id), 0);
		assert_int_equal(cx, DUE_CANCEL_CANCELLED);
	}

	/* list: every shard, in id order, paged */
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	lo.limit = 20;
	assert_int_equal(due_list(b, &l, &lo), 0);
	assert_int_equal(l->count, 20);
	for (size_t i = 1; i < l->count; i++)
		assert_true(l->items[i - 1].id < l->items[i].id);
	lo.after = l->items[19].id;
	due_task_list_free(l);
	l = NULL;
	assert_int_equal(due_list(b, &l, &lo), 0);
	assert_int_equal(l->count, 14); /* 30 + the keyed + 3 cancelled */
	due_task_list_free(l);

	/* one claim takes from every shard (each is asked for what is still
	   wanted); one call completes them all, over the three shards, and
	   claims what is left: nothing */
	l = NULL;
	assert_int_equal(due_claim(b, &l, "w", NULL, 0, 100, LONG_LEASE), 0);
	assert_int_equal(l->count, 31);
	due_completion cs[31];
	memset(cs, 0, sizeof(cs));
	for (size_t i = 0; i < l->count; i++) {
		cs[i].id = l->items[i].id;
		cs[i].attempt = l->items[i].attempt;
		cs[i].result = "r";
		cs[i].result_len = 1;
	}
	due_task_list_free(l);
	due_claim_opts co_ = DUE_CLAIM_OPTS_INIT;
	co_.owner = "w";
	co_.limit = 10;
	co_.lease_us = LONG_LEASE;
	l = NULL;
	assert_int_equal(due_complete_and_claim(b, cs, 31, &co_, &l), 0);
	for (int i = 0; i < 31; i++)
		assert_int_equal(cs[i].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(l->count, 0);
	due_task_list_free(l);
	due_stats st;
	assert_int_equal(due_stats_get(a, &st), 0);
	assert_int_equal(st.counts[DUE_DONE], 31);
	assert_int_equal(st.counts[DUE_CANCELLED], 3);

	/* a kind's settings on every shard; a limited kind's tasks in 0 */
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	ks.max_running = 1;
	assert_int_equal(due_kind_set(a, "one", &ks), 0);
	for (int i = 0; i < 3; i++) {
		redisReply *r =
		    cmd("HGET {due:%s:%d}:kind:one max_running", sh_prefix, i);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_STRING);
		assert_string_equal(r->str, "1");
		freeReplyObject(r);
	}
	for (int i = 0; i < 6; i++) /* in shard 0, whatever the turn */
		assert_int_equal(add(a, "one", 0, 5) % 3, 0);
	due_kind_info *ki = NULL;
	assert_int_equal(due_kind_get(b, &ki, "one"), 0);
	assert_int_equal(ki->max_running, 1);
	assert_int_equal(ki->due, 6);
	due_kind_info_free(ki);

	/* the size: the one server's used_memory, not once per shard */
	int64_t sharded = 0, one = 0;
	due_db *f = open_db();
	assert_int_equal(due_store_bytes(a, &sharded), 0);
	assert_int_equal(due_store_bytes(f, &one), 0);
	due_close(f);
	if (sharded > one + one / 2)
		fail_msg("store size %lld, the server's %lld",
			 (long long)sharded, (long long)one);

	/* the number of shards is the store's; the other layout of an
	   existing prefix is refused by due init, not made beside it */
	due_close(b);
	b = NULL;
	assert_int_equal(due_open(&b, u2, NULL), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "made with shards=3"));
	due_close(b);
	b = NULL;
	assert_int_equal(due_open(&b, plain, &oo), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "made with shards=3"));
	due_close(b);
	b = NULL;
	assert_int_equal(due_open(&b, fix3, &oo), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "an unsharded store"));
	due_close(b);
	due_close(a);
	for (int i = 0; i < 3; i++) {
		char name[128];
		snprintf(name, sizeof(name), "%s:%d", sh_prefix, i);
		tu_redis_delete(name);
	}
}

/* ------------------------------------------------------------------ */
/* on_key (issue 38): debounce by key, sharded                          */
/* ------------------------------------------------------------------ */

/* Submit kind "deb" with key, at `at`, on_key k through db; the answer. */
static due_submitted deb(due_db *db, const char *key, due_time at, due_on_key k)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	o.key = key;
	o.at = at;
	o.on_key = k;
	assert_int_equal(due_schedule(db, &s, "deb", "p", 1, &o), 0);
	return s;
}

/* The id the key mapping of ("deb", key) in shard i names (-1: none). */
static long long key_holder(int shard, const char *key)
{
	redisReply *r =
	    cmd("HGET {due:%s:%d}:key 3:deb%s", sh_prefix, shard, key);
	long long v = -1;
	if (r && r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	return v;
}

/* Whether task id's hash in shard i has a key field ('y'). */
static bool has_key(int shard, due_id id)
{
	redisReply *r = cmd("HEXISTS {due:%s:%d}:t:%lld y", sh_prefix, shard,
			    (long long)id);
	bool yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return yes;
}

/*
** on_key over ?shards=3: a keyed submit goes to its key's shard, so the
** holder moves there (each key's task stays in its shard; a move wakes
** the listeners) and a running holder's successor is made in the same
** shard by the same script.  The running task that gave up the key has
** no key field, and none of its later paths (a failure back to
** SCHEDULED, a lease expiry, a cancel) touches the key mapping, which
** names the new holder throughout.  8 processes debouncing one key
** (later) at once leave exactly one live task, due at the latest time.
*/
static void test_on_key_shards(void **state)
{
	char u3[700], key[16];
	due_db *a = NULL, *l = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_time now;
	due_submitted s, r;
	int fd = -1, n = 0;
	const int64_t H = 3600000000LL;

	(void)state;
	oo.create = true;
	snprintf(sh_prefix, sizeof(sh_prefix), "%sk", tu_redis_prefix);
	with_prefix(u3, sizeof(u3), sh_prefix, "&shards=3");
	assert_int_equal(due_open(&a, u3, &oo), 0);
	assert_int_equal(due_open(&l, u3, NULL), 0);
	assert_int_equal(due_now(a, &now), 0);
	assert_int_equal(due_listen(l, &fd), 0);

	/* waiting holders, over the shards: each moves where it is */
	bool seen[3] = {false, false, false};
	for (int i = 0; i < 12; i++) {
		snprintf(key, sizeof(key), "w%d", i);
		s = deb(a, key, now + H, DUE_ON_KEY_KEEP);
		assert_false(s.existed);
		seen[s.id % 3] = true;
		r = deb(a, key, now + 2 * H, DUE_ON_KEY_LATER);
		assert_true(r.existed && r.moved && r.id == s.id);
		assert_true(in_shard(s.id, (int)(s.id % 3)));
		assert_int_equal(key_holder((int)(s.id % 3), key), s.id);
		due_task *t = get(a, s.id);
		assert_int_equal(t->due_at, now + 2 * H);
		due_task_free(t);
	}
	assert_true(seen[0] && seen[1] && seen[2]);
	/* a move wakes the listeners as a submit does */
	tu_sleep_ms(200);
	assert_int_equal(due_listen_drain(l, &n), 0);
	r = deb(a, "w0", now + 3 * H, DUE_ON_KEY_REPLACE);
	assert_true(r.existed && r.moved);
	assert_true(wake_count(l, fd) >= 1);

	/* a running holder gives up the key to a new task of its shard */
	due_schedule_opts o0 = DUE_SCHEDULE_OPTS_INIT;
	o0.key = "run";
	o0.backoff_us = 0; /* its retry is due at once */
	assert_int_equal(due_schedule(a, &s, "deb", "p", 1, &o0), 0);
	int sh = (int)(s.id % 3);
	int32_t at = claim_one(a, s.id, LONG_LEASE);
	assert_true(has_key(sh, s.id));
	r = deb(a, "run", now + H, DUE_ON_KEY_REPLACE);
	assert_false(r.existed || r.moved);
	assert_true(r.id != s.id);
	assert_int_equal(r.id % 3, sh);
	assert_false(has_key(sh, s.id));
	assert_true(has_key(sh, r.id));
	assert_int_equal(key_holder(sh, "run"), r.id);
	/* the old task's paths leave the new holder's key alone */
	due_fail_outcome fo;
	assert_int_equal(due_fail(a, &fo, s.id, at, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_RETRY_SCHEDULED);
	assert_int_equal(key_holder(sh, "run"), r.id);
	due_task *t = get(a, s.id);
	assert_null(t->key);
	due_task_free(t);
	at = claim_one(a, s.id, 1000);
	tu_sleep_ms(20);
	due_reclaimed rec;
	assert_int_equal(due_reclaim_expired(a, &rec), 0);
	assert_int_equal(state_of(a, s.id), DUE_SCHEDULED);
	assert_int_equal(key_holder(sh, "run"), r.id);
	due_cancel_outcome co;
	assert_int_equal(due_cancel(a, &co, s.id), 0);
	assert_int_equal(state_of(a, s.id), DUE_CANCELLED);
	assert_int_equal(key_holder(sh, "run"), r.id);
	s = deb(a, "run", now + 3 * H, DUE_ON_KEY_KEEP);
	assert_true(s.existed && !s.moved && s.id == r.id);

	/* 8 producers debounce one key at once: one task, the last time */
	enum { PROCS = 8, EACH = 150 };
	due_time base = now + 10 * H, last = 0;
	pid_t pid[PROCS];
	for (int c = 0; c < PROCS; c++) {
		if ((pid[c] = fork()) == 0) {
			due_db *p = NULL;
			int bad = due_open(&p, u3, NULL) != 0;
			for (int j = 0; j < EACH && !bad; j++) {
				due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
				due_submitted x;
				o.key = "race";
				o.on_key = DUE_ON_KEY_LATER;
				/* each process's times interleave the
				   others': distinct, the last is the max */
				o.at = base + ((due_time)j * PROCS + c) * 1000;
				bad = due_schedule(p, &x, "race", "p", 1, &o) !=
				      0;
			}
			due_close(p);
			_exit(bad);
		}
		assert_true(pid[c] > 0);
	}
	for (int c = 0; c < PROCS; c++) {
		int st = 0;
		waitpid(pid[c], &st, 0);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	last = base + ((due_time)(EACH - 1) * PROCS + PROCS - 1) * 1000;
	due_task_list *tl = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	lo.kind = "race";
	assert_int_equal(due_list(a, &tl, &lo), 0);
	assert_int_equal(tl->count, 1);
	assert_int_equal(tl->items[0].state, DUE_SCHEDULED);
	assert_int_equal(tl->items[0].due_at, last);
	due_task_list_free(tl);

	due_close(l);
	due_close(a);
	for (int i = 0; i < 3; i++) {
		char name[128];
		snprintf(name, sizeof(name), "%s:%d", sh_prefix, i);
		tu_redis_delete(name);
	}
}

/* The calls of the Redis store's script so far (INFO commandstats):
   `name` "fcall" or "evalsha" (every client of the server counts). */
static long long script_calls(const char *name)
{
	char key[40];
	redisReply *r = cmd("INFO commandstats");
	const char *p;
	long long v = -1;

	snprintf(key, sizeof(key), "cmdstat_%s:calls=", name);
	if (r && r->type == REDIS_REPLY_STRING) {
		p = strstr(r->str, key);
		v = p ? strtoll(p + strlen(key), NULL, 10) : 0;
	}
	freeReplyObject(r);
	return v;
}

/*
** The library (FCALL) or the script (EVALSHA) flushed under an open
** handle: the next call loads it again.  A server with functions runs
** every call as FCALL, not EVALSHA.
*/
static void test_noscript_reload(void **state)
{
	(void)state;
	due_db *db = open_db();
	long long f0 = script_calls("fcall");
	due_id id = add(db, "k", 0, 5);

	cmd_ok("FUNCTION FLUSH%s", "");
	cmd_ok("SCRIPT FLUSH%s", "");
	claim_one(db, id, LONG_LEASE);
	cmd_ok("FUNCTION FLUSH%s", "");
	due_complete_outcome co;
	assert_int_equal(due_complete(db, &co, id, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_true(script_calls("fcall") - f0 >= 3);
	due_close(db);
}

/*
** As ACL user `user` (password pw, made by the caller): open the store,
** submit, claim and complete a task, read it DONE; `flush` runs SCRIPT
** FLUSH between the submit and the claim.
*/
static void round_trip_as(const char *user, bool flush)
{
	char u[700];
	due_db *db = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_complete_outcome co;
	due_task *t;
	due_id id;

	assert_true(strncmp(url, "redis://", 8) == 0);
	snprintf(u, sizeof(u), "redis://%s:pw@%s", user, url + 8);
	oo.create = true;
	assert_int_equal(due_open(&db, u, &oo), 0);
	id = add(db, "k", 0, 5);
	if (flush)
		cmd_ok("SCRIPT FLUSH%s", "");
	assert_int_equal(claim_one(db, id, LONG_LEASE), 1);
	assert_int_equal(due_complete(db, &co, id, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	t = get(db, id);
	assert_int_equal(t->state, DUE_DONE);
	due_task_free(t);
	due_close(db);
}

/*
** A user the server refuses FUNCTION, or FCALL (ACL), works as well
** through EVALSHA: submit, claim, complete, read, and a SCRIPT FLUSH
** under its handle; a read-only call and a write take their paths.
*/
static void test_no_functions(void **state)
{
	/* the rules of each user: refused FUNCTION, FCALL, both */
	static const char *const deny[][2] = {{"-function", "+fcall"},
					      {"-fcall", "+function"},
					      {"-fcall", "-function"}};

	(void)state;
	for (size_t i = 0; i < sizeof(deny) / sizeof(deny[0]); i++) {
		long long e0 = script_calls("evalsha");

		cmd_ok("ACL SETUSER duenofn reset on >pw ~* &* +@all %s",
		       deny[i][0]);
		cmd_ok("ACL SETUSER duenofn %s", deny[i][1]);
		cmd_ok("FUNCTION FLUSH%s", "");
		round_trip_as("duenofn", true);
		assert_true(script_calls("evalsha") - e0 >= 4);
	}
	cmd_ok("ACL DELUSER duenofn%s", "");
}

/*
** On one server no script probes for a migrating slot (only a cluster's
** slot moves): a user the server refuses EXISTS (ACL) can submit, claim,
** complete and read; with the probe every script would answer TRYAGAIN.
** (The probe on a cluster is proven by test_redis_cluster.sh's slot
** migration.)
*/
static void test_no_probe_on_one_server(void **state)
{
	(void)state;
	cmd_ok("ACL SETUSER dueprobe reset on >pw ~* &* +@all -exists%s", "");
	round_trip_as("dueprobe", false);
	cmd_ok("ACL DELUSER dueprobe%s", "");
}

/* appendonly no: refused, naming the setting; unsafe: accepted. */
static void test_aof_refused(void **state)
{
	(void)state;
	due_db *db = NULL;
	char unsafe[600];

	cmd_ok("CONFIG SET appendonly %s", "no");
	int rc = due_open(&db, url, NULL);
	char msg[512];
	snprintf(msg, sizeof(msg), "%s", due_error_last());
	due_close(db);
	db = NULL;
	snprintf(unsafe, sizeof(unsafe), "%s&durability=unsafe", url);
	int rc2 = due_open(&db, unsafe, NULL);
	due_close(db);
	cmd_ok("CONFIG SET appendonly %s", "yes");
	assert_int_equal(rc, DUE_ESTORE);
	assert_non_null(strstr(msg, "appendonly"));
	assert_int_equal(rc2, 0);

	cmd_ok("CONFIG SET maxmemory-policy %s", "allkeys-lru");
	rc = due_open(&db, url, NULL);
	snprintf(msg, sizeof(msg), "%s", due_error_last());
	due_close(db);
	cmd_ok("CONFIG SET maxmemory-policy %s", "noeviction");
	assert_int_equal(rc, DUE_ESTORE);
	assert_non_null(strstr(msg, "maxmemory-policy"));
}

/* The warning (due_db_warning) of an open on `url` with appendfsync v,
   copied to w ("" for none); the setting is put back to always. */
static void open_with_fsync(const char *v, char *w, size_t n)
{
	due_db *db = NULL;
	cmd_ok("CONFIG SET appendfsync %s", v);
	int rc = due_open(&db, url, NULL);
	snprintf(w, n, "%s",
		 rc == 0 && due_db_warning(db) ? due_db_warning(db) : "");
	due_close(db);
	cmd_ok("CONFIG SET appendfsync %s", "always");
	assert_int_equal(rc, 0);
}

/* appendfsync everysec / no: opened, with a warning naming the setting;
   always: no warning. */
static void test_fsync_warning(void **state)
{
	(void)state;
	char w[512];

	open_with_fsync("everysec", w, sizeof(w));
	printf("everysec: %s\n", w);
	assert_non_null(strstr(w, "appendfsync everysec"));
	assert_non_null(strstr(w, "set appendfsync always"));
	open_with_fsync("no", w, sizeof(w));
	assert_non_null(strstr(w, "appendfsync no"));
	open_with_fsync("always", w, sizeof(w));
	assert_string_equal(w, "");
}

/* Every key the store wrote carries its one hash tag. */
static void test_one_hash_tag(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	due_submitted s;
	due_reclaimed rr;
	due_fail_outcome fo;
	char tag[96], match[96];

	o.key = "biz-1";
	o.group = "g";
	assert_int_equal(due_schedule(db, &s, "k", "p", 1, &o), 0);
	ks.max_running = 3;
	ks.max_running_per_group = 1;
	ks.rate_n = 10;
	ks.rate_us = 1000000;
	assert_int_equal(due_kind_set(db, "k", &ks), 0);
	claim_one(db, s.id, 1000);
	/* until the 1 ms lease has been taken back (the lease key, the
	   reclaim path); then claim only k2, not the rescheduled task */
	for (int i = 0; i < 60000 && state_of(db, s.id) == DUE_CLAIMED; i++) {
		assert_int_equal(due_reclaim_expired(db, &rr), 0);
		tu_sleep_ms(1);
	}
	assert_int_not_equal(state_of(db, s.id), DUE_CLAIMED);
	due_id b = add(db, "k2", 0, 1);
	const char *k2[] = {"k2"};
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", k2, 1, 10, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, b);
	due_task_list_free(l);
	assert_int_equal(due_fail(db, &fo, b, 1, "x"), 0);
	due_worker_stats ws = {.claimed = 1};
	assert_int_equal(due_worker_report(db, "w", &ws), 0);
	due_close(db);

	snprintf(tag, sizeof(tag), "{due:%s}:", tu_redis_prefix);
	snprintf(match, sizeof(match), "*%s*", tu_redis_prefix);
	redisReply *r = cmd("KEYS %s", match);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	assert_true(r->elements > 5);
	for (size_t i = 0; i < r->elements; i++)
		if (strncmp(r->element[i]->str, tag, strlen(tag)) != 0)
			fail_msg("key without the hash tag: %s",
				 r->element[i]->str);
	printf("%zu keys, all under %s\n", r->elements, tag);
	freeReplyObject(r);
}

static void test_rediss_refused(void **state)
{
	(void)state;
	due_db *db = NULL;
	assert_int_equal(due_open(&db, "rediss://127.0.0.1:6380/0", NULL),
			 DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "TLS"));
	due_close(db);
	db = NULL;
	assert_int_equal(
	    due_open(&db, "redis://127.0.0.1:6379/0?prefx=a", NULL),
	    DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "prefx"));
	due_close(db);
}

static int hook_never(void *conn, const due_task *t, void *payload)
{
	(void)conn, (void)t;
	(*(int *)payload)++;
	return 0;
}

/* A completion hook: DUE_EUNSUPPORTED, the hook never runs, nothing changed. */
static void test_hook_unsupported(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_complete_outcome co;
	int calls = 0;
	due_id id = add(db, "k", 0, 5);

	claim_one(db, id, LONG_LEASE);
	assert_int_equal(
	    due_complete_tx(db, &co, id, 1, "r", 1, hook_never, &calls),
	    DUE_EUNSUPPORTED);
	assert_non_null(strstr(due_error_last(), "transaction"));
	assert_int_equal(calls, 0);
	assert_int_equal(state_of(db, id), DUE_CLAIMED);
	assert_int_equal(due_complete(db, &co, id, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	due_close(db);
}

/* Nothing listens: DUE_ESTORE naming the store. */
static void test_refused_connection(void **state)
{
	(void)state;
	due_db *db = NULL;
	assert_int_equal(due_open(&db, "redis://127.0.0.1:1/0?prefix=x", NULL),
			 DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "redis://127.0.0.1:1/0"));
	due_close(db);
}

/*
** ?wait= and ?wait_timeout= out of range, an empty host, shards= out of
** range: DUE_EINVAL naming what was wrong.
*/
static void test_wait_options_refused(void **state)
{
	static const char *const bad[][2] = {
	    {"redis://127.0.0.1:1/0?wait=x", "wait must be"},
	    {"redis://127.0.0.1:1/0?wait=65", "wait must be"},
	    {"redis://127.0.0.1:1/0?wait=", "wait must be"},
	    {"redis://127.0.0.1:1/0?wait_timeout=0", "wait_timeout"},
	    {"redis://127.0.0.1:1/0?wait_timeout=31s", "wait_timeout"},
	    {"redis://127.0.0.1:1,/0", "no host"},
	    {"redis://127.0.0.1:1/0?shards=0", "shards must be"},
	    {"redis://127.0.0.1:1/0?shards=65", "shards must be"},
	    {"redis://127.0.0.1:1/0?shards=2x", "shards must be"},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		due_db *db = NULL;
		assert_int_equal(due_open(&db, bad[i][0], NULL), DUE_EINVAL);
		if (!strstr(due_error_last(), bad[i][1]))
			fail_msg("%s: %s", bad[i][0], due_error_last());
		due_close(db);
	}
}

/* "host:port" of DUE_TEST_REDIS_URL into buf. */
static void test_server(char *buf, size_t n)
{
	const char *u = getenv("DUE_TEST_REDIS_URL");
	size_t k;

	assert_non_null(u);
	u += strlen("redis://");
	k = strcspn(u, "/?");
	assert_true(k < n);
	memcpy(buf, u, k);
	buf[k] = '\0';
}

/*
** Seeds are tried in order (the first, port 1, refuses); several hosts
** are only for a Redis Cluster, so a plain server behind a seed list is
** refused with DUE_EINVAL, naming why.
*/
static void test_seeds_not_cluster(void **state)
{
	char hp[160], surl[256];
	due_db *db = NULL;

	(void)state;
	test_server(hp, sizeof(hp));
	snprintf(surl, sizeof(surl), "redis://127.0.0.1:1,%s/0?prefix=%s", hp,
		 tu_redis_prefix);
	assert_int_equal(due_open(&db, surl, NULL), DUE_EINVAL);
	assert_non_null(strstr(due_error_last(), "not a cluster node"));
	due_close(db);
}

/*
** ?wait=1 on a server without a replica: a submit is written but not
** acknowledged (DUE_ESTORE saying so, the task is there); a read does
** not WAIT.  wait=0 (one server's default) acknowledges as before.
*/
static void test_wait_unmet(void **state)
{
	due_db *db = NULL, *plain = open_db();
	due_id id = add(plain, "k", 0, 5);
	due_task_list *l = NULL;
	due_submitted sub;
	char wurl[600];

	(void)state;
	snprintf(wurl, sizeof(wurl), "%s&wait=1&wait_timeout=20ms", url);
	assert_int_equal(due_open(&db, wurl, NULL), 0);
	assert_int_equal(due_schedule(db, &sub, "k", "p", 1, NULL), DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "0 of 1 replicas"));
	assert_int_equal(state_of(db, id), DUE_SCHEDULED); /* a read */
	due_list_opts o = DUE_LIST_OPTS_INIT;
	assert_int_equal(due_list(plain, &l, &o), 0);
	assert_int_equal(l->count, 2); /* the unacknowledged one is there */
	due_task_list_free(l);
	/* degraded now: a claim is refused before it writes, so the due
	   task keeps its attempts (it is not taken, leased and left to
	   expire), and so is a second submit (no duplicate) */
	due_task_list *got = NULL;
	assert_int_equal(due_claim(db, &got, "w", NULL, 0, 5, 30000000),
			 DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "nothing written"));
	assert_null(got);
	due_task *t = NULL;
	assert_int_equal(due_get(plain, &t, id), 0);
	assert_int_equal(t->state, DUE_SCHEDULED);
	assert_int_equal(t->attempt, 0);
	due_task_free(t);
	assert_int_equal(due_schedule(db, &sub, "k", "p", 1, NULL), DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "nothing written"));
	assert_int_equal(due_list(plain, &l, &o), 0);
	assert_int_equal(l->count, 2);
	due_task_list_free(l);
	due_close(db);
	due_close(plain);
}

/*
** A completion whose WAIT falls short is written (the script ran and
** said what it wrote) and the call fails; its retry on the same handle
** hears the outcomes that were written, DONE, from the handle's memory,
** not REJECTED_STALE from the store (and is not refused for the missing
** replica: nothing is sent).  The same through complete-and-claim.  Each
** is answered once: a later complete of the same try is late.
*/
static void test_wait_unmet_complete(void **state)
{
	due_db *db = NULL, *plain = open_db();
	due_task_list *l = NULL, *got = NULL;
	due_completion c[3];
	due_claim_opts co = DUE_CLAIM_OPTS_INIT;
	due_complete_outcome o;
	char wurl[600];

	(void)state;
	for (int i = 0; i < 3; i++)
		add(plain, "wc", 0, 5);
	assert_int_equal(due_claim(plain, &l, "w", NULL, 0, 3, LONG_LEASE), 0);
	assert_int_equal(l->count, 3);
	for (size_t i = 0; i < 3; i++)
		c[i] = (due_completion){l->items[i].id, l->items[i].attempt,
					"r", 1, DUE_COMPLETE_REJECTED_STALE};
	snprintf(wurl, sizeof(wurl), "%s&wait=1&wait_timeout=20ms", url);
	assert_int_equal(due_open(&db, wurl, NULL), 0);
	assert_int_equal(due_complete_batch(db, c, 2), DUE_ESTORE);
	assert_non_null(strstr(due_error_last(), "0 of 1 replicas"));
	assert_int_equal(state_of(plain, c[0].id), DUE_DONE); /* written */
	assert_int_equal(state_of(plain, c[1].id), DUE_DONE);
	c[0].outcome = c[1].outcome = DUE_COMPLETE_REJECTED_STALE;
	assert_int_equal(due_complete_batch(db, c, 2), 0);
	assert_int_equal(c[0].outcome, DUE_COMPLETE_DONE);
	assert_int_equal(c[1].outcome, DUE_COMPLETE_DONE);
	/* answered once: the store itself answers a later one */
	assert_int_equal(due_complete(plain, &o, c[0].id, c[0].attempt, "r", 1),
			 0);
	assert_int_equal(o, DUE_COMPLETE_REJECTED_STALE);
	due_close(db);

	/* complete-and-claim: the completion is written with the claim
	   (whose tasks, had it found any, this try would lose: their leases
	   expire) */
	assert_int_equal(due_open(&db, wurl, NULL), 0);
	static const char *const wc[] = {"wc"}; /* all claimed: none */
	co.owner = "w";
	co.kinds = wc;
	co.n_kinds = 1;
	co.limit = 1;
	co.lease_us = LONG_LEASE;
	assert_int_equal(due_complete_and_claim(db, &c[2], 1, &co, &got),
			 DUE_ESTORE);
	due_task_list_free(got);
	got = NULL;
	assert_int_equal(state_of(plain, c[2].id), DUE_DONE);
	c[2].outcome = DUE_COMPLETE_REJECTED_STALE;
	assert_int_equal(due_complete_batch(db, &c[2], 1), 0);
	assert_int_equal(c[2].outcome, DUE_COMPLETE_DONE);
	due_task_list_free(l);
	due_close(db);
	due_close(plain);
}

/* A submit through another handle wakes the listener's socket. */
static void test_listen_wakes(void **state)
{
	(void)state;
	due_db *l = open_db(), *p = open_db();
	int fd = -1, n = 0;

	assert_int_equal(due_listen(l, &fd), 0);
	assert_true(fd >= 0);
	add(p, "k", 0, 5);
	n = wake_count(l, fd);
	assert_true(n >= 1);
	due_close(l);
	due_close(p);
}

static int64_t used_memory(void)
{
	redisReply *r = cmd("INFO memory");
	int64_t v = -1;
	const char *p = r && r->type == REDIS_REPLY_STRING
			    ? strstr(r->str, "used_memory:")
			    : NULL;
	if (p)
		v = strtoll(p + 12, NULL, 10);
	freeReplyObject(r);
	return v;
}

/* Memory per pending task (16-byte payload): a figure, not a check. */
/* :lk:<kind> (the leases of one kind) exists only while the kind has
   max_running: set on a kind whose tasks already run, the limit counts
   them at once (built from :lease); a kind without it reports its
   running tries from :lease, and none of its claims writes :lk. */
static void test_running_count_index(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	due_kind_info *ki = NULL;
	due_task_list *l = NULL;
	due_complete_outcome co;
	const char *lim[] = {"lim"};

	for (int i = 0; i < 3; i++)
		add(db, "lim", 0, 1);
	assert_int_equal(due_claim(db, &l, "w1", lim, 1, 2, LONG_LEASE), 0);
	assert_int_equal(l->count, 2);
	ks.timeout_us = 5000000; /* settings, no max_running */
	assert_int_equal(due_kind_set(db, "lim", &ks), 0);
	assert_int_equal(due_kind_get(db, &ki, "lim"), 0);
	assert_int_equal(ki->running, 2);
	due_kind_info_free(ki);
	redisReply *r = cmd("EXISTS %s", tu_rd_key("lk:lim"));
	assert_non_null(r);
	assert_int_equal(r->integer, 0);
	freeReplyObject(r);

	ks = (due_kind_settings)DUE_KIND_SETTINGS_INIT;
	ks.max_running = 2;
	assert_int_equal(due_kind_set(db, "lim", &ks), 0);
	assert_int_equal(due_kind_get(db, &ki, "lim"), 0);
	assert_int_equal(ki->running, 2);
	due_kind_info_free(ki);
	due_task_list *l2 = NULL;
	assert_int_equal(due_claim(db, &l2, "w1", lim, 1, 2, LONG_LEASE), 0);
	assert_int_equal(l2->count, 0); /* both slots held by the two tries */
	due_task_list_free(l2);
	assert_int_equal(due_complete(db, &co, l->items[0].id, 1, "ok", 2), 0);
	assert_int_equal(due_claim(db, &l2, "w1", lim, 1, 2, LONG_LEASE), 0);
	assert_int_equal(l2->count, 1);
	due_task_list_free(l2);
	due_task_list_free(l);
	due_close(db);
}

/* n tasks of kind `kind` (group grp, or none) in one call; the first id. */
static due_id add_many(due_db *db, const char *kind, const char *grp, int n)
{
	due_submit *items = calloc((size_t)n, sizeof(*items));
	due_submitted *out = calloc((size_t)n, sizeof(*out));
	assert_non_null(items);
	assert_non_null(out);
	for (int i = 0; i < n; i++) {
		items[i] = (due_submit){.kind = kind,
					.payload = "p",
					.payload_len = 1,
					.opts = DUE_SCHEDULE_OPTS_INIT};
		items[i].opts.group = grp;
	}
	assert_int_equal(due_schedule_batch(db, out, items, (size_t)n), 0);
	due_id first = out[0].id;
	for (int i = 1; i < n; i++)
		assert_int_equal(out[i].id, first + i);
	free(items);
	free(out);
	return first;
}

/* A kind with max_running_per_group whose one full group has 1,500 due
   tasks ahead of another group's task: a claim looks at no more than
   room + 1000 of them (was: every one, each claim), so the other group's
   task waits, and the claim says why (retry_in_us). */
static void test_group_scan_bounded(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_kind_settings ks = DUE_KIND_SETTINGS_INIT;
	const char *g[] = {"g"};
	due_task_list *l = NULL;

	ks.max_running_per_group = 1;
	assert_int_equal(due_kind_set(db, "g", &ks), 0);
	add_many(db, "g", "full", 1501);
	assert_int_equal(due_claim(db, &l, "w1", g, 1, 1, LONG_LEASE), 0);
	assert_int_equal(l->count, 1); /* group "full" now runs its one */
	due_task_list_free(l);
	tu_sleep_ms(2); /* the other group's task is due after the backlog */
	due_id other = add_many(db, "g", "other", 1);

	assert_int_equal(due_claim(db, &l, "w1", g, 1, 1, LONG_LEASE), 0);
	assert_int_equal(l->count, 0);
	assert_true(l->retry_in_us > 0);
	due_task_list_free(l);
	assert_int_equal(state_of(db, other), DUE_SCHEDULED);
	due_close(db);
}

/* The script's calls so far, FCALL or EVALSHA. */
static long long evalsha_calls(void)
{
	return script_calls("fcall") + script_calls("evalsha");
}

/* A kind filter over 2,500 ids: the script looks at 1000 ids a call and
   redis.c pages on (more than one call), with the same answer as one
   walk: the rare kind's tasks in id order, limit and after kept. */
static void test_list_kind_pages(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_list_opts o = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	due_id r1 = add_many(db, "rare", NULL, 1);
	add_many(db, "common", NULL, 1200);
	due_id r2 = add_many(db, "rare", NULL, 1);
	add_many(db, "common", NULL, 1300);
	due_id r3 = add_many(db, "rare", NULL, 1);

	o.kind = "rare";
	o.limit = 10;
	long long before = evalsha_calls();
	assert_int_equal(due_list(db, &l, &o), 0);
	long long calls = evalsha_calls() - before;
	assert_int_equal(l->count, 3);
	assert_int_equal(l->items[0].id, r1);
	assert_int_equal(l->items[1].id, r2);
	assert_int_equal(l->items[2].id, r3);
	assert_string_equal(l->items[2].kind, "rare");
	due_task_list_free(l);
	assert_true(calls >= 3); /* 2,503 ids, 1000 a script */

	o.limit = 2;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[1].id, r2);
	due_task_list_free(l);
	o.after = r2;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, r3);
	due_task_list_free(l);

	o = (due_list_opts)DUE_LIST_OPTS_INIT; /* no filter: limit rows */
	o.limit = 2100;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 2100);
	for (size_t i = 0; i < l->count; i++)
		assert_int_equal(l->items[i].id, r1 + (due_id)i);
	due_task_list_free(l);
	due_close(db);
}

/* One due_schedule_batch is one script: a call over 10,000 tasks is
   refused with DUE_ETOOBIG naming the cap, and writes nothing (before:
   1,000 at a time, so a failure left the first batches in); 2,500 tasks
   in one call are all written, and so are 5 MB of payloads (the 4 MiB
   cap of a call is gone: the server's proto-max-bulk-len bounds them,
   tests/cli/test_store_limits.sh). */
static void test_submit_all_or_none(void **state)
{
	(void)state;
	due_db *db = open_db();
	enum { BIG = 10001 };
	due_submit *items = calloc(BIG, sizeof(*items));
	due_submitted *out = calloc(BIG, sizeof(*out));
	size_t plen = 1000000;
	char *payload = malloc(plen);
	due_stats st;

	assert_non_null(items);
	assert_non_null(out);
	assert_non_null(payload);
	memset(payload, 'x', plen);
	for (int i = 0; i < BIG; i++)
		items[i] = (due_submit){.kind = "b",
					.payload = "p",
					.payload_len = 1,
					.opts = DUE_SCHEDULE_OPTS_INIT};
	assert_int_equal(due_schedule_batch(db, out, items, BIG), DUE_ETOOBIG);
	assert_non_null(strstr(due_error_last(), "10000"));
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 0);
	assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("seq")), 0);

	add_many(db, "b", NULL, 2500);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 2500);
	for (int i = 0; i < 5; i++)
		items[i].payload = payload, items[i].payload_len = plen;
	assert_int_equal(due_schedule_batch(db, out, items, 5), 0);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], 2505);
	free(payload);
	free(items);
	free(out);
	due_close(db);
}

/* CLAIMED has no :st index (:lease holds exactly those ids): ls of
   CLAIMED, of every state, paged by id, and the count come from it. */
static void test_claimed_from_lease(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_list_opts o = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL, *c = NULL;
	due_stats st;
	due_id first = add_many(db, "k", NULL, 5);

	assert_int_equal(due_claim(db, &c, "w1", NULL, 0, 3, LONG_LEASE), 0);
	assert_int_equal(c->count, 3);
	assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("st:CLAIMED")), 0);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_CLAIMED], 3);
	assert_int_equal(st.counts[DUE_SCHEDULED], 2);
	o.state = DUE_CLAIMED;
	o.limit = 2;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->items[0].id, first);
	assert_int_equal(l->items[1].id, first + 1);
	due_task_list_free(l);
	o.after = first + 1;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, first + 2);
	assert_int_equal(l->items[0].state, DUE_CLAIMED);
	due_task_list_free(l);
	o = (due_list_opts)DUE_LIST_OPTS_INIT;
	assert_int_equal(due_list(db, &l, &o), 0);
	assert_int_equal(l->count, 5);
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(l->items[i].id, first + (due_id)i);
	due_task_list_free(l);
	due_task_list_free(c);
	due_close(db);
}

/* Each state's bitmap chunks (layout 4): the count at bit 1024 equals
   the bitmap's bits, every chunk in use is in :sc, and a chunk emptied
   is deleted with its :sc member. */
static void check_chunks(const char *st, long long want_ids)
{
	char sc[160];
	long long total = 0;
	snprintf(sc, sizeof(sc), "%s", tu_rd_key("sc:%s", st));
	redisReply *cs = cmd("ZRANGE %s 0 -1", sc);
	assert_non_null(cs);
	assert_int_equal(cs->type, REDIS_REPLY_ARRAY);
	for (size_t i = 0; i < cs->elements; i++) {
		char key[160];
		snprintf(key, sizeof(key), "%s",
			 tu_rd_key("sb:%s:%s", st, cs->element[i]->str));
		long long bits = tu_rd("BITCOUNT %s 0 127", key);
		redisReply *r = cmd("BITFIELD %s GET u16 1024", key);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_ARRAY);
		assert_int_equal(r->element[0]->integer, bits);
		freeReplyObject(r);
		assert_true(bits > 0);
		total += bits;
	}
	freeReplyObject(cs);
	assert_int_equal(total, want_ids);
}

static void test_state_chunks(void **state)
{
	(void)state;
	enum { N = 2500 }; /* ids over three or four chunks of 1024 */
	due_db *db = open_db();
	due_task_list *l = NULL;
	due_complete_outcome co;
	int done = 0;

	add_many(db, "k", NULL, N);
	check_chunks("SCHEDULED", N);
	assert_true(tu_rd("ZCARD %s", tu_rd_key("sc:SCHEDULED")) >= 3);
	while (done < N) {
		assert_int_equal(
		    due_claim(db, &l, "w", NULL, 0, 300, LONG_LEASE), 0);
		assert_true(l->count > 0);
		for (size_t i = 0; i < l->count; i++)
			assert_int_equal(due_complete(db, &co, l->items[i].id,
						      l->items[i].attempt, "r",
						      1),
					 0);
		done += (int)l->count;
		due_task_list_free(l);
		check_chunks("SCHEDULED", N - done);
		check_chunks("DONE", done);
	}
	assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("sc:SCHEDULED")), 0);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("dh")), 0);
	due_close(db);
}

/* Claims across many kinds (layout 4: no index of every scheduled
   task; :dh's heads and the merge of due_scan): 40 kinds, priorities
   0..2, 800 tasks due at distinct past times, interleaved over the kinds;
   claims of 16 take them in (priority, due_at, id) order, each batch
   exactly the next 16 of that order. */
typedef struct {
	int prio;
	due_time at;
	due_id id;
} ord;
static int ord_cmp(const void *a, const void *b)
{
	const ord *x = a, *y = b;
	if (x->prio != y->prio)
		return x->prio < y->prio ? -1 : 1;
	if (x->at != y->at)
		return x->at < y->at ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}
static void test_claim_order_many_kinds(void **state)
{
	(void)state;
	enum { N = 800, KINDS = 40, B = 16 };
	due_db *db = open_db();
	static ord want[N];
	due_time now;
	assert_int_equal(due_now(db, &now), 0);
	for (int i = 0; i < N; i++) {
		due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
		due_submitted sub;
		char kind[16];
		snprintf(kind, sizeof(kind), "k%d", (i * 7) % KINDS);
		o.priority = (i * 13) % 3;
		/* distinct times, not in id order */
		o.at = now - 10000000 + ((i * 37) % N) * 1000;
		assert_int_equal(due_schedule(db, &sub, kind, "p", 1, &o), 0);
		want[i] = (ord){o.priority, o.at, sub.id};
	}
	qsort(want, N, sizeof(want[0]), ord_cmp);
	for (int off = 0; off < N; off += B) {
		due_task_list *l = NULL;
		assert_int_equal(due_claim(db, &l, "w", NULL, 0, B, LONG_LEASE),
				 0);
		assert_int_equal(l->count, B);
		for (size_t i = 0; i < l->count; i++) {
			bool found = false;
			for (int j = off; j < off + B; j++)
				found = found || want[j].id == l->items[i].id;
			if (!found)
				fail_msg(
				    "claim at %d took %lld, not among the next "
				    "%d of the order",
				    off, (long long)l->items[i].id, B);
		}
		due_task_list_free(l);
	}
	due_close(db);
}

/* A due backlog is not the wheel's: upcoming returns at most 256 of what
   is due already (a priority) and then every task due later in the
   horizon, untruncated.  Before, 25,000 due with 100 due later answered
   the first 20,000 due, truncated at a past due_at: every refill read
   the whole backlog again and the worker refilled at once (a drain of 3
   tasks a second). */
static void test_upcoming_backlog(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_upcoming *u = NULL;
	due_time now;
	due_id later[100];
	int seen = 0, n_due = 0;

	for (int i = 0; i < 5; i++)
		add_many(db, "b", NULL, 5000);
	for (int i = 0; i < 100; i++)
		later[i] = add(db, "b", 60000000LL + i * 1000, 5);
	assert_int_equal(due_now(db, &now), 0);
	assert_int_equal(
	    due_upcoming_get(db, &u, NULL, 0, false, now + 600000000LL, 100000),
	    0);
	assert_false(u->truncated);
	for (size_t i = 0; i < u->count; i++) {
		if (u->due_at[i] <= u->now)
			n_due++;
		for (int j = 0; j < 100; j++)
			seen += u->ids[i] == later[j];
	}
	assert_int_equal(n_due, 256);
	assert_int_equal(seen, 100);
	assert_int_equal(u->count, 356);
	due_upcoming_free(u);
	due_close(db);
}

static void test_memory_per_task(void **state)
{
	(void)state;
	/* 10,000 tasks give the same figure per task as the 100,000
	   (due bench --workload memory --n 100000 measures those) */
	enum { N = 10000, B = 1000 };
	due_db *db = open_db();
	static due_submit items[B];
	static due_submitted out[B];
	int64_t before = used_memory();

	for (int i = 0; i < B; i++) {
		items[i] = (due_submit){.kind = "mem",
					.payload = "0123456789abcdef",
					.payload_len = 16,
					.opts = DUE_SCHEDULE_OPTS_INIT};
		items[i].opts.delay_us = 3600000000LL;
	}
	for (int i = 0; i < N / B; i++)
		assert_int_equal(due_schedule_batch(db, out, items, B), 0);
	int64_t after = used_memory();
	printf("memory: %lld bytes per pending task (%d tasks, INFO memory "
	       "used_memory before/after; the issue's target is 400)\n",
	       (long long)((after - before) / N), N);
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], N);
	due_close(db);
}

/* The integer reply of a command (-1 for anything else). */
static long long cmd_int(const char *fmt, const char *arg)
{
	redisReply *r = cmd(fmt, arg);
	long long v = -1;

	if (r && r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r && r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	freeReplyObject(r);
	return v;
}

/*
** Layout 4 -> 5 (issue 15): a prefix at version 4, with the whole
** history's metric counters (:m), is refused until `due init`, which
** moves it to 5 and drops :m (the metrics now read the window's minute
** hashes); its tasks stay, and the lease and a windowed metric work.
*/
static void test_upgrade_from_4(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_metrics *m = NULL;
	bool held = false;
	due_id id = add(db, "k", 0, 5);
	char meta[200], old[200];

	due_close(db);
	snprintf(meta, sizeof(meta), "%s", tu_rd_key("meta"));
	snprintf(old, sizeof(old), "%s", tu_rd_key("m"));
	cmd_ok("HSET %s schema_version 4", meta);
	cmd_ok("HSET %s out:DONE 12345", old);
	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	due_close(db);	  /* a failed open may still hand out a handle */
	oo.create = true; /* what `due init` does */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(cmd_int("HGET %s schema_version", meta),
			 DUE_SCHEMA_VERSION);
	assert_int_equal(cmd_int("EXISTS %s", old), 0);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	claim_one(db, id, LONG_LEASE);
	assert_int_equal(due__lock_take(db, &held, "prune", "a", 60000000), 0);
	assert_true(held);
	assert_int_equal(due__lock_take(db, &held, "prune", "b", 60000000), 0);
	assert_false(held);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 0);
	assert_int_equal(m->outcomes[DUE_OUT_RUNNING], 1);
	assert_int_equal(m->lateness.count, 1);
	due_metrics_free(m);
	due_close(db);
}

/* due_open_opts.progress of the layout test: the steps it reports */
static void count_steps(const char *what, int64_t done, int64_t total,
			void *payload)
{
	(void)total;
	if (strstr(what, "layout"))
		*(int64_t *)payload = done + 1;
}

/* The ids of `st` in id order, every page of due_list. */
static size_t ids_of(due_db *db, due_state st, due_id *out, size_t max)
{
	due_list_opts o = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t n = 0;

	o.state = st;
	o.limit = 1000;
	for (;;) {
		assert_int_equal(due_list(db, &l, &o), 0);
		for (size_t i = 0; i < l->count && n < max; i++) {
			assert_int_equal(l->items[i].state, st);
			out[n++] = l->items[i].id;
		}
		size_t got = l->count;
		if (got)
			o.after = l->items[got - 1].id;
		due_task_list_free(l);
		if (got < (size_t)o.limit)
			return n;
	}
}

/*
** Layout 3 -> 4 (issue 39): the per-state sorted sets :st:<STATE> became
** bitmaps, and :due and :dkinds gave way to the kinds' heads (:dh).  A
** store written by layout 3 (made here from a layout 4 store: the same
** ids in the state sets, every scheduled task in :due, the kinds in
** :dkinds, no bitmap, no :dh, layout '3' in :meta) is refused until `due
** init`, which moves 20,000 ids a step (27,004 here: two steps, the
** first reported as progress); then every state lists the same ids in
** id order, the counts agree and the tasks are claimed in the same
** order (a priority -5 task due later does not hold back those due).
*/
static void test_upgrade_layout_3(void **state)
{
	(void)state;
	enum { BULK = 9000, NB = 3 * BULK };
	due_db *db = open_db();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_complete_outcome co;
	due_cancel_outcome cco;
	due_state ks;
	due_stats st;
	int64_t steps = 0;
	static due_id got[NB + 10];
	due_id d = add(db, "k", 0, 5);

	assert_int_equal(
	    due_complete(db, &co, d, claim_one(db, d, LONG_LEASE), "r", 1), 0);
	due_id c = add(db, "k", 3600000000LL, 5);
	assert_int_equal(due_cancel(db, &cco, c), 0);
	due_id x = add(db, "k", 3600000000LL, 5);
	assert_int_equal(due_kill(db, &ks, x), 0);
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_submitted sub;
	so.priority = -5;
	so.delay_us = 3600000000LL;
	assert_int_equal(due_schedule(db, &sub, "later", "p", 1, &so), 0);
	due_id run = add(db, "run", 0, 5);
	claim_one(db, run, 1000000); /* a worker of layout 3 at work */
	due_id first = add_many(db, "bulk", NULL, BULK);
	add_many(db, "bulk", NULL, BULK);
	add_many(db, "bulk", NULL, BULK);
	due_close(db);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("dh")), 2);

	/* layout 3: the same ids in :st:<STATE>, no bitmap; every scheduled
	   task in :due, the kinds with any in :dkinds, no heads (:dh) */
	redisContext *rc = tu_redis_connect();
	assert_non_null(rc);
	freeReplyObject(redisCommand(
	    rc, "EVAL %s 3 %s %s %s %s",
	    "for _, h in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do "
	    "local kind = string.sub(h, 19) "
	    "redis.call('ZADD', KEYS[3], 0, kind) "
	    "for _, m in ipairs(redis.call('ZRANGE', ARGV[1] .. kind, 0, -1)) "
	    "do redis.call('ZADD', KEYS[2], 0, m) end end "
	    "redis.call('DEL', KEYS[1])",
	    tu_rd_key("dh"), tu_rd_key("due"), tu_rd_key("dkinds"),
	    tu_rd_key("dk:")));
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("due")), NB + 1);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("dkinds")), 2);
	static const char *const sts[] = {"SCHEDULED", "DONE", "CANCELLED",
					  "DEAD"};
	for (int i = 0; i < 4; i++) {
		char sc[160], sb[160];
		snprintf(sc, sizeof(sc), "%s", tu_rd_key("sc:%s", sts[i]));
		snprintf(sb, sizeof(sb), "%s", tu_rd_key("sb:%s:", sts[i]));
		freeReplyObject(redisCommand(
		    rc, "EVAL %s 1 %s %s %s",
		    "for _, c in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) "
		    "do local s = redis.call('GET', ARGV[1] .. c) or '' "
		    "for i = 1, math.min(#s, 128) do local b = string.byte(s, "
		    "i) "
		    "for j = 0, 7 do if bit.band(b, bit.rshift(128, j)) ~= 0 "
		    "then local id = c * 1024 + (i - 1) * 8 + j "
		    "redis.call('ZADD', ARGV[2], id, id) end end end "
		    "redis.call('DEL', ARGV[1] .. c) end "
		    "redis.call('DEL', KEYS[1])",
		    sc, sb, tu_rd_key("st:%s", sts[i])));
		assert_int_equal(tu_rd("EXISTS %s", sc), 0);
	}
	redisFree(rc);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("st:SCHEDULED")), NB + 1);
	assert_int_equal(
	    tu_rd("ZSCORE %s %lld", tu_rd_key("st:DONE"), (long long)d), d);
	cmd_ok("HSET %s layout 3", tu_rd_key("meta"));

	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "due init"));
	due_close(db);
	oo.create = true; /* what `due init` does */
	oo.progress = count_steps;
	oo.progress_payload = &steps;
	/* refused while the earlier build's try runs under its lease: that
	   worker would go on writing layout 3's indexes */
	assert_int_equal(due_open(&db, url, &oo), DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "1 task(s) run under live"));
	due_close(db);
	assert_int_equal(tu_rd("HGET %s layout", tu_rd_key("meta")), 3);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("due")), NB + 1);
	usleep(1100000); /* its lease ends */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(steps, 1); /* 20,000 moved, more left; the 2nd ends */
	assert_int_equal(tu_rd("HGET %s layout", tu_rd_key("meta")), 5);
	for (int i = 0; i < 4; i++)
		assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("st:%s", sts[i])),
				 0);
	assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("due")), 0);
	assert_int_equal(tu_rd("EXISTS %s", tu_rd_key("dkinds")), 0);
	assert_int_equal(tu_rd("ZCARD %s", tu_rd_key("dh")), 2);
	assert_int_equal(ids_of(db, DUE_SCHEDULED, got, NB + 10), NB + 1);
	assert_int_equal(got[0], sub.id);
	for (int i = 0; i < NB; i++)
		assert_int_equal(got[i + 1], first + i);
	assert_int_equal(ids_of(db, DUE_DONE, got, 10), 1);
	assert_int_equal(got[0], d);
	assert_int_equal(ids_of(db, DUE_CANCELLED, got, 10), 1);
	assert_int_equal(got[0], c);
	assert_int_equal(ids_of(db, DUE_DEAD, got, 10), 1);
	assert_int_equal(got[0], x);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_SCHEDULED], NB + 1);
	assert_int_equal(st.due_unclaimed, NB);
	assert_int_equal(st.counts[DUE_DONE], 1);
	assert_int_equal(st.counts[DUE_CANCELLED], 1);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	/* the tasks move on as before: the first claimed leaves the bitmap */
	due_task_list *l = NULL;
	assert_int_equal(due_claim(db, &l, "w1", NULL, 0, 1, LONG_LEASE), 0);
	assert_int_equal(l->count, 1);
	assert_int_equal(l->items[0].id, first);
	due_task_list_free(l);
	assert_int_equal(ids_of(db, DUE_SCHEDULED, got, NB + 10), NB);
	assert_int_equal(got[1], first + 1);
	due_close(db);
}

/*
** A try's attempt record is written when it ends; while it runs the task
** hash holds it (owner, claim time 'n', due_at) and due_get shows it
** RUNNING.  A try that ends DONE writes none (layout 5): the task hash
** keeps owner, claim time and due_at, its updated_at is the end, and
** due_get shows the DONE record from it, with no lease on the task.  A
** try claimed by the earlier build wrote its record at the claim and has
** no 'n': finished by this build, that record is ended, once, with the
** outcome and the metrics as before.
*/
static void test_attempt_written_at_end(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_task *t;
	due_complete_outcome co;
	due_metrics *m = NULL;
	due_id id = add(db, "k", 0, 5), old;
	char ak[200], tk[200];

	claim_one(db, id, LONG_LEASE);
	snprintf(ak, sizeof(ak), "%s", tu_rd_key("a:%lld", (long long)id));
	snprintf(tk, sizeof(tk), "%s", tu_rd_key("t:%lld", (long long)id));
	assert_int_equal(cmd_int("EXISTS %s", ak), 0);
	t = get(db, id);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "RUNNING");
	assert_string_equal(t->attempts[0].worker, "w1");
	assert_true(t->attempts[0].claimed_at > 0);
	assert_int_equal(t->attempts[0].ended_at, 0);
	due_task_free(t);
	assert_int_equal(due_complete(db, &co, id, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	assert_int_equal(cmd_int("EXISTS %s", ak), 0);
	assert_int_equal(cmd_int("HEXISTS %s n", tk), 1);
	t = get(db, id);
	assert_int_equal(t->state, DUE_DONE);
	assert_null(t->lease_owner);
	assert_int_equal(t->lease_until, 0);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_string_equal(t->attempts[0].worker, "w1");
	assert_true(t->attempts[0].ended_at >= t->attempts[0].claimed_at);
	assert_int_equal(t->attempts[0].ended_at, t->updated_at);
	assert_null(t->attempts[0].late_commit);
	due_task_free(t);
	/* a late completion of that try is refused and marked on it */
	assert_int_equal(due_complete(db, &co, id, 1, "again", 5), 0);
	assert_int_equal(co, DUE_COMPLETE_REJECTED_STALE);
	t = get(db, id);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_non_null(t->attempts[0].late_commit);
	assert_string_equal(t->attempts[0].late_commit, "REJECTED_STALE");
	assert_int_equal(t->result_len, 1);
	assert_memory_equal(t->result, "r", 1);
	due_task_free(t);

	/* the earlier layout's running try: record at the claim, no 'n' */
	old = add(db, "k", 0, 5);
	claim_one(db, old, LONG_LEASE);
	snprintf(ak, sizeof(ak), "%s", tu_rd_key("a:%lld", (long long)old));
	snprintf(tk, sizeof(tk), "%s", tu_rd_key("t:%lld", (long long)old));
	cmd_ok("HDEL %s n", tk);
	cmd_ok("HSET %s 1:worker earlier 1:claimed_at 1000 1:due_at 900 "
	       "1:outcome RUNNING",
	       ak);
	assert_int_equal(due_complete(db, &co, old, 1, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	t = get(db, old);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_string_equal(t->attempts[0].worker, "earlier");
	assert_int_equal(t->attempts[0].claimed_at, 1000);
	assert_true(t->attempts[0].ended_at > 1000);
	due_task_free(t);
	/* the first try is in the window; the earlier one's minute is not */
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 1);
	due_metrics_free(m);
	due_close(db);
}

/*
** Layout 4 -> 5: a DONE try's record stays in its task hash.  A store of
** layout 4 (its DONE tasks without owner, lease or claim time in the
** hash, their records in :a:<id>; made here from a layout 5 store) is
** refused until `due init`, which only records layout 5.  Then both
** kinds of DONE task show their history, and prune takes both with it
** and takes their tries out of the metrics.
*/
static void test_upgrade_layout_4(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_schedule_opts so = DUE_SCHEDULE_OPTS_INIT;
	due_submitted sub;
	due_complete_outcome co;
	due_fail_outcome fo;
	due_metrics *m = NULL;
	due_task *t;
	int64_t pruned = 0;
	char tk[200], ak[200];

	/* two tries: the first failed (its record), the second DONE */
	so.backoff_us = 1;
	assert_int_equal(due_schedule(db, &sub, "k", "p", 1, &so), 0);
	due_id two = sub.id;
	claim_one(db, two, LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, two, 1, "boom"), 0);
	usleep(20000);
	assert_int_equal(claim_one(db, two, LONG_LEASE), 2);
	assert_int_equal(due_complete(db, &co, two, 2, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);

	/* a DONE task as layout 4 left it */
	due_id old = add(db, "k", 0, 5);
	claim_one(db, old, LONG_LEASE);
	assert_int_equal(due_complete(db, &co, old, 1, "r", 1), 0);
	snprintf(tk, sizeof(tk), "%s", tu_rd_key("t:%lld", (long long)old));
	snprintf(ak, sizeof(ak), "%s", tu_rd_key("a:%lld", (long long)old));
	redisContext *rc = tu_redis_connect();
	assert_non_null(rc);
	freeReplyObject(redisCommand(
	    rc, "EVAL %s 2 %s %s",
	    "local v = redis.call('HMGET', KEYS[1], 'w', 'n', 'd', 'u') "
	    "redis.call('HSET', KEYS[2], '1:worker', v[1], '1:claimed_at', "
	    "v[2], '1:due_at', v[3], '1:ended_at', v[4], '1:outcome', "
	    "'DONE') redis.call('HDEL', KEYS[1], 'w', 'l', 'n')",
	    tk, ak));
	redisFree(rc);
	assert_int_equal(cmd_int("HEXISTS %s n", tk), 0);
	due_id run = add(db, "run", 0, 5);
	claim_one(db, run, 1000000); /* a worker of layout 4 at work */
	cmd_ok("HSET %s layout 4", tu_rd_key("meta"));
	due_close(db);

	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	assert_non_null(strstr(due_error_last(), "run `due init`"));
	assert_non_null(strstr(due_error_last(), "stop every process"));
	due_close(db);
	assert_int_equal(tu_rd("HGET %s layout", tu_rd_key("meta")), 4);
	oo.create = true; /* what `due init` does */
	/* refused while the earlier build's try runs under its lease */
	assert_int_equal(due_open(&db, url, &oo), DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "1 task(s) run under live"));
	due_close(db);
	assert_int_equal(tu_rd("HGET %s layout", tu_rd_key("meta")), 4);
	usleep(1100000); /* its lease ends */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(tu_rd("HGET %s layout", tu_rd_key("meta")), 5);

	t = get(db, two);
	assert_int_equal(t->state, DUE_DONE);
	assert_null(t->lease_owner);
	assert_null(t->last_error);
	assert_int_equal(t->n_attempts, 2);
	assert_string_equal(t->attempts[0].outcome, "FAILED");
	assert_string_equal(t->attempts[0].error, "boom");
	assert_string_equal(t->attempts[1].outcome, "DONE");
	assert_string_equal(t->attempts[1].worker, "w1");
	assert_int_equal(t->attempts[1].ended_at, t->updated_at);
	assert_true(t->attempts[1].claimed_at >= t->attempts[0].ended_at);
	due_task_free(t);
	t = get(db, old);
	assert_int_equal(t->state, DUE_DONE);
	assert_null(t->lease_owner);
	assert_int_equal(t->n_attempts, 1);
	assert_string_equal(t->attempts[0].outcome, "DONE");
	assert_string_equal(t->attempts[0].worker, "w1");
	assert_int_equal(t->attempts[0].ended_at, t->updated_at);
	due_task_free(t);

	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 2);
	assert_int_equal(m->outcomes[DUE_OUT_FAILED], 1);
	due_metrics_free(m);
	assert_int_equal(due_prune(db, &pruned, 0), 0);
	assert_int_equal(pruned, 2);
	assert_int_equal(due_get(db, &t, two), DUE_ENOTFOUND);
	assert_int_equal(cmd_int("EXISTS %s", ak), 0);
	assert_int_equal(due_metrics_get(db, &m), 0);
	assert_int_equal(m->outcomes[DUE_OUT_DONE], 0);
	assert_int_equal(m->outcomes[DUE_OUT_FAILED], 0);
	due_metrics_free(m);
	due_close(db);
}

/*
** A completion call over shards where one shard fails (here the ACL of
** the store's user stops covering that shard's keys) still writes the
** other shards' completions, and the call's retry hears them DONE, as
** they were written: from the handle's memory of the failed call, not
** sent again, which would answer REJECTED_STALE for a kept result.
*/
static void test_shard_partial_complete(void **state)
{
	const char *user = "due_test_partial";
	char pre[96], u[800], b[700];
	due_db *db = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_task_list *l = NULL;
	due_completion c[3];
	due_task *t = NULL;

	(void)state;
	snprintf(pre, sizeof(pre), "%sp", tu_redis_prefix);
	cmd_ok("ACL SETUSER %s on >pw ~* &* +@all", user);
	with_prefix(b, sizeof(b), pre, "&shards=3");
	snprintf(u, sizeof(u), "redis://%s:pw@%s", user,
		 b + strlen("redis://"));
	oo.create = true;
	assert_int_equal(due_open(&db, u, &oo), 0);
	for (int i = 0; i < 3; i++) /* one a shard: one handle, in turn */
		add(db, "p", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 3, LONG_LEASE), 0);
	assert_int_equal(l->count, 3);
	for (size_t i = 0; i < 3; i++)
		c[i] = (due_completion){l->items[i].id, l->items[i].attempt,
					"r", 1, DUE_COMPLETE_REJECTED_STALE};
	/* the shard of c[1] out of the user's keys */
	redisReply *r =
	    cmd("ACL SETUSER %s resetkeys ~{due:%s:%d}* "
		"~{due:%s:%d}*",
		user, pre, (int)(c[0].id % 3), pre, (int)(c[2].id % 3));
	assert_non_null(r);
	assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
	freeReplyObject(r);
	assert_true(due_complete_batch(db, c, 3) < 0);
	assert_int_equal(due_get(db, &t, c[0].id), 0); /* written */
	assert_int_equal(t->state, DUE_DONE);
	due_task_free(t);
	cmd_ok("ACL SETUSER %s ~*", user);
	assert_int_equal(due_get(db, &t, c[1].id), 0); /* not written */
	assert_int_equal(t->state, DUE_CLAIMED);
	due_task_free(t);
	assert_int_equal(due_complete_batch(db, c, 3), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(c[i].outcome, DUE_COMPLETE_DONE);
	/* answered once: a second retry of the same tries is late */
	assert_int_equal(due_complete_batch(db, c, 1), 0);
	assert_int_equal(c[0].outcome, DUE_COMPLETE_REJECTED_STALE);
	due_task_list_free(l);
	due_close(db);
	cmd_ok("ACL DELUSER %s", user);
	tu_redis_delete(pre);
}

/* ------------------------------------------------------------------ */
/* A frozen path (issue 35): no call waits longer than its bound       */
/* ------------------------------------------------------------------ */

/* The proxy of the running test, stopped by its teardown (stall_down). */
static pid_t proxy_pid;

/*
** tests/cli/stallproxy.py in front of the test server: its pid and, in
** *port, where it listens.  SIGSTOP freezes the path (a partition: the
** kernel still accepts connections into its backlog), SIGCONT thaws it.
*/
static pid_t proxy_start(int *port)
{
	const char *slash = strrchr(__FILE__, '/');
	char py[1024], pf[64], hp[160], *target;
	pid_t pid;

	test_server(hp, sizeof(hp));
	assert_non_null(target = strrchr(hp, ':'));
	target++;
	snprintf(py, sizeof(py), "%.*s/../cli/stallproxy.py",
		 (int)(slash ? slash - __FILE__ : 1), slash ? __FILE__ : ".");
	snprintf(pf, sizeof(pf), "/tmp/due-stallproxy-%d", (int)getpid());
	unlink(pf);
	if ((pid = fork()) == 0) {
		int null = open("/dev/null", O_RDWR);
		dup2(null, 1); /* not the test's output: ctest waits for it */
		dup2(null, 2);
		execlp("python3", "python3", py, target, pf, (char *)NULL);
		_exit(127);
	}
	assert_true(pid > 0);
	proxy_pid = pid;
	for (int i = 0; i < 400; i++) { /* its port file, within 20 s */
		FILE *f = fopen(pf, "r");
		int ok = f && fscanf(f, "%d", port) == 1;
		if (f)
			fclose(f);
		if (ok) {
			unlink(pf);
			return pid;
		}
		tu_sleep_ms(50);
	}
	kill(pid, SIGKILL);
	fail_msg("%s did not start", py);
	return 0;
}

/* The teardown of the tests with a proxy: stop it, even after a failure. */
static int stall_down(void **state)
{
	if (proxy_pid > 0) {
		/* SIGKILL: a Python proxy's SIGTERM handler runs only when
		   the main thread wakes, which accept() may never do */
		kill(proxy_pid, SIGKILL);
		waitpid(proxy_pid, NULL, 0);
		proxy_pid = 0;
	}
	return teardown(state);
}

/* Prefix `name` through the proxy at port, with a bound of 1 s. */
static void stall_url(char *buf, size_t n, int port, const char *name,
		      const char *more)
{
	const char *db = strrchr(getenv("DUE_TEST_REDIS_URL"), '/');

	snprintf(buf, n, "redis://127.0.0.1:%d%s%sprefix=%s&timeout=1s%s", port,
		 db, strchr(db, '?') ? "&" : "?", name, more);
}

/*
** The call that began at t0 (due__mono_us) failed as a silent store
** does: DUE_ESTORE, exactly "no answer from the store at
** 127.0.0.1:PORT in 1 s", after the bound and well before twice it (it
** waited 60 s before issue 35).
*/
static void silent(const char *call, int rc, int64_t t0, int port)
{
	char want[128];
	int64_t ms = (due__mono_us() - t0) / 1000;

	snprintf(want, sizeof(want),
		 "no answer from the store at 127.0.0.1:%d in 1 s", port);
	if (rc != DUE_ESTORE || strcmp(due_error_last(), want) != 0)
		fail_msg("%s: %d, %s", call, rc, rc ? due_error_last() : "");
	if (ms < 950 || ms > 1900)
		fail_msg("%s gave up after %lld ms, the bound is 1000", call,
			 (long long)ms);
}

/*
** A frozen path (stallproxy.py stopped): a call on an open handle, its
** reconnect, a listener's SUBSCRIBE and an open each give up at the
** bound (timeout=1s) with "no answer from the store at HOST:PORT in 1 s"
** naming the node addressed; thawed, the same handle works again.  The
** submit sent into the frozen path may run when it thaws (the proxy
** delivers it): the unknown outcome of any call whose answer was lost.
*/
static void test_stall_bounded(void **state)
{
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL, *late = NULL;
	due_submitted sub;
	due_task *t = NULL;
	char u[700];
	int port, fd;
	pid_t px = proxy_start(&port);
	due_id id;
	int64_t t0;

	(void)state;
	stall_url(u, sizeof(u), port, tu_redis_prefix, "");
	oo.create = true;
	if (due_open(&db, u, &oo) < 0)
		fail_msg("open %s: %s", u, due_error_last());
	id = add(db, "k", 0, 5);
	kill(px, SIGSTOP);
	t0 = due__mono_us();
	silent("schedule", due_schedule(db, &sub, "k", "p", 1, NULL), t0, port);
	t0 = due__mono_us(); /* connects again: the backlog takes it */
	silent("get", due_get(db, &t, id), t0, port);
	t0 = due__mono_us();
	silent("listen", due_listen(db, &fd), t0, port);
	t0 = due__mono_us();
	silent("open", due_open(&late, u, NULL), t0, port);
	due_close(late);
	kill(px, SIGCONT);
	assert_int_equal(state_of(db, id), DUE_SCHEDULED);
	assert_int_equal(due_listen(db, &fd), 0);
	due_close(db);
}

/*
** The same on ?shards=4 of one server, every shard behind the frozen
** path: a claim and a completion, which ask every shard and go on past
** one that failed, give up within one bound, not four (no other shard of
** a node that gave no answer is asked in the same call).  Thawed, the
** completion is sent again and every task ends DONE (a shard's
** completion sent into the frozen path may have run after all: that
** item answers REJECTED_STALE, as for any lost answer).
*/
static void test_stall_shards(void **state)
{
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_task_list *l = NULL, *none = NULL;
	due_completion c[4];
	due_db *db = NULL;
	char u[700], pre[96];
	int port;
	pid_t px = proxy_start(&port);
	int64_t t0;

	(void)state;
	snprintf(pre, sizeof(pre), "%ss", tu_redis_prefix);
	stall_url(u, sizeof(u), port, pre, "&shards=4");
	oo.create = true;
	if (due_open(&db, u, &oo) < 0)
		fail_msg("open %s: %s", u, due_error_last());
	for (int i = 0; i < 4; i++) /* one a shard: one handle, in turn */
		add(db, "k", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, 4, LONG_LEASE), 0);
	assert_int_equal(l->count, 4);
	for (size_t i = 0; i < 4; i++)
		c[i] = (due_completion){l->items[i].id, l->items[i].attempt,
					"r", 1, DUE_COMPLETE_REJECTED_STALE};
	kill(px, SIGSTOP);
	t0 = due__mono_us();
	silent("claim", due_claim(db, &none, "w", NULL, 0, 4, LONG_LEASE), t0,
	       port);
	assert_null(none);
	t0 = due__mono_us();
	silent("complete_batch", due_complete_batch(db, c, 4), t0, port);
	kill(px, SIGCONT);
	assert_int_equal(due_complete_batch(db, c, 4), 0);
	for (size_t i = 0; i < 4; i++) {
		assert_true(c[i].outcome == DUE_COMPLETE_DONE ||
			    c[i].outcome == DUE_COMPLETE_REJECTED_STALE);
		assert_int_equal(state_of(db, c[i].id), DUE_DONE);
	}
	due_task_list_free(l);
	due_close(db);
	for (int i = 0; i < 4; i++) {
		char p[128];
		snprintf(p, sizeof(p), "%s:%d", pre, i);
		tu_redis_delete(p);
	}
}

/*
** A node whose connect never completes (a full listen queue drops the
** SYN, as a host that is gone or cut off does): the open gives up at
** the bound, naming it.
*/
static void test_connect_bounded(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t n = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c[3];
	due_db *db = NULL;
	char u[200];
	int64_t t0;

	(void)state;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(l, 0), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&a, &n), 0);
	for (int i = 0; i < 3; i++) { /* the queue full, never accepted */
		c[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		(void)connect(c[i], (struct sockaddr *)&a, sizeof(a));
	}
	tu_sleep_ms(100);
	snprintf(u, sizeof(u), "redis://127.0.0.1:%d/0?prefix=x&timeout=1s",
		 ntohs(a.sin_port));
	t0 = due__mono_us();
	silent("open", due_open(&db, u, NULL), t0, ntohs(a.sin_port));
	due_close(db);
	for (int i = 0; i < 3; i++)
		close(c[i]);
	close(l);
}

/* ------------------------------------------------------------------ */
/* Run after (issue 38 point 3)                                        */
/* ------------------------------------------------------------------ */

#define HOUR_US 3600000000LL

/* A task of kind "c" after the n ids of `after` (any: after_any_end). */
static int after_try(due_db *db, due_id *id, const due_id *after, size_t n,
		     bool any)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s;
	int rc;

	o.after = after;
	o.n_after = n;
	o.after_any_end = any;
	if ((rc = due_schedule(db, &s, "c", "c", 1, &o)) == 0)
		*id = s.id;
	return rc;
}

static due_id after_of(due_db *db, const due_id *after, size_t n, bool any)
{
	due_id id = 0;
	assert_int_equal(after_try(db, &id, after, n, any), 0);
	return id;
}

/* Held: SCHEDULED, waiting for `left` parents, never due. */
static void held(due_db *db, due_id id, int32_t left)
{
	due_task *t = get(db, id);
	if (t->state != DUE_SCHEDULED || t->after_left != left ||
	    t->due_at != DUE_TIME_LAST)
		fail_msg("task %lld: %s, after_left %d, due_at %lld; want "
			 "held on %d",
			 (long long)id, due_state_name(t->state),
			 (int)t->after_left, (long long)t->due_at, (int)left);
	due_task_free(t);
}

static void released(due_db *db, due_id id)
{
	due_task *t = get(db, id);
	if (t->state != DUE_SCHEDULED || t->after_left != 0 ||
	    t->due_at == DUE_TIME_LAST)
		fail_msg("task %lld: %s, after_left %d; want released",
			 (long long)id, due_state_name(t->state),
			 (int)t->after_left);
	due_task_free(t);
}

/* CANCELLED, its last_error naming `parent`. */
static void cancelled_by(due_db *db, due_id id, due_id parent)
{
	char want[64];
	due_task *t = get(db, id);
	snprintf(want, sizeof(want), "parent task %lld ended",
		 (long long)parent);
	if (t->state != DUE_CANCELLED || !t->last_error ||
	    !strstr(t->last_error, want))
		fail_msg("task %lld: %s, '%s'; want CANCELLED by %lld",
			 (long long)id, due_state_name(t->state),
			 t->last_error ? t->last_error : "", (long long)parent);
	due_task_free(t);
}

/* Claim task id (which must be due) and complete it: DONE. */
static void done_by(due_db *db, due_id id)
{
	due_task *t = NULL;
	due_complete_outcome co;
	assert_int_equal(due_claim_id(db, &t, id, "w", LONG_LEASE), 0);
	assert_int_equal(due_complete(db, &co, id, t->attempt, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	due_task_free(t);
}

/*
** Schema 10 -> 11: a prefix at version 10 is refused until `due init`,
** which records 11 and writes nothing else; its tasks read as added
** after no parent (no field: 0), and one of them can be a parent.
*/
static void test_after_upgrade_from_10(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_id p = add(db, "p", 0, 5);
	char meta[200];

	due_close(db);
	snprintf(meta, sizeof(meta), "%s", tu_rd_key("meta"));
	cmd_ok("HSET %s schema_version 10", meta);
	assert_int_equal(due_open(&db, url, &oo), DUE_ESCHEMA);
	due_close(db);
	oo.create = true; /* what `due init` does */
	assert_int_equal(due_open(&db, url, &oo), 0);
	assert_int_equal(cmd_int("HGET %s schema_version", meta), 11);
	due_task *t = get(db, p);
	assert_int_equal(t->after_n, 0);
	assert_int_equal(t->after_left, 0);
	assert_false(t->after_any_end);
	assert_null(t->after);
	due_task_free(t);
	due_id c = after_of(db, &p, 1, false);
	held(db, c, 1);
	done_by(db, p);
	released(db, c);
	due_close(db);
}

/*
** A chain of 1,000 (each after the one before) is cancelled in one
** script when its first task dies (a queue, not a recursion: no Lua
** stack or C-call limit), every link naming the one before it, and the
** per-state counters stay exact (stats).
*/
static void test_after_chain_1000_cancelled(void **state)
{
	(void)state;
	due_db *db = open_db();
	due_fail_outcome fo;
	due_stats st;
	enum { N = 1000 };
	static due_id chain[N + 1];

	chain[0] = add(db, "p", 0, 1);
	for (int i = 1; i <= N; i++)
		chain[i] = after_of(db, &chain[i - 1], 1, false);
	held(db, chain[N], 1);
	int32_t a = claim_one(db, chain[0], LONG_LEASE);
	assert_int_equal(due_fail(db, &fo, chain[0], a, "boom"), 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	cancelled_by(db, chain[1], chain[0]);
	cancelled_by(db, chain[N / 2], chain[N / 2 - 1]);
	cancelled_by(db, chain[N], chain[N - 1]);
	assert_int_equal(due_stats_get(db, &st), 0);
	assert_int_equal(st.counts[DUE_CANCELLED], N);
	assert_int_equal(st.counts[DUE_SCHEDULED], 0);
	assert_int_equal(st.counts[DUE_DEAD], 1);
	due_close(db);
}

/* The sharded store of the run-after tests: its prefix and two URLs. */
static char ash_pre[96];
static const char *ash_user = "due_test_after";

static void ash_urls(char *adm, char *lim, size_t n)
{
	snprintf(ash_pre, sizeof(ash_pre), "%sa", tu_redis_prefix);
	with_prefix(adm, n, ash_pre, "&shards=2");
	assert_true((size_t)snprintf(lim, n, "redis://%s:pw@%.600s", ash_user,
				     adm + strlen("redis://")) < n);
}

/* A task of kind "p", due now, in `shard` of 2 (others cancelled). */
static due_id add_on(due_db *db, int shard, int max_attempts)
{
	due_cancel_outcome co;
	for (;;) {
		due_id id = add(db, "p", 0, max_attempts);
		if (id % 2 == shard)
			return id;
		assert_int_equal(due_cancel(db, &co, id), 0);
	}
}

/*
** A child after `after` in `shard` of 2 (others cancelled): a submit that
** fails (a shard the user may not write) is tried again, at the next
** shard in turn.
*/
static due_id child_on(due_db *db, int shard, const due_id *after, size_t n)
{
	due_cancel_outcome co;
	for (int tries = 0; tries < 10; tries++) {
		due_id id = 0;
		if (after_try(db, &id, after, n, false) < 0)
			continue;
		if (id % 2 == shard)
			return id;
		assert_int_equal(due_cancel(db, &co, id), 0);
	}
	fail_msg("no child in shard %d", shard);
	return 0;
}

static long long outbox_len(int shard)
{
	char key[160];
	snprintf(key, sizeof(key), "{due:%s:%d}:ob", ash_pre, shard);
	return cmd_int("LLEN %s", key);
}

/* Claim task id, due now; its attempt. */
static int32_t claim_id(due_db *db, due_id id)
{
	due_task *t = NULL;
	assert_int_equal(due_claim_id(db, &t, id, "w", LONG_LEASE), 0);
	int32_t a = t->attempt;
	due_task_free(t);
	return a;
}

static void forward_all(due_db *db)
{
	due_reclaimed rr;
	assert_int_equal(due_reclaim_expired(db, &rr), 0);
}

/* The test user's keys: one or two rules (NULL). */
static void acl(const char *r1, const char *r2)
{
	redisReply *r =
	    r2 ? cmd("ACL SETUSER %s resetkeys %s %s", ash_user, r1, r2)
	       : cmd("ACL SETUSER %s resetkeys %s", ash_user, r1);
	assert_non_null(r);
	assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
	freeReplyObject(r);
}

/*
** Sharded (?shards=2), a child in another shard than its parents: held,
** released by the parent's DONE in the same call (forwarded), cancelled
** down a chain that crosses shards, refused before anything is written
** for a missing or DEAD parent in the other shard (a batch over both
** shards too, whichever shard the missing parent is in); and the two crashes
** between steps, simulated by a user that may not write the other shard
** (its delivery fails, the call's own work is written), redone by a
** later reclaim (the workers' maintenance), never counted twice:
**   - the parent's end ("E" message) left in its shard's outbox, then
**     delivered, then delivered again by hand: counted once;
**   - the child's link ("L") left undelivered (a user refused SADD, the
**     link script's one write) while its parent ends: the reclaim's
**     forwarder links, hears DONE and releases it.
*/
static void test_after_shards(void **state)
{
	char adm_u[800], lim_u[800], msg[200];
	due_db *adm = NULL, *lim = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_fail_outcome fo;
	due_task *t = NULL;
	due_id c;

	(void)state;
	ash_urls(adm_u, lim_u, sizeof(adm_u));
	cmd_ok("ACL SETUSER %s on >pw ~* &* +@all", ash_user);
	oo.create = true;
	assert_int_equal(due_open(&adm, adm_u, &oo), 0);
	assert_int_equal(due_open(&lim, lim_u, NULL), 0);

	/* across shards: held, then released within the parent's call */
	due_id p = add_on(adm, 0, 5);
	c = child_on(adm, 1, &p, 1);
	held(adm, c, 1);
	t = get(adm, c);
	assert_non_null(t->after);
	assert_int_equal(t->after[0], p);
	due_task_free(t);
	done_by(adm, p);
	released(adm, c);
	assert_int_equal(outbox_len(0) + outbox_len(1), 0);

	/* refused: a missing parent in the other shard, a DEAD one */
	due_id live = add_on(adm, 0, 5), dead = add_on(adm, 1, 1);
	due_id missing[2] = {live, 999999999}; /* shard 1 */
	size_t before = 0;
	due_stats st;
	assert_int_equal(due_stats_get(adm, &st), 0);
	for (int k = 0; k < DUE_STATE_COUNT; k++)
		before += (size_t)st.counts[k];
	for (int i = 0; i < 2; i++) /* from each shard in turn */
		assert_int_equal(after_try(adm, &c, missing, 2, false),
				 DUE_ENOTFOUND);
	assert_non_null(strstr(due_error_last(), "999999999"));
	assert_int_equal(due_fail(adm, &fo, dead, claim_id(adm, dead), "boom"),
			 0);
	assert_int_equal(fo, DUE_FAIL_DEAD);
	for (int i = 0; i < 2; i++)
		assert_int_equal(after_try(adm, &c, &dead, 1, false),
				 DUE_ESTATE);
	assert_non_null(strstr(due_error_last(), "DEAD"));
	assert_int_equal(due_stats_get(adm, &st), 0);
	size_t now_n = 0;
	for (int k = 0; k < DUE_STATE_COUNT; k++)
		now_n += (size_t)st.counts[k];
	assert_int_equal(now_n, before); /* nothing written */

	/* a batch over both shards (keyed items: each to its key's shard),
	   its second item after a missing parent of its own shard (read by
	   that shard's script, which runs second): refused before the first
	   shard writes its part */
	{
		due_submit it[2];
		due_submitted got[2];
		char keys[2][16];
		int sh[2] = {-1, -1};
		for (int i = 0; sh[0] < 0 || sh[1] < 0; i++) {
			due_schedule_opts ko = DUE_SCHEDULE_OPTS_INIT;
			due_submitted ks;
			due_cancel_outcome kc;
			char k[16];
			snprintf(k, sizeof(k), "b%d", i);
			ko.key = k;
			assert_int_equal(
			    due_schedule(adm, &ks, "c", "b", 1, &ko), 0);
			assert_int_equal(due_cancel(adm, &kc, ks.id), 0);
			if (sh[ks.id % 2] < 0) {
				sh[ks.id % 2] = i;
				snprintf(keys[ks.id % 2], sizeof(keys[0]), "%s",
					 k);
			}
		}
		assert_int_equal(due_stats_get(adm, &st), 0);
		before = 0;
		for (int k = 0; k < DUE_STATE_COUNT; k++)
			before += (size_t)st.counts[k];
		due_id bad[2] = {live, 999999999}; /* shard 1's */
		for (int i = 0; i < 2; i++) {
			it[i] = (due_submit){
			    .kind = "c", .payload = "b", .payload_len = 1};
			it[i].opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
			it[i].opts.key = keys[i]; /* item i to shard i */
			it[i].opts.after = i == 1 ? bad : &live;
			it[i].opts.n_after = i == 1 ? 2 : 1;
		}
		assert_int_equal(due_schedule_batch(adm, got, it, 2),
				 DUE_ENOTFOUND);
		assert_int_equal(due_stats_get(adm, &st), 0);
		now_n = 0;
		for (int k = 0; k < DUE_STATE_COUNT; k++)
			now_n += (size_t)st.counts[k];
		assert_int_equal(now_n, before);
	}

	/* a DEAD parent cancels a chain crossing shards 0 -> 1 -> 0 -> 1 */
	due_id q = add_on(adm, 0, 1);
	due_id c1 = child_on(adm, 1, &q, 1);
	due_id c2 = child_on(adm, 0, &c1, 1);
	due_id c3 = child_on(adm, 1, &c2, 1);
	assert_int_equal(due_fail(adm, &fo, q, claim_id(adm, q), "boom"), 0);
	cancelled_by(adm, c1, q);
	cancelled_by(adm, c2, c1);
	cancelled_by(adm, c3, c2);

	/* "E": the end's delivery fails (shard 1 out of reach), redone by a
	   reclaim, then once more by hand: the child counts it once */
	due_id p1 = add_on(adm, 0, 5), p2 = add_on(adm, 0, 5);
	due_id two[2] = {p1, p2};
	c = child_on(adm, 1, two, 2);
	held(adm, c, 2);
	char rules[200];
	snprintf(rules, sizeof(rules), "~{due:%s:0}*", ash_pre);
	acl(rules, NULL);
	done_by(lim, p1); /* its DONE is written; the message waits */
	assert_int_equal(outbox_len(0), 1);
	held(adm, c, 2);
	redisReply *r = cmd("LINDEX {due:%s:0}:ob 0", ash_pre);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	snprintf(msg, sizeof(msg), "%s", r->str);
	freeReplyObject(r);
	acl("~*", NULL);
	forward_all(lim);
	assert_int_equal(outbox_len(0), 0);
	held(adm, c, 1);
	r = cmd("RPUSH {due:%s:0}:ob %s", ash_pre, msg);
	freeReplyObject(r);
	forward_all(adm);
	assert_int_equal(outbox_len(0), 0);
	held(adm, c, 1); /* not 0: p1 counted once */
	done_by(adm, p2);
	released(adm, c);

	/* "L": the link fails (shard 0 read-only), the parent ends before
	   it is made; the reclaim's forwarder links, hears DONE, releases */
	p = add_on(adm, 0, 5);
	due_task *pt = NULL;
	assert_int_equal(due_claim_id(adm, &pt, p, "w", LONG_LEASE), 0);
	acl("~*", "-sadd"); /* the link script's one write */
	c = child_on(lim, 1, &p, 1);
	held(adm, c, 1);
	assert_int_equal(outbox_len(1), 1);
	due_complete_outcome co;
	assert_int_equal(due_complete(adm, &co, p, pt->attempt, "r", 1), 0);
	assert_int_equal(co, DUE_COMPLETE_DONE);
	due_task_free(pt);
	held(adm, c, 1); /* the parent never saw the edge */
	acl("~*", "+sadd");
	forward_all(lim);
	assert_int_equal(outbox_len(1), 0);
	released(adm, c);

	due_close(lim);
	due_close(adm);
	cmd_ok("ACL DELUSER %s", ash_user);
	tu_redis_delete(ash_pre);
	snprintf(msg, sizeof(msg), "%s:0", ash_pre);
	tu_redis_delete(msg);
	snprintf(msg, sizeof(msg), "%s:1", ash_pre);
	tu_redis_delete(msg);
}

/* The race: children added while their parents complete, two handles. */
#define RACE_N 300
typedef struct race {
	char *u;
	due_id *parent, *child;
	int32_t *attempt;
} race;

static void *race_submit(void *arg)
{
	race *r = arg;
	due_db *db = NULL;
	if (due_open(&db, r->u, NULL) < 0)
		return NULL;
	for (int i = 0; i < RACE_N; i++) {
		if (i % 2 == 0) /* shift the turn: a child in its parent's
				   shard, then in the other, and so on */
			add(db, "x", HOUR_US, 5);
		if (after_try(db, &r->child[i], &r->parent[i], 1, false) < 0)
			r->child[i] = -1;
	}
	due_close(db);
	return NULL;
}

static void *race_complete(void *arg)
{
	race *r = arg;
	due_db *db = NULL;
	due_complete_outcome co;
	if (due_open(&db, r->u, NULL) < 0)
		return NULL;
	for (int i = 0; i < RACE_N; i++)
		if (due_complete(db, &co, r->parent[i], r->attempt[i], "r", 1) <
			0 ||
		    co != DUE_COMPLETE_DONE)
			r->attempt[i] = -1;
	due_close(db);
	return NULL;
}

/*
** The finish/insert race with real concurrent connections, sharded (a
** child and its parent in different shards half the time, where the
** submit reads the parent, inserts, then links): RACE_N running
** parents complete on one connection while their children are added on
** another; afterwards every child is released (none held on a parent
** that ended, none counted twice: after_left 0, not below), with no
** reclaim needed.
*/
static void test_after_race_shards(void **state)
{
	char adm_u[800], lim_u[800];
	due_db *db = NULL;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	static due_id parent[RACE_N], child[RACE_N];
	static int32_t attempt[RACE_N];
	race r = {adm_u, parent, child, attempt};
	pthread_t a, b;
	due_task_list *l = NULL;

	(void)state;
	ash_urls(adm_u, lim_u, sizeof(adm_u));
	oo.create = true;
	assert_int_equal(due_open(&db, adm_u, &oo), 0);
	for (int i = 0; i < RACE_N; i++)
		parent[i] = add(db, "p", 0, 5);
	assert_int_equal(due_claim(db, &l, "w", NULL, 0, RACE_N, LONG_LEASE),
			 0);
	assert_int_equal(l->count, RACE_N);
	for (size_t i = 0; i < l->count; i++)
		for (int k = 0; k < RACE_N; k++)
			if (parent[k] == l->items[i].id)
				attempt[k] = l->items[i].attempt;
	due_task_list_free(l);
	assert_int_equal(pthread_create(&a, NULL, race_submit, &r), 0);
	assert_int_equal(pthread_create(&b, NULL, race_complete, &r), 0);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	int cross = 0;
	for (int i = 0; i < RACE_N; i++) {
		assert_true(child[i] > 0);
		assert_true(attempt[i] > 0);
		released(db, child[i]);
		cross += child[i] % 2 != parent[i] % 2;
	}
	print_message("after race: %d children, %d in another shard than "
		      "their parent, all released\n",
		      RACE_N, cross);
	assert_true(cross > 0);
	due_close(db);
	tu_redis_delete(ash_pre);
	snprintf(adm_u, sizeof(adm_u), "%s:0", ash_pre);
	tu_redis_delete(adm_u);
	snprintf(adm_u, sizeof(adm_u), "%s:1", ash_pre);
	tu_redis_delete(adm_u);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_noscript_reload),
	    T(test_no_functions),
	    T(test_aof_refused),
	    T(test_fsync_warning),
	    T(test_one_hash_tag),
	    T(test_rediss_refused),
	    T(test_hook_unsupported),
	    T(test_refused_connection),
	    T(test_listen_wakes),
	    T(test_running_count_index),
	    T(test_group_scan_bounded),
	    T(test_list_kind_pages),
	    T(test_submit_all_or_none),
	    T(test_claimed_from_lease),
	    T(test_memory_per_task),
	    T(test_upgrade_from_4),
	    T(test_upgrade_layout_3),
	    T(test_state_chunks),
	    T(test_claim_order_many_kinds),
	    T(test_upcoming_backlog),
	    T(test_attempt_written_at_end),
	    T(test_upgrade_layout_4),
	    T(test_wait_options_refused),
	    T(test_seeds_not_cluster),
	    T(test_wait_unmet),
	    T(test_shards),
	    T(test_on_key_shards),
	    T(test_shard_partial_complete),
	    T(test_wait_unmet_complete),
	    T(test_no_probe_on_one_server),
	    cmocka_unit_test_setup_teardown(test_stall_bounded, setup,
					    stall_down),
	    cmocka_unit_test_setup_teardown(test_stall_shards, setup,
					    stall_down),
	    T(test_connect_bounded),
	    T(test_after_upgrade_from_10),
	    T(test_after_chain_1000_cancelled),
	    T(test_after_shards),
	    T(test_after_race_shards),
#undef T
	};
	if (tu_select_backend("redis") != 0)
		return tu_backend_check();
	return cmocka_run_group_tests_name("redis store", tests, NULL, NULL);
}

#else /* !DUE_WITH_REDIS */

int main(void)
{
	/* left out by the build option, not by a missing server: under
	   CI=true too (as test_mysql_store.c) */
	printf("NOTE: redis store suite not run: this build has no Redis "
	       "(-DDUE_WITH_REDIS=OFF)\n");
	return 0;
}

#endif
