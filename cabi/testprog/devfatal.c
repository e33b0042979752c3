/* devfatal: what a program sees when its daemon goes away. It makes the
 * usual objects, says "ready", and waits; the test then stops the daemon.
 * Expected, as on a kernel device that is hot-unplugged: the async
 * descriptor turns readable with IBV_EVENT_DEVICE_FATAL, a waiting
 * ibv_get_cq_event returns an error instead of hanging, and every verb
 * fails cleanly afterwards. Prints "ok" and exits 0 on that. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

int main(int argc, char **argv)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1)
		FAIL("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		FAIL("open: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 16, NULL, ch, 0) : NULL;
	static char buf[8192];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = cq && pd ? ibv_create_qp(pd, &qa) : NULL;
	if (!pd || !ch || !cq || !mr || !qp)
		FAIL("setup: %s", strerror(errno));
	if (ibv_req_notify_cq(cq, 0))
		FAIL("req_notify_cq");
	struct ibv_qp_attr init = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE};
	if (ibv_modify_qp(qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("modify_qp to INIT");
	for (uint64_t id = 1; id <= 3; id++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
		if (ibv_post_recv(qp, &wr, &bad))
			FAIL("post_recv");
	}
	printf("ready\n");
	fflush(stdout);

	if (argc > 1 && !strcmp(argv[1], "poll")) {
		/* A program that only polls: its posted receives must end, flushed. */
		alarm(20);
		struct ibv_wc wc;
		for (uint64_t want = 1; want <= 3;) {
			int k = ibv_poll_cq(cq, 1, &wc);
			if (k < 0)
				FAIL("poll_cq");
			if (k == 0)
				continue;
			if (wc.wr_id != want || wc.status != IBV_WC_WR_FLUSH_ERR)
				FAIL("completion %llu %s, want %llu flushed", (unsigned long long)wc.wr_id,
				     ibv_wc_status_str(wc.status), (unsigned long long)want);
			want++;
		}
		printf("ok\n");
		return 0;
	}

	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	if (poll(&p, 1, 20000) != 1)
		FAIL("async_fd did not turn readable in 20 s");
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		FAIL("get_async_event: %s", strerror(errno));
	if (ev.event_type != IBV_EVENT_DEVICE_FATAL)
		FAIL("event %s, want DEVICE_FATAL", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);

	alarm(20); /* a hang below is a failure */
	/* The CQ was armed once: the daemon may have fired that one event (its
	 * teardown flushed the QP) before it went. Whichever the channel shows
	 * first, the event or the hang-up, calls fail from then on: at most one
	 * success in four, at least one failure, no hang. */
	struct ibv_cq *ecq;
	void *ectx;
	int oks = 0, fails = 0;
	for (int i = 0; i < 4; i++) {
		if (ibv_get_cq_event(ch, &ecq, &ectx) == 0) {
			ibv_ack_cq_events(ecq, 1);
			oks++;
		} else {
			fails++;
		}
	}
	if (oks > 1 || !fails)
		FAIL("get_cq_event on a dead device: %d events of one arm, %d failures", oks, fails);
	if (ibv_alloc_pd(ctx))
		FAIL("alloc_pd succeeded on a dead device");
	struct ibv_wc wc;
	if (ibv_poll_cq(cq, 1, &wc) < 0)
		FAIL("poll_cq failed");
	struct ibv_device_attr da;
	if (!ibv_query_device(ctx, &da))
		FAIL("query_device succeeded on a dead device");
	/* Teardown works (the daemon already freed everything). */
	if (ibv_destroy_qp(qp) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_destroy_comp_channel(ch))
		FAIL("teardown: %s", strerror(errno));
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	printf("ok\n");
	return 0;
}
