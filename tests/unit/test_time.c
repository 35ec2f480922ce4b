/*
** test_time.c - durations, RFC 3339 times and their errors.
*/
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "due.h"

static void test_durations(void **state)
{
	(void)state;
	struct {
		const char *in;
		int64_t us;
	} ok[] = {
	    {"250ms", 250000},
	    {"10s", 10000000},
	    {"30m", 1800000000LL},
	    {"2h", 7200000000LL},
	    {"1d", 86400000000LL},
	    {"1h30m", 5400000000LL},
	    {"0", 0},
	    {"0s", 0},
	    {"1m30s250ms", 90250000},
	    {"15us", 15},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int64_t v = -1;
		assert_int_equal(due_duration_parse(&v, ok[i].in), 0);
		assert_int_equal(v, ok[i].us);
	}
	const char *bad[] = {"",     "-5s", "5",      "s",
			     "1.5s", "10x", "1h 30m", "99999999999d",
			     "1s-",  "+1s"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t v;
		assert_int_equal(due_duration_parse(&v, bad[i]), DUE_EINVAL);
		assert_non_null(strstr(due_error_last(), "invalid duration"));
	}
	int64_t v;
	due_duration_parse(&v, "-5s");
	assert_non_null(strstr(due_error_last(), "negative"));
	char buf[32];
	due_duration_format(buf, sizeof(buf), 5400000000LL);
	assert_string_equal(buf, "1h30m");
	due_duration_format(buf, sizeof(buf), 250000);
	assert_string_equal(buf, "250ms");
}

static void test_times(void **state)
{
	(void)state;
	due_time t;
	char buf[40];

	assert_int_equal(due_time_parse(&t, "2026-12-01T02:00:00Z"), 0);
	assert_int_equal(t, 1796090400LL * 1000000);
	assert_int_equal(due_time_parse(&t, "2026-12-01T10:00:00+08:00"), 0);
	assert_int_equal(t, 1796090400LL * 1000000);
	assert_int_equal(due_time_parse(&t, "2026-12-01T02:00:00.250Z"), 0);
	due_time_format(buf, sizeof(buf), t);
	assert_string_equal(buf, "2026-12-01T02:00:00.250Z");
	assert_int_equal(due_time_parse(&t, "2028-02-29T00:00:00-05:30"), 0);
	/* the epoch is an instant like any other, whichever way it is written
	 */
	assert_int_equal(due_time_parse(&t, "1970-01-01T00:00:00Z"), 0);
	assert_int_equal(t, 0);
	assert_int_equal(due_time_parse(&t, "1969-12-31T23:00:00-01:00"), 0);
	assert_int_equal(t, 0);
	assert_int_equal(due_time_parse(&t, "1969-12-31T23:59:59Z"),
			 DUE_EINVAL);
	assert_non_null(
	    strstr(due_error_last(), "before 1970-01-01T00:00:00Z"));
	assert_int_equal(due_time_parse(&t, "1900-01-01T00:00:00Z"),
			 DUE_EINVAL);
	assert_non_null(
	    strstr(due_error_last(), "before 1970-01-01T00:00:00Z"));
	const char *bad[] = {"",
			     "2026-12-01",
			     "2026-12-01T02:00:00",
			     "2026-13-01T00:00:00Z",
			     "2026-02-30T00:00:00Z",
			     "2027-02-29T00:00:00Z",
			     "2026-12-01T24:00:00Z",
			     "2026-12-01T02:00:00Zjunk",
			     "2026-12-01T02:00:00+8",
			     "tomorrow",
			     "1969-12-31T23:59:59Z"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(due_time_parse(&t, bad[i]), DUE_EINVAL);
		assert_non_null(strstr(due_error_last(), "invalid time"));
	}
}

static void test_names(void **state)
{
	(void)state;
	due_state s;
	assert_int_equal(due_state_parse(&s, "dead"), 0);
	assert_int_equal(s, DUE_DEAD);
	assert_int_equal(due_state_parse(&s, "zombie"), DUE_EINVAL);
	assert_string_equal(due_cancel_outcome_name(DUE_CANCEL_TOO_LATE),
			    "TOO_LATE");
	assert_string_equal(
	    due_complete_outcome_name(DUE_COMPLETE_CANCELLED_BEFORE_COMMIT),
	    "CANCELLED_BEFORE_COMMIT");
	assert_string_equal(due_fail_outcome_name(DUE_FAIL_REJECTED_STALE),
			    "REJECTED_STALE");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_durations),
	    cmocka_unit_test(test_times),
	    cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
