/* cq_ex.c: ibv_create_cq_ex and its poll API (start_poll, next_poll,
 * end_poll, read_*). Entries are read in place in the ring; the consumer
 * index is published at end_poll, so the daemon cannot reuse a slot being
 * read. */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>

#include "ring.h"
#include "vrn.h"

struct vrn_cq_ex {
	const uint8_t *cur; /* the entry the read_* calls look at */
	uint64_t tail;
};

struct vrn_cq *vrn_cq_new(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			  int comp_vector);

static inline struct vrn_cq *cx(struct ibv_cq_ex *c) { return container_of(c, struct vrn_cq, cq_ex); }

static int take(struct vrn_cq *cq)
{
	if (cq->head == cq->ex->tail) {
		cq->ex->tail = ring_load_prod(cq->ring);
		if (cq->head == cq->ex->tail)
			return ENOENT;
	}
	const uint8_t *e = cq->ring + VRN_RING_HEADER_SIZE + (cq->head & (cq->entries - 1)) * VRN_CQE_SIZE;
	cq->head++;
	cq->ex->cur = e;
	cq->cq_ex.wr_id = get64(e + VRN_CQE_WR_ID);
	cq->cq_ex.status = (enum ibv_wc_status)e[VRN_CQE_STATUS];
	return 0;
}

/* ibv_resize_cq moved the CQ to a new ring, indexed from 0: the producer
 * index take() keeps is the old ring's. Caller holds cq->lock. */
void vrn_cq_ex_resized(struct vrn_cq *cq)
{
	if (cq->ex) {
		cq->ex->tail = 0;
		cq->ex->cur = NULL;
	}
}

static int start_poll(struct ibv_cq_ex *c, struct ibv_poll_cq_attr *attr)
{
	struct vrn_cq *cq = cx(c);
	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	int err = take(cq);
	if (err)
		pthread_spin_unlock(&cq->lock); /* ENOENT: the caller does not call end_poll */
	vrn_cq_idle(cq, err != 0);
	return err;
}

static int next_poll(struct ibv_cq_ex *c) { return take(cx(c)); }

static void end_poll(struct ibv_cq_ex *c)
{
	struct vrn_cq *cq = cx(c);
	ring_store_cons(cq->ring, cq->head);
	pthread_spin_unlock(&cq->lock);
}

static const uint8_t *cur(struct ibv_cq_ex *c) { return cx(c)->ex->cur; }

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return (enum ibv_wc_opcode)cur(c)[VRN_CQE_OPCODE]; }
static uint32_t read_vendor_err(struct ibv_cq_ex *c) { return get32(cur(c) + VRN_CQE_VENDOR_ERR); }
static uint32_t read_byte_len(struct ibv_cq_ex *c) { return get32(cur(c) + VRN_CQE_BYTE_LEN); }
static uint32_t read_qp_num(struct ibv_cq_ex *c) { return get32(cur(c) + VRN_CQE_QPN); }
static uint32_t read_src_qp(struct ibv_cq_ex *c) { return get32(cur(c) + VRN_CQE_SRC_QP); }
static unsigned int read_wc_flags(struct ibv_cq_ex *c) { return get32(cur(c) + VRN_CQE_FLAGS); }
static uint32_t read_slid(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint8_t read_sl(struct ibv_cq_ex *c) { (void)c; return 0; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c) { (void)c; return 0; }

static __be32 read_imm_data(struct ibv_cq_ex *c)
{
	uint32_t v = get32(cur(c) + VRN_CQE_IMM);
	return (get32(cur(c) + VRN_CQE_FLAGS) & IBV_WC_WITH_INV) ? v : htobe32(v);
}

/* The fields rdma-core's rxe offers; timestamps and flow tags it has not. */
#define SUPPORTED_WC_FLAGS                                                                                          \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |             \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *vrn_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *a)
{
	if ((a->wc_flags & ~(uint64_t)SUPPORTED_WC_FLAGS) || (a->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct vrn_cq *cq = vrn_cq_new(context, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
	if (!cq)
		return NULL;
	cq->ex = calloc(1, sizeof(*cq->ex));
	if (!cq->ex) {
		ibv_destroy_cq(&cq->cq);
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_cq_ex *x = &cq->cq_ex;
	x->start_poll = start_poll;
	x->next_poll = next_poll;
	x->end_poll = end_poll;
	x->read_opcode = read_opcode;
	x->read_vendor_err = read_vendor_err;
	x->read_byte_len = read_byte_len;
	x->read_imm_data = read_imm_data;
	x->read_qp_num = read_qp_num;
	x->read_src_qp = read_src_qp;
	x->read_wc_flags = read_wc_flags;
	x->read_slid = read_slid;
	x->read_sl = read_sl;
	x->read_dlid_path_bits = read_dlid_path_bits;
	return x;
}
