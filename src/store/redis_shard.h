/*
** redis_shard.h - between redis.c (one store in one slot) and
** redis_shard.c (the registered "redis" backend: N of them, ?shards=N).
*/
#ifndef DUE_REDIS_SHARD_H
#define DUE_REDIS_SHARD_H

#include "store/store.h"

/* redis.c's store over one prefix {due:NAME} or {due:NAME:i} */
extern const due_store_ops due__store_redis_slot;

/* How many shards the parsed URL names (1 without ?shards=). */
int due__redis_shards(const void *cfg);

/* A copy of the parsed URL for shard i (free it with free_cfg). */
int due__redis_shard_cfg(void **out, const void *cfg, int i);

#endif /* DUE_REDIS_SHARD_H */
