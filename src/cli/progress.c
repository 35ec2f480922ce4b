/*
** progress.c - the progress line of long commands on a terminal.
**
** `due add --batch` of a million lines, `due prune` of millions of tasks
** and `due init` upgrading a big old store take seconds to minutes.  On a
** terminal they say how far they are, as one line on stderr redrawn in
** place ("\r", then spaces over what the last frame left):
**
**   due add: read 340000 lines (28%), 85000/s, 3 s left
**   due add: writing 1000000 tasks in one transaction, 4 s
**   due prune: deleted 340000 of ~1000000 tasks, 52000/s, ~13 s left
**   due init: upgrade schema to version 5 (step 1 of 3), 12 s
**
** The line is shown only when stderr is a terminal and the command was
** not asked for --json: in scripts, pipes and logs nothing changes.  It
** goes to stderr, never stdout, and is erased when the command ends, so
** what the command prints after it reads as without it.
**
** Threads.  A ticker thread redraws the line every TICK_US, so a phase the
** command cannot measure from inside (one transaction, one schema step)
** still shows its time running.  The command's thread only updates the
** numbers under `mu`; the ticker only reads them and writes stderr.  The
** command's thread writes nothing to stderr between cli_progress_start()
** and cli_progress_end(), which stops and joins the ticker first.
*/
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

#define TICK_US 250000 /* redraw period: 4 frames a second */

struct cli_progress {
	pthread_t ticker;
	pthread_mutex_t mu; /* guards everything below */
	pthread_cond_t cv;  /* signalled by cli_progress_end() */
	bool stop;
	const char *prog;
	cli_progress_phase ph; /* the phase being shown */
	int64_t done;	       /* units done in this phase */
	double frac;	       /* fraction done (0..1), or < 0: unknown */
	int64_t t0;	       /* monotonic start of the phase, us */
	size_t shown;	       /* characters of the last frame on screen */
	bool hidden;	       /* cli_progress_hide(): draw no more */
};

/* The progress line of this process (one at a time): the command's thread. */
static cli_progress *active;

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* "<1 s", "12 s", "2 min 5 s", "1 h 2 min": what a person reads. */
static void human_secs(char *buf, size_t n, double s)
{
	long v = s < 0 ? 0 : (long)(s + 0.5);

	if (v == 0)
		snprintf(buf, n, "<1 s");
	else if (v < 60)
		snprintf(buf, n, "%ld s", v);
	else if (v < 3600)
		snprintf(buf, n, "%ld min %ld s", v / 60, v % 60);
	else
		snprintf(buf, n, "%ld h %ld min", v / 3600, v / 60 % 60);
}

/* Append printf output at buf[*o], never past n (always terminated). */
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t n, size_t *o, const char *fmt, ...)
{
	va_list ap;
	int w;

	if (*o >= n)
		return;
	va_start(ap, fmt);
	w = vsnprintf(buf + *o, n - *o, fmt, ap);
	va_end(ap);
	if (w > 0)
		*o = *o + (size_t)w < n ? *o + (size_t)w : n - 1;
}

/*
** One frame's text, without the program's name, into buf (n > 0): "read
** 340000 lines (28%), 85000/s, 3 s left".  Returns its length.
*/
static size_t format(char *buf, size_t n, const cli_progress_phase *ph,
		     int64_t done, double frac, int64_t elapsed_us)
{
	double secs = (double)elapsed_us / 1e6;
	int64_t total = ph->total > 0 && done <= ph->total ? ph->total : 0;
	const char *tilde = ph->approx ? "~" : "";
	char t[32];
	size_t o = 0;

	buf[0] = '\0';
	if (!ph->unit) { /* a phase measured only by its time */
		human_secs(t, sizeof(t), secs);
		put(buf, n, &o, "%s, %s", ph->what, t);
		return o;
	}
	if (total && !ph->approx)
		put(buf, n, &o, "%s %lld/%lld %s", ph->what, (long long)done,
		    (long long)total, ph->unit);
	else if (total)
		put(buf, n, &o, "%s %lld of ~%lld %s", ph->what,
		    (long long)done, (long long)total, ph->unit);
	else
		put(buf, n, &o, "%s %lld %s", ph->what, (long long)done,
		    ph->unit);
	if (frac < 0 && total)
		frac = (double)done / (double)total;
	if (frac >= 0 && !ph->approx)
		put(buf, n, &o, " (%d%%)", (int)(frac >= 1 ? 100 : frac * 100));
	if (secs < 0.2 || done <= 0) /* too early for a rate */
		return o;
	put(buf, n, &o, ", %.0f/s", (double)done / secs);
	if (frac > 0 && frac < 1) {
		human_secs(t, sizeof(t), secs * (1 - frac) / frac);
		put(buf, n, &o, ", %s%s left", tilde, t);
	}
	return o;
}

/* The terminal's width, or 80 when it cannot say. */
static size_t width(void)
{
	struct winsize ws;
	if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 80;
}

/*
** Draw the current frame over the last one: "\r", the text cut to the
** terminal's width less one (a line that wraps cannot be redrawn in
** place), spaces over the rest of the last frame.  Under p->mu.
*/
static void draw(cli_progress *p)
{
	char line[512];
	size_t n, w = width() - 1;

	n = (size_t)snprintf(line, sizeof(line), "%s: ", p->prog);
	if (n >= sizeof(line))
		n = sizeof(line) - 1;
	n += format(line + n, sizeof(line) - n, &p->ph, p->done, p->frac,
		    mono_us() - p->t0);
	if (n > w)
		n = w;
	fprintf(stderr, "\r%.*s", (int)n, line);
	for (size_t i = n; i < p->shown; i++)
		fputc(' ', stderr);
	fflush(stderr);
	p->shown = n;
}

/* Erase the line: spaces over the last frame, the cursor back at 0. */
static void erase(cli_progress *p)
{
	if (!p->shown)
		return;
	fputc('\r', stderr);
	for (size_t i = 0; i < p->shown; i++)
		fputc(' ', stderr);
	fputc('\r', stderr);
	fflush(stderr);
	p->shown = 0;
}

static void *tick(void *arg)
{
	cli_progress *p = arg;
	struct timespec until;

	pthread_mutex_lock(&p->mu);
	while (!p->stop) {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += TICK_US * 1000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&p->cv, &p->mu, &until);
		if (!p->stop && !p->hidden && p->ph.what[0])
			draw(p);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

cli_progress *cli_progress_start(const cli_ctx *c)
{
	cli_progress *p;

	if (c->json || !isatty(STDERR_FILENO))
		return NULL;
	if (!(p = calloc(1, sizeof(*p))))
		return NULL; /* no progress line is no failure */
	p->prog = c->prog;
	p->frac = -1;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
	if (pthread_create(&p->ticker, NULL, tick, p) != 0) {
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->mu);
		free(p);
		return NULL;
	}
	active = p;
	return p;
}

void cli_progress_hide(void)
{
	cli_progress *p = active;

	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->hidden = true;
	erase(p);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_phase_begin(cli_progress *p, const cli_progress_phase *ph)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	if (!p->hidden && p->ph.what[0] && p->ph.unit)
		draw(p); /* the last numbers of the phase that ends */
	p->ph = *ph;
	p->done = 0;
	p->frac = -1;
	p->t0 = mono_us();
	if (!p->hidden)
		draw(p);
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_set(cli_progress *p, int64_t done, double frac)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->done = done;
	p->frac = frac;
	pthread_mutex_unlock(&p->mu);
}

void cli_progress_end(cli_progress *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->ticker, NULL);
	if (!p->hidden && p->ph.what[0] && p->ph.unit)
		draw(p); /* the last numbers, however brief */
	erase(p);
	active = NULL;
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
