/* cma.c: devices, ids, event channels and the events themselves. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cma.h"

pthread_mutex_t cma_mu = PTHREAD_MUTEX_INITIALIZER;
struct cma_dev cma_devs[CMA_MAX_DEVS];
int cma_ndevs = -1;
static struct cma_id *ids; /* every live id, under cma_mu */
static uint64_t next_seq = 1;

static void on_cm_event(int dev, const void *msg, uint32_t len);

/* cma_init_devices opens every device once (librdmacm does at its first
 * use): ids bind to them and share their contexts. */
int cma_init_devices(void)
{
	pthread_mutex_lock(&cma_mu);
	if (cma_ndevs < 0) {
		int n = 0;
		struct ibv_device **list = ibv_get_device_list(&n);
		cma_ndevs = 0;
		for (int i = 0; list && i < n && cma_ndevs < CMA_MAX_DEVS; i++) {
			struct ibv_context *ctx = ibv_open_device(list[i]);
			if (!ctx)
				continue;
			struct cma_dev *d = &cma_devs[cma_ndevs];
			d->ctx = ctx;
			d->pd = ibv_alloc_pd(ctx);
			cma_ndevs++;
		}
		if (list)
			ibv_free_device_list(list);
	}
	int n = cma_ndevs;
	pthread_mutex_unlock(&cma_mu);
	if (n == 0) {
		errno = ENODEV;
		return -1;
	}
	return 0;
}

struct ibv_context **rdma_get_devices(int *num_devices)
{
	cma_init_devices();
	struct ibv_context **l = calloc((size_t)(cma_ndevs > 0 ? cma_ndevs : 0) + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < cma_ndevs; i++)
		l[i] = cma_devs[i].ctx;
	if (num_devices)
		*num_devices = cma_ndevs > 0 ? cma_ndevs : 0;
	return l;
}

void rdma_free_devices(struct ibv_context **list) { free(list); }

/* --- channels --------------------------------------------------------- */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	if (cma_init_devices())
		return NULL; /* no device: as librdmacm without /dev/infiniband/rdma_cm */
	struct cma_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&ch->mu, NULL);
	pthread_mutex_init(&ch->pump_mu, NULL);
	for (int d = 0; d < CMA_MAX_DEVS; d++)
		ch->socks[d] = -1;
	ch->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e = {.events = EPOLLIN, .data.u32 = 0};
	if (ch->evfd < 0 || ch->ch.fd < 0 || epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, ch->evfd, &e)) {
		int err = errno;
		if (ch->evfd >= 0)
			close(ch->evfd);
		if (ch->ch.fd >= 0)
			close(ch->ch.fd);
		free(ch);
		errno = err;
		return NULL;
	}
	return &ch->ch;
}

/*
 * A thread may still be in rdma_get_cm_event on the channel (rping's
 * cm_thread when main destroys it at exit). librdmacm's waiter sits in
 * read(2) for ever and never touches the channel again; ours looks at it
 * after each wake-up, so a channel with waiters is only marked closed, and
 * the last waiter to leave frees it.
 */
void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cma_channel *ch = (struct cma_channel *)channel;
	pthread_mutex_lock(&ch->pump_mu); /* no reader is in the sockets */
	pthread_mutex_lock(&ch->mu);
	for (struct cma_event *e = ch->head, *n; e; e = n) {
		n = e->next;
		free(e);
	}
	ch->head = ch->tail = NULL;
	for (int d = 0; d < CMA_MAX_DEVS; d++)
		if (ch->socks[d] >= 0) {
			struct vrn_handle_req req = {.handle = ch->handles[d]};
			if (!cma_devs[d].gone)
				vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_CLOSE_CHANNEL, &req, sizeof(req), NULL, 0);
			close(ch->socks[d]);
			ch->socks[d] = -1;
		}
	close(ch->evfd);
	close(ch->ch.fd);
	ch->closed = 1;
	int keep = ch->waiters > 0;
	pthread_mutex_unlock(&ch->mu);
	pthread_mutex_unlock(&ch->pump_mu);
	if (!keep)
		free(ch);
}

/* cma_chan is the channel's handle on a device: the daemon's event socket
 * for it is made (and put in the channel's set) on first use. 0 or an errno. */
int cma_chan(struct cma_channel *ch, int dev, uint32_t *handle)
{
	int err = 0;
	pthread_mutex_lock(&ch->mu);
	if (ch->closed) {
		err = EINVAL;
	} else if (ch->socks[dev] < 0) {
		struct vrn_cm_channel_resp r;
		int fd;
		err = vrnicd_cm_call_fd(cma_devs[dev].ctx, VRN_OP_CM_CHANNEL, NULL, 0, &r, sizeof(r), &fd);
		struct epoll_event e = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)dev + 1};
		if (!err && epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, fd, &e))
			err = errno;
		if (err) {
			if (fd >= 0)
				close(fd);
		} else {
			ch->socks[dev] = fd;
			ch->handles[dev] = r.channel;
		}
	}
	if (!err)
		*handle = ch->handles[dev];
	pthread_mutex_unlock(&ch->mu);
	return err;
}

/* cma_set_dev puts the id on a device; its channel listens there from now
 * on (for DEVICE_REMOVAL too). A failure shows in the id's next request. */
void cma_set_dev(struct cma_id *c, int dev)
{
	uint32_t h;
	c->dev = dev;
	c->id.verbs = cma_devs[dev].ctx;
	c->id.port_num = 1;
	(void)cma_chan(c->chan, dev, &h);
}

/* The eventfd is readable exactly while the queue holds an event, as the
 * kernel's rdma_cm fd is (ucma_poll): both change under ch->mu only. */
void cma_queue(struct cma_channel *ch, struct cma_event *e)
{
	uint64_t one = 1;
	pthread_mutex_lock(&ch->mu);
	e->next = NULL;
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
	if (write(ch->evfd, &one, sizeof(one)) < 0) {
		/* the counter cannot overflow at one per event */
	}
	pthread_mutex_unlock(&ch->mu);
}

/* drained: the queue is empty, so the eventfd must not be readable. ch->mu held. */
static void drained(struct cma_channel *ch)
{
	uint64_t v;
	if (!ch->head)
		while (read(ch->evfd, &v, sizeof(v)) > 0)
			;
}

static struct cma_event *dequeue(struct cma_channel *ch)
{
	pthread_mutex_lock(&ch->mu);
	if (ch->closed) {
		pthread_mutex_unlock(&ch->mu);
		return NULL;
	}
	struct cma_event *e = ch->head;
	if (e) {
		ch->head = e->next;
		if (!ch->head)
			ch->tail = NULL;
	}
	drained(ch);
	pthread_mutex_unlock(&ch->mu);
	return e;
}

struct cma_event *cma_new_event(struct cma_id *c, enum rdma_cm_event_type type, int status)
{
	struct cma_event *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->ev.id = &c->id;
	e->ev.event = type;
	e->ev.status = status;
	e->owner = c;
	return e;
}

/* --- ids --------------------------------------------------------------- */

struct cma_id *cma_new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt)
{
	struct cma_id *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if (!channel) {
		/* A synchronous id: its calls wait for their own events. */
		channel = rdma_create_event_channel();
		if (!channel) {
			free(c);
			return NULL;
		}
		((struct cma_channel *)channel)->internal = 1;
		c->sync = 1;
		c->own_chan = 1;
	}
	c->chan = (struct cma_channel *)channel;
	c->id.channel = channel;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qpt;
	c->dev = -1;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	pthread_mutex_lock(&cma_mu);
	c->seq = next_seq++;
	c->next = ids;
	ids = c;
	pthread_mutex_unlock(&cma_mu);
	return c;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qpt;
	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		qpt = IBV_QPT_RC;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		qpt = IBV_QPT_UD;
		break;
	default:
		errno = EINVAL;
		return -1;
	}
	if (cma_init_devices())
		return -1;
	struct cma_id *c = cma_new_id(channel, context, ps, qpt);
	if (!c)
		return -1;
	*id = &c->id;
	return 0;
}

static void unlink_id(struct cma_id *c)
{
	pthread_mutex_lock(&cma_mu);
	for (struct cma_id **pp = &ids; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&cma_mu);
}

/* drop_queued frees the events of c still in its channel's queue: the
 * program never saw them. */
static void drop_queued(struct cma_id *c)
{
	struct cma_channel *ch = c->chan;
	pthread_mutex_lock(&ch->mu);
	struct cma_event **pp = &ch->head, *prev = NULL;
	while (*pp) {
		struct cma_event *e = *pp;
		if (e->owner == c) {
			*pp = e->next;
			free(e);
			continue;
		}
		prev = e;
		pp = &e->next;
	}
	ch->tail = prev;
	drained(ch);
	pthread_mutex_unlock(&ch->mu);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cma_id *c = to_cma(id);
	if (c->sync && id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	if (c->dev >= 0 && c->conn) {
		struct vrn_handle_req req = {.handle = c->conn};
		vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_DESTROY, &req, sizeof(req), NULL, 0);
	}
	cma_leave_all(c);
	for (int d = 0; d < CMA_MAX_DEVS; d++)
		if (c->listeners[d]) {
			struct vrn_handle_req req = {.handle = c->listeners[d]};
			vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_UNLISTEN, &req, sizeof(req), NULL, 0);
		}
	unlink_id(c); /* no event finds it any more */
	drop_queued(c);
	/* As librdmacm: wait until every event handed out is acked. */
	pthread_mutex_lock(&c->mu);
	while (c->events_out > 0)
		pthread_cond_wait(&c->cond, &c->mu);
	pthread_mutex_unlock(&c->mu);
	free(c->qp_init);
	free(id->route.path_rec);
	if (c->own_chan)
		rdma_destroy_event_channel(&c->chan->ch);
	free(c);
	return 0;
}

/* find returns the id an event is for: the connection's own id when it
 * has one, else the id whose context the daemon echoed. cma_mu held. */
static struct cma_id *find(int dev, const struct vrn_cm_event_msg *m)
{
	if (m->conn && m->type != RDMA_CM_EVENT_CONNECT_REQUEST)
		for (struct cma_id *c = ids; c; c = c->next)
			if (c->dev == dev && c->conn == m->conn)
				return c;
	for (struct cma_id *c = ids; c; c = c->next)
		if (c->seq == m->context)
			return c;
	return NULL;
}

void cma_from_v6(const uint8_t in[16], uint16_t port, int family, struct sockaddr_storage *out);

/* cma_ah_attr is the daemon's address vector as libibverbs' (port 1 when
 * the AV names none). */
void cma_ah_attr(struct ibv_ah_attr *a, const struct vrn_av *av)
{
	a->is_global = 1;
	memcpy(a->grh.dgid.raw, av->dgid, 16);
	a->grh.flow_label = av->flow_label;
	a->grh.sgid_index = av->sgid_index;
	a->grh.hop_limit = av->hop_limit;
	a->grh.traffic_class = av->traffic_class;
	a->sl = av->sl;
	a->port_num = av->port ? av->port : 1;
}

/* conn_params fills an event's connection or UD parameters. */
static void params(struct cma_event *e, const struct vrn_cm_event_msg *m, int ud)
{
	size_t n = m->private_len < sizeof(e->priv) ? m->private_len : sizeof(e->priv);
	memcpy(e->priv, m->private, n);
	if (ud) {
		struct rdma_ud_param *u = &e->ev.param.ud;
		u->private_data = n ? e->priv : NULL;
		u->private_data_len = (uint8_t)n;
		u->qp_num = m->remote_qpn;
		u->qkey = m->qkey;
		cma_ah_attr(&u->ah_attr, &m->ah);
		return;
	}
	/* The kernel's lengths: the MAD's whole private data area after the
	 * cma_hdr, zeros past what the peer wrote (cma_set_req_event_data 56,
	 * cma_set_rep_event_data 196, IB_CM_REJ_RECEIVED 148); the daemon
	 * sends none when the area is all zeros. */
	switch (e->ev.event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		n = 56;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		if (!to_cma(e->ev.id)->listen)
			n = 196; /* the REP's, on the active side */
		break;
	case RDMA_CM_EVENT_REJECTED:
		n = 148;
		break;
	default:
		break;
	}
	struct rdma_conn_param *p = &e->ev.param.conn;
	p->private_data = n ? e->priv : NULL;
	p->private_data_len = (uint8_t)n;
	p->responder_resources = m->resp_res;
	p->initiator_depth = m->init_depth;
	if (e->ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* as the kernel's cma_set_req_event_data: our side's view of
		 * the peer's REQ (its initiator depth is our responder resources) */
		p->responder_resources = m->init_depth;
		p->initiator_depth = m->resp_res;
	}
	p->retry_count = m->retry_count;
	p->rnr_retry_count = m->rnr_retry;
	p->srq = m->srq;
	p->qp_num = m->remote_qpn;
}

/* connect_request makes the new id of a connect request, as librdmacm:
 * the listener's channel and context, its device, the two addresses. */
static struct cma_id *connect_request(struct cma_id *l, int dev, const struct vrn_cm_event_msg *m)
{
	struct cma_id *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->chan = l->chan;
	c->sync = l->sync; /* a synchronous listener's requests wait as it does */
	c->id.channel = l->id.channel;
	c->id.context = l->id.context;
	c->id.ps = l->id.ps;
	c->id.qp_type = l->id.qp_type;
	c->dev = dev;
	c->id.verbs = cma_devs[dev].ctx;
	c->id.port_num = 1;
	c->conn = m->conn;
	c->listen = l;
	c->remote_qpn = m->remote_qpn;
	c->resp_res = m->resp_res;
	c->init_depth = m->init_depth;
	cma_take_path(c, m);
	/* our side of the peer's REQ: its initiator depth is our responder
	 * resources (cm.c cm_req_handler); our starting PSN goes in the REP */
	c->our_res = m->init_depth;
	c->our_init = m->resp_res;
	c->psn = cma_random_psn();
	c->state = CMA_CONNECTING;
	int fam = l->id.route.addr.src_addr.sa_family ? l->id.route.addr.src_addr.sa_family : AF_INET;
	cma_from_v6(m->local, m->local_port, fam, &c->id.route.addr.src_storage);
	cma_from_v6(m->peer, m->peer_port, fam, &c->id.route.addr.dst_storage);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->seq = next_seq++;
	c->next = ids;
	ids = c;
	return c;
}

/* on_cm_event turns the daemon's CM event into the program's, on whatever
 * thread read it (only queueing here). */
static void on_cm_event(int dev, const void *msg, uint32_t len)
{
	struct vrn_cm_event_msg m;
	if (len != sizeof(m))
		return;
	memcpy(&m, msg, sizeof(m));
	pthread_mutex_lock(&cma_mu);
	struct cma_id *c = find(dev, &m);
	struct cma_event *e = NULL;
	if (c && (m.type == RDMA_CM_EVENT_ADDR_RESOLVED || m.type == RDMA_CM_EVENT_ADDR_ERROR)) {
		e = cma_addr_event(c, &m);
	} else if (c && m.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct cma_id *child = connect_request(c, dev, &m);
		if (child && (e = cma_new_event(child, RDMA_CM_EVENT_CONNECT_REQUEST, 0)))
			e->ev.listen_id = &c->id;
	} else if (c) {
		e = cma_new_event(c, (enum rdma_cm_event_type)m.type, m.status);
		if (e && (m.type == RDMA_CM_EVENT_ESTABLISHED || m.type == RDMA_CM_EVENT_CONNECT_RESPONSE)) {
			if (m.type == RDMA_CM_EVENT_ESTABLISHED)
				c->state = CMA_CONNECTED;
			c->remote_qpn = m.remote_qpn;
			if (!c->listen && c->id.ps != RDMA_PS_UDP) {
				/* the active side: what the REP agreed */
				cma_take_path(c, &m);
				c->psn = m.rqpsn;
				c->our_res = m.resp_res;
				c->our_init = m.init_depth;
			}
		}
		if (e && (m.type == RDMA_CM_EVENT_DISCONNECTED || m.type == RDMA_CM_EVENT_REJECTED ||
			  m.type == RDMA_CM_EVENT_UNREACHABLE))
			c->state = CMA_GONE;
	}
	if (e && m.type != RDMA_CM_EVENT_ADDR_RESOLVED && m.type != RDMA_CM_EVENT_ADDR_ERROR)
		params(e, &m, e->ev.id->ps == RDMA_PS_UDP);
	pthread_mutex_unlock(&cma_mu);
	if (e)
		cma_queue(to_cma(e->ev.id)->chan, e);
}

/* removal tells every id on a dead device, once (RDMA_CM_EVENT_DEVICE_REMOVAL). */
static void removal(int dev)
{
	pthread_mutex_lock(&cma_mu);
	if (cma_devs[dev].gone) {
		pthread_mutex_unlock(&cma_mu);
		return;
	}
	cma_devs[dev].gone = 1;
	struct cma_event *list = NULL;
	for (struct cma_id *c = ids; c; c = c->next)
		if (c->dev == dev) {
			struct cma_event *e = cma_new_event(c, RDMA_CM_EVENT_DEVICE_REMOVAL, 0);
			if (e) {
				e->next = list;
				list = e;
			}
		}
	pthread_mutex_unlock(&cma_mu);
	for (struct cma_event *e = list, *n; e; e = n) {
		n = e->next;
		cma_queue(e->owner->chan, e);
	}
}

/* read_channel takes what waits on one of a channel's sockets, without
 * blocking: -1 once the daemon is gone (end of file). */
static int read_channel(int dev, int fd)
{
	uint8_t buf[VRN_MAX_MESSAGE];
	for (int i = 0; i < 64; i++) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0)
			return -1;
		if (n < 0)
			return errno == ECONNRESET ? -1 : 0;
		struct vrn_header h;
		if ((size_t)n < sizeof(h))
			continue;
		memcpy(&h, buf, sizeof(h));
		if (h.op == VRN_OP_CM_EVENT && h.length == (size_t)n - sizeof(h))
			on_cm_event(dev, buf + sizeof(h), h.length);
	}
	return 0;
}

/* pump reads what waits on the channel's sockets; a device whose daemon
 * went gets its DEVICE_REMOVAL, and its socket leaves the set (it would
 * stay readable). */
static void pump(struct cma_channel *ch)
{
	pthread_mutex_lock(&ch->pump_mu);
	for (int d = 0; d < CMA_MAX_DEVS && d < cma_ndevs; d++) {
		pthread_mutex_lock(&ch->mu);
		int fd = ch->closed ? -1 : ch->socks[d];
		pthread_mutex_unlock(&ch->mu);
		if (fd < 0 || read_channel(d, fd) == 0)
			continue;
		removal(d);
		pthread_mutex_lock(&ch->mu);
		epoll_ctl(ch->ch.fd, EPOLL_CTL_DEL, fd, NULL);
		close(fd);
		ch->socks[d] = -1;
		pthread_mutex_unlock(&ch->mu);
	}
	pthread_mutex_unlock(&ch->pump_mu);
}

static int wait_event(struct cma_channel *ch, struct rdma_cm_event **event);
/* wait_event's result when the channel was destroyed under its waiter. */
#define CHANNEL_GONE (-2)

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_channel *ch = (struct cma_channel *)channel;
	if (!event) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&ch->mu);
	ch->waiters++;
	pthread_mutex_unlock(&ch->mu);
	int ret = wait_event(ch, event);
	pthread_mutex_lock(&ch->mu);
	int last = --ch->waiters == 0 && ch->closed;
	pthread_mutex_unlock(&ch->mu);
	if (last)
		free(ch);
	if (ret == CHANNEL_GONE)
		for (;;) /* as librdmacm's read(2) on the closed channel */
			pause();
	return ret;
}

/* closed reports whether the channel was destroyed under its waiter. */
static int closed(struct cma_channel *ch)
{
	pthread_mutex_lock(&ch->mu);
	int c = ch->closed;
	pthread_mutex_unlock(&ch->mu);
	return c;
}

static int wait_event(struct cma_channel *ch, struct rdma_cm_event **event)
{
	for (;;) {
		if (closed(ch))
			return CHANNEL_GONE;
		struct cma_event *e = dequeue(ch);
		if (!e) {
			pump(ch);
			e = dequeue(ch);
		}
		if (e) {
			struct cma_id *c = e->owner;
			pthread_mutex_lock(&c->mu);
			c->events_out++;
			pthread_mutex_unlock(&c->mu);
			*event = &e->ev;
			return 0;
		}
		int fl = fcntl(ch->ch.fd, F_GETFL); /* < 0: closed under us; the poll says so */
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = {.fd = ch->ch.fd, .events = POLLIN};
		if (poll(&p, 1, 1000) < 0 && errno != EINTR)
			return -1;
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event) {
		errno = EINVAL;
		return -1;
	}
	struct cma_event *e = (struct cma_event *)event;
	struct cma_id *c = e->owner;
	pthread_mutex_lock(&c->mu);
	c->events_out--;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->mu);
	free(e);
	return 0;
}

/* cma_complete waits, for a synchronous id, for the event its call
 * started: 0 if it is want, else -1 with errno from its status (as
 * librdmacm's ucma_complete). The event stays in id->event. */
int cma_complete(struct cma_id *c, enum rdma_cm_event_type want)
{
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(&c->chan->ch, &ev))
		return -1;
	c->id.event = ev;
	if (ev->event == want && ev->status == 0)
		return 0;
	errno = ev->status < 0 ? -ev->status : (ev->status ? ECONNREFUSED : EIO);
	return -1;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cma_id *c = to_cma(id);
	int sync = 0;
	if (!channel) {
		/* as librdmacm: the id becomes synchronous, on a channel of its own */
		if (!(channel = rdma_create_event_channel()))
			return -1;
		((struct cma_channel *)channel)->internal = 1;
		sync = 1;
	}
	struct cma_channel *to = (struct cma_channel *)channel, *from = c->chan;
	/* the daemon sends the id's events to the new channel from now on */
	int err = 0;
	for (int d = 0; d < cma_ndevs && !err; d++) {
		uint32_t obj = c->listeners[d] ? c->listeners[d] : (d == c->dev ? c->conn : 0);
		uint32_t h;
		if (obj && !(err = cma_chan(to, d, &h))) {
			struct vrn_cm_migrate_req req = {.handle = obj, .channel = h};
			err = vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_MIGRATE, &req, sizeof(req), NULL, 0);
		}
	}
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		errno = err;
		return -1;
	}
	pump(from); /* what the daemon wrote to the old channel before it moved */
	/* the queued events of the id move with it, in order */
	pthread_mutex_lock(&from->mu);
	struct cma_event *moved = NULL, **tail = &moved, **pp = &from->head, *prev = NULL;
	while (*pp) {
		struct cma_event *e = *pp;
		if (e->owner == c) {
			*pp = e->next;
			e->next = NULL;
			*tail = e;
			tail = &e->next;
			continue;
		}
		prev = e;
		pp = &e->next;
	}
	from->tail = prev;
	drained(from);
	pthread_mutex_unlock(&from->mu);
	if (c->sync && id->event) {
		/* as librdmacm: a synchronous id's held event is acked first */
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	pthread_mutex_lock(&cma_mu);
	c->chan = to;
	id->channel = channel;
	c->sync = sync;
	int drop_old = c->own_chan;
	c->own_chan = sync;
	if (drop_old)
		rdma_destroy_event_channel(&from->ch);
	pthread_mutex_unlock(&cma_mu);
	uint32_t h;
	if (c->dev >= 0)
		(void)cma_chan(to, c->dev, &h); /* DEVICE_REMOVAL reaches it there */
	for (struct cma_event *e = moved, *n; e; e = n) {
		n = e->next;
		cma_queue(to, e);
	}
	/* As librdmacm: return once every event of the id taken from the old
	 * channel is acked, so none is handled there after this returns. */
	pthread_mutex_lock(&c->mu);
	while (c->events_out > 0)
		pthread_cond_wait(&c->cond, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return 0;
}
