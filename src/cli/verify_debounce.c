/*
** verify_debounce.c - `due verify`'s debounce case (issue 38): many
** producers moving one key's task later at once.
**
**   debounce_racing_producers  8 processes, each with its own connection,
**       submit 1,250 tasks each (10,000 in all) of one kind and key with
**       on_key LATER, every one asking for a different due time an hour
**       ahead (producer p's j-th asks base + (8j + p + 1) ms), in no
**       order between the processes.  Afterwards exactly one task holds
**       the key, nothing was refused, and it is due at the latest time
**       asked for (base + 10 s) with that submit's payload: a move that
**       re-checked "later" anywhere but where it wrote would let an
**       earlier time win a race.
**
** Every wait has a deadline that only guards against a hang.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/verify.h"

#define MS 1000LL
#define HANG_MS 300000 /* guards against a hang; claims nothing */
#define PRODUCERS 8
#define EACH 1250

/*
** Producer p: EACH submits on its own connection; exits 0, or 1 when one
** was refused (after 5 tries of DUE_EBUSY), 2 when it cannot connect.
*/
static void produce(const char *url, int p, due_time base)
{
	due_db *db = NULL;
	int bad = 0;

	if (due_open(&db, url, NULL) < 0) {
		fprintf(stderr, "producer %d: %s\n", p, due_error_last());
		_exit(2);
	}
	for (int j = 0; j < EACH; j++) {
		due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
		due_submitted s;
		char pl[32];
		int rc, n = snprintf(pl, sizeof(pl), "%d-%d", p, j);

		o.key = "last-edit";
		o.on_key = DUE_ON_KEY_LATER;
		o.at = base + ((int64_t)j * PRODUCERS + p + 1) * MS;
		for (int t = 0; t < 5; t++)
			if ((rc = due_schedule(db, &s, "debounce", pl,
					       (size_t)n, &o)) != DUE_EBUSY)
				break;
		if (rc < 0) {
			fprintf(stderr, "producer %d: %s\n", p,
				due_error_last());
			bad = 1;
		}
	}
	due_close(db);
	_exit(bad);
}

void v_debounce_racing_producers(vctx *v)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	pid_t pid[PRODUCERS];
	int refused = 0, live = -1;
	due_time base = 0, due = 0;
	char payload[32] = "", want[32];
	double start = v_now_ms(), secs;

	if (due_now(v->db, &base) < 0) {
		v_case(v, "debounce_racing_producers", false,
		       "cannot read the store's clock: %s", due_error_last());
		return;
	}
	base += 3600 * 1000 * MS;
	for (int p = 0; p < PRODUCERS; p++)
		if ((pid[p] = v_fork()) == 0)
			produce(v->url, p, base);
	for (int p = 0; p < PRODUCERS; p++)
		refused += v_reap(pid[p], HANG_MS) != 0;
	secs = (v_now_ms() - start) / 1000.0;
	lo.kind = "debounce";
	lo.limit = 10;
	if (due_list(v->db, &l, &lo) == 0) {
		live = (int)l->count;
		if (l->count == 1) {
			due = l->items[0].due_at;
			snprintf(payload, sizeof(payload), "%.*s",
				 (int)l->items[0].payload_len,
				 (const char *)l->items[0].payload);
		}
		due_task_list_free(l);
	}
	snprintf(want, sizeof(want), "%d-%d", PRODUCERS - 1, EACH - 1);
	v_case(v, "debounce_racing_producers",
	       refused == 0 && live == 1 &&
		   due == base + (int64_t)PRODUCERS * EACH * MS &&
		   strcmp(payload, want) == 0,
	       "producers=%d submits=%d refused_producers=%d tasks=%d "
	       "due_after_base_ms=%lld (want %lld) payload=%s (want %s) "
	       "seconds=%.1f submits_per_s=%.0f",
	       PRODUCERS, PRODUCERS * EACH, refused, live,
	       (long long)((due - base) / MS), (long long)PRODUCERS * EACH,
	       payload, want, secs, PRODUCERS * EACH / (secs > 0 ? secs : 1));
}
