/* private.c: what the drop-in librdmacm.so.1 needs of a context, exported
 * under our own version node (VRNICD_PRIVATE_1, cabi.mk), never rdma-core's:
 * rdma_cm requests travel on the connection that holds the QPs they name,
 * and their events arrive there among the others. */
#include <errno.h>

#include "vrn.h"

/* vrnicd_cm_call sends one request on ctx's connection: 0 or an errno. */
int vrnicd_cm_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen)
{
	return vrn_call(to_vctx(ctx), op, req, reqlen, NULL, 0, resp, resplen, NULL, 0, NULL);
}

/* vrnicd_cm_handler sets who takes ctx's CM events: fn runs with the
 * event's payload, on whichever thread read it off the socket (never one
 * inside fn: it must only queue). */
void vrnicd_cm_handler(struct ibv_context *ctx, void (*fn)(void *arg, const void *msg, uint32_t len), void *arg)
{
	struct vrn_context *c = to_vctx(ctx);
	pthread_mutex_lock(&c->ev_mu);
	c->cm_fn = fn;
	c->cm_arg = arg;
	pthread_mutex_unlock(&c->ev_mu);
}

/* vrnicd_cm_pump reads what waits on ctx's socket when no request is in
 * flight (events go to their handlers); -1 once the daemon is gone. */
int vrnicd_cm_pump(struct ibv_context *ctx)
{
	struct vrn_context *c = to_vctx(ctx);
	if (pthread_mutex_trylock(&c->call_mu))
		return c->dead ? -1 : 0; /* a caller is reading it */
	int r = vrn_read_events(c);
	pthread_mutex_unlock(&c->call_mu);
	return r;
}

/* vrnicd_cm_fd is ctx's socket, for an epoll set (EPOLLIN: something to pump). */
int vrnicd_cm_fd(struct ibv_context *ctx) { return to_vctx(ctx)->sock; }

/* vrnicd_qp_handle is a QP's handle on its context's connection. */
uint32_t vrnicd_qp_handle(struct ibv_qp *qp) { return container_of(qp, struct vrn_qp, qp)->handle; }

/* vrnicd_qp_by_num finds the handle of ctx's QP numbered qpn (a program
 * that made its QP itself names it by number in rdma_conn_param). */
int vrnicd_qp_by_num(struct ibv_context *ctx, uint32_t qpn, uint32_t *handle)
{
	struct vrn_context *c = to_vctx(ctx);
	int found = 0;
	pthread_mutex_lock(&c->qp_mu);
	for (struct vrn_qp *q = c->qps; q; q = q->next)
		if (q->qp.qp_num == qpn) {
			*handle = q->handle;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&c->qp_mu);
	return found ? 0 : ENOENT;
}

/* vrnicd_dead says whether ctx's daemon has gone. */
int vrnicd_dead(struct ibv_context *ctx) { return __atomic_load_n(&to_vctx(ctx)->dead, __ATOMIC_ACQUIRE); }
