/* cmevents: librdmacm's event channels and connection calls as an
 * application uses them, each result checked against what rdma-core v44's
 * librdmacm (over the kernel's rdma_ucm) gives. Usage:
 *
 *	cmevents SERVER_ADDR CLIENT_ADDR UNUSED_ADDR [PORT_BASE]
 *
 * The server side binds SERVER_ADDR, the client side CLIENT_ADDR: two
 * devices' addresses (vrnicd: VRNICD_SOCKET=a:b, one process on both), or
 * the same address twice on one kernel rxe device (a loopback connection;
 * the interop suite runs this program so against the real library).
 * UNUSED_ADDR is in their subnet with nobody answering ARP for it. Ports are
 * PORT_BASE (default 7900) + a case's offset. Each case prints "ok CASE",
 * "FAIL CASE: why" or "SKIP CASE: why" (and "info CASE: ..." lines); exit
 * status 1 on any failure; a 120 s alarm against hangs. CMEVENTS_CASE=NAME
 * runs one case.
 *
 * Cases:
 *  nonblock       the channel's fd set O_NONBLOCK: rdma_get_cm_event fails
 *                 EAGAIN while nothing waits, and returns the event once poll
 *                 says the fd is readable;
 *  epoll          the channel's fd in an epoll set: ready exactly while an
 *                 event waits (before it, after the last is taken), through
 *                 address and route resolution and a connection's events;
 *  order          three ids on one channel: their events in the order they
 *                 happened (ADDR_RESOLVED, ROUTE_RESOLVED in call order; the
 *                 server's CONNECT_REQUESTs in connect order; ESTABLISHED in
 *                 the order the server accepted, which is reversed);
 *  migrate        rdma_migrate_id moves an id with its queued event to
 *                 another channel (the old one then has none), later events
 *                 go to the new one, and it waits until the id's events
 *                 taken from the old channel are acked; to no channel the
 *                 id becomes synchronous (rdma_resolve_addr returns with
 *                 ADDR_RESOLVED in id->event);
 *  destroy_waits  rdma_destroy_id waits until the id's retrieved events are
 *                 acked (a thread acks after 400 ms); an id destroyed with an
 *                 event queued and not retrieved leaves nothing behind;
 *  addr_timeout   rdma_resolve_addr to UNUSED_ADDR returns at once (within
 *                 300 ms) and ADDR_ERROR with status -ETIMEDOUT follows
 *                 within the timeout asked (1000 ms) and a margin;
 *  addr_async     while one id's resolution of UNUSED_ADDR waits, a second
 *                 id on the same channel resolves SERVER_ADDR: its
 *                 ADDR_RESOLVED comes first, the first id's ADDR_ERROR after;
 *  channel_exact  two channels with client ids on one device: a whole
 *                 connection of an id on one (resolution, ESTABLISHED,
 *                 DISCONNECTED) never makes the other readable, and each
 *                 event makes its own channel readable until it is taken;
 *  no_listener    a connect to a port nobody listens on: REJECTED, status 8
 *                 (IB_CM_REJ_INVALID_SERVICE_ID);
 *  reject         rdma_reject with 20 bytes of private data: REJECTED status
 *                 28 (consumer defined) with the bytes at private_data; 149
 *                 bytes (the REJ holds 148) is EINVAL;
 *  private_data   56 bytes on the REQ reach the CONNECT_REQUEST, 196 on the
 *                 REP reach the client's ESTABLISHED, intact; 57 on connect
 *                 and 197 on accept are EINVAL (the kernel then rejects the
 *                 request, reason 28: the client sees REJECTED);
 *  ports          rdma_get_src_port / rdma_get_dst_port of both ends of a
 *                 connection name each other and the listener's port; the
 *                 addresses too (rdma_get_local_addr / rdma_get_peer_addr);
 *  options        rdma_set_option: TOS (a uint8_t) and REUSEADDR, AFONLY (an
 *                 int) on a new id; a TOS of the wrong size is EINVAL; an
 *                 unknown option or level is ENOSYS;
 *  bind_port0     rdma_bind_addr with port 0, then rdma_listen: a non-zero
 *                 port a client connects to; a second id on that port fails
 *                 EADDRINUSE (at bind or at listen);
 *  qp_init_recv   rdma_create_qp's QP is in INIT on port 1 (ibv_query_qp);
 *                 receives posted before rdma_connect / rdma_accept take the
 *                 first SEND each way, bytes intact;
 *  manual_qp      both sides make their own QPs (ibv_create_qp, no id->qp)
 *                 and move them with rdma_init_qp_attr: the client's
 *                 rdma_connect names its QP by conn_param.qp_num and gets
 *                 CONNECT_RESPONSE (the REP's private data), moves its QP to
 *                 RTR and RTS, then rdma_establish; the server moves its QP
 *                 to RTS before rdma_accept and gets ESTABLISHED; a SEND
 *                 each way arrives; after the disconnect both QPs are still
 *                 in RTS (the CM moves no QP it was not given);
 *  killed         a client process (this program, "child" mode) connects
 *                 and is SIGKILLed before the server accepts: the server's
 *                 accept fails, or its id gets REJECTED or DISCONNECTED, and
 *                 nothing hangs. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- cases (cases.h) ------------------------------------------------ */

#include "cases.h"

/* ZERO: a librdmacm call that returns 0, or -1 with errno. */
#define ZERO(call)                                                                                                 \
	do {                                                                                                       \
		if ((call))                                                                                        \
			fail("%s: %s", #call, strerror(errno));                                                    \
	} while (0)

/* FAILS: a call that must return -1 with errno e. */
#define FAILS(call, e)                                                                                             \
	do {                                                                                                       \
		errno = 0;                                                                                         \
		int rc_ = (call);                                                                                  \
		if (rc_ != -1 || errno != (e))                                                                     \
			fail("%s: returned %d errno %d (%s), want -1 errno %s", #call, rc_, errno, strerror(errno), #e); \
	} while (0)

static void sleep_ms(int ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* ---- addresses ------------------------------------------------------ */

static const char *srv_addr, *cli_addr, *unused_addr;
static int port_base = 7900;

/* addr parses a numeric address (IPv4, IPv6, fe80::x%iface) with a port. */
static void addr(const char *a, int port, struct sockaddr_storage *ss)
{
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM}, *res;
	char p[16];
	snprintf(p, sizeof(p), "%d", port);
	int rc = getaddrinfo(a, p, &hints, &res);
	CHECK(rc == 0, "getaddrinfo %s: %s", a, gai_strerror(rc));
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
}

static int port(int off) { return port_base + off; }

static const char *ntop(const struct sockaddr *sa)
{
	static char b[4][INET6_ADDRSTRLEN + 8];
	static int i;
	char *s = b[i++ % 4];
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, s, INET6_ADDRSTRLEN);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, s, INET6_ADDRSTRLEN);
	else
		snprintf(s, INET6_ADDRSTRLEN, "family %d", sa->sa_family);
	return s;
}

static int same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* ---- channels and events -------------------------------------------- */

static void nonblock(struct rdma_event_channel *ch)
{
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl O_NONBLOCK: %s", strerror(errno));
}

/* chan makes a channel with a non-blocking fd: every wait below is poll
 * with a deadline, then rdma_get_cm_event. */
static struct rdma_event_channel *chan(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	nonblock(ch);
	return ch;
}

/* readable: whether poll says an event waits on ch, within ms. */
static int readable(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	int n;
	while ((n = poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	return n > 0 && (p.revents & POLLIN);
}

/* next is ch's next event within ms, or NULL. */
static struct rdma_cm_event *next(struct rdma_event_channel *ch, int ms)
{
	int64_t end = now_ms() + ms;
	for (;;) {
		struct rdma_cm_event *ev;
		if (!rdma_get_cm_event(ch, &ev))
			return ev;
		CHECK(errno == EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		int64_t left = end - now_ms();
		if (left <= 0)
			return NULL;
		readable(ch, (int)left);
	}
}

/* expect takes ch's next event, which must be want (for id, unless NULL)
 * with status 0 unless want is an error; the caller acks it. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id *id,
				    int ms)
{
	struct rdma_cm_event *ev = next(ch, ms);
	CHECK(ev, "no event in %d ms, want %s", ms, rdma_event_str(want));
	CHECK(ev->event == want, "event %s status %d, want %s", rdma_event_str(ev->event), ev->status,
	      rdma_event_str(want));
	CHECK(!id || ev->id == id, "%s for id %p, want %p", rdma_event_str(want), (void *)ev->id, (void *)id);
	return ev;
}

static void expect_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id *id, int ms)
{
	struct rdma_cm_event *ev = expect(ch, want, id, ms);
	CHECK(ev->status == 0, "%s status %d", rdma_event_str(want), ev->status);
	ZERO(rdma_ack_cm_event(ev));
}

/* empty: nothing waits on ch (rdma_get_cm_event fails EAGAIN). */
static void empty(struct rdma_event_channel *ch, const char *what)
{
	struct rdma_cm_event *ev;
	errno = 0;
	if (!rdma_get_cm_event(ch, &ev)) {
		enum rdma_cm_event_type t = ev->event;
		rdma_ack_cm_event(ev);
		fail("%s: an event waits: %s", what, rdma_event_str(t));
	}
	CHECK(errno == EAGAIN, "%s: rdma_get_cm_event: %s, want EAGAIN", what, strerror(errno));
}

/* ---- connections ---------------------------------------------------- */

#define TMO 10000 /* ms for any event that should come at once */

/* routed makes a client id on ch, resolved to the server's port. */
static struct rdma_cm_id *routed(struct rdma_event_channel *ch, int p, void *ctx)
{
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	ZERO(rdma_create_id(ch, &id, ctx, RDMA_PS_TCP));
	addr(cli_addr, 0, &src);
	addr(srv_addr, p, &dst);
	ZERO(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, TMO);
	ZERO(rdma_resolve_route(id, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, id, TMO);
	return id;
}

static struct rdma_cm_id *listener(struct rdma_event_channel *ch, int p)
{
	struct rdma_cm_id *id;
	struct sockaddr_storage a;
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	addr(srv_addr, p, &a);
	ZERO(rdma_bind_addr(id, (struct sockaddr *)&a));
	ZERO(rdma_listen(id, 16));
	return id;
}

static void qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	ZERO(rdma_create_qp(id, NULL, &a));
}

static void teardown(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* request: the server's next event is a CONNECT_REQUEST on listener l; its
 * new id is returned (the event acked, its private data copied to priv). */
static struct rdma_cm_id *request(struct rdma_event_channel *ch, struct rdma_cm_id *l, uint8_t *priv, int *privlen)
{
	struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, TMO);
	CHECK(ev->listen_id == l, "CONNECT_REQUEST's listen_id %p, want %p", (void *)ev->listen_id, (void *)l);
	CHECK(ev->id != l, "CONNECT_REQUEST on the listener's own id");
	struct rdma_cm_id *id = ev->id;
	if (priv) {
		*privlen = ev->param.conn.private_data_len;
		memset(priv, 0, 256);
		if (*privlen)
			memcpy(priv, ev->param.conn.private_data, (size_t)*privlen);
	}
	ZERO(rdma_ack_cm_event(ev));
	return id;
}

/* connected makes a connection: the client id (on cch) and the server's
 * (on sch, from listener l), both ESTABLISHED, with QPs. */
static void connected(struct rdma_event_channel *cch, struct rdma_event_channel *sch, struct rdma_cm_id *l, int p,
		      struct rdma_cm_id **cli, struct rdma_cm_id **srv)
{
	*cli = routed(cch, p, NULL);
	qp(*cli);
	ZERO(rdma_connect(*cli, NULL));
	*srv = request(sch, l, NULL, NULL);
	qp(*srv);
	ZERO(rdma_accept(*srv, NULL));
	expect_ack(cch, RDMA_CM_EVENT_ESTABLISHED, *cli, TMO);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, *srv, TMO);
}

/* disconnected: the client disconnects (DREQ); the server sees DISCONNECTED
 * and answers with its own rdma_disconnect (the DREP: rdma_cm sends none
 * until the consumer does), after which the client sees DISCONNECTED. */
static void disconnected(struct rdma_event_channel *cch, struct rdma_event_channel *sch, struct rdma_cm_id *cli,
			 struct rdma_cm_id *srv)
{
	ZERO(rdma_disconnect(cli));
	struct rdma_cm_event *ev = next(sch, TMO);
	CHECK(ev, "the server got no event in %d ms after the client's rdma_disconnect", TMO);
	CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == srv, "the server got %s, want DISCONNECTED",
	      rdma_event_str(ev->event));
	ZERO(rdma_ack_cm_event(ev));
	ZERO(rdma_disconnect(srv));
	ev = next(cch, TMO);
	CHECK(ev, "the client got no event in %d ms after the server's rdma_disconnect", TMO);
	CHECK(ev->event == RDMA_CM_EVENT_DISCONNECTED && ev->id == cli, "the client got %s, want DISCONNECTED",
	      rdma_event_str(ev->event));
	ZERO(rdma_ack_cm_event(ev));
}

/* ---- the cases ------------------------------------------------------ */

static void c_nonblock(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
	nonblock(ch);
	empty(ch, "a new channel");
	CHECK(!readable(ch, 0), "a new channel's fd is readable");
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	addr(cli_addr, 0, &src);
	addr(srv_addr, port(0), &dst);
	ZERO(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	CHECK(readable(ch, TMO), "no event readable in %d ms after rdma_resolve_addr", TMO);
	struct rdma_cm_event *ev;
	ZERO(rdma_get_cm_event(ch, &ev));
	CHECK(ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id && ev->status == 0, "got %s status %d",
	      rdma_event_str(ev->event), ev->status);
	ZERO(rdma_ack_cm_event(ev));
	empty(ch, "after the only event");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* ready: the epoll set's answer right now (0 or 1). */
static int ready(int ep, struct rdma_event_channel *ch, int ms)
{
	struct epoll_event e;
	int n;
	while ((n = epoll_wait(ep, &e, 1, ms)) < 0 && errno == EINTR)
		;
	CHECK(n >= 0, "epoll_wait: %s", strerror(errno));
	CHECK(n == 0 || e.data.ptr == ch, "epoll_wait gave data %p", e.data.ptr);
	return n;
}

/* take: in the epoll set, the next event must be want; once it is acked and
 * nothing else is due, the set is not ready. */
static void take(int ep, struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id *id)
{
	CHECK(ready(ep, ch, TMO) == 1, "the channel did not become ready in %d ms (waiting for %s)", TMO,
	      rdma_event_str(want));
	struct rdma_cm_event *ev;
	ZERO(rdma_get_cm_event(ch, &ev));
	CHECK(ev->event == want && ev->id == id, "got %s (id %p), want %s (id %p)", rdma_event_str(ev->event),
	      (void *)ev->id, rdma_event_str(want), (void *)id);
	ZERO(rdma_ack_cm_event(ev));
	CHECK(ready(ep, ch, 0) == 0, "ready after %s was taken, with no event waiting", rdma_event_str(want));
	empty(ch, "after the event epoll announced");
}

static void c_epoll(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	int ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(ep >= 0, "epoll_create1: %s", strerror(errno));
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = cch};
	ZERO(epoll_ctl(ep, EPOLL_CTL_ADD, cch->fd, &e));
	CHECK(ready(ep, cch, 100) == 0, "a new channel is ready");
	struct rdma_cm_id *l = listener(sch, port(1)), *cli, *srv;
	struct sockaddr_storage src, dst;
	ZERO(rdma_create_id(cch, &cli, NULL, RDMA_PS_TCP));
	CHECK(ready(ep, cch, 0) == 0, "ready after rdma_create_id");
	addr(cli_addr, 0, &src);
	addr(srv_addr, port(1), &dst);
	ZERO(rdma_resolve_addr(cli, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	take(ep, cch, RDMA_CM_EVENT_ADDR_RESOLVED, cli);
	ZERO(rdma_resolve_route(cli, 2000));
	take(ep, cch, RDMA_CM_EVENT_ROUTE_RESOLVED, cli);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	srv = request(sch, l, NULL, NULL);
	qp(srv);
	ZERO(rdma_accept(srv, NULL));
	take(ep, cch, RDMA_CM_EVENT_ESTABLISHED, cli);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	ZERO(rdma_disconnect(srv));
	take(ep, cch, RDMA_CM_EVENT_DISCONNECTED, cli);
	ZERO(rdma_disconnect(cli));
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED, srv, TMO);
	/* two events waiting: still ready after the first is taken */
	struct rdma_cm_id *a, *b;
	ZERO(rdma_create_id(cch, &a, NULL, RDMA_PS_TCP));
	ZERO(rdma_create_id(cch, &b, NULL, RDMA_PS_TCP));
	ZERO(rdma_resolve_addr(a, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	ZERO(rdma_resolve_addr(b, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, a, TMO);
	ZERO(rdma_ack_cm_event(ev));
	CHECK(ready(ep, cch, TMO) == 1, "not ready with b's ADDR_RESOLVED due");
	expect_ack(cch, RDMA_CM_EVENT_ADDR_RESOLVED, b, TMO);
	CHECK(ready(ep, cch, 0) == 0, "ready after both events were taken");
	close(ep);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	teardown(cli);
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

static void c_order(void)
{
	enum { N = 3 };
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(2)), *cli[N], *srv[N];
	struct sockaddr_storage src, dst;
	addr(cli_addr, 0, &src);
	addr(srv_addr, port(2), &dst);
	for (int i = 0; i < N; i++)
		ZERO(rdma_create_id(cch, &cli[i], (void *)(intptr_t)(i + 1), RDMA_PS_TCP));
	for (int i = 0; i < N; i++)
		ZERO(rdma_resolve_addr(cli[i], (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	for (int i = 0; i < N; i++)
		expect_ack(cch, RDMA_CM_EVENT_ADDR_RESOLVED, cli[i], TMO);
	for (int i = 0; i < N; i++)
		ZERO(rdma_resolve_route(cli[i], 2000));
	for (int i = 0; i < N; i++)
		expect_ack(cch, RDMA_CM_EVENT_ROUTE_RESOLVED, cli[i], TMO);
	for (int i = 0; i < N; i++) {
		qp(cli[i]);
		uint8_t tag = (uint8_t)(0xa0 + i);
		struct rdma_conn_param p = {.private_data = &tag, .private_data_len = 1, .responder_resources = 1,
					    .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
		ZERO(rdma_connect(cli[i], &p));
	}
	uint8_t priv[256];
	int plen;
	for (int i = 0; i < N; i++) {
		srv[i] = request(sch, l, priv, &plen);
		CHECK(plen >= 1 && priv[0] == 0xa0 + i, "CONNECT_REQUEST %d carries tag %#x (len %d), want %#x", i,
		      plen ? priv[0] : 0, plen, 0xa0 + i);
		CHECK(srv[i]->context == NULL, "a request's id has context %p, want the listener's (NULL)",
		      srv[i]->context);
		qp(srv[i]);
	}
	for (int i = N - 1; i >= 0; i--)
		ZERO(rdma_accept(srv[i], NULL));
	for (int i = N - 1; i >= 0; i--) {
		struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED, NULL, TMO);
		CHECK(ev->id == cli[i], "ESTABLISHED for the client id of context %p, want %d (accepted in reverse)",
		      ev->id->context, i + 1);
		ZERO(rdma_ack_cm_event(ev));
	}
	for (int i = N - 1; i >= 0; i--)
		expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv[i], TMO);
	for (int i = 0; i < N; i++) {
		disconnected(cch, sch, cli[i], srv[i]);
		teardown(cli[i]);
		teardown(srv[i]);
	}
	empty(cch, "the client's channel at the end");
	empty(sch, "the server's channel at the end");
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

struct delayed_ack {
	struct rdma_cm_event *ev;
	int ms;
	int64_t acked; /* when */
};

static void *acker(void *arg)
{
	struct delayed_ack *d = arg;
	sleep_ms(d->ms);
	d->acked = now_ms();
	rdma_ack_cm_event(d->ev);
	return NULL;
}

static void c_migrate(void)
{
	struct rdma_event_channel *ch1 = chan(), *ch2 = chan();
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	ZERO(rdma_create_id(ch1, &id, NULL, RDMA_PS_TCP));
	addr(cli_addr, 0, &src);
	addr(srv_addr, port(3), &dst);
	ZERO(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	CHECK(readable(ch1, TMO), "ADDR_RESOLVED not due on the first channel in %d ms", TMO);
	ZERO(rdma_migrate_id(id, ch2));
	CHECK(id->channel == ch2, "id->channel %p after rdma_migrate_id, want %p", (void *)id->channel, (void *)ch2);
	empty(ch1, "the old channel after rdma_migrate_id");
	expect_ack(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, id, TMO);
	ZERO(rdma_resolve_route(id, 2000));
	expect_ack(ch2, RDMA_CM_EVENT_ROUTE_RESOLVED, id, TMO);
	empty(ch1, "the old channel after a later event");
	/* an event taken and not acked: rdma_migrate_id waits for its ack */
	struct rdma_cm_id *id2;
	ZERO(rdma_create_id(ch2, &id2, NULL, RDMA_PS_TCP));
	ZERO(rdma_resolve_addr(id2, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	struct delayed_ack d = {.ev = expect(ch2, RDMA_CM_EVENT_ADDR_RESOLVED, id2, TMO), .ms = 400};
	pthread_t th;
	CHECK(!pthread_create(&th, NULL, acker, &d), "pthread_create");
	int64_t t0 = now_ms();
	int rc = rdma_migrate_id(id2, ch1);
	int64_t t1 = now_ms();
	pthread_join(th, NULL);
	CHECK(rc == 0, "rdma_migrate_id with an unacked event: %s", strerror(errno));
	CHECK(t1 >= d.acked, "rdma_migrate_id returned after %lld ms, %lld ms before its event was acked",
	      (long long)(t1 - t0), (long long)(d.acked - t1));
	ZERO(rdma_resolve_route(id2, 2000));
	expect_ack(ch1, RDMA_CM_EVENT_ROUTE_RESOLVED, id2, TMO);
	empty(ch2, "the channel id2 left");
	/* to no channel: the id becomes synchronous (its calls return once
	 * their event came, held in id->event) on a channel of its own */
	struct rdma_cm_id *id3;
	ZERO(rdma_create_id(ch1, &id3, NULL, RDMA_PS_TCP));
	ZERO(rdma_migrate_id(id3, NULL));
	CHECK(id3->channel && id3->channel != ch1, "after rdma_migrate_id(NULL) the id's channel is %p", (void *)id3->channel);
	ZERO(rdma_resolve_addr(id3, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	CHECK(id3->event && id3->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "a synchronous rdma_resolve_addr returned with event %s", id3->event ? rdma_event_str(id3->event->event) : "none");
	empty(ch1, "the channel the synchronous id left");
	rdma_destroy_id(id3);
	rdma_destroy_id(id);
	rdma_destroy_id(id2);
	rdma_destroy_event_channel(ch1);
	rdma_destroy_event_channel(ch2);
}

static void c_destroy_waits(void)
{
	struct rdma_event_channel *ch = chan();
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	addr(cli_addr, 0, &src);
	addr(srv_addr, port(4), &dst);
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	ZERO(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	struct delayed_ack d = {.ev = expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, id, TMO), .ms = 400};
	pthread_t th;
	CHECK(!pthread_create(&th, NULL, acker, &d), "pthread_create");
	int64_t t0 = now_ms();
	int rc = rdma_destroy_id(id);
	int64_t t1 = now_ms();
	pthread_join(th, NULL);
	CHECK(rc == 0, "rdma_destroy_id: %s", strerror(errno));
	CHECK(t1 >= d.acked, "rdma_destroy_id returned after %lld ms, before its event was acked (%lld ms later)",
	      (long long)(t1 - t0), (long long)(d.acked - t1));
	info("rdma_destroy_id returned %lld ms after the call, the event acked after %d ms", (long long)(t1 - t0), d.ms);
	/* queued, never retrieved: destroyed with the id, at once */
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	ZERO(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	CHECK(readable(ch, TMO), "ADDR_RESOLVED not due in %d ms", TMO);
	t0 = now_ms();
	ZERO(rdma_destroy_id(id));
	CHECK(now_ms() - t0 < 2000, "rdma_destroy_id with an event queued took %lld ms", (long long)(now_ms() - t0));
	empty(ch, "after its id was destroyed with an event queued");
	rdma_destroy_event_channel(ch);
}

static void c_addr_timeout(void)
{
	struct rdma_event_channel *ch = chan();
	struct rdma_cm_id *id;
	struct sockaddr_storage src, dst;
	addr(cli_addr, 0, &src);
	addr(unused_addr, port(5), &dst);
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	int64_t t0 = now_ms();
	int rc = rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1000);
	int64_t call = now_ms() - t0;
	if (rc) {
		/* the kernel may refuse at once (no route): not this subnet's case */
		fail("rdma_resolve_addr to %s: %s", unused_addr, strerror(errno));
	}
	CHECK(call < 300, "rdma_resolve_addr took %lld ms: the answer is an event", (long long)call);
	struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_ADDR_ERROR, id, 8000);
	int64_t took = now_ms() - t0;
	int st = ev->status;
	ZERO(rdma_ack_cm_event(ev));
	CHECK(st == -ETIMEDOUT, "ADDR_ERROR status %d, want -ETIMEDOUT (%d)", st, -ETIMEDOUT);
	CHECK(took <= 1000 + 2000, "ADDR_ERROR after %lld ms, timeout 1000", (long long)took);
	info("rdma_resolve_addr returned after %lld ms, ADDR_ERROR %d after %lld ms (timeout 1000 ms)", (long long)call,
	     st, (long long)took);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void c_addr_async(void)
{
	struct rdma_event_channel *ch = chan();
	struct rdma_cm_id *slow, *fast;
	struct sockaddr_storage src, nobody, dst;
	addr(cli_addr, 0, &src);
	addr(unused_addr, port(15), &nobody);
	addr(srv_addr, port(15), &dst);
	ZERO(rdma_create_id(ch, &slow, NULL, RDMA_PS_TCP));
	ZERO(rdma_create_id(ch, &fast, NULL, RDMA_PS_TCP));
	ZERO(rdma_resolve_addr(slow, (struct sockaddr *)&src, (struct sockaddr *)&nobody, 1500));
	int64_t t0 = now_ms();
	ZERO(rdma_resolve_addr(fast, (struct sockaddr *)&src, (struct sockaddr *)&dst, 1500));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, fast, TMO);
	int64_t fast_ms = now_ms() - t0;
	CHECK(fast_ms < 1000, "ADDR_RESOLVED after %lld ms: it waited for the other id", (long long)fast_ms);
	struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_ADDR_ERROR, slow, 8000);
	ZERO(rdma_ack_cm_event(ev));
	info("ADDR_RESOLVED after %lld ms, the other id's ADDR_ERROR after %lld ms", (long long)fast_ms,
	     (long long)(now_ms() - t0));
	rdma_destroy_id(slow);
	rdma_destroy_id(fast);
	rdma_destroy_event_channel(ch);
}

/* quiet: other has nothing, now and for ms. */
static void quiet(struct rdma_event_channel *other, int ms, const char *when)
{
	CHECK(!readable(other, ms), "the other channel is readable %s", when);
	empty(other, when);
}

static void c_channel_exact(void)
{
	struct rdma_event_channel *cch = chan(), *other = chan(), *sch = chan();
	struct rdma_cm_id *idle, *l = listener(sch, port(16));
	struct sockaddr_storage src;
	addr(cli_addr, 0, &src);
	/* an id on the other channel, on the same device as the client's */
	ZERO(rdma_create_id(other, &idle, NULL, RDMA_PS_TCP));
	ZERO(rdma_bind_addr(idle, (struct sockaddr *)&src));
	struct rdma_cm_id *cli = routed(cch, port(16), NULL);
	quiet(other, 0, "after the client's resolution");
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	struct rdma_cm_id *srv = request(sch, l, NULL, NULL);
	qp(srv);
	ZERO(rdma_accept(srv, NULL));
	CHECK(readable(cch, TMO), "no ESTABLISHED on the client's channel");
	quiet(other, 0, "while the client's ESTABLISHED waits");
	expect_ack(cch, RDMA_CM_EVENT_ESTABLISHED, cli, TMO);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	ZERO(rdma_disconnect(srv));
	CHECK(readable(cch, TMO), "no DISCONNECTED on the client's channel");
	quiet(other, 200, "while the client's DISCONNECTED waits");
	expect_ack(cch, RDMA_CM_EVENT_DISCONNECTED, cli, TMO);
	ZERO(rdma_disconnect(cli));
	expect_ack(sch, RDMA_CM_EVENT_DISCONNECTED, srv, TMO);
	quiet(other, 0, "after the connection");
	teardown(cli);
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(other);
	rdma_destroy_event_channel(sch);
}

static void c_no_listener(void)
{
	struct rdma_event_channel *ch = chan();
	struct rdma_cm_id *id = routed(ch, port(6), NULL);
	qp(id);
	ZERO(rdma_connect(id, NULL));
	struct rdma_cm_event *ev = expect(ch, RDMA_CM_EVENT_REJECTED, id, TMO);
	int st = ev->status, plen = ev->param.conn.private_data_len;
	ZERO(rdma_ack_cm_event(ev));
	CHECK(st == 8, "REJECTED status %d, want 8 (invalid service ID)", st);
	CHECK(plen == 148, "REJECTED private_data_len %d, want 148 (the REJ's area)", plen);
	teardown(id);
	rdma_destroy_event_channel(ch);
}

static void c_reject(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(7));
	struct rdma_cm_id *cli = routed(cch, port(7), NULL);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	struct rdma_cm_id *srv = request(sch, l, NULL, NULL);
	uint8_t big[149], msg[20];
	memset(big, 0x5a, sizeof(big));
	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(0x30 + i);
	FAILS(rdma_reject(srv, big, sizeof(big)), EINVAL);
	ZERO(rdma_reject(srv, msg, sizeof(msg)));
	struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_REJECTED, cli, TMO);
	int st = ev->status, plen = ev->param.conn.private_data_len;
	uint8_t got[256] = {0};
	if (plen && ev->param.conn.private_data)
		memcpy(got, ev->param.conn.private_data, (size_t)(plen < 256 ? plen : 256));
	ZERO(rdma_ack_cm_event(ev));
	CHECK(st == 28, "REJECTED status %d, want 28 (consumer defined)", st);
	CHECK(plen == 148 && !memcmp(got, msg, sizeof(msg)) && got[sizeof(msg)] == 0,
	      "REJECTED private data (len %d, want 148: the REJ's area) does not start with the 20 bytes sent", plen);
	rdma_destroy_id(srv);
	teardown(cli);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* allzero: the event's private data is plen zero bytes. */
static int allzero(const void *p, int plen)
{
	const uint8_t *b = p;
	for (int i = 0; i < plen; i++)
		if (b[i])
			return 0;
	return 1;
}

static void c_private_data(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(8));
	uint8_t req[57], rep[197], got[256];
	for (size_t i = 0; i < sizeof(req); i++)
		req[i] = (uint8_t)(i * 3 + 1);
	for (size_t i = 0; i < sizeof(rep); i++)
		rep[i] = (uint8_t)(i * 5 + 2);
	struct rdma_cm_id *cli = routed(cch, port(8), NULL);
	qp(cli);
	struct rdma_conn_param p = {.private_data = req, .private_data_len = 57, .responder_resources = 1,
				    .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7};
	FAILS(rdma_connect(cli, &p), EINVAL);
	p.private_data_len = 56;
	ZERO(rdma_connect(cli, &p));
	int plen;
	struct rdma_cm_id *srv = request(sch, l, got, &plen);
	CHECK(plen == 56 && !memcmp(got, req, 56), "CONNECT_REQUEST's private data (len %d, want 56) is not the 56 bytes sent",
	      plen);
	qp(srv);
	struct rdma_conn_param a = {.private_data = rep, .private_data_len = 196, .responder_resources = 1,
				    .initiator_depth = 1};
	ZERO(rdma_accept(srv, &a));
	struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED, cli, TMO);
	plen = ev->param.conn.private_data_len;
	memset(got, 0, sizeof(got));
	if (plen && ev->param.conn.private_data)
		memcpy(got, ev->param.conn.private_data, (size_t)plen);
	ZERO(rdma_ack_cm_event(ev));
	CHECK(plen == 196 && !memcmp(got, rep, 196), "ESTABLISHED's private data (len %d, want 196) is not the 196 bytes sent",
	      plen);
	ev = expect(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	plen = ev->param.conn.private_data_len;
	ZERO(rdma_ack_cm_event(ev));
	CHECK(plen == 0, "the server's ESTABLISHED (the RTU) has private_data_len %d, want 0", plen);
	disconnected(cch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	/* a REQ and a REP without private data: the whole area, zeros */
	cli = routed(cch, port(8), NULL);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	srv = request(sch, l, got, &plen);
	CHECK(plen == 56 && allzero(got, 56), "CONNECT_REQUEST without private data: len %d, want 56 zeros", plen);
	qp(srv);
	ZERO(rdma_accept(srv, NULL));
	ev = expect(cch, RDMA_CM_EVENT_ESTABLISHED, cli, TMO);
	plen = ev->param.conn.private_data_len;
	int zeros = ev->param.conn.private_data && allzero(ev->param.conn.private_data, plen);
	ZERO(rdma_ack_cm_event(ev));
	CHECK(plen == 196 && zeros, "ESTABLISHED without private data: len %d, want 196 zeros", plen);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	disconnected(cch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	/* 197 bytes on the REP: EINVAL. The kernel's rdma_accept then rejects
	 * the request itself; here the server's rdma_destroy_id does (REJ 28
	 * either way). */
	cli = routed(cch, port(8), NULL);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	srv = request(sch, l, NULL, NULL);
	qp(srv);
	a.private_data_len = 197;
	FAILS(rdma_accept(srv, &a), EINVAL);
	teardown(srv);
	ev = expect(cch, RDMA_CM_EVENT_REJECTED, cli, TMO);
	int st = ev->status;
	ZERO(rdma_ack_cm_event(ev));
	CHECK(st == 28, "REJECTED status %d after the failed accept, want 28", st);
	teardown(cli);
	empty(sch, "the server's channel at the end");
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

static void c_ports(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(9)), *cli, *srv;
	CHECK(ntohs(rdma_get_src_port(l)) == port(9), "the listener's src port %d, want %d", ntohs(rdma_get_src_port(l)),
	      port(9));
	connected(cch, sch, l, port(9), &cli, &srv);
	uint16_t cs = ntohs(rdma_get_src_port(cli)), cd = ntohs(rdma_get_dst_port(cli)), ss = ntohs(rdma_get_src_port(srv)),
		 sd = ntohs(rdma_get_dst_port(srv));
	CHECK(cd == port(9) && ss == port(9), "client dst port %d, server src port %d, want %d", cd, ss, port(9));
	CHECK(cs != 0 && sd == cs, "client src port %d, server dst port %d: want the same, not 0", cs, sd);
	struct sockaddr_storage sa, ca;
	addr(srv_addr, 0, &sa);
	addr(cli_addr, 0, &ca);
	CHECK(same_ip(rdma_get_local_addr(cli), (struct sockaddr *)&ca) &&
		      same_ip(rdma_get_peer_addr(cli), (struct sockaddr *)&sa),
	      "client: local %s peer %s", ntop(rdma_get_local_addr(cli)), ntop(rdma_get_peer_addr(cli)));
	CHECK(same_ip(rdma_get_local_addr(srv), (struct sockaddr *)&sa) &&
		      same_ip(rdma_get_peer_addr(srv), (struct sockaddr *)&ca),
	      "server: local %s peer %s", ntop(rdma_get_local_addr(srv)), ntop(rdma_get_peer_addr(srv)));
	info("client %s:%d -> server %s:%d", ntop(rdma_get_local_addr(cli)), cs, ntop(rdma_get_peer_addr(cli)), cd);
	disconnected(cch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

static void c_options(void)
{
	struct rdma_event_channel *ch = chan();
	struct rdma_cm_id *id;
	ZERO(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	uint8_t tos = 32;
	int one = 1, tos_int = 32;
	ZERO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)));
	FAILS(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos_int, sizeof(tos_int)), EINVAL);
	ZERO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)));
	ZERO(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)));
	FAILS(rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof(one)), ENOSYS);
	FAILS(rdma_set_option(id, 99, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)), ENOSYS);
	rdma_destroy_id(id);
	/* the options hold on a connection: TOS 32, REUSEADDR on the listener */
	struct rdma_event_channel *sch = chan();
	struct rdma_cm_id *l, *cli, *srv;
	struct sockaddr_storage a;
	ZERO(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP));
	ZERO(rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)));
	addr(srv_addr, port(10), &a);
	ZERO(rdma_bind_addr(l, (struct sockaddr *)&a));
	ZERO(rdma_listen(l, 4));
	ZERO(rdma_create_id(ch, &cli, NULL, RDMA_PS_TCP));
	ZERO(rdma_set_option(cli, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)));
	struct sockaddr_storage src;
	addr(cli_addr, 0, &src);
	ZERO(rdma_resolve_addr(cli, (struct sockaddr *)&src, (struct sockaddr *)&a, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED, cli, TMO);
	ZERO(rdma_resolve_route(cli, 2000));
	expect_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, cli, TMO);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	srv = request(sch, l, NULL, NULL);
	qp(srv);
	ZERO(rdma_accept(srv, NULL));
	expect_ack(ch, RDMA_CM_EVENT_ESTABLISHED, cli, TMO);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	disconnected(ch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(sch);
}

static void c_bind_port0(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l, *l2, *cli, *srv;
	struct sockaddr_storage a;
	ZERO(rdma_create_id(sch, &l, NULL, RDMA_PS_TCP));
	addr(srv_addr, 0, &a);
	ZERO(rdma_bind_addr(l, (struct sockaddr *)&a));
	int at_bind = ntohs(rdma_get_src_port(l));
	ZERO(rdma_listen(l, 4));
	int p = ntohs(rdma_get_src_port(l));
	CHECK(p != 0, "port 0 after rdma_listen");
	CHECK(!at_bind || at_bind == p, "port %d after rdma_bind_addr, %d after rdma_listen", at_bind, p);
	info("port %d after rdma_bind_addr, %d after rdma_listen", at_bind, p);
	/* the same port again: EADDRINUSE, at bind (the kernel) or at listen */
	ZERO(rdma_create_id(sch, &l2, NULL, RDMA_PS_TCP));
	addr(srv_addr, p, &a);
	errno = 0;
	int rc = rdma_bind_addr(l2, (struct sockaddr *)&a);
	const char *where = "rdma_bind_addr";
	if (!rc) {
		where = "rdma_listen";
		rc = rdma_listen(l2, 4);
	}
	CHECK(rc == -1 && errno == EADDRINUSE, "a second id on port %d: %s gave %d (%s), want EADDRINUSE", p, where, rc,
	      strerror(errno));
	info("the second id on port %d: %s failed EADDRINUSE", p, where);
	rdma_destroy_id(l2);
	connected(cch, sch, l, p, &cli, &srv);
	disconnected(cch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* poll1 polls cq for one completion within ms. */
static void poll1(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	int64_t end = now_ms() + TMO;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "%s: ibv_poll_cq: %d", what, n);
		if (n == 1)
			break;
		CHECK(now_ms() < end, "%s: no completion in %d ms", what, TMO);
		sleep_ms(1);
	}
	CHECK(wc->status == IBV_WC_SUCCESS, "%s: %s", what, ibv_wc_status_str(wc->status));
}

static void check_init(struct rdma_cm_id *id, const char *who)
{
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	ZERO(ibv_query_qp(id->qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS, &ia));
	CHECK(at.qp_state == IBV_QPS_INIT, "%s: rdma_create_qp's QP in state %d, want INIT", who, at.qp_state);
	CHECK(at.port_num == 1 && at.pkey_index == 0, "%s: port %d pkey index %d", who, at.port_num, at.pkey_index);
	info("%s: INIT, port %d, pkey index %d, access %#x", who, at.port_num, at.pkey_index, at.qp_access_flags);
}

static void c_qp_init_recv(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(11));
	struct rdma_cm_id *cli = routed(cch, port(11), NULL);
	qp(cli);
	check_init(cli, "client");
	static char cbuf[2][64], sbuf[2][64];
	struct ibv_mr *cmr = ibv_reg_mr(cli->qp->pd, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(cmr, "ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = {.addr = (uintptr_t)cbuf[1], .length = 64, .lkey = cmr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
	ZERO(ibv_post_recv(cli->qp, &rwr, &bad));
	ZERO(rdma_connect(cli, NULL));
	struct rdma_cm_id *srv = request(sch, l, NULL, NULL);
	qp(srv);
	check_init(srv, "server");
	struct ibv_mr *smr = ibv_reg_mr(srv->qp->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(smr, "ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge ssge = {.addr = (uintptr_t)sbuf[1], .length = 64, .lkey = smr->lkey};
	struct ibv_recv_wr srwr = {.wr_id = 2, .sg_list = &ssge, .num_sge = 1};
	ZERO(ibv_post_recv(srv->qp, &srwr, &bad));
	ZERO(rdma_accept(srv, NULL));
	expect_ack(cch, RDMA_CM_EVENT_ESTABLISHED, cli, TMO);
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	snprintf(cbuf[0], 64, "from the client");
	snprintf(sbuf[0], 64, "from the server");
	struct ibv_sge cs = {.addr = (uintptr_t)cbuf[0], .length = 16, .lkey = cmr->lkey};
	struct ibv_sge ss = {.addr = (uintptr_t)sbuf[0], .length = 16, .lkey = smr->lkey};
	struct ibv_send_wr cw = {.wr_id = 3, .sg_list = &cs, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr sw = {.wr_id = 4, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad;
	ZERO(ibv_post_send(cli->qp, &cw, &sbad));
	ZERO(ibv_post_send(srv->qp, &sw, &sbad));
	struct ibv_wc wc;
	poll1(cli->send_cq, &wc, "the client's SEND");
	poll1(srv->send_cq, &wc, "the server's SEND");
	poll1(srv->recv_cq, &wc, "the server's receive");
	CHECK(wc.wr_id == 2 && wc.opcode == IBV_WC_RECV && wc.byte_len == 16 && !strcmp(sbuf[1], "from the client"),
	      "the server received wr_id %llu opcode %d %u bytes %.16s", (unsigned long long)wc.wr_id, wc.opcode, wc.byte_len,
	      sbuf[1]);
	poll1(cli->recv_cq, &wc, "the client's receive");
	CHECK(wc.wr_id == 1 && wc.opcode == IBV_WC_RECV && wc.byte_len == 16 && !strcmp(cbuf[1], "from the server"),
	      "the client received wr_id %llu opcode %d %u bytes %.16s", (unsigned long long)wc.wr_id, wc.opcode, wc.byte_len,
	      cbuf[1]);
	disconnected(cch, sch, cli, srv);
	teardown(cli);
	teardown(srv);
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(smr);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* own_qp makes an RC QP on id's device that the CM is not told of
 * (id->qp stays NULL), with a CQ and a registered buffer of two halves;
 * one receive is posted into the second half once it is in INIT. */
struct own {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	char buf[2][64];
};

static void own_qp(struct rdma_cm_id *id, struct own *o)
{
	CHECK(id->verbs, "the id has no device");
	o->pd = ibv_alloc_pd(id->verbs);
	CHECK(o->pd, "ibv_alloc_pd: %s", strerror(errno));
	o->cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	CHECK(o->cq, "ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr ia = {.send_cq = o->cq, .recv_cq = o->cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	o->qp = ibv_create_qp(o->pd, &ia);
	CHECK(o->qp, "ibv_create_qp: %s", strerror(errno));
	o->mr = ibv_reg_mr(o->pd, o->buf, sizeof(o->buf), IBV_ACCESS_LOCAL_WRITE);
	CHECK(o->mr, "ibv_reg_mr: %s", strerror(errno));
}

/* move takes o's QP to state as rdma_init_qp_attr says, and returns the
 * attributes it used. */
static struct ibv_qp_attr move(struct rdma_cm_id *id, struct own *o, enum ibv_qp_state state, const char *who)
{
	struct ibv_qp_attr a = {.qp_state = state};
	int mask = 0;
	ZERO(rdma_init_qp_attr(id, &a, &mask));
	CHECK(a.qp_state == state && (mask & IBV_QP_STATE), "%s: rdma_init_qp_attr(%d): state %d, mask %#x", who, state,
	      a.qp_state, mask);
	int err = ibv_modify_qp(o->qp, &a, mask);
	CHECK(!err, "%s: ibv_modify_qp to %d with rdma_init_qp_attr's mask %#x: %s", who, state, mask, strerror(err));
	if (state == IBV_QPS_INIT) {
		struct ibv_sge sge = {.addr = (uintptr_t)o->buf[1], .length = 64, .lkey = o->mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
		ZERO(ibv_post_recv(o->qp, &rwr, &bad));
	}
	return a;
}

static void own_send(struct own *o, const char *msg)
{
	snprintf(o->buf[0], 64, "%s", msg);
	struct ibv_sge sge = {.addr = (uintptr_t)o->buf[0], .length = 32, .lkey = o->mr->lkey};
	struct ibv_send_wr w = {.wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	ZERO(ibv_post_send(o->qp, &w, &bad));
}

/* own_wait takes o's two completions (its SEND and its receive, in either
 * order) and checks what arrived. */
static void own_wait(struct own *o, const char *want, const char *who)
{
	int send = 0, recv = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc;
		poll1(o->cq, &wc, who);
		send += wc.opcode == IBV_WC_SEND;
		recv += wc.opcode == IBV_WC_RECV;
	}
	CHECK(send == 1 && recv == 1, "%s: %d sends, %d receives completed", who, send, recv);
	CHECK(!strcmp(o->buf[1], want), "%s received %.32s, want %s", who, o->buf[1], want);
}

static void own_free(struct own *o)
{
	if (o->qp)
		ibv_destroy_qp(o->qp);
	if (o->mr)
		ibv_dereg_mr(o->mr);
	if (o->cq)
		ibv_destroy_cq(o->cq);
	if (o->pd)
		ibv_dealloc_pd(o->pd);
}

static void c_manual_qp(void)
{
	struct rdma_event_channel *cch = chan(), *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(17));
	struct rdma_cm_id *cli = routed(cch, port(17), NULL), *srv;
	static struct own co, so;
	memset(&co, 0, sizeof(co));
	memset(&so, 0, sizeof(so));
	own_qp(cli, &co);
	move(cli, &co, IBV_QPS_INIT, "client");
	struct rdma_conn_param cp = {.qp_num = co.qp->qp_num, .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7};
	ZERO(rdma_connect(cli, &cp));
	srv = request(sch, l, NULL, NULL);
	own_qp(srv, &so);
	move(srv, &so, IBV_QPS_INIT, "server");
	struct ibv_qp_attr rtr = move(srv, &so, IBV_QPS_RTR, "server");
	CHECK(rtr.dest_qp_num == co.qp->qp_num, "server: RTR dest_qp_num %u, want the client's %u", rtr.dest_qp_num,
	      co.qp->qp_num);
	move(srv, &so, IBV_QPS_RTS, "server");
	static const char hello[] = "the server's own QP";
	struct rdma_conn_param sp = {.qp_num = so.qp->qp_num, .responder_resources = 1, .initiator_depth = 1,
				     .retry_count = 7, .rnr_retry_count = 7, .private_data = hello,
				     .private_data_len = sizeof(hello)};
	ZERO(rdma_accept(srv, &sp));
	struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_CONNECT_RESPONSE, cli, TMO);
	CHECK(ev->param.conn.private_data && !memcmp(ev->param.conn.private_data, hello, sizeof(hello)),
	      "CONNECT_RESPONSE without the REP's private data");
	ZERO(rdma_ack_cm_event(ev));
	rtr = move(cli, &co, IBV_QPS_RTR, "client");
	CHECK(rtr.dest_qp_num == so.qp->qp_num, "client: RTR dest_qp_num %u, want the server's %u", rtr.dest_qp_num,
	      so.qp->qp_num);
	move(cli, &co, IBV_QPS_RTS, "client");
	ZERO(rdma_establish(cli));
	expect_ack(sch, RDMA_CM_EVENT_ESTABLISHED, srv, TMO);
	own_send(&co, "from the client's own QP");
	own_send(&so, "from the server's own QP");
	own_wait(&co, "from the server's own QP", "client");
	own_wait(&so, "from the client's own QP", "server");
	disconnected(cch, sch, cli, srv);
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	ZERO(ibv_query_qp(co.qp, &at, IBV_QP_STATE, &ia));
	CHECK(at.qp_state == IBV_QPS_RTS, "client: the disconnect moved the program's QP to %d", at.qp_state);
	ZERO(ibv_query_qp(so.qp, &at, IBV_QP_STATE, &ia));
	CHECK(at.qp_state == IBV_QPS_RTS, "server: the disconnect moved the program's QP to %d", at.qp_state);
	rdma_destroy_id(cli);
	rdma_destroy_id(srv);
	own_free(&co);
	own_free(&so);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
}

/* child: connect to the server's port (or, server, take one connect
 * request on it) and wait to be killed. */
static int child(int p, int server)
{
	case_name = "child";
	if (setjmp(case_jmp))
		return 1;
	struct rdma_event_channel *ch = chan();
	if (server) {
		struct rdma_cm_id *l = listener(ch, p);
		printf("listening\n");
		request(ch, l, NULL, NULL);
		printf("request\n");
	} else {
		struct rdma_cm_id *id = routed(ch, p, NULL);
		qp(id);
		ZERO(rdma_connect(id, NULL));
		printf("connecting\n");
	}
	fflush(stdout);
	for (;;)
		pause();
}

/* spawn runs this program in child mode ("child" or "server"), its
 * stdout a pipe whose reading end is returned in *out. */
static pid_t spawn(const char *mode, int p, int *out)
{
	int fds[2];
	ZERO(pipe(fds));
	char ps[16];
	snprintf(ps, sizeof(ps), "%d", p);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		execl("/proc/self/exe", "cmevents", mode, srv_addr, cli_addr, ps, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	*out = fds[0];
	return pid;
}

/* said waits until the child printed want (a line), at most ms. */
static void said(int fd, const char *want, int ms)
{
	static char buf[256];
	static size_t len;
	int64_t end = now_ms() + ms;
	for (;;) {
		buf[len] = 0;
		char *nl = strstr(buf, want);
		if (nl) {
			size_t used = (size_t)(nl - buf) + strlen(want);
			memmove(buf, buf + used, len - used);
			len -= used;
			return;
		}
		int64_t left = end - now_ms();
		CHECK(left > 0, "the child did not say %s in %d ms (said %s)", want, ms, buf);
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		if (poll(&pf, 1, (int)left) > 0) {
			ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
			CHECK(n > 0, "the child ended before saying %s (said %s)", want, buf);
			len += (size_t)n;
		}
	}
}

static void killed(pid_t pid)
{
	int status;
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child ended with status %#x", status);
}

static void c_killed(void)
{
	struct rdma_event_channel *sch = chan();
	struct rdma_cm_id *l = listener(sch, port(12));
	int fd;
	pid_t pid = spawn("child", port(12), &fd);
	struct rdma_cm_id *srv = request(sch, l, NULL, NULL);
	qp(srv);
	said(fd, "connecting", TMO);
	close(fd);
	killed(pid);
	sleep_ms(300);
	int64_t t0 = now_ms();
	errno = 0;
	int rc = rdma_accept(srv, NULL), aerr = errno;
	struct rdma_cm_event *ev = next(sch, rc ? 2000 : 30000);
	if (rc) {
		info("rdma_accept after the client died: %s", strerror(aerr));
	} else {
		/* the REP meets a dead client: the server's id is told */
		CHECK(ev, "rdma_accept succeeded and no event came in 30 s");
	}
	if (ev) {
		CHECK(ev->id == srv && (ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_DISCONNECTED ||
					ev->event == RDMA_CM_EVENT_UNREACHABLE),
		      "rdma_accept %s, then %s status %d", rc ? "failed" : "succeeded", rdma_event_str(ev->event), ev->status);
		info("rdma_accept %s, then %s status %d after %lld ms", rc ? "failed" : "succeeded", rdma_event_str(ev->event),
		     ev->status, (long long)(now_ms() - t0));
		ZERO(rdma_ack_cm_event(ev));
	}
	t0 = now_ms();
	teardown(srv);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(sch);
	CHECK(now_ms() - t0 < 5000, "teardown took %lld ms", (long long)(now_ms() - t0));
}

/* killed_server: the server process is killed holding a connect request
 * it never answered: the client is rejected (28, consumer defined: the
 * kernel's cm_destroy_id in REQ_RCVD; vrnicd rejects for a departed client). */
static void c_killed_server(void)
{
	struct rdma_event_channel *cch = chan();
	int fd;
	pid_t pid = spawn("server", port(13), &fd);
	said(fd, "listening", TMO);
	struct rdma_cm_id *cli = routed(cch, port(13), NULL);
	qp(cli);
	ZERO(rdma_connect(cli, NULL));
	said(fd, "request", TMO);
	close(fd);
	int64_t t0 = now_ms();
	killed(pid);
	struct rdma_cm_event *ev = expect(cch, RDMA_CM_EVENT_REJECTED, cli, TMO);
	int st = ev->status;
	ZERO(rdma_ack_cm_event(ev));
	CHECK(st == 28, "REJECTED status %d, want 28", st);
	info("REJECTED %d %lld ms after the server was killed", st, (long long)(now_ms() - t0));
	teardown(cli);
	rdma_destroy_event_channel(cch);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 5 && (!strcmp(argv[1], "child") || !strcmp(argv[1], "server"))) {
		srv_addr = argv[2];
		cli_addr = argv[3];
		return child(atoi(argv[4]), !strcmp(argv[1], "server"));
	}
	if (argc < 4) {
		fprintf(stderr, "usage: %s SERVER_ADDR CLIENT_ADDR UNUSED_ADDR [PORT_BASE]\n", argv[0]);
		return 2;
	}
	srv_addr = argv[1];
	cli_addr = argv[2];
	unused_addr = argv[3];
	if (argc > 4)
		port_base = atoi(argv[4]);
	start_alarm(120);
	signal(SIGPIPE, SIG_IGN);
	only = getenv("CMEVENTS_CASE");
	skips = getenv("CMEVENTS_SKIP");
	run("nonblock", c_nonblock);
	run("epoll", c_epoll);
	run("order", c_order);
	run("migrate", c_migrate);
	run("destroy_waits", c_destroy_waits);
	run("addr_timeout", c_addr_timeout);
	run("addr_async", c_addr_async);
	run("channel_exact", c_channel_exact);
	run("no_listener", c_no_listener);
	run("reject", c_reject);
	run("private_data", c_private_data);
	run("ports", c_ports);
	run("options", c_options);
	run("bind_port0", c_bind_port0);
	run("qp_init_recv", c_qp_init_recv);
	run("manual_qp", c_manual_qp);
	run("killed", c_killed);
	run("killed_server", c_killed_server);
	printf("%d ok, %d failed, %d skipped\n", nok, nfail, nskip);
	return nfail ? 1 : 0;
}
