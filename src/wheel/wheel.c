/*
** wheel.c - a hierarchical timing wheel: levels of 64 slots, timers in a
** pool addressed by 32-bit indices, an id index chained through the nodes.
**
** The workload.  A worker keeps in memory the tasks that fall due within
** the next horizon (64^4 ms is about 4.7 hours), starts and stops timers as
** tasks are scheduled, claimed or cancelled, and sleeps until the next due
** tick.  Millions of pending timers, far more starts and stops than fires.
** So start and stop are O(1) and touch few cache lines, a node is 32 bytes,
** and advancing over empty stretches costs O(levels) per occupied slot, not
** per tick.
**
** Time.  Ticks are int64 and may be negative; inside the wheel they are
** mapped to uint64 "keys" by flipping the sign bit, which keeps their order.
** `now` is the current key: every timer due at or before it has fired,
** except "late" timers started with a due key <= now, which wait in the LATE
** list for the next advance.
**
** Placement.  A timer due at key d > now sits at level l = the highest
** 6-bit digit in which d and now differ (clamped to the top level), in slot
** digit_l(d).  Invariants, for every pending timer outside LATE/FIRING:
**   (I1) below the top level, d and now agree on every digit above l, and
**        digit_l(d) > digit_l(now).  (Level 0 may, only inside advance(),
**        hold timers with d == now in slot digit_0(now).)
**   (I2) at the top level T, q(d) - q(now) is in 1..64 where q(x) = x >>
**        6T; the slots form a ring and slot digit_T(now) means 64 ahead.
**   (I3) occupied[l] has bit s set iff slot (l, s) is non-empty.
** From (I1)/(I2) every slot of level l starts before every slot of level
** l+1, so the next event is the first occupied slot of the lowest non-empty
** level: one ctz.  Reaching a slot's start at level l > 0 "cascades" it:
** its timers are re-placed relative to the new now, landing lower.  Jumping
** now to any tick before the next slot start keeps (I1)/(I2) true, which is
** why advance() can skip empty stretches.
**
** Memory.  A node is 32 bytes (id, due, list links, index chain, list id,
** generation).  The pool grows by half, and the id index has a power of
** two of 4-byte buckets, at least one per timer, so a pending timer costs
** 36 to 56 bytes after growth, 36 to 40 when the capacity is given up front.
*/
#include "wheel.h"

#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX
#define MAX_NODES (UINT32_MAX - 1u)
#define LIST_LATE (DUE_WHEEL_LEVELS_MAX * DUE_WHEEL_SLOTS)
#define LIST_FIRING (LIST_LATE + 1)
#define NLISTS (LIST_LATE + 2)
#define LIST_FREE UINT16_MAX
#define MIN_BUCKETS 16u
#define MAX_BUCKETS (UINT32_C(1) << 31)
#define SIGN_BIT (UINT64_C(1) << 63)

/* One timer.  `next` doubles as the free-list link while the node is free. */
typedef struct wnode {
	uint64_t due;  /* due key */
	int64_t id;    /* task id */
	uint32_t next; /* circular list of its slot */
	uint32_t prev;
	uint32_t hnext; /* id index chain */
	uint16_t list;	/* slot/list index, or LIST_FREE */
	uint16_t gen;	/* bumped on free; never 0 */
} wnode;

_Static_assert(sizeof(wnode) == 32, "a wheel node must stay 32 bytes");

struct due_wheel {
	uint64_t now;	  /* current key */
	uint64_t horizon; /* 64^levels */
	unsigned levels;
	int busy; /* inside advance() */

	wnode *pool;
	uint32_t cap, top, free_head; /* top: nodes ever handed out */
	size_t count;

	uint32_t *buckets; /* id index: chain heads */
	uint32_t nbuckets; /* power of two */
	unsigned bshift;   /* 64 - log2(nbuckets) */

	uint64_t occupied[DUE_WHEEL_LEVELS_MAX];
	uint32_t head[NLISTS];
	uint64_t min[NLISTS];	   /* lower bound of the list's due keys */
	uint8_t min_stale[NLISTS]; /* min may be below the true minimum */

	uint64_t fired, cascades, cascaded;

	void *(*realloc_fn)(void *, size_t, void *);
	void (*free_fn)(void *, void *);
	void *alloc_ctx;
};

/* ------------------------------------------------------------------ */
/* Ticks, allocation                                                   */
/* ------------------------------------------------------------------ */

static uint64_t to_key(int64_t tick) { return (uint64_t)tick ^ SIGN_BIT; }

/* The inverse of to_key(), without implementation-defined conversions. */
static int64_t from_key(uint64_t key)
{
	if (key >= SIGN_BIT)
		return (int64_t)(key - SIGN_BIT);
	return -(int64_t)(SIGN_BIT - 1 - key) - 1;
}

/* Trailing / leading zero bits of a non-zero word. */
#if defined(__GNUC__) || defined(__clang__)
static unsigned ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); }

static unsigned clz64(uint64_t x) { return (unsigned)__builtin_clzll(x); }
#else
static unsigned ctz64(uint64_t x)
{
	unsigned n = 0;

	while (!(x & 1)) {
		x >>= 1;
		n++;
	}
	return n;
}

static unsigned clz64(uint64_t x)
{
	unsigned n = 0;

	while (!(x & SIGN_BIT)) {
		x <<= 1;
		n++;
	}
	return n;
}
#endif

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))
#endif

static void *std_realloc(void *p, size_t n, void *ctx)
{
	(void)ctx;
	return realloc(p, n);
}

static void std_free(void *p, void *ctx)
{
	(void)ctx;
	free(p);
}

static void *wrealloc(const due_wheel *w, void *p, size_t n)
{
	return w->realloc_fn(p, n, w->alloc_ctx);
}

static void wfree(const due_wheel *w, void *p)
{
	if (p)
		w->free_fn(p, w->alloc_ctx);
}

/* ------------------------------------------------------------------ */
/* Slot lists                                                          */
/* ------------------------------------------------------------------ */

/*
** Append node ni to list li (a circular doubly linked list whose head is
** w->head[li]) and keep the list's minimum and the occupancy bitmap true.
*/
static void list_push(due_wheel *w, unsigned li, uint32_t ni)
{
	wnode *n = &w->pool[ni];
	uint32_t h = w->head[li];

	n->list = (uint16_t)li;
	if (h == NIL) {
		n->next = n->prev = ni;
		w->head[li] = ni;
		w->min[li] = n->due;
		w->min_stale[li] = 0;
		if (li < LIST_LATE)
			w->occupied[li / DUE_WHEEL_SLOTS] |=
			    UINT64_C(1) << (li % DUE_WHEEL_SLOTS);
		return;
	}
	n->next = h;
	n->prev = w->pool[h].prev;
	w->pool[n->prev].next = ni;
	w->pool[h].prev = ni;
	if (n->due <= w->min[li]) { /* a stale min is a lower bound */
		w->min[li] = n->due;
		w->min_stale[li] = 0;
	}
}

/* Unlink node ni from the list it is on.  The node keeps its list id. */
static void list_remove(due_wheel *w, uint32_t ni)
{
	wnode *n = &w->pool[ni];
	unsigned li = n->list;

	if (n->next == ni) {
		w->head[li] = NIL;
		if (li < LIST_LATE)
			w->occupied[li / DUE_WHEEL_SLOTS] &=
			    ~(UINT64_C(1) << (li % DUE_WHEEL_SLOTS));
		return;
	}
	w->pool[n->prev].next = n->next;
	w->pool[n->next].prev = n->prev;
	if (w->head[li] == ni)
		w->head[li] = n->next;
	if (n->due == w->min[li])
		w->min_stale[li] = 1;
}

/* Recompute the minimum of list li if a stop may have left it too low. */
static uint64_t list_min(due_wheel *w, unsigned li)
{
	uint32_t h = w->head[li], i = h;
	uint64_t m = UINT64_MAX;

	if (!w->min_stale[li])
		return w->min[li];
	do {
		if (w->pool[i].due < m)
			m = w->pool[i].due;
		i = w->pool[i].next;
	} while (i != h);
	w->min[li] = m;
	w->min_stale[li] = 0;
	return m;
}

/*
** The wheel slot for due key d >= now: the level of the highest differing
** digit (clamped to the top level) and d's digit there.  d == now maps to
** level 0, slot digit_0(now); only cascades ask for that.
*/
static unsigned slot_for(const due_wheel *w, uint64_t d)
{
	uint64_t x = d ^ w->now;
	unsigned l = x ? (63 - clz64(x)) / DUE_WHEEL_BITS : 0;

	if (l >= w->levels)
		l = w->levels - 1;
	return l * DUE_WHEEL_SLOTS +
	       (unsigned)((d >> (l * DUE_WHEEL_BITS)) & (DUE_WHEEL_SLOTS - 1));
}

/* Put a node that is on no list where its due key says: LATE or a slot. */
static void place(due_wheel *w, uint32_t ni)
{
	uint64_t d = w->pool[ni].due;

	list_push(w, d <= w->now ? LIST_LATE : slot_for(w, d), ni);
}

/* ------------------------------------------------------------------ */
/* Pool and id index                                                   */
/* ------------------------------------------------------------------ */

static uint32_t bucket_of(const due_wheel *w, int64_t id)
{
	return (uint32_t)(((uint64_t)id * UINT64_C(0x9E3779B97F4A7C15)) >>
			  w->bshift);
}

/* The node holding id, or NIL. */
static uint32_t index_find(const due_wheel *w, int64_t id)
{
	uint32_t i = w->buckets[bucket_of(w, id)];

	while (i != NIL && w->pool[i].id != id)
		i = w->pool[i].hnext;
	return i;
}

static void index_insert(due_wheel *w, uint32_t ni)
{
	uint32_t *b = &w->buckets[bucket_of(w, w->pool[ni].id)];

	w->pool[ni].hnext = *b;
	*b = ni;
}

static void index_remove(due_wheel *w, uint32_t ni)
{
	uint32_t *p = &w->buckets[bucket_of(w, w->pool[ni].id)];

	while (*p != ni)
		p = &w->pool[*p].hnext;
	*p = w->pool[ni].hnext;
}

/*
** Replace the index with one of `nb` buckets (a power of two) and re-chain
** every live node.  Returns 0, or DUE_WHEEL_ENOMEM leaving the old index.
*/
static int index_resize(due_wheel *w, uint32_t nb)
{
	uint32_t *b = wrealloc(w, NULL, (size_t)nb * sizeof(*b));
	unsigned bits = 0;

	if (!b)
		return DUE_WHEEL_ENOMEM;
	wfree(w, w->buckets);
	memset(b, 0xff, (size_t)nb * sizeof(*b)); /* all NIL */
	while ((UINT32_C(1) << bits) < nb)
		bits++;
	w->buckets = b;
	w->nbuckets = nb;
	w->bshift = 64 - bits;
	for (uint32_t i = 0; i < w->top; i++)
		if (w->pool[i].list != LIST_FREE)
			index_insert(w, i);
	return 0;
}

/* Grow the pool to hold at least `want` nodes, by half at a time. */
static int pool_grow(due_wheel *w, size_t want)
{
	size_t cap = (size_t)w->cap + w->cap / 2;
	wnode *p;

	if (cap < want)
		cap = want;
	if (cap < 64)
		cap = 64;
	if (cap > MAX_NODES)
		cap = MAX_NODES;
	if (cap > SIZE_MAX / sizeof(*p))
		return DUE_WHEEL_ENOMEM;
	p = wrealloc(w, w->pool, cap * sizeof(*p));
	if (!p)
		return DUE_WHEEL_ENOMEM;
	w->pool = p;
	w->cap = (uint32_t)cap;
	return 0;
}

int due__wheel_reserve(due_wheel *w, size_t count)
{
	uint32_t nb;
	int err;

	if (!w)
		return DUE_WHEEL_EINVAL;
	if (count > MAX_NODES)
		return DUE_WHEEL_ENOMEM;
	for (nb = w->nbuckets; nb < count && nb < MAX_BUCKETS; nb *= 2)
		;
	if (nb != w->nbuckets && (err = index_resize(w, nb)) < 0)
		return err;
	if (count > w->cap && (err = pool_grow(w, count)) < 0)
		return err;
	return 0;
}

/* Take a node from the free list or the unused tail.  Room must exist. */
static uint32_t node_alloc(due_wheel *w)
{
	uint32_t ni = w->free_head;

	if (ni != NIL) {
		w->free_head = w->pool[ni].next;
	} else {
		ni = w->top++;
		w->pool[ni].gen = 1;
	}
	return ni;
}

/* Return a node, already off its list and the index, to the free list. */
static void node_free(due_wheel *w, uint32_t ni)
{
	wnode *n = &w->pool[ni];

	n->list = LIST_FREE;
	n->gen = (uint16_t)(n->gen + 1 ? n->gen + 1 : 1);
	n->next = w->free_head;
	w->free_head = ni;
}

static due_wheel_handle handle_of(const due_wheel *w, uint32_t ni)
{
	return ((uint64_t)w->pool[ni].gen << 32) | ni;
}

/* ------------------------------------------------------------------ */
/* Life cycle                                                          */
/* ------------------------------------------------------------------ */

static int opts_check(const due_wheel_opts *o)
{
	if (o->levels > DUE_WHEEL_LEVELS_MAX)
		return DUE_WHEEL_EINVAL;
	if (!o->realloc_fn != !o->free_fn)
		return DUE_WHEEL_EINVAL;
	if (o->capacity > MAX_NODES)
		return DUE_WHEEL_EINVAL;
	return 0;
}

/*
** Create a wheel as the options say.  On failure everything allocated so
** far is released and *out is NULL.
*/
int due__wheel_new(due_wheel **out, const due_wheel_opts *opts)
{
	static const due_wheel_opts defaults = DUE_WHEEL_OPTS_INIT;
	const due_wheel_opts *o = opts ? opts : &defaults;
	due_wheel *w;
	int err;

	if (!out)
		return DUE_WHEEL_EINVAL;
	*out = NULL;
	if ((err = opts_check(o)) < 0)
		return err;
	w = o->realloc_fn ? o->realloc_fn(NULL, sizeof(*w), o->alloc_ctx)
			  : malloc(sizeof(*w));
	if (!w)
		return DUE_WHEEL_ENOMEM;
	memset(w, 0, sizeof(*w));
	w->realloc_fn = o->realloc_fn ? o->realloc_fn : std_realloc;
	w->free_fn = o->free_fn ? o->free_fn : std_free;
	w->alloc_ctx = o->alloc_ctx;
	w->levels = o->levels ? o->levels : DUE_WHEEL_LEVELS_DEFAULT;
	w->horizon = UINT64_C(1) << (w->levels * DUE_WHEEL_BITS);
	w->now = to_key(o->start_tick);
	w->free_head = NIL;
	memset(w->head, 0xff, sizeof(w->head));
	if ((err = index_resize(w, MIN_BUCKETS)) < 0 ||
	    (err = due__wheel_reserve(w, o->capacity)) < 0) {
		due__wheel_free(w);
		return err;
	}
	*out = w;
	return 0;
}

void due__wheel_free(due_wheel *w)
{
	if (!w)
		return;
	wfree(w, w->pool);
	wfree(w, w->buckets);
	w->free_fn(w, w->alloc_ctx);
}

/* ------------------------------------------------------------------ */
/* Start, stop, find                                                   */
/* ------------------------------------------------------------------ */

/*
** Start (or move) the timer of `id`.  The horizon is checked before
** anything changes, and room is reserved before a new node is taken, so a
** failure leaves the wheel as it was.
*/
int due__wheel_start(due_wheel_handle *out, due_wheel *w, int64_t id,
		     int64_t due_tick)
{
	uint64_t d = to_key(due_tick);
	uint32_t ni;
	int err;

	if (!w)
		return DUE_WHEEL_EINVAL;
	if (d > w->now && d - w->now >= w->horizon)
		return DUE_WHEEL_EHORIZON;
	ni = index_find(w, id);
	if (ni != NIL) {
		list_remove(w, ni);
	} else {
		if (w->count >= w->cap ||
		    (w->count >= w->nbuckets && w->nbuckets < MAX_BUCKETS))
			if ((err = due__wheel_reserve(w, w->count + 1)) < 0)
				return err;
		ni = node_alloc(w);
		w->pool[ni].id = id;
		index_insert(w, ni);
		w->count++;
	}
	w->pool[ni].due = d;
	place(w, ni);
	if (out)
		*out = handle_of(w, ni);
	return 0;
}

/* Take a pending node out of its list and the index and free it. */
static void node_drop(due_wheel *w, uint32_t ni)
{
	list_remove(w, ni);
	index_remove(w, ni);
	node_free(w, ni);
	w->count--;
}

int due__wheel_stop(due_wheel *w, due_wheel_handle handle)
{
	uint32_t ni = (uint32_t)(handle & UINT32_MAX);
	uint64_t gen = handle >> 32;

	if (!w)
		return DUE_WHEEL_EINVAL;
	if (ni >= w->top || w->pool[ni].list == LIST_FREE ||
	    w->pool[ni].gen != gen)
		return DUE_WHEEL_ENOTFOUND;
	node_drop(w, ni);
	return 0;
}

int due__wheel_stop_id(due_wheel *w, int64_t id)
{
	uint32_t ni;

	if (!w)
		return DUE_WHEEL_EINVAL;
	if ((ni = index_find(w, id)) == NIL)
		return DUE_WHEEL_ENOTFOUND;
	node_drop(w, ni);
	return 0;
}

int due__wheel_find(int64_t *due_out, due_wheel_handle *handle_out,
		    const due_wheel *w, int64_t id)
{
	uint32_t ni;

	if (!w)
		return DUE_WHEEL_EINVAL;
	if ((ni = index_find(w, id)) == NIL)
		return DUE_WHEEL_ENOTFOUND;
	if (due_out)
		*due_out = from_key(w->pool[ni].due);
	if (handle_out)
		*handle_out = handle_of(w, ni);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Advance                                                             */
/* ------------------------------------------------------------------ */

/*
** Find the next slot to process: the first occupied slot of the lowest
** non-empty level, in time order (a ring at the top level).  Stores its list
** index and start key and returns 1, or returns 0 when no slot is occupied.
*/
static int next_slot(const due_wheel *w, unsigned *li, uint64_t *start)
{
	for (unsigned l = 0; l < w->levels; l++) {
		uint64_t bm = w->occupied[l], q, after;
		unsigned shift = l * DUE_WHEEL_BITS, d, s, k;

		if (!bm)
			continue;
		q = w->now >> shift;
		d = (unsigned)(q & (DUE_WHEEL_SLOTS - 1));
		if (l + 1 < w->levels) { /* (I1): every occupied slot >= d */
			s = ctz64(bm);
			k = s - d;
		} else { /* (I2): ring, slot d is 64 ahead */
			after = d == 63 ? 0 : bm & (~UINT64_C(0) << (d + 1));
			s = after ? ctz64(after) : ctz64(bm);
			k = after ? s - d : s + DUE_WHEEL_SLOTS - d;
		}
		*li = l * DUE_WHEEL_SLOTS + s;
		*start = (q + k) << shift;
		return 1;
	}
	return 0;
}

/*
** Fire every node of list li, one at a time: each is unlinked and freed
** before the callback runs, so the callback may start and stop timers
** (including others on this list) freely.
*/
static void fire_list(due_wheel *w, unsigned li, due_wheel_fire_cb cb,
		      void *payload)
{
	uint32_t ni;

	while ((ni = w->head[li]) != NIL) {
		int64_t id = w->pool[ni].id;
		int64_t due = from_key(w->pool[ni].due);

		node_drop(w, ni);
		w->fired++;
		cb(id, due, payload);
	}
}

/*
** Fire the timers that were late when started.  They move to the FIRING
** list first so that late timers the callbacks start wait for the next
** advance instead of being fired (perhaps forever) by this one.
*/
static void fire_late(due_wheel *w, due_wheel_fire_cb cb, void *payload)
{
	uint32_t h = w->head[LIST_LATE], i = h;

	if (h == NIL)
		return;
	do {
		w->pool[i].list = LIST_FIRING;
		i = w->pool[i].next;
	} while (i != h);
	w->head[LIST_FIRING] = h;
	w->min[LIST_FIRING] = w->min[LIST_LATE];
	w->min_stale[LIST_FIRING] = w->min_stale[LIST_LATE];
	w->head[LIST_LATE] = NIL;
	fire_list(w, LIST_FIRING, cb, payload);
}

/*
** Empty slot li (level > 0), whose start is the current key, into the
** levels below.  Every due key in it is >= now, so each node lands lower.
*/
static void cascade(due_wheel *w, unsigned li)
{
	uint32_t h = w->head[li], i = h, next;
	unsigned l = li / DUE_WHEEL_SLOTS;

	w->head[li] = NIL;
	w->occupied[l] &= ~(UINT64_C(1) << (li % DUE_WHEEL_SLOTS));
	w->cascades++;
	do {
		next = w->pool[i].next;
		PREFETCH(
		    &w->pool[next]); /* overlap the next miss with this push */
		list_push(w, slot_for(w, w->pool[i].due), i);
		w->cascaded++;
		i = next;
	} while (i != h);
}

int due__wheel_advance(due_wheel *w, int64_t now_tick, due_wheel_fire_cb cb,
		       void *payload)
{
	uint64_t target = to_key(now_tick), start;
	unsigned li;

	if (!w || !cb)
		return DUE_WHEEL_EINVAL;
	if (w->busy)
		return DUE_WHEEL_EBUSY;
	if (target < w->now)
		return DUE_WHEEL_EPAST;
	w->busy = 1;
	fire_late(w, cb, payload);
	while (next_slot(w, &li, &start) && start <= target) {
		w->now = start;
		if (li < DUE_WHEEL_SLOTS)
			fire_list(w, li, cb, payload);
		else
			cascade(w, li);
	}
	w->now = target;
	w->busy = 0;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Queries                                                             */
/* ------------------------------------------------------------------ */

/*
** Late and firing timers are due at or before now, so before anything on
** the wheel; otherwise the next slot holds the earliest timer.  A level-0
** slot holds one due key only, its start.
*/
int64_t due__wheel_next_due(due_wheel *w)
{
	uint64_t m = UINT64_MAX, start;
	unsigned li;
	int any = 0;

	if (!w)
		return DUE_WHEEL_NEVER;
	for (li = LIST_LATE; li <= LIST_FIRING; li++) {
		if (w->head[li] != NIL) {
			uint64_t v = list_min(w, li);

			m = v < m ? v : m;
			any = 1;
		}
	}
	if (any)
		return from_key(m);
	if (!next_slot(w, &li, &start))
		return DUE_WHEEL_NEVER;
	return from_key(li < DUE_WHEEL_SLOTS ? start : list_min(w, li));
}

size_t due__wheel_count(const due_wheel *w) { return w ? w->count : 0; }

int64_t due__wheel_now(const due_wheel *w) { return w ? from_key(w->now) : 0; }

int64_t due__wheel_horizon(const due_wheel *w)
{
	return w ? (int64_t)w->horizon : 0;
}

/* Count the nodes on list li (LATE or FIRING), walking it. */
static size_t list_len(const due_wheel *w, unsigned li)
{
	uint32_t h = w->head[li], i = h;
	size_t n = 0;

	if (h == NIL)
		return 0;
	do {
		n++;
		i = w->pool[i].next;
	} while (i != h);
	return n;
}

int due__wheel_stats_get(due_wheel_stats *out, const due_wheel *w)
{
	if (!out || !w)
		return DUE_WHEEL_EINVAL;
	memset(out, 0, sizeof(*out));
	out->pending = w->count;
	out->late = list_len(w, LIST_LATE) + list_len(w, LIST_FIRING);
	out->fired = w->fired;
	out->cascades = w->cascades;
	out->cascaded = w->cascaded;
	out->capacity = w->cap;
	out->buckets = w->nbuckets;
	out->bytes = sizeof(*w) + (size_t)w->cap * sizeof(wnode) +
		     (size_t)w->nbuckets * sizeof(uint32_t);
	return 0;
}

const char *due__wheel_strerror(int code)
{
	switch (code) {
	case DUE_WHEEL_OK: return "DUE_WHEEL_OK";
	case DUE_WHEEL_EINVAL: return "DUE_WHEEL_EINVAL";
	case DUE_WHEEL_ENOTFOUND: return "DUE_WHEEL_ENOTFOUND";
	case DUE_WHEEL_EBUSY: return "DUE_WHEEL_EBUSY";
	case DUE_WHEEL_ENOMEM: return "DUE_WHEEL_ENOMEM";
	case DUE_WHEEL_EHORIZON: return "DUE_WHEEL_EHORIZON";
	case DUE_WHEEL_EPAST: return "DUE_WHEEL_EPAST";
	default: return "DUE_WHEEL_UNKNOWN";
	}
}
