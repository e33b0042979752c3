/* fatal.c: the daemon is gone. Nobody will complete what the program
 * posted, so the library does, once: every send and receive WR still in a
 * QP's rings completes with IBV_WC_WR_FLUSH_ERR in its CQ, in order, as a
 * QP in the error state flushes. From then on the library is the only
 * writer of those rings. */
#include <poll.h>
#include <string.h>

#include "ring.h"
#include "vrn.h"

void vrn_qp_link(struct vrn_context *c, struct vrn_qp *q)
{
	pthread_mutex_lock(&c->qp_mu);
	q->next = c->qps;
	c->qps = q;
	pthread_mutex_unlock(&c->qp_mu);
}

void vrn_qp_unlink(struct vrn_context *c, struct vrn_qp *q)
{
	pthread_mutex_lock(&c->qp_mu);
	for (struct vrn_qp **pp = &c->qps; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	pthread_mutex_unlock(&c->qp_mu);
}

/* vrn_check_alive: a cheap, non-blocking look for the daemon's hang-up. */
void vrn_check_alive(struct vrn_context *c)
{
	if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE))
		return;
	struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
	if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		vrn_mark_dead(c);
}

/* cq_push writes one flush completion at the CQ's producer index. */
static void cq_push(struct vrn_cq *cq, uint64_t wr_id, uint8_t opcode, uint32_t qpn)
{
	uint64_t prod = ring_load_prod(cq->ring);
	if (prod - ring_load_cons(cq->ring) >= cq->entries)
		return; /* full: an overrun, as the device would report it */
	uint8_t *e = cq->ring + VRN_RING_HEADER_SIZE + (prod & (cq->entries - 1)) * VRN_CQE_SIZE;
	memset(e, 0, VRN_CQE_SIZE);
	put64(e + VRN_CQE_WR_ID, wr_id);
	e[VRN_CQE_STATUS] = IBV_WC_WR_FLUSH_ERR;
	e[VRN_CQE_OPCODE] = opcode;
	put32(e + VRN_CQE_QPN, qpn);
	ring_store_prod(cq->ring, prod + 1);
}

/* flush_queue completes the WRs between a ring's consumer index (what the
 * daemon completed) and our tail. */
static void flush_queue(struct vrn_queue *q, struct vrn_cq *cq, uint32_t qpn, int recv)
{
	if (!q->ring)
		return;
	pthread_spin_lock(&q->lock);
	pthread_spin_lock(&cq->lock);
	for (uint64_t i = ring_load_cons(q->ring); i != q->tail; i++) {
		const uint8_t *e = q->ring + VRN_RING_HEADER_SIZE + (size_t)(i & (q->entries - 1)) * q->esize;
		uint8_t op = recv ? IBV_WC_RECV : IBV_WC_SEND;
		cq_push(cq, get64(e), op, qpn);
	}
	ring_store_cons(q->ring, q->tail);
	pthread_spin_unlock(&cq->lock);
	pthread_spin_unlock(&q->lock);
}

void vrn_flush_dead(struct vrn_context *c)
{
	pthread_mutex_lock(&c->qp_mu);
	if (!c->flushed) {
		c->flushed = 1;
		for (struct vrn_qp *q = c->qps; q; q = q->next) {
			q->qp.state = IBV_QPS_ERR;
			flush_queue(&q->sq, container_of(q->qp.send_cq, struct vrn_cq, cq), q->qp.qp_num, 0);
			if (!q->qp.srq)
				flush_queue(&q->rq, container_of(q->qp.recv_cq, struct vrn_cq, cq), q->qp.qp_num, 1);
		}
	}
	pthread_mutex_unlock(&c->qp_mu);
}
