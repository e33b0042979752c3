/* async.c: asynchronous events (ibv_get_async_event). The daemon sends
 * them on the context's socket; whoever reads the socket first (a caller
 * waiting for its reply, or ibv_get_async_event) queues them. The
 * context's async_fd is readable while one waits, and once the daemon has
 * gone (IBV_EVENT_DEVICE_FATAL, once). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vrn.h"

/* Handles name the connection's objects from 1 and are never reused. */
void vrn_obj_set(struct vrn_context *c, uint32_t h, void *obj)
{
	pthread_mutex_lock(&c->obj_mu);
	if (h >= c->nobjs) {
		uint32_t n = c->nobjs ? c->nobjs : 64;
		while (n <= h)
			n *= 2;
		void **o = realloc(c->objs, sizeof(*o) * n);
		if (!o) {
			pthread_mutex_unlock(&c->obj_mu);
			return; /* its events are then dropped, as for a destroyed object */
		}
		memset(o + c->nobjs, 0, sizeof(*o) * (n - c->nobjs));
		c->objs = o;
		c->nobjs = n;
	}
	c->objs[h] = obj;
	pthread_mutex_unlock(&c->obj_mu);
}

void *vrn_obj_get(struct vrn_context *c, uint32_t h)
{
	pthread_mutex_lock(&c->obj_mu);
	void *o = h < c->nobjs ? c->objs[h] : NULL;
	pthread_mutex_unlock(&c->obj_mu);
	return o;
}

/* take removes the first async event of the queue. */
static struct vrn_event *take(struct vrn_context *c)
{
	pthread_mutex_lock(&c->ev_mu);
	struct vrn_event **pp = &c->ev_head, *prev = NULL, *e;
	for (e = c->ev_head; e && e->op != VRN_OP_EVENT; prev = e, e = e->next)
		pp = &e->next;
	if (e) {
		*pp = e->next;
		if (c->ev_tail == e)
			c->ev_tail = prev;
	}
	int more = 0;
	for (struct vrn_event *x = c->ev_head; x; x = x->next)
		more |= x->op == VRN_OP_EVENT;
	if (!more && !c->dead) {
		uint64_t v;
		while (read(c->ev_fd, &v, sizeof(v)) > 0) /* nothing left: not readable */
			;
	}
	pthread_mutex_unlock(&c->ev_mu);
	return e;
}

/* translate fills an ibv_async_event; 0 if its object is gone. */
static int translate(struct vrn_context *c, const struct vrn_event_msg *m, struct ibv_async_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->event_type = (enum ibv_event_type)m->type;
	switch (m->type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_QP_LAST_WQE_REACHED: {
		struct vrn_qp *q = vrn_obj_get(c, m->handle);
		if (!q)
			return 0;
		ev->element.qp = &q->qp;
		return 1;
	}
	case IBV_EVENT_CQ_ERR: {
		struct vrn_cq *q = vrn_obj_get(c, m->handle);
		if (!q)
			return 0;
		ev->element.cq = &q->cq;
		return 1;
	}
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED: {
		struct vrn_srq *q = vrn_obj_get(c, m->handle);
		if (!q)
			return 0;
		ev->element.srq = &q->srq;
		return 1;
	}
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_GID_CHANGE:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
		ev->element.port_num = (int)m->port;
		return 1;
	case IBV_EVENT_DEVICE_FATAL:
		return 1;
	}
	return 0; /* EVENTS_LOST and types we do not know: nothing to hand out */
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct vrn_context *c = to_vctx(context);
	for (;;) {
		struct vrn_event *e = take(c);
		if (e) {
			struct vrn_event_msg m;
			int ok = e->len == sizeof(m);
			if (ok)
				memcpy(&m, e->payload, sizeof(m));
			free(e);
			if (ok && translate(c, &m, event))
				return 0;
			continue;
		}
		if (__atomic_load_n(&c->dead, __ATOMIC_ACQUIRE)) {
			if (!__atomic_exchange_n(&c->fatal_sent, 1, __ATOMIC_ACQ_REL)) {
				memset(event, 0, sizeof(*event));
				event->event_type = IBV_EVENT_DEVICE_FATAL;
				return 0;
			}
			errno = EIO;
			return -1;
		}
		/* Nobody in a request: read what waits on the socket ourselves. */
		if (pthread_mutex_trylock(&c->call_mu) == 0) {
			vrn_read_events(c);
			pthread_mutex_unlock(&c->call_mu);
			struct vrn_event *again = take(c);
			if (again) {
				/* put it back at the front and go round */
				pthread_mutex_lock(&c->ev_mu);
				again->next = c->ev_head;
				c->ev_head = again;
				if (!c->ev_tail)
					c->ev_tail = again;
				pthread_mutex_unlock(&c->ev_mu);
				uint64_t one = 1;
				if (write(c->ev_fd, &one, sizeof(one)) < 0) {
				}
				continue;
			}
			if (c->dead)
				continue;
		} else {
			/* a caller is reading the socket for its reply; let it */
			struct timespec ts = {0, 100000};
			nanosleep(&ts, NULL);
		}
		if (fcntl(context->async_fd, F_GETFL) & O_NONBLOCK) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p = {.fd = context->async_fd, .events = POLLIN};
		poll(&p, 1, 1000);
	}
}

void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }
