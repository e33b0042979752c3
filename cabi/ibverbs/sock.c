/* sock.c: the control path to the daemon, one SOCK_SEQPACKET frame per
 * request and reply (verbsock/PROTOCOL.md §2). A request holds the context's
 * call lock from send to reply; events the daemon sends meanwhile are
 * queued for ibv_get_async_event (and, later, rdma_cm). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "vrn.h"

/* VRNIC_DEBUG set: a failed request prints the daemon's explanation on
 * stderr (the errno alone rarely says which attribute was refused). */
int vrn_debug;

int vrn_connect(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

static void close_fds(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static int send_frame(int sock, uint64_t id, uint16_t op, const void *req, size_t reqlen, const int *fds, int nfds)
{
	uint8_t buf[VRN_MAX_MESSAGE];
	struct vrn_header h = {.version = VRN_PROTO_VERSION, .op = op, .length = (uint32_t)reqlen, .id = id,
			       .nfds = (uint8_t)nfds};
	if (reqlen > sizeof(buf) - sizeof(h) || nfds > VRN_MAX_FDS)
		return EMSGSIZE;
	memcpy(buf, &h, sizeof(h));
	if (reqlen)
		memcpy(buf + sizeof(h), req, reqlen);
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(h) + reqlen};
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(sizeof(int) * VRN_MAX_FDS)];
	} cm;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		memset(&cm, 0, sizeof(cm));
		m.msg_control = cm.b;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
		if (n >= 0)
			return 0;
		if (errno != EINTR)
			return errno;
	}
}

/* recv_frame reads one frame into buf: 0 and the frame, or EAGAIN (nothing
 * waiting, non-blocking only), or EIO when the daemon has gone. Descriptors
 * land in fds (closed on error). */
static int recv_frame(int sock, uint8_t *buf, size_t *len, int *fds, int *nfds, int flags)
{
	union {
		struct cmsghdr align;
		char b[CMSG_SPACE(sizeof(int) * VRN_MAX_FDS) + 64];
	} cm;
	struct iovec iov = {.iov_base = buf, .iov_len = VRN_MAX_MESSAGE};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b, .msg_controllen = sizeof(cm.b)};
	ssize_t n;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return EAGAIN;
	*nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); n >= 0 && c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (*nfds < VRN_MAX_FDS)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (n <= 0 || (size_t)n < sizeof(struct vrn_header) || (m.msg_flags & MSG_TRUNC)) {
		close_fds(fds, *nfds);
		*nfds = 0;
		return EIO; /* end of file, or a frame we cannot read: the connection is unusable */
	}
	*len = (size_t)n;
	return 0;
}

/* dispatch files an async event in the queue. CM events come on their
 * channels' sockets, never here. */
static void dispatch_event(struct vrn_context *c, const struct vrn_header *h, const uint8_t *p, size_t plen)
{
	if (c && h->op == VRN_OP_EVENT)
		vrn_queue_event(c, h->op, p, (uint32_t)plen);
}

int vrn_call_fd(int sock, uint64_t id, uint16_t op, const void *req, size_t reqlen, const int *fds, int nfds,
		void *resp, size_t resplen, int *rfds, int maxr, int *nr, struct vrn_context *evq)
{
	uint8_t buf[VRN_MAX_MESSAGE];
	int got[VRN_MAX_FDS], ngot;
	size_t len;
	if (nr)
		*nr = 0;
	int err = send_frame(sock, id, op, req, reqlen, fds, nfds);
	if (err)
		return err == EPIPE || err == ECONNRESET ? EIO : err;
	for (;;) {
		err = recv_frame(sock, buf, &len, got, &ngot, 0);
		if (err)
			return EIO;
		struct vrn_header h;
		memcpy(&h, buf, sizeof(h));
		const uint8_t *p = buf + sizeof(h);
		size_t plen = len - sizeof(h);
		if (h.length != plen) {
			close_fds(got, ngot);
			continue;
		}
		if (h.flags & VRN_FLAG_EVENT) {
			close_fds(got, ngot);
			dispatch_event(evq, &h, p, plen);
			continue;
		}
		if (!(h.flags & VRN_FLAG_REPLY) || h.id != id) {
			close_fds(got, ngot);
			continue;
		}
		if (h.status) {
			close_fds(got, ngot);
			if (vrn_debug)
				fprintf(stderr, "vrnic: request %u failed: %.*s (%s)\n", op, (int)plen, (const char *)p,
					strerror((int)h.status));
			return (int)h.status;
		}
		if (plen != resplen || ngot > maxr) {
			close_fds(got, ngot);
			return EPROTO;
		}
		if (resplen)
			memcpy(resp, p, resplen);
		for (int i = 0; i < ngot; i++)
			rfds[i] = got[i];
		if (nr)
			*nr = ngot;
		else
			close_fds(got, ngot);
		return 0;
	}
}

int vrn_hello(int sock, struct vrn_hello_resp *hr)
{
	struct vrn_hello_req req = {.magic = VRN_PROTO_MAGIC, .min_version = 1, .max_version = VRN_PROTO_VERSION};
	return vrn_call_fd(sock, 1, VRN_OP_HELLO, &req, sizeof(req), NULL, 0, hr, sizeof(*hr), NULL, 0, NULL, NULL);
}

int vrn_call(struct vrn_context *c, uint16_t op, const void *req, size_t reqlen, const int *fds, int nfds,
	     void *resp, size_t resplen, int *rfds, int maxr, int *nr)
{
	pthread_mutex_lock(&c->call_mu);
	int err;
	if (c->dead) {
		err = EIO;
	} else {
		err = vrn_call_fd(c->sock, ++c->next_id, op, req, reqlen, fds, nfds, resp, resplen, rfds, maxr, nr, c);
		if (err == EIO)
			vrn_mark_dead(c);
	}
	pthread_mutex_unlock(&c->call_mu);
	if (err)
		errno = err;
	return err;
}

int vrn_read_events(struct vrn_context *c)
{
	uint8_t buf[VRN_MAX_MESSAGE];
	int got[VRN_MAX_FDS], ngot;
	size_t len;
	if (c->dead)
		return -1;
	for (int i = 0; i < 64; i++) {
		int err = recv_frame(c->sock, buf, &len, got, &ngot, MSG_DONTWAIT);
		if (err == EAGAIN)
			return 0;
		if (err) {
			vrn_mark_dead(c);
			return -1;
		}
		close_fds(got, ngot);
		struct vrn_header h;
		memcpy(&h, buf, sizeof(h));
		if ((h.flags & VRN_FLAG_EVENT) && h.length == len - sizeof(h))
			dispatch_event(c, &h, buf + sizeof(h), len - sizeof(h));
	}
	return 0;
}

static void signal_events(struct vrn_context *c)
{
	uint64_t one = 1;
	if (write(c->ev_fd, &one, sizeof(one)) < 0) {
		/* the counter cannot overflow at one per event: nothing to do */
	}
}

void vrn_queue_event(struct vrn_context *c, uint16_t op, const void *p, uint32_t len)
{
	struct vrn_event *e = malloc(sizeof(*e) + len);
	if (!e)
		return;
	e->next = NULL;
	e->op = op;
	e->len = len;
	memcpy(e->payload, p, len);
	pthread_mutex_lock(&c->ev_mu);
	if (c->ev_tail)
		c->ev_tail->next = e;
	else
		c->ev_head = e;
	c->ev_tail = e;
	pthread_mutex_unlock(&c->ev_mu);
	signal_events(c);
}

/* vrn_mark_dead: the daemon is gone. Every later call fails with EIO; the
 * async descriptor becomes readable for IBV_EVENT_DEVICE_FATAL. */
void vrn_mark_dead(struct vrn_context *c)
{
	if (__atomic_exchange_n(&c->dead, 1, __ATOMIC_ACQ_REL))
		return;
	signal_events(c);
	vrn_flush_dead(c);
}
