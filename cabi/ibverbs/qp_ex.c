/* qp_ex.c: the work-request builder API (ibv_qp_to_qp_ex, ibv_wr_*). A
 * chain wr_start .. wr_complete writes entries straight into the send ring
 * under the queue's lock and publishes them at wr_complete; wr_abort (or an
 * error in the chain) takes them back. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "vrn.h"

struct vrn_qp_ex {
	uint64_t start; /* the SQ's tail at wr_start */
	uint8_t *cur;   /* the entry being built, NULL after an error */
	int err;
};

uint8_t *vrn_queue_slot(struct vrn_queue *q);
void vrn_ring_bell(int fd);

static inline struct vrn_qp *qx(struct ibv_qp_ex *ibqp) { return container_of(ibqp, struct vrn_qp, qp_ex); }

static void wr_start(struct ibv_qp_ex *ibqp)
{
	struct vrn_qp *q = qx(ibqp);
	pthread_spin_lock(&q->sq.lock);
	q->ex->start = q->sq.tail;
	q->ex->cur = NULL;
	q->ex->err = 0;
}

/* next opens a new entry with the common fields. */
static uint8_t *next(struct ibv_qp_ex *ibqp, enum ibv_wr_opcode op)
{
	struct vrn_qp *q = qx(ibqp);
	struct vrn_qp_ex *x = q->ex;
	x->cur = NULL;
	if (x->err)
		return NULL;
	uint8_t *e = vrn_queue_slot(&q->sq);
	if (!e) {
		x->err = ENOMEM;
		return NULL;
	}
	uint32_t flags = ibqp->wr_flags;
	if (q->sq_sig_all)
		flags |= IBV_SEND_SIGNALED;
	put64(e + VRN_SQE_WR_ID, ibqp->wr_id);
	put32(e + VRN_SQE_FLAGS, flags);
	e[VRN_SQE_OPCODE] = (uint8_t)op;
	q->sq.tail++;
	x->cur = e;
	return e;
}

static void remote(uint8_t *e, uint32_t rkey, uint64_t addr)
{
	if (!e)
		return;
	put32(e + VRN_SQE_RKEY, rkey);
	put64(e + VRN_SQE_REMOTE_ADDR, addr);
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	remote(next(q, IBV_WR_RDMA_WRITE), rkey, addr);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm)
{
	uint8_t *e = next(q, IBV_WR_RDMA_WRITE_WITH_IMM);
	remote(e, rkey, addr);
	if (e)
		put32(e + VRN_SQE_IMM, be32toh(imm));
}

static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
	remote(next(q, IBV_WR_RDMA_READ), rkey, addr);
}

static void wr_send(struct ibv_qp_ex *q) { next(q, IBV_WR_SEND); }

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
	uint8_t *e = next(q, IBV_WR_SEND_WITH_IMM);
	if (e)
		put32(e + VRN_SQE_IMM, be32toh(imm));
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	uint8_t *e = next(q, IBV_WR_SEND_WITH_INV);
	if (e)
		put32(e + VRN_SQE_IMM, rkey);
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
	uint8_t *e = next(q, IBV_WR_LOCAL_INV);
	if (e)
		put32(e + VRN_SQE_IMM, rkey);
}

static void atomic(uint8_t *e, uint32_t rkey, uint64_t addr, uint64_t cmp_add, uint64_t swap)
{
	if (!e)
		return;
	remote(e, rkey, addr);
	put64(e + VRN_SQE_COMPARE_ADD, cmp_add);
	put64(e + VRN_SQE_SWAP, swap);
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	atomic(next(q, IBV_WR_ATOMIC_CMP_AND_SWP), rkey, addr, compare, swap);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add)
{
	atomic(next(q, IBV_WR_ATOMIC_FETCH_AND_ADD), rkey, addr, add, 0);
}

static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	uint8_t *e = next(q, IBV_WR_BIND_MW);
	if (!e)
		return;
	put32(e + VRN_SQE_BIND_MW_KEY, rkey);
	put32(e + VRN_SQE_BIND_ACCESS, info->mw_access_flags);
	put32(e + VRN_SQE_BIND_MR_KEY, info->mr ? info->mr->lkey : 0);
	put64(e + VRN_SQE_BIND_ADDR, info->addr);
	put64(e + VRN_SQE_BIND_LENGTH, info->length);
	(void)mw;
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct vrn_qp *vq = qx(q);
	uint8_t *e = vq->ex->cur;
	if (!e)
		return;
	if (vq->cap.max_send_sge < 1) {
		vq->ex->err = EINVAL;
		return;
	}
	e[VRN_SQE_NUM_SGE] = 1;
	put64(e + VRN_SQE_DESC_SIZE, addr);
	put32(e + VRN_SQE_DESC_SIZE + 8, length);
	put32(e + VRN_SQE_DESC_SIZE + 12, lkey);
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
	struct vrn_qp *vq = qx(q);
	uint8_t *e = vq->ex->cur;
	if (!e)
		return;
	if (n > vq->cap.max_send_sge) {
		vq->ex->err = EINVAL;
		return;
	}
	e[VRN_SQE_NUM_SGE] = (uint8_t)n;
	for (size_t i = 0; i < n; i++) {
		uint8_t *s = e + VRN_SQE_DESC_SIZE + i * VRN_SGE_SIZE;
		put64(s, sg[i].addr);
		put32(s + 8, sg[i].length);
		put32(s + 12, sg[i].lkey);
	}
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *buf)
{
	struct vrn_qp *vq = qx(q);
	uint8_t *e = vq->ex->cur;
	if (!e)
		return;
	uint8_t *area = e + VRN_SQE_DESC_SIZE + VRN_SGE_SIZE * vq->cap.max_send_sge;
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		if (len + buf[i].length > vq->cap.max_inline_data) {
			vq->ex->err = EINVAL;
			return;
		}
		memcpy(area + len, buf[i].addr, buf[i].length);
		len += buf[i].length;
	}
	put32(e + VRN_SQE_FLAGS, get32(e + VRN_SQE_FLAGS) | IBV_SEND_INLINE);
	put16(e + VRN_SQE_INLINE_LEN, (uint16_t)len);
	e[VRN_SQE_NUM_SGE] = 0;
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	wr_set_inline_data_list(q, 1, &b);
}

static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	uint8_t *e = qx(q)->ex->cur;
	if (!e)
		return;
	put32(e + VRN_SQE_AH, container_of(ah, struct vrn_ah, ah)->handle);
	put32(e + VRN_SQE_REMOTE_QPN, remote_qpn);
	put32(e + VRN_SQE_REMOTE_QKEY, remote_qkey);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
	(void)srqn;
	qx(q)->ex->err = EOPNOTSUPP;
}

static int wr_complete(struct ibv_qp_ex *ibqp)
{
	struct vrn_qp *q = qx(ibqp);
	int err = q->ex->err;
	if (err)
		q->sq.tail = q->ex->start; /* nothing of a failed chain is posted */
	else if (q->sq.tail != q->ex->start && ring_publish(q->sq.ring, q->sq.tail))
		vrn_ring_bell(q->bell);
	pthread_spin_unlock(&q->sq.lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *ibqp)
{
	struct vrn_qp *q = qx(ibqp);
	q->sq.tail = q->ex->start;
	pthread_spin_unlock(&q->sq.lock);
}

/* The operations rdma-core's rxe provider offers through this API. */
#define SUPPORTED_OPS                                                                                               \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                      \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |              \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |                  \
	 IBV_QP_EX_WITH_SEND_WITH_INV)

int vrn_qp_ex_init(struct vrn_qp *q, uint64_t ops)
{
	if (ops & ~(uint64_t)SUPPORTED_OPS)
		return EOPNOTSUPP;
	q->ex = calloc(1, sizeof(*q->ex));
	if (!q->ex)
		return ENOMEM;
	struct ibv_qp_ex *x = &q->qp_ex;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_local_inv = wr_local_inv;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	q->has_ex = 1;
	return 0;
}
