/* private.c: what the drop-in librdmacm.so.1 needs of a context, exported
 * under our own version node (VRNICD_PRIVATE_1, cabi.mk), never rdma-core's:
 * rdma_cm requests travel on the connection that holds the QPs they name;
 * their events arrive on sockets of their own (cm_channel). */
#include <errno.h>

#include "vrn.h"

/* vrnicd_cm_call sends one request on ctx's connection: 0 or an errno. */
int vrnicd_cm_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen)
{
	return vrn_call(to_vctx(ctx), op, req, reqlen, NULL, 0, resp, resplen, NULL, 0, NULL);
}

/* vrnicd_cm_call_fd is vrnicd_cm_call for a request whose reply carries a
 * descriptor (cm_channel): *fd is it, or -1. */
int vrnicd_cm_call_fd(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen,
		      int *fd)
{
	int n = 0;
	*fd = -1;
	int err = vrn_call(to_vctx(ctx), op, req, reqlen, NULL, 0, resp, resplen, fd, 1, &n);
	if (!err && n != 1)
		err = EPROTO;
	return err;
}

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
