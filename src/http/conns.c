/*
** conns.c - a deadline for each whole request (--timeout).
**
** libmicrohttpd's connection timeout is an idle timeout: every byte
** received restarts it, so a client sending one header byte a second
** holds its connection forever (slowloris).  Here each connection carries
** the time its current request's clock started: when the connection
** opened, or when the previous reply ended.  Until the request has arrived
** whole (headers and body) the connection sits in a list ordered by that
** time; the ticker (server.c) walks the list from its oldest end and shuts
** the socket of every connection whose request is not in after --timeout.
** libmicrohttpd then sees the socket end and closes the connection as if
** the client had gone; nothing is logged.  While a request is answered
** (store work, sending) the connection is out of the list: the idle
** timeout alone applies then.
**
** Threads: open/close/busy/idle run on the connection's event thread,
** reap on the ticker.  One mutex guards the list.  The notification that a
** connection closed comes before libmicrohttpd closes the socket, and reap
** holds the mutex while it shuts a socket, so it never shuts a descriptor
** that was closed and reused meanwhile.
*/
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http/internal.h"

void http_conns_init(http_conns *cs, int64_t timeout_us)
{
	memset(cs, 0, sizeof(*cs));
	pthread_mutex_init(&cs->mu, NULL);
	cs->timeout_us = timeout_us;
}

void http_conns_destroy(http_conns *cs) { pthread_mutex_destroy(&cs->mu); }

/* Unlink hc (cs->mu held). */
static void disarm(http_conns *cs, http_conn *hc)
{
	if (!hc->armed)
		return;
	if (hc->prev)
		hc->prev->next = hc->next;
	else
		cs->head = hc->next;
	if (hc->next)
		hc->next->prev = hc->prev;
	else
		cs->tail = hc->prev;
	hc->prev = hc->next = NULL;
	hc->armed = false;
}

/* Start hc's clock now and append it (cs->mu held). */
static void arm(http_conns *cs, http_conn *hc)
{
	disarm(cs, hc);
	hc->since_us = http_now_us();
	hc->prev = cs->tail;
	if (cs->tail)
		cs->tail->next = hc;
	else
		cs->head = hc;
	cs->tail = hc;
	hc->armed = true;
}

http_conn *http_conns_open(http_conns *cs, int fd)
{
	http_conn *hc = calloc(1, sizeof(*hc));

	if (!hc)
		return NULL;
	hc->fd = fd;
	pthread_mutex_lock(&cs->mu);
	arm(cs, hc);
	pthread_mutex_unlock(&cs->mu);
	return hc;
}

void http_conns_close(http_conns *cs, http_conn *hc)
{
	if (!hc)
		return;
	pthread_mutex_lock(&cs->mu);
	disarm(cs, hc);
	pthread_mutex_unlock(&cs->mu);
	free(hc);
}

void http_conns_busy(http_conns *cs, http_conn *hc)
{
	if (!hc)
		return;
	pthread_mutex_lock(&cs->mu);
	disarm(cs, hc);
	pthread_mutex_unlock(&cs->mu);
}

void http_conns_idle(http_conns *cs, http_conn *hc)
{
	if (!hc)
		return;
	pthread_mutex_lock(&cs->mu);
	arm(cs, hc);
	pthread_mutex_unlock(&cs->mu);
}

void http_conns_reap(http_conns *cs, int64_t now_us)
{
	pthread_mutex_lock(&cs->mu);
	while (cs->head && now_us - cs->head->since_us >= cs->timeout_us) {
		http_conn *hc = cs->head;
		disarm(cs, hc);
		shutdown(hc->fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&cs->mu);
}
