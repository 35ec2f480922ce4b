/*
** flow.c - the flow-control claim (docs/internals/flow.md), planned once
** for sqlite.c and mysql.c; flow.h says what the planner decides and
** what it asks of a backend.
**
** A claim runs in two parts.  First each limited kind the claim's filter
** admits, in kind order (the order MySQL locks their due_kind rows in, so
** two claimers never deadlock): its room is the smallest of what the
** claim still lacks, max_running less its live tries and rate_n less the
** claims logged in its window; its pick skips the tasks of groups at
** max_running_per_group; its claims are logged for the rate window, a
** pass that left due tasks behind counts why in the kind's held_*
** counters and lowers retry_in_us to when room may come back.  Then the
** kinds without limits fill the rest, walking the distinct priorities in
** use, lowest first, one index probe each, so a claim never sorts the
** backlog by priority.
**
** The counts are exact because the backend serializes the claims of a
** limited kind around them: SQLite holds its one write lock for the
** whole claim, MySQL locks the kinds' rows (ops->lock) before counting.
** Nothing here reads a clock: f->now is the store's, set by the backend.
**
** Last, due__flow_kinds_of: the rows of a kind read that counts the live
** figures in SQL (MySQL, PostgreSQL) decoded once.
*/
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/flow.h"

int due__flow_add(due__flow *f, const char *kind, size_t len,
		  const int64_t v[DUE__FLOW_NCOLS])
{
	due__flow_kind *k;

	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 8;
		if (!(k = realloc(f->k, cap * sizeof(*k))))
			return due__error_set(DUE_ENOMEM, "out of memory");
		f->k = k, f->cap = cap;
	}
	k = &f->k[f->n];
	if (!kind || !(k->kind = due__strdup_n(kind, len)))
		return due__error_set(DUE_ENOMEM, "out of memory");
	f->n++;
	due__flow_set(k, v);
	if (k->paused || due__flow_limited(k))
		f->filtered = true;
	return 0;
}

void due__flow_set(due__flow_kind *k, const int64_t v[DUE__FLOW_NCOLS])
{
	k->paused = v[DUE__FLOW_PAUSED] != 0;
	k->rate_n = (int32_t)v[DUE__FLOW_RATE_N];
	k->rate_us = v[DUE__FLOW_RATE_US];
	k->max_running = (int32_t)v[DUE__FLOW_MAX_RUNNING];
	k->per_group = (int32_t)v[DUE__FLOW_PER_GROUP];
	k->timeout_us = v[DUE__FLOW_TIMEOUT_US];
}

void due__flow_free(due__flow *f)
{
	due__flow_kinds_free(f->k, f->n);
	f->k = NULL;
	f->n = f->cap = 0;
}

bool due__flow_admits(const due__flow *f, const char *kind)
{
	for (size_t i = 0; i < f->n_kinds; i++)
		if (strcmp(f->kinds[i], kind) == 0)
			return !f->exclude;
	return f->n_kinds == 0 || f->exclude;
}

bool due__flow_serves(const due__flow *f, const due__flow_kind *k)
{
	return due__flow_limited(k) && due__flow_admits(f, k->kind);
}

int due__flow_pick(due__flow_pass *p, const char *grp, size_t n)
{
	int64_t *slot = NULL;

	if (p->taken == p->room) {
		p->held |= p->why; /* why 0: the claim is full */
		return DUE__PICK_STOP;
	}
	if (p->k->per_group && grp) {
		if (!(slot = due__group_slot(&p->g, grp, n)))
			return due__error_set(DUE_ENOMEM, "out of memory");
		if (*slot >= p->k->per_group) {
			p->held |= DUE__HELD_GROUP;
			return DUE__PICK_SKIP;
		}
		++*slot;
	}
	p->taken++;
	return DUE__PICK_TAKE;
}

/*
** How many tasks of limited kind p->k this claim may take, at most `left`:
** p->room, with p->why the limit that set it (0: `left` did) and
** p->oldest the oldest logged claim in the rate window (0 when none).
*/
static int kind_room(const due__flow *f, due__flow_pass *p, int64_t left)
{
	const due__flow_kind *k = p->k;
	int64_t n;
	int rc;

	p->room = left;
	if (k->max_running) {
		if ((rc = f->ops->running(f->payload, k->kind, NULL, f->now,
					  &n)) < 0)
			return rc;
		if (k->max_running - n < p->room)
			p->room = k->max_running - n,
			p->why = DUE__HELD_RUNNING;
	}
	if (k->rate_n) {
		if ((rc = f->ops->rate(f->payload, k->kind, f->now - k->rate_us,
				       &n, &p->oldest)) < 0)
			return rc;
		if (k->rate_n - n < p->room)
			p->room = k->rate_n - n, p->why = DUE__HELD_RATE;
	}
	if (p->room < 0)
		p->room = 0;
	return 0;
}

/*
** After a pass over limited kind k that claimed `taken` tasks: log them
** for its rate window, count the held-back pass, and lower f->retry_in_us
** to when trying again may find room.
*/
static int kind_after(due__flow *f, const due__flow_kind *k, int64_t taken,
		      int held, due_time oldest)
{
	int64_t logged = k->rate_n ? taken : 0;

	if (held) {
		int64_t retry = due__flow_retry_us(k, held, oldest, f->now);
		if (!f->retry_in_us || retry < f->retry_in_us)
			f->retry_in_us = retry;
	}
	if (!logged && !held)
		return 0;
	return f->ops->log(f->payload, k, f->now, logged, held);
}

/*
** One pass over limited kind k: count, then (restamp) read the store's
** now again, pick, claim and log at that now.  The claim's time is taken
** after the counts on purpose: a try the counts saw end ended before
** them, so no try of the kind is claimed at a time before one it replaced
** ended (the limits are judged on those intervals).
*/
static int claim_limited(due__flow *f, const due__flow_kind *k, int64_t left)
{
	due__flow_pass p = {.k = k};
	int rc;

	if ((rc = kind_room(f, &p, left)) < 0)
		return rc;
	if ((k->per_group &&
	     (rc = f->ops->groups(f->payload, k->kind, f->now, &p.g)) < 0) ||
	    (f->ops->restamp &&
	     (rc = f->ops->restamp(f->payload, &f->now)) < 0))
		goto done;
	p.now = f->now;
	if ((rc = f->ops->take_kind(f->payload, &p)) < 0)
		goto done;
	rc = kind_after(f, k, p.taken, p.held, p.oldest);
done:
	due__groups_free(&p.g);
	return rc;
}

/*
** Fill the rest of the claim from the kinds without limits: walk the
** distinct priorities in use, lowest first, one index probe each, and
** take each one's due tasks in due_at order until `want` are taken.
*/
static int claim_rest(due__flow *f, int want)
{
	int64_t prio = DUE_PRIORITY_MIN - 1, taken;
	bool none = false;
	int got = 0, rc;

	while (got < want) {
		if ((rc = f->ops->prio_next(f->payload, prio, &prio, &none)) <
		    0)
			return rc;
		if (none)
			break;
		if ((rc = f->ops->take_prio(f->payload, f, prio, want - got,
					    &taken)) < 0)
			return rc;
		got += (int)taken;
	}
	return 0;
}

/*
** The limited kind of task id with the room it has for one more claim
** (*k and p: kind_room, and room 0 when the task's group is at its
** limit), after locking the kind's row when the backend locks.  *k NULL
** when the task's kind has no limit; *skip when there is nothing to
** claim: the task is not due, or its kind is paused.
*/
static int id_room(due__flow *f, due_id id, const due__flow_kind **k,
		   bool *skip, due__flow_pass *p)
{
	char *kind = NULL, *grp = NULL;
	int64_t n;
	int rc;

	*k = NULL;
	if ((rc = f->ops->id_kind(f->payload, id, f->now, &kind, &grp)) < 0)
		goto done;
	*k = kind ? due__flow_kind_find(f->k, f->n, kind) : NULL;
	*skip = !kind || (*k && (*k)->paused);
	if (*skip || !*k || !due__flow_limited(*k)) {
		*k = NULL;
		goto done;
	}
	p->k = *k;
	if ((f->ops->lock && (rc = f->ops->lock(f->payload, f, kind)) < 0) ||
	    (rc = kind_room(f, p, 1)) < 0)
		goto done;
	if (p->room && (*k)->per_group && grp) {
		if ((rc = f->ops->running(f->payload, kind, grp, f->now, &n)) <
		    0)
			goto done;
		if (n >= (*k)->per_group)
			p->room = 0, p->why = DUE__HELD_GROUP;
	}
done:
	free(kind);
	free(grp);
	return rc;
}

/*
** Claim one task by id (due_claim_id): never one of a paused kind; one of
** a limited kind only when its limits have room (then it counts as a
** claim of the kind).  Nothing claimed when it cannot be.
*/
static int claim_id(due__flow *f, due_id id)
{
	const due__flow_kind *k = NULL;
	due__flow_pass p = {.room = 1};
	bool skip = false;
	int rc;

	if (f->filtered && (rc = id_room(f, id, &k, &skip, &p)) < 0)
		return rc;
	if (skip)
		return 0;
	if (k && p.room && f->ops->restamp &&
	    (rc = f->ops->restamp(f->payload, &f->now)) < 0)
		return rc;
	if (p.room &&
	    (rc = f->ops->take_id(f->payload, id, f->now, &p.taken)) < 0)
		return rc;
	return k ? kind_after(f, k, p.taken, p.room ? 0 : p.why, p.oldest) : 0;
}

int due__flow_claim(due__flow *f, const due_task_list *l, int limit,
		    due_id only_id)
{
	bool locks = false;
	int rc;

	if (only_id)
		return claim_id(f, only_id);
	for (size_t i = 0; f->ops->lock && i < f->n && !locks; i++)
		locks = due__flow_serves(f, &f->k[i]);
	if (locks && (rc = f->ops->lock(f->payload, f, NULL)) < 0)
		return rc;
	for (size_t i = 0; i < f->n && l->count < (size_t)limit; i++)
		if (due__flow_serves(f, &f->k[i]) &&
		    (rc = claim_limited(f, &f->k[i],
					limit - (int64_t)l->count)) < 0)
			return rc;
	if (l->count < (size_t)limit)
		return claim_rest(f, limit - (int)l->count);
	return 0;
}

void due__flow_finish(const due__flow *f, due_task_list *l)
{
	for (size_t i = 0; f->n && i < l->count; i++) {
		const due__flow_kind *k =
		    due__flow_kind_find(f->k, f->n, l->items[i].kind);
		if (!l->items[i].timeout_us && k)
			l->items[i].timeout_us = k->timeout_us;
	}
	l->retry_in_us = f->retry_in_us;
}

/* The live counts a kind read puts after DUE_KIND_COLS. */
static void kind_live(const due_rows *r, due_kind_info *k)
{
	k->running = r->ops->i64(r->cur, DUE_KC_COUNT);
	k->rate_used = r->ops->i64(r->cur, DUE_KC_COUNT + 1);
	k->due = r->ops->i64(r->cur, DUE_KC_COUNT + 2);
	k->group_running = r->ops->i64(r->cur, DUE_KC_COUNT + 3);
}

int due__flow_kinds_of(due_kind_info_list **out, const due_rows *rows)
{
	int rc;

	if ((rc = due__kind_info_list_alloc(out, 0)) == 0 &&
	    (rc = due__rows_kinds(rows, *out, kind_live)) < 0) {
		due_kind_info_list_free(*out);
		*out = NULL;
	}
	return rc;
}
