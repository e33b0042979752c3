/* pd.c: protection domains, address handles and memory windows. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vrn.h"

static int destroy_handle(struct ibv_context *ctx, uint16_t op, uint32_t h)
{
	struct vrn_handle_req req = {.handle = h};
	return vrn_call(to_vctx(ctx), op, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct vrn_alloc_pd_resp r;
	struct vrn_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	if (vrn_call(to_vctx(context), VRN_OP_ALLOC_PD, NULL, 0, NULL, 0, &r, sizeof(r), NULL, 0, NULL)) {
		free(pd);
		return NULL;
	}
	pd->pd.context = context;
	pd->pd.handle = r.pd;
	pd->handle = r.pd;
	return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct vrn_pd *p = container_of(pd, struct vrn_pd, pd);
	int err = destroy_handle(pd->context, VRN_OP_DEALLOC_PD, p->handle);
	if (err && err != EIO)
		return err; /* EIO: the daemon is gone and freed it already */
	free(p);
	return 0;
}

/* av_from_attr: RoCE addresses by GID, so an AH needs the GRH (as ib_core
 * checks for RoCE ports). */
int vrn_av_from_attr(const struct ibv_ah_attr *a, struct vrn_av *av)
{
	if (!a->is_global)
		return EINVAL;
	memset(av, 0, sizeof(*av));
	memcpy(av->dgid, a->grh.dgid.raw, 16);
	av->flow_label = a->grh.flow_label;
	av->sgid_index = a->grh.sgid_index;
	av->hop_limit = a->grh.hop_limit;
	av->traffic_class = a->grh.traffic_class;
	av->sl = a->sl;
	av->port = a->port_num;
	return 0;
}

void vrn_attr_from_av(const struct vrn_av *av, struct ibv_ah_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->is_global = 1;
	memcpy(a->grh.dgid.raw, av->dgid, 16);
	a->grh.flow_label = av->flow_label;
	a->grh.sgid_index = av->sgid_index;
	a->grh.hop_limit = av->hop_limit;
	a->grh.traffic_class = av->traffic_class;
	a->sl = av->sl;
	a->port_num = av->port;
}

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct vrn_create_ah_req req = {.pd = container_of(pd, struct vrn_pd, pd)->handle};
	struct vrn_create_ah_resp r;
	int err = vrn_av_from_attr(attr, &req.av);
	if (err) {
		errno = err;
		return NULL;
	}
	struct vrn_ah *ah = calloc(1, sizeof(*ah));
	if (!ah) {
		errno = ENOMEM;
		return NULL;
	}
	if (vrn_call(to_vctx(pd->context), VRN_OP_CREATE_AH, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL)) {
		free(ah);
		return NULL;
	}
	ah->ah.context = pd->context;
	ah->ah.pd = pd;
	ah->ah.handle = r.ah;
	ah->handle = r.ah;
	return &ah->ah;
}

int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct vrn_ah *a = container_of(ah, struct vrn_ah, ah);
	int err = destroy_handle(ah->context, VRN_OP_DESTROY_AH, a->handle);
	if (err && err != EIO)
		return err;
	free(a);
	return 0;
}

/* grh_sgid reads the sender's and our address from a UD receive's first
 * 40 bytes: a GRH, or for RoCE v2 over IPv4 the IPv4 header in its last 20
 * bytes (as kernel rxe writes it). */
static void grh_gids(const struct ibv_grh *grh, union ibv_gid *sgid, union ibv_gid *dgid, uint8_t *tclass,
		     uint32_t *flow)
{
	const uint8_t *b = (const uint8_t *)grh;
	if ((b[20] >> 4) == 4) {
		memset(sgid, 0, sizeof(*sgid));
		memset(dgid, 0, sizeof(*dgid));
		sgid->raw[10] = sgid->raw[11] = 0xff;
		dgid->raw[10] = dgid->raw[11] = 0xff;
		memcpy(sgid->raw + 12, b + 20 + 12, 4);
		memcpy(dgid->raw + 12, b + 20 + 16, 4);
		*tclass = b[21];
		*flow = 0;
		return;
	}
	*sgid = grh->sgid;
	*dgid = grh->dgid;
	uint32_t vtf = ntohl(grh->version_tclass_flow);
	*tclass = (uint8_t)(vtf >> 20);
	*flow = vtf & 0xfffff;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc, struct ibv_grh *grh,
			struct ibv_ah_attr *ah_attr)
{
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH)) {
		errno = EINVAL; /* RoCE: the sender is known only by its GID */
		return -1;
	}
	union ibv_gid sgid, dgid;
	uint8_t tclass;
	uint32_t flow;
	grh_gids(grh, &sgid, &dgid, &tclass, &flow);
	ah_attr->is_global = 1;
	ah_attr->grh.dgid = sgid;
	ah_attr->grh.flow_label = flow;
	ah_attr->grh.hop_limit = 0xff;
	ah_attr->grh.traffic_class = tclass;
	struct ibv_port_attr pa;
	if (vrn_query_port(context, port_num, &pa, sizeof(pa)))
		return -1;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		union ibv_gid g;
		if (ibv_query_gid(context, port_num, i, &g) == 0 && !memcmp(&g, &dgid, sizeof(g))) {
			ah_attr->grh.sgid_index = (uint8_t)i;
			return 0;
		}
	}
	errno = ENOENT;
	return -1;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port_num)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &a))
		return NULL;
	return ibv_create_ah(pd, &a);
}

struct ibv_mw *vrn_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct vrn_alloc_mw_req req = {.pd = container_of(pd, struct vrn_pd, pd)->handle, .type = (uint32_t)type};
	struct vrn_alloc_mw_resp r;
	struct vrn_mw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	if (vrn_call(to_vctx(pd->context), VRN_OP_ALLOC_MW, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL)) {
		free(mw);
		return NULL;
	}
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.rkey = r.rkey;
	mw->mw.handle = r.mw;
	mw->mw.type = type;
	mw->handle = r.mw;
	return &mw->mw;
}

int vrn_dealloc_mw(struct ibv_mw *mw)
{
	struct vrn_mw *m = container_of(mw, struct vrn_mw, mw);
	int err = destroy_handle(mw->context, VRN_OP_DEALLOC_MW, m->handle);
	if (err && err != EIO)
		return err;
	free(m);
	return 0;
}
