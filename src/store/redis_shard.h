/*
** redis_shard.h - between redis.c (one store in one slot) and
** redis_shard.c (the registered "redis" backend: N of them, ?shards=N).
*/
#ifndef DUE_REDIS_SHARD_H
#define DUE_REDIS_SHARD_H

#include "store/store.h"

/* redis.c's store over one prefix {due:NAME} or {due:NAME:i} */
extern const due_store_ops due__store_redis_slot;
/* The registered store's admin group (redis_admin.c). */
extern const due_store_admin due__store_redis_admin;

/* How many shards the parsed URL names (1 without ?shards=). */
int due__redis_shards(const void *cfg);

/*
** A copy of the parsed URL for shard i of `shards` (0: as the URL says);
** free it with free_cfg.
*/
int due__redis_shard_cfg(void **out, const void *cfg, int shards, int i);

/*
** What redis_admin.c needs of a URL redis.c parsed (due__store_redis_slot's
** parse_url): its credentials, database and seeds, borrowed from cfg.
*/
typedef struct due_redis_where {
	const char *user, *password; /* NULL when not given */
	int db;
	size_t n;
	const char *host[16];
	int port[16];
} due_redis_where;
void due__redis_where(const void *cfg, due_redis_where *out);

/* The store's URL without credentials, for messages. */
const char *due__redis_label(const due_store *s);

/* "host:port" of the node the store's slot is on, as last heard. */
int due__redis_node(due_store *s, char *buf, size_t n);

/*
** Whether the last call on s ended because its node gave no answer
** within the bound (due__store_no_answer), and whether two stores' slots
** are on the same known node: redis_shard.c asks no other shard of a
** silent node in the same call.
*/
bool due__redis_silent(const due_store *s);
bool due__redis_same_node(const due_store *a, const due_store *b);

/*
** The schema version as the store's script reads it, without a verdict:
** -1 when the prefix has no store, -2 another layout, -5 layout 4 (to
** upgrade), -1000 - N a store made with shards=N other than this
** handle's.
*/
int due__redis_version(due_store *s, int *v);

/*
** 0 when the payloads of items fit what s's server takes (each, and all
** together: redis.c, rd_payloads_fit), else DUE_ETOOBIG: a batch spread
** over shards is checked whole before any shard writes its part.
*/
int due__redis_payloads_fit(due_store *s, const due_submit *items, size_t n);

/*
** Keep the outcomes of completions written by a call that then failed
** (another shard's part of it did), so that the retry on s hears them
** instead of REJECTED_STALE (redis.c, "Completions a call wrote").
*/
void due__redis_remember(due_store *s, const due_completion *items, size_t n);

/*
** Run after across shards (redis_shard.c's forwarder; lua/after.lua and
** docs/internals/redis.md "Run after" say what each script does).
**   - schedule_marked: rd_schedule with one mark a parent per item
**     (marks[i] NULL, or n_after letters: '.' a parent in s's shard,
**     checked by its script; 'r' another shard's live parent, linked by
**     the forwarder; 'd' another shard's that counts as ended);
**   - outbox: whether a script on s left messages in its outbox since
**     the last ask (and forgets it);
**   - states: each id's state in s's shard ("" for none);
**   - link: the edge parent -> child in parent's shard while it is live
**     (st "LIVE"), else its state ("" for none), nothing written;
**   - ended: child's shard hears that parent ended `how`, once;
**   - outbox_read: the first 100 messages (malloc'd, each freed);
**     outbox_del: one message, delivered.
*/
int due__redis_schedule_marked(due_store *s, due_submitted *out,
			       const due_submit *items, size_t n,
			       const char *const *marks);
bool due__redis_outbox(due_store *s);
int due__redis_states(due_store *s, const due_id *ids, size_t n,
		      char (*st)[16]);
int due__redis_link(due_store *s, due_id parent, due_id child, char st[16]);
int due__redis_ended(due_store *s, due_id child, due_id parent,
		     const char *how);
int due__redis_outbox_read(due_store *s, char ***msgs, size_t *n);
int due__redis_outbox_del(due_store *s, const char *msg);

#endif /* DUE_REDIS_SHARD_H */
