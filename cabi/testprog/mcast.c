/* mcast.c: UD multicast through libibverbs as an application uses it
 * (ibv_attach_mcast, ibv_detach_mcast, BLOCK_SELF_MCAST_LB), between two
 * devices (VRNICD_SOCKET=a:b on vrnicd), or on one (a kernel rxe guest's
 * rxe0: the "other device" is then the same one, its multicast loopback).
 * Each case asserts what ib_core, kernel rxe and the IBA say:
 *   attach_rules   EINVAL for a unicast GID and a non-UD QP, EINVAL to detach
 *                  a QP not attached, attaching twice is no error, the
 *                  device advertises its limits
 *   fanout         a message to the group (QPN 0xFFFFFF) reaches every
 *                  attached QP of the other device with the group's Q_Key,
 *                  with a GRH whose destination is the group; a QP of
 *                  another Q_Key or not attached gets nothing
 *   loopback       the sender's device's own attached QPs get it too
 *   detach         a detached QP gets nothing more; destroying an attached
 *                  QP works (uverbs detaches it)
 *   block_self     a QP made with BLOCK_SELF_MCAST_LB does not get its own
 *                  message (kernel rxe refuses the flag: SKIP there)
 *   create_flags   creation flags the device lacks: EOPNOTSUPP or EINVAL */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdlib.h>

#include "cases.h"

#define QKEY 0x01234567u /* rdma_cm's multicast Q_Key */
#define MSG 64
#define SLOT (40 + MSG)
#define NRECV 8

struct dev {
	struct ibv_context *ctx;
	struct ibv_device_attr attr;
	struct ibv_pd *pd;
	int gidx;
};

struct udqp {
	struct dev *d;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
};

static struct ibv_device **devlist;
static struct dev dev[2];
static int ndev; /* 1: dev[1] is dev[0] */
static union ibv_gid group; /* ::ffff:239.7.8.7, as rdma_cm maps an IPv4 group */

static void open_dev(struct dev *d, struct ibv_device *ib)
{
	d->ctx = ibv_open_device(ib);
	CHECK(d->ctx, "ibv_open_device: %s", strerror(errno));
	CHECK(!ibv_query_device(d->ctx, &d->attr), "ibv_query_device");
	d->pd = ibv_alloc_pd(d->ctx);
	CHECK(d->pd, "ibv_alloc_pd: %s", strerror(errno));
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(d->ctx, 1, &pa), "ibv_query_port");
	d->gidx = -1;
	for (int g = 0; g < pa.gid_tbl_len && d->gidx < 0; g++) {
		static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		union ibv_gid gid;
		if (ibv_query_gid(d->ctx, 1, g, &gid) == 0 && !memcmp(gid.raw, v4, 12))
			d->gidx = g;
	}
	CHECK(d->gidx >= 0, "no IPv4-mapped GID");
}

static void setup(void)
{
	for (int i = 0; i < ndev; i++)
		open_dev(&dev[i], devlist[i]);
	if (ndev == 1)
		dev[1] = dev[0];
	memset(&group, 0, sizeof(group));
	group.raw[10] = group.raw[11] = 0xff;
	inet_pton(AF_INET, "239.7.8.7", &group.raw[12]);
}

static void ud_free(struct udqp *u);

/* ud_new makes a UD QP in RTS with Q_Key qkey and NRECV receives posted;
 * flags are ibv_qp_create_flags (0: none). */
static struct udqp ud_new(struct dev *d, uint32_t qkey, uint32_t flags)
{
	struct udqp u = {.d = d};
	u.cq = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
	CHECK(u.cq, "ibv_create_cq: %s", strerror(errno));
	u.buf = calloc(NRECV + 1, SLOT);
	u.mr = ibv_reg_mr(d->pd, u.buf, (NRECV + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE);
	CHECK(u.mr, "ibv_reg_mr: %s", strerror(errno));
	struct ibv_qp_init_attr_ex ia = {.send_cq = u.cq, .recv_cq = u.cq, .qp_type = IBV_QPT_UD, .pd = d->pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD,
					 .cap = {.max_send_wr = 8, .max_recv_wr = NRECV, .max_send_sge = 1, .max_recv_sge = 1}};
	if (flags) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = flags;
	}
	u.qp = ibv_create_qp_ex(d->ctx, &ia);
	if (!u.qp && flags) {
		int err = errno;
		ud_free(&u); /* nothing left behind for teardown's dealloc_pd */
		skip("ibv_create_qp_ex with flags %#x: %s (the device lacks them)", flags, strerror(err));
	}
	CHECK(u.qp, "ibv_create_qp_ex: %s", strerror(errno));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = qkey};
	CHECK(!ibv_modify_qp(u.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), "to INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(!ibv_modify_qp(u.qp, &a, IBV_QP_STATE), "to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	CHECK(!ibv_modify_qp(u.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), "to RTS");
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = {(uintptr_t)(u.buf + (i + 1) * SLOT), SLOT, u.mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(u.qp, &wr, &bad), "ibv_post_recv");
	}
	return u;
}

static void ud_free(struct udqp *u)
{
	if (u->qp)
		CHECK(!ibv_destroy_qp(u->qp), "ibv_destroy_qp: %s", strerror(errno));
	ibv_dereg_mr(u->mr);
	ibv_destroy_cq(u->cq);
	free(u->buf);
	u->qp = NULL;
}

static void attach(struct udqp *u)
{
	int err = ibv_attach_mcast(u->qp, &group, 0);
	CHECK(!err, "ibv_attach_mcast: %s", strerror(err));
}

/* send_group sends one message from u to the group (QPN 0xFFFFFF) and
 * waits for its completion; tag is its first byte. */
static void send_group(struct udqp *u, uint8_t tag)
{
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = group, .sgid_index = (uint8_t)u->d->gidx, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(u->d->pd, &aa);
	CHECK(ah, "ibv_create_ah to the group: %s", strerror(errno));
	memset(u->buf, tag, MSG);
	struct ibv_sge sge = {(uintptr_t)u->buf, MSG, u->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 100, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED,
				 .wr.ud = {.ah = ah, .remote_qpn = 0xFFFFFF, .remote_qkey = QKEY}},
			   *bad;
	CHECK(!ibv_post_send(u->qp, &wr, &bad), "ibv_post_send");
	struct ibv_wc wc;
	int64_t end = now_ms() + 5000;
	int n;
	while ((n = ibv_poll_cq(u->cq, 1, &wc)) == 0 || (n == 1 && wc.wr_id != 100))
		CHECK(now_ms() < end, "send completion timed out");
	CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "send completion: %s", ibv_wc_status_str(wc.status));
	ibv_destroy_ah(ah);
}

/* collect waits ms milliseconds for u's receives and counts them by their
 * first byte (cnt[256]), checking each (status, length, GRH destination
 * the group) and posting its buffer again. Completions of u's own sends
 * are not there: send_group took them. */
static int collect(struct udqp *u, int *cnt, int ms)
{
	memset(cnt, 0, 256 * sizeof(*cnt));
	int total = 0;
	int64_t end = now_ms() + ms;
	while (now_ms() < end) {
		struct ibv_wc wc;
		if (ibv_poll_cq(u->cq, 1, &wc) != 1)
			continue;
		CHECK(wc.status == IBV_WC_SUCCESS, "receive: %s", ibv_wc_status_str(wc.status));
		CHECK((wc.opcode == IBV_WC_RECV) && wc.byte_len == SLOT && (wc.wc_flags & IBV_WC_GRH),
		      "receive opcode %d byte_len %u flags %#x", wc.opcode, wc.byte_len, wc.wc_flags);
		uint8_t *slot = u->buf + (wc.wr_id + 1) * SLOT;
		/* IPv4: the GRH's last 20 bytes are the IP header, destination at 16. */
		CHECK(!memcmp(slot + 20 + 16, &group.raw[12], 4), "GRH destination is not the group");
		cnt[slot[40]]++;
		total++;
		struct ibv_sge sge = {(uintptr_t)slot, SLOT, u->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = wc.wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(u->qp, &wr, &bad), "ibv_post_recv");
	}
	return total;
}

/* expect checks that u received exactly the messages tagged first..first+n-1,
 * each once. */
static void expect(struct udqp *u, const char *who, uint8_t first, int n)
{
	int cnt[256];
	int total = collect(u, cnt, 300);
	for (int i = 0; i < n; i++)
		CHECK(cnt[first + i] == 1, "%s: message %#x received %d times, want once", who, first + i, cnt[first + i]);
	CHECK(total == n, "%s: %d messages, want %d", who, total, n);
}

static void c_attach_rules(void)
{
	struct dev *d = &dev[0];
	CHECK(d->attr.max_mcast_grp > 0 && d->attr.max_mcast_qp_attach > 0 && d->attr.max_total_mcast_qp_attach > 0,
	      "multicast limits %d/%d/%d", d->attr.max_mcast_grp, d->attr.max_mcast_qp_attach,
	      d->attr.max_total_mcast_qp_attach);
	struct udqp u = ud_new(d, QKEY, 0);
	union ibv_gid unicast = group;
	unicast.raw[12] = 192, unicast.raw[13] = 0, unicast.raw[14] = 2, unicast.raw[15] = 9;
	int err = ibv_attach_mcast(u.qp, &unicast, 0);
	CHECK(err == EINVAL, "attach to a unicast GID: %s, want EINVAL", strerror(err));
	err = ibv_detach_mcast(u.qp, &group, 0);
	CHECK(err == EINVAL, "detach a QP not attached: %s, want EINVAL", strerror(err));
	attach(&u);
	attach(&u);
	err = ibv_detach_mcast(u.qp, &group, 0);
	CHECK(!err, "detach: %s", strerror(err));
	struct ibv_cq *cq = ibv_create_cq(d->ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *rc = ibv_create_qp(d->pd, &ia);
	CHECK(rc, "ibv_create_qp RC: %s", strerror(errno));
	err = ibv_attach_mcast(rc, &group, 0);
	CHECK(err == EINVAL, "attach an RC QP: %s, want EINVAL", strerror(err));
	ibv_destroy_qp(rc);
	ibv_destroy_cq(cq);
	ud_free(&u);
}

static void c_fanout(void)
{
	struct udqp s = ud_new(&dev[0], QKEY, 0);
	struct udqp r1 = ud_new(&dev[1], QKEY, 0), r2 = ud_new(&dev[1], QKEY, 0);
	struct udqp wrong = ud_new(&dev[1], 0x1111, 0), out = ud_new(&dev[1], QKEY, 0);
	attach(&r1), attach(&r2), attach(&wrong);
	for (int i = 0; i < 5; i++)
		send_group(&s, (uint8_t)(0x10 + i));
	expect(&r1, "first receiver", 0x10, 5);
	expect(&r2, "second receiver", 0x10, 5);
	expect(&wrong, "QP with another Q_Key", 0, 0);
	expect(&out, "QP not attached", 0, 0);
	ud_free(&s), ud_free(&r1), ud_free(&r2), ud_free(&wrong), ud_free(&out);
}

static void c_loopback(void)
{
	struct udqp s = ud_new(&dev[0], QKEY, 0), local = ud_new(&dev[0], QKEY, 0);
	struct udqp remote = ud_new(&dev[1], QKEY, 0);
	attach(&s), attach(&local), attach(&remote);
	send_group(&s, 0x20);
	expect(&local, "the sender's device's other QP", 0x20, 1);
	expect(&s, "the sender itself", 0x20, 1);
	expect(&remote, "the other device's QP", 0x20, 1);
	ud_free(&s), ud_free(&local), ud_free(&remote);
}

static void c_detach(void)
{
	struct udqp s = ud_new(&dev[0], QKEY, 0);
	struct udqp a = ud_new(&dev[1], QKEY, 0), b = ud_new(&dev[1], QKEY, 0);
	attach(&a), attach(&b);
	send_group(&s, 0x30);
	expect(&a, "attached QP", 0x30, 1);
	expect(&b, "attached QP", 0x30, 1);
	int err = ibv_detach_mcast(a.qp, &group, 0);
	CHECK(!err, "detach: %s", strerror(err));
	ud_free(&b); /* destroyed while attached */
	send_group(&s, 0x31);
	expect(&a, "detached QP", 0, 0);
	ud_free(&s), ud_free(&a);
}

static void c_block_self(void)
{
	struct udqp s = ud_new(&dev[0], QKEY, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
	struct udqp local = ud_new(&dev[0], QKEY, 0);
	attach(&s), attach(&local);
	send_group(&s, 0x40);
	expect(&local, "the device's other QP", 0x40, 1);
	expect(&s, "the blocking sender", 0, 0);
	ud_free(&s), ud_free(&local);
}

/* unsignaled: datagrams posted unsignaled just before the QP is destroyed
 * still leave (mckey's sender does exactly this; kernel rxe sends them). */
static void c_unsignaled(void)
{
	struct udqp s = ud_new(&dev[0], QKEY, 0), r = ud_new(&dev[0], QKEY, 0);
	attach(&r);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1,
				 .grh = {.dgid = group, .sgid_index = (uint8_t)s.d->gidx, .hop_limit = 64}};
	struct ibv_ah *ah = ibv_create_ah(s.d->pd, &aa);
	CHECK(ah, "ibv_create_ah: %s", strerror(errno));
	memset(s.buf, 0x50, MSG);
	struct ibv_sge sge = {(uintptr_t)s.buf, MSG, s.mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				 .imm_data = htonl(7), .wr.ud = {.ah = ah, .remote_qpn = 0xFFFFFF, .remote_qkey = QKEY}},
			   *bad;
	for (int i = 0; i < 5; i++)
		CHECK(!ibv_post_send(s.qp, &wr, &bad), "ibv_post_send");
	ud_free(&s);
	ibv_destroy_ah(ah);
	int cnt[256];
	int n = collect(&r, cnt, 500);
	CHECK(n == 5 && cnt[0x50] == 5, "the receiver got %d of 5 datagrams sent just before the destroy", n);
	ud_free(&r);
}

static void c_create_flags(void)
{
	struct ibv_cq *cq = ibv_create_cq(dev[0].ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr_ex ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD, .pd = dev[0].pd,
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
					 .create_flags = IBV_QP_CREATE_SCATTER_FCS,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp_ex(dev[0].ctx, &ia);
	int err = errno;
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	CHECK(!qp && (err == EOPNOTSUPP || err == EINVAL), "SCATTER_FCS on a UD QP: %s, want EOPNOTSUPP or EINVAL",
	      qp ? "created" : strerror(err));
}

static void teardown(void)
{
	for (int i = 0; i < ndev; i++) {
		CHECK(!ibv_dealloc_pd(dev[i].pd), "ibv_dealloc_pd: %s (an object left behind)", strerror(errno));
		CHECK(!ibv_close_device(dev[i].ctx), "ibv_close_device");
	}
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	start_alarm(60);
	only = getenv("MCAST_CASE");
	skips = getenv("MCAST_SKIP");
	int n = 0;
	devlist = ibv_get_device_list(&n);
	if (!devlist || n < 1) {
		printf("FAIL setup: no device (VRNICD_SOCKET=a:b)\n");
		return 1;
	}
	ndev = n >= 2 ? 2 : 1;
	run("setup", setup);
	if (nfail)
		return 1;
	run("attach_rules", c_attach_rules);
	run("fanout", c_fanout);
	run("loopback", c_loopback);
	run("detach", c_detach);
	run("block_self", c_block_self);
	run("unsignaled", c_unsignaled);
	run("create_flags", c_create_flags);
	run("teardown", teardown);
	printf("%d ok, %d failed, %d skipped\n", nok, nfail, nskip);
	ibv_free_device_list(devlist);
	return nfail ? 1 : 0;
}
