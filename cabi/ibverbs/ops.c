/* ops.c: the context's operation tables. Programs reach the data path
 * (post, poll, notify) and the extended verbs through these pointers, which
 * <infiniband/verbs.h>'s inline functions call; rdma-core's rxe provider
 * fills the same set. */
#include <errno.h>

#include "vrn.h"

int vrn_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
int vrn_req_notify_cq(struct ibv_cq *cq, int solicited_only);
int vrn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int vrn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int vrn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int vrn_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_mw *vrn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int vrn_dealloc_mw(struct ibv_mw *mw);
int vrn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int vrn_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *out, size_t len);
int vrn_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t attr_size);
struct ibv_qp *vrn_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a);
struct ibv_cq_ex *vrn_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *a);

void vrn_fill_ops(struct vrn_context *c)
{
	struct ibv_context_ops *o = &c->vctx.context.ops;
	o->poll_cq = vrn_poll_cq;
	o->req_notify_cq = vrn_req_notify_cq;
	o->post_send = vrn_post_send;
	o->post_recv = vrn_post_recv;
	o->post_srq_recv = vrn_post_srq_recv;
	o->alloc_mw = vrn_alloc_mw;
	o->dealloc_mw = vrn_dealloc_mw;
	o->bind_mw = vrn_bind_mw;
	struct verbs_context *v = &c->vctx;
	v->query_port = vrn_query_port;
	v->query_device_ex = vrn_query_device_ex;
	v->create_qp_ex = vrn_create_qp_ex;
	v->create_cq_ex = vrn_create_cq_ex;
	v->get_srq_num = vrn_get_srq_num;
}
