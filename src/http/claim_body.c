/*
** claim_body.c - the body and the reply of POST /v1/claims, the workers'
** long poll (claims.c runs the poll itself): the request's kinds, limit,
** lease, wait and owner, each checked with a message naming it, and the
** claimed tasks as JSON, each with its idempotency key and its deadline.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt/fmt.h"
#include "http/internal.h"

#define MAX_WAIT_US (60 * 1000000LL)

static const char *const claim_fields[] = {"kinds", "limit", "lease",
					   "wait",  "owner", NULL};

/* The kinds array: strings, at most HTTP_MAX_KINDS.  -1 with r->err. */
static int read_kinds(http_req *r, json_t *o, http_claim_spec *c)
{
	json_t *a = json_object_get(o, "kinds"), *v;
	size_t i;

	if (!a || json_is_null(a))
		return 0;
	if (!json_is_array(a) || json_array_size(a) > HTTP_MAX_KINDS) {
		snprintf(r->err, sizeof(r->err),
			 "'kinds' must be an array of at most %d kind names",
			 HTTP_MAX_KINDS);
		return -1;
	}
	/* an empty filter is a client's mistake (`due work --kinds ''` is
	   refused too), not "every kind": leave the field out for that */
	if (json_array_size(a) == 0) {
		snprintf(r->err, sizeof(r->err),
			 "'kinds' is an empty list: name at least one kind, or "
			 "leave 'kinds' out to claim every kind");
		return -1;
	}
	json_array_foreach(a, i, v)
	{
		if (!json_is_string(v) || !json_string_length(v)) {
			snprintf(r->err, sizeof(r->err),
				 "'kinds' item %zu must be a kind name", i);
			return -1;
		}
		c->kinds[i] = json_string_value(v);
	}
	c->o.kinds = c->kinds;
	c->o.n_kinds = json_array_size(a);
	return 0;
}

/* Decode and check the body; -1 with r->err naming the field. */
static int read_claim(http_req *r, json_t *o, http_claim_spec *c)
{
	int64_t limit = 1;

	c->o = (due_claim_opts)DUE_CLAIM_OPTS_INIT;
	c->o.owner = "http";
	c->wait_us = 0;
	if (read_kinds(r, o, c) < 0 ||
	    json_opt_int(r, o, "limit", 1, HTTP_MAX_CLAIM, &limit) < 0 ||
	    json_opt_duration(r, o, "lease", &c->o.lease_us) < 0 ||
	    json_opt_duration(r, o, "wait", &c->wait_us) < 0 ||
	    json_opt_string(r, o, "owner", &c->o.owner) < 0)
		return -1;
	c->o.limit = (int)limit;
	if (c->o.lease_us < 1000 || c->o.lease_us > HTTP_MAX_LEASE_US) {
		snprintf(r->err, sizeof(r->err),
			 "'lease' must be from 1ms to 24h");
		return -1;
	}
	if (c->wait_us < 0 || c->wait_us > MAX_WAIT_US) {
		snprintf(r->err, sizeof(r->err),
			 "'wait' must be from 0s to 60s");
		return -1;
	}
	if (!*c->o.owner || strlen(c->o.owner) > 200) {
		snprintf(r->err, sizeof(r->err),
			 "'owner' must be 1 to 200 bytes");
		return -1;
	}
	return 0;
}

int http_claim_read(http_req *r, json_t **body, http_claim_spec *c)
{
	if (json_body_object(r, claim_fields, true, body) < 0)
		return -1;
	return read_claim(r, *body, c);
}

/* A time as RFC 3339, or null for 0. */
static json_t *time_or_null(due_time t)
{
	char buf[64];

	if (!t)
		return json_null();
	due_time_format(buf, sizeof(buf), t);
	return json_string(buf);
}

/*
** "parent_results" of a task added with run-after: its parents' results
** as due_parent_results() gives them (read now, through db); 0, or a
** DUE_E* code with nothing added.
*/
static int add_parents(due_db *db, json_t *o, const due_task *t)
{
	char *text = NULL;
	json_t *v;
	int rc;

	if (t->after_n <= 0)
		return 0;
	if ((rc = due_parent_results(db, &text, t, 0)) < 0)
		return rc;
	v = json_loads(text, 0, NULL);
	free(text);
	if (!v || json_object_set_new(o, "parent_results", v) < 0)
		return DUE_ENOMEM;
	return 0;
}

int http_claimed_json(due_db *db, const due_task_list *l, int64_t lease_us,
		      json_t **out)
{
	json_t *a = json_array();
	int rc = 0;

	*out = NULL;
	for (size_t i = 0; a && i < l->count; i++) {
		const due_task *t = &l->items[i];
		json_t *o = due__fmt_task(t);
		char key[40];
		/* the store set lease_until = its now + lease at the claim */
		due_time deadline =
		    t->timeout_us > 0 && t->lease_until
			? t->lease_until - lease_us + t->timeout_us
			: 0;
		snprintf(key, sizeof(key), "task-%lld", (long long)t->id);
		if (!o ||
		    json_object_set_new(o, "idempotency_key",
					json_string(key)) < 0 ||
		    json_object_set_new(o, "deadline", time_or_null(deadline)) <
			0 ||
		    (rc = add_parents(db, o, t)) < 0 ||
		    json_array_append_new(a, o) < 0) {
			json_decref(o);
			json_decref(a);
			return rc < 0 ? rc : DUE_ENOMEM;
		}
	}
	*out = a;
	return a ? 0 : DUE_ENOMEM;
}
