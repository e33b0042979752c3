/* conn.c: addresses and connections: bind, resolve, listen, connect,
 * accept, reject, disconnect, and the options. Each maps onto the daemon's
 * CM operations (verbsock/PROTOCOL.md §11) on the id's device. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cma.h"

/* SET_CHANNEL puts the id's channel on device dev in a request (its
 * packed field through a copy); err: 0 or an errno. */
#define SET_CHANNEL(err, req, ch, dev)                                                                                 \
	do {                                                                                                           \
		uint32_t h_ = 0;                                                                                       \
		(err) = cma_chan((ch), (dev), &h_);                                                                    \
		(req).channel = h_;                                                                                    \
	} while (0)

/* Addresses travel as 16 bytes, IPv4-mapped for IPv4. */
void cma_to_v6(const struct sockaddr *sa, uint8_t out[16], uint16_t *port)
{
	memset(out, 0, 16);
	if (port)
		*port = 0;
	if (!sa)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &s->sin_addr, 4);
		if (s->sin_addr.s_addr == INADDR_ANY)
			memset(out, 0, 16); /* any: zeros, as the protocol says */
		if (port)
			*port = ntohs(s->sin_port);
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(out, &s->sin6_addr, 16);
		if (port)
			*port = ntohs(s->sin6_port);
	}
}

void cma_from_v6(const uint8_t in[16], uint16_t port, int family, struct sockaddr_storage *out)
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	memset(out, 0, sizeof(*out));
	if (family == AF_INET || !memcmp(in, mapped, 12)) {
		struct sockaddr_in *s = (struct sockaddr_in *)out;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, in + 12, 4);
		s->sin_port = htons(port);
		return;
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)out;
	s->sin6_family = AF_INET6;
	memcpy(&s->sin6_addr, in, 16);
	s->sin6_port = htons(port);
}

static int is_any(const uint8_t a[16])
{
	static const uint8_t zero[16];
	return !memcmp(a, zero, 16);
}

/* is_loopback: 127.0.0.0/8 or ::1. The kernel's rdma_bind_addr takes
 * such an address as a wildcard (cma_any_addr is zero or loopback): no
 * device is acquired, so id->verbs stays NULL. libfabric's verbs provider
 * binds "localhost" for a passive fi_getinfo without a node and, finding
 * verbs NULL, takes the device's own IP address as the source. */
static int is_loopback(const uint8_t a[16])
{
	static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	static const uint8_t one[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
	return (!memcmp(a, mapped, 12) && a[12] == 127) || !memcmp(a, one, 16);
}

/* cma_dev_of_addr is the device whose GID table holds the address, -1 if
 * none (RoCE GIDs are the port's IP addresses). */
int cma_dev_of_addr(const struct sockaddr *sa)
{
	uint8_t a[16];
	cma_to_v6(sa, a, NULL);
	for (int d = 0; d < cma_ndevs; d++) {
		struct ibv_port_attr pa;
		if (ibv_query_port(cma_devs[d].ctx, 1, &pa))
			continue;
		for (int i = 0; i < pa.gid_tbl_len && i < 256; i++) {
			union ibv_gid g;
			if (ibv_query_gid(cma_devs[d].ctx, 1, i, &g) == 0 && !memcmp(g.raw, a, 16))
				return d;
		}
	}
	return -1;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static uint16_t port_of(const struct sockaddr *sa)
{
	uint16_t p;
	uint8_t a[16];
	cma_to_v6(sa, a, &p);
	return p;
}

static void set_port(struct sockaddr *sa, uint16_t port)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
	else if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
}

/* ephemeral picks a port as the kernel's rdma_cm does for port 0. */
static uint16_t ephemeral(void)
{
	static unsigned seed;
	if (!seed)
		seed = (unsigned)getpid() * 2654435761u ^ (unsigned)(uintptr_t)&seed;
	seed = seed * 1103515245u + 12345u;
	return (uint16_t)(32768 + (seed >> 8) % 28232);
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cma_id *c = to_cma(id);
	if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)) {
		errno = addr ? EAFNOSUPPORT : EINVAL;
		return -1;
	}
	if (c->state != CMA_IDLE) {
		errno = EINVAL;
		return -1;
	}
	uint8_t a[16];
	cma_to_v6(addr, a, NULL);
	if (!is_any(a) && !is_loopback(a)) {
		int d = cma_dev_of_addr(addr);
		if (d < 0) {
			errno = EADDRNOTAVAIL; /* no RDMA device has it */
			return -1;
		}
		cma_set_dev(c, d);
	}
	memcpy(&id->route.addr.src_storage, addr, sa_len(addr));
	if (!port_of(addr)) {
		/* The kernel picks the port at bind: programs read it right away
		 * (rdma_get_src_port) to tell their peer. */
		set_port(&id->route.addr.src_addr, ephemeral());
		c->auto_port = 1;
	}
	c->state = CMA_BOUND;
	return 0;
}

/* cma_take_path keeps what an event says the QP takes at RTR and RTS
 * (rdma_init_qp_attr). cma_mu held. */
void cma_take_path(struct cma_id *c, const struct vrn_cm_event_msg *m)
{
	c->have_path = 1;
	c->path = m->ah;
	c->sq_psn = m->sqpsn;
	c->timeout = m->timeout;
	c->path_mtu = m->path_mtu;
	c->retry_count = m->retry_count;
	c->rnr_retry = m->rnr_retry;
}

/* cma_random_psn is a starting PSN as rdma_cm picks one (24 random bits). */
uint32_t cma_random_psn(void)
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint32_t)getpid() * 2654435761u ^ (uint32_t)(uintptr_t)&v;
	return v & 0xffffff;
}

/* resolve asks device d for the source address toward dst and its
 * neighbour (ARP/ND), waiting for the answer: 0, or an errno. */
static int resolve(int d, const struct sockaddr *src, const struct sockaddr *dst, int timeout_ms, uint8_t got[16])
{
	struct vrn_cm_resolve_addr_req req = {0};
	struct vrn_cm_resolve_addr_resp r;
	cma_to_v6(dst, req.dst, NULL);
	cma_to_v6(src, req.src, NULL);
	req.timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0;
	int err = vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_RESOLVE_ADDR, &req, sizeof(req), &r, sizeof(r));
	if (!err)
		memcpy(got, r.src, 16);
	return err;
}

/* resolved ends a resolution: on success the id takes the source address
 * the daemon picked, with its bound port or an ephemeral one. cma_mu held. */
static struct cma_event *resolved(struct cma_id *c, int err, const uint8_t src[16])
{
	struct rdma_cm_id *id = &c->id;
	if (err) /* librdmacm: ADDR_ERROR, status -ETIMEDOUT when nobody answered */
		return cma_new_event(c, RDMA_CM_EVENT_ADDR_ERROR, err == EHOSTUNREACH ? -ETIMEDOUT : -err);
	uint16_t sport = c->state == CMA_BOUND ? port_of(&id->route.addr.src_addr) : 0;
	cma_from_v6(src, 0, id->route.addr.dst_addr.sa_family, &id->route.addr.src_storage);
	set_port(&id->route.addr.src_addr, sport ? sport : ephemeral());
	c->state = CMA_ADDR;
	return cma_new_event(c, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
}

/* cma_addr_event is the daemon's answer to cm_resolve_addr_async as the
 * program's event (NULL: the id moved on meanwhile). cma_mu held. */
struct cma_event *cma_addr_event(struct cma_id *c, const struct vrn_cm_event_msg *m)
{
	if (c->state != CMA_IDLE && c->state != CMA_BOUND)
		return NULL;
	if (m->type == RDMA_CM_EVENT_ADDR_ERROR)
		return resolved(c, m->status < 0 ? -m->status : EIO, NULL);
	return resolved(c, 0, m->local);
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	struct cma_id *c = to_cma(id);
	if (!dst_addr || (dst_addr->sa_family != AF_INET && dst_addr->sa_family != AF_INET6)) {
		errno = EINVAL;
		return -1;
	}
	if (src_addr && c->state == CMA_IDLE && rdma_bind_addr(id, src_addr))
		return -1;
	if (c->state != CMA_IDLE && c->state != CMA_BOUND) {
		errno = EINVAL;
		return -1;
	}
	memcpy(&id->route.addr.dst_storage, dst_addr, sa_len(dst_addr));
	const struct sockaddr *src = c->state == CMA_BOUND ? &id->route.addr.src_addr : NULL;
	int d = c->dev >= 0 ? c->dev : (cma_ndevs == 1 ? 0 : -1);
	int err = EHOSTUNREACH;
	uint8_t got[16];
	if (d >= 0) {
		/* As the kernel's: the call returns, the answer is an event. */
		if (c->dev < 0)
			cma_set_dev(c, d);
		struct vrn_cm_resolve_addr_async_req req = {.context = c->seq,
							    .timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0};
		cma_to_v6(dst_addr, req.dst, NULL);
		cma_to_v6(src, req.src, NULL);
		SET_CHANNEL(err, req, c->chan, d);
		if (!err)
			err = vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_RESOLVE_ADDR_ASYNC, &req, sizeof(req), NULL, 0);
		if (!err)
			return c->sync ? cma_complete(c, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
	} else {
		/* Several devices and an unbound id: the first that reaches dst. */
		for (d = 0; d < cma_ndevs; d++)
			if (!(err = resolve(d, src, dst_addr, timeout_ms, got))) {
				cma_set_dev(c, d);
				break;
			}
	}
	pthread_mutex_lock(&cma_mu);
	struct cma_event *e = resolved(c, err, got);
	pthread_mutex_unlock(&cma_mu);
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	cma_queue(c->chan, e);
	return c->sync ? cma_complete(c, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

/* RoCE builds the route from the addresses; it cannot fail once they
 * resolved (vrnicd's CM agent does the same). */
int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cma_id *c = to_cma(id);
	(void)timeout_ms;
	if (c->state != CMA_ADDR) {
		errno = EINVAL;
		return -1;
	}
	if (!id->route.path_rec) {
		id->route.path_rec = calloc(1, sizeof(*id->route.path_rec));
		if (!id->route.path_rec) {
			errno = ENOMEM;
			return -1;
		}
	}
	struct ibv_sa_path_rec *p = id->route.path_rec;
	uint8_t a[16];
	cma_to_v6(&id->route.addr.src_addr, a, NULL);
	memcpy(p->sgid.raw, a, 16);
	cma_to_v6(&id->route.addr.dst_addr, a, NULL);
	memcpy(p->dgid.raw, a, 16);
	struct ibv_port_attr pa;
	if (!ibv_query_port(id->verbs, 1, &pa))
		p->mtu = pa.active_mtu;
	p->pkey = htons(0xffff);
	p->hop_limit = 64;
	p->traffic_class = c->tos;
	p->reversible = 1;
	p->numb_path = 1;
	id->route.num_paths = 1;
	c->state = CMA_ROUTE;
	struct cma_event *e = cma_new_event(c, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	if (!e) {
		errno = ENOMEM;
		return -1;
	}
	cma_queue(c->chan, e);
	return c->sync ? cma_complete(c, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

static int listen_on(struct cma_id *c, int d, const uint8_t addr[16], uint16_t port)
{
	struct vrn_cm_listen_req req = {.context = c->seq, .port_space = (uint16_t)c->id.ps, .port = port};
	memcpy(req.addr, addr, 16);
	struct vrn_cm_listen_resp r;
	int err;
	SET_CHANNEL(err, req, c->chan, d); /* the listener hears every device it listens on */
	if (!err)
		err = vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_LISTEN, &req, sizeof(req), &r, sizeof(r));
	if (!err)
		c->listeners[d] = r.listener;
	return err;
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cma_id *c = to_cma(id);
	(void)backlog; /* the daemon bounds connect requests per client */
	if (c->state != CMA_BOUND) {
		errno = EINVAL;
		return -1;
	}
	uint8_t a[16];
	uint16_t port;
	cma_to_v6(&id->route.addr.src_addr, a, &port);
	if (is_loopback(a))
		memset(a, 0, sizeof(a)); /* a loopback listener hears its device's addresses */
	int tries = c->auto_port ? 32 : 1, err = 0;
	for (int t = 0; t < tries; t++) {
		uint16_t p = t == 0 ? port : ephemeral(); /* a port we picked may be taken: pick again */
		err = 0;
		for (int d = 0; d < cma_ndevs && !err; d++) {
			if (c->dev >= 0 && d != c->dev)
				continue; /* bound to one device's address */
			err = listen_on(c, d, a, p);
		}
		if (!err) {
			set_port(&id->route.addr.src_addr, p);
			break;
		}
		for (int d = 0; d < CMA_MAX_DEVS; d++)
			if (c->listeners[d]) {
				struct vrn_handle_req req = {.handle = c->listeners[d]};
				vrnicd_cm_call(cma_devs[d].ctx, VRN_OP_CM_UNLISTEN, &req, sizeof(req), NULL, 0);
				c->listeners[d] = 0;
			}
		if (err != EADDRINUSE)
			break;
	}
	if (err) {
		errno = err;
		return -1;
	}
	c->state = CMA_LISTEN;
	return 0;
}

/* conn_params fills the daemon's CMConnParams from rdma_conn_param,
 * private data bounded as the kernel bounds it (max bytes for this op).
 * As librdmacm (ucma_valid_param, rdma_connect, rdma_accept): depths past
 * the device's max_qp_rd_atom / max_qp_init_rd_atom are EINVAL, and
 * RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH (0xFF, libfabric's verbs
 * provider's) stand for res and init: the device's maximum on connect,
 * at most the request's on accept. */
static int conn_params(struct ibv_context *ctx, const struct rdma_conn_param *p, struct vrn_cm_conn_params *w,
		       size_t max, int accept, uint8_t req_res, uint8_t req_init)
{
	memset(w, 0, sizeof(*w));
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		return errno ? errno : EIO;
	uint8_t res = (uint8_t)(da.max_qp_rd_atom > 254 ? 254 : da.max_qp_rd_atom);
	uint8_t init = (uint8_t)(da.max_qp_init_rd_atom > 254 ? 254 : da.max_qp_init_rd_atom);
	if (accept) {
		res = req_res < res ? req_res : res;
		init = req_init < init ? req_init : init;
	}
	if (!p) {
		w->resp_res = res;
		w->init_depth = init;
		w->retry_count = 7;
		w->rnr_retry = 7;
		return 0;
	}
	if (p->private_data_len > max || (p->private_data_len && !p->private_data))
		return EINVAL;
	if ((p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > da.max_qp_rd_atom) ||
	    (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > da.max_qp_init_rd_atom))
		return EINVAL;
	w->resp_res = p->responder_resources == RDMA_MAX_RESP_RES ? res : p->responder_resources;
	w->init_depth = p->initiator_depth == RDMA_MAX_INIT_DEPTH ? init : p->initiator_depth;
	w->retry_count = p->retry_count > 7 ? 7 : p->retry_count;
	w->rnr_retry = p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count;
	w->private_len = p->private_data_len;
	if (p->private_data_len)
		memcpy(w->private_data, p->private_data, p->private_data_len);
	return 0;
}

static int fail(int err)
{
	errno = err;
	return -1;
}

/* qp_handle names the id's QP to the daemon: the one rdma_create_qp made,
 * or, without one, the QP numbered conn_param->qp_num on the device. */
static int qp_handle(struct cma_id *c, const struct rdma_conn_param *p, uint32_t *h)
{
	if (c->id.qp) {
		*h = vrnicd_qp_handle(c->id.qp);
		return 0;
	}
	/* The program made the QP itself and names it (conn_param->qp_num): it
	 * must be on the id's device, which the daemon moves it on. */
	if (!p || !p->qp_num)
		return EINVAL;
	return vrnicd_qp_by_num(c->id.verbs, p->qp_num, h);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = to_cma(id);
	if (c->state != CMA_ROUTE)
		return fail(EINVAL);
	uint8_t dst[16], src[16];
	uint16_t dport, sport;
	cma_to_v6(&id->route.addr.dst_addr, dst, &dport);
	cma_to_v6(&id->route.addr.src_addr, src, &sport);
	struct ibv_context *ctx = cma_devs[c->dev].ctx;
	struct vrn_cm_connect_resp r;
	int err;
	if (id->ps == RDMA_PS_UDP) {
		/* UD: a SIDR request; ESTABLISHED carries the peer's QPN and Q_Key */
		struct vrn_cm_resolve_ud_req req = {.context = c->seq, .dst_port = dport, .src_port = sport,
						    .port_space = RDMA_PS_UDP};
		memcpy(req.dst, dst, 16);
		memcpy(req.src, src, 16);
		if (conn_param && conn_param->private_data_len) {
			if (conn_param->private_data_len > sizeof(req.private) || !conn_param->private_data)
				return fail(EINVAL);
			req.private_len = conn_param->private_data_len;
			memcpy(req.private, conn_param->private_data, req.private_len);
		}
		SET_CHANNEL(err, req, c->chan, c->dev);
		if (!err)
			err = vrnicd_cm_call(ctx, VRN_OP_CM_RESOLVE_UD, &req, sizeof(req), &r, sizeof(r));
	} else {
		struct vrn_cm_connect_req req = {.context = c->seq, .port_space = (uint16_t)id->ps, .dst_port = dport,
						 .src_port = sport};
		memcpy(req.dst, dst, 16);
		memcpy(req.src, src, 16);
		uint32_t qp = 0;
		err = qp_handle(c, conn_param, &qp);
		req.qp = qp;
		if (!err)
			SET_CHANNEL(err, req, c->chan, c->dev);
		if (!err)
			err = conn_params(ctx, conn_param, &req.params, 56, 0, 0, 0); /* the REQ's 92 less the cma_hdr */
		if (!err && !id->qp) {
			/* The program's own QP: it moves it, after CONNECT_RESPONSE
			 * (rdma_init_qp_attr, then rdma_establish). */
			c->manual = 1;
			c->psn = cma_random_psn();
			req.params.flags = VRN_CM_MANUAL_QP;
			req.params.psn = c->psn;
		}
		if (!err)
			err = vrnicd_cm_call(ctx, VRN_OP_CM_CONNECT, &req, sizeof(req), &r, sizeof(r));
	}
	if (err)
		return fail(err == EHOSTUNREACH ? ETIMEDOUT : err);
	pthread_mutex_lock(&cma_mu);
	c->conn = r.conn;
	c->state = CMA_CONNECTING;
	pthread_mutex_unlock(&cma_mu);
	return c->sync ? cma_complete(c, c->manual ? RDMA_CM_EVENT_CONNECT_RESPONSE : RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = to_cma(id);
	if (!c->conn || c->dev < 0)
		return fail(EINVAL);
	struct ibv_context *ctx = cma_devs[c->dev].ctx;
	uint32_t qp;
	int err = qp_handle(c, conn_param, &qp);
	if (err)
		return fail(err);
	if (id->ps == RDMA_PS_UDP) {
		struct vrn_cm_accept_ud_req req = {.conn = c->conn, .qp = qp};
		if (conn_param && conn_param->private_data_len) {
			if (conn_param->private_data_len > sizeof(req.private) || !conn_param->private_data)
				return fail(EINVAL);
			req.private_len = conn_param->private_data_len;
			memcpy(req.private, conn_param->private_data, req.private_len);
		}
		err = vrnicd_cm_call(ctx, VRN_OP_CM_ACCEPT_UD, &req, sizeof(req), NULL, 0);
		return err ? fail(err) : 0;
	}
	struct vrn_cm_accept_req req = {.context = c->seq, .conn = c->conn, .qp = qp};
	/* the request's initiator depth bounds our responder resources, its
	 * responder resources our initiator depth */
	if ((err = conn_params(ctx, conn_param, &req.params, sizeof(req.params.private_data), 1, c->init_depth,
			       c->resp_res)))
		return fail(err);
	if (!id->qp) {
		/* The program's own QP, in RTS already (librdmacm moves none
		 * here): the REP names the PSN rdma_init_qp_attr gave it. */
		c->manual = 1;
		req.params.flags = VRN_CM_MANUAL_QP;
		req.params.psn = c->psn;
	}
	err = vrnicd_cm_call(ctx, VRN_OP_CM_ACCEPT, &req, sizeof(req), NULL, 0);
	if (err)
		return fail(err);
	return c->sync ? cma_complete(c, RDMA_CM_EVENT_ESTABLISHED) : 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct cma_id *c = to_cma(id);
	if (!c->conn || c->dev < 0)
		return fail(EINVAL);
	struct vrn_cm_reject_req req = {.conn = c->conn, .private_len = private_data_len};
	if (private_data_len > sizeof(req.private) || (private_data_len && !private_data))
		return fail(EINVAL);
	if (private_data_len)
		memcpy(req.private, private_data, private_data_len);
	int err = vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_REJECT, &req, sizeof(req), NULL, 0);
	return err ? fail(err) : 0;
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cma_id *c = to_cma(id);
	if (!c->conn || c->dev < 0)
		return fail(EINVAL);
	struct vrn_handle_req req = {.handle = c->conn};
	int err = vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_DISCONNECT, &req, sizeof(req), NULL, 0);
	if (id->qp)
		id->qp->state = IBV_QPS_ERR; /* the daemon moved it, as rdma_cm does */
	return err ? fail(err) : 0;
}

/* rdma_establish completes a connection made without a QP on the id,
 * after its CONNECT_RESPONSE and the program's move of its QP to RTS: the
 * RTU goes, and the connection is established (no event, as librdmacm's). */
int rdma_establish(struct rdma_cm_id *id)
{
	struct cma_id *c = to_cma(id);
	if (id->qp || !c->manual || !c->conn || c->dev < 0 || c->listen)
		return fail(EINVAL);
	struct vrn_handle_req req = {.handle = c->conn};
	int err = vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_ESTABLISH, &req, sizeof(req), NULL, 0);
	if (err)
		return fail(err);
	pthread_mutex_lock(&cma_mu);
	c->state = CMA_CONNECTED;
	pthread_mutex_unlock(&cma_mu);
	return 0;
}

/* rdma_notify: a QP event the consumer saw first (COMM_EST); the daemon's
 * CM sees the traffic itself. */
int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)id;
	return event == IBV_EVENT_COMM_EST ? 0 : fail(EINVAL);
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct cma_id *c = to_cma(id);
	if (!optval)
		return fail(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			c->tos = *(uint8_t *)optval;
			return 0;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			c->reuse = *(int *)optval;
			return 0;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				return fail(EINVAL);
			c->afonly = *(int *)optval;
			return 0;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t))
				return fail(EINVAL);
			c->ack_timeout = *(uint8_t *)optval;
			return 0;
		}
	} else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		return 0; /* the path is built from the addresses on RoCE */
	}
	return fail(ENOSYS); /* as the kernel's ucma_set_option for an unknown option */
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.src_addr;
	return sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					 : ((const struct sockaddr_in *)sa)->sin_port;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	const struct sockaddr *sa = &id->route.addr.dst_addr;
	return sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					 : ((const struct sockaddr_in *)sa)->sin_port;
}

/* ECE: not in vrnicd (librdmacm answers EOPNOTSUPP for a device without it). */
int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return fail(EOPNOTSUPP);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return fail(EOPNOTSUPP);
}
