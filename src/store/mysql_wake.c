/*
** mysql_wake.c - wake-ups from the binary log (issue 39).
**
** MySQL has no LISTEN; a listener of the MySQL store otherwise learns of a
** task another process made due by polling the one-row due_wake counter
** (mysql.c, "Notifications").  When the server keeps a binary log and the
** user may read it (REPLICATION SLAVE, and on MariaDB 10.5+ BINLOG MONITOR
** for SHOW MASTER STATUS), a reader thread follows the log as a replica
** does (MariaDB Connector/C's replication API) from its current end, and
** writes the listener's eventfd for each change of this store's due_wake
** table: a TABLE_MAP naming <database>.due_wake (ROW and MIXED formats log
** one before each row event of the table) or a QUERY event in the database
** whose text names due_wake (STATEMENT format).  Nothing else wakes it: a
** drain's own claims and completions touch other tables.
**
** Threads.  The reader owns its connection and the replication handle;
** the store's thread only starts it (due__my_wake_start, which opens the
** first link itself so that the caller learns at once whether the log can
** be read) and stops it (due__my_wake_stop).  They share, under mu: stop,
** and sock, the live link's socket, which stop shuts down so that a
** blocked fetch returns at once.  live is atomic: the listener polls the
** counter while it is false.  The eventfd belongs to the store; the
** reader only writes it.
**
** Bounds.  Every read of the link has a timeout (READ_S); the server sends
** a heartbeat every HEARTBEAT_NS while the log is quiet, so a silent link
** is a dead one within READ_S.  A lost link sets live false, writes the
** eventfd (what happened meanwhile is unknown: the listener refills), and
** is opened again RETRY_S later, until the store is closed; the listener
** polls the counter in between.  Each reader announces a server id of its
** own (a replica with the same id would make the server drop the other).
**
** The doorbell (issue 39), where the log cannot be read: the same thread
** and link handling, but the link is a plain connection that reads the
** counter and, while nothing changes, sleeps in a query the server can
** cut short: DUE_MY_BELL_SQL (SLEEP(2.5)).  Before it sleeps it raises the
** flag, row 2 of due_wake; a bump (mysql.c wake()) lowers the flag in
** the statement that increments the counter, and a bump that found it
** raised looks the sleeping queries of this database up in the process
** list and KILLs them (KILL QUERY: its own user's threads need no
** privilege).  The flag is raised before the read that precedes a sleep,
** so a bump after that read finds it raised.  A KILL that reaches the
** connection between the read and the sleep is lost (the server drops a
** KILL QUERY for an idle connection): that bump is seen at the read that
** ends the sleep, 2.5 s later at most, as a bump that rings nobody is (a
** due_schedule() CALL, another user's bump without the right to KILL,
** an older build).  Idle, a read and a sleep every 2.5 s: 0.8 statements
** a second.  After a change the thread reads every BELL_FAST_MS for
** BELL_FAST_FOR_MS without raising the flag, so a flow of submits costs
** the submitters no look-up and no KILL.
*/
#include <errno.h>
#include <mysql.h> /* before mariadb_rpl.h, which needs it */
#include <mariadb_rpl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "due.h"
#include "store/mysql_wake.h"

#define READ_S 3		  /* a fetch's bound: 3 heartbeats */
#define HEARTBEAT_NS 1000000000LL /* the server's heartbeat when idle */
#define RETRY_S 5		  /* a lost link is opened again after */
#define RETRY_MAX_S 60		  /* ... or, while it keeps failing, up to */
#define STEADY_S 30		  /* a link that lasted this long was fine */
/* The doorbell's reads after a change: faster than the poll's 250 ms
   (mysql.c WAKE_FAST_MS), which wakes its consumer at every tick; this
   thread pokes only on a change.  10 cheap reads a second while another
   process submits, for a flow's tasks seen within 100 ms. */
#define BELL_FAST_MS 100
#define BELL_FAST_FOR_MS 3000 /* ... for this long */

struct due_my_wake {
	const due_my_cfg *cfg; /* borrowed from the store, outlives us */
	size_t node;	       /* cfg->hosts[node] */
	int efd;	       /* the store's eventfd: written, never closed */
	unsigned server_id;
	MYSQL *m; /* the reader's (only its thread's, once started) */
	MARIADB_RPL *rpl;
	pthread_t th;
	bool th_started;
	pthread_mutex_t mu; /* guards stop and sock */
	pthread_cond_t cv;  /* stop was set */
	bool stop;
	int sock; /* the live link's socket, -1 when none */
	atomic_bool live;
	bool bell;	       /* the doorbell, not the binary log */
	uint64_t (*gen)(void); /* the doorbell's: this process's bumps */
	int64_t seen;	       /* the doorbell's last read of the counter */
	char label[256];       /* the store's, for the log */
};

/* Tell the listener to look (the eventfd counts; one write is enough). */
static void poke(due_my_wake *w)
{
	uint64_t one = 1;

	(void)!write(w->efd, &one, sizeof(one));
}

/* Has due__my_wake_stop begun? */
static bool stopped(due_my_wake *w)
{
	bool stop;

	pthread_mutex_lock(&w->mu);
	stop = w->stop;
	pthread_mutex_unlock(&w->mu);
	return stop;
}

static void link_close(due_my_wake *w)
{
	pthread_mutex_lock(&w->mu);
	w->sock = -1; /* before the close: its number may be reused */
	pthread_mutex_unlock(&w->mu);
	if (w->rpl)
		mariadb_rpl_close(w->rpl);
	if (w->m)
		mysql_close(w->m);
	w->rpl = NULL;
	w->m = NULL;
}

/*
** Was the last statement KILLed?  A ringer's KILL QUERY names a thread,
** not a query: one that listed the doorbell's sleep before another's KILL
** ended it may cut the statement that follows.
*/
static bool killed(due_my_wake *w)
{
	return mysql_errno(w->m) == 1317; /* ER_QUERY_INTERRUPTED */
}

/*
** Run sql on w->m, its result in *res when res is not NULL; made again
** (up to 5 times) when it was KILLed, which is not a lost link.
*/
static int exec_sql(due_my_wake *w, const char *sql, MYSQL_RES **res)
{
	int rc, tries = 0;

	do {
		rc = mysql_query(w->m, sql);
		if (rc == 0 && res && !(*res = mysql_store_result(w->m)))
			rc = -1;
	} while (rc != 0 && killed(w) && ++tries < 5);
	return rc ? -1 : 0;
}

/* Run one statement on w->m; its first row's first column into out. */
static int one_row(due_my_wake *w, const char *sql, char *out, size_t n,
		   char *out2, size_t n2)
{
	MYSQL_RES *r;
	MYSQL_ROW row;
	int rc = -1;

	if (exec_sql(w, sql, &r) < 0)
		return -1;
	if ((row = mysql_fetch_row(r)) && row[0]) {
		snprintf(out, n, "%s", row[0]);
		if (out2 && mysql_num_fields(r) > 1 && row[1])
			snprintf(out2, n2, "%s", row[1]);
		rc = 0;
	}
	mysql_free_result(r);
	return rc;
}

/* The link is open: its socket, for due__my_wake_stop to shut down. */
static int link_up(due_my_wake *w)
{
	pthread_mutex_lock(&w->mu);
	w->sock = (int)mysql_get_socket(w->m);
	pthread_mutex_unlock(&w->mu);
	return 0;
}

/* Connect to the store's server, bounded by timeout_s for each wait. */
static int link_connect(due_my_wake *w, unsigned timeout_s, char *why, size_t n)
{
	const due_my_cfg *c = w->cfg;
	/* the doorbell's reads wait out its sleep too */
	unsigned rd = READ_S + (w->bell ? DUE_MY_BELL_S : 0);

	if (!(w->m = mysql_init(NULL)))
		return snprintf(why, n, "out of memory"), -1;
	mysql_optionsv(w->m, MYSQL_OPT_CONNECT_TIMEOUT, &timeout_s);
	mysql_optionsv(w->m, MYSQL_OPT_READ_TIMEOUT, &rd);
	mysql_optionsv(w->m, MYSQL_OPT_WRITE_TIMEOUT, &timeout_s);
	if (!mysql_real_connect(w->m, c->socket ? NULL : c->hosts[w->node],
				c->user, c->password, c->db,
				c->socket ? 0 : c->ports[w->node], c->socket,
				0))
		return snprintf(why, n, "cannot connect: %s",
				mysql_error(w->m)),
		       -1;
	return 0;
}

/*
** Open the link: connect, check log_bin, read the log's current end, ask
** for heartbeats and start the dump there.  -1 with the reason in why.
*/
static int link_open(due_my_wake *w, unsigned timeout_s, char *why, size_t n)
{
	char on[8] = "", file[512] = "", pos[32] = "";
	static const char setup[] =
	    "SET @master_heartbeat_period = %lld,"
	    " @master_binlog_checksum = @@global.binlog_checksum,"
	    " @mariadb_slave_capability = 4";
	char sql[sizeof(setup) + 32];
	unsigned long long start;

	if (link_connect(w, timeout_s, why, n) < 0)
		return -1;
	if (one_row(w, "SELECT @@log_bin", on, sizeof(on), NULL, 0) < 0 ||
	    strcmp(on, "1") != 0)
		return snprintf(why, n, "log_bin is off"), -1;
	if (one_row(w, "SHOW MASTER STATUS", file, sizeof(file), pos,
		    sizeof(pos)) < 0)
		return snprintf(why, n, "SHOW MASTER STATUS: %s",
				mysql_errno(w->m) ? mysql_error(w->m)
						  : "no row"),
		       -1;
	start = strtoull(pos, NULL, 10);
	snprintf(sql, sizeof(sql), setup, HEARTBEAT_NS);
	if (mysql_query(w->m, sql) != 0)
		return snprintf(why, n, "%s", mysql_error(w->m)), -1;
	if (!(w->rpl = mariadb_rpl_init(w->m)))
		return snprintf(why, n, "mariadb_rpl_init failed"), -1;
	mariadb_rpl_optionsv(w->rpl, MARIADB_RPL_SERVER_ID, w->server_id);
	mariadb_rpl_optionsv(w->rpl, MARIADB_RPL_FILENAME, file, strlen(file));
	mariadb_rpl_optionsv(w->rpl, MARIADB_RPL_START, start);
	mariadb_rpl_optionsv(w->rpl, MARIADB_RPL_FLAGS, 0);
	if (mariadb_rpl_open(w->rpl) != 0)
		return snprintf(why, n, "binlog dump: %s", mysql_error(w->m)),
		       -1;
	return link_up(w);
}

static bool named(const MARIADB_STRING *s, const char *name)
{
	size_t n = strlen(name);

	return s->str && s->length == n && memcmp(s->str, name, n) == 0;
}

/* Does the text s contain name? */
static bool mentions(const MARIADB_STRING *s, const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; s->length >= n && i <= s->length - n; i++)
		if (memcmp(s->str + i, name, n) == 0)
			return true;
	return false;
}

/* Does ev change this store's due_wake? */
static bool wakes(const due_my_wake *w, const MARIADB_RPL_EVENT *ev)
{
	const char *db = w->cfg->db;

	if (ev->event_type == TABLE_MAP_EVENT)
		return named(&ev->event.table_map.database, db) &&
		       named(&ev->event.table_map.table, "due_wake");
	if (ev->event_type == QUERY_EVENT)
		return named(&ev->event.query.database, db) &&
		       ev->event.query.statement.str &&
		       mentions(&ev->event.query.statement, "due_wake");
	return false;
}

/* Follow the link until it fails or stop shut it down. */
static void follow(due_my_wake *w)
{
	MARIADB_RPL_EVENT *ev = NULL, *got;

	/* each fetch reuses ev; the one that fails frees it (3.3) */
	while ((got = mariadb_rpl_fetch(w->rpl, ev))) {
		ev = got;
		if (wakes(w, ev))
			poke(w);
	}
}

/* Sleep ms milliseconds unless stopped; true when stopped. */
static bool nap(due_my_wake *w, long ms)
{
	struct timespec until;
	bool stop;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&w->mu);
	while (!w->stop &&
	       pthread_cond_timedwait(&w->cv, &w->mu, &until) != ETIMEDOUT)
		;
	stop = w->stop;
	pthread_mutex_unlock(&w->mu);
	return stop;
}

static int64_t mono_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* The counter and the flag (0 for a missing row: a restarted server). */
static int bell_read(due_my_wake *w, int64_t *n, int64_t *flag)
{
	char a[32] = "", b[32] = "";

	if (one_row(w,
		    "SELECT COALESCE(MAX(IF(id = 1, n, NULL)), 0),"
		    " COALESCE(MAX(IF(id = 2, n, NULL)), 0) FROM due_wake",
		    a, sizeof(a), b, sizeof(b)) < 0)
		return -1;
	*n = strtoll(a, NULL, 10);
	*flag = strtoll(b, NULL, 10);
	return 0;
}

/*
** Raise the flag: the next bump rings.  The counter's row is inserted
** too when it is missing (a restarted server, a TRUNCATE: its 0 is what
** bell_read read), so that the bump that finds the flag raised updates
** both rows and its affected rows say 4: one that inserted the counter
** said 3, and rang nobody.
*/
static int bell_raise(due_my_wake *w)
{
	return exec_sql(w,
			"INSERT INTO due_wake (id, n) VALUES (1, 0), (2, 1)"
			" ON DUPLICATE KEY UPDATE n = IF(VALUES(n) = 1, 1, n)",
			NULL);
}

/*
** Open the doorbell's connection and read the counter.  -1 with why.  A
** server-wide statement time limit under the sleep (MariaDB's
** max_statement_time, MySQL's max_execution_time for SELECTs) would cut
** every sleep: lifted for this session, whichever the server has.
*/
static int bell_open(due_my_wake *w, unsigned timeout_s, char *why, size_t n)
{
	int64_t flag;

	if (link_connect(w, timeout_s, why, n) < 0)
		return -1;
	if (mysql_query(w->m, "SET SESSION max_statement_time = 0") != 0)
		(void)mysql_query(w->m, "SET SESSION max_execution_time = 0");
	if (bell_read(w, &w->seen, &flag) < 0)
		return snprintf(why, n, "read due_wake: %s", mysql_error(w->m)),
		       -1;
	return link_up(w);
}

/*
** Sleep in DUE_MY_BELL_SQL until it ends or a bump KILLs it: 0 either
** way (MariaDB answers a KILLed SLEEP with error 1317, MySQL with 1),
** -1 when the link failed.
*/
static int bell_sleep(due_my_wake *w)
{
	MYSQL_RES *r = NULL;

	/* the error comes with the query's answer or after its header */
	if (mysql_query(w->m, DUE_MY_BELL_SQL) == 0 &&
	    (r = mysql_store_result(w->m)))
		mysql_free_result(r);
	return mysql_errno(w->m) == 0 || killed(w) ? 0 : -1;
}

/* Read, and sleep while nothing changes, until the link fails or stop. */
static void bell_wait(due_my_wake *w)
{
	int64_t n, flag, fast_until = 0;
	uint64_t gen = w->gen(), g;

	while (!stopped(w)) {
		if (bell_read(w, &n, &flag) < 0)
			break;
		/* a change this process wrote since the last read was
		   (likely) its own, poked at once anyway: no fast reads for
		   it (w->gen counts them; as mysql.c's wake_tick: a worker's
		   start-up probe would else keep an idle fleet reading fast) */
		g = w->gen();
		if (n != w->seen) {
			w->seen = n;
			poke(w);
			if (g == gen)
				fast_until = mono_ms() + BELL_FAST_FOR_MS;
		}
		gen = g;
		if (mono_ms() < fast_until) {
			if (nap(w, BELL_FAST_MS))
				return;
		} else if (flag == 0) {
			/* raised, then read again: a bump before the raise
			   would else go unseen for a whole sleep */
			if (bell_raise(w) < 0)
				break;
		} else if (bell_sleep(w) < 0) {
			break;
		}
	}
}

/* Open the link of w's kind.  -1 with why. */
static int link_open_any(due_my_wake *w, unsigned timeout_s, char *why,
			 size_t n)
{
	return w->bell ? bell_open(w, timeout_s, why, n)
		       : link_open(w, timeout_s, why, n);
}

/* The next wait before opening a lost link again: doubled, at most
   RETRY_MAX_S. */
static long longer(long s) { return s * 2 > RETRY_MAX_S ? RETRY_MAX_S : s * 2; }

/*
** The thread: follow the log or wait for the bell; after a loss, open it
** again, and again until it opens or the store is closed (the listener
** polls the counter meanwhile).  A link that fails soon after it opened
** (a server that interrupts the doorbell's sleep, refuses its flag, ...)
** waits twice as long each time, up to a minute, so that a lasting
** refusal costs a log line a minute, not one every 5 s.
*/
static void *run(void *arg)
{
	due_my_wake *w = arg;
	const char *name = w->bell ? "doorbell" : "binlog";
	char why[512];
	long delay = RETRY_S;
	int64_t up_since = mono_ms();

	mysql_thread_init();
	for (;;) {
		if (w->bell)
			bell_wait(w);
		else
			follow(w);
		if (stopped(w))
			break;
		delay = mono_ms() - up_since < STEADY_S * 1000L ? longer(delay)
								: RETRY_S;
		due__log("info", "mysql store", w->label,
			 "wake-ups: %s link lost (%s); polling due_wake, the "
			 "%s again in %ld s",
			 name, w->m ? mysql_error(w->m) : "no connection", name,
			 delay);
		atomic_store(&w->live, false);
		link_close(w);
		poke(w); /* what came meanwhile is unknown: look */
		for (;;) {
			if (nap(w, delay * 1000L))
				goto out;
			if (link_open_any(w, RETRY_S, why, sizeof(why)) == 0)
				break;
			link_close(w);
			delay = longer(delay);
		}
		if (stopped(w))
			break;
		up_since = mono_ms();
		atomic_store(&w->live, true);
		poke(w);
		due__log("info", "mysql store", w->label, "wake-ups: %s again",
			 name);
	}
out:
	link_close(w);
	mysql_thread_end();
	return NULL;
}

/* A server id of this reader: per process and per reader, high bits set
 * so that it is unlikely to be a real replica's. */
static unsigned reader_id(void)
{
	static atomic_uint opened;
	unsigned k = atomic_fetch_add(&opened, 1);

	return 0x40000000u | ((((unsigned)getpid() << 8) ^ k) & 0x3fffffffu);
}

/* Start the binary log's reader (gen NULL) or the doorbell. */
static int start(due_my_wake **out, uint64_t (*gen)(void),
		 const due_my_cfg *cfg, size_t node, const char *label,
		 unsigned timeout_s, int efd, char *why, size_t n)
{
	due_my_wake *w = calloc(1, sizeof(*w));

	*out = NULL;
	if (!w)
		return snprintf(why, n, "out of memory"), -1;
	snprintf(w->label, sizeof(w->label), "%s", label);
	w->cfg = cfg;
	w->node = node;
	w->efd = efd;
	w->sock = -1;
	w->server_id = reader_id();
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	w->bell = gen != NULL;
	w->gen = gen;
	if (link_open_any(w, timeout_s, why, n) < 0) {
		link_close(w);
		due__my_wake_stop(w);
		return -1;
	}
	atomic_store(&w->live, true);
	if (pthread_create(&w->th, NULL, run, w) != 0) {
		snprintf(why, n, "cannot start the wake-up thread");
		link_close(w);
		due__my_wake_stop(w);
		return -1;
	}
	w->th_started = true;
	*out = w;
	return 0;
}

int due__my_wake_start(due_my_wake **out, const due_my_cfg *cfg, size_t node,
		       const char *label, unsigned timeout_s, int efd,
		       char *why, size_t n)
{
	return start(out, NULL, cfg, node, label, timeout_s, efd, why, n);
}

int due__my_bell_start(due_my_wake **out, uint64_t (*gen)(void),
		       const due_my_cfg *cfg, size_t node, const char *label,
		       unsigned timeout_s, int efd, char *why, size_t n)
{
	return start(out, gen, cfg, node, label, timeout_s, efd, why, n);
}

bool due__my_wake_live(const due_my_wake *w)
{
	return w && atomic_load(&w->live);
}

void due__my_wake_stop(due_my_wake *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	if (w->sock >= 0)
		shutdown(w->sock, SHUT_RDWR); /* the blocked fetch returns */
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
	if (w->th_started)
		pthread_join(w->th, NULL);
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w);
}
