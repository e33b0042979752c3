/* mw.c: binding a memory window, as rdma-core's rxe provider does: a
 * BIND_MW work request on the QP's send queue, which completes as
 * IBV_WC_BIND_MW, with the window's key byte bumped. */
#include <errno.h>
#include <string.h>

#include "vrn.h"

int vrn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);

int vrn_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	if (mw->type != IBV_MW_TYPE_1 || (!bind->bind_info.mr && bind->bind_info.length))
		return EINVAL;
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = bind->bind_info;
	int err = vrn_post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}
