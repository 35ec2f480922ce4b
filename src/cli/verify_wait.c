/*
** verify_wait.c - `due verify`'s case of waiting for a task's end (issue
** 38): due_wait on the case's handle while a real `due work` process runs
** the tasks.
**
** wait_returns_result: a task whose handler writes a result after a gate
** the case opens once it waits, one that fails for good (DEAD), and one
** due in an hour waited for 300 ms.  Passes when the waits return DONE
** with that result, DEAD with the handler's error, and DUE_ETIMEDOUT with
** the task still SCHEDULED after at least 300 ms; and when the first one
** came back within 4.5 s of the gate opening, before the 5 s re-read that
** would find it without a notification (a store that polls reads again
** within 1 s).  The figure printed is that time.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/verify.h"

#define SEC 1000000LL

void v_wait_returns_result(vctx *v)
{
	due_task *t = NULL, *d = NULL, *l = NULL;
	double t0, woke, waited;
	int rc, rd, rl;
	char gate[1400];

	setenv("DUEV_DIR", v->dir, 1);
	due_id id = v_add(v, "w", 0, 5, SEC, "x");
	due_id dead = v_add(v, "dead", 0, 1, SEC, "x");
	due_id later = v_add(v, "w", 3600 * SEC, 5, SEC, "x");
	pid_t p = v_worker(
	    v, "w.log", "--handler",
	    "w=while [ ! -e \"$DUEV_DIR/gate\" ]; do sleep 0.05; done; "
	    "printf result-%s \"$DUE_TASK_ID\"",
	    "--handler", "dead=echo it died >&2; exit 3", (char *)NULL);
	/* the gate opens once this process waits (a second later) */
	v_path(v, "gate", gate, sizeof(gate));
	pid_t g = fork();
	if (g == 0) {
		v_sleep_ms(1000);
		FILE *f = fopen(gate, "w");
		if (f)
			fclose(f);
		_exit(0);
	}
	t0 = v_now_ms();
	rc = due_wait(v->db, &t, id, 60 * SEC);
	woke = v_now_ms() - t0 - 1000; /* after the gate opened */
	rd = due_wait(v->db, &d, dead, 60 * SEC);
	t0 = v_now_ms();
	rl = due_wait(v->db, &l, later, 300000);
	waited = v_now_ms() - t0;
	v_reap(g, 5000);
	kill(p, SIGTERM);
	v_reap(p, 60000);
	char want[64];
	snprintf(want, sizeof(want), "result-%lld", (long long)id);
	bool done = rc == 0 && t && t->state == DUE_DONE && t->has_result &&
		    t->result_len == strlen(want) &&
		    !memcmp(t->result, want, t->result_len);
	bool died = rd == 0 && d && d->state == DUE_DEAD && d->last_error &&
		    strstr(d->last_error, "it died");
	bool timed = rl == DUE_ETIMEDOUT && l && l->state == DUE_SCHEDULED &&
		     waited >= 300;
	v_case(v, "wait_returns_result", done && died && timed && woke < 4500,
	       "done=%s dead=%s timeout=%s after_ms=%.0f "
	       "woken_ms_after_gate=%.0f",
	       t ? due_state_name(t->state) : due_error_name(rc),
	       d ? due_state_name(d->state) : due_error_name(rd),
	       rl == DUE_ETIMEDOUT ? "DUE_ETIMEDOUT" : due_error_name(rl),
	       waited, woke);
	due_task_free(t);
	due_task_free(d);
	due_task_free(l);
}
