/* srq.c: shared receive queues, a ring of receive entries like a QP's RQ. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ring.h"
#include "vrn.h"

int vrn_post_recv_queue(struct vrn_queue *rq, uint32_t max_sge, int bell, struct ibv_recv_wr *wr,
			struct ibv_recv_wr **bad);

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct vrn_context *c = to_vctx(pd->context);
	struct ibv_srq_attr *a = &attr->attr;
	if (!a->max_wr || a->max_wr > VRN_RING_MAX_ENTRIES) {
		errno = EINVAL;
		return NULL;
	}
	struct vrn_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->bell = -1;
	uint32_t max_sge = a->max_sge ? a->max_sge : 1;
	struct vrn_queue *q = &s->rq;
	q->entries = ring_entries_for(a->max_wr);
	q->esize = rq_entry_size(max_sge);
	q->ring_size = ring_bytes(q->entries, q->esize, c->page_size);
	int fd;
	q->ring = vrn_ring_new(c, q->ring_size, &fd);
	if (!q->ring) {
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	ring_init_header(q->ring, VRN_RING_KIND_SRQ, q->entries, q->esize);
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	struct vrn_create_srq_req req = {.pd = container_of(pd, struct vrn_pd, pd)->handle, .max_wr = a->max_wr,
					 .max_sge = max_sge, .limit = a->srq_limit};
	struct vrn_create_srq_resp r;
	int rfd[1], nr = 0;
	int err = vrn_call(c, VRN_OP_CREATE_SRQ, &req, sizeof(req), &fd, 1, &r, sizeof(r), rfd, 1, &nr);
	close(fd);
	if (!err && (nr != 1 || r.max_wr != q->entries))
		err = EPROTO;
	if (err) {
		if (nr)
			close(rfd[0]);
		munmap(q->ring, q->ring_size);
		free(s);
		errno = err;
		return NULL;
	}
	s->handle = r.srq;
	s->srqn = r.srqn;
	s->bell = rfd[0];
	s->max_sge = r.max_sge;
	a->max_wr = r.max_wr;
	a->max_sge = r.max_sge;
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	s->srq.handle = r.srq;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	vrn_obj_set(c, r.srq, s);
	return &s->srq;
}

/* resize moves the SRQ to a new ring of max_wr entries; the daemon carries
 * the WQEs the old one holds (PROTOCOL.md §6) and we produce after them. */
static int resize(struct vrn_srq *s, uint32_t max_wr)
{
	struct vrn_context *c = to_vctx(s->srq.context);
	struct vrn_queue *q = &s->rq;
	uint32_t entries = ring_entries_for(max_wr);
	if (!entries)
		return EINVAL;
	size_t size = ring_bytes(entries, q->esize, c->page_size);
	int fd;
	uint8_t *m = vrn_ring_new(c, size, &fd);
	if (!m)
		return ENOMEM;
	ring_init_header(m, VRN_RING_KIND_SRQ, entries, q->esize);
	pthread_spin_lock(&q->lock);
	struct vrn_resize_srq_req req = {.srq = s->handle, .max_wr = max_wr};
	struct vrn_resize_srq_resp r;
	int err = vrn_call(c, VRN_OP_RESIZE_SRQ, &req, sizeof(req), &fd, 1, &r, sizeof(r), NULL, 0, NULL);
	close(fd);
	if (err) {
		pthread_spin_unlock(&q->lock);
		munmap(m, size);
		return err;
	}
	munmap(q->ring, q->ring_size);
	q->ring = m;
	q->ring_size = size;
	q->entries = entries;
	q->tail = r.used;
	pthread_spin_unlock(&q->lock);
	return 0;
}

int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct vrn_srq *s = container_of(srq, struct vrn_srq, srq);
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR) {
		int err = resize(s, attr->max_wr);
		if (err)
			return err;
	}
	if (mask & IBV_SRQ_LIMIT) {
		struct vrn_modify_srq_req req = {.srq = s->handle, .mask = 2, .limit = attr->srq_limit};
		return vrn_call(to_vctx(srq->context), VRN_OP_MODIFY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	}
	return 0;
}

int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct vrn_srq *s = container_of(srq, struct vrn_srq, srq);
	struct vrn_handle_req req = {.handle = s->handle};
	struct vrn_query_srq_resp r;
	int err = vrn_call(to_vctx(srq->context), VRN_OP_QUERY_SRQ, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL);
	if (err)
		return err;
	attr->max_wr = r.max_wr;
	attr->max_sge = r.max_sge;
	attr->srq_limit = r.limit;
	return 0;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct vrn_srq *s = container_of(srq, struct vrn_srq, srq);
	struct vrn_context *c = to_vctx(srq->context);
	struct vrn_handle_req req = {.handle = s->handle};
	int err = vrn_call(c, VRN_OP_DESTROY_SRQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	if (err && err != EIO)
		return err;
	vrn_obj_set(c, s->handle, NULL);
	close(s->bell);
	munmap(s->rq.ring, s->rq.ring_size);
	free(s);
	return 0;
}

int vrn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct vrn_srq *s = container_of(srq, struct vrn_srq, srq);
	return vrn_post_recv_queue(&s->rq, s->max_sge, s->bell, wr, bad);
}

int vrn_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	*srq_num = container_of(srq, struct vrn_srq, srq)->srqn;
	return 0;
}
