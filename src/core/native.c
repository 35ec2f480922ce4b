/*
** native.c - a submit inside the caller's own transaction, on the caller's
** own connection: every due_schedule_<name>_tx of due.h, from one list.
**
** A store that can do it (DUE_STORE_CAP_TX_SUBMIT) says how through its
** table: native_tx tells whether the caller's connection has a usable
** transaction open, schedule_on_native inserts one checked submit through
** it.  The public entry points are part of the ABI, so every build exports
** all of them, whatever backends it was built with: a program linked
** against one build still loads against another.  Each comes from one
** line of TX_SUBMIT_APIS below and is made by one rule: it looks its
** backend up in the table of src/store/registry.c by URL scheme; found,
** it checks the arguments and the caller's transaction and forwards to the
** backend's methods; not found (a build without it), it answers
** DUE_EUNSUPPORTED naming the build option that brings it, and changes
** nothing.  So no backend defines a public symbol, and no backend calls
** back into the core.
*/
#include <stddef.h>

#include "core/internal.h"
#include "store/store.h"

/*
** The entry points: the <name> of due_schedule_<name>_tx, the type of the
** caller's connection (as due.h declares it), the URL scheme that finds
** the backend, and the CMake option that builds it (NULL: always built).
*/
#define TX_SUBMIT_APIS(X)                                                      \
	X(sqlite, struct sqlite3, "sqlite", NULL)                              \
	X(pg, struct pg_conn, "postgres", "DUE_WITH_PG")                       \
	X(mysql, struct st_mysql, "mysql", "DUE_WITH_MYSQL")

/*
** Check and insert through `conn` for the backend of `scheme`.  0, or a
** negative code with the message set, `api` naming the public function;
** out->id is 0 on every failure.  Nothing is written unless the backend's
** schedule_on_native is reached.
*/
static int submit_native(const char *api, const char *scheme,
			 const char *option, void *conn, due_submitted *out,
			 const char *kind, const void *payload,
			 size_t payload_len, const due_schedule_opts *opts)
{
	const due_store_ops *ops = due__store_find(scheme);
	due_submit it;
	int rc;

	if (out)
		out->id = 0, out->existed = false;
	if (!ops && option)
		return due__error_set(DUE_EUNSUPPORTED,
				      "%s: this build of due has no %s store: "
				      "it was built with -D%s=OFF (rebuild "
				      "with -D%s=ON to have it)",
				      api, scheme, option, option);
	if (!ops)
		return due__error_set(DUE_EUNSUPPORTED,
				      "%s: this build of due has no %s store",
				      api, scheme);
	if (!(ops->caps & DUE_STORE_CAP_TX_SUBMIT))
		return due__error_set(
		    DUE_EINVAL,
		    "%s: the %s store cannot submit in a caller's "
		    "transaction",
		    api, ops->name);
	if (!conn)
		return due__error_set(DUE_EINVAL, "connection is NULL");
	if ((rc = due__submit_args(&it, kind, payload, payload_len, opts,
				   DUE_DEFAULT_MAX_PAYLOAD, true)) < 0)
		return rc;
	switch (ops->native_tx(conn)) {
	case DUE_NATIVE_TX_OPEN: break;
	case DUE_NATIVE_TX_FAILED:
		return due__error_set(
		    DUE_EINVAL,
		    "%s: the transaction on this connection has already "
		    "failed (ROLLBACK it)",
		    api);
	default:
		return due__error_set(
		    DUE_EINVAL,
		    "%s: no transaction is open on this connection (BEGIN "
		    "first)",
		    api);
	}
	return ops->schedule_on_native(conn, out, &it);
}

#define TX_SUBMIT_API(name, conn_type, scheme, option)                         \
	int due_schedule_##name##_tx(conn_type *conn, due_submitted *out,      \
				     const char *kind, const void *payload,    \
				     size_t payload_len,                       \
				     const due_schedule_opts *opts)            \
	{                                                                      \
		return submit_native("due_schedule_" #name "_tx", scheme,      \
				     option, conn, out, kind, payload,         \
				     payload_len, opts);                       \
	}
TX_SUBMIT_APIS(TX_SUBMIT_API)
#undef TX_SUBMIT_API
