/*
** redis_shard.c - a Redis store over N shards (?shards=N, issue 23).
**
** The backend registered as "redis".  It runs one redis.c store (one
** prefix, one hash slot) per shard: shard i of store NAME keeps its keys
** under {due:NAME:i}, so on a Redis Cluster the shards' slots spread over
** the masters by CRC16.  With one shard (no ?shards=, the default) every
** call goes straight to that store under {due:NAME}, as before.
**
** What holds across shards, and what is per shard (docs/internals/redis.md
** "Sharding"):
**   - A task lives in one shard for its whole life.  Its id is seq * N + i
**     (redis_lua.c new_id), so every call about one task (get, cancel,
**     extend, complete, fail, retry, requeue, kill) goes to shard id mod N
**     with no lookup.  N is fixed when the store is made; another N is
**     refused (each shard's meta records it).
**   - Submit: an item with a key goes to the shard of hash(kind, key), so
**     the (kind, key) uniqueness of that shard is the store's and a retried
**     submit finds its task.  So on_key (issue 38) is one shard's script
**     too: the live holder of the key is in that shard, and its move, or
**     its giving up the key to a new task made there, is atomic
**     (lua/task.lua submit_one).  (Not a schedule's slot task, key
**     cron:NAME:SLOT, made in shard 0: a user's submit of that key goes
**     to its hash's shard and does not find it, under any on_key.)  An
**     item of a kind with a limit goes to shard 0.  Other items go, a
**     whole call at a time, to the next shard in turn: a batch without
**     keys stays one script (all or none).  A batch
**     over several shards is one script per shard: all or none per shard,
**     not for the batch.
**   - Claim: each call starts at the next shard in turn and asks each
**     shard for what is still wanted, so every shard is drained and none
**     waits for another to empty.  Order (priority, then due time) is
**     strict within a shard; across shards a claim takes the best of the
**     shard it asks first.
**   - Kind settings are written to every shard.  Pause and time limits
**     hold everywhere; max-running, max-running-per-group and rate are
**     enforced by each shard's script on its own tasks, and a limited
**     kind's tasks are in shard 0 (but those added before the limit was
**     set, and keyed ones, which stay where they are: limited per shard).
**   - Schedules (cron), the tasks they fire, worker reports and named
**     locks live in shard 0.  list, stats, metrics, upcoming, reclaim,
**     prune and bytes ask every shard and merge.  Wake-ups use one channel
**     for the store (PUBLISH reaches every node of a cluster).
**   - Waits: each shard's call keeps to the store's bound (redis.c,
**     "Waits").  A call that stops at the first failed shard ends within
**     it; one that goes on past a failed shard (claim, complete,
**     reclaim) asks no shard of a node that gave no answer in the same
**     call (quiet): on one frozen server it ends in one bound, not one a
**     shard.  A cluster whose M masters are all silent costs M bounds.
*/
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "base/base.h"
#include "store/redis_shard.h"
#include "store/row.h"

#define SLOT (&due__store_redis_slot)
#define RD_NODE_MAX 65 /* shards at most 64, and a scratch entry */

typedef struct sh_cfg {
	void *one;   /* the URL as redis.c parsed it */
	void **part; /* per shard: the same, with its index */
	int n;
} sh_cfg;

/* Kinds with a limit (max-running, per group, rate), as last read. */
#define LIMITED_TTL_US 1000000
typedef struct limited {
	char **kind;
	size_t n;
	int64_t read_at; /* monotonic us; 0: never read */
} limited;

struct due_store {
	due_store **sh; /* n stores of redis.c */
	int n;
	unsigned submit_rr, claim_rr;
	limited lim;
	void *other;	    /* the other layout's cfg (other_layout) */
	int64_t timeout_us; /* the bound of every wait (due_open_params) */
};

/* ------------------------------------------------------------------ */
/* URL, open, close, schema                                            */
/* ------------------------------------------------------------------ */

static void sh_free_cfg(void *cfg)
{
	sh_cfg *c = cfg;

	if (!c)
		return;
	for (int i = 0; c->part && i < c->n; i++)
		SLOT->free_cfg(c->part[i]);
	free(c->part);
	SLOT->free_cfg(c->one);
	free(c);
}

static int sh_parse_url(void **cfg, const due_url *url)
{
	sh_cfg *c = calloc(1, sizeof(*c));
	int rc;

	*cfg = c;
	if (!c)
		return due__error_set(DUE_ENOMEM, "out of memory");
	if ((rc = SLOT->parse_url(&c->one, url)) < 0)
		goto fail;
	c->n = due__redis_shards(c->one);
	if (!(c->part = calloc((size_t)c->n, sizeof(*c->part)))) {
		rc = due__error_set(DUE_ENOMEM, "out of memory");
		goto fail;
	}
	for (int i = 0; i < c->n; i++)
		if ((rc = due__redis_shard_cfg(&c->part[i], c->one, 0, i)) < 0)
			goto fail;
	return 0;
fail:
	sh_free_cfg(c);
	*cfg = NULL;
	return rc;
}

static void limited_clear(limited *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->kind[i]);
	free(l->kind);
	memset(l, 0, sizeof(*l));
}

static void sh_close(due_store *s)
{
	if (!s)
		return;
	limited_clear(&s->lim);
	SLOT->free_cfg(s->other);
	for (int i = 0; s->sh && i < s->n; i++)
		SLOT->close(s->sh[i]);
	free(s->sh);
	free(s);
}

static int sh_open(due_store **out, const void *cfg, const due_open_params *p)
{
	const sh_cfg *c = cfg;
	due_store *s = calloc(1, sizeof(*s));
	int rc;

	*out = s;
	if (!s || !(s->sh = calloc((size_t)c->n, sizeof(*s->sh))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	s->n = c->n;
	s->timeout_us = p->timeout_us;
	/* for due init, and for the verdict of a prefix with no store
	   (sh_check_schema): shard 0 of a 2-shard layout when this one is not
	   sharded (any N has the same shard 0 keys), else the unsharded */
	if ((rc = due__redis_shard_cfg(&s->other, c->one, s->n > 1 ? 1 : 2,
				       0)) < 0)
		return rc;
	for (int i = 0; i < c->n; i++)
		if ((rc = SLOT->open(&s->sh[i], c->part[i], p)) < 0)
			return rc;
	/* each handle starts its turns at another shard */
	s->submit_rr = s->claim_rr = (unsigned)getpid() * 2654435761u;
	return 0;
}

/* Every shard in order; the first failure stops it (shard 0 first, so a
   store made with another N is refused before anything is written). */
static int each(due_store *s, int (*fn)(due_store *))
{
	int rc;
	for (int i = 0; i < s->n; i++)
		if ((rc = fn(s->sh[i])) < 0)
			return rc;
	return 0;
}

/*
** Whether the same name holds a store of the other layout: unsharded
** {due:NAME} when this one has shards, shard 0 of a sharded one when not.
** `due init` with the wrong ?shards= would otherwise make a second, empty
** store beside it that takes submits no worker of the first one sees
** (init: true); every other command would say "no due schema: run `due
** init`" (sh_check_schema).  DUE_ESCHEMA naming the shards= to open it
** with, or 0 when there is none.
*/
static int other_layout(due_store *s, bool init)
{
	due_store *o = NULL;
	due_open_params op = {.create = false, .timeout_us = s->timeout_us};
	const char *tail = init ? ", or use another prefix (nothing written)"
				: " (this URL finds no store there)";
	int v = -1, rc;

	if (!s->other)
		return 0;
	if ((rc = SLOT->open(&o, s->other, &op)) == 0)
		rc = due__redis_version(o, &v);
	SLOT->close(o);
	if (rc < 0)
		return rc;
	if (v == -1)
		return 0;
	if (s->n > 1)
		return due__error_set(
		    DUE_ESCHEMA,
		    "redis store %s: an unsharded store of this prefix exists: "
		    "open it without ?shards=%s",
		    due__redis_label(s->sh[0]), tail);
	/* asked as shard 0 of 2: -1000 - N when it was made with another N */
	return due__error_set(
	    DUE_ESCHEMA,
	    "redis store %s: a store of this prefix made with shards=%d "
	    "exists: open it with ?shards=%d%s",
	    due__redis_label(s->sh[0]), v <= -1000 ? -1000 - v : 2,
	    v <= -1000 ? -1000 - v : 2, tail);
}

static int sh_init_schema(due_store *s)
{
	int rc = other_layout(s, true);
	return rc < 0 ? rc : each(s, SLOT->init_schema);
}

/*
** Every shard's verdict.  When the URL's layout finds no store at all
** (shard 0 says -1), the other layout may hold one (an unsharded URL
** over a store made with shards=N, or the reverse): say so, with the
** shards= to open it with, instead of "run `due init`", which would
** refuse.  A probe that fails leaves the first verdict.
*/
static int sh_check_schema(due_store *s)
{
	char msg[1024];
	int rc = each(s, SLOT->check_schema), v = 0, other;

	if (rc != DUE_ESCHEMA)
		return rc;
	snprintf(msg, sizeof(msg), "%s", due_error_last());
	if (due__redis_version(s->sh[0], &v) == 0 && v == -1 &&
	    (other = other_layout(s, false)) == DUE_ESCHEMA)
		return other;
	return due__error_set(rc, "%s", msg);
}
static int sh_now(due_store *s, due_time *out)
{
	return SLOT->now(s->sh[0], out);
}
static void *sh_native(due_store *s) { return SLOT->native(s->sh[0]); }

/* The shard of a task. */
static due_store *of(due_store *s, due_id id)
{
	return s->sh[id > 0 ? (int)(id % s->n) : 0];
}

/* ------------------------------------------------------------------ */
/* Submit                                                              */
/* ------------------------------------------------------------------ */

/* FNV-1a of kind NUL key: the shard of an item with a key. */
static int hash_shard(const char *kind, const char *key, int n)
{
	uint64_t h = 1469598103934665603ULL;
	const unsigned char *p;

	for (p = (const unsigned char *)kind; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	if (key) {
		h *= 1099511628211ULL;
		for (p = (const unsigned char *)key; *p; p++)
			h = (h ^ *p) * 1099511628211ULL;
	}
	return (int)(h % (uint64_t)n);
}

/* The kinds with a limit, read again when a second old (from shard 0:
   kind_put writes every shard). */
static int limited_read(due_store *s)
{
	due_kind_info_list *l = NULL;
	int rc;

	if (s->lim.read_at && due__mono_us() - s->lim.read_at < LIMITED_TTL_US)
		return 0;
	if ((rc = SLOT->kind_list(s->sh[0], &l)) < 0) {
		s->lim.read_at = due__mono_us(); /* not again for a second */
		return rc;
	}
	limited_clear(&s->lim);
	if (l->count && !(s->lim.kind = calloc(l->count, sizeof(char *)))) {
		due_kind_info_list_free(l);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < l->count; i++) {
		due_kind_info *k = &l->items[i];
		if (k->max_running || k->max_running_per_group || k->rate_n) {
			s->lim.kind[s->lim.n++] = k->kind;
			k->kind = NULL;
		}
	}
	due_kind_info_list_free(l);
	s->lim.read_at = due__mono_us();
	return 0;
}

static bool is_limited(const due_store *s, const char *kind)
{
	for (size_t i = 0; i < s->lim.n; i++)
		if (strcmp(s->lim.kind[i], kind) == 0)
			return true;
	return false;
}

/*
** An item's shard: with a key, hash(kind, key) (a retried submit finds
** its task whatever else changed); a kind with a limit, shard 0, where the
** tasks its schedules fire live too (so one script sees all of its tasks
** and the limit is the store's); else rr, the shard of this call.
*/
static int item_shard(const due_store *s, const due_submit *it, int rr)
{
	if (it->opts.key)
		return hash_shard(it->kind, it->opts.key, s->n);
	if (is_limited(s, it->kind))
		return 0;
	return rr;
}

/* ------------------------------------------------------------------ */
/* Run after across shards: the forwarder                              */
/* ------------------------------------------------------------------ */

/*
** A child and its parents may live in different shards (docs/internals/
** redis.md "Run after", sharded).  Two kinds of message go through an
** outbox (a list in one shard, written by the script that made the
** need, so a crash cannot lose it), each delivered here and then removed:
**   "L c p": child c (this shard's) was added after p, live in another
**     shard when the submit checked it; the link script in p's shard
**     records the edge while p is live, else answers how p ended, which
**     is delivered to c as below.  A parent that ends at the same time
**     is ordered by p's shard: either the link sees it ended, or its
**     finish sees the edge and sends "E".
**   "E c p how": parent p (this shard's) ended `how` (DONE, DEAD,
**     CANCELLED) and c, in another shard, waits for it; c's shard
**     applies it once (its :ae set records each parent heard: a message
**     delivered twice, by two forwarders or after a crash between the
**     delivery and the removal, counts once).
** Forwarded right after each call whose script said it left a message
** (due__redis_outbox), and by every reclaim (the workers' maintenance:
** its script says so whenever the outbox is not empty), so what a crash
** or a failed delivery left is delivered later.  A failure stops this
** shard's delivery (the rest stay for later) and is not the call's: the
** call's own work is written.
*/
#define OUTBOX_PAGE 100
#define FORWARD_ROUNDS 10000

static int deliver(due_store *s, int i, const char *msg)
{
	char st[16], how[16] = "";
	const char *p, *h;
	char *end;
	due_id child, parent;
	int rc;

	if (strlen(msg) < 5) /* not ours: "L 1 2" at least */
		return due__redis_outbox_del(s->sh[i], msg);
	p = msg + 2;
	child = strtoll(p, &end, 10);
	parent = end && *end == ' ' ? strtoll(end + 1, &end, 10) : 0;
	if (child <= 0 || parent <= 0 || (msg[0] != 'L' && msg[0] != 'E'))
		return due__redis_outbox_del(s->sh[i], msg); /* not ours */
	h = *end == ' ' ? end + 1 : "";
	snprintf(how, sizeof(how), "%s", h);
	if (msg[0] == 'L') {
		if ((rc = due__redis_link(of(s, parent), parent, child, st)) <
		    0)
			return rc;
		/* a parent gone was pruned: it ended DONE or CANCELLED a
		   retention ago, after the submit saw it live; counted DONE */
		snprintf(how, sizeof(how), "%s",
			 strcmp(st, "LIVE") == 0 ? ""
			 : st[0]		 ? st
						 : "DONE");
	}
	if (how[0] &&
	    (rc = due__redis_ended(of(s, child), child, parent, how)) < 0)
		return rc;
	return due__redis_outbox_del(s->sh[i], msg);
}

/* Shard i's outbox, a page at a time, until empty or a failure. */
static int forward(due_store *s, int i)
{
	char **m;
	size_t n;
	int rc;

	do {
		if ((rc = due__redis_outbox_read(s->sh[i], &m, &n)) < 0)
			return rc;
		for (size_t k = 0; k < n; k++) {
			if (rc == 0)
				rc = deliver(s, i, m[k]);
			free(m[k]);
		}
		free(m);
	} while (rc == 0 && n == OUTBOX_PAGE);
	return rc;
}

/*
** Every shard whose scripts left messages, again while deliveries leave
** more (a cancel that goes on in the child's shard, down a chain that
** crosses shards); rc returned as it was, the error message kept.
*/
static int forwarded(due_store *s, int rc)
{
	if (rc < 0 || s->n == 1)
		return rc;
	for (int round = 0; round < FORWARD_ROUNDS; round++) {
		bool any = false;
		for (int i = 0; i < s->n; i++)
			if (due__redis_outbox(s->sh[i])) {
				any = true;
				(void)forward(s, i);
			}
		if (!any)
			break;
	}
	return rc;
}

/*
** Run after on a sharded store: each parent of an item that lives in
** another shard than the item is read there first (one script a shard
** an item), and the item's marks say what its script does with each
** (arg_parents in redis.c): refused before any shard writes when one is
** missing (DUE_ENOTFOUND) or DEAD/CANCELLED without after_any_end
** (DUE_ESTATE), as one shard's script refuses its own.  With `all` (a
** call over several shards, each its own script) the parents in an
** item's own shard are read here too, so that a refusal comes before any
** shard writes its part (they stay '.': its script reads them again, in
** the step that writes).  *marks: NULL
** when no item has a parent in another shard, else one string an item
** (NULL for an item without any), all in one allocation with the array.
*/
static int after_marks(due_store *s, const due_submit *items, size_t n,
		       const int *to, bool all, char ***marks)
{
	size_t total = 0, off;
	char **m, (*st)[16] = NULL, *text;
	due_id *ids = NULL;
	int rc = 0;

	*marks = NULL;
	for (size_t j = 0; j < n; j++)
		total += items[j].opts.n_after ? items[j].opts.n_after + 1 : 0;
	if (total == 0)
		return 0;
	if (!(m = calloc(1, n * sizeof(*m) + total)) ||
	    !(st = malloc(DUE_AFTER_MAX * sizeof(*st))) ||
	    !(ids = malloc(DUE_AFTER_MAX * sizeof(*ids)))) {
		free(m);
		free(st);
		return due__error_set(DUE_ENOMEM, "out of memory");
	}
	text = (char *)(m + n);
	off = 0;
	for (size_t j = 0; j < n && rc == 0; j++) {
		const due_schedule_opts *o = &items[j].opts;
		if (!o->n_after)
			continue;
		m[j] = text + off;
		off += o->n_after + 1;
		memset(m[j], '.', o->n_after);
		for (int i = 0; i < s->n && rc == 0; i++) {
			size_t k = 0;
			if (i == to[j] && !all)
				continue;
			for (size_t a = 0; a < o->n_after; a++)
				if (o->after[a] % s->n == i)
					ids[k++] = o->after[a];
			if (k == 0)
				continue;
			if ((rc = due__redis_states(s->sh[i], ids, k, st)) < 0)
				break;
			for (size_t a = 0, x = 0; a < o->n_after && rc == 0;
			     a++) {
				if (o->after[a] % s->n != i)
					continue;
				const char *v = st[x++];
				if (!v[0])
					rc = due__error_set(
					    DUE_ENOTFOUND,
					    "parent task %lld not found",
					    (long long)o->after[a]);
				else if ((strcmp(v, "DEAD") == 0 ||
					  strcmp(v, "CANCELLED") == 0) &&
					 !o->after_any_end)
					rc = due__error_set(
					    DUE_ESTATE,
					    "parent task %lld is %s (add with "
					    "after_any_end to run after any "
					    "end)",
					    (long long)o->after[a], v);
				else if (i != to[j]) /* its own stay '.' */
					m[j][a] =
					    strcmp(v, "SCHEDULED") == 0 ||
						    strcmp(v, "CLAIMED") == 0
						? 'r'
						: 'd';
			}
		}
	}
	free(st);
	free(ids);
	if (rc < 0)
		free(m);
	else
		*marks = m;
	return rc;
}

static int sh_schedule_parts(due_store *s, due_submitted *out,
			     const due_submit *items, size_t n);

static int sh_schedule(due_store *s, due_submitted *out,
		       const due_submit *items, size_t n)
{
	if (s->n == 1)
		return SLOT->schedule(s->sh[0], out, items, n);
	return forwarded(s, sh_schedule_parts(s, out, items, n));
}

static int sh_schedule_parts(due_store *s, due_submitted *out,
			     const due_submit *items, size_t n)
{
	int rr, *to = NULL, rc = 0;
	due_submit *part = NULL;
	due_submitted *got = NULL;
	char **marks = NULL;
	const char **pm = NULL;
	bool one = true, keyed = false, keyless = false, any_limited = false;

	rr = (int)(s->submit_rr++ % (unsigned)s->n);
	for (size_t j = 0; j < n; j++)
		*(items[j].opts.key ? &keyed : &keyless) = true;
	/* only items without a key ask for the limited kinds; when shard 0
	   cannot say, the list last read stands (or none) and the submit goes
	   on: shard 0's outage must not stop submits to the others */
	if (keyless)
		(void)limited_read(s);
	for (size_t j = 0; j < n && keyless && !any_limited; j++)
		any_limited =
		    !items[j].opts.key && is_limited(s, items[j].kind);
	/* a batch without keys stays one script: all in shard 0 if any of
	   its kinds is limited */
	if (!keyed && any_limited)
		rr = 0;
	if (!(to = malloc(n * sizeof(*to))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	for (size_t j = 0; j < n; j++) {
		to[j] = item_shard(s, &items[j], rr);
		one = one && to[j] == to[0];
	}
	if ((rc = after_marks(s, items, n, to, !one, &marks)) < 0)
		goto done;
	if (one) {
		rc = due__redis_schedule_marked(s->sh[to[0]], out, items, n,
						(const char *const *)marks);
		goto done;
	}
	if (!(part = malloc(n * sizeof(*part))) ||
	    !(got = malloc(n * sizeof(*got))) ||
	    !(pm = malloc(n * sizeof(*pm)))) {
		rc = due__error_set(DUE_ENOMEM, "out of memory");
		goto done;
	}
	/* a payload too large for the server: refused before any shard
	   writes its part (each shard's script checks its own too) */
	if ((rc = due__redis_payloads_fit(s->sh[0], items, n)) < 0)
		goto done;
	for (int i = 0; i < s->n && rc == 0; i++) {
		size_t k = 0;
		for (size_t j = 0; j < n; j++)
			if (to[j] == i) {
				pm[k] = marks ? marks[j] : NULL;
				part[k++] = items[j];
			}
		if (k == 0)
			continue;
		if ((rc = due__redis_schedule_marked(s->sh[i], got, part, k,
						     pm)) < 0)
			break;
		k = 0;
		for (size_t j = 0; j < n; j++)
			if (to[j] == i)
				out[j] = got[k++];
	}
done:
	free(to);
	free(part);
	free(got);
	free(marks);
	free(pm);
	return rc;
}

/* ------------------------------------------------------------------ */
/* One task: to its shard                                              */
/* ------------------------------------------------------------------ */

static int sh_cancel(due_store *s, due_cancel_outcome *out, due_id id)
{
	return forwarded(s, SLOT->cancel(of(s, id), out, id));
}

/* reschedule: the task's shard alone (its id says which) */
static int sh_reschedule(due_store *s, due_reschedule_outcome *out, due_id id,
			 const due_reschedule_opts *o)
{
	return SLOT->reschedule(of(s, id), out, id, o);
}
static int sh_get(due_store *s, due_task **out, due_id id)
{
	return SLOT->get(of(s, id), out, id);
}
static int sh_extend(due_store *s, due_extend_outcome *out, due_id id,
		     int32_t attempt, int64_t lease_us)
{
	return SLOT->extend(of(s, id), out, id, attempt, lease_us);
}
static int sh_fail(due_store *s, due_fail_outcome *out, due_id id,
		   int32_t attempt, const char *error, due_outcome as)
{
	return forwarded(s, SLOT->fail(of(s, id), out, id, attempt, error, as));
}
static int sh_retry(due_store *s, due_id id)
{
	return SLOT->retry(of(s, id), id);
}
static int sh_requeue(due_store *s, due_id id)
{
	return forwarded(s, SLOT->requeue(of(s, id), id));
}
static int sh_kill(due_store *s, due_state *out, due_id id)
{
	return forwarded(s, SLOT->kill(of(s, id), out, id));
}

/* ------------------------------------------------------------------ */
/* Claim and complete                                                  */
/* ------------------------------------------------------------------ */

/* Move b's tasks to the end of *a (b is freed). */
static int append(due_task_list **a, due_task_list *b)
{
	due_task *items;

	if (!*a) {
		*a = b;
		return 0;
	}
	if (b->retry_in_us > 0 &&
	    ((*a)->retry_in_us <= 0 || b->retry_in_us < (*a)->retry_in_us))
		(*a)->retry_in_us = b->retry_in_us;
	if (b->count) {
		items = realloc((*a)->items,
				((*a)->count + b->count) * sizeof(*items));
		if (!items) {
			due_task_list_free(b);
			return due__error_set(DUE_ENOMEM, "out of memory");
		}
		memcpy(items + (*a)->count, b->items,
		       b->count * sizeof(*items));
		(*a)->items = items;
		(*a)->count += b->count;
	}
	free(b->items);
	free(b);
	return 0;
}

/*
** A call over several shards that goes on past a failed one (claim,
** complete, reclaim) asks no shard whose node already gave no answer in
** the same call: the node is silent (a partition, a frozen server), and
** each of its shards would wait the whole bound again, so that a call
** over N shards of one server would take N bounds instead of one.  The
** shards so passed over fail as the silent one did.
*/
typedef struct quiet {
	bool shard[RD_NODE_MAX]; /* its call got no answer */
	int n;
} quiet;

/* After shard i's call failed (rc): remember it when its node was silent. */
static void heard(quiet *q, const due_store *s, int i, int rc)
{
	if (rc == DUE_ESTORE && due__redis_silent(s->sh[i]) && !q->shard[i]) {
		q->shard[i] = true;
		q->n++;
	}
}

/* DUE_ESTORE when shard i's node was silent in this call, else 0. */
static int skip(const quiet *q, const due_store *s, int i)
{
	char at[300];

	for (int k = 0; q->n && k < s->n; k++)
		if (q->shard[k] && due__redis_same_node(s->sh[k], s->sh[i])) {
			due__redis_node(s->sh[i], at, sizeof(at));
			return due__store_no_answer(at, s->timeout_us);
		}
	return 0;
}

/*
** From each shard in turn, starting at the next one, what is still
** wanted.  A shard that fails is passed over when another gave tasks (the
** tasks are claimed: they must reach the worker); the error is returned
** only when no shard gave any.
*/
static int claim_each(due_store *s, quiet *q, due_task_list **out,
		      const char *owner, const char *const *kinds,
		      size_t n_kinds, bool exclude, int limit, int64_t lease_us)
{
	int start, rc, err = 0;
	due_task_list *l;

	*out = NULL;
	start = (int)(s->claim_rr++ % (unsigned)s->n);
	for (int k = 0; k < s->n; k++) {
		int want = limit - (int)(*out ? (*out)->count : 0), i;
		if (want <= 0)
			break;
		l = NULL;
		i = (start + k) % s->n;
		if ((rc = skip(q, s, i)) == 0 &&
		    (rc = SLOT->claim(s->sh[i], &l, owner, kinds, n_kinds,
				      exclude, want, lease_us, 0)) < 0)
			heard(q, s, i, rc);
		if (rc < 0) {
			due_task_list_free(l);
			err = rc;
			continue;
		}
		if (append(out, l) < 0) /* out of memory: l's tasks are lost
					   to their leases; keep the rest */
			break;
	}
	if (*out && (*out)->count > 0)
		return 0;
	if (err < 0) {
		due_task_list_free(*out);
		*out = NULL;
		return err;
	}
	return *out ? 0 : due__task_list_alloc(out, 0);
}

static int sh_claim(due_store *s, due_task_list **out, const char *owner,
		    const char *const *kinds, size_t n_kinds, bool exclude,
		    int limit, int64_t lease_us, due_id only_id)
{
	quiet q = {0};

	if (s->n == 1 || only_id > 0)
		return SLOT->claim(of(s, only_id), out, owner, kinds, n_kinds,
				   exclude, limit, lease_us, only_id);
	return claim_each(s, &q, out, owner, kinds, n_kinds, exclude, limit,
			  lease_us);
}

/*
** A call over every shard that goes on past a failing one: the first
** failure's code (in *err) and text (in msg), to be returned after the
** last shard with first_failure().
*/
#define FAIL_MSG 512
static void note_failure(int rc, int *err, char *msg)
{
	if (*err)
		return;
	*err = rc;
	snprintf(msg, FAIL_MSG, "%s", due_error_last());
}

static int first_failure(int err, const char *msg)
{
	return err ? due__error_set(err, "%s", msg) : 0;
}

/*
** Completions grouped by shard, one call per shard; outcomes copied back.
** A shard that fails does not keep the others' completions from being
** written (their tasks are done; their slots and leases are not held
** back by another master's trouble), and its first failure is returned
** after the last shard.  The caller then retries the whole call: the
** outcomes that were written are kept by their shard's handle
** (due__redis_remember, as a shard keeps what it wrote before its own
** WAIT fell short), and the retry is answered them from that memory
** instead of hearing REJECTED_STALE for a try whose result was kept.
** A shard passed over for a silent node (quiet) wrote nothing: its items
** are sent on the retry.
*/
static int complete_each(due_store *s, quiet *q, due_completion *items,
			 size_t n, due_tx_hook hook, void *payload)
{
	due_completion *part;
	bool *known;
	char msg[FAIL_MSG] = "";
	int rc, err = 0;

	/* one allocation: the parts, then a flag an item */
	if (!(part = malloc(n * (sizeof(*part) + sizeof(*known)))))
		return due__error_set(DUE_ENOMEM, "out of memory");
	known = (bool *)(part + n);
	memset(known, 0, n * sizeof(*known));
	for (int i = 0; i < s->n; i++) {
		size_t k = 0;
		for (size_t j = 0; j < n; j++)
			if (!known[j] && of(s, items[j].id) == s->sh[i])
				part[k++] = items[j];
		if (k == 0)
			continue;
		if ((rc = skip(q, s, i)) == 0 &&
		    (rc = SLOT->complete(s->sh[i], part, k, hook, payload)) < 0)
			heard(q, s, i, rc);
		if (rc < 0) {
			note_failure(rc, &err, msg);
			continue;
		}
		k = 0;
		for (size_t j = 0; j < n; j++)
			if (!known[j] && of(s, items[j].id) == s->sh[i]) {
				items[j].outcome = part[k++].outcome;
				known[j] = true;
			}
	}
	if (err)
		for (size_t j = 0; j < n; j++)
			if (known[j])
				due__redis_remember(of(s, items[j].id),
						    &items[j], 1);
	free(part);
	return first_failure(err, msg);
}

static int sh_complete(due_store *s, due_completion *items, size_t n,
		       due_tx_hook hook, void *payload)
{
	quiet q = {0};

	if (s->n == 1)
		return SLOT->complete(s->sh[0], items, n, hook, payload);
	return forwarded(s, complete_each(s, &q, items, n, hook, payload));
}

/* Both halves share one quiet: a node silent to one is not asked again. */
static int sh_complete_claim(due_store *s, due_completion *items, size_t n,
			     const char *owner, const char *const *kinds,
			     size_t n_kinds, bool exclude, int limit,
			     int64_t lease_us, due_task_list **out)
{
	quiet q = {0};
	int rc;

	if (s->n == 1)
		return SLOT->complete_claim(s->sh[0], items, n, owner, kinds,
					    n_kinds, exclude, limit, lease_us,
					    out);
	*out = NULL;
	if ((rc = complete_each(s, &q, items, n, NULL, NULL)) < 0)
		return rc;
	/* the completions are written: a failed claim must not fail the call
	   (its caller would send them again and hear them stale) */
	if (claim_each(s, &q, out, owner, kinds, n_kinds, exclude, limit,
		       lease_us) < 0 &&
	    !*out)
		return forwarded(s, due__task_list_alloc(out, 0));
	return forwarded(s, 0);
}

/*
** Every shard's expired leases.  A shard that fails (its master lost, or
** refusing writes for want of a replica) does not keep the others' from
** being taken back: each shard is asked (but those of a node that gave
** no answer: quiet), and the first failure is returned after the last
** (the others' work is done; the caller retries).
*/
static int sh_reclaim(due_store *s, due_reclaimed *out)
{
	due_reclaimed r;
	char msg[FAIL_MSG] = "";
	quiet q = {0};
	int rc, err = 0;

	memset(out, 0, sizeof(*out));
	for (int i = 0; i < s->n; i++) {
		memset(&r, 0, sizeof(r));
		if ((rc = skip(&q, s, i)) == 0 &&
		    (rc = SLOT->reclaim(s->sh[i], &r)) < 0)
			heard(&q, s, i, rc);
		if (rc < 0) {
			note_failure(rc, &err, msg);
			continue;
		}
		out->rescheduled += r.rescheduled;
		out->dead += r.dead;
		out->cancelled += r.cancelled;
		if (r.next_expiry &&
		    (!out->next_expiry || r.next_expiry < out->next_expiry))
			out->next_expiry = r.next_expiry;
		if (!out->now)
			out->now = r.now;
	}
	return forwarded(s, first_failure(err, msg));
}

/* ------------------------------------------------------------------ */
/* Reads over every shard                                              */
/* ------------------------------------------------------------------ */

static int by_id(const void *a, const void *b)
{
	due_id x = ((const due_task *)a)->id, y = ((const due_task *)b)->id;
	return (x > y) - (x < y);
}

/* Each shard's first `limit` after o->after; the merge's first `limit`. */
static int sh_list(due_store *s, due_task_list **out, const due_list_opts *o)
{
	due_task_list *l;
	int rc, limit = o->limit > 0 ? o->limit : 100;

	if (s->n == 1)
		return SLOT->list(s->sh[0], out, o);
	*out = NULL;
	for (int i = 0; i < s->n; i++) {
		l = NULL;
		if ((rc = SLOT->list(s->sh[i], &l, o)) == 0)
			rc = append(out, l); /* frees l on failure */
		else
			due_task_list_free(l);
		if (rc < 0) {
			due_task_list_free(*out);
			*out = NULL;
			return rc;
		}
	}
	if ((*out)->count > 1) /* an empty list has no items array */
		qsort((*out)->items, (*out)->count, sizeof(due_task), by_id);
	while ((*out)->count > (size_t)limit)
		due__task_clear(&(*out)->items[--(*out)->count]);
	return 0;
}

static void stats_add(due_stats *a, const due_stats *b, bool first)
{
	if (first) {
		*a = *b;
		return;
	}
	for (int k = 0; k < DUE_STATE_COUNT; k++)
		a->counts[k] += b->counts[k];
	a->dead += b->dead;
	a->due_unclaimed += b->due_unclaimed;
	if (b->oldest_due_unclaimed_ms > a->oldest_due_unclaimed_ms)
		a->oldest_due_unclaimed_ms = b->oldest_due_unclaimed_ms;
	/* percentiles do not add up: the largest shard value (an upper
	   bound of the store's) */
	if (b->lateness_p50_us > a->lateness_p50_us)
		a->lateness_p50_us = b->lateness_p50_us;
	if (b->lateness_p99_us > a->lateness_p99_us)
		a->lateness_p99_us = b->lateness_p99_us;
	if (b->lateness_max_us > a->lateness_max_us)
		a->lateness_max_us = b->lateness_max_us;
	a->claims_window += b->claims_window;
	a->estimated |= b->estimated;
}

static int sh_stats(due_store *s, due_stats *out)
{
	due_stats b;
	int rc;

	for (int i = 0; i < s->n; i++) {
		memset(&b, 0, sizeof(b));
		if ((rc = SLOT->stats(s->sh[i], &b)) < 0)
			return rc;
		stats_add(out, &b, i == 0);
	}
	return 0;
}

static void hist_add(due_histogram *a, const due_histogram *b)
{
	for (int k = 0; k <= DUE_HIST_N; k++)
		a->buckets[k] += b->buckets[k];
	a->count += b->count;
	a->sum_ms += b->sum_ms;
}

/* b's per-kind counts into a (b's kinds are freed or moved). */
static int kinds_add(due_metrics *a, due_metrics *b)
{
	for (size_t j = 0; j < b->n_kinds; j++) {
		due_kind_counts *k = NULL, *grown;
		for (size_t i = 0; i < a->n_kinds && !k; i++)
			if (strcmp(a->kinds[i].kind, b->kinds[j].kind) == 0)
				k = &a->kinds[i];
		if (k) {
			for (int st = 0; st < DUE_STATE_COUNT; st++)
				k->counts[st] += b->kinds[j].counts[st];
			continue;
		}
		grown = realloc(a->kinds, (a->n_kinds + 1) * sizeof(*grown));
		if (!grown)
			return due__error_set(DUE_ENOMEM, "out of memory");
		a->kinds = grown;
		a->kinds[a->n_kinds++] = b->kinds[j];
		b->kinds[j].kind = NULL;
	}
	return 0;
}

static int by_kind(const void *a, const void *b)
{
	return strcmp(((const due_kind_counts *)a)->kind,
		      ((const due_kind_counts *)b)->kind);
}

static int sh_metrics(due_store *s, due_metrics *out)
{
	due_metrics b;
	int rc = 0;

	if (s->n == 1)
		return SLOT->metrics(s->sh[0], out);
	if ((rc = SLOT->metrics(s->sh[0], out)) < 0)
		return rc;
	for (int i = 1; i < s->n && rc == 0; i++) {
		memset(&b, 0, sizeof(b));
		if ((rc = SLOT->metrics(s->sh[i], &b)) == 0) {
			/* out->stats is sh_stats' (the core reads it first) */
			hist_add(&out->lateness, &b.lateness);
			hist_add(&out->duration, &b.duration);
			for (int k = 0; k < DUE_OUT_COUNT; k++)
				out->outcomes[k] += b.outcomes[k];
			for (int k = 0; k < 15; k++)
				out->done_per_min[k] += b.done_per_min[k];
			/* worker reports and schedules are shard 0's */
			out->kinds_estimated |= b.kinds_estimated;
			out->pruned += b.pruned;
			rc = kinds_add(out, &b);
		}
		for (size_t k = 0; k < b.n_kinds; k++)
			free(b.kinds[k].kind);
		free(b.kinds);
	}
	if (out->n_kinds > 1)
		qsort(out->kinds, out->n_kinds, sizeof(*out->kinds), by_kind);
	return rc;
}

/* The earliest `limit` of every shard's earliest `limit`. */
static int sh_upcoming(due_store *s, due_upcoming *out,
		       const char *const *kinds, size_t n_kinds, bool exclude,
		       due_time until, int limit)
{
	due_upcoming b;
	int rc = 0;

	if (s->n == 1)
		return SLOT->upcoming(s->sh[0], out, kinds, n_kinds, exclude,
				      until, limit);
	for (int i = 0; i < s->n; i++) {
		memset(&b, 0, sizeof(b));
		if ((rc = SLOT->upcoming(s->sh[i], &b, kinds, n_kinds, exclude,
					 until, limit)) == 0 &&
		    (rc = due__upcoming_append(out, &b)) == 0) {
			out->truncated |= b.truncated;
			if (i == 0)
				out->now = b.now;
			if (b.next_expiry && (!out->next_expiry ||
					      b.next_expiry < out->next_expiry))
				out->next_expiry = b.next_expiry;
		}
		free(b.ids);
		free(b.due_at);
		if (rc < 0)
			return rc;
	}
	return due__upcoming_merge(out, limit);
}

static int sh_prune(due_store *s, int64_t *deleted, int64_t older_than_us,
		    int64_t max_rows)
{
	int64_t d;
	int rc;

	/* max_rows 0: no cap */
	*deleted = 0;
	for (int i = 0; i < s->n && (!max_rows || *deleted < max_rows); i++) {
		d = 0;
		if ((rc = SLOT->prune(s->sh[i], &d, older_than_us,
				      max_rows ? max_rows - *deleted : 0)) < 0)
			return rc;
		*deleted += d;
	}
	return 0;
}

static int sh_bytes(due_store *s, int64_t *out)
{
	int64_t b;
	int rc;

	char node[RD_NODE_MAX][300];
	int seen = 0;

	/* the server's used_memory, once per node that holds shards */
	*out = 0;
	for (int i = 0; i < s->n; i++) {
		bool again = false;
		if ((rc = SLOT->bytes(s->sh[i], &b)) < 0)
			return rc;
		due__redis_node(s->sh[i], node[seen], sizeof(node[seen]));
		for (int k = 0; k < seen && !again; k++)
			again = strcmp(node[k], node[seen]) == 0;
		if (again)
			continue;
		*out += b;
		if (seen < RD_NODE_MAX - 1)
			seen++;
	}
	return 0;
}

/* ------------------------------------------------------------------ */
/* Shard 0: schedules, worker reports, locks, wake-ups                 */
/* ------------------------------------------------------------------ */

static int sh_lock_take(due_store *s, bool *held, const char *name,
			const char *owner, int64_t ttl_us)
{
	return SLOT->lock_take(s->sh[0], held, name, owner, ttl_us);
}
static int sh_cron_get(due_store *s, due_cron_info **out, const char *name)
{
	return SLOT->cron_get(s->sh[0], out, name);
}
static int sh_cron_put(due_store *s, const due_cron_def *d, due_time next_slot)
{
	return SLOT->cron_put(s->sh[0], d, next_slot);
}
static int sh_cron_remove(due_store *s, const char *name)
{
	return SLOT->cron_remove(s->sh[0], name);
}
static int sh_cron_list(due_store *s, due_cron_info_list **out)
{
	return SLOT->cron_list(s->sh[0], out);
}
static int sh_cron_fire(due_store *s, const due_cron_fire *f, bool *won,
			due_id *task_id)
{
	return SLOT->cron_fire(s->sh[0], f, won, task_id);
}
static int sh_worker_report(due_store *s, const char *owner,
			    const due_worker_stats *st)
{
	return SLOT->worker_report(s->sh[0], owner, st);
}
static int sh_listen(due_store *s, int *fd)
{
	return SLOT->listen(s->sh[0], fd);
}
static int sh_listen_drain(due_store *s, int *count)
{
	return SLOT->listen_drain(s->sh[0], count);
}
static int sh_notify(due_store *s) { return SLOT->notify(s->sh[0]); }
/*
** Finished tasks: every shard's "someone waits" mark (a task finishes on
** its own shard, whose script publishes), one subscription (shard 0's:
** the channel is the store's, as the wake channel).
*/
static int sh_listen_done(due_store *s, int *fd)
{
	int rc;

	for (int i = 1; fd && i < s->n; i++)
		if ((rc = SLOT->listen_done(s->sh[i], NULL)) < 0)
			return rc;
	return SLOT->listen_done(s->sh[0], fd);
}

/* ------------------------------------------------------------------ */
/* Kinds: settings on every shard, live counts summed                  */
/* ------------------------------------------------------------------ */

static int sh_kind_put(due_store *s, const char *kind,
		       const due_kind_settings *set)
{
	int rc;

	s->lim.read_at = 0; /* this handle's next submit reads them again */
	for (int i = 0; i < s->n; i++)
		if ((rc = SLOT->kind_put(s->sh[i], kind, set)) < 0)
			return rc;
	return 0;
}

static int sh_kind_remove(due_store *s, const char *kind)
{
	int rc;

	int found = 0;

	s->lim.read_at = 0;
	/* a shard without the kind (a kind_put that failed part-way, a
	   remove retried) is passed over; none with it: not found */
	for (int i = 0; i < s->n; i++) {
		rc = SLOT->kind_remove(s->sh[i], kind);
		if (rc == DUE_ENOTFOUND)
			continue;
		if (rc < 0)
			return rc;
		found++;
	}
	return found ? 0 : SLOT->kind_remove(s->sh[0], kind);
}

static void kind_add(due_kind_info *a, const due_kind_info *b)
{
	a->running += b->running;
	a->rate_used += b->rate_used;
	a->due += b->due;
	a->held_rate += b->held_rate;
	a->held_running += b->held_running;
	a->held_group += b->held_group;
	a->group_running += b->group_running;
}

static int sh_kind_get(due_store *s, due_kind_info **out, const char *kind,
		       const char *group)
{
	due_kind_info *b;
	int rc;

	int notfound = 0;

	*out = NULL;
	for (int i = 0; i < s->n; i++) {
		b = NULL;
		rc = SLOT->kind_get(s->sh[i], &b, kind, group);
		if (rc == DUE_ENOTFOUND) { /* a shard that never saw it */
			notfound = rc;
			continue;
		}
		if (rc < 0) {
			due_kind_info_free(*out);
			*out = NULL;
			return rc;
		}
		if (!*out) {
			*out = b;
			continue;
		}
		kind_add(*out, b);
		due_kind_info_free(b);
	}
	if (*out)
		return 0;
	/* no shard knows it: shard 0's error again, with its message */
	return notfound ? SLOT->kind_get(s->sh[0], out, kind, group) : 0;
}

static int by_kind_info(const void *a, const void *b)
{
	return strcmp(((const due_kind_info *)a)->kind,
		      ((const due_kind_info *)b)->kind);
}

static int sh_kind_list(due_store *s, due_kind_info_list **out)
{
	due_kind_info_list *b;
	int rc;

	if ((rc = SLOT->kind_list(s->sh[0], out)) < 0)
		return rc;
	for (int i = 1; i < s->n; i++) {
		b = NULL;
		if ((rc = SLOT->kind_list(s->sh[i], &b)) < 0) {
			due_kind_info_list_free(*out);
			*out = NULL;
			return rc;
		}
		for (size_t j = 0; j < b->count && rc == 0; j++) {
			due_kind_info *k = NULL, *grown;
			for (size_t m = 0; m < (*out)->count && !k; m++)
				if (strcmp((*out)->items[m].kind,
					   b->items[j].kind) == 0)
					k = &(*out)->items[m];
			if (k) {
				kind_add(k, &b->items[j]);
				continue;
			}
			/* a kind only this shard has seen: moved over */
			grown = realloc((*out)->items,
					((*out)->count + 1) * sizeof(*grown));
			if (!grown) {
				rc =
				    due__error_set(DUE_ENOMEM, "out of memory");
				break;
			}
			(*out)->items = grown;
			(*out)->items[(*out)->count++] = b->items[j];
			memset(&b->items[j], 0, sizeof(b->items[j]));
		}
		due_kind_info_list_free(b);
		if (rc < 0) {
			due_kind_info_list_free(*out);
			*out = NULL;
			return rc;
		}
	}
	if ((*out)->count > 1) /* by kind, as every store lists them */
		qsort((*out)->items, (*out)->count, sizeof(*(*out)->items),
		      by_kind_info);
	return 0;
}

static const char *const schemes[] = {"redis", "rediss", NULL};

/* Every method is sh_<method> (store.h lists them). */
#define OP(m) .m = sh_##m,
const due_store_ops due__store_redis = {
    .version = DUE_STORE_OPS_VERSION,
    .name = "redis",
    .schemes = schemes,
    .caps = DUE_STORE_CAP_NOTIFY | DUE_STORE_CAP_ADMIN,
    .admin = &due__store_redis_admin,
    DUE_STORE_METHODS(OP) DUE_STORE_NOTIFY_METHODS(OP)};
#undef OP
