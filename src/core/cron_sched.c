/*
** cron_sched.c - cron schedules: their definitions and the scheduler pass.
**
** (In due, "schedule" alone names submitting one task, due_schedule(); this
** file is the cron side, due_cron_*: a cron schedule turns the slots of a
** cron expression into tasks.  "Schedule" below always means a cron one.)
**
** A cron schedule is a cron expression in an IANA zone plus a task
** template.
** The store keeps, per schedule, `next_slot`: the next fire instant not
** yet materialized.  A scheduler pass (due_cron_tick) looks at every
** schedule whose next_slot falls before now + lookahead and asks the
** store to do, in ONE transaction, "if next_slot is still X, set it to Y
** and insert the task for slot X" (sched_fire, a compare-and-set).  Any
** number of processes may run passes at once: for each slot exactly one
** compare-and-set wins, so each slot becomes exactly one task, with no
** lock and no TTL to guess (seed 003 guarded with a lock whose TTL had
** to outguess the job).
**
** Misfires.  Passes run every few seconds and materialize slots before
** they are due, so a slot found more than the misfire grace (default
** DUE_CRON_MISFIRE_GRACE_US) in the past means no scheduler ran for a
** while.  Policy `skip` counts those
** slots as missed (visible in `due cron ls`) and resumes at the first
** slot after now - grace; `once` inserts one catch-up task due now (keyed
** by the latest missed slot), counts the others as missed, and resumes
** the same way.
**
** Overlap.  With `wait`, a slot is not materialized while the previous
** slot's task is still SCHEDULED or CLAIMED; it fires (late) once that
** task ends, and if further slots passed meanwhile the misfire policy
** applies to them.
**
** All times are judged by the store's clock (due_now).  The cron engine
** (src/cron/) is pure: this file is where it meets the store.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "cron/cron.h"
#include "cron/tz.h"
#include "store/store.h"

#define US 1000000LL
#define MAX_SLOTS_PER_PASS 1000
#define MAX_MISSED_COUNT 100000

/* A compiled schedule: expression and zone.  NULL zone means UTC. */
typedef struct compiled {
	due_cron *cron;
	due_tz *tz;
} compiled;

static void compiled_free(compiled *c)
{
	due_cron_free(c->cron);
	due_tz_free(c->tz);
}

static int compile(compiled *c, const char *expr, const char *zone)
{
	char err[256];
	memset(c, 0, sizeof(*c));
	if (!expr || due_cron_parse(&c->cron, expr, err, sizeof(err)) < 0)
		return due_error_set(DUE_EINVAL, "invalid cron expression '%s': %s",
				     expr ? expr : "", expr ? err : "missing");
	if (zone && strcmp(zone, "UTC") != 0 &&
	    due_tz_open(&c->tz, zone, err, sizeof(err)) < 0) {
		due_cron_free(c->cron);
		c->cron = NULL;
		return due_error_set(DUE_EINVAL, "%s", err);
	}
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
	int rc = due_cron_next(c->cron, c->tz, from, &sec);

	*out = rc < 0 ? 0 : sec * US;
	if (rc < 0)
		return due_error_set(DUE_EINVAL,
			"cron expression '%s' never fires (searched %d years)",
			due_cron_text(c->cron), DUE_CRON_SEARCH_YEARS);
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
	due_tz *tz = NULL;
	due_tz_civil lc;
	int32_t off = 0;
	char err[256];

	if (!zone || strcmp(zone, "UTC") == 0) {
		due_time_format(buf, len, t);
		return 0;
	}
	if (due_tz_open(&tz, zone, err, sizeof(err)) < 0)
		return due_error_set(DUE_EINVAL, "%s", err);
	int64_t sec = t / US;
	if (due_tz_to_local(tz, sec, &lc) < 0 || due_tz_offset(tz, sec, &off) < 0) {
		due_tz_free(tz);
		return due_error_set(DUE_EINVAL, "time out of range for zone %s", zone);
	}
	due_tz_free(tz);
	int a = off < 0 ? -off : off;
	snprintf(buf, len, "%04lld-%02d-%02dT%02d:%02d:%02d%c%02d:%02d",
		 (long long)lc.year, lc.month, lc.day, lc.hour, lc.minute, lc.second,
		 off < 0 ? '-' : '+', a / 3600, (a / 60) % 60);
	return 0;
}

static int check_def(const due_cron_def *d, size_t max_payload)
{
	int rc;
	if (!d->name || !*d->name)
		return due_error_set(DUE_EINVAL, "invalid schedule name '': empty");
	if ((rc = due_validate_kind(d->name)) < 0)
		return due_error_set(DUE_EINVAL, "invalid schedule name '%s': only "
				     "letters, digits and _ - . : (at most 128)", d->name);
	if ((rc = due_validate_kind(d->kind)) < 0)
		return rc;
	if (d->payload_len > max_payload)
		return due_error_set(DUE_ETOOBIG,
			"payload is %zu bytes, over the limit of %zu bytes",
			d->payload_len, max_payload);
	if ((unsigned)d->misfire > DUE_MISFIRE_ONCE ||
	    (unsigned)d->overlap > DUE_OVERLAP_WAIT)
		return due_error_set(DUE_EINVAL, "invalid misfire or overlap policy");
	if (d->max_attempts < 1 || d->max_attempts > 1000)
		return due_error_set(DUE_EINVAL,
			"invalid max_attempts %d: must be 1..1000", d->max_attempts);
	if (d->backoff_us < 0 || d->backoff_cap_us < d->backoff_us)
		return due_error_set(DUE_EINVAL,
			"invalid backoff: base and cap must be >= 0 and base <= cap");
	return 0;
}

int due_cron_put(due_db *db, const due_cron_def *def)
{
	const due_store_ops *ops = due_db_ops(db);
	due_store *s = due_db_store(db);
	due_schedule_info *old = NULL;
	due_cron_def d = *def;
	due_time now, after, next;
	compiled c;
	int rc;

	if (!s)
		return due_error_set(DUE_EINVAL, "store is not open");
	if (!d.tz || !*d.tz)
		d.tz = "UTC";
	if ((rc = check_def(&d, due_db_max_payload(db))) < 0 ||
	    (rc = compile(&c, d.expr, d.tz)) < 0)
		return rc;
	if ((rc = ops->now(s, &now)) < 0)
		goto done;
	rc = ops->sched_get(s, &old, d.name);
	if (rc < 0 && rc != DUE_ENOTFOUND)
		goto done;
	after = old && old->last_slot > now ? old->last_slot : now;
	if ((rc = next_after(&c, after, &next)) < 0)
		goto done;
	rc = ops->sched_put(s, &d, next);
done:
	if (old) {
		due_schedule_info_clear(old);
		free(old);
	}
	compiled_free(&c);
	return rc;
}

int due_cron_remove(due_db *db, const char *name)
{
	due_store *s = due_db_store(db);
	if (!s)
		return due_error_set(DUE_EINVAL, "store is not open");
	if (!name || due_validate_kind(name) < 0)
		return due_error_set(DUE_EINVAL, "invalid schedule name '%s'",
				     name ? name : "");
	return due_db_ops(db)->sched_remove(s, name);
}

int due_cron_list(due_db *db, due_schedule_list **out)
{
	due_store *s = due_db_store(db);
	*out = NULL;
	if (!s)
		return due_error_set(DUE_EINVAL, "store is not open");
	return due_db_ops(db)->sched_list(s, out);
}

/* Is the previous slot's task still live (for overlap = wait)? */
static int previous_live(due_db *db, const due_schedule_info *si, bool *live)
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
static void slot_task(const due_schedule_info *si, due_time due, due_time slot,
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
** Materialize the due slots of one schedule.  Stops at the first slot
** beyond the horizon, at a lost race (the winner carries on), or when
** the previous run must be waited for.
*/
static int tick_one(pass *p, due_schedule_info *si)
{
	const due_store_ops *ops = due_db_ops(p->db);
	compiled c;
	int rc;

	if ((rc = compile(&c, si->expr, si->tz)) < 0)
		return rc;
	for (int i = 0; i < MAX_SLOTS_PER_PASS && si->next_slot <= p->horizon; i++) {
		due_sched_fire f = {.name = si->name, .expect = si->next_slot,
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
		if (p->now - si->next_slot > p->grace) {
			if ((rc = plan_misfire(&c, si->next_slot, p->now, p->grace, &f.missed,
					       &f.last_missed, &f.next)) < 0)
				break;
			if (si->misfire == DUE_MISFIRE_ONCE) {
				slot_task(si, p->now, f.last_missed, key, sizeof(key), &task);
				f.task = &task;
				f.slot = f.last_missed;
				f.missed--; /* the catch-up stands for the latest one */
				if (f.missed == 0)
					f.last_missed = 0;
			}
		} else {
			if ((rc = next_after(&c, si->next_slot, &f.next)) < 0)
				break;
			slot_task(si, si->next_slot, si->next_slot, key, sizeof(key), &task);
			f.task = &task;
		}
		if ((rc = ops->sched_fire(due_db_store(p->db), &f, &won, &id)) < 0)
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

int due_cron_tick(due_db *db, due_cron_tick_result *out, const due_cron_tick_opts *opts)
{
	due_cron_tick_opts o = DUE_CRON_TICK_OPTS_INIT;
	due_schedule_list *l = NULL;
	pass p = {db, 0, 0, 0, out};
	int rc, first_err = 0;

	memset(out, 0, sizeof(*out));
	if (opts)
		o = *opts;
	if (o.version < 1 || o.version > DUE_CRON_TICK_OPTS_VERSION)
		return due_error_set(DUE_EINVAL, "unknown due_cron_tick_opts version %u "
				     "(use DUE_CRON_TICK_OPTS_INIT)", o.version);
	if (o.lookahead_us < 0 || o.lookahead_us > 3600 * US)
		return due_error_set(DUE_EINVAL, "invalid lookahead: 0..1h");
	if (o.misfire_grace_us < 0 || o.misfire_grace_us > 86400 * US)
		return due_error_set(DUE_EINVAL, "invalid misfire grace: 0..1d");
	p.grace = o.misfire_grace_us;
	if ((rc = due_now(db, &p.now)) < 0 || (rc = due_cron_list(db, &l)) < 0)
		return rc;
	p.horizon = p.now + o.lookahead_us;
	out->now = p.now;
	for (size_t i = 0; i < l->count; i++) {
		due_schedule_info *si = &l->items[i];
		/* a broken schedule must not stop the others */
		if ((rc = tick_one(&p, si)) < 0 && !first_err)
			first_err = rc;
		if (!out->next_slot || si->next_slot < out->next_slot)
			out->next_slot = si->next_slot;
	}
	due_schedule_list_free(l);
	return first_err;
}
