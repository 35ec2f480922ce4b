/*
** routes_misc.c - /v1/schedules, /v1/stats, /health, /v1/metrics (the
** dashboard's JSON) and / (the dashboard page).
**
** Schedules are rendered with the field names of `due cron ls --json`
** (name, expr, kind, tz, misfire, overlap, next_fire, next_fire_local,
** last_fire, last_task, fired, missed, last_missed, payload) plus the
** retry settings, so what a PUT sends can be read back.  As for tasks, the
** list and the reply of a PUT show at most HTTP_PREVIEW_BYTES of a
** payload, with "payload_truncated" and "payload_size" when cut.
**
** /health is answered by the prober thread (pool.c) with its own store
** handle: http_health_probe() is its one store call.
**
** Stats and metrics come from one due_metrics_get(), which never scans
** the whole task table: the counts the store may estimate (SCHEDULED,
** DONE, CANCELLED, per kind; docs/HTTP.md) are named in "estimated"
** arrays ([] when all are exact), the histograms and outcomes cover the
** tries claimed in the last "window_s" seconds, and "pruned" is what
** retention deleted, summed over the live workers' reports.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

/* ------------------------------------------------------------------ */
/* Schedules                                                           */
/* ------------------------------------------------------------------ */

/*
** Cut the payload of a rendered schedule to `cut` bytes (text at a
** character boundary, base64 at a 3-byte group), flagging the cut.
*/
static void cut_payload(json_t *o, size_t cut)
{
	json_t *text = json_object_get(o, "payload");
	json_t *b64 = json_object_get(o, "payload_b64");
	size_t n, size, show;
	const char *s;

	if (json_is_string(text) && (n = json_string_length(text)) > cut) {
		s = json_string_value(text);
		show = cut;
		while (show > 0 && ((unsigned char)s[show] & 0xc0) == 0x80)
			show--;
		size = n;
		json_object_set_new(o, "payload", json_stringn(s, show));
	} else if (json_is_string(b64) &&
		   (n = json_string_length(b64)) / 4 * 3 > cut) {
		s = json_string_value(b64);
		size = n / 4 * 3 - (n && s[n - 1] == '=') -
		       (n > 1 && s[n - 2] == '=');
		if (size <= cut)
			return;
		json_object_set_new(o, "payload_b64",
				    json_stringn(s, cut / 3 * 4));
	} else {
		return;
	}
	json_object_set_new(o, "payload_truncated", json_true());
	json_object_set_new(o, "payload_size", json_integer((json_int_t)size));
}

/* The schedule called name as JSON into *out (NULL when none). */
static int sched_find(due_db *db, const char *name, size_t cut, json_t **out)
{
	due_cron_info_list *l = NULL;
	int rc;

	*out = NULL;
	if ((rc = due_cron_list(db, &l)) < 0)
		return rc;
	for (size_t i = 0; i < l->count; i++)
		if (!strcmp(l->items[i].name, name))
			*out = due__fmt_cron(&l->items[i]);
	due_cron_info_list_free(l);
	if (*out)
		cut_payload(*out, cut);
	return 0;
}

int route_sched_list(http_req *r)
{
	due_cron_info_list *l = NULL;
	due_db *db;
	json_t *arr;
	int rc;

	if ((rc = http_db(r, &db)) < 0 || (rc = due_cron_list(db, &l)) < 0)
		return http_reply_due(r, rc);
	arr = json_array();
	for (size_t i = 0; arr && i < l->count; i++) {
		json_t *o = due__fmt_cron(&l->items[i]);
		if (o)
			cut_payload(o, HTTP_PREVIEW_BYTES);
		json_array_append_new(arr, o);
	}
	due_cron_info_list_free(l);
	return http_reply_json(r, 200, arr);
}

int route_sched_get(http_req *r)
{
	due_db *db;
	json_t *o;
	int rc;

	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = sched_find(db, r->param, http_max_payload(r), &o)) < 0)
		return http_reply_due(r, rc);
	if (!o)
		return http_reply_error(r, 404, "not_found", "no schedule '%s'",
					r->param);
	return http_reply_json(r, 200, o);
}

static const char *const sched_fields[] = {
    "name",	    "expr",	   "kind",	  "tz",
    "payload",	    "payload_b64", "misfire",	  "overlap",
    "max_attempts", "backoff",	   "backoff_cap", NULL};

/* One of two words, as an enum value 0 or 1; -1 with r->err. */
static int choice(http_req *r, json_t *o, const char *name, const char *w0,
		  const char *w1, int *out)
{
	const char *s = NULL;

	if (json_opt_string(r, o, name, &s) < 0)
		return -1;
	if (!s)
		return 0;
	if (strcmp(s, w0) && strcmp(s, w1)) {
		snprintf(r->err, sizeof(r->err),
			 "'%s' must be \"%s\" or \"%s\", "
			 "not \"%.64s\"",
			 name, w0, w1, s);
		return -1;
	}
	*out = strcmp(s, w0) != 0;
	return 0;
}

/* Fill def from the body (strings borrowed from o); -1 with r->err. */
static int sched_def(http_req *r, json_t *o, due_cron_def *d,
		     unsigned char **blob)
{
	const char *name = NULL;
	int misfire = 0, overlap = 0;
	int64_t ma = d->max_attempts;

	if (json_opt_string(r, o, "name", &name) < 0 ||
	    json_opt_string(r, o, "expr", &d->expr) < 0 ||
	    json_opt_string(r, o, "kind", &d->kind) < 0 ||
	    json_opt_string(r, o, "tz", &d->tz) < 0)
		return -1;
	if (name && strcmp(name, r->param)) {
		snprintf(r->err, sizeof(r->err),
			 "'name' \"%.128s\" differs from "
			 "the name in the path",
			 name);
		return -1;
	}
	if (!d->expr || !d->kind) {
		snprintf(r->err, sizeof(r->err), "'%s' (a string) is required",
			 d->expr ? "kind" : "expr");
		return -1;
	}
	if (choice(r, o, "misfire", "skip", "once", &misfire) < 0 ||
	    choice(r, o, "overlap", "allow", "wait", &overlap) < 0 ||
	    json_opt_int(r, o, "max_attempts", 1, 1000, &ma) < 0 ||
	    json_opt_duration(r, o, "backoff", &d->backoff_us) < 0 ||
	    json_opt_duration(r, o, "backoff_cap", &d->backoff_cap_us) < 0 ||
	    json_opt_payload(r, o, &d->payload, &d->payload_len, blob) < 0)
		return -1;
	d->misfire = misfire ? DUE_MISFIRE_ONCE : DUE_MISFIRE_SKIP;
	d->overlap = overlap ? DUE_OVERLAP_WAIT : DUE_OVERLAP_ALLOW;
	d->max_attempts = (int32_t)ma;
	return 0;
}

int route_sched_put(http_req *r)
{
	due_cron_def d = DUE_CRON_DEF_INIT;
	unsigned char *blob = NULL;
	json_t *o, *before = NULL, *after = NULL;
	due_db *db;
	int rc;

	if (json_body_object(r, sched_fields, false, &o) < 0)
		return http_reply_bad(r);
	d.name = r->param;
	if (sched_def(r, o, &d, &blob) < 0) {
		rc = http_reply_bad(r);
	} else if ((rc = http_db(r, &db)) < 0 ||
		   (rc = sched_find(db, d.name, 0, &before)) < 0 ||
		   (rc = due_cron_put(db, &d)) < 0 ||
		   (rc = sched_find(db, d.name, HTTP_PREVIEW_BYTES, &after)) <
		       0) {
		rc = http_reply_due(r, rc);
	} else {
		rc = http_reply_json(r, before ? 200 : 201, after);
	}
	json_decref(before);
	json_decref(o);
	free(blob);
	return rc;
}

int route_sched_delete(http_req *r)
{
	due_db *db;
	int rc;

	if (r->body_len) {
		snprintf(r->err, sizeof(r->err), "DELETE takes no body");
		return http_reply_bad(r);
	}
	if ((rc = http_db(r, &db)) < 0 ||
	    (rc = due_cron_remove(db, r->param)) < 0)
		return http_reply_due(r, rc);
	return http_reply_json(r, 200, json_pack("{s:s}", "removed", r->param));
}

/* ------------------------------------------------------------------ */
/* Stats, health, the dashboard's metrics                              */
/* ------------------------------------------------------------------ */

/*
** As `due stats --json` (cmd_stats.c builds the same object): the stats
** with the states whose counts are estimates, worker counters, schedules
** and the kinds with flow-control settings.
*/
int route_stats(http_req *r)
{
	due_kind_info_list *kinds = NULL;
	due_metrics *m = NULL;
	due_db *db;
	json_t *o;
	int rc;

	if ((rc = http_db(r, &db)) < 0 || (rc = due_metrics_get(db, &m)) < 0 ||
	    (rc = due_kind_list(db, &kinds)) < 0) {
		due_metrics_free(m);
		return http_reply_due(r, rc);
	}
	o = due__fmt_stats_report(m, kinds);
	due_kind_info_list_free(kinds);
	due_metrics_free(m);
	return http_reply_json(r, 200, o);
}

/* /health's JSON text, malloc'd, with a newline; NULL on ENOMEM. */
static char *health_text(json_t *j, size_t *len)
{
	char *s = j ? json_dumps(j, JSON_INDENT(2) | JSON_ENSURE_ASCII) : NULL;
	char *b;

	json_decref(j);
	if (!s)
		return NULL;
	*len = strlen(s);
	if (!(b = realloc(s, *len + 2))) {
		free(s);
		return NULL;
	}
	b[(*len)++] = '\n';
	b[*len] = '\0';
	return b;
}

void http_health_probe(due_db **db, const struct due_http *srv,
		       unsigned *status, char **out, size_t *len)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	int64_t dead = 0;
	bool up = false;
	json_t *j;
	int rc = 0;

	o.max_payload = srv->max_payload;
	if (!*db && (rc = due_open(db, srv->db_url, &o)) < 0) {
		due_close(*db);
		*db = NULL;
	}
	if (!rc && (rc = due_health(*db, &up, &dead)) < 0 && rc != DUE_EBUSY) {
		due_close(*db); /* reopened by the next probe */
		*db = NULL;
	}
	if (rc < 0) {
		http_log("health_store", "/health: %s", due_error_last());
		*status = 503;
		j = json_pack("{s:s,s:s,s:s}", "status", "DOWN", "error",
			      "store_error", "detail", due_error_last());
	} else if (up) {
		*status = 200;
		j = json_pack("{s:s}", "status", "UP");
	} else {
		*status = 503;
		j = json_pack("{s:s,s:I}", "status", "DOWN", "dead",
			      (json_int_t)dead);
	}
	*out = health_text(j, len);
}

static json_t *hist_json(const due_histogram *h)
{
	json_t *o = json_object(), *bounds = json_array(), *b = json_array();

	for (int i = 0; i < DUE_HIST_N; i++)
		json_array_append_new(bounds, json_real(due_hist_bounds_ms[i]));
	for (int i = 0; i <= DUE_HIST_N; i++)
		json_array_append_new(b, json_integer(h->buckets[i]));
	json_object_set_new(o, "bounds_ms", bounds);
	json_object_set_new(o, "buckets", b);
	json_object_set_new(o, "count", json_integer(h->count));
	json_object_set_new(o, "sum_ms", json_real(h->sum_ms));
	return o;
}

static json_t *counts_json(const int64_t *c)
{
	json_t *o = json_object();
	for (int i = 0; i < DUE_STATE_COUNT; i++)
		json_object_set_new(o, due_state_name((due_state)i),
				    json_integer(c[i]));
	return o;
}

static json_t *metrics_json(const due_metrics *m, const char *backend,
			    bool auth)
{
	json_t *o = json_object(), *kinds = json_array(), *out = json_object();
	json_t *per = json_array(), *st = due__fmt_stats(&m->stats);

	json_object_set_new(o, "stats", st);
	json_object_set_new(o, "health",
			    json_pack("{s:s,s:I}", "status",
				      m->stats.dead ? "DOWN" : "UP", "dead",
				      (json_int_t)m->stats.dead));
	for (size_t i = 0; i < m->n_kinds; i++)
		json_array_append_new(
		    kinds, json_pack("{s:s,s:o,s:o}", "kind", m->kinds[i].kind,
				     "counts", counts_json(m->kinds[i].counts),
				     "estimated",
				     due__fmt_estimated(m->kinds_estimated)));
	json_object_set_new(o, "kinds", kinds);
	json_object_set_new(o, "lateness", hist_json(&m->lateness));
	json_object_set_new(o, "duration", hist_json(&m->duration));
	for (int i = 0; i < DUE_OUT_COUNT; i++)
		json_object_set_new(out, due_outcome_name((due_outcome)i),
				    json_integer(m->outcomes[i]));
	json_object_set_new(o, "outcomes", out);
	/* null: a store that reads its whole history (no window) */
	json_object_set_new(o, "window_s",
			    m->window_us > 0
				? json_integer(m->window_us / 1000000)
				: json_null());
	for (int i = 0; i < 15; i++)
		json_array_append_new(per, json_integer(m->done_per_min[i]));
	json_object_set_new(o, "done_per_min", per);
	json_object_set_new(o, "workers", json_integer(m->workers));
	json_object_set_new(o, "claim_queries", json_integer(m->claim_queries));
	json_object_set_new(o, "empty_claims", json_integer(m->empty_claims));
	json_object_set_new(o, "reclaim_queries",
			    json_integer(m->reclaim_queries));
	json_object_set_new(o, "store_errors", json_integer(m->store_errors));
	json_object_set_new(o, "lease_lost", json_integer(m->lease_lost));
	json_object_set_new(o, "pruned", json_integer(m->pruned));
	json_object_set_new(o, "schedules",
			    json_integer((json_int_t)m->n_schedules));
	json_object_set_new(o, "backend", json_string(backend));
	json_object_set_new(o, "version", json_string(DUE_VERSION));
	json_object_set_new(o, "auth_required", json_boolean(auth));
	return o;
}

int route_metrics_json(http_req *r)
{
	due_metrics *m = NULL;
	due_db *db;
	json_t *o;
	int rc;

	if ((rc = http_db(r, &db)) < 0 || (rc = due_metrics_get(db, &m)) < 0)
		return http_reply_due(r, rc);
	o = metrics_json(m, due_db_backend(db), http_auth_required(r));
	due_metrics_free(m);
	return http_reply_json(r, 200, o);
}

int route_dashboard(http_req *r)
{
	http_add_header(r, "Content-Security-Policy",
			"default-src 'none'; script-src 'unsafe-inline'; "
			"style-src 'unsafe-inline'; connect-src 'self'; "
			"img-src data:; base-uri 'none'; form-action 'none'; "
			"frame-ancestors 'none'");
	http_add_header(r, "X-Frame-Options", "DENY");
	http_add_header(r, "Referrer-Policy", "no-referrer");
	return http_reply_static(r, 200, "text/html; charset=utf-8",
				 due__http_dashboard, due__http_dashboard_len);
}
