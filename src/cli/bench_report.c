/*
** bench_report.c - the result of a `due bench` workload: one JSON object
** a line (--json), or one text line.  A figure a workload did not measure
** is left out (0, false or NULL in its bres).  The server's own counters
** are shown by kind, whatever the store (bench.h).
*/
#include <stdio.h>
#include <stdlib.h>

#include "cli/bench.h"

static void set_real(json_t *j, const char *k, double v)
{
	json_object_set_new(j, k, json_real(v));
}

/* The store work per task: this process's, then the server's. */
static void json_work(json_t *j, const bres *r)
{
	if (r->cpu_us_per_task > 0)
		set_real(j, "cpu_us_per_task", r->cpu_us_per_task);
	if (r->has_work) {
		set_real(j, "statements_per_task", r->stmts_per_task);
		set_real(j, "vm_steps_per_task", r->steps_per_task);
		set_real(j, "rows_written_per_task", r->rows_per_task);
	}
	for (size_t i = 0; i < r->n_srv_work; i++) {
		char k[96];
		if (r->srv_work[i].per_task <= 0)
			continue;
		snprintf(k, sizeof(k), "%s_per_task", r->srv_work[i].name);
		set_real(j, k, r->srv_work[i].per_task);
	}
}

/* Lateness, idle, memory, the run check and the claims. */
static void json_rest(json_t *j, const bres *r)
{
	if (r->has_late) {
		set_real(j, "p50_ms", r->p50);
		set_real(j, "p90_ms", r->p90);
		set_real(j, "p99_ms", r->p99);
		set_real(j, "max_ms", r->max);
		json_object_set_new(j, "early", json_integer(r->early));
	}
	if (r->has_idle) {
		set_real(j, "queries_per_s", r->queries_per_s);
		set_real(j, "cpu_s", r->cpu_s);
	}
	if (r->has_idle && r->server_detail) {
		json_object_set_new(j, "store_queries",
				    json_integer(r->server_queries));
		set_real(j, "window_s", r->seconds);
		json_object_set(j, "store_detail", r->server_detail);
	}
	if (r->bytes_after) {
		json_object_set_new(j, "bytes_before",
				    json_integer(r->bytes_before));
		json_object_set_new(j, "bytes_after",
				    json_integer(r->bytes_after));
		set_real(j, "bytes_per_task", r->bytes_per_task);
	}
	if (r->has_check) {
		json_object_set_new(j, "duplicates",
				    json_integer(r->duplicates));
		json_object_set_new(j, "missing", json_integer(r->missing));
	}
	if (r->claim_queries > 0) {
		json_object_set_new(j, "claim_queries",
				    json_integer(r->claim_queries));
		set_real(j, "tasks_per_claim",
			 (double)r->n / (double)r->claim_queries);
	}
}

static void report_json(const bres *r)
{
	json_t *j =
	    json_pack("{s:s,s:s,s:I,s:I,s:f,s:f}", "workload", r->workload,
		      "variant", r->variant, "n", (json_int_t)r->n,
		      "concurrency", (json_int_t)r->concurrency, "seconds",
		      r->seconds, "tasks_per_s", r->tasks_per_s);
	char *txt;

	json_work(j, r);
	json_rest(j, r);
	if (r->extra)
		json_object_update(j, r->extra);
	if ((txt = json_dumps(j, JSON_COMPACT)))
		puts(txt);
	free(txt);
	json_decref(j);
}

static void text_work(const bres *r)
{
	if (r->cpu_us_per_task > 0)
		printf("  cpu=%.1fus/task", r->cpu_us_per_task);
	if (r->has_work)
		printf("  stmts=%.1f vm_steps=%.0f rows=%.1f per task",
		       r->stmts_per_task, r->steps_per_task, r->rows_per_task);
	for (size_t i = 0; i < r->n_srv_work; i++) {
		const bench_srv_work *w = &r->srv_work[i];
		if (w->per_task > 0)
			printf("  %s=%.*f%s/task", w->label, w->digits,
			       w->per_task, w->unit);
	}
}

static void text_rest(const bres *r)
{
	const char *k;
	json_t *val;

	if (r->has_late)
		printf("  p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms "
		       "early=%ld",
		       r->p50, r->p90, r->p99, r->max, r->early);
	if (r->has_idle)
		printf("  queries/s=%.2f per worker  cpu=%.2fs",
		       r->queries_per_s, r->cpu_s);
	if (r->has_idle && r->server_detail)
		printf("  server: %.3f commands/s per worker",
		       (double)r->server_queries / r->seconds /
			   (double)r->concurrency);
	if (r->bytes_after)
		printf("  used_memory %lld -> %lld: %.0f bytes/task",
		       r->bytes_before, r->bytes_after, r->bytes_per_task);
	if (r->has_check)
		printf("  duplicates=%ld missing=%ld", r->duplicates,
		       r->missing);
	if (r->claim_queries > 0)
		printf("  %.1f tasks/claim",
		       (double)r->n / (double)r->claim_queries);
	json_object_foreach(r->extra, k, val)
	{
		char *t =
		    json_dumps(val, JSON_ENCODE_ANY | JSON_REAL_PRECISION(6));
		printf("  %s=%s", k, t ? t : "?");
		free(t);
	}
}

void bench_report(const bopts *o, const bres *r)
{
	if (v_stopped()) /* an interrupted workload's figures say nothing */
		return;
	if (o->json) {
		report_json(r);
	} else {
		printf("%-9s %-12s n=%-6ld c=%-3ld %8.2fs %10.0f tasks/s",
		       r->workload, r->variant, r->n, r->concurrency,
		       r->seconds, r->tasks_per_s);
		text_work(r);
		text_rest(r);
		printf("\n");
	}
	fflush(stdout);
}
