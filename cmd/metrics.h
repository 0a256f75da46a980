/* cmd/metrics.h — Prometheus metrics for stepxd over HTTP (GET /metrics),
 * served by one thread of its own. */
#ifndef SX_CMD_METRICS_H
#define SX_CMD_METRICS_H

#include <stepx/stepx.h>

typedef struct sx_metrics sx_metrics;

/* Listens on "HOST:PORT" (process/hostport.h: an IPv4 address, a name,
 * or an IPv6 address in brackets; port 0 picks a free one) and serves the
 * figures of e and srv (srv may be NULL) until sx_metrics_stop.
 * Errors: SX_EINVAL (bad address, or a host that does not resolve),
 * SX_ENOMEM, -errno (bind, listen). */
int sx_metrics_start(sx_engine *e, sx_server *srv, const char *address,
                     sx_metrics **out);
/* Stops serving, joins the thread, frees m (NULL is fine). */
void sx_metrics_stop(sx_metrics *m);
/* The TCP port actually bound (useful with port 0), or 0. */
int sx_metrics_port(const sx_metrics *m);
/* Writes the Prometheus text for e and srv into a new buffer (owned by
 * the caller, free()); NULL when out of memory. */
char *sx_metrics_render(sx_engine *e, sx_server *srv, size_t *len);

#endif
