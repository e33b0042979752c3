/* cq.c: completion queues and completion channels. A CQ is a ring the
 * daemon writes and poll_cq reads; its completion events come on a
 * socketpair of its own. A completion channel is an epoll set of those
 * sockets: one pollable descriptor for every CQ on it, each readiness
 * naming its CQ, so ibv_get_cq_event needs nothing from the daemon. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ring.h"
#include "vrn.h"

void vrn_cq_ex_resized(struct vrn_cq *cq); /* cq_ex.c */

void *vrn_ring_new(struct vrn_context *c, size_t size, int *fd)
{
	*fd = memfd_create("vrnic-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0)
		return NULL;
	if (ftruncate(*fd, (off_t)size) ||
	    fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		close(*fd);
		return NULL;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (m == MAP_FAILED) {
		close(*fd);
		return NULL;
	}
	(void)c;
	return m;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->fd = epoll_create1(EPOLL_CLOEXEC);
	if (ch->fd < 0) {
		free(ch);
		return NULL;
	}
	/* The daemon's socket, for its hang-up only: a program asleep here must
	 * learn that the daemon is gone (data.ptr NULL marks it). */
	struct epoll_event hup = {.events = EPOLLRDHUP, .data.ptr = NULL};
	if (epoll_ctl(ch->fd, EPOLL_CTL_ADD, to_vctx(context)->sock, &hup)) {
		int e = errno;
		close(ch->fd);
		free(ch);
		errno = e;
		return NULL;
	}
	ch->context = context;
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	if (channel->refcnt) {
		errno = EBUSY;
		return EBUSY;
	}
	close(channel->fd);
	free(channel);
	return 0;
}

static struct vrn_cq *cq_new(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			     int comp_vector)
{
	struct vrn_context *c = to_vctx(context);
	if (cqe <= 0 || cqe > VRN_RING_MAX_ENTRIES || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct vrn_cq *cq = calloc(1, sizeof(*cq));
	if (!cq) {
		errno = ENOMEM;
		return NULL;
	}
	cq->ev_fd = -1;
	cq->entries = ring_entries_for((uint32_t)cqe);
	cq->ring_size = ring_bytes(cq->entries, VRN_CQE_SIZE, c->page_size);
	int fd;
	cq->ring = vrn_ring_new(c, cq->ring_size, &fd);
	if (!cq->ring) {
		free(cq);
		errno = ENOMEM;
		return NULL;
	}
	ring_init_header(cq->ring, VRN_RING_KIND_CQ, cq->entries, VRN_CQE_SIZE);
	struct vrn_create_cq_req req = {.cqe = (uint32_t)cqe, .flags = channel ? VRN_CQ_WITH_EVENTS : 0};
	struct vrn_create_cq_resp r;
	int rfd[1], nr = 0;
	int err = vrn_call(c, VRN_OP_CREATE_CQ, &req, sizeof(req), &fd, 1, &r, sizeof(r), rfd, 1, &nr);
	close(fd);
	if (!err && (r.entries != cq->entries || nr != (channel ? 1 : 0)))
		err = EPROTO;
	if (!err && channel) {
		cq->ev_fd = rfd[0];
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = cq};
		if (epoll_ctl(channel->fd, EPOLL_CTL_ADD, cq->ev_fd, &ev))
			err = errno;
	}
	if (err) {
		if (nr && cq->ev_fd < 0)
			close(rfd[0]);
		if (r.cq && err != 0 && nr) {
			struct vrn_handle_req d = {.handle = r.cq};
			vrn_call(c, VRN_OP_DESTROY_CQ, &d, sizeof(d), NULL, 0, NULL, 0, NULL, 0, NULL);
		}
		if (cq->ev_fd >= 0)
			close(cq->ev_fd);
		munmap(cq->ring, cq->ring_size);
		free(cq);
		errno = err;
		return NULL;
	}
	cq->handle = r.cq;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->cq.context = context;
	cq->cq.channel = channel;
	cq->cq.cq_context = cq_context;
	cq->cq.handle = r.cq;
	cq->cq.cqe = (int)cq->entries;
	pthread_mutex_init(&cq->cq.mutex, NULL);
	pthread_cond_init(&cq->cq.cond, NULL);
	if (channel)
		__atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
	vrn_obj_set(c, r.cq, cq);
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct vrn_cq *cq = cq_new(context, cqe, cq_context, channel, comp_vector);
	return cq ? &cq->cq : NULL;
}

struct vrn_cq *vrn_cq_new(struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			  int comp_vector)
{
	return cq_new(context, cqe, cq_context, channel, comp_vector);
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct vrn_cq *q = container_of(cq, struct vrn_cq, cq);
	struct vrn_context *c = to_vctx(cq->context);
	struct vrn_handle_req req = {.handle = q->handle};
	int err = vrn_call(c, VRN_OP_DESTROY_CQ, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	if (err && err != EIO)
		return err; /* EBUSY while QPs use it */
	vrn_obj_set(c, q->handle, NULL);
	if (cq->channel) {
		epoll_ctl(cq->channel->fd, EPOLL_CTL_DEL, q->ev_fd, NULL);
		__atomic_sub_fetch(&cq->channel->refcnt, 1, __ATOMIC_RELAXED);
	}
	if (q->ev_fd >= 0)
		close(q->ev_fd);
	munmap(q->ring, q->ring_size);
	free(q->ex);
	free(q);
	return 0;
}

/* A program that busy-polls an empty CQ would keep the daemon, which
 * produces its completions, off a CPU it shares with it: after
 * vrn_poll_yield empty polls in a row, each empty poll yields the CPU (the
 * Go tools' Spinner does the same). VRNIC_POLL_YIELD sets the count, 0
 * never yields. */
unsigned vrn_poll_yield = 16;

void vrn_cq_idle(struct vrn_cq *cq, int empty)
{
	if (!empty) {
		cq->empty = 0;
		return;
	}
	cq->empty++;
	if (vrn_poll_yield && cq->empty >= vrn_poll_yield)
		sched_yield();
	/* Now and then, ask whether the daemon is still there: a program
	 * polling for completions that will never come learns it here. */
	if ((cq->empty & 4095) == 0)
		vrn_check_alive(to_vctx(cq->cq.context));
}

/* cqe_to_wc converts one ring entry (verbsock/ring CQE) to an ibv_wc. */
static inline void cqe_to_wc(const uint8_t *e, struct ibv_wc *wc)
{
	wc->wr_id = get64(e + VRN_CQE_WR_ID);
	wc->status = (enum ibv_wc_status)e[VRN_CQE_STATUS];
	wc->opcode = (enum ibv_wc_opcode)e[VRN_CQE_OPCODE];
	wc->vendor_err = get32(e + VRN_CQE_VENDOR_ERR);
	wc->byte_len = get32(e + VRN_CQE_BYTE_LEN);
	wc->wc_flags = get32(e + VRN_CQE_FLAGS);
	uint32_t imm = get32(e + VRN_CQE_IMM);
	/* The ring holds immediate data as a number read big-endian off the
	 * wire; ibv_wc wants the wire's bytes. An invalidated rkey is a number. */
	wc->imm_data = (wc->wc_flags & IBV_WC_WITH_INV) ? imm : htobe32(imm);
	wc->qp_num = get32(e + VRN_CQE_QPN);
	wc->src_qp = get32(e + VRN_CQE_SRC_QP);
	wc->pkey_index = get16(e + VRN_CQE_PKEY_INDEX);
	wc->slid = 0;
	wc->sl = 0;
	wc->dlid_path_bits = 0;
}

int vrn_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct vrn_cq *cq = container_of(ibcq, struct vrn_cq, cq);
	pthread_spin_lock(&cq->lock);
	uint64_t tail = ring_load_prod(cq->ring);
	int n = 0;
	while (cq->head != tail && n < num) {
		const uint8_t *e = cq->ring + VRN_RING_HEADER_SIZE + (cq->head & (cq->entries - 1)) * VRN_CQE_SIZE;
		cqe_to_wc(e, &wc[n]);
		cq->head++;
		n++;
	}
	if (n)
		ring_store_cons(cq->ring, cq->head);
	pthread_spin_unlock(&cq->lock);
	vrn_cq_idle(cq, n == 0);
	return n;
}

/* Arming: the next completion stores 1; solicited-only sets 2 only over 0,
 * so a pending request for the next completion is never narrowed. */
int vrn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct vrn_cq *cq = container_of(ibcq, struct vrn_cq, cq);
	uint32_t *w = ring_u32(cq->ring, VRN_RING_OFF_NOTIFY);
	if (cq->ev_fd < 0)
		return EINVAL;
	if (!solicited_only) {
		__atomic_store_n(w, VRN_RING_NOTIFY_NEXT, __ATOMIC_SEQ_CST);
	} else {
		uint32_t zero = VRN_RING_NOTIFY_NONE;
		__atomic_compare_exchange_n(w, &zero, VRN_RING_NOTIFY_SOLICITED, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	}
	return 0;
}

/* take_one takes one completion event off a CQ's event socket: the daemon
 * sends one per notification it fires, and ibv_get_cq_event returns one
 * event per notification, as the kernel's channel does. 1 if there was one,
 * 0 if none, -1 at end of file (the daemon closed it). */
static int take_one(int fd)
{
	char b[16];
	for (;;) {
		ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
		if (n > 0)
			return 1;
		if (n == 0)
			return -1;
		if (errno != EINTR)
			return 0;
	}
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	for (;;) {
		struct epoll_event ev;
		int nonblock = fcntl(channel->fd, F_GETFL) & O_NONBLOCK;
		int n = epoll_wait(channel->fd, &ev, 1, nonblock ? 0 : -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = EAGAIN;
			return -1;
		}
		struct vrn_cq *q = ev.data.ptr;
		if (!q) {
			vrn_mark_dead(to_vctx(channel->context));
			errno = EIO;
			return -1;
		}
		int r = take_one(q->ev_fd);
		if (r < 0) {
			/* The daemon is gone: no event will come; say so rather than hang. */
			epoll_ctl(channel->fd, EPOLL_CTL_DEL, q->ev_fd, NULL);
			errno = EIO;
			return -1;
		}
		if (r == 0)
			continue; /* another thread took it */
		*cq = &q->cq;
		*cq_context = q->cq.cq_context;
		return 0;
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

/* Resize moves the CQ to a new ring; the daemon carries what is unpolled. */
int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct vrn_cq *cq = container_of(ibcq, struct vrn_cq, cq);
	struct vrn_context *c = to_vctx(ibcq->context);
	if (cqe <= 0 || cqe > VRN_RING_MAX_ENTRIES)
		return EINVAL;
	uint32_t entries = ring_entries_for((uint32_t)cqe);
	size_t size = ring_bytes(entries, VRN_CQE_SIZE, c->page_size);
	int fd;
	uint8_t *m = vrn_ring_new(c, size, &fd);
	if (!m)
		return ENOMEM;
	ring_init_header(m, VRN_RING_KIND_CQ, entries, VRN_CQE_SIZE);
	pthread_spin_lock(&cq->lock);
	struct vrn_resize_cq_req req = {.cq = cq->handle, .cqe = (uint32_t)cqe};
	struct vrn_resize_cq_resp r;
	int err = vrn_call(c, VRN_OP_RESIZE_CQ, &req, sizeof(req), &fd, 1, &r, sizeof(r), NULL, 0, NULL);
	close(fd);
	if (err) {
		pthread_spin_unlock(&cq->lock);
		munmap(m, size);
		return err;
	}
	munmap(cq->ring, cq->ring_size);
	cq->ring = m;
	cq->ring_size = size;
	cq->entries = entries;
	cq->head = 0;
	vrn_cq_ex_resized(cq);
	ibcq->cqe = (int)entries;
	pthread_spin_unlock(&cq->lock);
	return 0;
}
