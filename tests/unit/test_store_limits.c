/*
** test_store_limits.c - each backend's payload limit (issue 36, point 13)
** through the library, on every backend of tu_fixtures[]: a payload over
** what the store takes in one task is refused with DUE_ETOOBIG before
** anything is sent, its message naming the limit, and nothing is written
** (a batch with one such item writes none of the others).
**
** The payloads are 1 GB calloc'd buffers that are never touched (the
** pages stay unmapped zero pages: the refusal reads only their length),
** so the limits of SQLite (SQLITE_LIMIT_LENGTH less 4 MiB) and PostgreSQL
** (1 GB less 4 MiB) are tested at limit + 1 byte in milliseconds.  MySQL
** and Redis read theirs from the server: here a 1 GiB payload, over any
** setting MySQL allows (max_allowed_packet is at most 1 GiB, a payload is
** sent as hex) and over Redis's default proto-max-bulk-len (512 MB);
** tests/cli/test_store_limits.sh meets their limits to the byte.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define TU_FIXTURE
#include "test_util.h"

#define GIB ((size_t)1 << 30)

/* The first payload size the selected backend refuses, and a word of its
   message. */
static void over_limit(size_t *len, const char **word)
{
	const char *b = tu_fixture_now->name;

	if (strcmp(b, "sqlite") == 0)
		*len = 1000000000 - (4u << 20) + 1,
		*word = "SQLITE_LIMIT_LENGTH";
	else if (strcmp(b, "postgres") == 0)
		*len = 0x3fffffff - (4u << 20) + 1, *word = "1 GB";
	else if (strcmp(b, "mysql") == 0)
		*len = GIB, *word = "max_allowed_packet";
	else
		*len = GIB, *word = "proto-max-bulk-len";
}

static due_db *open_big(void)
{
	due_open_opts o = DUE_OPEN_OPTS_INIT;
	due_db *db = NULL;

	o.max_payload = GIB; /* so the store's own limit is what refuses */
	if (due_open(&db, url, &o) < 0)
		fail_msg("open %s: %s", url, due_error_last());
	return db;
}

static int64_t scheduled(due_db *db)
{
	due_stats st;
	assert_int_equal(due_stats_get(db, &st), 0);
	return st.counts[DUE_SCHEDULED];
}

/* One task over the limit: refused as one task (no "split"), named in
   one line, nothing written.  (That the limit itself is taken, a task of
   exactly that size added, claimed and completed, was measured once per
   store: docs/internals/store.md, "Limits"; sending 1 GB is not a unit
   test.) */
static void test_one_over_the_limit(void **state)
{
	(void)state;
	due_db *db = open_big();
	due_submitted s = {0};
	const char *word;
	size_t len;
	char *p;

	over_limit(&len, &word);
	assert_non_null(p = calloc(1, len)); /* never touched */
	assert_int_equal(due_schedule(db, &s, "big", p, len, NULL),
			 DUE_ETOOBIG);
	assert_non_null(strstr(due_error_last(), word));
	assert_non_null(strstr(due_error_last(), "payload is "));
	assert_null(strstr(due_error_last(), "split"));
	assert_null(strchr(due_error_last(), '\n'));
	assert_int_equal(scheduled(db), 0);
	free(p);
	due_close(db);
}

/* A batch with one such item: "item 2:", and the small one is not
   written either. */
static void test_batch_item_over_the_limit(void **state)
{
	(void)state;
	due_db *db = open_big();
	due_submitted out[2];
	due_submit items[2];
	const char *word;
	size_t len;
	char *p;

	over_limit(&len, &word);
	assert_non_null(p = calloc(1, len));
	items[0] = (due_submit){"small", "x", 1, DUE_SCHEDULE_OPTS_INIT};
	items[1] = (due_submit){"big", p, len, DUE_SCHEDULE_OPTS_INIT};
	assert_int_equal(due_schedule_batch(db, out, items, 2), DUE_ETOOBIG);
	assert_non_null(strstr(due_error_last(), "item 2: payload is "));
	assert_non_null(strstr(due_error_last(), word));
	assert_int_equal(scheduled(db), 0);
	free(p);
	due_close(db);
}

/* A schedule's payload is bounded the same way (each fire adds it). */
static void test_cron_over_the_limit(void **state)
{
	(void)state;
	due_db *db = open_big();
	due_cron_def d = DUE_CRON_DEF_INIT;
	due_cron_info_list *l = NULL;
	const char *word;
	size_t len;
	char *p;

	over_limit(&len, &word);
	assert_non_null(p = calloc(1, len));
	d.name = "big";
	d.expr = "0 2 * * *";
	d.kind = "big";
	d.payload = p;
	d.payload_len = len;
	assert_int_equal(due_cron_put(db, &d), DUE_ETOOBIG);
	assert_non_null(strstr(due_error_last(), word));
	assert_int_equal(due_cron_list(db, &l), 0);
	assert_int_equal(l->count, 0);
	due_cron_info_list_free(l);
	free(p);
	due_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_one_over_the_limit),
	    T(test_batch_item_over_the_limit),
	    T(test_cron_over_the_limit),
#undef T
	};
	int failed = 0;

	for (size_t b = 0; b < TU_N_FIXTURES; b++) {
		if (tu_select_backend(tu_fixtures[b].name) != 0)
			continue;
		char name[64];
		snprintf(name, sizeof(name), "store limits (%s)",
			 tu_fixtures[b].name);
		failed += _cmocka_run_group_tests(
		    name, tests, sizeof(tests) / sizeof(tests[0]), NULL, NULL);
	}
	return failed ? 1 : tu_backend_check();
}
