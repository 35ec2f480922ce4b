/*
** verify_cases.c - the contract cases of `due verify` (seed 000), run with
** real `due work` processes against the scratch store of each case.
**
** Handlers are shell commands; they find the case directory in $DUEV_DIR
** (set before each spawn; not a DUE_ variable, so the worker passes it on)
** and record their effects there by appending lines to files, which
** O_APPEND keeps whole across processes.  "Local effect" means a result
** committed with DONE; "external effect" is a file the handler writes
** before it commits, which no store transaction can take back.
**
** No timing assumptions.  What must still be running when the case acts
** blocks on a file the case creates (or never does: the worker stops it),
** not on a sleep; what must have happened is waited for as a condition.
** Every wait has a deadline of HANG_MS, which only guards against a hang
** and is no claim about speed; the few fixed pauses left (an outage, a
** window to watch) are lower bounds, never "X is done by then".
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/verify.h"

#define SEC 1000000LL
#define MS 1000LL
#define HANG_MS                                                                \
	60000 /* a deadline guards against a hang, it claims nothing           \
	       */

static void set_dir_env(vctx *v) { setenv("DUEV_DIR", v->dir, 1); }

static int64_t count_state(vctx *v, due_state s)
{
	due_stats st;
	return due_stats_get(v->db, &st) == 0 ? st.counts[s] : -1;
}

static bool all_done(vctx *v, void *arg)
{
	return count_state(v, DUE_DONE) >= *(int *)arg;
}

static bool task_is(vctx *v, due_id id, due_state s, int32_t min_attempt)
{
	due_task *t = v_get(v, id);
	bool r = t && t->state == s && t->attempt >= min_attempt;
	due_task_free(t);
	return r;
}

typedef struct want {
	due_id id;
	due_state state;
	int32_t attempt;
} want;

static bool want_state(vctx *v, void *arg)
{
	want *w = arg;
	return task_is(v, w->id, w->state, w->attempt);
}

static bool terminal(vctx *v, void *arg)
{
	due_task *t = v_get(v, *(due_id *)arg);
	bool r = t && t->state >= DUE_DONE;
	due_task_free(t);
	return r;
}

static void stop_worker(pid_t pid)
{
	if (pid > 0) {
		v_kill(pid, SIGTERM);
		v_reap(pid, HANG_MS);
	}
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/*
** The first task id that the file `effects` (one id a line) names twice,
** or 0.  With no worker failing or crashing, a second run of one task
** means two workers held the same claim.
*/
static long long run_twice(vctx *v)
{
	char p[1300], line[64];
	FILE *f = fopen(v_path(v, "effects", p, sizeof(p)), "r");
	int64_t *ids = NULL, *n2;
	long long twice = 0;
	size_t n = 0, cap = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (n == cap) {
			cap = cap ? cap * 2 : 512;
			if (!(n2 = realloc(ids, cap * sizeof(*ids))))
				break;
			ids = n2;
		}
		ids[n++] = (int64_t)strtoll(line, NULL, 10);
	}
	fclose(f);
	if (ids)
		qsort(ids, n, sizeof(*ids), cmp_i64);
	for (size_t i = 1; i < n && !twice; i++)
		if (ids[i] == ids[i - 1])
			twice = ids[i];
	free(ids);
	return twice;
}

/*
** Say plainly what duplicate claims mean (an engine that accepts FOR
** UPDATE SKIP LOCKED but does not lock, TiDB's way): into out, "" when
** every task was claimed and run once.
*/
static void dup_diagnosis(vctx *v, const due_task_list *l, char *out, size_t n)
{
	long long twice;

	out[0] = '\0';
	for (size_t i = 0; i < l->count; i++) {
		const due_task *t = &l->items[i];
		if (t->n_attempts > 1) {
			snprintf(
			    out, n,
			    " diagnosis=\"task %lld was claimed %zu times "
			    "(by %s, then %s) though no worker failed: the "
			    "store does not lock rows (SKIP LOCKED "
			    "ignored?)\"",
			    (long long)t->id, t->n_attempts,
			    t->attempts[0].worker, t->attempts[1].worker);
			return;
		}
	}
	if ((twice = run_twice(v)) != 0)
		snprintf(out, n,
			 " diagnosis=\"two workers claimed task %lld and ran "
			 "it twice: the store does not lock rows (SKIP LOCKED "
			 "ignored?)\"",
			 twice);
}

/* ------------------------------------------------------------------ */

void v_normal_three_workers(vctx *v)
{
	enum { N = 300 };
	const char *cmd = "echo \"$DUE_TASK_ID\" >> \"$DUEV_DIR/effects\"";
	pid_t w[3];
	int n = N, claims = 0, dups = 0, early = 0, not_done = 0;
	int64_t late[N];
	due_task_list *l = NULL;
	due_list_opts lo = DUE_LIST_OPTS_INIT;

	set_dir_env(v);
	for (int i = 0; i < N; i++)
		v_add(v, "normal", (int64_t)i * 2 * SEC / N, 5, 0, "x");
	for (int i = 0; i < 3; i++) {
		char owner[16], log[16];
		snprintf(owner, sizeof(owner), "w%d", i + 1);
		snprintf(log, sizeof(log), "w%d.log", i + 1);
		w[i] =
		    v_worker(v, log, "--exec", cmd, "--poll", "10ms", "--owner",
			     owner, "--concurrency", "4", (char *)NULL);
	}
	bool ok = v_wait(v, HANG_MS, all_done, &n);
	for (int i = 0; i < 3; i++)
		stop_worker(w[i]);
	lo.limit = N;
	lo.attempts = true;
	if (due_list(v->db, &l, &lo) < 0) {
		v_case(v, "normal_three_workers", false, "error=list");
		return;
	}
	for (size_t i = 0; i < l->count; i++) {
		const due_task *t = &l->items[i];
		claims += (int)t->n_attempts;
		dups += t->n_attempts > 1;
		not_done += t->state != DUE_DONE;
		for (size_t k = 0; k < t->n_attempts; k++)
			early +=
			    t->attempts[k].claimed_at < t->attempts[k].due_at;
		late[i] =
		    t->n_attempts ? t->attempts[0].claimed_at - t->due_at : 0;
	}
	qsort(late, l->count, sizeof(late[0]), cmp_i64);
	int effects = v_lines(v, "effects");
	size_t c = l->count;
	char why[512];
	dup_diagnosis(v, l, why, sizeof(why));
	v_case(
	    v, "normal_three_workers",
	    ok && c == N && claims == N && dups == 0 && effects == N &&
		early == 0 && not_done == 0,
	    "tasks=%zu claims=%d dup_claims=%d effects=%d early=%d p50_ms=%.1f "
	    "p99_ms=%.1f max_ms=%.1f%s",
	    c, claims, dups, effects, early,
	    c ? (double)late[c / 2] / 1000.0 : 0,
	    c ? (double)late[(c * 99 + 99) / 100 - 1] / 1000.0 : 0,
	    c ? (double)late[c - 1] / 1000.0 : 0, why);
	due_task_list_free(l);
}

void v_boundary_not_before_due(vctx *v)
{
	enum { N = 50 };
	int claimed = 0, early = 0, polls = 0;
	double end = v_now_ms() + HANG_MS;

	for (int i = 0; i < N; i++)
		v_add(v, "nbd", 200 * MS + (int64_t)i * 10 * MS, 5, 0, NULL);
	while (claimed < N && v_until(end)) {
		due_task_list *l = NULL;
		if (due_claim(v->db, &l, "probe", NULL, 0, N, 30 * SEC) < 0)
			break;
		polls++;
		for (size_t i = 0; i < l->count; i++) {
			due_task *t = v_get(v, l->items[i].id);
			if (t && t->n_attempts &&
			    t->attempts[0].claimed_at < t->attempts[0].due_at)
				early++;
			due_task_free(t);
		}
		claimed += (int)l->count;
		due_task_list_free(l);
		v_sleep_ms(1);
	}
	v_case(v, "boundary_not_before_due", claimed == N && early == 0,
	       "tasks=%d claimed=%d early=%d polls=%d", N, claimed, early,
	       polls);
}

void v_boundary_claim_limit(vctx *v)
{
	int sizes[4] = {-1, -1, -1, -1};

	for (int i = 0; i < 25; i++)
		v_add(v, "lim", 0, 5, 0, NULL);
	for (int i = 0; i < 4; i++) {
		due_task_list *l = NULL;
		if (due_claim(v->db, &l, "probe", NULL, 0, 10, 30 * SEC) == 0)
			sizes[i] = (int)l->count;
		due_task_list_free(l);
	}
	v_case(v, "boundary_claim_limit",
	       sizes[0] == 10 && sizes[1] == 10 && sizes[2] == 5 &&
		   sizes[3] == 0,
	       "limit=10 tasks=25 claims=%d,%d,%d,%d", sizes[0], sizes[1],
	       sizes[2], sizes[3]);
}

void v_cancel_semantics(vctx *v)
{
	due_cancel_outcome waiting, again, running, done_o, unknown;
	due_extend_outcome ext;
	due_complete_outcome co, dco;
	due_task *t = NULL;
	bool ok = true;

	due_id w = v_add(v, "cs", 60 * SEC, 5, 0, NULL);
	ok &= due_cancel(v->db, &waiting, w) == 0;
	ok &= due_cancel(v->db, &again, w) == 0;
	due_id r = v_add(v, "cs", 0, 5, 0, NULL);
	ok &= due_claim_id(v->db, &t, r, "probe", 30 * SEC) == 0;
	due_task_free(t);
	ok &= due_cancel(v->db, &running, r) == 0;
	ok &= due_extend(v->db, &ext, r, 1, 30 * SEC) == 0;
	ok &= due_complete(v->db, &co, r, 1, "effect", 6) == 0;
	due_task *rt = v_get(v, r);
	due_id d = v_add(v, "cs", 0, 5, 0, NULL);
	ok &= due_claim_id(v->db, &t, d, "probe", 30 * SEC) == 0;
	due_task_free(t);
	ok &= due_complete(v->db, &dco, d, 1, "effect", 6) == 0;
	ok &= due_cancel(v->db, &done_o, d) == 0;
	ok &= due_cancel(v->db, &unknown, 987654321) == 0;
	bool pass = ok && rt && waiting == DUE_CANCEL_CANCELLED &&
		    again == DUE_CANCEL_ALREADY_CANCELLED &&
		    running == DUE_CANCEL_REQUESTED &&
		    ext == DUE_EXTEND_CANCEL_REQUESTED &&
		    co == DUE_COMPLETE_CANCELLED_BEFORE_COMMIT &&
		    rt->state == DUE_CANCELLED && !rt->has_result &&
		    done_o == DUE_CANCEL_TOO_LATE &&
		    unknown == DUE_CANCEL_NOT_FOUND;
	v_case(v, "cancel_semantics", pass,
	       "waiting=%s again=%s running=%s extend=%s complete=%s final=%s "
	       "effects=%d done=%s unknown=%s",
	       due_cancel_outcome_name(waiting), due_cancel_outcome_name(again),
	       due_cancel_outcome_name(running),
	       ext == DUE_EXTEND_OK ? "true" : "false",
	       due_complete_outcome_name(co),
	       rt ? due_state_name(rt->state) : "?", rt && rt->has_result,
	       due_cancel_outcome_name(done_o),
	       due_cancel_outcome_name(unknown));
	due_task_free(rt);
}

void v_race_due_vs_cancel(vctx *v)
{
	enum { ROUNDS = 200 };
	due_id ids[ROUNDS];
	due_cancel_outcome out[ROUNDS];
	int c_c = 0, r_c = 0, t_d = 0, violations = 0;
	pid_t w;
	double start;

	set_dir_env(v);
	w = v_worker(v, "w.log", "--exec", "true", "--poll", "2ms",
		     "--concurrency", "4", "--lease", "2s", (char *)NULL);
	v_sleep_ms(200); /* let the worker connect */
	srand(42);
	start = v_now_ms();
	for (int i = 0; i < ROUNDS; i++) {
		/* task i is due 20 ms after its submit; cancel lands -10..+20
		   ms around that, so all three outcomes occur */
		ids[i] = v_add(v, "race", 20 * MS, 1, 0, NULL);
		int wait_ms = 10 + rand() % 31;
		v_sleep_ms(wait_ms);
		if (due_cancel(v->db, &out[i], ids[i]) < 0)
			out[i] = DUE_CANCEL_NOT_FOUND;
	}
	for (int i = 0; i < ROUNDS; i++)
		v_wait(v, HANG_MS, terminal, &ids[i]);
	stop_worker(w);
	for (int i = 0; i < ROUNDS; i++) {
		due_task *t = v_get(v, ids[i]);
		int effects = t && t->state == DUE_DONE && t->has_result;
		due_state fs = t ? t->state : DUE_SCHEDULED;
		if (out[i] == DUE_CANCEL_CANCELLED && fs == DUE_CANCELLED &&
		    !effects)
			c_c++;
		else if (out[i] == DUE_CANCEL_REQUESTED &&
			 fs == DUE_CANCELLED && !effects)
			r_c++;
		else if (out[i] == DUE_CANCEL_TOO_LATE && fs == DUE_DONE &&
			 effects)
			t_d++;
		else
			violations++;
		due_task_free(t);
	}
	v_case(v, "race_due_vs_cancel", violations == 0,
	       "rounds=%d violations=%d "
	       "outcomes={CANCELLED/CANCELLED/effects=0=%d, "
	       "REQUESTED/CANCELLED/effects=0=%d, TOO_LATE/DONE/effects=1=%d} "
	       "seconds=%.1f",
	       ROUNDS, violations, c_c, r_c, t_d,
	       (v_now_ms() - start) / 1000.0);
}

void v_retry_backoff_then_done(vctx *v)
{
	const char *cmd =
	    "[ \"$DUE_ATTEMPT\" -ge 3 ] || { echo \"fail $DUE_ATTEMPT\" >&2;"
	    " exit 1; }; echo done >> \"$DUEV_DIR/effects\"";
	want w = {0, DUE_DONE, 3};
	double gap[2] = {0, 0};
	bool gaps_ok = false;

	set_dir_env(v);
	w.id = v_add(v, "retry", 0, 3, 200 * MS, NULL);
	pid_t p =
	    v_worker(v, "w.log", "--exec", cmd, "--poll", "10ms", (char *)NULL);
	bool ok = v_wait(v, HANG_MS, want_state, &w);
	stop_worker(p);
	due_task *t = v_get(v, w.id);
	if (t && t->n_attempts == 3) {
		for (int i = 0; i < 2; i++)
			gap[i] = (double)(t->attempts[i + 1].claimed_at -
					  t->attempts[i].ended_at) /
				 1000.0;
		gaps_ok = gap[0] >= 200.0 && gap[1] >= 400.0;
	}
	int effects = v_lines(v, "effects");
	v_case(
	    v, "retry_backoff_then_done", ok && gaps_ok && effects == 1,
	    "final=%s attempt=%d backoff_ms=200 gaps_ms=[%.0f,%.0f] effects=%d",
	    t ? due_state_name(t->state) : "?", t ? t->attempt : 0, gap[0],
	    gap[1], effects);
	due_task_free(t);
}

void v_retry_exhausted_dead(vctx *v)
{
	want w = {0, DUE_DEAD, 3};

	set_dir_env(v);
	w.id = v_add(v, "dead", 0, 3, 50 * MS, NULL);
	pid_t p = v_worker(v, "w.log", "--exec", "echo boom >&2; exit 2",
			   "--poll", "10ms", (char *)NULL);
	bool ok = v_wait(v, HANG_MS, want_state, &w);
	stop_worker(p);
	due_task *t = v_get(v, w.id);
	bool err = t && t->last_error && strstr(t->last_error, "boom");
	v_case(v, "retry_exhausted_dead",
	       ok && err && t->n_attempts == 3 && !t->has_result,
	       "final=%s attempts=%zu effects=%d last_error=\"%s\"",
	       t ? due_state_name(t->state) : "?", t ? t->n_attempts : 0,
	       t && t->has_result, t && t->last_error ? t->last_error : "");
	due_task_free(t);
}

/* Kill the handler process group a crashed worker left behind. */
typedef struct watch {
	due_id id;
	int stolen;
} watch;

/*
** Watch task `id`, held by attempt 1, for ms: count the renewals of its
** lease seen, and how often attempt 1 was found taken back before the
** end of the lease last seen for it: reclaimed (LEASE_EXPIRED) before
** that end, or attempt 2 claimed before it and before attempt 1 ended.
** A holder starved of CPU may miss a renewal and lose its lease, or its
** own lease clock may stop and fail the try first (its renewals answered
** too late); that is the contract working, not a theft.  Both ends are
** the store's clock.
*/
static void watch_lease(vctx *v, due_id id, double ms, int *renewals,
			int *stolen)
{
	due_time until = 0;
	*renewals = *stolen = 0;
	for (double end = v_now_ms() + ms; v_until(end); v_sleep_ms(20)) {
		due_task *t = v_get(v, id);
		if (t && t->attempt == 1 && t->state == DUE_CLAIMED) {
			*renewals += until && t->lease_until > until;
			if (t->lease_until > until)
				until = t->lease_until;
		} else if (t && t->n_attempts > 0) {
			const due_attempt *a1 = &t->attempts[0];
			due_time free_at = v_slot_free_at(until, a1);
			if ((free_at < until &&
			     !strcmp(a1->outcome, "LEASE_EXPIRED")) ||
			    (t->n_attempts > 1 &&
			     t->attempts[1].claimed_at < free_at))
				(*stolen)++;
		}
		due_task_free(t);
	}
}

void v_crash_kill9_lease_retry(vctx *v)
{
	want claimed = {0, DUE_CLAIMED, 1}, done = {0, DUE_DONE, 2};
	int stolen = 0, renewals = 0, code;
	double t_kill, t_reclaim = -1;

	set_dir_env(v);
	claimed.id = done.id = v_add(v, "crash", 0, 5, 0, "x");
	pid_t a = v_worker(
	    v, "a.log", "--owner", "A", "--lease", "1s", "--exec",
	    "echo $$ > \"$DUEV_DIR/a.pid\"; exec sleep 600", (char *)NULL);
	bool ok = v_wait(v, HANG_MS, want_state, &claimed);
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--poll", "20ms", "--exec",
			   "echo B >> \"$DUEV_DIR/effects\"", (char *)NULL);
	/* A is alive and renewing for 2.5 leases: B must never take the task
	   while A's lease runs */
	watch_lease(v, claimed.id, 2500, &renewals, &stolen);
	v_kill(a, SIGKILL);
	t_kill = v_now_ms();
	code = v_reap(a, HANG_MS);
	for (double end = t_kill + HANG_MS; v_until(end); v_sleep_ms(5)) {
		due_task *t = v_get(v, claimed.id);
		bool back = t && t->n_attempts &&
			    strcmp(t->attempts[0].outcome, "RUNNING");
		due_task_free(t);
		if (back) {
			t_reclaim = v_now_ms();
			break;
		}
	}
	ok &= v_wait(v, HANG_MS, want_state, &done);
	stop_worker(b);
	v_kill_orphan(v, "a.pid");
	due_task *t = v_get(v, done.id);
	bool hist = t && t->n_attempts == 2 &&
		    v_killed_try_end_ok(v, "a.log", &t->attempts[0]) &&
		    !strcmp(t->attempts[0].worker, "A") &&
		    !strcmp(t->attempts[1].worker, "B");
	int effects = v_lines(v, "effects");
	v_case(v, "crash_kill9_lease_retry",
	       ok && code == 137 && stolen == 0 && hist && effects == 1,
	       "exit=%d stolen_while_alive=%d renewals_seen=%d "
	       "kill_to_reclaim_ms=%.0f final=%s attempt=%d claims=[1,%s|2,%s] "
	       "attempt1=%s effects=%d",
	       code, stolen, renewals,
	       t_reclaim < 0 ? -1.0 : t_reclaim - t_kill,
	       t ? due_state_name(t->state) : "?", t ? t->attempt : 0,
	       t && t->n_attempts > 0 ? t->attempts[0].worker : "-",
	       t && t->n_attempts > 1 ? t->attempts[1].worker : "-",
	       t && t->n_attempts > 0 ? t->attempts[0].outcome : "-", effects);
	due_task_free(t);
}

static bool late_marked(vctx *v, void *arg)
{
	due_task *t = v_get(v, *(due_id *)arg);
	bool r = t && t->n_attempts > 0 && t->attempts[0].late_commit &&
		 !strcmp(t->attempts[0].late_commit, "REJECTED_STALE");
	due_task_free(t);
	return r;
}

/* Create an empty file in the case dir (a gate a handler waits for). */
static void touch(vctx *v, const char *name)
{
	char p[1300];
	FILE *f = fopen(v_path(v, name, p, sizeof(p)), "w");
	if (f)
		fclose(f);
}

void v_sigstop_late_commit_rejected(vctx *v)
{
	want claimed = {0, DUE_CLAIMED, 1}, done = {0, DUE_DONE, 2};
	char after_b[64] = "?";

	set_dir_env(v);
	claimed.id = done.id = v_add(v, "stall", 0, 5, 0, "x");
	/* A's handler runs until released, then answers A.  A's lease is
	   3 s: its handler must answer before the lease clock's kill time,
	   which its guard keeps while A is stopped (spawn.c) */
	pid_t a =
	    v_worker(v, "a.log", "--owner", "A", "--lease", "3s", "--exec",
		     ": > \"$DUEV_DIR/a.started\"; until [ -e \"$DUEV_DIR/"
		     "a.release\" ]; do sleep 0.02; done; echo A; "
		     ": > \"$DUEV_DIR/a.finished\"",
		     (char *)NULL);
	bool ok = v_wait(v, HANG_MS, want_state, &claimed);
	ok &= v_wait(v, HANG_MS, v_file_exists, "a.started");
	/* the worker stops (a pause, a GC) after its handler's work and
	   before its commit: the handler answers while A cannot take it */
	v_kill(a, SIGSTOP);
	touch(v, "a.release");
	ok &= v_wait(v, HANG_MS, v_file_exists, "a.finished");
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--poll", "20ms", "--exec", "echo B", (char *)NULL);
	ok &= v_wait(v, HANG_MS, want_state, &done);
	due_task *t = v_get(v, done.id);
	if (t && t->has_result)
		snprintf(after_b, sizeof(after_b), "%.*s",
			 (int)strcspn((char *)t->result, "\n"),
			 (char *)t->result);
	due_task_free(t);
	/* A resumes with its handler's answer in hand: its late commit is a
	   complete, not a fail, and the store refuses it */
	v_kill(a, SIGCONT);
	bool rejected = v_wait(v, HANG_MS, late_marked, &done.id);
	stop_worker(a);
	stop_worker(b);
	t = v_get(v, done.id);
	bool final_b = t && t->state == DUE_DONE && t->attempt == 2 &&
		       t->has_result && t->result[0] == 'B';
	bool lost_seen = v_log_has(v, "a.log", "lease lost");
	v_case(v, "sigstop_late_commit_rejected", ok && rejected && final_b,
	       "after_b=[DONE,2,%s] final=[%s,%d,%c] old_worker=[attempt=1 "
	       "outcome=%s lease_lost_seen=%s]",
	       after_b, t ? due_state_name(t->state) : "?", t ? t->attempt : 0,
	       t && t->has_result ? t->result[0] : '-',
	       rejected ? "REJECTED_STALE" : "none",
	       lost_seen ? "true" : "false");
	due_task_free(t);
}

/*
** A fake external service that deduplicates by key: mkdir is atomic, so
** only the first call with a key applies.  Attempt 1 crashes its worker
** (kill -9 of the worker: the parent of the spawner that started the
** command's guard, see spawn.c) right after the external call, before
** commit.
*/
static void ext_key_case(vctx *v, const char *name, const char *keyexpr,
			 int want_applied)
{
	char cmd[1024];
	want done = {0, DUE_DONE, 2};

	set_dir_env(v);
	snprintf(cmd, sizeof(cmd),
		 "k=\"%s\"; if mkdir \"$DUEV_DIR/ext-$k\" 2>/dev/null; then "
		 "echo \"$k\" >> \"$DUEV_DIR/ext_applied\"; fi; "
		 "echo \"$k\" >> \"$DUEV_DIR/keys_seen\"; "
		 "if [ \"$DUE_ATTEMPT\" = 1 ]; then g=$(cut -d' ' -f4 "
		 "/proc/$PPID/stat); kill -9 \"$(cut -d' ' -f4 "
		 "/proc/$g/stat)\"; exit 0; fi; "
		 "echo committed",
		 keyexpr);
	done.id = v_add(v, "ext", 0, 5, 0, "x");
	pid_t a = v_worker(v, "a.log", "--owner", "A", "--lease", "1s",
			   "--exec", cmd, (char *)NULL);
	int code = v_reap(a, HANG_MS);
	pid_t b = v_worker(v, "b.log", "--owner", "B", "--lease", "1s",
			   "--poll", "20ms", "--exec", cmd, (char *)NULL);
	bool ok = v_wait(v, HANG_MS, want_state, &done);
	stop_worker(b);
	due_task *t = v_get(v, done.id);
	int applied = v_lines(v, "ext_applied"), seen = v_lines(v, "keys_seen");
	v_case(v, name,
	       ok && code == 137 && applied == want_applied && seen == 2,
	       "%scrashed_workers=1 final=[%s,%d] local_effects=%d "
	       "external_applied=%d keys_seen=%d key=%s",
	       want_applied > 1 ? "expect_duplicate " : "",
	       t ? due_state_name(t->state) : "?", t ? t->attempt : 0,
	       t && t->has_result, applied, seen, keyexpr);
	due_task_free(t);
}

void v_ext_key_per_task_dedup(vctx *v)
{
	ext_key_case(v, "ext_key_per_task_dedup", "$DUE_IDEMPOTENCY_KEY", 1);
}

void v_negative_ext_key_per_attempt(vctx *v)
{
	ext_key_case(v, "negative_ext_key_per_attempt",
		     "$DUE_IDEMPOTENCY_KEY-a$DUE_ATTEMPT", 2);
}

static bool ext_called(vctx *v, void *arg)
{
	(void)arg;
	return v_lines(v, "ext_applied") > 0;
}

void v_cancel_after_external_call(vctx *v)
{
	want cancelled = {0, DUE_CANCELLED, 1};
	due_cancel_outcome out = DUE_CANCEL_NOT_FOUND;

	set_dir_env(v);
	cancelled.id = v_add(v, "extc", 0, 5, 0, "x");
	/* the handler calls out, then runs until stopped (the cancel must
	   find it running however slow the machine) */
	pid_t w = v_worker(v, "w.log", "--lease", "600ms", "--kill-grace",
			   "200ms", "--exec",
			   "echo call >> \"$DUEV_DIR/ext_applied\"; until [ -e "
			   "\"$DUEV_DIR/never\" ]; do sleep 0.05; done",
			   (char *)NULL);
	bool ok = v_wait(v, HANG_MS, ext_called, NULL);
	ok &= due_cancel(v->db, &out, cancelled.id) == 0;
	ok &= v_wait(v, HANG_MS, want_state, &cancelled);
	stop_worker(w);
	due_task *t = v_get(v, cancelled.id);
	int applied = v_lines(v, "ext_applied");
	v_case(v, "cancel_after_external_call",
	       ok && out == DUE_CANCEL_REQUESTED && t && !t->has_result &&
		   applied == 1,
	       "cancel=%s final=%s local_effects=%d external_applied=%d",
	       due_cancel_outcome_name(out), t ? due_state_name(t->state) : "?",
	       t && t->has_result, applied);
	due_task_free(t);
}

/* ------------------------------------------------------------------ */
/* Periodic schedules                                                  */
/* ------------------------------------------------------------------ */

static int put_every_second(vctx *v, const char *name, const char *kind,
			    due_misfire m)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	d.name = name;
	d.expr = "* * * * * *";
	d.kind = kind;
	d.misfire = m;
	if (due_cron_put(v->db, &d) < 0) {
		fprintf(stderr, "due verify: %s\n", due_error_last());
		return -1;
	}
	return 0;
}

/* Slot seconds of a kind's tasks, sorted; returns how many. */
static size_t slots_of(vctx *v, const char *kind, int64_t *out, size_t cap)
{
	due_list_opts lo = DUE_LIST_OPTS_INIT;
	due_task_list *l = NULL;
	size_t n = 0;

	lo.kind = kind;
	lo.limit = 10000;
	if (due_list(v->db, &l, &lo) < 0)
		return 0;
	for (size_t i = 0; i < l->count && n < cap; i++) {
		const char *k =
		    l->items[i].key ? strrchr(l->items[i].key, ':') : NULL;
		if (k)
			out[n++] = strtoll(k + 1, NULL, 10);
	}
	due_task_list_free(l);
	qsort(out, n, sizeof(*out), cmp_i64);
	return n;
}

static const due_cron_info *find_sched(const due_cron_info_list *l,
				       const char *name)
{
	for (size_t i = 0; l && i < l->count; i++)
		if (!strcmp(l->items[i].name, name))
			return &l->items[i];
	return NULL;
}

/* The named schedule (NULL if not listed); *l must be freed. */
static const due_cron_info *sched_now(vctx *v, due_cron_info_list **l,
				      const char *name)
{
	due_cron_info_list_free(*l);
	*l = NULL;
	return due_cron_list(v->db, l) == 0 ? find_sched(*l, name) : NULL;
}

/* For has_fired and has_missed: a schedule, and a count to reach. */
typedef struct sched_count {
	const char *name;
	int64_t n;
} sched_count;

static bool has_fired(vctx *v, void *arg)
{
	sched_count *f = arg;
	due_cron_info_list *l = NULL;
	const due_cron_info *si = sched_now(v, &l, f->name);
	bool r = si && si->fired >= f->n;
	due_cron_info_list_free(l);
	return r;
}

static bool has_missed(vctx *v, void *arg)
{
	sched_count *f = arg;
	due_cron_info_list *l = NULL;
	const due_cron_info *si = sched_now(v, &l, f->name);
	bool r = si && si->missed >= f->n;
	due_cron_info_list_free(l);
	return r;
}

void v_cron_once_per_slot_multi_instance(vctx *v)
{
	int64_t slots[256];
	pid_t w[3];
	int dups = 0, gaps = 0;
	sched_count ten = {"tick", 10};
	double start;

	set_dir_env(v);
	if (put_every_second(v, "tick", "tick", DUE_MISFIRE_SKIP) < 0) {
		v_case(v, "cron_once_per_slot_multi_instance", false,
		       "error=put");
		return;
	}
	for (int i = 0; i < 3; i++) {
		char owner[16], log[16];
		snprintf(owner, sizeof(owner), "s%d", i + 1);
		snprintf(log, sizeof(log), "s%d.log", i + 1);
		w[i] = v_worker(
		    v, log, "--owner", owner, "--poll", "50ms", "--exec",
		    "echo \"$DUE_TASK_ID\" >> \"$DUEV_DIR/effects\"",
		    (char *)NULL);
	}
	/* until ten slots are made: about ten seconds, however long it takes */
	start = v_now_ms();
	bool ok = v_wait(v, HANG_MS, has_fired, &ten);
	double secs = (v_now_ms() - start) / 1000.0;
	for (int i = 0; i < 3; i++)
		stop_worker(w[i]);
	size_t n = slots_of(v, "tick", slots, 256);
	for (size_t i = 1; i < n; i++) {
		dups += slots[i] == slots[i - 1];
		gaps += slots[i] - slots[i - 1] > 1;
	}
	due_cron_info_list *l = NULL;
	due_cron_list(v->db, &l);
	const due_cron_info *si = find_sched(l, "tick");
	int effects = v_lines(v, "effects");
	int64_t done = count_state(v, DUE_DONE);
	v_case(v, "cron_once_per_slot_multi_instance",
	       ok && si && n >= 10 && dups == 0 && gaps == 0 &&
		   si->fired == (int64_t)n && si->missed == 0 &&
		   effects == done,
	       "schedulers=3 seconds=%.1f slots=%zu tasks=%zu dup_slots=%d "
	       "gaps=%d "
	       "fired=%lld missed=%lld runs=%d done=%lld",
	       secs, n, n, dups, gaps, si ? (long long)si->fired : -1,
	       si ? (long long)si->missed : -1, effects, (long long)done);
	due_cron_info_list_free(l);
}

void v_cron_misfire_policies(vctx *v)
{
	int64_t slots[256], oslots[256];
	due_cron_info_list *l = NULL;

	set_dir_env(v);
	if (put_every_second(v, "skip", "skipk", DUE_MISFIRE_SKIP) < 0 ||
	    put_every_second(v, "once", "oncek", DUE_MISFIRE_ONCE) < 0) {
		v_case(v, "cron_misfire_policies", false, "error=put");
		return;
	}
	pid_t w = v_worker(v, "w.log", "--misfire-grace", "1s", "--poll",
			   "50ms", "--exec", "true", (char *)NULL);
	/* the scheduler has run (both schedules fired), then stops for at
	   least 6 s: more than its 2 s lookahead and 1 s grace, so slots are
	   missed; resumed, it records them in its next pass ("once" comes
	   before "skip" in that pass, so once's catch-up is in by then) */
	sched_count fired_once = {"once", 1}, fired_skip = {"skip", 1},
		    missed_skip = {"skip", 2};
	bool ok = v_wait(v, HANG_MS, has_fired, &fired_once) &&
		  v_wait(v, HANG_MS, has_fired, &fired_skip);
	v_kill(w, SIGSTOP);
	v_sleep_ms(6000);
	v_kill(w, SIGCONT);
	ok &= v_wait(v, HANG_MS, has_missed, &missed_skip);
	stop_worker(w);
	due_cron_list(v->db, &l);
	const due_cron_info *sk = find_sched(l, "skip"),
			    *on = find_sched(l, "once");
	size_t ns = slots_of(v, "skipk", slots, 256);
	int skip_gap = 0;
	for (size_t i = 1; i < ns; i++)
		if (slots[i] - slots[i - 1] - 1 > skip_gap)
			skip_gap = (int)(slots[i] - slots[i - 1] - 1);
	/* the two are compared up to the last slot both have made: "once"
	   makes no slot after its catch-up until that task has run (its
	   previous run is live), while "skip" goes on to the lookahead in
	   the same pass, so when the stop comes right after that pass skip
	   is slots ahead (a CI run saw it: catch_up=0 counted in full) */
	int64_t skip_last = ns ? slots[ns - 1] : 0, hi;
	size_t ns_hi = ns, no_hi = 0;
	size_t no = slots_of(v, "oncek", oslots, 256);
	hi = no && oslots[no - 1] < skip_last ? oslots[no - 1] : skip_last;
	while (ns_hi > 0 && slots[ns_hi - 1] > hi)
		ns_hi--;
	while (no_hi < no && oslots[no_hi] <= hi)
		no_hi++;
	ok &= sk && on && sk->missed >= 2 && skip_gap >= 2 &&
	      skip_gap <= sk->missed && sk->fired == (int64_t)ns &&
	      on->fired == (int64_t)no && on->missed == sk->missed - 1 &&
	      no_hi == ns_hi + 1;
	v_case(v, "cron_misfire_policies", ok,
	       "paused_s=6 grace_s=1 skip=[missed=%lld fired=%lld gap=%d] "
	       "once=[missed=%lld fired=%lld catch_up=%lld]",
	       sk ? (long long)sk->missed : -1, sk ? (long long)sk->fired : -1,
	       skip_gap, on ? (long long)on->missed : -1,
	       on ? (long long)on->fired : -1,
	       (long long)no_hi - (long long)ns_hi);
	due_cron_info_list_free(l);
}
