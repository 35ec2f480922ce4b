/*
** test_native.c - the in-transaction submits of due.h
** (due_schedule_<name>_tx) exist in every build and answer by one rule
** (src/core/native.c): a backend this build has checks the connection
** first (NULL: DUE_EINVAL); a backend it lacks answers DUE_EUNSUPPORTED
** naming the function and the CMake option that brings it, with out->id 0.
** Run in the builds without PostgreSQL or MySQL (-DDUE_WITH_PG=OFF,
** -DDUE_WITH_MYSQL=OFF), it checks the stubs; in the default build, the
** forwarding.  What each backend's submit does is the conformance suite's
** (test_store.c, test_pg_store.c, test_mysql_store.c).
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "due.h"

/* What one call with a NULL connection must answer in this build. */
static void expect_answer(int rc, const due_submitted *out, const char *api,
			  bool built, const char *option)
{
	if (built) {
		assert_int_equal(rc, DUE_EINVAL);
		assert_non_null(strstr(due_error_last(), "connection is NULL"));
		return;
	}
	assert_int_equal(rc, DUE_EUNSUPPORTED);
	assert_int_equal(out->id, 0);
	assert_non_null(strstr(due_error_last(), api));
	assert_non_null(strstr(due_error_last(), option));
}

static void test_every_build_has_every_entry(void **state)
{
	(void)state;
	due_submitted out = {12345, true};
	bool pg = false, mysql = false;
#ifdef DUE_WITH_PG
	pg = true;
#endif
#ifdef DUE_WITH_MYSQL
	mysql = true;
#endif

	expect_answer(due_schedule_sqlite_tx(NULL, &out, "k", "p", 1, NULL),
		      &out, "due_schedule_sqlite_tx", true, NULL);
	out.id = 12345;
	expect_answer(due_schedule_pg_tx(NULL, &out, "k", "p", 1, NULL), &out,
		      "due_schedule_pg_tx", pg, "-DDUE_WITH_PG=ON");
	out.id = 12345;
	expect_answer(due_schedule_mysql_tx(NULL, &out, "k", "p", 1, NULL),
		      &out, "due_schedule_mysql_tx", mysql,
		      "-DDUE_WITH_MYSQL=ON");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_build_has_every_entry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
