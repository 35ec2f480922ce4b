/*
** verify_util.c - the helpers every part of `due verify` (and `due
** bench`) uses: clocks and sleeps, the case directory's files, the CASE
** line, worker processes, waiting for a condition with a deadline, and
** tasks of the scratch store through the public API.  The bottom of the
** command: it calls nothing of the cases or of cmd_verify.c.
*/
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/verify.h"

extern char **environ;

double v_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

void v_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

const char *v_path(vctx *v, const char *file, char *buf, size_t n)
{
	snprintf(buf, n, "%.1200s/%.64s", v->dir, file);
	return buf;
}

bool v_file_exists(vctx *v, void *name)
{
	char p[1300];
	return access(v_path(v, name, p, sizeof(p)), F_OK) == 0;
}

bool v_log_has(vctx *v, const char *log, const char *needle)
{
	char p[1300], line[2048];
	FILE *f = fopen(v_path(v, log, p, sizeof(p)), "r");
	bool found = false;
	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, needle) != NULL;
	if (f)
		fclose(f);
	return found;
}

int v_lines(vctx *v, const char *file)
{
	char p[1300];
	FILE *f = fopen(v_path(v, file, p, sizeof(p)), "r");
	int n = 0, ch;
	if (!f)
		return 0;
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

void v_case(vctx *v, const char *name, bool pass, const char *fmt, ...)
{
	va_list ap;
	printf("CASE %s %s ", name, pass ? "PASS" : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (pass)
		v->passed++;
	else
		v->failed++;
}

pid_t v_worker(vctx *v, const char *log, ...)
{
	const char *argv[48] = {v->self, "work", "--db", v->url};
	char path[1300];
	posix_spawn_file_actions_t fa;
	int n = 4;
	va_list ap;
	pid_t pid;

	va_start(ap, log);
	for (const char *a; n < 46 && (a = va_arg(ap, const char *));)
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	v_path(v, log, path, sizeof(path));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, path,
					 O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	if (posix_spawn(&pid, v->self, &fa, NULL, (char *const *)argv,
			environ) != 0)
		pid = -1;
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

int v_reap(pid_t pid, int timeout_ms)
{
	double end = v_now_ms() + timeout_ms;
	int st;

	for (;;) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st)
					     : 128 + WTERMSIG(st);
		if (r < 0)
			return -1;
		if (v_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		v_sleep_ms(5);
	}
}

bool v_wait(vctx *v, int timeout_ms, bool (*cond)(vctx *, void *), void *arg)
{
	double end = v_now_ms() + timeout_ms;
	for (;;) {
		if (cond(v, arg))
			return true;
		if (v_now_ms() > end)
			return false;
		v_sleep_ms(5);
	}
}

due_id v_add(vctx *v, const char *kind, int64_t delay_us, int32_t max_attempts,
	     int64_t backoff_us, const char *payload)
{
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	due_submitted s = {0};
	o.delay_us = delay_us;
	o.max_attempts = max_attempts;
	if (backoff_us > 0) {
		o.backoff_us = backoff_us;
		o.backoff_cap_us = backoff_us * 64;
	}
	if (due_schedule(v->db, &s, kind, payload ? payload : "",
			 payload ? strlen(payload) : 0, &o) < 0) {
		fprintf(stderr, "due verify: schedule: %s\n", due_error_last());
		return 0;
	}
	return s.id;
}

due_task *v_get(vctx *v, due_id id)
{
	due_task *t = NULL;
	if (due_get(v->db, &t, id) < 0)
		return NULL;
	return t;
}
