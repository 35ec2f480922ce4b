/*
** cron_sched.c - cron schedules: their definitions and the scheduler pass.
**
** (In due, "schedule" alone names submitting one task, due_schedule(); this
** file is the cron side, due_cron_*: a cron schedule turns the slots of a
** cron expression into tasks.  "Schedule" below always means a cron one.)
**
** A cron schedule is a cron expression in an IANA zone plus a task
** template.  The store keeps, per schedule, `next_slot`: the next fire
** instant not yet materialized.  A scheduler pass (due_cron_tick) looks at
** every schedule whose next_slot falls before now + lookahead and asks the
** store to do, in ONE transaction, "if next_slot is still X, set it to Y
** and insert the task for slot X" (cron_fire, a compare-and-set).  Any
** number of processes may run passes at once: for each slot exactly one
** compare-and-set wins, so each slot becomes exactly one task, with no
** lock and no TTL to guess (seed 003 guarded with a lock whose TTL had
** to outguess the job).
**
** Misfires.  Passes run every few seconds and materialize slots before
** they are due, so a slot found more than the misfire grace (default
** DUE_CRON_MISFIRE_GRACE_US) in the past means no scheduler ran for a
** while.  Policy `skip` counts those slots as missed (visible in `due cron
** ls`) and resumes at the first slot after now - grace; `once` inserts one
** catch-up task due now (keyed by the latest missed slot), counts the
** others as missed, and resumes the same way.
**
** Overlap.  With `wait`, a slot is not materialized while the previous
** slot's task is still SCHEDULED or CLAIMED; it fires (late) once that
** task ends, and if further slots passed meanwhile the misfire policy
** applies to them.
**
** Zones are read once, not on every pass.  Opening a zone reads its TZif
** file, so the zones in use are kept, compiled, in a small process-wide
** cache (the zone cache below) shared by every thread's passes, by
** due_cron_put and by due_time_format_zone.  A pass re-parses each
** expression (pure CPU, about a microsecond) but reads a zone file only
** when a schedule names a zone the cache does not hold, or holds for more
** than ZONE_TTL_US: so a tzdata update reaches a long-running worker
** within that time, as it reaches every new process at once.
**
** Errors.  The engine's codes that due.h also has carry due.h's numbers
** (checked below); this file reports an engine failure as due.h would:
** out of memory as DUE_ENOMEM "out of memory", a refused expression or
** zone as DUE_EINVAL with the engine's message, which names the field or
** the zone ("unknown time zone 'Europe/Berln'").
**
** All times are judged by the store's clock (due_now).  The cron engine
** (src/cron/) is pure: this file is where it meets the store.
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "cron/cron.h"
#include "cron/tz.h"
#include "store/store.h"

#define US 1000000LL
#define MAX_SLOTS_PER_PASS 1000
#define MAX_MISSED_COUNT 100000
#define ZONE_CACHE_SIZE 128	/* distinct zones kept; LRU beyond */
#define ZONE_TTL_US (3600 * US) /* a cached zone is read again after this */

_Static_assert(
    (int)DUE_CRON_EINVAL == (int)DUE_EINVAL &&
	(int)DUE_CRON_ENOTFOUND == (int)DUE_ENOTFOUND &&
	(int)DUE_CRON_ENOMEM == (int)DUE_ENOMEM &&
	(int)DUE_TZ_EINVAL == (int)DUE_EINVAL &&
	(int)DUE_TZ_ENOMEM == (int)DUE_ENOMEM,
    "the cron engine's codes shared with due.h must have due.h's values");

static int nomem(void) { return due__error_set(DUE_ENOMEM, "out of memory"); }

/* ------------------------------------------------------------------ */
/* The zone cache                                                      */
/* ------------------------------------------------------------------ */

/*
** One opened zone, shared.  tz is immutable (tz.h), so holders read it
** without a lock; `refs` counts the table's reference (while listed) and
** one per holder, and the last to let go frees the entry, so an entry
** evicted while a pass still uses it lives until that pass is done.
*/
typedef struct zentry {
	due_tz *tz;    /* its name (due__tz_name) is the key */
	int refs;      /* guarded by zone_mu */
	int64_t born;  /* due__mono_us() when opened */
	uint64_t used; /* zone_clock at the last lookup, for LRU; zone_mu */
} zentry;

/*
** zone_mu guards zones[], zone_clock and each entry's refs and used.  Any
** thread may take it.  It is a leaf lock: nothing else is locked while it
** is held, and no file is read and nothing freed under it (zone files are
** read before the insert; entries are freed after the unlock).  At exit
** the listed entries are still reachable through zones[] (valgrind: "still
** reachable", not a leak): a worker thread may hold one while the process
** exits, so nothing frees them then.
*/
static pthread_mutex_t zone_mu = PTHREAD_MUTEX_INITIALIZER;
static zentry *zones[ZONE_CACHE_SIZE];
static uint64_t zone_clock;

static void zone_free(zentry *e)
{
	if (e) {
		due__tz_free(e->tz);
		free(e);
	}
}

/* The slot of the entry named `name`, or -1.  Under zone_mu. */
static int zone_slot(const char *name)
{
	for (int i = 0; i < ZONE_CACHE_SIZE; i++)
		if (zones[i] && strcmp(due__tz_name(zones[i]->tz), name) == 0)
			return i;
	return -1;
}

/* A slot for a new zone: an empty one, else the least recently used one. */
static int zone_victim(void)
{
	int v = 0;

	for (int i = 0; i < ZONE_CACHE_SIZE; i++) {
		if (!zones[i])
			return i;
		if (zones[i]->used < zones[v]->used)
			v = i;
	}
	return v;
}

/*
** List e (refs: the table's and the caller's) in the slot of its name (an
** older copy), else in zone_victim().  Returns the entry it displaced if
** nobody holds that any more (the caller frees it after the unlock), else
** NULL.  Under zone_mu.
*/
static zentry *zone_insert(zentry *e)
{
	int i = zone_slot(due__tz_name(e->tz));
	zentry *old;

	if (i < 0)
		i = zone_victim();
	old = zones[i];
	zones[i] = e;
	e->refs = 2;
	e->used = ++zone_clock;
	return old && --old->refs == 0 ? old : NULL;
}

/*
** Hand out the zone `name` (not NULL), from the cache or read now, in *out;
** the caller gives it back with zone_release().  Returns 0, or DUE_ENOMEM
** or DUE_EINVAL (unknown zone, unusable zone data) with the message set;
** *out is NULL then.  Two threads that miss the same zone at once both
** read it; the later insert wins and the earlier entry goes with its
** holder.
*/
static int zone_get(zentry **out, const char *name)
{
	int64_t now = due__mono_us();
	zentry *e = NULL;
	char err[256];
	int i, rc;

	pthread_mutex_lock(&zone_mu);
	if ((i = zone_slot(name)) >= 0 && now - zones[i]->born < ZONE_TTL_US) {
		e = zones[i];
		e->refs++;
		e->used = ++zone_clock;
	}
	pthread_mutex_unlock(&zone_mu);
	if ((*out = e) != NULL)
		return 0;
	if ((e = due__tz_malloc(sizeof(*e))) == NULL)
		return nomem();
	if ((rc = due__tz_open(&e->tz, name, err, sizeof(err))) < 0) {
		free(e);
		return rc == DUE_TZ_ENOMEM
			   ? nomem()
			   : due__error_set(DUE_EINVAL, "%s", err);
	}
	e->born = now;
	pthread_mutex_lock(&zone_mu);
	zentry *gone = zone_insert(e);
	pthread_mutex_unlock(&zone_mu);
	zone_free(gone);
	*out = e;
	return 0;
}

/* Give back a zone from zone_get().  NULL is allowed.  Any thread. */
static void zone_release(zentry *e)
{
	bool last;

	if (!e)
		return;
	pthread_mutex_lock(&zone_mu);
	last = --e->refs == 0;
	pthread_mutex_unlock(&zone_mu);
	if (last)
		zone_free(e);
}

/* ------------------------------------------------------------------ */
/* Compiled schedules                                                  */
/* ------------------------------------------------------------------ */

/* A compiled schedule: expression and zone.  No zone means UTC. */
typedef struct compiled {
	due_cron *cron;
	zentry *zone;
	const due_tz *tz; /* zone's tz, or NULL for UTC */
} compiled;

static void compiled_free(compiled *c)
{
	due__cron_free(c->cron);
	zone_release(c->zone);
}

/*
** Compile expr in zone (NULL or "UTC": UTC) into *c, which the caller
** frees with compiled_free() on success.  Returns 0; DUE_EINVAL naming the
** field of a bad expression, or the bad zone; DUE_ENOMEM.  On failure
** nothing is held.
*/
static int compile(compiled *c, const char *expr, const char *zone)
{
	char err[256];
	int rc;

	memset(c, 0, sizeof(*c));
	if (!expr)
		return due__error_set(DUE_EINVAL,
				      "invalid cron expression '': missing");
	rc = due__cron_parse(&c->cron, expr, err, sizeof(err));
	if (rc == DUE_CRON_ENOMEM)
		return nomem();
	if (rc < 0)
		return due__error_set(
		    DUE_EINVAL, "invalid cron expression '%s': %s", expr, err);
	if (zone && strcmp(zone, "UTC") != 0 &&
	    (rc = zone_get(&c->zone, zone)) < 0) {
		due__cron_free(c->cron);
		c->cron = NULL;
		return rc;
	}
	c->tz = c->zone ? c->zone->tz : NULL;
	return 0;
}

/*
** First slot strictly after `after` (us) into *out.  Returns 0, or
** DUE_EINVAL when there is none (*out is 0 then).
*/
static int next_after(const compiled *c, due_time after, due_time *out)
{
	int64_t sec = 0;
	int64_t from = after >= 0 ? after / US : 0;
	int rc = due__cron_next(c->cron, c->tz, from, &sec);

	*out = rc < 0 ? 0 : sec * US;
	if (rc == DUE_CRON_ENOTFOUND)
		return due__error_set(
		    DUE_EINVAL,
		    "cron expression '%s' never fires (searched %d years)",
		    due__cron_text(c->cron), DUE_CRON_SEARCH_YEARS);
	if (rc < 0)
		return due__error_set(DUE_EINVAL, "cron expression '%s': %s",
				      due__cron_text(c->cron),
				      due__cron_strerror(rc));
	return 0;
}

int due_cron_preview(due_time *out, size_t n, size_t *out_count,
		     const char *expr, const char *zone, due_time after)
{
	compiled c;
	due_time t = after;
	int rc;

	*out_count = 0;
	if ((rc = compile(&c, expr, zone)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		if ((rc = next_after(&c, t, &out[i])) < 0)
			break;
		t = out[i];
		(*out_count)++;
	}
	compiled_free(&c);
	return *out_count > 0 || n == 0 ? 0 : rc;
}

int due_time_format_zone(char *buf, size_t len, due_time t, const char *zone)
{
	zentry *z = NULL;
	due_tz_civil lc;
	int32_t off = 0;
	int64_t sec = t / US;
	int rc;

	if (!zone || strcmp(zone, "UTC") == 0) {
		due_time_format(buf, len, t);
		return 0;
	}
	if ((rc = zone_get(&z, zone)) < 0)
		return rc;
	if (due__tz_to_local(z->tz, sec, &lc) < 0 ||
	    due__tz_offset(z->tz, sec, &off) < 0) {
		zone_release(z);
		return due__error_set(DUE_EINVAL,
				      "time out of range for zone %s", zone);
	}
	zone_release(z);
	int a = off < 0 ? -off : off;
	snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d%c%02d:%02d",
		 (long long)lc.year, lc.month, lc.day, lc.hour, lc.minute,
		 lc.second, off < 0 ? '-' : '+', a / 3600, (a / 60) % 60);
	return 0;
}

static int check_def(const due_cron_def *d, size_t max_payload)
{
	int rc;
	if (!d->name || !*d->name)
		return due__error_set(DUE_EINVAL,
				      "invalid schedule name '': empty");
	if ((rc = due__validate_kind(d->name)) < 0)
		return due__error_set(
		    DUE_EINVAL,
		    "invalid schedule name '%s': only "
		    "letters, digits and _ - . : (at most 128)",
		    d->name);
	if ((rc = due__validate_kind(d->kind)) < 0)
		return rc;
	if (d->payload_len > max_payload)
		return due__error_set(
		    DUE_ETOOBIG,
		    "payload is %zu bytes, over the limit of %zu bytes "
		    "(raise it with due_open_opts.max_payload; "
		    "$DUE_MAX_PAYLOAD for the due command and due serve)",
		    d->payload_len, max_payload);
	if ((unsigned)d->misfire > DUE_MISFIRE_ONCE ||
	    (unsigned)d->overlap > DUE_OVERLAP_WAIT)
		return due__error_set(DUE_EINVAL,
				      "invalid misfire or overlap policy");
	if (d->max_attempts < 1 || d->max_attempts > 1000)
		return due__error_set(
		    DUE_EINVAL, "invalid max_attempts %d: must be 1..1000",
		    d->max_attempts);
	if (d->backoff_us < 0 || d->backoff_cap_us < d->backoff_us)
		return due__error_set(DUE_EINVAL,
				      "invalid backoff: base and cap must be "
				      ">= 0 and base <= cap");
	return 0;
}

int due_cron_put(due_db *db, const due_cron_def *def)
{
	const due_store_ops *ops = due__db_ops(db);
	due_store *s = due__db_store(db);
	due_cron_info *old = NULL;
	due_cron_def d = *def;
	due_time now, after, next;
	compiled c;
	int rc;

	if (!s)
		return due__error_set(DUE_EINVAL, "store is not open");
	if (!d.tz || !*d.tz)
		d.tz = "UTC";
	if ((rc = check_def(&d, due__db_max_payload(db))) < 0 ||
	    (rc = compile(&c, d.expr, d.tz)) < 0)
		return rc;
	if ((rc = ops->now(s, &now)) < 0)
		goto done;
	rc = ops->cron_get(s, &old, d.name);
	if (rc < 0 && rc != DUE_ENOTFOUND)
		goto done;
	after = old && old->last_slot > now ? old->last_slot : now;
	if ((rc = next_after(&c, after, &next)) < 0)
		goto done;
	/* workers that hear notifications sleep long between scheduler
	   passes: tell them (a failed note only delays the first slot until
	   their next pass, at most five minutes) */
	if ((rc = ops->cron_put(s, &d, next)) == 0)
		(void)due_notify(db);
done:
	if (old) {
		due__cron_info_clear(old);
		free(old);
	}
	compiled_free(&c);
	return rc;
}

int due_cron_remove(due_db *db, const char *name)
{
	due_store *s = due__db_store(db);
	if (!s)
		return due__error_set(DUE_EINVAL, "store is not open");
	if (!name || due__validate_kind(name) < 0)
		return due__error_set(DUE_EINVAL, "invalid schedule name '%s'",
				      name ? name : "");
	int rc = due__db_ops(db)->cron_remove(s, name);
	if (rc == 0)
		(void)due_notify(db);
	return rc;
}

int due_cron_list(due_db *db, due_cron_info_list **out)
{
	due_store *s = due__db_store(db);
	*out = NULL;
	if (!s)
		return due__error_set(DUE_EINVAL, "store is not open");
	return due__db_ops(db)->cron_list(s, out);
}

/* Is the previous slot's task still live (for overlap = wait)? */
static int previous_live(due_db *db, const due_cron_info *si, bool *live)
{
	due_task *t = NULL;
	int rc;

	*live = false;
	if (si->overlap != DUE_OVERLAP_WAIT || si->last_task == 0)
		return 0;
	rc = due_get(db, &t, si->last_task);
	if (rc == DUE_ENOTFOUND)
		return 0; /* pruned: long finished */
	if (rc < 0)
		return rc;
	*live = t->state == DUE_SCHEDULED || t->state == DUE_CLAIMED;
	due_task_free(t);
	return 0;
}

/*
** Plan the step for a slot found late beyond the grace: count the missed
** slots up to now - grace and find where to resume.
*/
static int plan_misfire(const compiled *c, due_time slot, due_time now,
			int64_t grace, int64_t *missed, due_time *last_missed,
			due_time *resume)
{
	due_time horizon = now - grace, t = slot;
	int rc;

	*missed = 0;
	*last_missed = slot;
	while (t <= horizon && *missed < MAX_MISSED_COUNT) {
		(*missed)++;
		*last_missed = t;
		if ((rc = next_after(c, t, &t)) < 0)
			return rc;
	}
	if (t <= horizon) /* too many to count: jump straight past them */
		return next_after(c, horizon, resume);
	*resume = t;
	return 0;
}

typedef struct pass {
	due_db *db;
	due_time now, horizon;
	int64_t grace;
	due_cron_tick_result *out;
} pass;

/* Fill the task template of a schedule for one slot. */
static void slot_task(const due_cron_info *si, due_time due, due_time slot,
		      char *key, size_t keylen, due_submit *t)
{
	snprintf(key, keylen, "cron:%s:%lld", si->name, (long long)(slot / US));
	memset(t, 0, sizeof(*t));
	t->kind = si->kind;
	t->payload = si->payload;
	t->payload_len = si->payload_len;
	t->opts = (due_schedule_opts)DUE_SCHEDULE_OPTS_INIT;
	t->opts.at = due > 0 ? due : 1;
	t->opts.max_attempts = si->max_attempts;
	t->opts.backoff_us = si->backoff_us;
	t->opts.backoff_cap_us = si->backoff_cap_us;
	t->opts.key = key;
}

/*
** Decide what becomes of the schedule's next_slot, into f (and task, with
** its key, when the slot becomes a task): a slot within the grace fires as
** usual; one found later is a misfire, and the policy decides.  Returns 0
** or the error of next_after().
*/
static int plan_slot(const pass *p, const due_cron_info *si, const compiled *c,
		     due_cron_fire *f, due_submit *task, char *key,
		     size_t keylen)
{
	int rc;

	if (p->now - si->next_slot <= p->grace) {
		if ((rc = next_after(c, si->next_slot, &f->next)) < 0)
			return rc;
		slot_task(si, si->next_slot, si->next_slot, key, keylen, task);
		f->task = task;
		return 0;
	}
	if ((rc = plan_misfire(c, si->next_slot, p->now, p->grace, &f->missed,
			       &f->last_missed, &f->next)) < 0)
		return rc;
	if (si->misfire == DUE_MISFIRE_ONCE) {
		slot_task(si, p->now, f->last_missed, key, keylen, task);
		f->task = task;
		f->slot = f->last_missed;
		f->missed--; /* the catch-up stands for the latest one */
		if (f->missed == 0)
			f->last_missed = 0;
	}
	return 0;
}

/*
** Materialize the due slots of one schedule.  Stops at the first slot
** beyond the horizon, at a lost race (the winner carries on), or when
** the previous run must be waited for.  The zone comes from the zone
** cache: no file is read unless the schedule's zone is new to it.
*/
static int tick_one(pass *p, due_cron_info *si)
{
	const due_store_ops *ops = due__db_ops(p->db);
	compiled c;
	int rc;

	if ((rc = compile(&c, si->expr, si->tz)) < 0)
		return rc;
	for (int i = 0; i < MAX_SLOTS_PER_PASS && si->next_slot <= p->horizon;
	     i++) {
		due_cron_fire f = {.name = si->name,
				   .expect = si->next_slot,
				   .slot = si->next_slot};
		due_submit task;
		char key[200];
		bool live, won = false;
		due_id id = 0;

		if ((rc = previous_live(p->db, si, &live)) < 0)
			break;
		if (live) {
			p->out->waiting++;
			break;
		}
		if ((rc = plan_slot(p, si, &c, &f, &task, key, sizeof(key))) <
			0 ||
		    (rc = ops->cron_fire(due__db_store(p->db), &f, &won, &id)) <
			0)
			break;
		if (!won) {
			p->out->lost_races++;
			break;
		}
		p->out->materialized += f.task != NULL;
		p->out->missed += f.missed;
		if (f.task)
			si->last_task = id;
		si->next_slot = f.next;
	}
	compiled_free(&c);
	return rc;
}

int due_cron_tick(due_db *db, due_cron_tick_result *out,
		  const due_cron_tick_opts *opts)
{
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_cron_info_list *l = NULL;
	pass p = {db, 0, 0, 0, out};
	int rc, first_err = 0;

	memset(out, 0, sizeof(*out));
	if (opts)
		o = *opts;
	if (o.version < 1 || o.version > DUE_CRON_TICK_OPTS_VERSION)
		return due__error_set(DUE_EINVAL,
				      "unknown due_cron_tick_opts version %u "
				      "(use DUE_CRON_TICK_OPTS_INIT)",
				      o.version);
	if (o.lookahead_us < 0 || o.lookahead_us > 3600 * US)
		return due__error_set(DUE_EINVAL, "invalid lookahead: 0..1h");
	if (o.misfire_grace_us < 0 || o.misfire_grace_us > 86400 * US)
		return due__error_set(DUE_EINVAL,
				      "invalid misfire grace: 0..1d");
	p.grace = o.misfire_grace_us;
	if ((rc = due_now(db, &p.now)) < 0 || (rc = due_cron_list(db, &l)) < 0)
		return rc;
	p.horizon = p.now + o.lookahead_us;
	out->now = p.now;
	for (size_t i = 0; i < l->count; i++) {
		due_cron_info *si = &l->items[i];
		/* a broken schedule must not stop the others */
		if ((rc = tick_one(&p, si)) < 0 && !first_err)
			first_err = rc;
		if (!out->next_slot || si->next_slot < out->next_slot)
			out->next_slot = si->next_slot;
	}
	due_cron_info_list_free(l);
	return first_err;
}
