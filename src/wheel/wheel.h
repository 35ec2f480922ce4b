/**
 * wheel.h - a hierarchical timing wheel keyed by task id.
 *
 * The wheel holds, in memory, the tasks that fall due soon, so that a worker
 * can sleep until the next one instead of polling the store.  It is a cache
 * of the store, never the truth: a timer lost in a crash is found again by
 * reloading "not done and due inside the horizon" from the store.
 *
 * The wheel is pure code.  It reads no clock, does no I/O, takes no locks:
 * the caller supplies time as integer ticks (any unit; 1 ms is typical) and
 * drives the wheel with due__wheel_advance().  A wheel is used by one thread
 * at a time.
 *
 * Shape: `levels` levels of 64 slots (6 bits of the tick per level).  The
 * horizon is 64^levels ticks: a timer whose due tick is `horizon` or more
 * ticks after the wheel's current tick is refused with DUE_WHEEL_EHORIZON;
 * `horizon - 1` ticks ahead is accepted.
 *
 * Timers live in a pool inside the wheel and are found either by the
 * handle due__wheel_start() returned or by task id (one timer per id).
 * Start and stop are O(1); finding the next due tick is O(levels).
 *
 * Conventions: functions return 0 on success or a negative DUE_WHEEL_E*
 * code; on failure nothing changed.  Output parameters come first.  The
 * codes shared with due.h (EINVAL, ENOTFOUND, EBUSY, ENOMEM) have the same
 * values as their DUE_E* counterparts so a caller may pass them through.
 */
#ifndef DUE_WHEEL_H
#define DUE_WHEEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Bits of the tick consumed by each level. */
#define DUE_WHEEL_BITS 6
/** Slots per level (2^DUE_WHEEL_BITS). */
#define DUE_WHEEL_SLOTS 64
/** Levels used when the options say 0: horizon 64^4 = 16,777,216 ticks. */
#define DUE_WHEEL_LEVELS_DEFAULT 4
/** Most levels a wheel may have: horizon 64^10 = 2^60 ticks. */
#define DUE_WHEEL_LEVELS_MAX 10
/** What due__wheel_next_due() returns for a wheel with no timers. */
#define DUE_WHEEL_NEVER INT64_MAX
/** A handle value that never names a timer (a zeroed handle is safe). */
#define DUE_WHEEL_HANDLE_NONE ((due_wheel_handle)0)

/** Result codes.  0 is success; failures are negative. */
typedef enum due_wheel_code {
	DUE_WHEEL_OK = 0,
	DUE_WHEEL_EINVAL = -2,	  /**< bad argument (NULL, bad option) */
	DUE_WHEEL_ENOTFOUND = -3, /**< no pending timer with that id/handle */
	DUE_WHEEL_EBUSY = -5,  /**< due__wheel_advance() called re-entrantly */
	DUE_WHEEL_ENOMEM = -9, /**< allocation failed; nothing changed */
	DUE_WHEEL_EHORIZON = -64, /**< due tick is >= horizon ticks ahead */
	DUE_WHEEL_EPAST = -65 /**< advance to a tick before the current one */
} due_wheel_code;

/** A wheel.  Opaque; created by due__wheel_new(), freed by due__wheel_free().
 */
typedef struct due_wheel due_wheel;

/**
 * Names one pending timer: a pool index and a generation, so a handle kept
 * after its timer fired or was stopped is refused, not misread.
 */
typedef uint64_t due_wheel_handle;

/**
 * Called once for each timer that fires, with its task id and the due tick it
 * was given.  During the call due__wheel_now() equals that due tick (except
 * for timers that were already late when started; see due__wheel_advance()).
 * The callback may start and stop timers, but may not advance or free the
 * wheel.  The fired timer is already gone when the callback runs.
 */
typedef void (*due_wheel_fire_cb)(int64_t id, int64_t due_tick, void *payload);

/**
 * Options for due__wheel_new().  Initialise with DUE_WHEEL_OPTS_INIT and set
 * the fields you care about; fields may be added at the end later.
 */
typedef struct due_wheel_opts {
	/** Levels, 1..DUE_WHEEL_LEVELS_MAX; 0 means DUE_WHEEL_LEVELS_DEFAULT.
	 */
	unsigned int levels;
	/** The wheel's current tick at creation.  Any int64 value. */
	int64_t start_tick;
	/** Timers to make room for up front (0: grow on demand). */
	size_t capacity;
	/**
	 * Optional allocator, both or neither: realloc_fn(NULL, n, ctx)
	 * allocates, realloc_fn(p, n, ctx) resizes (n > 0 always), free_fn
	 * releases.  Returning NULL makes the calling function fail with
	 * DUE_WHEEL_ENOMEM.  NULL means the C library.
	 */
	void *(*realloc_fn)(void *ptr, size_t size, void *ctx);
	void (*free_fn)(void *ptr, void *ctx);
	void *alloc_ctx;
} due_wheel_opts;

/** Default options: 4 levels, start at tick 0, grow on demand, malloc. */
#define DUE_WHEEL_OPTS_INIT                                                    \
	{                                                                      \
		DUE_WHEEL_LEVELS_DEFAULT, 0, 0, NULL, NULL, NULL               \
	}

/** Counters and sizes, for tests, benchmarks and metrics. */
typedef struct due_wheel_stats {
	size_t pending; /**< timers started and not yet fired or stopped */
	size_t late;	/**< of those, started at or before the current tick */
	uint64_t fired; /**< timers fired since creation */
	uint64_t cascades; /**< slots emptied into lower levels */
	uint64_t cascaded; /**< timers moved down by those cascades */
	size_t capacity;   /**< timers the pool holds without growing */
	size_t buckets;	   /**< slots of the id index */
	size_t bytes; /**< heap bytes owned by the wheel, struct included */
} due_wheel_stats;

/**
 * Create a wheel into *out.  opts may be NULL for the defaults.
 * Returns 0, DUE_WHEEL_EINVAL for bad options (levels > max, one allocator
 * function without the other), or DUE_WHEEL_ENOMEM; on failure *out is NULL.
 */
int due__wheel_new(due_wheel **out, const due_wheel_opts *opts);

/**
 * Free a wheel and all its timers without firing them.  NULL is a no-op.
 * Must not be called from a fire callback.
 */
void due__wheel_free(due_wheel *w);

/**
 * Make room for `count` pending timers in all, so that starts up to that
 * many cannot fail with DUE_WHEEL_ENOMEM.  Returns 0 or DUE_WHEEL_ENOMEM.
 */
int due__wheel_reserve(due_wheel *w, size_t count);

/**
 * Start the timer of task `id`, due at `due_tick`.  If `id` already has a
 * pending timer, that timer is moved to the new due tick (same handle).
 * A due tick at or before the current tick is accepted and fires on the next
 * advance.  On success the handle is stored in *out when out is not NULL.
 * Returns 0, DUE_WHEEL_EHORIZON when due_tick - now >= horizon (an existing
 * timer for `id` is then left as it was), DUE_WHEEL_ENOMEM, or
 * DUE_WHEEL_EINVAL when w is NULL.
 */
int due__wheel_start(due_wheel_handle *out, due_wheel *w, int64_t id,
		     int64_t due_tick);

/**
 * Stop the timer named by `handle`.  Returns 0, or DUE_WHEEL_ENOTFOUND when
 * the handle names no pending timer (never issued, fired, or stopped).
 */
int due__wheel_stop(due_wheel *w, due_wheel_handle handle);

/**
 * Stop the timer of task `id`.  Returns 0, or DUE_WHEEL_ENOTFOUND when that
 * task has no pending timer (never started, already fired, or stopped).
 */
int due__wheel_stop_id(due_wheel *w, int64_t id);

/**
 * Look up the pending timer of task `id`: its due tick into *due_out and its
 * handle into *handle_out (either may be NULL).  Returns 0 or
 * DUE_WHEEL_ENOTFOUND.
 */
int due__wheel_find(int64_t *due_out, due_wheel_handle *handle_out,
		    const due_wheel *w, int64_t id);

/**
 * Move the wheel's current tick forward to `now_tick` and fire, through
 * `cb`, every timer whose due tick is <= now_tick.  Timers that were already
 * late when started (due at or before the then-current tick) fire first, in
 * start order, with the wheel's tick unchanged.  The others fire in
 * nondecreasing due-tick order, each with the wheel's tick set to exactly its
 * due tick, never earlier; timers due on the same tick fire in no promised
 * order.  A timer the callback starts at or before the tick being fired
 * waits for the next advance.
 * Returns 0; DUE_WHEEL_EPAST when now_tick is before the current tick;
 * DUE_WHEEL_EBUSY when called from a callback; DUE_WHEEL_EINVAL for NULL w
 * or cb.  On error no callback was called and nothing changed.
 */
int due__wheel_advance(due_wheel *w, int64_t now_tick, due_wheel_fire_cb cb,
		       void *payload);

/**
 * The earliest due tick among pending timers, or DUE_WHEEL_NEVER when there
 * are none.  O(levels), plus one walk of a single slot if that slot's
 * earliest timer was stopped since the last call (hence the non-const w).
 */
int64_t due__wheel_next_due(due_wheel *w);

/** Number of pending timers. */
size_t due__wheel_count(const due_wheel *w);

/** The wheel's current tick. */
int64_t due__wheel_now(const due_wheel *w);

/** The horizon in ticks: 64^levels. */
int64_t due__wheel_horizon(const due_wheel *w);

/** Fill *out with the wheel's counters.  Returns 0 or DUE_WHEEL_EINVAL. */
int due__wheel_stats_get(due_wheel_stats *out, const due_wheel *w);

/** A constant name for a code, e.g. "DUE_WHEEL_EHORIZON". */
const char *due__wheel_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* DUE_WHEEL_H */
