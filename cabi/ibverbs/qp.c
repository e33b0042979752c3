/* qp.c: queue pairs. The send and receive queues are rings in shared
 * memory (verbsock/ring): post_send and post_recv write entries and ring
 * the doorbell only when the daemon said it sleeps. Each queue has its own
 * lock, as rdma-core's rxe provider takes. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"
#include "vrn.h"

int vrn_av_from_attr(const struct ibv_ah_attr *a, struct vrn_av *av);
void vrn_attr_from_av(const struct vrn_av *av, struct ibv_ah_attr *a);
int vrn_qp_ex_init(struct vrn_qp *q, uint64_t send_ops_flags); /* qp_ex.c */

static void queue_free(struct vrn_queue *q)
{
	if (q->ring)
		munmap(q->ring, q->ring_size);
	q->ring = NULL;
}

static int queue_new(struct vrn_context *c, struct vrn_queue *q, uint32_t kind, uint32_t n, uint32_t esize, int *fd)
{
	q->entries = ring_entries_for(n ? n : 1);
	if (!q->entries)
		return EINVAL;
	q->esize = esize;
	q->ring_size = ring_bytes(q->entries, esize, c->page_size);
	q->ring = vrn_ring_new(c, q->ring_size, fd);
	if (!q->ring)
		return ENOMEM;
	ring_init_header(q->ring, kind, q->entries, esize);
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

void vrn_ring_bell(int fd)
{
	static const char one = 1;
	/* A full queue already holds a wake-up; a closed daemon end has nobody to wake. */
	(void)send(fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

struct vrn_qp *vrn_qp_new(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	struct vrn_context *c = to_vctx(context);
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq || !a->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP; /* XRC, raw packet and driver QPs: no such QPs here */
		return NULL;
	}
	struct vrn_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->bell = -1;
	struct ibv_qp_cap *cap = &a->cap;
	int fds[2], nfds = 0, err;
	err = queue_new(c, &q->sq, VRN_RING_KIND_SQ, cap->max_send_wr,
			sq_entry_size(cap->max_send_sge, cap->max_inline_data), &fds[nfds]);
	if (!err)
		nfds++;
	if (!err && !a->srq) {
		err = queue_new(c, &q->rq, VRN_RING_KIND_RQ, cap->max_recv_wr,
				rq_entry_size(cap->max_recv_sge ? cap->max_recv_sge : 1), &fds[nfds]);
		if (!err)
			nfds++;
	}
	struct vrn_create_qp_req req = {
		.pd = container_of(a->pd, struct vrn_pd, pd)->handle,
		.send_cq = container_of(a->send_cq, struct vrn_cq, cq)->handle,
		.recv_cq = container_of(a->recv_cq, struct vrn_cq, cq)->handle,
		.srq = a->srq ? container_of(a->srq, struct vrn_srq, srq)->handle : 0,
		.type = (uint8_t)a->qp_type,
		.sig_all = a->sq_sig_all ? 1 : 0,
		.flags = (a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) ? (uint16_t)a->create_flags : 0,
		.cap = {.max_send_wr = cap->max_send_wr, .max_recv_wr = a->srq ? 0 : cap->max_recv_wr,
			.max_send_sge = cap->max_send_sge, .max_recv_sge = a->srq ? 0 : cap->max_recv_sge,
			.max_inline_data = cap->max_inline_data},
	};
	struct vrn_create_qp_resp r;
	int rfd[1], nr = 0;
	if (!err)
		err = vrn_call(c, VRN_OP_CREATE_QP, &req, sizeof(req), fds, nfds, &r, sizeof(r), rfd, 1, &nr);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	if (!err && (nr != 1 || r.cap.max_send_wr != q->sq.entries || (!a->srq && r.cap.max_recv_wr != q->rq.entries)))
		err = EPROTO;
	if (err) {
		if (nr)
			close(rfd[0]);
		queue_free(&q->sq);
		queue_free(&q->rq);
		free(q);
		errno = err;
		return NULL;
	}
	q->handle = r.qp;
	q->bell = rfd[0];
	q->cap = (struct ibv_qp_cap){.max_send_wr = r.cap.max_send_wr, .max_recv_wr = r.cap.max_recv_wr,
				     .max_send_sge = r.cap.max_send_sge, .max_recv_sge = r.cap.max_recv_sge,
				     .max_inline_data = r.cap.max_inline_data};
	*cap = q->cap; /* ibv_create_qp reports what it granted */
	q->sq_sig_all = a->sq_sig_all;
	struct ibv_qp *qp = &q->qp;
	qp->context = context;
	qp->qp_context = a->qp_context;
	qp->pd = a->pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = r.qp;
	qp->qp_num = r.qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	vrn_obj_set(c, r.qp, q);
	vrn_qp_link(c, q);
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (err = vrn_qp_ex_init(q, a->send_ops_flags))) {
		ibv_destroy_qp(qp);
		errno = err;
		return NULL;
	}
	return q;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	memcpy(&a, attr, sizeof(*attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct vrn_qp *q = vrn_qp_new(pd->context, &a);
	if (!q)
		return NULL;
	attr->cap = a.cap;
	return &q->qp;
}

/* The daemon's creation flag has ibverbs' value: it passes through. */
_Static_assert(VRN_CREATE_QP_BLOCK_SELF_MCAST_LB == IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, "create flag");

struct ibv_qp *vrn_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *a)
{
	if (a->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS)) {
		errno = EOPNOTSUPP; /* XRC domains, RSS, TSO: none here */
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	    (a->create_flags & ~(uint32_t)IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)) {
		errno = EOPNOTSUPP; /* scatter FCS, CVLAN stripping, padding, ...: not here */
		return NULL;
	}
	struct vrn_qp *q = vrn_qp_new(context, a);
	return q ? &q->qp : NULL;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	struct vrn_context *c = to_vctx(qp->context);
	struct vrn_handle_req req = {.handle = q->handle};
	int err = vrn_call(c, VRN_OP_DESTROY_QP, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	if (err && err != EIO)
		return err;
	vrn_obj_set(c, q->handle, NULL);
	vrn_qp_unlink(c, q);
	if (q->bell >= 0)
		close(q->bell);
	queue_free(&q->sq);
	queue_free(&q->rq);
	free(q->ex);
	free(q);
	return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	struct vrn_modify_qp_req req = {.qp = q->handle, .mask = (uint32_t)mask};
	struct vrn_qp_attr *w = &req.attr;
	w->state = (uint8_t)a->qp_state;
	w->cur_state = (uint8_t)a->cur_qp_state;
	w->path_mtu = (uint8_t)a->path_mtu;
	w->port = a->port_num;
	w->qkey = a->qkey;
	w->rqpsn = a->rq_psn;
	w->sqpsn = a->sq_psn;
	w->dest_qpn = a->dest_qp_num;
	w->access_flags = (uint32_t)a->qp_access_flags;
	w->pkey_index = a->pkey_index;
	w->max_rd_atomic = a->max_rd_atomic;
	w->max_dest_rd_atomic = a->max_dest_rd_atomic;
	w->min_rnr_timer = a->min_rnr_timer;
	w->timeout = a->timeout;
	w->retry_cnt = a->retry_cnt;
	w->rnr_retry = a->rnr_retry;
	w->sq_drain_notify = a->en_sqd_async_notify;
	if (mask & IBV_QP_AV) {
		int err = vrn_av_from_attr(&a->ah_attr, &w->av);
		if (err)
			return err; /* RoCE: ib_core refuses an address without a GRH */
		if (!(mask & IBV_QP_PORT))
			w->av.port = a->ah_attr.port_num;
	}
	int err = vrn_call(to_vctx(qp->context), VRN_OP_MODIFY_QP, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	if (err)
		return err;
	if (mask & IBV_QP_STATE)
		qp->state = a->qp_state;
	return 0;
}

int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	struct vrn_query_qp_req req = {.qp = q->handle, .mask = (uint32_t)mask};
	struct vrn_query_qp_resp r;
	int err = vrn_call(to_vctx(qp->context), VRN_OP_QUERY_QP, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL);
	if (err)
		return err;
	const struct vrn_qp_attr *w = &r.attr;
	memset(a, 0, sizeof(*a));
	a->qp_state = (enum ibv_qp_state)w->state;
	a->cur_qp_state = (enum ibv_qp_state)w->cur_state;
	a->path_mtu = (enum ibv_mtu)w->path_mtu;
	a->port_num = w->port;
	a->qkey = w->qkey;
	a->rq_psn = w->rqpsn;
	a->sq_psn = w->sqpsn;
	a->dest_qp_num = w->dest_qpn;
	a->qp_access_flags = (int)w->access_flags;
	a->pkey_index = w->pkey_index;
	a->max_rd_atomic = w->max_rd_atomic;
	a->max_dest_rd_atomic = w->max_dest_rd_atomic;
	a->min_rnr_timer = w->min_rnr_timer;
	a->timeout = w->timeout;
	a->retry_cnt = w->retry_cnt;
	a->rnr_retry = w->rnr_retry;
	a->en_sqd_async_notify = w->sq_drain_notify;
	a->sq_draining = 0;
	vrn_attr_from_av(&w->av, &a->ah_attr);
	a->cap = q->cap;
	qp->state = a->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sq_sig_all;
	}
	return 0;
}

/* put_sges writes a WR's SGEs into an entry. */
static inline void put_sges(uint8_t *e, int off, const struct ibv_sge *sg, int n)
{
	for (int i = 0; i < n; i++) {
		uint8_t *s = e + off + i * VRN_SGE_SIZE;
		put64(s, sg[i].addr);
		put32(s + 8, sg[i].length);
		put32(s + 12, sg[i].lkey);
	}
}

/* sqe_encode writes one send WR into a zeroed slot: 0 or an errno. */
static int sqe_encode(struct vrn_qp *q, uint8_t *e, const struct ibv_send_wr *wr)
{
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->cap.max_send_sge)
		return EINVAL;
	uint32_t flags = wr->send_flags;
	if (q->sq_sig_all)
		flags |= IBV_SEND_SIGNALED;
	put64(e + VRN_SQE_WR_ID, wr->wr_id);
	put32(e + VRN_SQE_FLAGS, flags);
	e[VRN_SQE_OPCODE] = (uint8_t)wr->opcode;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND_WITH_IMM:
		put32(e + VRN_SQE_IMM, be32toh(wr->imm_data)); /* the ring holds it as read big-endian off the wire */
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		put32(e + VRN_SQE_IMM, wr->invalidate_rkey);
		break;
	default:
		break;
	}
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		put64(e + VRN_SQE_REMOTE_ADDR, wr->wr.rdma.remote_addr);
		put32(e + VRN_SQE_RKEY, wr->wr.rdma.rkey);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		put64(e + VRN_SQE_REMOTE_ADDR, wr->wr.atomic.remote_addr);
		put32(e + VRN_SQE_RKEY, wr->wr.atomic.rkey);
		put64(e + VRN_SQE_COMPARE_ADD, wr->wr.atomic.compare_add);
		put64(e + VRN_SQE_SWAP, wr->wr.atomic.swap);
		break;
	case IBV_WR_BIND_MW:
		put32(e + VRN_SQE_BIND_MW_KEY, wr->bind_mw.rkey);
		put32(e + VRN_SQE_BIND_ACCESS, wr->bind_mw.bind_info.mw_access_flags);
		put32(e + VRN_SQE_BIND_MR_KEY, wr->bind_mw.bind_info.mr ? wr->bind_mw.bind_info.mr->lkey : 0);
		put64(e + VRN_SQE_BIND_ADDR, wr->bind_mw.bind_info.addr);
		put64(e + VRN_SQE_BIND_LENGTH, wr->bind_mw.bind_info.length);
		break;
	default:
		break;
	}
	if (q->qp.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		put32(e + VRN_SQE_AH, container_of(wr->wr.ud.ah, struct vrn_ah, ah)->handle);
		put32(e + VRN_SQE_REMOTE_QPN, wr->wr.ud.remote_qpn);
		put32(e + VRN_SQE_REMOTE_QKEY, wr->wr.ud.remote_qkey);
	}
	if (flags & IBV_SEND_INLINE) {
		/* ibverbs copies inline data from the SGEs at post time. */
		uint8_t *area = e + VRN_SQE_DESC_SIZE + VRN_SGE_SIZE * q->cap.max_send_sge;
		size_t n = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (n + wr->sg_list[i].length > q->cap.max_inline_data)
				return EINVAL;
			memcpy(area + n, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			n += wr->sg_list[i].length;
		}
		put16(e + VRN_SQE_INLINE_LEN, (uint16_t)n);
	} else {
		e[VRN_SQE_NUM_SGE] = (uint8_t)wr->num_sge;
		put_sges(e, VRN_SQE_DESC_SIZE, wr->sg_list, wr->num_sge);
	}
	return 0;
}

/* sq_slot returns the next free send slot, zeroed, or NULL when
 * max_send_wr WRs are posted and not completed. Caller holds the lock. */
uint8_t *vrn_queue_slot(struct vrn_queue *q)
{
	if (q->tail - ring_load_cons(q->ring) >= q->entries)
		return NULL;
	uint8_t *e = q->ring + VRN_RING_HEADER_SIZE + (size_t)(q->tail & (q->entries - 1)) * q->esize;
	memset(e, 0, q->esize);
	return e;
}

/* refresh_state asks the daemon for the QP's state: it moves QPs itself
 * (rdma_cm's transitions), so a state this process did not set may be
 * stale. Only on the path that would refuse the post. */
static void refresh_state(struct vrn_qp *q)
{
	struct vrn_query_qp_req req = {.qp = q->handle, .mask = IBV_QP_STATE};
	struct vrn_query_qp_resp r;
	if (!vrn_call(to_vctx(q->qp.context), VRN_OP_QUERY_QP, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL))
		q->qp.state = (enum ibv_qp_state)r.attr.state;
}

int vrn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	int err = 0;
	if (qp->state < IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
		refresh_state(q);
	pthread_spin_lock(&q->sq.lock);
	uint64_t start = q->sq.tail;
	if (qp->state < IBV_QPS_RTS && qp->state != IBV_QPS_ERR)
		err = EINVAL;
	for (; wr && !err; wr = wr->next) {
		uint8_t *e = vrn_queue_slot(&q->sq);
		if (!e) {
			err = ENOMEM;
			break;
		}
		if ((err = sqe_encode(q, e, wr)))
			break;
		q->sq.tail++;
	}
	if (err && bad)
		*bad = wr;
	if (q->sq.tail != start && ring_publish(q->sq.ring, q->sq.tail))
		vrn_ring_bell(q->bell);
	pthread_spin_unlock(&q->sq.lock);
	return err;
}

/* rqe_encode writes one receive WR. */
static int rqe_encode(struct vrn_queue *rq, uint32_t max_sge, uint8_t *e, const struct ibv_recv_wr *wr)
{
	(void)rq;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > max_sge)
		return EINVAL;
	put64(e + VRN_RQE_WR_ID, wr->wr_id);
	put32(e + VRN_RQE_NUM_SGE, (uint32_t)wr->num_sge);
	put_sges(e, VRN_RQE_DESC_SIZE, wr->sg_list, wr->num_sge);
	return 0;
}

int vrn_post_recv_queue(struct vrn_queue *rq, uint32_t max_sge, int bell, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad)
{
	int err = 0;
	pthread_spin_lock(&rq->lock);
	uint64_t start = rq->tail;
	for (; wr; wr = wr->next) {
		uint8_t *e = vrn_queue_slot(rq);
		if (!e) {
			err = ENOMEM;
			break;
		}
		if ((err = rqe_encode(rq, max_sge, e, wr)))
			break;
		rq->tail++;
	}
	if (err && bad)
		*bad = wr;
	if (rq->tail != start && ring_publish(rq->ring, rq->tail))
		vrn_ring_bell(bell);
	pthread_spin_unlock(&rq->lock);
	return err;
}

int vrn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	if (qp->srq) {
		if (bad)
			*bad = wr;
		return EINVAL;
	}
	return vrn_post_recv_queue(&q->rq, q->cap.max_recv_sge, q->bell, wr, bad);
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	return q->has_ex ? &q->qp_ex : NULL;
}

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	/* The responder places data in PSN order, as rxe: in order. */
	(void)qp;
	(void)op;
	return flags ? 0 : 1;
}

/* ibv_attach_mcast / ibv_detach_mcast: the daemon checks the GID (multicast)
 * and the QP (UD) as ib_core does; the LID means nothing on RoCE. */
static int mcast_call(struct ibv_qp *qp, uint16_t op, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	struct vrn_qp *q = container_of(qp, struct vrn_qp, qp);
	struct vrn_mcast_req req = {.qp = q->handle, .lid = lid};
	memcpy(req.gid, gid->raw, sizeof(req.gid));
	return vrn_call(to_vctx(qp->context), op, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
}

int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast_call(qp, VRN_OP_ATTACH_MCAST, gid, lid);
}

int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast_call(qp, VRN_OP_DETACH_MCAST, gid, lid);
}

/* Enhanced connection establishment: a device without it answers
 * EOPNOTSUPP, as rdma-core does when the provider has no ECE. */
int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}
