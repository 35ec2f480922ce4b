/*
** verify_after.c - `due verify`'s run-after cases (issue 38): children
** released by their parents' ends, with real `due work` processes.
**
**   after_parent_kill9_releases_once  A parent runs on worker A, whose
**       handler sleeps; A is killed -9.  Worker B takes the parent back
**       after its lease and runs it DONE.  Its child, and the child's own
**       child (a chain), each run exactly once, each after its parent's
**       DONE (claimed no earlier than the parent's last try ended), never
**       while the parent's first try was lost; and the child's handler got
**       the parent's result ($DUE_PARENT_RESULTS).
**   after_dead_parent_cancels_children  A parent with one attempt fails:
**       DEAD.  Its child, the child's child and a child of that parent and
**       another one are CANCELLED in the same step, each last_error naming
**       its parent, no handler ever ran for them; a child added with
**       after_any_end runs, and its handler is told the parent is DEAD.
**
** The handlers find the case directory in $DUEV_DIR; every wait has a
** deadline that only guards against a hang.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/verify.h"

#define HANG_MS 60000 /* guards against a hang; claims nothing */

/* A task of kind after the n ids; 0 when the submit failed. */
static due_id add_after(vctx *v, const char *kind, const due_id *after,
			size_t n, bool any_end)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};

	o.after = after;
	o.n_after = n;
	o.after_any_end = any_end;
	if (due_schedule(v->db, &s, kind, "", 0, &o) < 0) {
		fprintf(stderr, "%s: schedule after: %s\n", v->prog,
			due_error_last());
		return 0;
	}
	return s.id;
}

static bool ended(vctx *v, void *arg)
{
	due_task *t = v_get(v, *(due_id *)arg);
	bool r = t && t->state >= DUE_DONE;
	due_task_free(t);
	return r;
}

static bool claimed(vctx *v, void *arg)
{
	due_task *t = v_get(v, *(due_id *)arg);
	bool r = t && t->state == DUE_CLAIMED;
	due_task_free(t);
	return r;
}

/* How many lines of the case's `ran` file start with id. */
static int runs_of(vctx *v, due_id id)
{
	char p[1300], line[4096];
	FILE *f = fopen(v_path(v, "ran", p, sizeof(p)), "r");
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strtoll(line, NULL, 10) == id;
	if (f)
		fclose(f);
	return n;
}

/* Whether the `ran` line of id holds needle (its parent results). */
static bool ran_with(vctx *v, due_id id, const char *needle)
{
	char p[1300], line[4096];
	FILE *f = fopen(v_path(v, "ran", p, sizeof(p)), "r");
	bool r = false;

	while (f && fgets(line, sizeof(line), f))
		r |= strtoll(line, NULL, 10) == id && strstr(line, needle);
	if (f)
		fclose(f);
	return r;
}

/* Child c ran once, DONE with one try, claimed after parent p's end. */
static bool ran_after(vctx *v, due_id c, due_id p)
{
	due_task *ct = v_get(v, c), *pt = v_get(v, p);
	bool ok = ct && pt && ct->state == DUE_DONE && ct->n_attempts == 1 &&
		  pt->n_attempts > 0 &&
		  ct->attempts[0].claimed_at >=
		      pt->attempts[pt->n_attempts - 1].ended_at &&
		  runs_of(v, c) == 1;
	due_task_free(ct);
	due_task_free(pt);
	return ok;
}

/* The handler of every kind: "ID PARENT_RESULTS" to `ran`, and a result. */
#define RECORD                                                                 \
	"printf '%s %s\\n' \"$DUE_TASK_ID\" \"$DUE_PARENT_RESULTS\" >> "       \
	"\"$DUEV_DIR/ran\"; echo \"r$DUE_TASK_ID\""

void v_after_parent_kill9_releases_once(vctx *v)
{
	double start = v_now_ms();
	char want[64];
	bool ok;

	setenv("DUEV_DIR", v->dir, 1);
	due_id p = v_add(v, "after_p", 0, 5, 0, "x");
	due_id c = add_after(v, "after_c", &p, 1, false);
	due_id g = add_after(v, "after_c", &c, 1, false);
	pid_t a = v_worker(v, "a.log", "--owner", "A", "--lease", "1s",
			   "--kinds", "after_p", "--exec",
			   "echo $$ > \"$DUEV_DIR/a.pid\"; exec sleep 600",
			   (char *)NULL);
	ok = p && c && g && v_wait(v, HANG_MS, claimed, &p);
	v_kill(a, SIGKILL);
	int code = v_reap(a, HANG_MS);
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--poll", "50ms", "--exec", RECORD, (char *)NULL);
	ok &= v_wait(v, HANG_MS, ended, &g);
	v_kill(b, SIGTERM);
	v_reap(b, HANG_MS);
	v_kill_orphan(v, "a.pid");

	due_task *pt = v_get(v, p), *ct = v_get(v, c), *gt = v_get(v, g);
	bool parent = pt && pt->state == DUE_DONE && pt->n_attempts == 2 &&
		      !strcmp(pt->attempts[0].outcome, "LEASE_EXPIRED");
	snprintf(want, sizeof(want), "\"%lld\":{\"result\":\"r%lld",
		 (long long)p, (long long)p);
	bool chain = ran_after(v, c, p) && ran_after(v, g, c);
	bool results = ran_with(v, c, want);
	v_case(v, "after_parent_kill9_releases_once",
	       ok && code == 137 && parent && chain && results,
	       "exit=%d parent=%s/%d tries child=%s/%d runs grandchild=%s/%d "
	       "runs in_order=%s parent_results=%s seconds=%.1f",
	       code, pt ? due_state_name(pt->state) : "?",
	       pt ? (int)pt->n_attempts : 0,
	       ct ? due_state_name(ct->state) : "?", runs_of(v, c),
	       gt ? due_state_name(gt->state) : "?", runs_of(v, g),
	       chain ? "yes" : "no", results ? "yes" : "no",
	       (v_now_ms() - start) / 1000.0);
	due_task_free(pt);
	due_task_free(ct);
	due_task_free(gt);
}

/* Task id is CANCELLED, never ran, its last_error naming parent. */
static bool cancelled_by(vctx *v, due_id id, due_id parent)
{
	char want[40];
	due_task *t = v_get(v, id);
	bool ok;

	snprintf(want, sizeof(want), "parent task %lld ", (long long)parent);
	ok = t && t->state == DUE_CANCELLED && t->n_attempts == 0 &&
	     t->last_error && strstr(t->last_error, want) &&
	     runs_of(v, id) == 0;
	due_task_free(t);
	return ok;
}

void v_after_dead_parent_cancels_children(vctx *v)
{
	double start = v_now_ms();
	char want[64];
	bool ok;

	setenv("DUEV_DIR", v->dir, 1);
	due_id p = v_add(v, "after_hold", 3600000000LL, 1, 0, "x");
	due_id q = v_add(v, "after_ok", 3600000000LL, 5, 0, "x");
	due_id pq[2] = {p, q};
	due_id c = add_after(v, "after_c", &p, 1, false);
	due_id g = add_after(v, "after_c", &c, 1, false);
	due_id both = add_after(v, "after_c", pq, 2, false);
	due_id any = add_after(v, "after_c", &p, 1, true);
	pid_t w =
	    v_worker(v, "w.log", "--lease", "2s", "--exec",
		     "case $DUE_KIND in after_hold) echo no >&2; exit 1;; "
		     "*) " RECORD ";; esac",
		     (char *)NULL);
	/* both parents due now: p fails once and is DEAD */
	due_reschedule_opts ro = DUE_RESCHEDULE_OPTS_INIT;
	due_reschedule_outcome rs;
	ok = p && q && c && g && both && any &&
	     due_reschedule(v->db, &rs, p, &ro) == 0 &&
	     due_reschedule(v->db, &rs, q, &ro) == 0;
	ok &= v_wait(v, HANG_MS, ended, &p) && v_wait(v, HANG_MS, ended, &q) &&
	      v_wait(v, HANG_MS, ended, &any);
	v_kill(w, SIGTERM);
	v_reap(w, HANG_MS);

	due_task *pt = v_get(v, p);
	bool dead = pt && pt->state == DUE_DEAD;
	due_task_free(pt);
	bool cancelled = cancelled_by(v, c, p) && cancelled_by(v, g, c) &&
			 cancelled_by(v, both, p);
	snprintf(want, sizeof(want),
		 "\"%lld\":{\"result\":null,\"state\":"
		 "\"DEAD\"}",
		 (long long)p);
	bool any_ran = ran_after(v, any, p) && ran_with(v, any, want);
	v_case(v, "after_dead_parent_cancels_children",
	       ok && dead && cancelled && any_ran,
	       "parent_dead=%s children_cancelled=%s any_end_child_ran=%s "
	       "seconds=%.1f",
	       dead ? "yes" : "no", cancelled ? "yes" : "no",
	       any_ran ? "yes" : "no", (v_now_ms() - start) / 1000.0);
}
