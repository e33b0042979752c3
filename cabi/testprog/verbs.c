/* verbs: the verbs Debian's programs do not reach, used as an application
 * uses them, each result checked against what libibverbs and the IBA
 * specify. It opens both devices of VRNICD_SOCKET=a:b in one process, makes
 * RC (and UD) QPs on each and connects them directly (QPN, PSN and GID
 * exchanged in memory, the IPv4-mapped GID, the port's active MTU), then
 * runs named cases, each printing "ok CASE", "FAIL CASE: why" or
 * "SKIP CASE: why". Exit status 1 on any failure; a 60 s alarm against
 * hangs. An optional argument is the active MTU the ports must report
 * (1024, 4096); VERBS_CASE=NAME runs one case (with setup and teardown).
 *
 * Cases, in order: the ibv_post_send opcodes rxe has, and the errors
 * programs meet (post_*, qp_err_flush), the same through ibv_wr_* (wr_*),
 * ibv_create_cq_ex's poll API (cq_ex_*), memory windows (mw_*), MR layouts
 * programs use (mr_*), CQ resize and completion channels (cq_*, channel),
 * SRQs (srq*), ibv_query_qp and UD address handles (query_qp, ud), and
 * fork after ibv_reg_mr (fork), path record marshalling (path_rec). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/ib_user_sa.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- cases (cases.h) ------------------------------------------------ */

#include "cases.h"

/* ZERO: a verb that returns 0 or an errno (some set errno and return -1). */
#define ZERO(call)                                                                                                 \
	do {                                                                                                       \
		int rc_ = (call);                                                                                  \
		if (rc_)                                                                                           \
			fail("%s: %s", #call, strerror(rc_ > 0 ? rc_ : errno));                                    \
	} while (0)

static void fill(void *p, size_t n, unsigned seed)
{
	uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 29u + i * 7u + (i >> 9) + 1u);
}

/* same: p holds fill(seed)'s bytes from position off of the pattern. */
static int same(const void *p, size_t n, unsigned seed, size_t off)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		size_t j = i + off;
		if (b[i] != (uint8_t)(seed * 29u + j * 7u + (j >> 9) + 1u))
			return 0;
	}
	return 1;
}

static int all(const void *p, size_t n, uint8_t v)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

static const char *wcop(enum ibv_wc_opcode o)
{
	static char buf[32];
	switch (o) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_BIND_MW: return "BIND_MW";
	case IBV_WC_LOCAL_INV: return "LOCAL_INV";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default:
		snprintf(buf, sizeof(buf), "opcode %d", (int)o);
		return buf;
	}
}

static int mtu_num(enum ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0; }

/* ---- devices, QPs, memory -------------------------------------------- */

#define ACC (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | \
	     IBV_ACCESS_MW_BIND)
#define QKEY 0x11111111u
#define BUFSZ (1u << 20)
#define WC_FLAGS IBV_WC_STANDARD_FLAGS
#define SEND_OPS                                                                                                   \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                      \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |              \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |                  \
	 IBV_QP_EX_WITH_SEND_WITH_INV)

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_device_attr attr;
	struct ibv_port_attr port;
	int gidx;
	union ibv_gid gid;
};

static struct ibv_device **devlist;
static struct dev dev[2];
static enum ibv_mtu want_mtu;

/* One end of a connection: a QP and its CQs (owned unless given). */
struct end {
	struct dev *d;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_cq *scq, *rcq;
	struct ibv_cq_ex *scqx, *rcqx;
	int own_scq, own_rcq;
	struct ibv_qp_cap cap;
	uint32_t psn;
	uint8_t rnr_retry;
};

struct qpopt {
	enum ibv_qp_type type; /* 0: RC */
	uint32_t max_wr, max_sge, max_inline;
	struct ibv_srq *srq;
	struct ibv_cq *scq, *rcq; /* given CQs */
	int ex;                   /* ibv_create_qp_ex with send ops (ibv_wr_*) */
	int cqex;                 /* CQs from ibv_create_cq_ex */
	int sig_all;              /* sq_sig_all */
	int no_rnr_retry;         /* rnr_retry 0 (else 7: for ever) */
};

/* a on device 0, b on device 1. */
struct pair {
	struct end a, b;
};

static struct pair P; /* the main RC pair */
static uint8_t *bufA, *bufB, *bufA2;
static struct ibv_mr *mrA, *mrB, *mrA2;

static struct ibv_mr *reg(struct dev *d, void *p, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, p, len, ACC);
	CHECK(mr, "ibv_reg_mr(%p, %zu): %s", p, len, strerror(errno));
	CHECK(mr->addr == p && mr->length == len && mr->pd == d->pd && mr->context == d->ctx,
	      "ibv_reg_mr: the MR says addr %p length %zu", mr->addr, mr->length);
	return mr;
}

static struct ibv_cq *new_cq(struct dev *d, int ex, struct ibv_cq_ex **cqx)
{
	if (ex) {
		struct ibv_cq_init_attr_ex ca = {.cqe = 256, .wc_flags = WC_FLAGS};
		*cqx = ibv_create_cq_ex(d->ctx, &ca);
		CHECK(*cqx, "ibv_create_cq_ex: %s", strerror(errno));
		return ibv_cq_ex_to_cq(*cqx);
	}
	struct ibv_cq *cq = ibv_create_cq(d->ctx, 256, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq: %s", strerror(errno));
	CHECK(cq->cqe >= 256, "ibv_create_cq(256): cqe %d", cq->cqe);
	return cq;
}

static void make_qp(struct end *e, struct dev *d, const struct qpopt *o)
{
	memset(e, 0, sizeof(*e));
	e->d = d;
	if (o->scq) {
		e->scq = o->scq;
	} else {
		e->scq = new_cq(d, o->cqex, &e->scqx);
		e->own_scq = 1;
	}
	if (o->rcq) {
		e->rcq = o->rcq;
	} else {
		e->rcq = new_cq(d, o->cqex, &e->rcqx);
		e->own_rcq = 1;
	}
	struct ibv_qp_init_attr_ex a = {
		.send_cq = e->scq,
		.recv_cq = e->rcq,
		.srq = o->srq,
		.sq_sig_all = o->sig_all,
		.qp_type = o->type ? o->type : IBV_QPT_RC,
		.cap = {.max_send_wr = o->max_wr ? o->max_wr : 64,
			.max_recv_wr = o->srq ? 0 : (o->max_wr ? o->max_wr : 64),
			.max_send_sge = o->max_sge ? o->max_sge : 4,
			.max_recv_sge = o->srq ? 0 : (o->max_sge ? o->max_sge : 4),
			.max_inline_data = o->max_inline ? o->max_inline : 256},
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = d->pd,
	};
	struct ibv_qp_cap want = a.cap;
	if (o->ex) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = SEND_OPS;
		e->qp = ibv_create_qp_ex(d->ctx, &a);
		CHECK(e->qp, "ibv_create_qp_ex: %s", strerror(errno));
		e->qpx = ibv_qp_to_qp_ex(e->qp);
		CHECK(e->qpx, "ibv_qp_to_qp_ex: NULL for a QP made with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS");
	} else {
		struct ibv_qp_init_attr ia = {.send_cq = a.send_cq, .recv_cq = a.recv_cq, .srq = a.srq,
					      .cap = a.cap, .qp_type = a.qp_type, .sq_sig_all = a.sq_sig_all};
		e->qp = ibv_create_qp(d->pd, &ia);
		CHECK(e->qp, "ibv_create_qp: %s", strerror(errno));
		a.cap = ia.cap;
	}
	e->cap = a.cap;
	CHECK(e->cap.max_send_wr >= want.max_send_wr && e->cap.max_recv_wr >= want.max_recv_wr &&
		      e->cap.max_send_sge >= want.max_send_sge && e->cap.max_recv_sge >= want.max_recv_sge &&
		      e->cap.max_inline_data >= want.max_inline_data,
	      "create_qp granted less than asked: send_wr %u sge %u inline %u recv_wr %u sge %u", e->cap.max_send_wr,
	      e->cap.max_send_sge, e->cap.max_inline_data, e->cap.max_recv_wr, e->cap.max_recv_sge);
	CHECK(e->qp->qp_num && e->qp->state == IBV_QPS_RESET && e->qp->pd == d->pd && e->qp->context == d->ctx &&
		      e->qp->send_cq == e->scq && e->qp->recv_cq == e->rcq && e->qp->srq == o->srq,
	      "the new ibv_qp's fields (qp_num %u, state %d)", e->qp->qp_num, e->qp->state);
	e->psn = (uint32_t)lrand48() & 0xffffff;
	e->rnr_retry = o->no_rnr_retry ? 0 : 7;
}

static void to_init(struct end *e)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (e->qp->qp_type == IBV_QPT_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	ZERO(ibv_modify_qp(e->qp, &a, mask));
}

static struct ibv_ah_attr ah_to(struct dev *from, struct dev *to)
{
	struct ibv_ah_attr ah = {.is_global = 1, .port_num = 1};
	ah.grh.dgid = to->gid;
	ah.grh.sgid_index = (uint8_t)from->gidx;
	ah.grh.hop_limit = 64;
	return ah;
}

static void to_rtr(struct end *e, struct end *peer)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	if (e->qp->qp_type == IBV_QPT_UD) {
		ZERO(ibv_modify_qp(e->qp, &a, IBV_QP_STATE));
		return;
	}
	a.path_mtu = e->d->port.active_mtu < peer->d->port.active_mtu ? e->d->port.active_mtu : peer->d->port.active_mtu;
	a.dest_qp_num = peer->qp->qp_num;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr = ah_to(e->d, peer->d);
	ZERO(ibv_modify_qp(e->qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
}

static void to_rts(struct end *e)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .sq_psn = e->psn};
	if (e->qp->qp_type == IBV_QPT_UD) {
		ZERO(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN));
		return;
	}
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = e->rnr_retry;
	a.max_rd_atomic = 4;
	ZERO(ibv_modify_qp(e->qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_MAX_QP_RD_ATOMIC));
	CHECK(e->qp->state == IBV_QPS_RTS, "ibv_qp.state %d after RTS", e->qp->state);
}

/* new_pair makes a connected pair; ob (if not NULL) is b's options. */
static void new_pair(struct pair *p, const struct qpopt *oa, const struct qpopt *ob)
{
	make_qp(&p->a, &dev[0], oa);
	make_qp(&p->b, &dev[1], ob ? ob : oa);
	to_init(&p->a);
	to_init(&p->b);
	to_rtr(&p->a, &p->b);
	to_rtr(&p->b, &p->a);
	to_rts(&p->a);
	to_rts(&p->b);
}

static void free_end(struct end *e)
{
	if (e->qp)
		ZERO(ibv_destroy_qp(e->qp));
	if (e->own_scq)
		ZERO(ibv_destroy_cq(e->scq));
	if (e->own_rcq)
		ZERO(ibv_destroy_cq(e->rcq));
	memset(e, 0, sizeof(*e));
}

static void free_pair(struct pair *p)
{
	free_end(&p->a);
	free_end(&p->b);
}

/* ---- posting and completions ------------------------------------------ */

static void post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, struct ibv_mr *mr)
{
	struct ibv_sge s = {.addr = (uintptr_t)addr, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = addr ? 1 : 0}, *bad = NULL;
	ZERO(ibv_post_recv(qp, &wr, &bad));
}

static void post_srq_recv(struct ibv_srq *srq, uint64_t id, void *addr, uint32_t len, struct ibv_mr *mr)
{
	struct ibv_sge s = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad = NULL;
	ZERO(ibv_post_srq_recv(srq, &wr, &bad));
}

static void post(struct end *e, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(e->qp, wr, &bad);
	CHECK(!err, "ibv_post_send (wr_id %" PRIu64 "): %s", bad ? bad->wr_id : 0, strerror(err));
}

/* send posts one signaled WR of one SGE (len 0: none). */
static void send_op(struct end *e, enum ibv_wr_opcode op, uint64_t id, void *addr, uint32_t len, struct ibv_mr *mr,
		    uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s = {.addr = (uintptr_t)addr, .length = len, .lkey = mr ? mr->lkey : 0};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = len ? 1 : 0, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	post(e, &wr);
}

static int poll_wc(struct ibv_cq *cq, struct ibv_wc *wc, unsigned ms)
{
	int64_t end = now_ms() + ms;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		if (n == 1)
			return 1;
		if (now_ms() > end)
			return 0;
	}
}

static void wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, const char *what)
{
	if (!poll_wc(cq, wc, 5000))
		fail("%s: no completion in 5 s", what);
}

/* expect takes the next completion of cq: successful, with this wr_id,
 * opcode and QP. */
static void expect(struct ibv_cq *cq, const char *what, uint64_t id, enum ibv_wc_opcode op, struct ibv_qp *qp,
		   struct ibv_wc *out)
{
	struct ibv_wc wc;
	wait_wc(cq, &wc, what);
	CHECK(wc.status == IBV_WC_SUCCESS, "%s: wr_id %" PRIu64 " status %s (vendor_err %u)", what, wc.wr_id,
	      ibv_wc_status_str(wc.status), wc.vendor_err);
	CHECK(wc.wr_id == id, "%s: wr_id %" PRIu64 ", want %" PRIu64 " (%s)", what, wc.wr_id, id, wcop(wc.opcode));
	CHECK(wc.opcode == op, "%s: opcode %s, want %s", what, wcop(wc.opcode), wcop(op));
	CHECK(wc.qp_num == qp->qp_num, "%s: qp_num %u, want %u", what, wc.qp_num, qp->qp_num);
	if (out)
		*out = wc;
}

static void expect_none(struct ibv_cq *cq, unsigned ms, const char *what)
{
	struct ibv_wc wc;
	if (poll_wc(cq, &wc, ms))
		fail("%s: unexpected completion wr_id %" PRIu64 " %s %s", what, wc.wr_id, ibv_wc_status_str(wc.status),
		     wcop(wc.opcode));
}

/* rdma runs one signaled RDMA WRITE or READ from e to completion. */
static void rdma(struct end *e, enum ibv_wr_opcode op, void *laddr, uint32_t len, struct ibv_mr *lmr, uint64_t raddr,
		 uint32_t rkey)
{
	static uint64_t id = 1000000;
	id++;
	send_op(e, op, id, laddr, len, lmr, raddr, rkey);
	expect(e->scq, op == IBV_WR_RDMA_READ ? "RDMA READ" : "RDMA WRITE", id,
	       op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE, e->qp, NULL);
}

/* rdma_status posts a WRITE and returns its completion status. */
static enum ibv_wc_status write_status(struct end *e, void *laddr, uint32_t len, struct ibv_mr *lmr, uint64_t raddr,
				       uint32_t rkey)
{
	send_op(e, IBV_WR_RDMA_WRITE, 777, laddr, len, lmr, raddr, rkey);
	struct ibv_wc wc;
	wait_wc(e->scq, &wc, "RDMA WRITE");
	CHECK(wc.wr_id == 777, "wr_id %" PRIu64 ", want 777", wc.wr_id);
	return wc.status;
}

static const uint8_t IMM[4] = {0xde, 0xad, 0x01, 0x02}; /* the __be32's bytes, as the sender writes them */

static __be32 imm_value(void)
{
	__be32 v;
	memcpy(&v, IMM, 4);
	return v;
}

static void check_imm(const char *what, unsigned flags, __be32 imm)
{
	CHECK(flags & IBV_WC_WITH_IMM, "%s: wc_flags %#x without IBV_WC_WITH_IMM", what, flags);
	CHECK(!memcmp(&imm, IMM, 4), "%s: imm_data bytes %02x %02x %02x %02x, want de ad 01 02", what,
	      ((uint8_t *)&imm)[0], ((uint8_t *)&imm)[1], ((uint8_t *)&imm)[2], ((uint8_t *)&imm)[3]);
	CHECK(be32toh(imm) == 0xdead0102, "%s: be32toh(imm_data) %#x", what, be32toh(imm));
}

/* ---- asynchronous events ---------------------------------------------- */

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int n = poll(&p, 1, ms);
	CHECK(n >= 0, "poll: %s", strerror(errno));
	return n == 1 && (p.revents & POLLIN);
}

/* drain_async takes the events that wait (O_NONBLOCK), reporting them. */
static void drain_async(struct ibv_context *ctx)
{
	int fl = fcntl(ctx->async_fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on async_fd");
	struct ibv_async_event ev;
	while (ibv_get_async_event(ctx, &ev) == 0) {
		printf("# %s: earlier async event %s\n", case_name, ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
	}
	CHECK(errno == EAGAIN, "ibv_get_async_event, O_NONBLOCK, nothing waiting: %s, want EAGAIN", strerror(errno));
	CHECK(fcntl(ctx->async_fd, F_SETFL, fl) == 0, "fcntl");
}

/* wait_event: the next event of type t within ms (1), or 0; other events
 * are reported and skipped. */
static int wait_event(struct ibv_context *ctx, enum ibv_event_type t, int ms, struct ibv_async_event *out)
{
	int64_t end = now_ms() + ms;
	for (;;) {
		int left = (int)(end - now_ms());
		if (left < 0 || !readable(ctx->async_fd, left))
			return 0;
		struct ibv_async_event ev;
		ZERO(ibv_get_async_event(ctx, &ev));
		ibv_ack_async_event(&ev);
		if (ev.event_type == t) {
			*out = ev;
			return 1;
		}
		printf("# %s: async event %s\n", case_name, ibv_event_type_str(ev.event_type));
	}
}

/* ---- setup ------------------------------------------------------------ */

static void gidstr(const union ibv_gid *g, char *s)
{
	inet_ntop(AF_INET6, g->raw, s, INET6_ADDRSTRLEN);
}

static void setup(void)
{
	for (int i = 0; i < 2; i++) {
		struct dev *d = &dev[i];
		const char *name = ibv_get_device_name(devlist[i]);
		d->ctx = ibv_open_device(devlist[i]);
		CHECK(d->ctx, "ibv_open_device(%s): %s", name, strerror(errno));
		ZERO(ibv_query_device(d->ctx, &d->attr));
		ZERO(ibv_query_port(d->ctx, 1, &d->port));
		CHECK(d->port.state == IBV_PORT_ACTIVE, "%s: port state %s", name, ibv_port_state_str(d->port.state));
		CHECK(d->port.link_layer == IBV_LINK_LAYER_ETHERNET, "%s: link layer %d", name, d->port.link_layer);
		CHECK(!want_mtu || d->port.active_mtu == want_mtu, "%s: active_mtu %d, want %d", name,
		      mtu_num(d->port.active_mtu), mtu_num(want_mtu));
		d->gidx = -1;
		for (int g = 0; g < d->port.gid_tbl_len && d->gidx < 0; g++) {
			static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
			union ibv_gid gid;
			if (ibv_query_gid(d->ctx, 1, g, &gid) == 0 && !memcmp(gid.raw, v4, 12)) {
				d->gidx = g;
				d->gid = gid;
			}
		}
		CHECK(d->gidx >= 0, "%s: no IPv4-mapped GID in %d entries", name, d->port.gid_tbl_len);
		struct ibv_gid_entry ge;
		ZERO(ibv_query_gid_ex(d->ctx, 1, (uint32_t)d->gidx, &ge, 0));
		CHECK(!memcmp(&ge.gid, &d->gid, 16) && ge.gid_index == (uint32_t)d->gidx && ge.port_num == 1 &&
			      ge.gid_type == IBV_GID_TYPE_ROCE_V2,
		      "%s: ibv_query_gid_ex of GID[%d]: index %u port %u type %u (want RoCE v2)", name, d->gidx,
		      ge.gid_index, ge.port_num, ge.gid_type);
		CHECK(d->attr.node_guid && d->attr.node_guid == ibv_get_device_guid(devlist[i]),
		      "%s: node_guid %#llx, ibv_get_device_guid %#llx", name,
		      (unsigned long long)be64toh(d->attr.node_guid),
		      (unsigned long long)be64toh(ibv_get_device_guid(devlist[i])));
		d->pd = ibv_alloc_pd(d->ctx);
		CHECK(d->pd, "ibv_alloc_pd: %s", strerror(errno));
		char g[INET6_ADDRSTRLEN];
		gidstr(&d->gid, g);
		printf("# device %d: %s, GID[%d] %s, active MTU %d, max_sge %d, max_qp_wr %d, atomic_cap %d, max_mw %d\n",
		       i, name, d->gidx, g, mtu_num(d->port.active_mtu), d->attr.max_sge, d->attr.max_qp_wr,
		       d->attr.atomic_cap, d->attr.max_mw);
	}
	CHECK(strcmp(ibv_get_device_name(devlist[0]), ibv_get_device_name(devlist[1])),
	      "both devices are named %s", ibv_get_device_name(devlist[0]));
	CHECK(memcmp(&dev[0].gid, &dev[1].gid, 16), "both devices have the same GID");
	CHECK(dev[0].attr.node_guid != dev[1].attr.node_guid, "both devices have the same node GUID");
	bufA = malloc(BUFSZ);
	bufB = malloc(BUFSZ);
	bufA2 = malloc(65536);
	CHECK(bufA && bufB && bufA2, "malloc");
	memset(bufA, 0, BUFSZ);
	memset(bufB, 0, BUFSZ);
	memset(bufA2, 0, 65536);
	mrA = reg(&dev[0], bufA, BUFSZ);
	mrB = reg(&dev[1], bufB, BUFSZ);
	mrA2 = reg(&dev[0], bufA2, 65536);
	new_pair(&P, &(struct qpopt){0}, NULL);
}

/* ---- 1. ibv_post_send ------------------------------------------------- */

static void c_post_send(void)
{
	memset(bufB, 0, 8192);
	fill(bufA, 100, 1);
	post_recv(P.b.qp, 100, bufB, 4096, mrB);
	send_op(&P.a, IBV_WR_SEND, 1, bufA, 100, mrA, 0, 0);
	struct ibv_wc wc;
	expect(P.a.scq, "sender", 1, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 100, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 100, "byte_len %u, want 100", wc.byte_len);
	CHECK(!(wc.wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)), "wc_flags %#x", wc.wc_flags);
	CHECK(same(bufB, 100, 1, 0) && all(bufB + 100, 100, 0), "data");
	/* A message of several packets. */
	fill(bufA, 70000, 2);
	post_recv(P.b.qp, 101, bufB, 80000, mrB);
	send_op(&P.a, IBV_WR_SEND, 2, bufA, 70000, mrA, 0, 0);
	expect(P.a.scq, "sender", 2, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 101, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 70000 && same(bufB, 70000, 2, 0), "70000-byte SEND: byte_len %u", wc.byte_len);
}

static void c_post_send_imm(void)
{
	fill(bufA, 300, 3);
	post_recv(P.b.qp, 110, bufB, 4096, mrB);
	post_recv(P.b.qp, 111, bufB + 4096, 4096, mrB);
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 300, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = imm_value()};
	post(&P.a, &wr);
	/* and one of no data */
	struct ibv_send_wr wr0 = {.wr_id = 4, .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
				  .imm_data = imm_value()};
	post(&P.a, &wr0);
	struct ibv_wc wc;
	expect(P.a.scq, "sender", 3, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.a.scq, "sender", 4, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 110, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 300 && same(bufB, 300, 3, 0), "byte_len %u or data", wc.byte_len);
	check_imm("receiver", wc.wc_flags, wc.imm_data);
	expect(P.b.rcq, "receiver (0 bytes)", 111, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 0, "0-byte SEND_WITH_IMM: byte_len %u", wc.byte_len);
	check_imm("receiver (0 bytes)", wc.wc_flags, wc.imm_data);
}

static void c_post_write(void)
{
	memset(bufB, 0, 80000);
	fill(bufA, 70000, 4);
	send_op(&P.a, IBV_WR_RDMA_WRITE, 5, bufA, 70000, mrA, (uintptr_t)bufB + 8, mrB->rkey);
	expect(P.a.scq, "writer", 5, IBV_WC_RDMA_WRITE, P.a.qp, NULL);
	CHECK(all(bufB, 8, 0) && same(bufB + 8, 70000, 4, 0) && all(bufB + 8 + 70000, 64, 0), "data");
	expect_none(P.b.rcq, 20, "the target of a WRITE");
	/* zero-length WRITE and READ */
	send_op(&P.a, IBV_WR_RDMA_WRITE, 1201, NULL, 0, NULL, (uintptr_t)bufB, mrB->rkey);
	send_op(&P.a, IBV_WR_RDMA_READ, 1202, NULL, 0, NULL, (uintptr_t)bufB, mrB->rkey);
	struct ibv_wc wc;
	expect(P.a.scq, "0-byte WRITE", 1201, IBV_WC_RDMA_WRITE, P.a.qp, NULL);
	expect(P.a.scq, "0-byte READ", 1202, IBV_WC_RDMA_READ, P.a.qp, &wc);
	CHECK(wc.byte_len == 0, "0-byte READ: byte_len %u", wc.byte_len);
	CHECK(all(bufB, 8, 0), "a 0-byte WRITE changed memory");
}

/* 16 READs in flight at once (max_rd_atomic 4): in order, all data. */
static void c_post_reads(void)
{
	fill(bufB + 100000, 16 * 5000, 33);
	memset(bufA + 100000, 0, 16 * 5000);
	struct ibv_sge s[16];
	struct ibv_send_wr w[16];
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 16; i++) {
		s[i] = (struct ibv_sge){(uintptr_t)bufA + 100000 + 5000 * (uint64_t)i, 5000, mrA->lkey};
		w[i].wr_id = 1100 + (uint64_t)i;
		w[i].sg_list = &s[i];
		w[i].num_sge = 1;
		w[i].opcode = IBV_WR_RDMA_READ;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].wr.rdma.remote_addr = (uintptr_t)bufB + 100000 + 5000 * (uint64_t)i;
		w[i].wr.rdma.rkey = mrB->rkey;
		w[i].next = i < 15 ? &w[i + 1] : NULL;
	}
	post(&P.a, w);
	for (int i = 0; i < 16; i++) {
		struct ibv_wc wc;
		expect(P.a.scq, "READ", 1100 + (uint64_t)i, IBV_WC_RDMA_READ, P.a.qp, &wc);
		CHECK(wc.byte_len == 5000, "READ %d: byte_len %u", i, wc.byte_len);
	}
	CHECK(same(bufA + 100000, 16 * 5000, 33, 0), "READ data");
}

static void c_post_write_imm(void)
{
	memset(bufB, 0, 8192);
	fill(bufA, 3000, 5);
	post_recv(P.b.qp, 120, NULL, 0, NULL); /* a WRITE_WITH_IMM takes a receive WR, no buffer */
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 3000, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 6, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED, .imm_data = imm_value()};
	wr.wr.rdma.remote_addr = (uintptr_t)bufB + 1000;
	wr.wr.rdma.rkey = mrB->rkey;
	post(&P.a, &wr);
	struct ibv_wc wc;
	expect(P.a.scq, "writer", 6, IBV_WC_RDMA_WRITE, P.a.qp, NULL);
	expect(P.b.rcq, "target", 120, IBV_WC_RECV_RDMA_WITH_IMM, P.b.qp, &wc);
	CHECK(wc.byte_len == 3000, "byte_len %u, want 3000", wc.byte_len);
	check_imm("target", wc.wc_flags, wc.imm_data);
	CHECK(all(bufB, 1000, 0) && same(bufB + 1000, 3000, 5, 0), "data");
}

static void c_post_read(void)
{
	memset(bufA, 0, 80000);
	fill(bufB + 4096, 70000, 6);
	send_op(&P.a, IBV_WR_RDMA_READ, 7, bufA + 16, 70000, mrA, (uintptr_t)bufB + 4096, mrB->rkey);
	struct ibv_wc wc;
	expect(P.a.scq, "reader", 7, IBV_WC_RDMA_READ, P.a.qp, &wc);
	CHECK(wc.byte_len == 70000, "byte_len %u, want 70000", wc.byte_len);
	CHECK(all(bufA, 16, 0) && same(bufA + 16, 70000, 6, 0) && all(bufA + 16 + 70000, 64, 0), "data");
}

static void atomic_wr(struct ibv_send_wr *wr, enum ibv_wr_opcode op, uint64_t id, struct ibv_sge *s, uint64_t raddr,
		      uint64_t cmp_add, uint64_t swap)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = id;
	wr->sg_list = s;
	wr->num_sge = 1;
	wr->opcode = op;
	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr.atomic.remote_addr = raddr;
	wr->wr.atomic.rkey = mrB->rkey;
	wr->wr.atomic.compare_add = cmp_add;
	wr->wr.atomic.swap = swap;
}

static void c_post_atomic(void)
{
	uint64_t *remote = (uint64_t *)(void *)(bufB + 65536), *local = (uint64_t *)(void *)(bufA + 256);
	remote[0] = 0x1111222233334444ull;
	remote[1] = 100;
	local[0] = local[1] = local[2] = 0;
	struct ibv_sge s0 = {.addr = (uintptr_t)&local[0], .length = 8, .lkey = mrA->lkey};
	struct ibv_sge s1 = {.addr = (uintptr_t)&local[1], .length = 8, .lkey = mrA->lkey};
	struct ibv_sge s2 = {.addr = (uintptr_t)&local[2], .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr w;
	struct ibv_wc wc;
	/* compare matches: swapped */
	atomic_wr(&w, IBV_WR_ATOMIC_CMP_AND_SWP, 8, &s0, (uintptr_t)&remote[0], 0x1111222233334444ull,
		  0x5555666677778888ull);
	post(&P.a, &w);
	expect(P.a.scq, "CMP_AND_SWP", 8, IBV_WC_COMP_SWAP, P.a.qp, &wc);
	CHECK(wc.byte_len == 8, "CMP_AND_SWP byte_len %u, want 8", wc.byte_len);
	CHECK(local[0] == 0x1111222233334444ull, "CMP_AND_SWP returned %#" PRIx64, local[0]);
	CHECK(remote[0] == 0x5555666677778888ull, "CMP_AND_SWP left %#" PRIx64, remote[0]);
	/* compare differs: unchanged, the value returned */
	atomic_wr(&w, IBV_WR_ATOMIC_CMP_AND_SWP, 9, &s1, (uintptr_t)&remote[0], 1, 2);
	post(&P.a, &w);
	expect(P.a.scq, "CMP_AND_SWP (no match)", 9, IBV_WC_COMP_SWAP, P.a.qp, NULL);
	CHECK(local[1] == 0x5555666677778888ull && remote[0] == 0x5555666677778888ull,
	      "CMP_AND_SWP without a match: returned %#" PRIx64 ", left %#" PRIx64, local[1], remote[0]);
	atomic_wr(&w, IBV_WR_ATOMIC_FETCH_AND_ADD, 10, &s2, (uintptr_t)&remote[1], 23, 0);
	post(&P.a, &w);
	expect(P.a.scq, "FETCH_AND_ADD", 10, IBV_WC_FETCH_ADD, P.a.qp, &wc);
	CHECK(wc.byte_len == 8, "FETCH_AND_ADD byte_len %u, want 8", wc.byte_len);
	CHECK(local[2] == 100 && remote[1] == 123, "FETCH_AND_ADD returned %" PRIu64 ", left %" PRIu64, local[2],
	      remote[1]);
	/* adding wraps at 64 bits */
	remote[1] = UINT64_MAX;
	atomic_wr(&w, IBV_WR_ATOMIC_FETCH_AND_ADD, 11, &s2, (uintptr_t)&remote[1], 2, 0);
	post(&P.a, &w);
	expect(P.a.scq, "FETCH_AND_ADD", 11, IBV_WC_FETCH_ADD, P.a.qp, NULL);
	CHECK(local[2] == UINT64_MAX && remote[1] == 1, "FETCH_AND_ADD wrap: returned %#" PRIx64 ", left %" PRIu64,
	      local[2], remote[1]);
}

/* bind2 binds a type 2 window over [addr, addr+len) of mr through e's QP
 * (IBV_WR_BIND_MW) and returns its new rkey. */
static uint32_t bind2(struct end *e, struct ibv_mw *mw, struct ibv_mr *mr, void *addr, uint64_t len, int access)
{
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {.wr_id = 50, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = (uintptr_t)addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = (unsigned)access;
	post(e, &wr);
	expect(e->scq, "BIND_MW", 50, IBV_WC_BIND_MW, e->qp, NULL);
	return rkey;
}

static struct ibv_mw *alloc_mw(struct dev *d, enum ibv_mw_type t)
{
	struct ibv_mw *mw = ibv_alloc_mw(d->pd, t);
	CHECK(mw, "ibv_alloc_mw(type %d): %s", t, strerror(errno));
	CHECK(mw->type == t && mw->pd == d->pd && mw->context == d->ctx, "ibv_mw fields");
	return mw;
}

static void c_post_send_inv(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	uint8_t *win = bufB + 200000;
	memset(win, 0, 4096);
	uint32_t rkey = bind2(&q.b, mw, mrB, win, 4096, IBV_ACCESS_REMOTE_WRITE);
	fill(bufA, 64, 7);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 64, mrA, (uintptr_t)win, rkey);
	CHECK(same(win, 64, 7, 0), "a WRITE through the bound window did not land");
	post_recv(q.b.qp, 130, bufB, 4096, mrB);
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 10, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 12, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey};
	post(&q.a, &wr);
	struct ibv_wc wc;
	expect(q.a.scq, "sender", 12, IBV_WC_SEND, q.a.qp, NULL);
	expect(q.b.rcq, "receiver", 130, IBV_WC_RECV, q.b.qp, &wc);
	CHECK(wc.byte_len == 10, "byte_len %u", wc.byte_len);
	CHECK(wc.wc_flags & IBV_WC_WITH_INV, "wc_flags %#x without IBV_WC_WITH_INV", wc.wc_flags);
	CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "wc_flags %#x with IBV_WC_WITH_IMM", wc.wc_flags);
	CHECK(wc.invalidated_rkey == rkey, "invalidated_rkey %#x, want %#x", wc.invalidated_rkey, rkey);
	/* The window is invalid now: the peer's access fails. */
	enum ibv_wc_status st = write_status(&q.a, bufA, 64, mrA, (uintptr_t)win, rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE through the invalidated window: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

static void c_post_local_inv(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	uint8_t *win = bufB + 200000;
	uint32_t rkey = bind2(&q.b, mw, mrB, win, 4096, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	rdma(&q.a, IBV_WR_RDMA_READ, bufA, 64, mrA, (uintptr_t)win, rkey);
	struct ibv_send_wr wr = {.wr_id = 13, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				 .invalidate_rkey = rkey};
	post(&q.b, &wr);
	expect(q.b.scq, "LOCAL_INV", 13, IBV_WC_LOCAL_INV, q.b.qp, NULL);
	enum ibv_wc_status st = write_status(&q.a, bufA, 64, mrA, (uintptr_t)win, rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE through the invalidated window: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

static void c_post_inline(void)
{
	uint8_t src[300];
	fill(src, sizeof(src), 8);
	memset(bufB, 0, 8192);
	post_recv(P.b.qp, 140, bufB, 4096, mrB);
	post_recv(P.b.qp, 141, bufB + 4096, 4096, mrB);
	/* one SGE, not registered (lkey 0); the buffer is reused at once */
	struct ibv_sge s = {.addr = (uintptr_t)src, .length = 200, .lkey = 0};
	struct ibv_send_wr wr = {.wr_id = 14, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	post(&P.a, &wr);
	memset(src, 0xee, 200);
	/* two SGEs gathered */
	fill(src, sizeof(src), 9);
	struct ibv_sge s2[2] = {{.addr = (uintptr_t)src + 250, .length = 50}, {.addr = (uintptr_t)src, .length = 100}};
	struct ibv_send_wr wr2 = {.wr_id = 15, .sg_list = s2, .num_sge = 2, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	post(&P.a, &wr2);
	/* an inline RDMA WRITE */
	struct ibv_sge s3 = {.addr = (uintptr_t)src + 100, .length = 64};
	struct ibv_send_wr wr3 = {.wr_id = 16, .sg_list = &s3, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE};
	wr3.wr.rdma.remote_addr = (uintptr_t)bufB + 8192;
	wr3.wr.rdma.rkey = mrB->rkey;
	post(&P.a, &wr3);
	memset(src, 0xee, sizeof(src));
	struct ibv_wc wc;
	expect(P.a.scq, "inline SEND", 14, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.a.scq, "inline SEND, 2 SGEs", 15, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.a.scq, "inline WRITE", 16, IBV_WC_RDMA_WRITE, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 140, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 200 && same(bufB, 200, 8, 0), "inline SEND: byte_len %u or data", wc.byte_len);
	expect(P.b.rcq, "receiver", 141, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 150 && same(bufB + 4096, 50, 9, 250) && same(bufB + 4096 + 50, 100, 9, 0),
	      "inline SEND of 2 SGEs: byte_len %u or data", wc.byte_len);
	CHECK(same(bufB + 8192, 64, 9, 100), "inline WRITE: data");
	/* more than max_inline_data is refused at post time */
	uint8_t *big = malloc(P.a.cap.max_inline_data + 1);
	struct ibv_sge sb = {.addr = (uintptr_t)big, .length = P.a.cap.max_inline_data + 1};
	struct ibv_send_wr wrb = {.wr_id = 17, .sg_list = &sb, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE},
			   *bad = NULL;
	int err = ibv_post_send(P.a.qp, &wrb, &bad);
	free(big);
	CHECK(err && bad == &wrb, "an inline SEND over max_inline_data (%u) was posted", P.a.cap.max_inline_data);
	expect_none(P.a.scq, 20, "after a refused post");
}

static void c_post_sge_list(void)
{
	memset(bufB, 0, 16384);
	fill(bufA, 100, 10);
	fill(bufA2 + 7, 1, 11);
	fill(bufA + 5000, 2000, 12);
	struct ibv_sge g[3] = {{.addr = (uintptr_t)bufA, .length = 100, .lkey = mrA->lkey},
			       {.addr = (uintptr_t)bufA2 + 7, .length = 1, .lkey = mrA2->lkey},
			       {.addr = (uintptr_t)bufA + 5000, .length = 2000, .lkey = mrA->lkey}};
	struct ibv_sge sc[3] = {{.addr = (uintptr_t)bufB, .length = 50, .lkey = mrB->lkey},
				{.addr = (uintptr_t)bufB + 4096, .length = 1000, .lkey = mrB->lkey},
				{.addr = (uintptr_t)bufB + 8192, .length = 2000, .lkey = mrB->lkey}};
	struct ibv_recv_wr rw = {.wr_id = 150, .sg_list = sc, .num_sge = 3}, *rbad;
	ZERO(ibv_post_recv(P.b.qp, &rw, &rbad));
	struct ibv_send_wr wr = {.wr_id = 18, .sg_list = g, .num_sge = 3, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	post(&P.a, &wr);
	struct ibv_wc wc;
	expect(P.a.scq, "sender", 18, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 150, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 2101, "byte_len %u, want 2101", wc.byte_len);
	/* the message: 100 of seed 10, 1 of seed 11, 2000 of seed 12; scattered 50 | 1000 | 1051 */
	uint8_t msg[2101];
	fill(msg, 100, 10);
	fill(msg + 100, 1, 11);
	fill(msg + 101, 2000, 12);
	CHECK(!memcmp(bufB, msg, 50) && !memcmp(bufB + 4096, msg + 50, 1000) &&
		      !memcmp(bufB + 8192, msg + 1050, 1051) && all(bufB + 8192 + 1051, 100, 0),
	      "scattered data");
	/* WRITE gathering two SGEs, READ scattering into two */
	memset(bufB + 20000, 0, 4096);
	struct ibv_send_wr ww = {.wr_id = 19, .sg_list = g, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	ww.wr.rdma.remote_addr = (uintptr_t)bufB + 20000;
	ww.wr.rdma.rkey = mrB->rkey;
	post(&P.a, &ww);
	expect(P.a.scq, "WRITE of 2 SGEs", 19, IBV_WC_RDMA_WRITE, P.a.qp, NULL);
	CHECK(!memcmp(bufB + 20000, msg, 101) && all(bufB + 20101, 100, 0), "gathered WRITE data");
	fill(bufB + 30000, 3000, 13);
	memset(bufA + 40000, 0, 8192);
	memset(bufA2 + 100, 0, 1000);
	struct ibv_sge rs[2] = {{.addr = (uintptr_t)bufA2 + 100, .length = 500, .lkey = mrA2->lkey},
				{.addr = (uintptr_t)bufA + 40000, .length = 2500, .lkey = mrA->lkey}};
	struct ibv_send_wr rr = {.wr_id = 20, .sg_list = rs, .num_sge = 2, .opcode = IBV_WR_RDMA_READ,
				 .send_flags = IBV_SEND_SIGNALED};
	rr.wr.rdma.remote_addr = (uintptr_t)bufB + 30000;
	rr.wr.rdma.rkey = mrB->rkey;
	post(&P.a, &rr);
	expect(P.a.scq, "READ into 2 SGEs", 20, IBV_WC_RDMA_READ, P.a.qp, &wc);
	CHECK(wc.byte_len == 3000, "READ byte_len %u, want 3000", wc.byte_len);
	CHECK(same(bufA2 + 100, 500, 13, 0) && same(bufA + 40000, 2500, 13, 500) && all(bufA2 + 600, 100, 0) &&
		      all(bufA + 42500, 100, 0),
	      "scattered READ data");
}

static void c_post_chain(void)
{
	memset(bufB, 0, 16384);
	fill(bufA, 1000, 14);
	fill(bufA + 1000, 1000, 15);
	fill(bufA + 2000, 500, 16);
	fill(bufB + 12000, 300, 17);
	uint64_t *ctr = (uint64_t *)(void *)(bufB + 65536 + 64);
	*ctr = 7;
	post_recv(P.b.qp, 160, NULL, 0, NULL);
	post_recv(P.b.qp, 161, bufB + 8192, 1024, mrB);
	struct ibv_sge s[5] = {{(uintptr_t)bufA, 1000, mrA->lkey},
			       {(uintptr_t)bufA + 1000, 1000, mrA->lkey},
			       {(uintptr_t)bufA + 2000, 500, mrA->lkey},
			       {(uintptr_t)bufA + 3000, 300, mrA->lkey},
			       {(uintptr_t)bufA + 4000, 8, mrA->lkey}};
	struct ibv_send_wr w[5];
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 5; i++) {
		w[i].wr_id = 21 + (uint64_t)i;
		w[i].sg_list = &s[i];
		w[i].num_sge = 1;
		w[i].next = i < 4 ? &w[i + 1] : NULL;
	}
	w[0].opcode = IBV_WR_RDMA_WRITE; /* unsignaled */
	w[0].wr.rdma.remote_addr = (uintptr_t)bufB;
	w[0].wr.rdma.rkey = mrB->rkey;
	w[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM; /* unsignaled */
	w[1].imm_data = imm_value();
	w[1].wr.rdma.remote_addr = (uintptr_t)bufB + 1000;
	w[1].wr.rdma.rkey = mrB->rkey;
	w[2].opcode = IBV_WR_SEND;
	w[2].send_flags = IBV_SEND_SIGNALED;
	w[3].opcode = IBV_WR_RDMA_READ;
	w[3].send_flags = IBV_SEND_SIGNALED;
	w[3].wr.rdma.remote_addr = (uintptr_t)bufB + 12000;
	w[3].wr.rdma.rkey = mrB->rkey;
	w[4].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w[4].send_flags = IBV_SEND_SIGNALED;
	w[4].wr.atomic.remote_addr = (uintptr_t)ctr;
	w[4].wr.atomic.rkey = mrB->rkey;
	w[4].wr.atomic.compare_add = 5;
	post(&P.a, w);
	struct ibv_wc wc;
	expect(P.a.scq, "chain", 23, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.a.scq, "chain", 24, IBV_WC_RDMA_READ, P.a.qp, NULL);
	expect(P.a.scq, "chain", 25, IBV_WC_FETCH_ADD, P.a.qp, NULL);
	expect_none(P.a.scq, 20, "chain (unsignaled WRs)");
	expect(P.b.rcq, "chain target", 160, IBV_WC_RECV_RDMA_WITH_IMM, P.b.qp, &wc);
	CHECK(wc.byte_len == 1000, "WRITE_WITH_IMM byte_len %u", wc.byte_len);
	expect(P.b.rcq, "chain target", 161, IBV_WC_RECV, P.b.qp, &wc);
	CHECK(wc.byte_len == 500 && same(bufB + 8192, 500, 16, 0), "SEND byte_len %u or data", wc.byte_len);
	CHECK(same(bufB, 1000, 14, 0) && same(bufB + 1000, 1000, 15, 0), "WRITE data");
	CHECK(same(bufA + 3000, 300, 17, 0), "READ data");
	CHECK(*ctr == 12 && *(uint64_t *)(void *)(bufA + 4000) == 7, "FETCH_AND_ADD: %" PRIu64, *ctr);
}

/* A chain with a bad WR in the middle: the WRs before it are posted, *bad
 * names it, nothing from it on is. */
static void c_post_bad_wr(void)
{
	fill(bufA, 64, 18);
	post_recv(P.b.qp, 170, bufB, 4096, mrB);
	post_recv(P.b.qp, 171, bufB + 4096, 4096, mrB);
	struct ibv_sge s[8];
	for (int i = 0; i < 8; i++)
		s[i] = (struct ibv_sge){(uintptr_t)bufA, 8, mrA->lkey};
	struct ibv_send_wr w[3];
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 3; i++) {
		w[i].wr_id = 30 + (uint64_t)i;
		w[i].sg_list = s;
		w[i].num_sge = 1;
		w[i].opcode = IBV_WR_SEND;
		w[i].send_flags = IBV_SEND_SIGNALED;
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	CHECK(P.a.cap.max_send_sge < 8, "max_send_sge %u", P.a.cap.max_send_sge);
	w[1].num_sge = (int)P.a.cap.max_send_sge + 1;
	struct ibv_send_wr *bad = NULL;
	int err = ibv_post_send(P.a.qp, w, &bad);
	CHECK(err, "a chain with num_sge over max_send_sge was posted whole");
	CHECK(bad == &w[1], "bad_wr is WR %d, want the second", bad ? (int)(bad - w) : -1);
	expect(P.a.scq, "the WR before the bad one", 30, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 170, IBV_WC_RECV, P.b.qp, NULL);
	expect_none(P.a.scq, 20, "the WRs from the bad one on");
	send_op(&P.a, IBV_WR_SEND, 33, bufA, 8, mrA, 0, 0);
	expect(P.a.scq, "the next SEND", 33, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 171, IBV_WC_RECV, P.b.qp, NULL);
}

/* An atomic at an address not 8-byte aligned: Invalid Request (C9-...). */
static void c_post_atomic_misaligned(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	uint64_t *local = (uint64_t *)(void *)(bufA + 256);
	struct ibv_sge s = {.addr = (uintptr_t)local, .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr w;
	atomic_wr(&w, IBV_WR_ATOMIC_FETCH_AND_ADD, 1300, &s, (uintptr_t)bufB + 65536 + 4, 1, 0);
	post(&q.a, &w);
	struct ibv_wc wc;
	wait_wc(q.a.scq, &wc, "misaligned FETCH_AND_ADD");
	CHECK(wc.wr_id == 1300 && wc.status == IBV_WC_REM_INV_REQ_ERR,
	      "misaligned FETCH_AND_ADD: status %s, want REM_INV_REQ_ERR", ibv_wc_status_str(wc.status));
	free_pair(&q);
}

/* ENOMEM at max_send_wr WRs not completed (the peer has no receive: the
 * SENDs wait in RNR retries) and at max_recv_wr receives. */
static void c_post_queue_full(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){.max_wr = 8}, NULL);
	uint32_t m = q.a.cap.max_send_wr;
	CHECK(m >= 8 && m <= 64 && q.b.cap.max_recv_wr >= m, "max_send_wr %u max_recv_wr %u", m, q.b.cap.max_recv_wr);
	for (uint32_t i = 0; i < m; i++)
		send_op(&q.a, IBV_WR_SEND, 1400 + i, bufA, 8, mrA, 0, 0);
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 1499, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad = NULL;
	int err = ibv_post_send(q.a.qp, &wr, &bad);
	CHECK(err == ENOMEM && bad == &wr, "post_send past max_send_wr (%u): %s, want ENOMEM", m, strerror(err));
	expect_none(q.a.scq, 20, "SENDs without a receive (RNR)");
	for (uint32_t i = 0; i < m; i++)
		post_recv(q.b.qp, 1500 + i, bufB + 64 * i, 64, mrB);
	for (uint32_t i = 0; i < m; i++) {
		expect(q.a.scq, "sender", 1400 + i, IBV_WC_SEND, q.a.qp, NULL);
		expect(q.b.rcq, "receiver", 1500 + i, IBV_WC_RECV, q.b.qp, NULL);
	}
	post_recv(q.b.qp, 1598, bufB, 64, mrB);
	ZERO(ibv_post_send(q.a.qp, &wr, &bad));
	expect(q.a.scq, "sender (after the queue drained)", 1499, IBV_WC_SEND, q.a.qp, NULL);
	expect(q.b.rcq, "receiver", 1598, IBV_WC_RECV, q.b.qp, NULL);
	/* a receive queue holds max_recv_wr */
	uint32_t r = q.a.cap.max_recv_wr;
	for (uint32_t i = 0; i < r; i++)
		post_recv(q.a.qp, 1600 + i, bufA + 64 * i, 64, mrA);
	struct ibv_sge rs = {.addr = (uintptr_t)bufA, .length = 64, .lkey = mrA->lkey};
	struct ibv_recv_wr rw = {.wr_id = 1699, .sg_list = &rs, .num_sge = 1}, *rbad = NULL;
	err = ibv_post_recv(q.a.qp, &rw, &rbad);
	CHECK(err == ENOMEM && rbad == &rw, "post_recv past max_recv_wr (%u): %s, want ENOMEM", r, strerror(err));
	free_pair(&q);
}

/* sq_sig_all: every WR completes, signaled or not. */
static void c_post_sig_all(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){.sig_all = 1}, &(struct qpopt){0});
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr w[2] = {{.wr_id = 1700, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE},
				   {.wr_id = 1701, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_READ}};
	w[0].next = &w[1];
	w[0].wr.rdma.remote_addr = w[1].wr.rdma.remote_addr = (uintptr_t)bufB;
	w[0].wr.rdma.rkey = w[1].wr.rdma.rkey = mrB->rkey;
	post(&q.a, w);
	expect(q.a.scq, "unsignaled WRITE, sq_sig_all", 1700, IBV_WC_RDMA_WRITE, q.a.qp, NULL);
	expect(q.a.scq, "unsignaled READ, sq_sig_all", 1701, IBV_WC_RDMA_READ, q.a.qp, NULL);
	free_pair(&q);
}

/* A SEND longer than the receive: LOC_LEN_ERR at the receiver, Remote
 * Invalid Request at the sender. */
static void c_post_recv_too_small(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	post_recv(q.b.qp, 1800, bufB, 16, mrB);
	send_op(&q.a, IBV_WR_SEND, 1801, bufA, 100, mrA, 0, 0);
	struct ibv_wc wc;
	wait_wc(q.b.rcq, &wc, "receiver");
	CHECK(wc.wr_id == 1800 && wc.status == IBV_WC_LOC_LEN_ERR && wc.qp_num == q.b.qp->qp_num,
	      "receiver: wr_id %" PRIu64 " status %s, want LOC_LEN_ERR", wc.wr_id, ibv_wc_status_str(wc.status));
	wait_wc(q.a.scq, &wc, "sender");
	CHECK(wc.wr_id == 1801 && wc.status == IBV_WC_REM_INV_REQ_ERR,
	      "sender: wr_id %" PRIu64 " status %s, want REM_INV_REQ_ERR", wc.wr_id, ibv_wc_status_str(wc.status));
	free_pair(&q);
}

/* No receive and rnr_retry 0: RNR_RETRY_EXC_ERR. */
static void c_post_rnr(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){.no_rnr_retry = 1}, &(struct qpopt){0});
	send_op(&q.a, IBV_WR_SEND, 1900, bufA, 8, mrA, 0, 0);
	struct ibv_wc wc;
	wait_wc(q.a.scq, &wc, "sender");
	CHECK(wc.wr_id == 1900 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "status %s, want RNR_RETRY_EXC_ERR",
	      ibv_wc_status_str(wc.status));
	free_pair(&q);
}

/* A QP moved to ERR: posted receives come back IBV_WC_WR_FLUSH_ERR, in
 * order; WRs posted in ERR are flushed too. */
static void c_qp_err_flush(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	for (int i = 0; i < 3; i++)
		post_recv(q.b.qp, 2000 + (uint64_t)i, bufB + 64 * i, 64, mrB);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	ZERO(ibv_modify_qp(q.b.qp, &a, IBV_QP_STATE));
	for (int i = 0; i < 3; i++) {
		struct ibv_wc wc;
		wait_wc(q.b.rcq, &wc, "flushed receive");
		CHECK(wc.wr_id == 2000 + (uint64_t)i && wc.status == IBV_WC_WR_FLUSH_ERR && wc.qp_num == q.b.qp->qp_num,
		      "receive %d: wr_id %" PRIu64 " status %s qp_num %u", i, wc.wr_id, ibv_wc_status_str(wc.status),
		      wc.qp_num);
	}
	send_op(&q.b, IBV_WR_SEND, 2010, bufB, 8, mrB, 0, 0);
	post_recv(q.b.qp, 2011, bufB, 64, mrB);
	struct ibv_wc wc;
	wait_wc(q.b.scq, &wc, "a SEND posted in ERR");
	CHECK(wc.wr_id == 2010 && wc.status == IBV_WC_WR_FLUSH_ERR, "a SEND posted in ERR: %s",
	      ibv_wc_status_str(wc.status));
	wait_wc(q.b.rcq, &wc, "a receive posted in ERR");
	CHECK(wc.wr_id == 2011 && wc.status == IBV_WC_WR_FLUSH_ERR, "a receive posted in ERR: %s",
	      ibv_wc_status_str(wc.status));
	free_pair(&q);
}

/* ---- 2 and 3: ibv_wr_* and ibv_create_cq_ex ---------------------------- */

static struct pair X; /* ibv_create_qp_ex QPs, ibv_create_cq_ex CQs */

struct xwc {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp;
	unsigned flags;
	__be32 imm;
};

static void xread(struct ibv_cq_ex *cq, struct xwc *w)
{
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->src_qp = ibv_wc_read_src_qp(cq);
	w->flags = ibv_wc_read_wc_flags(cq);
	w->imm = (w->flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)) ? ibv_wc_read_imm_data(cq) : 0;
}

/* xpoll takes one completion through start_poll/end_poll. */
static void xpoll(struct ibv_cq_ex *cq, struct xwc *w, const char *what)
{
	struct ibv_poll_cq_attr pa = {0};
	int64_t end = now_ms() + 5000;
	for (;;) {
		int r = ibv_start_poll(cq, &pa);
		if (r == 0)
			break;
		CHECK(r == ENOENT, "%s: ibv_start_poll: %s", what, strerror(r));
		if (now_ms() > end)
			fail("%s: no completion in 5 s", what);
	}
	xread(cq, w);
	ibv_end_poll(cq);
}

static void xexpect(struct ibv_cq_ex *cq, const char *what, uint64_t id, enum ibv_wc_opcode op, struct ibv_qp *qp,
		    struct xwc *out)
{
	struct xwc w;
	xpoll(cq, &w, what);
	CHECK(w.status == IBV_WC_SUCCESS, "%s: wr_id %" PRIu64 " status %s", what, w.wr_id, ibv_wc_status_str(w.status));
	CHECK(w.wr_id == id, "%s: wr_id %" PRIu64 ", want %" PRIu64, what, w.wr_id, id);
	CHECK(w.opcode == op, "%s: opcode %s, want %s", what, wcop(w.opcode), wcop(op));
	CHECK(w.qp_num == qp->qp_num, "%s: qp_num %u, want %u", what, w.qp_num, qp->qp_num);
	if (out)
		*out = w;
}

static void xexpect_none(struct ibv_cq_ex *cq, unsigned ms, const char *what)
{
	struct ibv_poll_cq_attr pa = {0};
	int64_t end = now_ms() + ms;
	while (now_ms() <= end) {
		int r = ibv_start_poll(cq, &pa);
		if (r == 0) {
			struct xwc w;
			xread(cq, &w);
			ibv_end_poll(cq);
			fail("%s: unexpected completion wr_id %" PRIu64 " %s", what, w.wr_id, wcop(w.opcode));
		}
	}
}

static void c_wr_setup(void)
{
	struct qpopt o = {.ex = 1, .cqex = 1};
	new_pair(&X, &o, NULL);
	/* a QP made without send_ops_flags has no ibv_qp_ex */
	CHECK(!ibv_qp_to_qp_ex(P.a.qp), "ibv_qp_to_qp_ex of a QP made without send_ops_flags is not NULL");
}

static void c_wr_send(void)
{
	struct ibv_qp_ex *x = X.a.qpx;
	fill(bufA, 500, 20);
	memset(bufB, 0, 8192);
	post_recv(X.b.qp, 200, bufB, 4096, mrB);
	post_recv(X.b.qp, 201, bufB + 4096, 4096, mrB);
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 500);
	x->wr_id = 41;
	ibv_wr_send_imm(x, imm_value());
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 20);
	ZERO(ibv_wr_complete(x));
	struct xwc w;
	xexpect(X.a.scqx, "sender", 40, IBV_WC_SEND, X.a.qp, NULL);
	xexpect(X.a.scqx, "sender", 41, IBV_WC_SEND, X.a.qp, NULL);
	xexpect(X.b.rcqx, "receiver", 200, IBV_WC_RECV, X.b.qp, &w);
	CHECK(w.byte_len == 500 && same(bufB, 500, 20, 0), "wr_send: byte_len %u or data", w.byte_len);
	CHECK(!(w.flags & IBV_WC_WITH_IMM), "wr_send: wc_flags %#x", w.flags);
	xexpect(X.b.rcqx, "receiver", 201, IBV_WC_RECV, X.b.qp, &w);
	CHECK(w.byte_len == 20 && same(bufB + 4096, 20, 20, 0), "wr_send_imm: byte_len %u or data", w.byte_len);
	check_imm("wr_send_imm (read_imm_data)", w.flags, w.imm);
}

static void c_wr_rdma(void)
{
	struct ibv_qp_ex *x = X.a.qpx;
	fill(bufA, 9000, 21);
	memset(bufB, 0, 20000);
	fill(bufB + 50000, 6000, 22);
	memset(bufA + 20000, 0, 8000);
	post_recv(X.b.qp, 210, NULL, 0, NULL);
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 42;
	ibv_wr_rdma_write(x, mrB->rkey, (uintptr_t)bufB + 4);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 9000);
	x->wr_id = 43;
	ibv_wr_rdma_write_imm(x, mrB->rkey, (uintptr_t)bufB + 10000, imm_value());
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 3333);
	x->wr_id = 44;
	ibv_wr_rdma_read(x, mrB->rkey, (uintptr_t)bufB + 50000);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA + 20000, 6000);
	ZERO(ibv_wr_complete(x));
	struct xwc w;
	xexpect(X.a.scqx, "wr_rdma_write", 42, IBV_WC_RDMA_WRITE, X.a.qp, NULL);
	xexpect(X.a.scqx, "wr_rdma_write_imm", 43, IBV_WC_RDMA_WRITE, X.a.qp, NULL);
	xexpect(X.a.scqx, "wr_rdma_read", 44, IBV_WC_RDMA_READ, X.a.qp, &w);
	CHECK(w.byte_len == 6000, "wr_rdma_read byte_len %u", w.byte_len);
	xexpect(X.b.rcqx, "target", 210, IBV_WC_RECV_RDMA_WITH_IMM, X.b.qp, &w);
	CHECK(w.byte_len == 3333, "wr_rdma_write_imm byte_len %u", w.byte_len);
	check_imm("wr_rdma_write_imm", w.flags, w.imm);
	CHECK(all(bufB, 4, 0) && same(bufB + 4, 9000, 21, 0), "wr_rdma_write data");
	CHECK(same(bufB + 10000, 3333, 21, 0), "wr_rdma_write_imm data");
	CHECK(same(bufA + 20000, 6000, 22, 0), "wr_rdma_read data");
}

static void c_wr_atomic(void)
{
	struct ibv_qp_ex *x = X.a.qpx;
	uint64_t *remote = (uint64_t *)(void *)(bufB + 65536 + 128), *local = (uint64_t *)(void *)(bufA + 512);
	remote[0] = 10;
	remote[1] = 1000;
	local[0] = local[1] = 0;
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 45;
	ibv_wr_atomic_cmp_swp(x, mrB->rkey, (uintptr_t)&remote[0], 10, 20);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)&local[0], 8);
	x->wr_id = 46;
	ibv_wr_atomic_fetch_add(x, mrB->rkey, (uintptr_t)&remote[1], 0xffffffffull);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)&local[1], 8);
	ZERO(ibv_wr_complete(x));
	xexpect(X.a.scqx, "wr_atomic_cmp_swp", 45, IBV_WC_COMP_SWAP, X.a.qp, NULL);
	xexpect(X.a.scqx, "wr_atomic_fetch_add", 46, IBV_WC_FETCH_ADD, X.a.qp, NULL);
	CHECK(local[0] == 10 && remote[0] == 20, "cmp_swp: returned %" PRIu64 ", left %" PRIu64, local[0], remote[0]);
	CHECK(local[1] == 1000 && remote[1] == 1000 + 0xffffffffull, "fetch_add: returned %" PRIu64 ", left %" PRIu64,
	      local[1], remote[1]);
}

static void c_wr_sge_list_inline(void)
{
	struct ibv_qp_ex *x = X.a.qpx;
	fill(bufA, 3000, 23);
	fill(bufA2, 100, 24);
	memset(bufB, 0, 16384);
	post_recv(X.b.qp, 220, bufB, 4096, mrB);
	post_recv(X.b.qp, 221, bufB + 4096, 4096, mrB);
	struct ibv_sge sg[3] = {{(uintptr_t)bufA + 1000, 1000, mrA->lkey},
				{(uintptr_t)bufA2, 100, mrA2->lkey},
				{(uintptr_t)bufA, 10, mrA->lkey}};
	uint8_t in1[40], in2[60];
	fill(in1, 40, 25);
	fill(in2, 60, 26);
	struct ibv_data_buf db[2] = {{in2, 60}, {in1, 40}};
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 47;
	ibv_wr_send(x);
	ibv_wr_set_sge_list(x, 3, sg);
	x->wr_id = 48;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, in1, 40);
	x->wr_id = 49;
	ibv_wr_rdma_write(x, mrB->rkey, (uintptr_t)bufB + 10000);
	ibv_wr_set_inline_data_list(x, 2, db);
	ZERO(ibv_wr_complete(x));
	memset(in1, 0, sizeof(in1)); /* inline data was copied at post time */
	memset(in2, 0, sizeof(in2));
	struct xwc w;
	xexpect(X.a.scqx, "wr_set_sge_list", 47, IBV_WC_SEND, X.a.qp, NULL);
	xexpect(X.a.scqx, "wr_set_inline_data", 48, IBV_WC_SEND, X.a.qp, NULL);
	xexpect(X.a.scqx, "wr_set_inline_data_list", 49, IBV_WC_RDMA_WRITE, X.a.qp, NULL);
	xexpect(X.b.rcqx, "receiver", 220, IBV_WC_RECV, X.b.qp, &w);
	CHECK(w.byte_len == 1110 && same(bufB, 1000, 23, 1000) && same(bufB + 1000, 100, 24, 0) &&
		      same(bufB + 1100, 10, 23, 0),
	      "wr_set_sge_list: byte_len %u or data", w.byte_len);
	xexpect(X.b.rcqx, "receiver", 221, IBV_WC_RECV, X.b.qp, &w);
	CHECK(w.byte_len == 40 && same(bufB + 4096, 40, 25, 0), "wr_set_inline_data: byte_len %u or data",
	      w.byte_len);
	CHECK(same(bufB + 10000, 60, 26, 0) && same(bufB + 10060, 40, 25, 0) && all(bufB + 10100, 16, 0),
	      "wr_set_inline_data_list data");
}

static void c_wr_abort(void)
{
	struct ibv_qp_ex *x = X.a.qpx;
	memset(bufB, 0, 8192);
	fill(bufA, 64, 27);
	fill(bufA + 64, 64, 28);
	post_recv(X.b.qp, 230, bufB, 4096, mrB);
	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 50;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 64);
	x->wr_id = 51;
	ibv_wr_rdma_write(x, mrB->rkey, (uintptr_t)bufB + 5000);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 64);
	ibv_wr_abort(x);
	xexpect_none(X.a.scqx, 50, "an aborted chain");
	xexpect_none(X.b.rcqx, 1, "an aborted chain's SEND");
	CHECK(all(bufB + 5000, 64, 0), "an aborted chain's WRITE landed");
	/* the queue goes on from where it was */
	ibv_wr_start(x);
	x->wr_id = 52;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA + 64, 64);
	ZERO(ibv_wr_complete(x));
	struct xwc w;
	xexpect(X.a.scqx, "after wr_abort", 52, IBV_WC_SEND, X.a.qp, NULL);
	xexpect(X.b.rcqx, "after wr_abort", 230, IBV_WC_RECV, X.b.qp, &w);
	CHECK(w.byte_len == 64 && same(bufB, 64, 28, 0), "the SEND after wr_abort: byte_len %u or data", w.byte_len);
	/* a chain with an error fails whole at wr_complete */
	ibv_wr_start(x);
	x->wr_id = 53;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 64);
	x->wr_id = 54;
	x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(x);
	ibv_wr_set_inline_data(x, bufA, X.a.cap.max_inline_data + 1);
	CHECK(ibv_wr_complete(x) != 0, "wr_complete of a chain with too much inline data succeeded");
	xexpect_none(X.a.scqx, 20, "a failed chain");
	xexpect_none(X.b.rcqx, 1, "a failed chain's SEND");
}

/* the CQ_EX poll API over several completions at once */
static void c_cq_ex_batch(void)
{
	struct ibv_cq_ex *cq = X.b.rcqx;
	struct ibv_poll_cq_attr pa = {0};
	CHECK(ibv_start_poll(cq, &pa) == ENOENT, "start_poll on an empty CQ is not ENOENT");
	memset(bufB, 0, 16384);
	for (int i = 0; i < 3; i++)
		post_recv(X.b.qp, 240 + (uint64_t)i, bufB + 4096 * i, 4096, mrB);
	fill(bufA, 3000, 29);
	struct ibv_qp_ex *x = X.a.qpx;
	ibv_wr_start(x);
	x->wr_flags = 0; /* unsignaled; the last is signaled */
	x->wr_id = 60;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 1000);
	x->wr_id = 61;
	ibv_wr_send_imm(x, imm_value());
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 2000);
	x->wr_id = 62;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mrA->lkey, (uintptr_t)bufA, 3000);
	ZERO(ibv_wr_complete(x));
	xexpect(X.a.scqx, "sender", 62, IBV_WC_SEND, X.a.qp, NULL);
	xexpect_none(X.a.scqx, 10, "unsignaled WRs");
	/* start_poll, then next_poll until ENOENT; a completion still on its
	 * way is taken by the next start_poll */
	struct xwc w[4];
	int n = 0, r = 0;
	int64_t end = now_ms() + 5000;
	while (n < 3) {
		while ((r = ibv_start_poll(cq, &pa)) == ENOENT && now_ms() < end)
			;
		CHECK(r == 0, "start_poll: %s after %d completions", strerror(r), n);
		do
			xread(cq, &w[n++]);
		while (n < 4 && (r = ibv_next_poll(cq)) == 0);
		ibv_end_poll(cq);
		CHECK(n <= 3, "more than 3 completions");
		CHECK(r == ENOENT, "next_poll: %s", strerror(r));
	}
	static const uint32_t len[3] = {1000, 2000, 3000};
	for (int i = 0; i < 3; i++) {
		CHECK(w[i].status == IBV_WC_SUCCESS && w[i].wr_id == 240 + (uint64_t)i && w[i].opcode == IBV_WC_RECV &&
			      w[i].byte_len == len[i] && w[i].qp_num == X.b.qp->qp_num,
		      "completion %d: wr_id %" PRIu64 " %s %s byte_len %u qp_num %u", i, w[i].wr_id,
		      ibv_wc_status_str(w[i].status), wcop(w[i].opcode), w[i].byte_len, w[i].qp_num);
		CHECK(same(bufB + 4096 * i, len[i], 29, 0), "completion %d: data", i);
	}
	CHECK(!(w[0].flags & IBV_WC_WITH_IMM) && !(w[2].flags & IBV_WC_WITH_IMM), "wc_flags %#x %#x", w[0].flags,
	      w[2].flags);
	check_imm("read_imm_data", w[1].flags, w[1].imm);
	CHECK(ibv_start_poll(cq, &pa) == ENOENT, "start_poll after all were taken is not ENOENT");
}

/* ---- 4. memory windows ------------------------------------------------ */

static void c_mw_type1(void)
{
	if (!(dev[1].attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW))
		fail("device_cap_flags %#x without IBV_DEVICE_MEM_WINDOW", dev[1].attr.device_cap_flags);
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_1);
	uint32_t old = mw->rkey;
	uint8_t *win = bufB + 300000;
	memset(win - 4096, 0, 4 * 4096);
	struct ibv_mw_bind b = {.wr_id = 70, .send_flags = IBV_SEND_SIGNALED};
	b.bind_info.mr = mrB;
	b.bind_info.addr = (uintptr_t)win;
	b.bind_info.length = 4096;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	ZERO(ibv_bind_mw(q.b.qp, mw, &b));
	expect(q.b.scq, "ibv_bind_mw", 70, IBV_WC_BIND_MW, q.b.qp, NULL);
	CHECK(mw->rkey != old && (mw->rkey >> 8) == (old >> 8), "rkey after bind %#x (was %#x): want the key byte bumped",
	      mw->rkey, old);
	fill(bufA, 4096, 30);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 4096, mrA, (uintptr_t)win, mw->rkey);
	CHECK(same(win, 4096, 30, 0) && all(win - 4096, 4096, 0) && all(win + 4096, 4096, 0),
	      "a WRITE through the window");
	memset(bufA + 8192, 0, 100);
	rdma(&q.a, IBV_WR_RDMA_READ, bufA + 8192, 100, mrA, (uintptr_t)win + 3996, mw->rkey);
	CHECK(same(bufA + 8192, 100, 30, 3996), "a READ through the window");
	/* the MR's own key still reaches the MR */
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 16, mrA, (uintptr_t)win - 16, mrB->rkey);
	/* bound again, to the next page: a new key */
	uint32_t first = mw->rkey;
	b.wr_id = 71;
	b.bind_info.addr = (uintptr_t)win + 4096;
	ZERO(ibv_bind_mw(q.b.qp, mw, &b));
	expect(q.b.scq, "ibv_bind_mw (again)", 71, IBV_WC_BIND_MW, q.b.qp, NULL);
	CHECK(mw->rkey != first && (mw->rkey >> 8) == (first >> 8), "rkey after a second bind %#x (was %#x)", mw->rkey,
	      first);
	win += 4096;
	fill(bufA, 4096, 33);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 4096, mrA, (uintptr_t)win, mw->rkey);
	CHECK(same(win, 4096, 33, 0) && same(win - 4096, 4096, 30, 0), "a WRITE through the window bound again");
	/* ibv_bind_mw is for type 1 only */
	struct ibv_mw *mw2 = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	CHECK(ibv_bind_mw(q.b.qp, mw2, &b) != 0, "ibv_bind_mw of a type 2 window succeeded");
	ZERO(ibv_dealloc_mw(mw2));
	expect_none(q.b.scq, 10, "a refused ibv_bind_mw");
	/* 8 bytes past the window's end */
	enum ibv_wc_status st = write_status(&q.a, bufA, 16, mrA, (uintptr_t)win + 4096 - 8, mw->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE past the window's end: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	CHECK(all(win + 4096, 16, 0), "a WRITE past the window's end changed memory");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ZERO(ibv_query_qp(q.a.qp, &qa, IBV_QP_STATE, &qi));
	CHECK(qa.qp_state == IBV_QPS_ERR, "the requester's QP after a remote access error: state %d, want ERR",
	      qa.qp_state);
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

static void c_mw_type2(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	uint32_t old = mw->rkey;
	uint8_t *win = bufB + 300000;
	memset(win, 0, 8192);
	uint32_t rkey = bind2(&q.b, mw, mrB, win, 8192, IBV_ACCESS_REMOTE_WRITE);
	CHECK(rkey == ibv_inc_rkey(old), "rkey");
	fill(bufA, 8192, 31);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 8192, mrA, (uintptr_t)win, rkey);
	CHECK(same(win, 8192, 31, 0), "a WRITE through the window");
	/* the window's old key (before ibv_inc_rkey) is not the window */
	enum ibv_wc_status st = write_status(&q.a, bufA, 8, mrA, (uintptr_t)win, old);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE with the window's old key: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

/* type 2 through ibv_wr_bind_mw, invalidated by ibv_wr_local_inv, then
 * bound again and invalidated by the peer's ibv_wr_send_inv */
static void c_mw_type2_wr(void)
{
	struct pair q;
	struct qpopt o = {.ex = 1};
	new_pair(&q, &o, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	uint8_t *win = bufB + 300000;
	struct ibv_mw_bind_info bi = {.mr = mrB, .addr = (uintptr_t)win, .length = 4096,
				      .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	struct ibv_qp_ex *xb = q.b.qpx, *xa = q.a.qpx;
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	ibv_wr_start(xb);
	xb->wr_id = 80;
	xb->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(xb, mw, rkey, &bi);
	ZERO(ibv_wr_complete(xb));
	expect(q.b.scq, "wr_bind_mw", 80, IBV_WC_BIND_MW, q.b.qp, NULL);
	fill(bufA, 4096, 32);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 4096, mrA, (uintptr_t)win, rkey);
	CHECK(same(win, 4096, 32, 0), "a WRITE through the window");
	ibv_wr_start(xb);
	xb->wr_id = 81;
	ibv_wr_local_inv(xb, rkey);
	ZERO(ibv_wr_complete(xb));
	expect(q.b.scq, "wr_local_inv", 81, IBV_WC_LOCAL_INV, q.b.qp, NULL);
	/* bound again with the next key, the peer invalidates it */
	rkey = ibv_inc_rkey(rkey);
	ibv_wr_start(xb);
	xb->wr_id = 82;
	ibv_wr_bind_mw(xb, mw, rkey, &bi);
	ZERO(ibv_wr_complete(xb));
	expect(q.b.scq, "wr_bind_mw (again)", 82, IBV_WC_BIND_MW, q.b.qp, NULL);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 64, mrA, (uintptr_t)win, rkey);
	post_recv(q.b.qp, 250, bufB, 4096, mrB);
	ibv_wr_start(xa);
	xa->wr_id = 83;
	xa->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(xa, rkey);
	ibv_wr_set_sge(xa, mrA->lkey, (uintptr_t)bufA, 30);
	ZERO(ibv_wr_complete(xa));
	struct ibv_wc wc;
	expect(q.a.scq, "wr_send_inv", 83, IBV_WC_SEND, q.a.qp, NULL);
	expect(q.b.rcq, "receiver", 250, IBV_WC_RECV, q.b.qp, &wc);
	CHECK(wc.byte_len == 30 && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == rkey,
	      "wr_send_inv: byte_len %u wc_flags %#x invalidated_rkey %#x (want %#x)", wc.byte_len, wc.wc_flags,
	      wc.invalidated_rkey, rkey);
	enum ibv_wc_status st = write_status(&q.a, bufA, 64, mrA, (uintptr_t)win, rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE through the invalidated window: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

/* SEND_WITH_INV through cq_ex: read_wc_flags and ibv_wc_read_invalidated_rkey */
static void c_cq_ex_inv(void)
{
	struct pair q;
	struct qpopt o = {.cqex = 1};
	new_pair(&q, &o, NULL);
	struct ibv_mw *mw = alloc_mw(&dev[1], IBV_MW_TYPE_2);
	uint32_t rkey = ibv_inc_rkey(mw->rkey);
	struct ibv_send_wr wr = {.wr_id = 84, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mrB, .addr = (uintptr_t)bufB, .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_READ};
	post(&q.b, &wr);
	xexpect(q.b.scqx, "BIND_MW", 84, IBV_WC_BIND_MW, q.b.qp, NULL);
	post_recv(q.b.qp, 260, bufB + 4096, 64, mrB);
	struct ibv_send_wr s = {.wr_id = 85, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED,
				.invalidate_rkey = rkey};
	post(&q.a, &s);
	xexpect(q.a.scqx, "SEND_WITH_INV", 85, IBV_WC_SEND, q.a.qp, NULL);
	struct ibv_poll_cq_attr pa = {0};
	int64_t end = now_ms() + 5000;
	int r;
	while ((r = ibv_start_poll(q.b.rcqx, &pa)) == ENOENT && now_ms() < end)
		;
	CHECK(r == 0, "start_poll: %s", strerror(r));
	uint64_t id = q.b.rcqx->wr_id;
	unsigned flags = ibv_wc_read_wc_flags(q.b.rcqx);
	uint32_t inv = ibv_wc_read_invalidated_rkey(q.b.rcqx);
	ibv_end_poll(q.b.rcqx);
	CHECK(id == 260 && (flags & IBV_WC_WITH_INV) && inv == rkey,
	      "wr_id %" PRIu64 " wc_flags %#x invalidated_rkey %#x (want %#x)", id, flags, inv, rkey);
	free_pair(&q);
	ZERO(ibv_dealloc_mw(mw));
}

/* ---- 5. MRs as programs lay them out ---------------------------------- */

/* write_read: the peer (P.a) WRITEs n bytes of seed to raddr, then READs
 * them back; target is what the local program sees at raddr. */
static void write_read(const char *what, uint8_t *target, uint32_t n, uint32_t rkey, unsigned seed)
{
	fill(bufA, n, seed);
	rdma(&P.a, IBV_WR_RDMA_WRITE, bufA, n, mrA, (uintptr_t)target, rkey);
	CHECK(same(target, n, seed, 0), "%s: the peer's WRITE is not in the program's memory", what);
	fill(target, n, seed + 1); /* the program writes; the peer reads it */
	memset(bufA + 500000, 0, n);
	rdma(&P.a, IBV_WR_RDMA_READ, bufA + 500000, n, mrA, (uintptr_t)target, rkey);
	CHECK(same(bufA + 500000, n, seed + 1, 0), "%s: the peer's READ does not see the program's memory", what);
}

struct rping_cb { /* two buffers of one malloc'd struct, as rping's */
	uint64_t id;
	char recv_buf[64];
	char pad[8];
	char send_buf[64];
	char rest[200];
};

static void c_mr_shared_page(void)
{
	struct rping_cb *cb = malloc(sizeof(*cb));
	CHECK(cb, "malloc");
	fill(cb, sizeof(*cb), 40);
	struct ibv_mr *r = reg(&dev[1], cb->recv_buf, sizeof(cb->recv_buf));
	struct ibv_mr *s = reg(&dev[1], cb->send_buf, sizeof(cb->send_buf));
	CHECK(same(cb, sizeof(*cb), 40, 0), "registering changed the memory");
	write_read("recv_buf", (uint8_t *)cb->recv_buf, 64, r->rkey, 41);
	write_read("send_buf", (uint8_t *)cb->send_buf, 64, s->rkey, 43);
	/* a SEND into recv_buf by its lkey */
	post_recv(P.b.qp, 270, cb->recv_buf, 64, r);
	fill(bufA, 64, 45);
	send_op(&P.a, IBV_WR_SEND, 90, bufA, 64, mrA, 0, 0);
	expect(P.a.scq, "sender", 90, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 270, IBV_WC_RECV, P.b.qp, NULL);
	CHECK(same(cb->recv_buf, 64, 45, 0), "SEND into recv_buf");
	CHECK(same(cb->pad, 8, 40, offsetof(struct rping_cb, pad)), "the bytes between the MRs changed");
	ZERO(ibv_dereg_mr(r));
	write_read("send_buf after recv_buf's MR went", (uint8_t *)cb->send_buf, 64, s->rkey, 46);
	ZERO(ibv_dereg_mr(s));
	cb->id = 42; /* still the program's memory */
	free(cb);
}

/* An MR that begins on a registered page and goes on past it: the library
 * registers it over two memory segments (reg_mr_segs). */
static void c_mr_multi_seg(void)
{
	uint8_t *p = aligned_alloc(4096, 4 * 4096);
	CHECK(p, "aligned_alloc");
	fill(p, 4 * 4096, 50);
	struct ibv_mr *m1 = reg(&dev[1], p, 4096);
	struct ibv_mr *m2 = reg(&dev[1], p + 2048, 3 * 4096);
	CHECK(same(p, 4 * 4096, 50, 0), "registering changed the memory");
	/* across page boundaries, so across both segments */
	write_read("across the segments", p + 3000, 9000, m2->rkey, 51);
	CHECK(same(p, 3000, 50, 0) && same(p + 12000, 4 * 4096 - 12000, 50, 12000), "bytes outside the WRITE changed");
	/* the first MR sees the second's writes on the shared page */
	memset(bufA, 0, 4096);
	rdma(&P.a, IBV_WR_RDMA_READ, bufA, 1096, mrA, (uintptr_t)p + 3000, m1->rkey);
	CHECK(same(bufA, 1096, 52, 0), "the first MR does not see the page as the second");
	write_read("the first MR", p + 100, 3000, m1->rkey, 53);
	ZERO(ibv_dereg_mr(m1));
	write_read("the second MR after the first went", p + 2048, 3 * 4096, m2->rkey, 55);
	ZERO(ibv_dereg_mr(m2));
	CHECK(same(p + 2048, 3 * 4096, 56, 0), "the memory after both MRs went");
	free(p);
}

static void c_mr_stack(void)
{
	uint8_t sb[3 * 4096 + 100];
	fill(sb, sizeof(sb), 60);
	struct ibv_mr *m = reg(&dev[1], sb + 50, sizeof(sb) - 50);
	CHECK(same(sb, sizeof(sb), 60, 0), "registering changed the stack buffer");
	write_read("stack buffer", sb + 50, sizeof(sb) - 50, m->rkey, 61);
	/* a SEND into it */
	post_recv(P.b.qp, 280, sb + 200, 1000, m);
	fill(bufA, 1000, 63);
	send_op(&P.a, IBV_WR_SEND, 91, bufA, 1000, mrA, 0, 0);
	expect(P.a.scq, "sender", 91, IBV_WC_SEND, P.a.qp, NULL);
	expect(P.b.rcq, "receiver", 280, IBV_WC_RECV, P.b.qp, NULL);
	CHECK(same(sb + 200, 1000, 63, 0), "SEND into the stack buffer");
	ZERO(ibv_dereg_mr(m));
	CHECK(same(sb + 200, 1000, 63, 0), "the stack buffer after ibv_dereg_mr");
}

static uint8_t static_buf[3 * 4096 + 123];
static int static_after = 77; /* data next to the buffer, maybe on its pages */

static void c_mr_static(void)
{
	fill(static_buf, sizeof(static_buf), 64);
	struct ibv_mr *m = reg(&dev[1], static_buf, sizeof(static_buf));
	CHECK(same(static_buf, sizeof(static_buf), 64, 0) && static_after == 77, "registering changed static data");
	write_read("static buffer", static_buf, sizeof(static_buf), m->rkey, 65);
	static_after++;
	ZERO(ibv_dereg_mr(m));
	CHECK(same(static_buf, sizeof(static_buf), 66, 0) && static_after == 78, "static data after ibv_dereg_mr");
}

/* Two overlapping MRs; the first goes, the second keeps working over the
 * page they shared. */
static void c_mr_overlap_dereg(void)
{
	uint8_t *p = aligned_alloc(4096, 3 * 4096);
	CHECK(p, "aligned_alloc");
	memset(p, 0, 3 * 4096);
	struct ibv_mr *m1 = reg(&dev[1], p, 2 * 4096);
	struct ibv_mr *m2 = reg(&dev[1], p + 4096, 2 * 4096);
	write_read("first MR", p, 2 * 4096, m1->rkey, 70);
	ZERO(ibv_dereg_mr(m1));
	write_read("second MR after the first went", p + 4096, 2 * 4096, m2->rkey, 72);
	/* the program and the peer still share the page */
	for (int i = 0; i < 3; i++) {
		p[4096 + 100 + i] = (uint8_t)(0xa0 + i);
		rdma(&P.a, IBV_WR_RDMA_READ, bufA, 3, mrA, (uintptr_t)p + 4096 + 100, m2->rkey);
		CHECK(bufA[i] == 0xa0 + i, "the peer does not read the program's latest write");
	}
	CHECK(same(p, 4096, 71, 0), "the first MR's own page after it went");
	ZERO(ibv_dereg_mr(m2));
	free(p);
}

static void c_mr_16mib(void)
{
	size_t n = 16u << 20;
	uint8_t *p = malloc(n);
	CHECK(p, "malloc");
	memset(p, 0x5a, n);
	int64_t t0 = now_ms();
	struct ibv_mr *m = reg(&dev[1], p, n);
	int64_t t1 = now_ms();
	fill(bufA, 4096, 75);
	rdma(&P.a, IBV_WR_RDMA_WRITE, bufA, 4096, mrA, (uintptr_t)p + n - 4096, m->rkey);
	CHECK(same(p + n - 4096, 4096, 75, 0) && all(p, n - 4096, 0x5a), "a WRITE at the last bytes");
	rdma(&P.a, IBV_WR_RDMA_WRITE, bufA, 1, mrA, (uintptr_t)p + n - 1, m->rkey);
	CHECK(p[n - 1] == bufA[0], "a WRITE of the very last byte");
	ZERO(ibv_dereg_mr(m));
	printf("# ibv_reg_mr of 16 MiB: %" PRIu64 " ms\n", t1 - t0);
	free(p);
}

/* MR bounds where MRs share a page: one byte past an MR is refused. */
static void c_mr_bounds(void)
{
	struct rping_cb *cb = malloc(sizeof(*cb));
	CHECK(cb, "malloc");
	memset(cb, 0, sizeof(*cb));
	struct ibv_mr *r = reg(&dev[1], cb->recv_buf, sizeof(cb->recv_buf));
	struct ibv_mr *s = reg(&dev[1], cb->send_buf, sizeof(cb->send_buf));
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	fill(bufA, 65, 76);
	rdma(&q.a, IBV_WR_RDMA_WRITE, bufA, 64, mrA, (uintptr_t)cb->recv_buf, r->rkey);
	enum ibv_wc_status st = write_status(&q.a, bufA, 65, mrA, (uintptr_t)cb->recv_buf, r->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE one byte past the MR: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	CHECK(all(cb->pad, 8, 0), "a refused WRITE changed the bytes after the MR");
	free_pair(&q);
	ZERO(ibv_dereg_mr(r));
	ZERO(ibv_dereg_mr(s));
	free(cb);
}

/* Access rights: REMOTE_WRITE needs LOCAL_WRITE (ibv_reg_mr(3)); an MR
 * without REMOTE_WRITE refuses the peer's WRITE, allows its READ. */
static void c_mr_access(void)
{
	uint8_t *p = aligned_alloc(4096, 4096);
	CHECK(p, "aligned_alloc");
	fill(p, 4096, 110);
	errno = 0;
	struct ibv_mr *bad = ibv_reg_mr(dev[1].pd, p, 4096, IBV_ACCESS_REMOTE_WRITE);
	CHECK(!bad && errno == EINVAL, "ibv_reg_mr with REMOTE_WRITE without LOCAL_WRITE: %s, want EINVAL",
	      bad ? "registered" : strerror(errno));
	struct ibv_mr *m = ibv_reg_mr(dev[1].pd, p, 4096, IBV_ACCESS_REMOTE_READ);
	CHECK(m, "ibv_reg_mr(REMOTE_READ): %s", strerror(errno));
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, NULL);
	drain_async(dev[1].ctx);
	rdma(&q.a, IBV_WR_RDMA_READ, bufA, 4096, mrA, (uintptr_t)p, m->rkey);
	CHECK(same(bufA, 4096, 110, 0), "READ from a REMOTE_READ MR");
	enum ibv_wc_status st = write_status(&q.a, bufA, 8, mrA, (uintptr_t)p, m->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE to an MR without REMOTE_WRITE: %s, want REM_ACCESS_ERR",
	      ibv_wc_status_str(st));
	CHECK(same(p, 4096, 110, 0), "a refused WRITE changed memory");
	/* the responder's QP reports it: IBV_EVENT_QP_ACCESS_ERR, and is in ERR */
	struct ibv_async_event ev;
	CHECK(wait_event(dev[1].ctx, IBV_EVENT_QP_ACCESS_ERR, 5000, &ev),
	      "no IBV_EVENT_QP_ACCESS_ERR on the responder in 5 s");
	CHECK(ev.element.qp == q.b.qp, "QP_ACCESS_ERR names QP %p, want the responder's %p", (void *)ev.element.qp,
	      (void *)q.b.qp);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ZERO(ibv_query_qp(q.b.qp, &qa, IBV_QP_STATE, &qi));
	CHECK(qa.qp_state == IBV_QPS_ERR, "the responder's QP after QP_ACCESS_ERR: state %d", qa.qp_state);
	free_pair(&q);
	ZERO(ibv_dereg_mr(m));
	free(p);
}

/* ibv_reg_mr_iova: the peer addresses the MR by the IOVA given. */
static void c_mr_iova(void)
{
	uint8_t *p = malloc(3 * 4096);
	CHECK(p, "malloc");
	memset(p, 0, 3 * 4096);
	struct ibv_mr *m = ibv_reg_mr_iova(dev[1].pd, p, 3 * 4096, 0x40000000, ACC);
	CHECK(m, "ibv_reg_mr_iova: %s", strerror(errno));
	fill(bufA, 5000, 111);
	rdma(&P.a, IBV_WR_RDMA_WRITE, bufA, 5000, mrA, 0x40000000 + 1000, m->rkey);
	CHECK(all(p, 1000, 0) && same(p + 1000, 5000, 111, 0), "a WRITE at IOVA 0x40000000 + 1000");
	struct ibv_mr *z = ibv_reg_mr_iova2(dev[1].pd, p, 3 * 4096, 0, ACC);
	CHECK(z, "ibv_reg_mr_iova2 (zero-based): %s", strerror(errno));
	memset(bufA, 0, 5000);
	rdma(&P.a, IBV_WR_RDMA_READ, bufA, 5000, mrA, 1000, z->rkey);
	CHECK(same(bufA, 5000, 111, 0), "a READ at IOVA 1000 of a zero-based MR");
	ZERO(ibv_dereg_mr(z));
	ZERO(ibv_dereg_mr(m));
	free(p);
}

/* Read-only data (a const array) registered without LOCAL_WRITE: sent from
 * and read by the peer. */
static const uint8_t ro_data[3 * 4096] __attribute__((aligned(4096))) = {[0] = 0x11, [4095] = 0x22, [4096] = 0x33,
									   [10000] = 0x44, [12287] = 0x55};

static void c_mr_readonly(void)
{
	struct ibv_mr *m = ibv_reg_mr(dev[1].pd, (void *)ro_data, sizeof(ro_data), IBV_ACCESS_REMOTE_READ);
	CHECK(m, "ibv_reg_mr of read-only data: %s", strerror(errno));
	CHECK(ro_data[0] == 0x11 && ro_data[4096] == 0x33 && ro_data[12287] == 0x55, "registering changed the data");
	memset(bufA, 0xff, sizeof(ro_data));
	rdma(&P.a, IBV_WR_RDMA_READ, bufA, sizeof(ro_data), mrA, (uintptr_t)ro_data, m->rkey);
	CHECK(!memcmp(bufA, ro_data, sizeof(ro_data)), "the peer's READ of read-only data");
	memset(bufA, 0xff, 8192);
	post_recv(P.a.qp, 2100, bufA, 8192, mrA);
	send_op(&P.b, IBV_WR_SEND, 2101, (void *)(ro_data + 4095), 6000, m, 0, 0);
	expect(P.b.scq, "SEND from read-only data", 2101, IBV_WC_SEND, P.b.qp, NULL);
	expect(P.a.rcq, "receiver", 2100, IBV_WC_RECV, P.a.qp, NULL);
	CHECK(!memcmp(bufA, ro_data + 4095, 6000), "SEND from read-only data: data");
	ZERO(ibv_dereg_mr(m));
	CHECK(ro_data[10000] == 0x44, "the data after ibv_dereg_mr");
}

/* mmap'd anonymous memory, unmapped after ibv_dereg_mr. */
static void c_mr_mmap(void)
{
	size_t n = 64 * 1024;
	uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
	fill(p, n, 112);
	struct ibv_mr *m = reg(&dev[1], p, n);
	CHECK(same(p, n, 112, 0), "registering changed the memory");
	write_read("mmap'd memory", p + 10, (uint32_t)n - 20, m->rkey, 113);
	ZERO(ibv_dereg_mr(m));
	CHECK(same(p + 10, n - 20, 114, 0), "the memory after ibv_dereg_mr");
	CHECK(!munmap(p, n), "munmap: %s", strerror(errno));
	/* the same range mapped again and registered */
	uint8_t *p2 = mmap(p, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p2 != MAP_FAILED, "mmap: %s", strerror(errno));
	CHECK(all(p2, n, 0), "new anonymous memory is not zero");
	m = reg(&dev[1], p2, n);
	write_read("mmap'd again", p2, (uint32_t)n, m->rkey, 115);
	ZERO(ibv_dereg_mr(m));
	munmap(p2, n);
}

/* ---- 6. CQ resize, completion channels -------------------------------- */

static void sends(struct end *from, uint64_t first, int n)
{
	for (int i = 0; i < n; i++) {
		fill(bufA + 64 * (first + (uint64_t)i), 64, (unsigned)(first + (uint64_t)i));
		send_op(from, IBV_WR_SEND, first + (uint64_t)i, bufA + 64 * (first + (uint64_t)i), 64, mrA, 0, 0);
		expect(from->scq, "sender", first + (uint64_t)i, IBV_WC_SEND, from->qp, NULL);
	}
}

static void c_cq_resize(void)
{
	struct ibv_cq *rcq = ibv_create_cq(dev[1].ctx, 16, NULL, NULL, 0);
	CHECK(rcq, "ibv_create_cq: %s", strerror(errno));
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, &(struct qpopt){.rcq = rcq});
	for (int i = 0; i < 25; i++)
		post_recv(q.b.qp, (uint64_t)i, bufB + 64 * i, 64, mrB);
	sends(&q.a, 0, 12);
	struct ibv_wc wc;
	for (uint64_t i = 0; i < 2; i++)
		expect(rcq, "before resize", i, IBV_WC_RECV, q.b.qp, NULL);
	ZERO(ibv_resize_cq(rcq, 64));
	CHECK(rcq->cqe >= 64, "cqe %d after resizing to 64", rcq->cqe);
	sends(&q.a, 12, 8);
	for (uint64_t i = 2; i < 20; i++) {
		expect(rcq, "after growing", i, IBV_WC_RECV, q.b.qp, &wc);
		CHECK(wc.byte_len == 64 && same(bufB + 64 * i, 64, (unsigned)i, 0), "completion %" PRIu64 ": data", i);
	}
	expect_none(rcq, 10, "after growing");
	sends(&q.a, 20, 5);
	ZERO(ibv_resize_cq(rcq, 8));
	CHECK(rcq->cqe >= 8, "cqe %d after resizing to 8", rcq->cqe);
	for (uint64_t i = 20; i < 25; i++)
		expect(rcq, "after shrinking", i, IBV_WC_RECV, q.b.qp, NULL);
	expect_none(rcq, 10, "after shrinking");
	/* smaller than what is pending: refused, nothing lost */
	for (int i = 0; i < 6; i++)
		post_recv(q.b.qp, 30 + (uint64_t)i, bufB + 64 * i, 64, mrB);
	sends(&q.a, 30, 6);
	int cqe = rcq->cqe;
	CHECK(ibv_resize_cq(rcq, 2) != 0, "ibv_resize_cq to 2 with 6 completions pending succeeded");
	CHECK(rcq->cqe == cqe, "cqe %d after a refused resize, was %d", rcq->cqe, cqe);
	for (uint64_t i = 30; i < 36; i++)
		expect(rcq, "after a refused resize", i, IBV_WC_RECV, q.b.qp, NULL);
	expect_none(rcq, 10, "after a refused resize");
	free_pair(&q);
	ZERO(ibv_destroy_cq(rcq));
}

/* Resizing while completions arrive: none lost, order kept. */
static void c_cq_resize_busy(void)
{
	struct ibv_cq *rcq = ibv_create_cq(dev[1].ctx, 64, NULL, NULL, 0);
	CHECK(rcq, "ibv_create_cq: %s", strerror(errno));
	struct pair q;
	new_pair(&q, &(struct qpopt){.max_wr = 64}, &(struct qpopt){.max_wr = 64, .rcq = rcq});
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < 40; i++)
			post_recv(q.b.qp, (uint64_t)i, bufB + 64 * i, 64, mrB);
		struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 64, .lkey = mrA->lkey};
		struct ibv_send_wr w[40];
		memset(w, 0, sizeof(w));
		for (int i = 0; i < 40; i++) {
			w[i] = (struct ibv_send_wr){.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
						    .opcode = IBV_WR_SEND, .send_flags = i == 39 ? IBV_SEND_SIGNALED : 0,
						    .next = i < 39 ? &w[i + 1] : NULL};
		}
		post(&q.a, w);
		ZERO(ibv_resize_cq(rcq, round & 1 ? 64 : 200));
		ZERO(ibv_resize_cq(rcq, round & 1 ? 128 : 48));
		for (uint64_t i = 0; i < 40; i++)
			expect(rcq, "receive", i, IBV_WC_RECV, q.b.qp, NULL);
		expect_none(rcq, 5, "after all");
		expect(q.a.scq, "sender", 39, IBV_WC_SEND, q.a.qp, NULL);
	}
	free_pair(&q);
	ZERO(ibv_destroy_cq(rcq));
}

/* ibv_resize_cq of a CQ made by ibv_create_cq_ex, read by start_poll */
static void c_cq_resize_ex(void)
{
	struct ibv_cq_init_attr_ex ca = {.cqe = 16, .wc_flags = WC_FLAGS};
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(dev[1].ctx, &ca);
	CHECK(cqx, "ibv_create_cq_ex: %s", strerror(errno));
	struct ibv_cq *rcq = ibv_cq_ex_to_cq(cqx);
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, &(struct qpopt){.rcq = rcq});
	for (int i = 0; i < 20; i++)
		post_recv(q.b.qp, (uint64_t)i, bufB + 64 * i, 64, mrB);
	sends(&q.a, 0, 10);
	for (uint64_t i = 0; i < 3; i++)
		xexpect(cqx, "before resize", i, IBV_WC_RECV, q.b.qp, NULL);
	ZERO(ibv_resize_cq(rcq, 64));
	CHECK(rcq->cqe >= 64, "cqe %d after resizing to 64", rcq->cqe);
	for (uint64_t i = 3; i < 10; i++)
		xexpect(cqx, "after resize", i, IBV_WC_RECV, q.b.qp, NULL);
	xexpect_none(cqx, 10, "after resize, the pending ones taken");
	sends(&q.a, 10, 5);
	for (uint64_t i = 10; i < 15; i++)
		xexpect(cqx, "after resize, new", i, IBV_WC_RECV, q.b.qp, NULL);
	xexpect_none(cqx, 10, "after resize");
	free_pair(&q);
	ZERO(ibv_destroy_cq(rcq));
}

/* A CQ armed before ibv_resize_cq: the next completion still raises the
 * event (the request for it is the CQ's, not its buffer's). */
static void c_channel_resize(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev[1].ctx);
	CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
	struct ibv_cq *cq = ibv_create_cq(dev[1].ctx, 16, NULL, ch, 0);
	CHECK(cq, "ibv_create_cq: %s", strerror(errno));
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, &(struct qpopt){.rcq = cq});
	post_recv(q.b.qp, 310, bufB, 64, mrB);
	post_recv(q.b.qp, 311, bufB, 64, mrB);
	sends(&q.a, 0, 1); /* one pending across the resize */
	ZERO(ibv_req_notify_cq(cq, 0));
	ZERO(ibv_resize_cq(cq, 256));
	expect(cq, "the completion carried over", 310, IBV_WC_RECV, q.b.qp, NULL);
	sends(&q.a, 1, 1);
	struct ibv_cq *ecq;
	void *ectx;
	int got = readable(ch->fd, 2000);
	if (got) {
		ZERO(ibv_get_cq_event(ch, &ecq, &ectx));
		ibv_ack_cq_events(ecq, 1);
	}
	expect(cq, "after the resize", 311, IBV_WC_RECV, q.b.qp, NULL);
	free_pair(&q);
	ZERO(ibv_destroy_cq(cq));
	ZERO(ibv_destroy_comp_channel(ch));
	CHECK(got, "a CQ armed before ibv_resize_cq raised no event for its next completion");
}

/* Two CQs on one channel: each event names its CQ; one event per arming;
 * O_NONBLOCK; poll(2); solicited-only arming. */
static void c_channel(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev[1].ctx);
	CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
	static int tag1, tag2;
	struct ibv_cq *cq1 = ibv_create_cq(dev[1].ctx, 32, &tag1, ch, 0);
	struct ibv_cq *cq2 = ibv_create_cq(dev[1].ctx, 32, &tag2, ch, 0);
	CHECK(cq1 && cq2, "ibv_create_cq on a channel: %s", strerror(errno));
	CHECK(cq1->channel == ch && cq1->cq_context == &tag1, "ibv_cq fields");
	struct pair q;
	new_pair(&q, &(struct qpopt){0}, &(struct qpopt){.scq = cq1, .rcq = cq2});
	ZERO(ibv_req_notify_cq(cq1, 0));
	ZERO(ibv_req_notify_cq(cq2, 0));
	int fl = fcntl(ch->fd, F_GETFL);
	CHECK(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on channel->fd: %s", strerror(errno));
	struct ibv_cq *ecq;
	void *ectx;
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) != 0 && errno == EAGAIN,
	      "ibv_get_cq_event with nothing to take, O_NONBLOCK: %s, want EAGAIN", strerror(errno));
	CHECK(!readable(ch->fd, 0), "channel->fd readable with no event");
	/* a receive on cq2 */
	post_recv(q.b.qp, 300, bufB, 64, mrB);
	sends(&q.a, 0, 1);
	CHECK(readable(ch->fd, 5000), "channel->fd not readable after a completion on an armed CQ");
	ZERO(ibv_get_cq_event(ch, &ecq, &ectx));
	CHECK(ecq == cq2 && ectx == &tag2, "the event names CQ %p (context %p), want the receive CQ %p", (void *)ecq,
	      ectx, (void *)cq2);
	ibv_ack_cq_events(ecq, 1);
	expect(cq2, "receive", 300, IBV_WC_RECV, q.b.qp, NULL);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) != 0 && errno == EAGAIN, "a second event for one completion");
	/* a send completion on cq1 */
	post_recv(q.a.qp, 301, bufA, 64, mrA);
	send_op(&q.b, IBV_WR_SEND, 302, bufB, 64, mrB, 0, 0);
	CHECK(readable(ch->fd, 5000), "channel->fd not readable after a send completion");
	ZERO(ibv_get_cq_event(ch, &ecq, &ectx));
	CHECK(ecq == cq1 && ectx == &tag1, "the event names CQ %p, want the send CQ %p", (void *)ecq, (void *)cq1);
	expect(cq1, "send", 302, IBV_WC_SEND, q.b.qp, NULL);
	expect(q.a.rcq, "peer receive", 301, IBV_WC_RECV, q.a.qp, NULL);
	/* not armed again: no event */
	post_recv(q.a.qp, 303, bufA, 64, mrA);
	send_op(&q.b, IBV_WR_SEND, 304, bufB, 64, mrB, 0, 0);
	expect(cq1, "send", 304, IBV_WC_SEND, q.b.qp, NULL);
	expect(q.a.rcq, "peer receive", 303, IBV_WC_RECV, q.a.qp, NULL);
	CHECK(!readable(ch->fd, 50), "an event without arming");
	ibv_ack_cq_events(cq1, 1);
	/* solicited only: an unsolicited SEND does not wake, a solicited one does */
	ZERO(ibv_req_notify_cq(cq2, 1));
	post_recv(q.b.qp, 305, bufB, 64, mrB);
	post_recv(q.b.qp, 306, bufB, 64, mrB);
	sends(&q.a, 1, 1);
	expect(cq2, "unsolicited receive", 305, IBV_WC_RECV, q.b.qp, NULL);
	CHECK(!readable(ch->fd, 50), "an event for an unsolicited SEND on a solicited-only CQ");
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED};
	post(&q.a, &wr);
	expect(q.a.scq, "solicited SEND", 2, IBV_WC_SEND, q.a.qp, NULL);
	CHECK(readable(ch->fd, 5000), "no event for a solicited SEND");
	ZERO(ibv_get_cq_event(ch, &ecq, &ectx));
	CHECK(ecq == cq2, "solicited event names the wrong CQ");
	ibv_ack_cq_events(cq2, 1);
	expect(cq2, "solicited receive", 306, IBV_WC_RECV, q.b.qp, NULL);
	/* blocking again: ibv_get_cq_event sleeps until the completion */
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "fcntl");
	ZERO(ibv_req_notify_cq(cq2, 0));
	post_recv(q.b.qp, 307, bufB, 64, mrB);
	sends(&q.a, 3, 1);
	ZERO(ibv_get_cq_event(ch, &ecq, &ectx));
	CHECK(ecq == cq2, "blocking ibv_get_cq_event named the wrong CQ");
	ibv_ack_cq_events(cq2, 1);
	expect(cq2, "receive", 307, IBV_WC_RECV, q.b.qp, NULL);
	/* both CQs at once: two events, one naming each */
	ZERO(ibv_req_notify_cq(cq1, 0));
	ZERO(ibv_req_notify_cq(cq2, 0));
	post_recv(q.b.qp, 308, bufB, 64, mrB);
	post_recv(q.a.qp, 309, bufA, 64, mrA);
	sends(&q.a, 4, 1);
	send_op(&q.b, IBV_WR_SEND, 310, bufB, 64, mrB, 0, 0);
	expect(q.a.rcq, "peer receive", 309, IBV_WC_RECV, q.a.qp, NULL);
	CHECK(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "fcntl");
	int seen1 = 0, seen2 = 0;
	int64_t end = now_ms() + 5000;
	while (seen1 + seen2 < 2 && now_ms() < end) {
		if (ibv_get_cq_event(ch, &ecq, &ectx)) {
			CHECK(errno == EAGAIN, "ibv_get_cq_event: %s", strerror(errno));
			continue;
		}
		CHECK((ecq == cq1 && ectx == &tag1) || (ecq == cq2 && ectx == &tag2), "an event names CQ %p",
		      (void *)ecq);
		seen1 += ecq == cq1;
		seen2 += ecq == cq2;
		ibv_ack_cq_events(ecq, 1);
	}
	CHECK(seen1 == 1 && seen2 == 1, "events: %d for the send CQ, %d for the receive CQ, want 1 and 1", seen1, seen2);
	errno = 0;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) != 0 && errno == EAGAIN, "a third event");
	expect(cq1, "send", 310, IBV_WC_SEND, q.b.qp, NULL);
	expect(cq2, "receive", 308, IBV_WC_RECV, q.b.qp, NULL);
	CHECK(fcntl(ch->fd, F_SETFL, fl) == 0, "fcntl");
	CHECK(ibv_destroy_comp_channel(ch) != 0, "ibv_destroy_comp_channel with CQs on it succeeded");
	free_pair(&q);
	ZERO(ibv_destroy_cq(cq1));
	ZERO(ibv_destroy_cq(cq2));
	ZERO(ibv_destroy_comp_channel(ch));
}

/* ---- 7. SRQ ----------------------------------------------------------- */

static struct ibv_srq *srq;
static struct ibv_cq *srq_cq;
static struct pair S1, S2;

static void c_srq(void)
{
	struct ibv_srq_init_attr sa = {.srq_context = &S1, .attr = {.max_wr = 16, .max_sge = 2}};
	srq = ibv_create_srq(dev[1].pd, &sa);
	CHECK(srq, "ibv_create_srq: %s", strerror(errno));
	CHECK(sa.attr.max_wr >= 16 && sa.attr.max_sge >= 2, "ibv_create_srq granted max_wr %u max_sge %u",
	      sa.attr.max_wr, sa.attr.max_sge);
	CHECK(srq->context == dev[1].ctx && srq->pd == dev[1].pd && srq->srq_context == &S1, "ibv_srq fields");
	uint32_t srqn = 0;
	ZERO(ibv_get_srq_num(srq, &srqn));
	struct ibv_srq_attr qa;
	ZERO(ibv_query_srq(srq, &qa));
	CHECK(qa.max_wr >= 16 && qa.max_sge >= 2 && qa.srq_limit == 0, "ibv_query_srq: max_wr %u max_sge %u limit %u",
	      qa.max_wr, qa.max_sge, qa.srq_limit);
	srq_cq = ibv_create_cq(dev[1].ctx, 256, NULL, NULL, 0);
	CHECK(srq_cq, "ibv_create_cq: %s", strerror(errno));
	struct qpopt ob = {.srq = srq, .rcq = srq_cq};
	new_pair(&S1, &(struct qpopt){0}, &ob);
	new_pair(&S2, &(struct qpopt){0}, &ob);
	/* a QP on an SRQ takes no receives of its own */
	struct ibv_recv_wr rw = {.wr_id = 1}, *bad;
	CHECK(ibv_post_recv(S1.b.qp, &rw, &bad) != 0, "ibv_post_recv on a QP with an SRQ succeeded");
	/* an SRQ holds max_wr WRs no QP has taken */
	struct ibv_srq *s2 = ibv_create_srq(dev[1].pd, &(struct ibv_srq_init_attr){.attr = {.max_wr = 4, .max_sge = 1}});
	CHECK(s2, "ibv_create_srq: %s", strerror(errno));
	struct ibv_srq_attr a2;
	ZERO(ibv_query_srq(s2, &a2));
	for (uint32_t i = 0; i < a2.max_wr; i++)
		post_srq_recv(s2, i, bufB, 64, mrB);
	struct ibv_sge sg = {.addr = (uintptr_t)bufB, .length = 64, .lkey = mrB->lkey};
	struct ibv_recv_wr w2 = {.wr_id = 99, .sg_list = &sg, .num_sge = 1}, *bad2 = NULL;
	int err = ibv_post_srq_recv(s2, &w2, &bad2);
	CHECK(err == ENOMEM && bad2 == &w2, "post_srq_recv past max_wr %u: %s, want ENOMEM", a2.max_wr, strerror(err));
	ZERO(ibv_destroy_srq(s2));
	memset(bufB, 0, 16 * 256);
	for (int i = 0; i < 8; i++)
		post_srq_recv(srq, (uint64_t)i, bufB + 256 * i, 256, mrB);
	struct pair *from[4] = {&S1, &S2, &S2, &S1};
	for (int i = 0; i < 4; i++) {
		fill(bufA + 256 * i, 100 + (uint32_t)i, 80 + (unsigned)i);
		send_op(&from[i]->a, IBV_WR_SEND, 400 + (uint64_t)i, bufA + 256 * i, 100 + (uint32_t)i, mrA, 0, 0);
		expect(from[i]->a.scq, "sender", 400 + (uint64_t)i, IBV_WC_SEND, from[i]->a.qp, NULL);
		struct ibv_wc wc;
		expect(srq_cq, "SRQ receive", (uint64_t)i, IBV_WC_RECV, from[i]->b.qp, &wc);
		CHECK(wc.byte_len == 100 + (uint32_t)i && same(bufB + 256 * i, 100 + (size_t)i, 80 + (unsigned)i, 0),
		      "SRQ receive %d: byte_len %u or data", i, wc.byte_len);
	}
}

/* ibv_modify_srq(IBV_SRQ_MAX_WR) with WRs posted: they survive. */
static void c_srq_resize(void)
{
	CHECK(srq, "no SRQ");
	/* 8..15 still posted: 4..7 from c_srq, then 4 more */
	for (int i = 8; i < 12; i++)
		post_srq_recv(srq, (uint64_t)i, bufB + 256 * i, 256, mrB);
	struct ibv_srq_attr small = {.max_wr = 4};
	CHECK(ibv_modify_srq(srq, &small, IBV_SRQ_MAX_WR) != 0, "resizing an SRQ holding 8 WRs to 4 succeeded");
	struct ibv_srq_attr lim = {.srq_limit = 1000};
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) != 0, "an SRQ limit over max_wr was taken");
	struct ibv_srq_attr a = {.max_wr = 64};
	ZERO(ibv_modify_srq(srq, &a, IBV_SRQ_MAX_WR));
	struct ibv_srq_attr qa;
	ZERO(ibv_query_srq(srq, &qa));
	CHECK(qa.max_wr >= 64, "ibv_query_srq after resizing to 64: max_wr %u", qa.max_wr);
	/* more than the old size can hold */
	for (int i = 12; i < 60; i++)
		post_srq_recv(srq, (uint64_t)i, bufB + 256 * i, 256, mrB);
	int per[2] = {0, 0};
	for (int i = 4; i < 60; i++) {
		struct pair *f = (i & 1) ? &S1 : &S2;
		fill(bufA + 256 * i, 50, 100 + (unsigned)i);
		send_op(&f->a, IBV_WR_SEND, 500 + (uint64_t)i, bufA + 256 * i, 50, mrA, 0, 0);
	}
	for (int i = 4; i < 60; i++) {
		struct pair *f = (i & 1) ? &S1 : &S2;
		expect(f->a.scq, "sender", 500 + (uint64_t)i, IBV_WC_SEND, f->a.qp, NULL);
	}
	/* taken 16 at a time */
	struct ibv_wc wcs[16];
	int nwc = 0, next = 0;
	int64_t end = now_ms() + 5000;
	for (int i = 4; i < 60; i++) {
		while (next == nwc) {
			nwc = ibv_poll_cq(srq_cq, 16, wcs);
			next = 0;
			CHECK(nwc >= 0, "ibv_poll_cq: %d", nwc);
			CHECK(nwc > 0 || now_ms() < end, "SRQ receive %d: no completion in 5 s", i);
		}
		struct ibv_wc wc = wcs[next++];
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i && wc.opcode == IBV_WC_RECV &&
			      wc.byte_len == 50,
		      "SRQ receive: wr_id %" PRIu64 " %s byte_len %u, want wr_id %d", wc.wr_id,
		      ibv_wc_status_str(wc.status), wc.byte_len, i);
		CHECK(wc.qp_num == S1.b.qp->qp_num || wc.qp_num == S2.b.qp->qp_num, "qp_num %u", wc.qp_num);
		per[wc.qp_num == S1.b.qp->qp_num]++;
	}
	CHECK(per[0] == 28 && per[1] == 28, "receives per QP %d/%d, want 28/28", per[0], per[1]);
	expect_none(srq_cq, 10, "SRQ");
}

/* srq_limit_event: SRQ_LIMIT_REACHED for our SRQ within ms. */
static int srq_limit_event(struct ibv_context *ctx, int ms)
{
	struct ibv_async_event ev;
	if (!wait_event(ctx, IBV_EVENT_SRQ_LIMIT_REACHED, ms, &ev))
		return 0;
	CHECK(ev.element.srq == srq, "SRQ_LIMIT_REACHED names SRQ %p, want %p", (void *)ev.element.srq, (void *)srq);
	return 1;
}

static void c_srq_limit(void)
{
	CHECK(srq, "no SRQ");
	struct ibv_context *ctx = dev[1].ctx;
	drain_async(ctx);
	for (int i = 0; i < 6; i++)
		post_srq_recv(srq, 600 + (uint64_t)i, bufB + 256 * i, 256, mrB);
	struct ibv_srq_attr a = {.srq_limit = 4};
	ZERO(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT));
	struct ibv_srq_attr qa;
	ZERO(ibv_query_srq(srq, &qa));
	CHECK(qa.srq_limit == 4, "ibv_query_srq: srq_limit %u, want 4", qa.srq_limit);
	for (int i = 0; i < 3; i++) {
		send_op(&S1.a, IBV_WR_SEND, 700 + (uint64_t)i, bufA, 8, mrA, 0, 0);
		expect(S1.a.scq, "sender", 700 + (uint64_t)i, IBV_WC_SEND, S1.a.qp, NULL);
		expect(srq_cq, "SRQ receive", 600 + (uint64_t)i, IBV_WC_RECV, S1.b.qp, NULL);
		int left = 5 - i;
		int got = srq_limit_event(ctx, left < 4 ? 5000 : 100);
		if (left >= 4)
			CHECK(!got, "SRQ_LIMIT_REACHED with %d WRs posted, limit 4", left);
		else
			CHECK(got, "no SRQ_LIMIT_REACHED in 5 s with %d WRs posted, limit 4", left);
	}
	ZERO(ibv_query_srq(srq, &qa));
	CHECK(qa.srq_limit == 0, "after SRQ_LIMIT_REACHED srq_limit is %u, want 0 (disarmed)", qa.srq_limit);
	/* disarmed: no second event */
	send_op(&S1.a, IBV_WR_SEND, 703, bufA, 8, mrA, 0, 0);
	expect(S1.a.scq, "sender", 703, IBV_WC_SEND, S1.a.qp, NULL);
	expect(srq_cq, "SRQ receive", 603, IBV_WC_RECV, S1.b.qp, NULL);
	CHECK(!srq_limit_event(ctx, 100), "a second SRQ_LIMIT_REACHED without arming");
}

/* A QP of an SRQ moved to ERR: IBV_EVENT_QP_LAST_WQE_REACHED (IBA's Last
 * WQE Reached affiliated event, raised by kernel rxe's flush_recv_queue),
 * after which the QP may be destroyed. */
static void c_srq_last_wqe(void)
{
	CHECK(srq, "no SRQ");
	struct ibv_context *ctx = dev[1].ctx;
	drain_async(ctx);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
	ZERO(ibv_modify_qp(S2.b.qp, &a, IBV_QP_STATE));
	struct ibv_async_event ev;
	if (!wait_event(ctx, IBV_EVENT_QP_LAST_WQE_REACHED, 2000, &ev))
		fail("no IBV_EVENT_QP_LAST_WQE_REACHED in 2 s after an SRQ QP went to ERR");
	CHECK(ev.element.qp == S2.b.qp, "QP_LAST_WQE_REACHED names QP %p, want %p", (void *)ev.element.qp,
	      (void *)S2.b.qp);
	/* the SRQ's other QP goes on, with the oldest WQE the SRQ holds (604,
	 * left by c_srq_limit): the QP in ERR took none of them */
	post_srq_recv(srq, 650, bufB, 64, mrB);
	send_op(&S1.a, IBV_WR_SEND, 710, bufA, 8, mrA, 0, 0);
	expect(S1.a.scq, "sender", 710, IBV_WC_SEND, S1.a.qp, NULL);
	expect(srq_cq, "SRQ receive", 604, IBV_WC_RECV, S1.b.qp, NULL);
}

static void c_srq_teardown(void)
{
	CHECK(srq, "no SRQ");
	free_pair(&S1);
	free_pair(&S2);
	ZERO(ibv_destroy_srq(srq));
	ZERO(ibv_destroy_cq(srq_cq));
	srq = NULL;
}

/* ---- 8. ibv_query_qp, UD ---------------------------------------------- */

static void c_query_qp(void)
{
	struct pair q;
	new_pair(&q, &(struct qpopt){.max_wr = 32, .max_inline = 128}, NULL);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int mask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_DEST_QPN | IBV_QP_PATH_MTU | IBV_QP_CAP | IBV_QP_AV |
		   IBV_QP_SQ_PSN | IBV_QP_RQ_PSN | IBV_QP_ACCESS_FLAGS | IBV_QP_MAX_QP_RD_ATOMIC |
		   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		   IBV_QP_MIN_RNR_TIMER | IBV_QP_PORT;
	ZERO(ibv_query_qp(q.a.qp, &a, mask, &ia));
	CHECK(a.qp_state == IBV_QPS_RTS, "state %d, want RTS", a.qp_state);
	CHECK(a.dest_qp_num == q.b.qp->qp_num, "dest_qp_num %u, want %u", a.dest_qp_num, q.b.qp->qp_num);
	CHECK(a.path_mtu == dev[0].port.active_mtu, "path_mtu %d, want %d", mtu_num(a.path_mtu),
	      mtu_num(dev[0].port.active_mtu));
	CHECK(a.sq_psn == q.a.psn && a.rq_psn == q.b.psn, "sq_psn %#x rq_psn %#x, want %#x %#x", a.sq_psn, a.rq_psn,
	      q.a.psn, q.b.psn);
	CHECK(a.cap.max_send_wr >= 32 && a.cap.max_recv_wr >= 32 && a.cap.max_send_sge >= 4 &&
		      a.cap.max_recv_sge >= 4 && a.cap.max_inline_data >= 128,
	      "cap: send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u", a.cap.max_send_wr, a.cap.max_recv_wr,
	      a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data);
	CHECK(a.cap.max_send_wr == q.a.cap.max_send_wr && a.cap.max_inline_data == q.a.cap.max_inline_data,
	      "cap differs from what create_qp granted");
	CHECK(a.ah_attr.is_global && !memcmp(&a.ah_attr.grh.dgid, &dev[1].gid, 16) &&
		      a.ah_attr.grh.sgid_index == dev[0].gidx && a.ah_attr.port_num == 1,
	      "ah_attr: is_global %d sgid_index %d port %d", a.ah_attr.is_global, a.ah_attr.grh.sgid_index,
	      a.ah_attr.port_num);
	unsigned acc = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(((unsigned)a.qp_access_flags & acc) == acc, "qp_access_flags %#x", a.qp_access_flags);
	CHECK(a.timeout == 14 && a.retry_cnt == 7 && a.rnr_retry == 7 && a.min_rnr_timer == 12 && a.port_num == 1,
	      "timeout %d retry_cnt %d rnr_retry %d min_rnr_timer %d port %d", a.timeout, a.retry_cnt, a.rnr_retry,
	      a.min_rnr_timer, a.port_num);
	CHECK(a.max_rd_atomic >= 1 && a.max_dest_rd_atomic >= 1, "max_rd_atomic %d max_dest_rd_atomic %d",
	      a.max_rd_atomic, a.max_dest_rd_atomic);
	CHECK(ia.qp_type == IBV_QPT_RC && ia.send_cq == q.a.scq && ia.recv_cq == q.a.rcq && !ia.srq &&
		      ia.cap.max_send_wr == a.cap.max_send_wr,
	      "init_attr: type %d", ia.qp_type);
	/* a new QP is in RESET */
	struct end e;
	make_qp(&e, &dev[0], &(struct qpopt){0});
	ZERO(ibv_query_qp(e.qp, &a, IBV_QP_STATE, &ia));
	CHECK(a.qp_state == IBV_QPS_RESET, "a new QP: state %d", a.qp_state);
	to_init(&e);
	ZERO(ibv_query_qp(e.qp, &a, IBV_QP_STATE, &ia));
	CHECK(a.qp_state == IBV_QPS_INIT, "after INIT: state %d", a.qp_state);
	free_end(&e);
	free_pair(&q);
}

static void ud_send(struct end *e, uint64_t id, struct ibv_ah *ah, uint32_t qpn, void *addr, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)addr, .length = len, .lkey = e->d == &dev[0] ? mrA->lkey : mrB->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	post(e, &wr);
}

static void c_ud(void)
{
	struct end ua, ub;
	struct qpopt o = {.type = IBV_QPT_UD, .max_wr = 16, .max_sge = 1, .max_inline = 64};
	make_qp(&ua, &dev[0], &o);
	make_qp(&ub, &dev[1], &o);
	to_init(&ua);
	to_init(&ub);
	to_rtr(&ua, &ub);
	to_rtr(&ub, &ua);
	to_rts(&ua);
	to_rts(&ub);
	uint32_t n = (uint32_t)mtu_num(dev[0].port.active_mtu); /* a UD message is at most one MTU */
	memset(bufB, 0, 8192);
	memset(bufA + 100000, 0, 8192);
	post_recv(ub.qp, 800, bufB, 40 + 4096, mrB);
	post_recv(ua.qp, 801, bufA + 100000, 40 + 4096, mrA);
	struct ibv_ah_attr aa = ah_to(&dev[0], &dev[1]);
	struct ibv_ah *ah = ibv_create_ah(dev[0].pd, &aa);
	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	fill(bufA, n, 90);
	ud_send(&ua, 90, ah, ub.qp->qp_num, bufA, n);
	expect(ua.scq, "UD sender", 90, IBV_WC_SEND, ua.qp, NULL);
	struct ibv_wc wc;
	expect(ub.rcq, "UD receiver", 800, IBV_WC_RECV, ub.qp, &wc);
	CHECK(wc.byte_len == n + 40, "byte_len %u, want %u (+ 40 for the GRH)", wc.byte_len, n + 40);
	CHECK(wc.wc_flags & IBV_WC_GRH, "wc_flags %#x without IBV_WC_GRH", wc.wc_flags);
	CHECK(wc.src_qp == ua.qp->qp_num, "src_qp %u, want %u", wc.src_qp, ua.qp->qp_num);
	CHECK(same(bufB + 40, n, 90, 0), "UD data");
	/* the AH back to the sender, from the receive */
	struct ibv_ah_attr ra;
	memset(&ra, 0xff, sizeof(ra));
	ZERO(ibv_init_ah_from_wc(dev[1].ctx, 1, &wc, (struct ibv_grh *)(void *)bufB, &ra));
	char g1[INET6_ADDRSTRLEN], g2[INET6_ADDRSTRLEN];
	gidstr(&ra.grh.dgid, g1);
	gidstr(&dev[0].gid, g2);
	CHECK(ra.is_global && !memcmp(&ra.grh.dgid, &dev[0].gid, 16), "ibv_init_ah_from_wc: dgid %s, want %s", g1, g2);
	CHECK(ra.grh.sgid_index == dev[1].gidx, "ibv_init_ah_from_wc: sgid_index %d, want %d (the GID it came to)",
	      ra.grh.sgid_index, dev[1].gidx);
	CHECK(ra.port_num == 1, "ibv_init_ah_from_wc: port_num %d", ra.port_num);
	struct ibv_ah *back = ibv_create_ah_from_wc(dev[1].pd, &wc, (struct ibv_grh *)(void *)bufB, 1);
	CHECK(back, "ibv_create_ah_from_wc: %s", strerror(errno));
	fill(bufB + 4096 + 64, 100, 91);
	ud_send(&ub, 91, back, wc.src_qp, bufB + 4096 + 64, 100);
	expect(ub.scq, "UD reply", 91, IBV_WC_SEND, ub.qp, NULL);
	expect(ua.rcq, "UD reply receiver", 801, IBV_WC_RECV, ua.qp, &wc);
	CHECK(wc.byte_len == 140 && wc.src_qp == ub.qp->qp_num && (wc.wc_flags & IBV_WC_GRH) &&
		      same(bufA + 100000 + 40, 100, 91, 0),
	      "reply: byte_len %u src_qp %u wc_flags %#x", wc.byte_len, wc.src_qp, wc.wc_flags);
	ZERO(ibv_init_ah_from_wc(dev[0].ctx, 1, &wc, (struct ibv_grh *)(void *)(bufA + 100000), &ra));
	CHECK(!memcmp(&ra.grh.dgid, &dev[1].gid, 16) && ra.grh.sgid_index == dev[0].gidx,
	      "the reply's ibv_init_ah_from_wc: dgid or sgid_index %d", ra.grh.sgid_index);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	ZERO(ibv_query_qp(ub.qp, &qa, IBV_QP_STATE | IBV_QP_QKEY, &qi));
	CHECK(qa.qp_state == IBV_QPS_RTS && qa.qkey == QKEY && qi.qp_type == IBV_QPT_UD,
	      "ibv_query_qp of a UD QP: state %d qkey %#x type %d", qa.qp_state, qa.qkey, qi.qp_type);
	/* a wrong Q_Key is dropped: nothing arrives */
	post_recv(ub.qp, 802, bufB, 40 + 4096, mrB);
	struct ibv_sge s = {.addr = (uintptr_t)bufA, .length = 8, .lkey = mrA->lkey};
	struct ibv_send_wr wr = {.wr_id = 92, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = ub.qp->qp_num;
	wr.wr.ud.remote_qkey = QKEY + 1;
	post(&ua, &wr);
	expect(ua.scq, "UD sender (wrong Q_Key)", 92, IBV_WC_SEND, ua.qp, NULL);
	expect_none(ub.rcq, 50, "a datagram with the wrong Q_Key");
	/* a UD QP of ibv_create_qp_ex: ibv_wr_send + ibv_wr_set_ud_addr */
	struct end ux;
	struct qpopt ox = o;
	ox.ex = 1;
	make_qp(&ux, &dev[0], &ox);
	to_init(&ux);
	to_rtr(&ux, &ub);
	to_rts(&ux);
	post_recv(ub.qp, 803, bufB + 8192, 40 + 4096, mrB);
	ibv_wr_start(ux.qpx);
	ux.qpx->wr_id = 93;
	ux.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ux.qpx);
	ibv_wr_set_ud_addr(ux.qpx, ah, ub.qp->qp_num, QKEY);
	ibv_wr_set_sge(ux.qpx, mrA->lkey, (uintptr_t)bufA, 77);
	ux.qpx->wr_id = 94;
	ibv_wr_send_imm(ux.qpx, imm_value());
	ibv_wr_set_ud_addr(ux.qpx, ah, ub.qp->qp_num, QKEY);
	ibv_wr_set_inline_data(ux.qpx, bufA, 20);
	ZERO(ibv_wr_complete(ux.qpx));
	expect(ux.scq, "wr_send UD", 93, IBV_WC_SEND, ux.qp, NULL);
	expect(ux.scq, "wr_send_imm UD", 94, IBV_WC_SEND, ux.qp, NULL);
	expect(ub.rcq, "the first datagram", 802, IBV_WC_RECV, ub.qp, &wc);
	CHECK(wc.byte_len == 77 + 40 && wc.src_qp == ux.qp->qp_num && same(bufB + 40, 77, 90, 0),
	      "wr_send UD: byte_len %u src_qp %u", wc.byte_len, wc.src_qp);
	expect(ub.rcq, "the second datagram", 803, IBV_WC_RECV, ub.qp, &wc);
	CHECK(wc.byte_len == 20 + 40 && same(bufB + 8192 + 40, 20, 90, 0), "wr_send_imm UD: byte_len %u", wc.byte_len);
	check_imm("wr_send_imm UD", wc.wc_flags, wc.imm_data);
	free_end(&ux);
	ZERO(ibv_destroy_ah(back));
	ZERO(ibv_destroy_ah(ah));
	free_end(&ua);
	free_end(&ub);
}

/* ---- 9. fork ---------------------------------------------------------- */

static void child(uint8_t *p, size_t n, int rd, int wr) __attribute__((noreturn));
static void child(uint8_t *p, size_t n, int rd, int wr)
{
	char c;
	alarm(20);
	if (!same(p, n, 95, 0)) {
		printf("# child: the registered buffer does not hold the parent's data\n");
		_exit(2);
	}
	memset(p, 0xc1, n);
	if (write(wr, "w", 1) != 1 || read(rd, &c, 1) != 1)
		_exit(3);
	if (!all(p, n, 0xc1)) {
		printf("# child: its copy changed after the parent's MR took a WRITE\n");
		_exit(4);
	}
	struct ibv_context *ctx = ibv_open_device(devlist[1]);
	if (!ctx) {
		printf("# child: ibv_open_device: %s\n", strerror(errno));
		_exit(5);
	}
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd) {
		printf("# child: ibv_alloc_pd: %s\n", strerror(errno));
		_exit(6);
	}
	struct ibv_mr *m = ibv_reg_mr(pd, p, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!m || !all(p, n, 0xc1)) {
		printf("# child: ibv_reg_mr of its copy: %s\n", m ? "the data changed" : strerror(errno));
		_exit(7);
	}
	uint8_t *q = malloc(1 << 16);
	struct ibv_mr *m2 = q ? ibv_reg_mr(pd, q, 1 << 16, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!m2) {
		printf("# child: ibv_reg_mr of new memory: %s\n", strerror(errno));
		_exit(8);
	}
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq) {
		printf("# child: ibv_create_cq: %s\n", strerror(errno));
		_exit(9);
	}
	if (ibv_destroy_cq(cq) || ibv_dereg_mr(m2) || ibv_dereg_mr(m) || ibv_dealloc_pd(pd) || ibv_close_device(ctx)) {
		printf("# child: teardown: %s\n", strerror(errno));
		_exit(10);
	}
	fflush(stdout);
	exit(0);
}

static void c_fork(void)
{
	size_t n = 2 * 4096;
	uint8_t *p = aligned_alloc(4096, n);
	CHECK(p, "aligned_alloc");
	fill(p, n, 95);
	struct ibv_mr *m = reg(&dev[1], p, n);
	int toc[2], top[2];
	CHECK(!pipe(toc) && !pipe(top), "pipe: %s", strerror(errno));
	fflush(stdout);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(toc[1]);
		close(top[0]);
		child(p, n, toc[0], top[1]);
	}
	close(toc[0]);
	close(top[1]);
	char c;
	int got = (int)read(top[0], &c, 1);
	CHECK(got == 1, "the child did not get as far as writing its copy");
	CHECK(same(p, n, 95, 0), "the parent sees the child's writes");
	fill(bufA, n, 96);
	rdma(&P.a, IBV_WR_RDMA_WRITE, bufA, (uint32_t)n, mrA, (uintptr_t)p, m->rkey);
	CHECK(same(p, n, 96, 0), "the peer's WRITE after the fork did not land in the parent");
	CHECK(write(toc[1], "g", 1) == 1, "write to the child");
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid: %s", strerror(errno));
	close(toc[1]);
	close(top[0]);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child: %s %d",
	      WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
	/* and the parent's MR still works */
	write_read("the parent's MR after the child exited", p, (uint32_t)n, m->rkey, 97);
	ZERO(ibv_dereg_mr(m));
	free(p);
}

/* path_rec: ibv_copy_path_rec_to_kern and _from_kern carry every field of
 * a path record, each given a distinct value, there and back. */
/* libibverbs exports these (IBVERBS_1.0); rdma-core 44 installs no header
 * that declares them (marshall.h is its own). */
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

static void c_path_rec(void)
{
	struct ibv_sa_path_rec a, b;
	struct ib_user_path_rec k;
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	for (int i = 0; i < 16; i++) {
		a.dgid.raw[i] = (uint8_t)(i + 1);
		a.sgid.raw[i] = (uint8_t)(i + 101);
	}
	a.dlid = htobe16(2), a.slid = htobe16(3), a.raw_traffic = 1, a.flow_label = htobe32(4), a.hop_limit = 5;
	a.traffic_class = 6, a.reversible = htobe32(7), a.numb_path = 8, a.pkey = htobe16(9), a.sl = 10;
	a.mtu_selector = 11, a.mtu = 12, a.rate_selector = 13, a.rate = 14, a.packet_life_time_selector = 15;
	a.packet_life_time = 16, a.preference = 17;
	memset(&k, 0, sizeof(k));
	ibv_copy_path_rec_to_kern(&k, &a);
	CHECK(!memcmp(k.dgid, a.dgid.raw, 16) && !memcmp(k.sgid, a.sgid.raw, 16) && k.dlid == a.dlid && k.slid == a.slid &&
		      k.flow_label == a.flow_label && k.hop_limit == 5 && k.traffic_class == 6 && k.pkey == a.pkey &&
		      k.sl == 10 && k.mtu == 12 && k.rate == 14 && k.packet_life_time == 16 && k.preference == 17 &&
		      k.numb_path == 8 && k.reversible == (__u32)a.reversible && k.raw_traffic == 1 && k.mtu_selector == 11 &&
		      k.rate_selector == 13 && k.packet_life_time_selector == 15,
	      "to_kern lost a field");
	ibv_copy_path_rec_from_kern(&b, &k);
	CHECK(!memcmp(&a, &b, sizeof(a)), "a path record there and back differs");
}

/* ---- main ------------------------------------------------------------- */

static void teardown(void)
{
	if (X.a.qp)
		free_pair(&X);
	free_pair(&P);
	ZERO(ibv_dereg_mr(mrA));
	ZERO(ibv_dereg_mr(mrA2));
	ZERO(ibv_dereg_mr(mrB));
	for (int i = 0; i < 2; i++) {
		/* a failed case may have left its objects in the PD */
		int err = ibv_dealloc_pd(dev[i].pd);
		CHECK(!err || (err == EBUSY && nfail), "ibv_dealloc_pd: %s", strerror(err));
		ZERO(ibv_close_device(dev[i].ctx));
	}
	ibv_free_device_list(devlist);
	free(bufA);
	free(bufB);
	free(bufA2);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	start_alarm(60);
	srand48(getpid());
	only = getenv("VERBS_CASE");
	if (argc > 1) {
		int m = atoi(argv[1]);
		want_mtu = m == 1024 ? IBV_MTU_1024 : m == 4096 ? IBV_MTU_4096 : m == 2048 ? IBV_MTU_2048 : IBV_MTU_256;
	}
	int n = 0;
	devlist = ibv_get_device_list(&n);
	if (!devlist || n != 2) {
		printf("FAIL setup: %d devices, want 2 (VRNICD_SOCKET=a:b)\n", n);
		return 1;
	}
	run("setup", setup);
	if (nfail)
		return 1;
	run("post_send", c_post_send);
	run("post_send_imm", c_post_send_imm);
	run("post_write", c_post_write);
	run("post_write_imm", c_post_write_imm);
	run("post_read", c_post_read);
	run("post_reads", c_post_reads);
	run("post_atomic", c_post_atomic);
	run("post_send_inv", c_post_send_inv);
	run("post_local_inv", c_post_local_inv);
	run("post_inline", c_post_inline);
	run("post_sge_list", c_post_sge_list);
	run("post_chain", c_post_chain);
	run("post_bad_wr", c_post_bad_wr);
	run("post_atomic_misaligned", c_post_atomic_misaligned);
	run("post_queue_full", c_post_queue_full);
	run("post_sig_all", c_post_sig_all);
	run("post_recv_too_small", c_post_recv_too_small);
	run("post_rnr", c_post_rnr);
	run("qp_err_flush", c_qp_err_flush);
	run("wr_setup", c_wr_setup);
	run("wr_send", c_wr_send);
	run("wr_rdma", c_wr_rdma);
	run("wr_atomic", c_wr_atomic);
	run("wr_sge_list_inline", c_wr_sge_list_inline);
	run("wr_abort", c_wr_abort);
	run("cq_ex_batch", c_cq_ex_batch);
	run("cq_ex_inv", c_cq_ex_inv);
	run("mw_type1", c_mw_type1);
	run("mw_type2", c_mw_type2);
	run("mw_type2_wr", c_mw_type2_wr);
	run("mr_shared_page", c_mr_shared_page);
	run("mr_multi_seg", c_mr_multi_seg);
	run("mr_stack", c_mr_stack);
	run("mr_static", c_mr_static);
	run("mr_overlap_dereg", c_mr_overlap_dereg);
	run("mr_16mib", c_mr_16mib);
	run("mr_bounds", c_mr_bounds);
	run("mr_access", c_mr_access);
	run("mr_iova", c_mr_iova);
	run("mr_readonly", c_mr_readonly);
	run("mr_mmap", c_mr_mmap);
	run("cq_resize", c_cq_resize);
	run("cq_resize_busy", c_cq_resize_busy);
	run("cq_resize_ex", c_cq_resize_ex);
	run("channel", c_channel);
	run("channel_resize", c_channel_resize);
	run("srq", c_srq);
	run("srq_resize", c_srq_resize);
	run("srq_limit", c_srq_limit);
	run("srq_last_wqe", c_srq_last_wqe);
	run("srq_teardown", c_srq_teardown);
	run("query_qp", c_query_qp);
	run("ud", c_ud);
	run("fork", c_fork);
	run("path_rec", c_path_rec);
	run("teardown", teardown);
	printf("%d ok, %d failed, %d skipped\n", nok, nfail, nskip);
	return nfail ? 1 : 0;
}
