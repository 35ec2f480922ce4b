/*
** mysql_wake.h - wake-ups of the MySQL store's listeners from the binary
** log, or else the doorbell (mysql_wake.c): a thread per listening handle
** that writes an eventfd whenever this store's due_wake table changes.
*/
#ifndef DUE_MYSQL_WAKE_H
#define DUE_MYSQL_WAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/mysql_conn.h"

typedef struct due_my_wake due_my_wake;

/*
** Open a replication link to cfg->hosts[node] (each wait bounded by
** timeout_s) at the log's current end and start its reader, which writes
** efd (an eventfd the caller owns and keeps open until the stop) at each
** change of <cfg->db>.due_wake, and once each time the link is lost or
** back; the link's loss and return are logged on stderr, headed by
** label.  cfg is borrowed until due__my_wake_stop.  0 and *out when the
** log can be read; -1 with the reason in why (nothing left running) when
** it cannot (log_bin off, a missing grant, ...).
*/
int due__my_wake_start(due_my_wake **out, const due_my_cfg *cfg, size_t node,
		       const char *label, unsigned timeout_s, int efd,
		       char *why, size_t n);

/*
** The doorbell instead, where the log cannot be read (mysql_wake.c): a
** connection that sleeps in DUE_MY_BELL_SQL until a bump KILLs it, with
** the same arguments, eventfd and stop; gen() counts the bumps this
** process made (a change it made is not another process's flow).  -1
** with why when it cannot connect or read due_wake.
*/
int due__my_bell_start(due_my_wake **out, uint64_t (*gen)(void),
		       const due_my_cfg *cfg, size_t node, const char *label,
		       unsigned timeout_s, int efd, char *why, size_t n);

/* The doorbell's sleep, exactly as the ringing bump looks it up, and its
   length in whole seconds, rounded up (2.5 s: a read and a sleep make an
   idle listener's 0.8 statements a second, under issue 39's 1 a second
   with the worker's refills and reports; a bump that rings nobody waits
   2.5 s at most). */
#define DUE_MY_BELL_SQL "SELECT SLEEP(2.5) AS due_doorbell"
#define DUE_MY_BELL_S 3

/* true while the link is up (false for NULL): else poll the counter. */
bool due__my_wake_live(const due_my_wake *w);

/* Stop the reader (a blocked read is cut at once), close, free.  NULL: no-op.
 */
void due__my_wake_stop(due_my_wake *w);

#endif /* DUE_MYSQL_WAKE_H */
