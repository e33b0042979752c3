/* qp.c: the verbs objects librdmacm makes for an id (rdma_create_qp and
 * its CQs, SRQs) and the synchronous endpoint API of rdma_server and
 * rdma_client (rdma_create_ep, rdma_get_request). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

static int fail(int err)
{
	errno = err;
	return -1;
}

/* make_cqs gives the id a send and a receive CQ, each with a completion
 * channel, as librdmacm does when the program passes none. */
static int make_cqs(struct rdma_cm_id *id, struct ibv_qp_init_attr *a)
{
	if (!a->send_cq) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		id->send_cq = id->send_cq_channel ? ibv_create_cq(id->verbs, (int)(a->cap.max_send_wr ? a->cap.max_send_wr : 1),
								  id, id->send_cq_channel, 0)
						  : NULL;
		if (!id->send_cq)
			return -1;
		a->send_cq = id->send_cq;
	}
	if (!a->recv_cq) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		id->recv_cq = id->recv_cq_channel ? ibv_create_cq(id->verbs, (int)(a->cap.max_recv_wr ? a->cap.max_recv_wr : 1),
								  id, id->recv_cq_channel, 0)
						  : NULL;
		if (!id->recv_cq)
			return -1;
		a->recv_cq = id->recv_cq;
	}
	return 0;
}

static void free_cqs(struct rdma_cm_id *id)
{
	if (id->send_cq)
		ibv_destroy_cq(id->send_cq);
	if (id->send_cq_channel)
		ibv_destroy_comp_channel(id->send_cq_channel);
	if (id->recv_cq)
		ibv_destroy_cq(id->recv_cq);
	if (id->recv_cq_channel)
		ibv_destroy_comp_channel(id->recv_cq_channel);
	id->send_cq = id->recv_cq = NULL;
	id->send_cq_channel = id->recv_cq_channel = NULL;
}

/* ready moves a new QP as librdmacm does: an RC/UC QP to INIT (receives
 * can be posted before connecting; the daemon's CM takes it on from
 * there), a UD QP to RTS with rdma_cm's Q_Key. */
static int ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 0};
	if (qp->qp_type != IBV_QPT_UD) {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	}
	a.qkey = RDMA_UDP_QKEY;
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE)))
		return err;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cma_id *c = to_cma(id);
	if (!id->verbs || c->dev < 0)
		return fail(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd ? id->pd : cma_devs[c->dev].pd;
	}
	if (attr->pd->context != id->verbs)
		return fail(EINVAL);
	struct ibv_qp_init_attr base = {.send_cq = attr->send_cq, .recv_cq = attr->recv_cq, .cap = attr->cap};
	if (make_cqs(id, &base)) {
		free_cqs(id);
		return -1;
	}
	attr->send_cq = base.send_cq;
	attr->recv_cq = base.recv_cq;
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		int e = errno;
		free_cqs(id);
		return fail(e);
	}
	int err = ready(qp);
	if (err) {
		ibv_destroy_qp(qp);
		free_cqs(id);
		return fail(err);
	}
	id->qp = qp;
	id->pd = attr->pd;
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	if (!a.qp_type)
		a.qp_type = id->qp_type;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	if (!pd)
		a.comp_mask = 0;
	if (rdma_create_qp_ex(id, &a))
		return -1;
	qp_init_attr->cap = a.cap;
	qp_init_attr->send_cq = a.send_cq;
	qp_init_attr->recv_cq = a.recv_cq;
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	free_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct cma_id *c = to_cma(id);
	if (!id->verbs || c->dev < 0)
		return fail(EINVAL);
	if (attr->srq_type != IBV_SRQT_BASIC)
		return fail(EOPNOTSUPP); /* XRC */
	struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd
		: id->pd ? id->pd : cma_devs[c->dev].pd;
	struct ibv_srq_init_attr a = {.srq_context = attr->srq_context, .attr = attr->attr};
	struct ibv_srq *srq = ibv_create_srq(pd, &a);
	if (!srq)
		return -1;
	attr->attr = a.attr;
	id->srq = srq;
	id->pd = pd;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a = {.srq_context = attr->srq_context, .attr = attr->attr,
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | (pd ? IBV_SRQ_INIT_ATTR_PD : 0),
					 .srq_type = IBV_SRQT_BASIC, .pd = pd};
	if (rdma_create_srq_ex(id, &a))
		return -1;
	attr->attr = a.attr;
	return 0;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (id->srq)
		ibv_destroy_srq(id->srq);
	id->srq = NULL;
}

/* rdma_init_qp_attr: what rdma_cm would give the id's QP for the state
 * asked (cma.c rdma_init_qp_attr; cm.c cm_init_qp_init_attr,
 * cm_init_qp_rtr_attr, cm_init_qp_rts_attr), for a program that moves its
 * own QP: INIT before any connection as rdma_create_qp leaves it (no
 * remote access), and with the connection's access once a request or
 * response came; RTR and RTS from the CONNECT_REQUEST, CONNECT_RESPONSE or
 * ESTABLISHED event (the path, the QPNs, ib_cm's PSNs, the depths). A UD
 * id's QP takes rdma_cm's Q_Key at INIT and only its state after. */
int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct cma_id *c = to_cma(id);
	if (!qp_attr || !qp_attr_mask || c->dev < 0)
		return fail(EINVAL);
	enum ibv_qp_state want = qp_attr->qp_state;
	int ud = id->qp_type == IBV_QPT_UD, rc = id->qp_type == IBV_QPT_RC;
	memset(qp_attr, 0, sizeof(*qp_attr));
	qp_attr->qp_state = want;
	pthread_mutex_lock(&cma_mu);
	int have = c->have_path;
	pthread_mutex_unlock(&cma_mu);
	switch (want) {
	case IBV_QPS_INIT:
		qp_attr->port_num = 1;
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (ud) {
			qp_attr->qkey = RDMA_UDP_QKEY;
			*qp_attr_mask |= IBV_QP_QKEY;
			return 0;
		}
		if (have) {
			qp_attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (c->our_res)
				qp_attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		}
		*qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
		return 0;
	case IBV_QPS_RTR:
	case IBV_QPS_RTS:
		break;
	default:
		return fail(EINVAL);
	}
	if (ud) {
		*qp_attr_mask = IBV_QP_STATE | (want == IBV_QPS_RTS ? IBV_QP_SQ_PSN : 0);
		return 0;
	}
	if (!have)
		return fail(EINVAL); /* no connection to take the values from yet */
	if (want == IBV_QPS_RTR) {
		cma_ah_attr(&qp_attr->ah_attr, &c->path);
		qp_attr->path_mtu = (enum ibv_mtu)c->path_mtu;
		qp_attr->dest_qp_num = c->remote_qpn;
		qp_attr->rq_psn = c->psn;
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (rc) {
			qp_attr->max_dest_rd_atomic = c->our_res;
			qp_attr->min_rnr_timer = 0; /* ib_cm's */
			*qp_attr_mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
		return 0;
	}
	qp_attr->sq_psn = c->sq_psn;
	*qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (rc) {
		qp_attr->timeout = c->timeout;
		qp_attr->retry_cnt = c->retry_count;
		qp_attr->rnr_retry = c->rnr_retry;
		qp_attr->max_rd_atomic = c->our_init;
		*qp_attr_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return 0;
}

/* --- the synchronous endpoint API --------------------------------------- */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return fail(EINVAL);
	enum rdma_port_space ps = res->ai_port_space ? (enum rdma_port_space)res->ai_port_space
			       : res->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	struct rdma_cm_id *cm;
	if (rdma_create_id(NULL, &cm, NULL, ps))
		return -1;
	struct cma_id *c = to_cma(cm);
	int ok;
	if (res->ai_flags & RAI_PASSIVE) {
		ok = !rdma_bind_addr(cm, res->ai_src_addr);
		if (ok && qp_init_attr) {
			/* rdma_get_request makes each request's QP with these */
			c->qp_init = malloc(sizeof(*qp_init_attr));
			ok = c->qp_init != NULL;
			if (ok)
				*c->qp_init = *qp_init_attr;
			cm->pd = pd;
		}
	} else {
		ok = !rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000) &&
		     !rdma_resolve_route(cm, 2000);
		if (ok && qp_init_attr)
			ok = !rdma_create_qp(cm, pd, qp_init_attr);
	}
	if (!ok) {
		int e = errno;
		rdma_destroy_id(cm);
		return fail(e);
	}
	*id = cm;
	return 0;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cma_id *l = to_cma(listen);
	if (!l->sync)
		return fail(EINVAL); /* as librdmacm: only a synchronous listener */
	struct rdma_cm_event *ev;
	for (;;) {
		if (rdma_get_cm_event(listen->channel, &ev))
			return -1;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
			break;
		rdma_ack_cm_event(ev); /* not a request: nothing waits for it here */
	}
	struct rdma_cm_id *cm = ev->id;
	cm->event = ev; /* acked with the id's next event or its destruction */
	if (l->qp_init) {
		struct ibv_qp_init_attr a = *l->qp_init;
		if (rdma_create_qp(cm, listen->pd, &a)) {
			int e = errno;
			rdma_reject(cm, NULL, 0);
			rdma_destroy_id(cm);
			return fail(e);
		}
	}
	*id = cm;
	return 0;
}
