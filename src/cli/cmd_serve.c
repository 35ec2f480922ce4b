/*
** cmd_serve.c - `due serve`: the HTTP API, dashboard, health check and
** Prometheus metrics (src/http/).
**
** Safety first: the default is loopback; any other address is refused
** unless --token-file gives a bearer token, which every change (any method
** but GET and HEAD) must then carry.  The store is opened once here to
** check it (schema, reachability) with the usual exit codes; the server's
** threads then open their own handles.  SIGINT/SIGTERM stop it cleanly.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "http/http.h"

static const char usage[] =
    "usage: due serve [--listen HOST:PORT] [--token-file FILE] [--threads N]\n"
    "                 [--max-connections N] [--timeout DUR] [--db URL]\n"
    "\n"
    "Serve the HTTP API (/v1/...), the dashboard (/), the health check\n"
    "(/health: 200 UP, 503 DOWN while dead letters exist) and Prometheus\n"
    "metrics (/metrics).  See docs/HTTP.md.\n"
    "\n"
    "  --listen HOST:PORT   address to listen on (default 127.0.0.1:7070);\n"
    "                       [::1]:PORT for IPv6; PORT 0 picks a free port.\n"
    "                       A non-loopback address needs --token-file.\n"
    "  --token-file FILE    bearer token (first line, 16+ printable\n"
    "                       characters): every change (POST, PUT, DELETE)\n"
    "                       must send 'Authorization: Bearer TOKEN'\n"
    "  --threads N          event-loop threads, and store threads for reads\n"
    "                       and for changes each (default 4); 2N threads\n"
    "                       run claims (POST /v1/claims)\n"
    "  --max-connections N  open connections at most (default 10000)\n"
    "  --timeout DUR        a request must arrive whole within this time,\n"
    "                       and idle connections are closed after it;\n"
    "                       requests wait at most this long for a free\n"
    "                       store thread (503 store_busy), then at most the\n"
    "                       store URL's timeout= (10s) for its answer\n"
    "                       (default 30s).  A long poll (POST /v1/claims)\n"
    "                       is answered within its wait + 3 s, or 503\n"
    "\n"
    "Prints 'listening on http://HOST:PORT/' on stdout once it accepts\n"
    "connections.  Request bodies are limited to 2 x the payload limit\n"
    "($DUE_MAX_PAYLOAD, default 1 MiB) + 64 KiB, a \\uXXXX escape counting\n"
    "as 2 bytes (see docs/HTTP.md).\n";

enum {
	O_LISTEN = 'l',
	O_TOKEN = 't',
	O_THREADS = 'T',
	O_MAXCONN = 'c',
	O_TIMEOUT = 'o'
};

typedef struct serve_args {
	const char *listen, *token_file;
	long threads, max_conns;
	int64_t timeout_us;
	struct sockaddr_storage ss;
	socklen_t sslen;
	char host[INET6_ADDRSTRLEN + 2];
	char token[512];
} serve_args;

static int parse_opts(cli_ctx *c, serve_args *a, int argc, char **argv)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, O_LISTEN},
	    {"token-file", required_argument, NULL, O_TOKEN},
	    {"threads", required_argument, NULL, O_THREADS},
	    {"max-connections", required_argument, NULL, O_MAXCONN},
	    {"timeout", required_argument, NULL, O_TIMEOUT},
	    CLI_COMMON_OPTS,
	    {0}};
	int opt;

	cli_getopt_reset();
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (opt != OPT_JSON && cli_common_opt(c, opt, optarg))
			continue;
		switch (opt) {
		case 'h': fputs(usage, stdout); return -1;
		case O_LISTEN: a->listen = optarg; break;
		case O_TOKEN: a->token_file = optarg; break;
		case O_THREADS:
			if (cli_parse_int(c, "--threads", optarg, 1, 64,
					  &a->threads))
				return EXIT_USAGE;
			break;
		case O_MAXCONN:
			if (cli_parse_int(c, "--max-connections", optarg, 1,
					  100000, &a->max_conns))
				return EXIT_USAGE;
			break;
		case O_TIMEOUT:
			if (cli_parse_duration(c, "--timeout", optarg,
					       &a->timeout_us))
				return EXIT_USAGE;
			if (a->timeout_us < 1000000 ||
			    a->timeout_us > 3600000000LL)
				return cli_usage_error(
				    c, "--timeout: from 1s to 1h");
			break;
		default: return cli_bad_option(c, opt, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(c, "unexpected argument '%s'",
				       argv[optind]);
	return 0;
}

/* Split "HOST:PORT", "[V6]:PORT" or "PORT" into host and port text. */
static int split_listen(cli_ctx *c, const char *text, char *host, size_t cap,
			const char **port)
{
	const char *colon;
	size_t n;

	if (text[0] == '[') {
		const char *end = strchr(text, ']');
		if (!end || end[1] != ':')
			return cli_usage_error(
			    c,
			    "invalid --listen '%s': expected "
			    "[IPV6]:PORT",
			    text);
		n = (size_t)(end - text - 1);
		text++;
		colon = end + 1;
	} else if (!(colon = strrchr(text, ':'))) {
		snprintf(host, cap, "127.0.0.1");
		*port = text;
		return 0;
	} else {
		n = (size_t)(colon - text);
		if (memchr(text, ':', n))
			return cli_usage_error(c,
					       "invalid --listen '%s': put an "
					       "IPv6 address in brackets, e.g. "
					       "[::1]:7070",
					       text);
	}
	if (n == 0 || n >= cap)
		return cli_usage_error(c,
				       "invalid --listen '%s': expected "
				       "HOST:PORT, e.g. 127.0.0.1:7070",
				       text);
	memcpy(host, text, n);
	host[n] = '\0';
	*port = colon + 1;
	return 0;
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
		return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
	}
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
	return IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
}

/* Resolve --listen into a->ss and a->host (printable, v6 in brackets). */
static int resolve_listen(cli_ctx *c, serve_args *a)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	const char *port_text = NULL;
	char host[256], *end, ip[INET6_ADDRSTRLEN];
	long port;
	int rc;

	if ((rc = split_listen(c, a->listen, host, sizeof(host), &port_text)))
		return rc;
	errno = 0;
	port = strtol(port_text, &end, 10);
	if (errno || *end || end == port_text || port < 0 || port > 65535)
		return cli_usage_error(c,
				       "invalid --listen '%s': port must be "
				       "0..65535",
				       a->listen);
	if ((rc = getaddrinfo(host, NULL, &hints, &res)) != 0)
		return cli_usage_error(c, "invalid --listen '%s': %s",
				       a->listen, gai_strerror(rc));
	memcpy(&a->ss, res->ai_addr, res->ai_addrlen);
	a->sslen = res->ai_addrlen;
	freeaddrinfo(res);
	if (a->ss.ss_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)&a->ss;
		s->sin_port = htons((uint16_t)port);
		inet_ntop(AF_INET, &s->sin_addr, ip, sizeof(ip));
		snprintf(a->host, sizeof(a->host), "%s", ip);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)&a->ss;
		s->sin6_port = htons((uint16_t)port);
		inet_ntop(AF_INET6, &s->sin6_addr, ip, sizeof(ip));
		snprintf(a->host, sizeof(a->host), "[%s]", ip);
	}
	return 0;
}

/* Read the token: first line, trailing blanks cut, 16+ printable chars. */
static int read_token(cli_ctx *c, serve_args *a)
{
	unsigned char *buf = NULL;
	size_t len = 0, n;
	struct stat st;
	int rc;

	if ((rc = cli_read_file(c, a->token_file, 4096, &buf, &len)))
		return rc;
	n = strcspn((char *)buf, "\n");
	while (n > 0 &&
	       (buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
		n--;
	buf[n] = '\0';
	rc = 0;
	for (size_t i = 0; i < n && !rc; i++)
		if (buf[i] <= ' ' || buf[i] > '~')
			rc = cli_usage_error(
			    c,
			    "token file '%s': the token must be "
			    "printable ASCII without blanks",
			    a->token_file);
	if (!rc && (len > 4096 || n < 16 || n >= sizeof(a->token)))
		rc = cli_usage_error(c,
				     "token file '%s': the token must be 16 "
				     "to 511 characters on the first line",
				     a->token_file);
	if (!rc)
		memcpy(a->token, buf, n + 1);
	free(buf);
	if (!rc && stat(a->token_file, &st) == 0 && (st.st_mode & 077))
		fprintf(stderr,
			"due serve: warning: token file '%s' is readable "
			"by other users\n",
			a->token_file);
	return rc;
}

/*
** Room for every connection: raise the soft limit on open files to what
** --max-connections needs (up to the hard limit); with a lower hard limit,
** accept fewer connections, and say so.
*/
static void fit_files(cli_ctx *c, serve_args *a)
{
	const rlim_t spare = 256; /* store handles, threads, the log, ... */
	rlim_t want = (rlim_t)a->max_conns + spare;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want
			  ? want
			  : rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want) {
		long room =
		    rl.rlim_cur > spare + 16 ? (long)(rl.rlim_cur - spare) : 16;
		fprintf(stderr,
			"%s: warning: %ld connections at most (the limit "
			"on open files is %llu)\n",
			c->prog, room, (unsigned long long)rl.rlim_cur);
		a->max_conns = room;
	}
}

/* Run the server until SIGINT or SIGTERM. */
static int run(cli_ctx *c, serve_args *a)
{
	due__http_opts o = {0};
	due_http *h = NULL;
	char err[256];
	sigset_t set;
	int sig = 0, rc;

	fit_files(c, a);
	o.db_url = cli_db_url(c);
	o.token = a->token[0] ? a->token : NULL;
	o.addr = (const struct sockaddr *)&a->ss;
	o.addrlen = a->sslen;
	o.loopback = is_loopback(&a->ss);
	o.threads = (unsigned)a->threads;
	o.max_conns = (unsigned)a->max_conns;
	o.timeout_s = (unsigned)(a->timeout_us / 1000000);
	if ((rc = cli_max_payload(c, &o.max_payload)))
		return rc;
	o.max_body = 2 * o.max_payload + 65536;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (due__http_start(&h, &o, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: cannot listen on %s: %s\n", c->prog,
			a->listen, err);
		return EXIT_STORE;
	}
	printf("listening on http://%s:%u/\n", a->host, due__http_port(h));
	fflush(stdout);
	fprintf(stderr, "%s: store %s, %s, %ld threads\n", c->prog, o.db_url,
		o.token ? "token required for changes"
			: "no token (loopback only)",
		a->threads);
	sigwait(&set, &sig);
	fprintf(stderr, "%s: %s, stopping\n", c->prog, strsignal(sig));
	due__http_stop(h);
	return 0;
}

int cmd_serve(int argc, char **argv)
{
	serve_args a = {.listen = "127.0.0.1:7070",
			.threads = 4,
			.max_conns = 10000,
			.timeout_us = 30000000};
	cli_ctx c = {.prog = "due serve"};
	due_db *db = NULL;
	int rc = parse_opts(&c, &a, argc, argv);

	if (rc)
		return rc < 0 ? 0 : rc;
	if ((rc = resolve_listen(&c, &a)))
		return rc;
	if (!a.token_file && !is_loopback(&a.ss))
		return cli_usage_error(
		    &c,
		    "refusing to listen on %s (not loopback) "
		    "without --token-file",
		    a.listen);
	if (a.token_file && (rc = read_token(&c, &a)))
		return rc;
	if ((rc = cli_open(&c, &db)))
		return rc;
	due_close(db);
	return run(&c, &a);
}
