/*
** verify_resched.c - `due verify`'s reschedule case (issue 38): a
** reschedule racing the claim of real `due work` processes.
**
**   race_reschedule_vs_claim  200 tasks, each due 20 ms after its submit,
**       each rescheduled once 10..40 ms after its submit to 60 ms from the
**       store's now, while two workers (wheel and notifications, 4 slots
**       each) claim.  Every answer must say what happened: RESCHEDULED
**       (the task ran once, claimed at or after its new due time, which
**       its row holds), TOO_LATE (it ran once, at its old due time, which
**       its row still holds) or ALREADY_FINISHED (the same, the try over
**       before the answer).  "Ran once" is the handlers' word: each run
**       appends the task id to a file.
**
** The handlers find the case directory in $DUEV_DIR, as in
** verify_cases.c; every wait has a deadline that only guards against a
** hang.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/verify.h"

#define MS 1000LL
#define HANG_MS 60000 /* guards against a hang; claims nothing */
#define ROUNDS 200

static bool finished(vctx *v, void *arg)
{
	due_task *t = v_get(v, *(due_id *)arg);
	bool r = t && t->state >= DUE_DONE;
	due_task_free(t);
	return r;
}

/* How many times the handlers ran each of the n ids (runs[i]). */
static void count_runs(vctx *v, const due_id *ids, int *runs, int n)
{
	char p[1300], line[64];
	FILE *f = fopen(v_path(v, "ran", p, sizeof(p)), "r");

	memset(runs, 0, sizeof(*runs) * (size_t)n);
	while (f && fgets(line, sizeof(line), f)) {
		long long id = strtoll(line, NULL, 10);
		for (int i = 0; i < n; i++)
			runs[i] += ids[i] == id;
	}
	if (f)
		fclose(f);
}

/* Whether task i's row and runs agree with the answer it got. */
static bool consistent(vctx *v, due_id id, due_time old_due,
		       due_reschedule_outcome out, int runs)
{
	due_task *t = v_get(v, id);
	bool ok = t && t->state == DUE_DONE && t->n_attempts == 1 &&
		  runs == 1 && t->attempts[0].claimed_at >= t->due_at;

	if (ok && out == DUE_RESCHEDULE_RESCHEDULED)
		ok = t->due_at > old_due;
	else if (ok)
		ok = (out == DUE_RESCHEDULE_TOO_LATE ||
		      out == DUE_RESCHEDULE_ALREADY_FINISHED) &&
		     t->due_at == old_due;
	due_task_free(t);
	return ok;
}

void v_race_reschedule_vs_claim(vctx *v)
{
	static due_id ids[ROUNDS];
	static due_time due_at[ROUNDS];
	static due_reschedule_outcome out[ROUNDS];
	static int runs[ROUNDS];
	int n_out[4] = {0}, violations = 0;
	due_reschedule_opts o = DUE_RESCHEDULE_OPTS_INIT;
	pid_t w[2];
	double start = v_now_ms();

	setenv("DUEV_DIR", v->dir, 1);
	for (int i = 0; i < 2; i++)
		w[i] = v_worker(v, i ? "w2.log" : "w1.log", "--exec",
				"echo \"$DUE_TASK_ID\" >> \"$DUEV_DIR/ran\"",
				"--concurrency", "4", "--lease", "2s",
				(char *)NULL);
	v_sleep_ms(200); /* let the workers connect */
	srand(38);
	o.delay_us = 60 * MS;
	for (int i = 0; i < ROUNDS; i++) {
		due_task *t;
		ids[i] = v_add(v, "race", 20 * MS, 1, 0, NULL);
		t = v_get(v, ids[i]);
		due_at[i] = t ? t->due_at : 0;
		due_task_free(t);
		v_sleep_ms(10 + rand() % 31);
		if (due_reschedule(v->db, &out[i], ids[i], &o) < 0)
			out[i] = DUE_RESCHEDULE_NOT_FOUND;
	}
	for (int i = 0; i < ROUNDS; i++)
		v_wait(v, HANG_MS, finished, &ids[i]);
	for (int i = 0; i < 2; i++)
		if (w[i] > 0)
			kill(w[i], SIGTERM);
	for (int i = 0; i < 2; i++)
		v_reap(w[i], HANG_MS);
	count_runs(v, ids, runs, ROUNDS);
	for (int i = 0; i < ROUNDS; i++) {
		n_out[out[i] < 4 ? out[i] : 3]++;
		violations +=
		    !consistent(v, ids[i], due_at[i], out[i], runs[i]);
	}
	v_case(v, "race_reschedule_vs_claim", violations == 0,
	       "rounds=%d violations=%d outcomes={RESCHEDULED/ran_at_new=%d, "
	       "TOO_LATE/ran_at_old=%d, ALREADY_FINISHED/ran_at_old=%d, "
	       "NOT_FOUND=%d} seconds=%.1f",
	       ROUNDS, violations, n_out[0], n_out[1], n_out[2], n_out[3],
	       (v_now_ms() - start) / 1000.0);
}
