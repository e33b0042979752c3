/* mr.c: memory regions over the program's own memory. The registry
 * (memreg.c) turns the pages into sealed memfd segments in place; this
 * connection maps each segment into the daemon once (map_mem) and
 * registers the MR over the segment pieces that cover it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "memreg.h"
#include "vrn.h"

#define MR_MAX_PIECES 256

/* Per-connection map of segment id -> the daemon's memory handle. */
struct vrn_memctx {
	pthread_mutex_t mu;
	struct mem_ent {
		uint64_t seg_id;
		uint32_t handle;
		uint32_t refs;
	} *ents;
	int n, cap;
};

struct vrn_seg_use {
	struct vrn_seg_ref ref;
	uint32_t mem;
};

static struct vrn_memctx *memctx(struct vrn_context *c)
{
	pthread_mutex_lock(&c->obj_mu);
	if (!c->mem) {
		c->mem = calloc(1, sizeof(*c->mem));
		if (c->mem)
			pthread_mutex_init(&c->mem->mu, NULL);
	}
	pthread_mutex_unlock(&c->obj_mu);
	return c->mem;
}

/* mem_get returns the daemon's handle of a segment, mapping it the first time. */
static int mem_get(struct vrn_context *c, struct vrn_memctx *m, const struct vrn_seg_ref *r, uint32_t *h)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < m->n; i++)
		if (m->ents[i].seg_id == r->seg_id) {
			m->ents[i].refs++;
			*h = m->ents[i].handle;
			pthread_mutex_unlock(&m->mu);
			return 0;
		}
	if (m->n == m->cap) {
		int nc = m->cap ? m->cap * 2 : 16;
		struct mem_ent *e = realloc(m->ents, sizeof(*e) * nc);
		if (!e) {
			pthread_mutex_unlock(&m->mu);
			return ENOMEM;
		}
		m->ents = e;
		m->cap = nc;
	}
	struct vrn_map_mem_req req = {0};
	struct vrn_map_mem_resp resp;
	int err = vrn_call(c, VRN_OP_MAP_MEM, &req, sizeof(req), &r->fd, 1, &resp, sizeof(resp), NULL, 0, NULL);
	if (!err) {
		m->ents[m->n++] = (struct mem_ent){.seg_id = r->seg_id, .handle = resp.mem, .refs = 1};
		*h = resp.mem;
	}
	pthread_mutex_unlock(&m->mu);
	return err;
}

static void mem_put(struct vrn_context *c, struct vrn_memctx *m, uint64_t seg_id)
{
	pthread_mutex_lock(&m->mu);
	for (int i = 0; i < m->n; i++) {
		if (m->ents[i].seg_id != seg_id)
			continue;
		if (--m->ents[i].refs == 0) {
			struct vrn_handle_req req = {.handle = m->ents[i].handle};
			vrn_call(c, VRN_OP_UNMAP_MEM, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
			m->ents[i] = m->ents[--m->n];
		}
		break;
	}
	pthread_mutex_unlock(&m->mu);
}

void vrn_memctx_free(struct vrn_memctx *m)
{
	if (!m)
		return;
	free(m->ents);
	free(m);
}

static void release_uses(struct vrn_context *c, struct vrn_seg_use *u, int n, int mapped)
{
	struct vrn_memctx *m = c->mem;
	struct vrn_seg_ref refs[MR_MAX_PIECES];
	for (int i = 0; i < n; i++) {
		if (i < mapped)
			mem_put(c, m, u[i].ref.seg_id);
		refs[i] = u[i].ref;
	}
	vrn_memreg_release(refs, n);
}

/* reg_mr_segs registers an MR over several segments (reg_mr_segs): each
 * piece is whole pages of one memory object, consecutive in our address
 * space. The request is large; it lives on the heap. */
static int reg_mr_segs(struct vrn_context *c, uint32_t pd, const struct vrn_seg_use *u, int n, uintptr_t addr,
		       size_t len, uint64_t iova, unsigned access, struct vrn_reg_mr_resp *r)
{
	if (n > (int)(sizeof(((struct vrn_reg_mr_segs_req *)0)->segs) / sizeof(struct vrn_reg_mr_seg)))
		return E2BIG;
	struct vrn_reg_mr_segs_req *req = calloc(1, sizeof(*req));
	if (!req)
		return ENOMEM;
	req->pd = pd;
	req->access = access;
	req->iova = iova;
	req->length = len;
	req->first_offset = addr - u[0].ref.addr;
	req->num_segs = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		req->segs[i].mem = u[i].mem;
		req->segs[i].offset = u[i].ref.fd_offset;
		req->segs[i].pages = u[i].ref.len / c->page_size;
	}
	int err = vrn_call(c, VRN_OP_REG_MR_SEGS, req, sizeof(*req), NULL, 0, r, sizeof(*r), NULL, 0, NULL);
	free(req);
	return err;
}

/* register_pieces asks the daemon for the MR over the mapped pieces. */
static int register_pieces(struct vrn_context *c, struct vrn_pd *pd, struct vrn_seg_use *u, int n, uintptr_t addr,
			   size_t len, uint64_t iova, unsigned access, struct vrn_reg_mr_resp *r)
{
	if (n == 1) {
		struct vrn_reg_mr_req req = {.pd = pd->handle, .mem = u[0].mem,
					     .offset = u[0].ref.fd_offset + (addr - u[0].ref.addr), .length = len,
					     .iova = iova, .access = access};
		return vrn_call(c, VRN_OP_REG_MR, &req, sizeof(req), NULL, 0, r, sizeof(*r), NULL, 0, NULL);
	}
	return reg_mr_segs(c, pd->handle, u, n, addr, len, iova, access, r);
}

/* Optional access flags a device may ignore (IBV_ACCESS_OPTIONAL_RANGE). */
#define ACCESS_OPTIONAL_MASK (~((1u << 20) - 1))

static struct ibv_mr *reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova, unsigned access)
{
	struct vrn_context *c = to_vctx(ibpd->context);
	struct vrn_pd *pd = container_of(ibpd, struct vrn_pd, pd);
	struct vrn_memctx *m = memctx(c);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	if (!length || !addr) {
		errno = EINVAL;
		return NULL;
	}
	access &= ~ACCESS_OPTIONAL_MASK;
	struct vrn_seg_ref refs[MR_MAX_PIECES];
	int n = 0;
	int err = vrn_memreg_acquire(addr, length, refs, MR_MAX_PIECES, &n);
	if (err) {
		errno = err;
		return NULL;
	}
	struct vrn_mr *mr = calloc(1, sizeof(*mr));
	struct vrn_seg_use *u = calloc((size_t)n, sizeof(*u));
	int mapped = 0;
	err = mr && u ? 0 : ENOMEM;
	for (; !err && mapped < n; mapped++) {
		u[mapped].ref = refs[mapped];
		err = mem_get(c, m, &refs[mapped], &u[mapped].mem);
		if (err)
			break;
	}
	struct vrn_reg_mr_resp r;
	if (!err)
		err = register_pieces(c, pd, u, n, (uintptr_t)addr, length, iova, access, &r);
	if (err) {
		if (u) {
			for (int i = mapped; i < n; i++)
				u[i].ref = refs[i];
			release_uses(c, u, n, mapped);
		} else {
			vrn_memreg_release(refs, n);
		}
		free(u);
		free(mr);
		errno = err;
		return NULL;
	}
	mr->handle = r.mr;
	mr->segs = u;
	mr->nsegs = n;
	mr->mr.context = ibpd->context;
	mr->mr.pd = ibpd;
	mr->mr.addr = addr;
	mr->mr.length = length;
	mr->mr.handle = r.mr;
	mr->mr.lkey = r.lkey;
	mr->mr.rkey = r.rkey;
	return &mr->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access);
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, (unsigned)access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct vrn_mr *mr = container_of(ibmr, struct vrn_mr, mr);
	struct vrn_context *c = to_vctx(ibmr->context);
	struct vrn_handle_req req = {.handle = mr->handle};
	int err = vrn_call(c, VRN_OP_DEREG_MR, &req, sizeof(req), NULL, 0, NULL, 0, NULL, 0, NULL);
	if (err && err != EIO)
		return err; /* EBUSY while windows are bound */
	release_uses(c, mr->segs, mr->nsegs, mr->nsegs);
	free(mr->segs);
	free(mr);
	return 0;
}

/* ibv_rereg_mr: a new translation is a deregistration and a registration
 * (the key changes, which rdma-core allows); access or PD alone is not
 * in the protocol yet. */
int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}
