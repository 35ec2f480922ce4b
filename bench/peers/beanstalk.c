/*
** bench/peers/beanstalk.c - beanstalkd measured the way `due bench` measures
** due: enqueue, then the drain of n no-op jobs with K in flight, every job
** run exactly once, one JSON line per figure.
**
**   beanstalk --addr HOST:PORT [--n N] [--concurrency 4,16] [--label L]
**             [--server-pid PID]
**
** Figures, in a tube of this process's own (due-peer-PID-...):
**   enqueue single     n/4 puts, each waiting for its INSERTED (one round
**                      trip per job, as due's W1 one commit per task); the
**                      jobs are deleted by id afterwards, never run
**   enqueue pipelined  n puts written 1000 at a time, then the 1000 replies
**                      read: what a client with a bulk API does
**   drain K            n jobs ready (filled pipelined, not timed; the first
**                      K's fill is the pipelined enqueue figure), then K
**                      connections, each with one job in flight: reserve
**                      (reserve-with-timeout 0), the no-op, then "delete ID"
**                      and the next reserve written together (pipelined, as a
**                      worker loop would); a connection ends at TIMED_OUT (no
**                      ready job left); the clock stops when the last one
**                      has.  Every job's body is its index: runs are counted
**                      per index (duplicates, missing) and stats-tube must
**                      show no job left.
** cpu_us_per_task is this client's user + system CPU per job (getrusage);
** with --server-pid, server_cpu_us_per_task is beanstalkd's (/proc).
**
** Why a hand-written client: Debian packages no C client library for
** beanstalkd (only Perl, Python and Ruby ones), the protocol is a few text
** lines over TCP (put, reserve, delete and their one-line replies), and a C
** client keeps the comparison with due's C worker and bench/floor free of
** an interpreter's cost.  It speaks only what it needs and treats any
** other reply as an error.
*/
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BS_BATCH 1000
#define BS_MAXC 256

typedef struct bs_conn {
	int fd;
	char buf[65536];
	size_t len;	    /* bytes in buf */
	size_t off;	    /* bytes of buf already consumed */
	int done;	    /* drain: saw TIMED_OUT */
	int waiting_delete; /* drain: the next reply is a delete's */
} bs_conn;

static const char *g_addr = "127.0.0.1:11300";
static char g_tube[64];

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("beanstalk: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_us(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* utime + stime of PID in microseconds, or -1 when it cannot be read. */
static double proc_cpu_us(long pid)
{
	char path[64], text[1024];
	snprintf(path, sizeof path, "/proc/%ld/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[n] = '\0';
	char *p = strrchr(text, ')');
	if (!p)
		return -1;
	unsigned long long ut = 0, st = 0;
	/* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	   majflt cmajflt utime stime */
	if (sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
		   &st) != 2)
		return -1;
	return (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
}

static int bs_connect(bs_conn *c)
{
	char host[256];
	const char *colon = strrchr(g_addr, ':');
	if (!colon || (size_t)(colon - g_addr) >= sizeof host)
		die("--addr HOST:PORT, not '%s'", g_addr);
	memcpy(host, g_addr, (size_t)(colon - g_addr));
	host[colon - g_addr] = '\0';
	struct addrinfo hints = {0}, *ai;
	hints.ai_socktype = SOCK_STREAM;
	int rc = getaddrinfo(host, colon + 1, &hints, &ai);
	if (rc != 0)
		die("%s: %s", g_addr, gai_strerror(rc));
	int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
		die("connect %s: %s", g_addr, strerror(errno));
	freeaddrinfo(ai);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	memset(c, 0, sizeof *c);
	c->fd = fd;
	return 0;
}

static void bs_write(bs_conn *c, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(c->fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* Reads more bytes into c->buf (compacting it first); dies on EOF. */
static void bs_fill(bs_conn *c)
{
	if (c->off > 0) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len == sizeof c->buf)
		die("reply longer than %zu bytes", sizeof c->buf);
	ssize_t r;
	do
		r = read(c->fd, c->buf + c->len, sizeof c->buf - c->len);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		die("read: %s",
		    r == 0 ? "server closed the connection" : strerror(errno));
	c->len += (size_t)r;
}

/* The next "\r\n"-terminated line if the buffer holds one (NUL-terminated in
   place, consumed), else NULL. */
static char *bs_try_line(bs_conn *c)
{
	char *s = c->buf + c->off, *end = c->buf + c->len;
	for (char *p = s; p + 1 < end; p++) {
		if (p[0] == '\r' && p[1] == '\n') {
			*p = '\0';
			c->off = (size_t)(p + 2 - c->buf);
			return s;
		}
	}
	return NULL;
}

static char *bs_line(bs_conn *c)
{
	char *l;
	while (!(l = bs_try_line(c)))
		bs_fill(c);
	return l;
}

static void bs_cmd(bs_conn *c, const char *cmd, const char *want)
{
	bs_write(c, cmd, strlen(cmd));
	char *l = bs_line(c);
	if (strncmp(l, want, strlen(want)) != 0)
		die("'%.*s' answered '%s'", (int)strcspn(cmd, "\r"), cmd, l);
}

static void bs_use_watch(bs_conn *c, const char *tube, int watch)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "%s %s\r\n", watch ? "watch" : "use", tube);
	bs_cmd(c, cmd, watch ? "WATCHING" : "USING");
	if (watch)
		bs_cmd(c, "ignore default\r\n", "WATCHING");
}

static size_t put_cmd(char *out, size_t cap, long i)
{
	char body[24];
	int b = snprintf(body, sizeof body, "%ld", i);
	int n = snprintf(out, cap, "put 1024 0 60 %d\r\n%s\r\n", b, body);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static long inserted_id(const char *l)
{
	if (strncmp(l, "INSERTED ", 9) != 0)
		die("put answered '%s'", l);
	return strtol(l + 9, NULL, 10);
}

/* n puts, pipelined BS_BATCH at a time when pipelined, else one at a time;
   ids of the jobs into ids (when not NULL). */
static void put_jobs(bs_conn *c, long n, int pipelined, long *ids)
{
	static char out[BS_BATCH * 48];
	long step = pipelined ? BS_BATCH : 1;
	for (long a = 0; a < n; a += step) {
		long b = a + step < n ? a + step : n;
		size_t len = 0;
		for (long i = a; i < b; i++)
			len += put_cmd(out + len, sizeof out - len, i);
		bs_write(c, out, len);
		for (long i = a; i < b; i++) {
			long id = inserted_id(bs_line(c));
			if (ids)
				ids[i] = id;
		}
	}
}

static void delete_ids(bs_conn *c, const long *ids, long n)
{
	static char out[BS_BATCH * 32];
	for (long a = 0; a < n; a += BS_BATCH) {
		long b = a + BS_BATCH < n ? a + BS_BATCH : n;
		size_t len = 0;
		for (long i = a; i < b; i++)
			len += (size_t)snprintf(out + len, sizeof out - len,
						"delete %ld\r\n", ids[i]);
		bs_write(c, out, len);
		for (long i = a; i < b; i++)
			if (strcmp(bs_line(c), "DELETED") != 0)
				die("delete of job %ld refused", ids[i]);
	}
}

/* A value of "stats-tube TUBE" (YAML: "key: value" lines), -1 if absent. */
static long tube_stat(bs_conn *c, const char *tube, const char *key)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "stats-tube %s\r\n", tube);
	bs_write(c, cmd, strlen(cmd));
	char *l = bs_line(c);
	long bytes;
	if (sscanf(l, "OK %ld", &bytes) != 1)
		return strncmp(l, "NOT_FOUND", 9) == 0 ? 0 : -1;
	while (c->len - c->off < (size_t)bytes + 2)
		bs_fill(c);
	char *yaml = c->buf + c->off;
	yaml[bytes] = '\0';
	c->off += (size_t)bytes + 2;
	char pat[64];
	snprintf(pat, sizeof pat, "\n%s: ", key);
	char *p = strstr(yaml, pat);
	return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

/* One reply of a drain connection: RESERVED (run the job, pipeline its
   delete and the next reserve), DELETED, or TIMED_OUT (done).  Returns 0
   when no complete reply is buffered. */
static int drain_step(bs_conn *c, unsigned char *runs, long n)
{
	static const char reserve[] = "reserve-with-timeout 0\r\n";
	char *l = bs_try_line(c);
	if (!l)
		return 0;
	if (c->waiting_delete) {
		if (strcmp(l, "DELETED") != 0)
			die("delete answered '%s'", l);
		c->waiting_delete = 0;
		return 1;
	}
	long id, bytes;
	if (strcmp(l, "TIMED_OUT") == 0) {
		c->done = 1;
		return 1;
	}
	if (sscanf(l, "RESERVED %ld %ld", &id, &bytes) != 2)
		die("reserve answered '%s'", l);
	while (c->len - c->off < (size_t)bytes + 2)
		bs_fill(c);
	char body[24];
	if (bytes <= 0 || bytes >= (long)sizeof body)
		die("job %ld has a body of %ld bytes", id, bytes);
	memcpy(body, c->buf + c->off, (size_t)bytes);
	body[bytes] = '\0';
	c->off += (size_t)bytes + 2;
	long i = strtol(body, NULL, 10); /* the no-op handler: count the run */
	if (i >= 0 && i < n && runs[i] < 255)
		runs[i]++;
	char out[96];
	int len = snprintf(out, sizeof out, "delete %ld\r\n%s", id, reserve);
	bs_write(c, out, (size_t)len);
	c->waiting_delete = 1;
	return 1;
}

/* K connections, one job in flight each, until every one saw TIMED_OUT. */
static void drain(bs_conn *cs, int k, unsigned char *runs, long n)
{
	static const char reserve[] = "reserve-with-timeout 0\r\n";
	struct pollfd pfd[BS_MAXC];
	for (int j = 0; j < k; j++)
		bs_write(&cs[j], reserve, sizeof reserve - 1);
	for (int left = k; left > 0;) {
		int m = 0;
		for (int j = 0; j < k; j++)
			if (!cs[j].done)
				pfd[m++] = (struct pollfd){.fd = cs[j].fd,
							   .events = POLLIN};
		if (poll(pfd, (nfds_t)m, 10000) <= 0)
			die("drain: no reply for 10 s");
		for (int j = 0, p = 0; j < k; j++) {
			if (cs[j].done)
				continue;
			if (pfd[p++].revents == 0)
				continue;
			bs_fill(&cs[j]);
			while (!cs[j].done && drain_step(&cs[j], runs, n))
				;
			if (cs[j].done)
				left--;
		}
	}
}

static void emit(const char *label, const char *wl, const char *variant, int k,
		 long n, double secs, double cpu, double srv, const char *extra)
{
	printf("{\"queue\":\"beanstalkd\",\"store\":\"beanstalkd-%s\","
	       "\"workload\":\"%s\","
	       "\"variant\":\"%s\",",
	       label, wl, variant);
	if (k > 0)
		printf("\"concurrency\":%d,", k);
	printf("\"n\":%ld,\"seconds\":%.6f,\"tasks_per_s\":%.3f,\"cpu_us_per_"
	       "task\":%.3f",
	       n, secs, (double)n / secs, cpu / (double)n);
	if (srv >= 0)
		printf(",\"server_cpu_us_per_task\":%.3f", srv / (double)n);
	printf("%s}\n", extra);
	fflush(stdout);
}

static long parse_long(const char *s, const char *what)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v < 1 || v > 100000000)
		die("%s: not a positive number: '%s'", what, s);
	return v;
}

int main(int argc, char **argv)
{
	long n = 20000, pid = 0;
	const char *label = "binlog", *concs = "4,16";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc && strcmp(a, "-h") && strcmp(a, "--help"))
			die("%s needs a value", a);
		if (!strcmp(a, "--addr"))
			g_addr = argv[++i];
		else if (!strcmp(a, "--n"))
			n = parse_long(argv[++i], "--n");
		else if (!strcmp(a, "--concurrency"))
			concs = argv[++i];
		else if (!strcmp(a, "--label"))
			label = argv[++i];
		else if (!strcmp(a, "--server-pid"))
			pid = parse_long(argv[++i], "--server-pid");
		else {
			fputs("usage: beanstalk --addr HOST:PORT [--n N] "
			      "[--concurrency 4,16] "
			      "[--label L] [--server-pid PID]\n",
			      stderr);
			return strcmp(a, "-h") && strcmp(a, "--help") ? 2 : 0;
		}
	}
	if (n < 4)
		die("--n must be at least 4");

	bs_conn *prod = calloc(1, sizeof *prod);
	bs_conn *cs = calloc(BS_MAXC, sizeof *cs);
	unsigned char *runs = calloc((size_t)n, 1);
	long *ids = calloc((size_t)n, sizeof *ids);
	if (!prod || !cs || !runs || !ids)
		die("out of memory");
	bs_connect(prod);
	long me = (long)getpid();

	/* enqueue, one round trip per put: n/4 jobs, deleted afterwards */
	snprintf(g_tube, sizeof g_tube, "due-peer-%ld-single", me);
	bs_use_watch(prod, g_tube, 0);
	long ns = n / 4;
	double c0 = cpu_us(), s0 = pid ? proc_cpu_us(pid) : -1, t0 = now_s();
	put_jobs(prod, ns, 0, ids);
	double t1 = now_s();
	emit(label, "enqueue", "single", 0, ns, t1 - t0, cpu_us() - c0,
	     pid ? proc_cpu_us(pid) - s0 : -1, "");
	delete_ids(prod, ids, ns);

	int failed = 0;
	for (const char *p = concs; *p;) {
		char *end;
		long k = strtol(p, &end, 10);
		if (end == p || k < 1 || k > BS_MAXC)
			die("--concurrency: numbers 1..%d separated by commas",
			    BS_MAXC);
		p = *end == ',' ? end + 1 : end;

		snprintf(g_tube, sizeof g_tube, "due-peer-%ld-k%ld", me, k);
		bs_use_watch(prod, g_tube, 0);
		c0 = cpu_us(), s0 = pid ? proc_cpu_us(pid) : -1, t0 = now_s();
		put_jobs(prod, n, 1, NULL);
		t1 = now_s();
		if (k == strtol(concs, NULL, 10)) /* once: the first K's fill */
			emit(label, "enqueue", "pipelined", 0, n, t1 - t0,
			     cpu_us() - c0, pid ? proc_cpu_us(pid) - s0 : -1,
			     ",\"batch\":1000");

		for (int j = 0; j < k; j++) {
			bs_connect(&cs[j]);
			bs_use_watch(&cs[j], g_tube, 1);
		}
		memset(runs, 0, (size_t)n);
		c0 = cpu_us(), s0 = pid ? proc_cpu_us(pid) : -1, t0 = now_s();
		drain(cs, (int)k, runs, n);
		t1 = now_s();
		double cpu = cpu_us() - c0,
		       srv = pid ? proc_cpu_us(pid) - s0 : -1;
		long dup = 0, miss = 0;
		for (long i = 0; i < n; i++) {
			if (runs[i] == 0)
				miss++;
			else if (runs[i] > 1)
				dup += runs[i] - 1;
		}
		long left = tube_stat(prod, g_tube, "current-jobs-ready") +
			    tube_stat(prod, g_tube, "current-jobs-reserved");
		char extra[128];
		snprintf(extra, sizeof extra,
			 ",\"duplicates\":%ld,\"missing\":%ld,\"left\":%ld",
			 dup, miss, left);
		emit(label, "drain", "c-client", (int)k, n, t1 - t0, cpu, srv,
		     extra);
		if (dup || miss || left)
			failed = 1;
		for (int j = 0; j < k; j++)
			close(cs[j].fd);
	}
	close(prod->fd);
	free(prod);
	free(cs);
	free(runs);
	free(ids);
	return failed;
}
