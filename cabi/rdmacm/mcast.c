/* mcast.c: rdma_join_multicast and rdma_leave_multicast as librdmacm has
 * them over the kernel's rdma_cm on RoCEv2. The daemon makes the join
 * (cm_join: the MGID ::ffff:G, the path with hop limit 64, QPN 0xFFFFFF,
 * Q_Key 0x01234567; a full member's port joins the group on its link);
 * the MULTICAST_JOIN event is queued here from its reply, and, as
 * librdmacm's ucma_process_join, the id's QP is attached to the group
 * unless the member is send-only (a failed attach makes the event
 * MULTICAST_ERROR). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

#ifndef AF_IB
#define AF_IB 27 /* glibc >= 2.19 has it; its value is the kernel's */
#endif
/* The kernel's ENOTSUPP, which reaches user space as is. */
#define CMA_ENOTSUPP 524

struct cma_mc {
	struct cma_mc *next;
	uint32_t handle;
	void *context;
	union ibv_gid mgid;
	uint8_t addr[16]; /* the group as cma_to_v6 gives it */
	int send_only;
};

static int fail(int err)
{
	errno = err;
	return -1;
}

/* attach_qp is librdmacm's ucma_process_join: the id's QP joins the
 * group unless the member is send-only. 0 or an errno. */
static int attach_qp(struct cma_id *c, struct cma_mc *mc)
{
	if (!c->id.qp || mc->send_only)
		return 0;
	return ibv_attach_mcast(c->id.qp, &mc->mgid, 0);
}

static struct cma_event *join_event(struct cma_id *c, struct cma_mc *mc, const struct vrn_cm_join_resp *r)
{
	struct cma_event *e = cma_new_event(c, RDMA_CM_EVENT_MULTICAST_JOIN, 0);
	if (!e)
		return NULL;
	struct rdma_ud_param *u = &e->ev.param.ud;
	u->private_data = mc->context;
	u->private_data_len = 0;
	u->qp_num = r->qpn;
	u->qkey = r->qkey;
	cma_ah_attr(&u->ah_attr, &r->ah);
	int err = attach_qp(c, mc);
	if (err) {
		e->ev.event = RDMA_CM_EVENT_MULTICAST_ERROR;
		e->ev.status = -err;
	}
	return e;
}

static int join(struct cma_id *c, const struct sockaddr *addr, uint32_t flags, void *context)
{
	if (!addr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6 && addr->sa_family != AF_IB) ||
	    flags > RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return fail(EINVAL);
	/* The kernel's: an id bound to a device, its address bound or resolved. */
	if (c->dev < 0 || (c->state != CMA_BOUND && c->state != CMA_ADDR && c->state != CMA_ROUTE))
		return fail(EINVAL);
	/* An AF_IB group (mckey -M) reaches cma_iboe_join_multicast, which
	 * joins AF_INET groups only on RoCEv2: ENOTSUPP, as the daemon
	 * answers an AF_INET6 one. */
	if (addr->sa_family == AF_IB)
		return fail(CMA_ENOTSUPP);
	struct cma_mc *mc = calloc(1, sizeof(*mc));
	if (!mc)
		return fail(ENOMEM);
	mc->context = context;
	mc->send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	struct vrn_cm_join_req req = {.flags = flags};
	cma_to_v6(addr, mc->addr, NULL);
	memcpy(req.group, mc->addr, 16);
	cma_to_v6(&c->id.route.addr.src_addr, req.src, NULL);
	struct vrn_cm_join_resp r;
	int err = vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_JOIN, &req, sizeof(req), &r, sizeof(r));
	if (err) {
		free(mc);
		return fail(err);
	}
	mc->handle = r.handle;
	memcpy(mc->mgid.raw, r.mgid, 16);
	pthread_mutex_lock(&cma_mu);
	struct cma_event *e = join_event(c, mc, &r);
	mc->next = c->mcs;
	c->mcs = mc;
	pthread_mutex_unlock(&cma_mu);
	if (!e)
		return fail(ENOMEM); /* joined: rdma_leave_multicast or rdma_destroy_id ends it */
	cma_queue(c->chan, e);
	return c->sync ? cma_complete(c, RDMA_CM_EVENT_MULTICAST_JOIN) : 0;
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return join(to_cma(id), addr, RDMA_MC_JOIN_FLAG_FULLMEMBER, context);
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *a, void *context)
{
	if (!a || !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(a->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    a->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return fail(EINVAL);
	return join(to_cma(id), a->addr, a->join_flags, context);
}

/* leave ends one join: the QP leaves the group, then the daemon's join. */
static void leave(struct cma_id *c, struct cma_mc *mc)
{
	if (c->id.qp && !mc->send_only)
		ibv_detach_mcast(c->id.qp, &mc->mgid, 0);
	struct vrn_handle_req req = {.handle = mc->handle};
	vrnicd_cm_call(cma_devs[c->dev].ctx, VRN_OP_CM_LEAVE, &req, sizeof(req), NULL, 0);
	free(mc);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cma_id *c = to_cma(id);
	if (!addr)
		return fail(EINVAL);
	uint8_t a[16];
	cma_to_v6(addr, a, NULL);
	pthread_mutex_lock(&cma_mu);
	struct cma_mc **p = &c->mcs;
	while (*p && memcmp((*p)->addr, a, 16))
		p = &(*p)->next;
	struct cma_mc *mc = *p;
	if (mc)
		*p = mc->next;
	pthread_mutex_unlock(&cma_mu);
	if (!mc)
		return fail(EADDRNOTAVAIL); /* librdmacm's: no such join on the id */
	leave(c, mc);
	return 0;
}

/* cma_leave_all ends an id's joins (rdma_destroy_id: the kernel leaves
 * them with the id). */
void cma_leave_all(struct cma_id *c)
{
	pthread_mutex_lock(&cma_mu);
	struct cma_mc *mc = c->mcs;
	c->mcs = NULL;
	pthread_mutex_unlock(&cma_mu);
	while (mc) {
		struct cma_mc *next = mc->next;
		leave(c, mc);
		mc = next;
	}
}
