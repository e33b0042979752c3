/* vrn.h: the drop-in libibverbs' internal objects. Each verb's object embeds
 * the ibverbs struct that programs see (first member, so a pointer to one is
 * a pointer to the other), then what the library keeps: the daemon's handle
 * and, for queues, the shared-memory ring. Layouts shared with the daemon
 * come from vrnic_abi.h, generated from the Go definitions. */
#ifndef VRN_H
#define VRN_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "vrnic_abi.h"

#define VRN_DEFAULT_DIR "/run/vrnicd"
#define VRN_DEFAULT_SOCKET "/run/vrnicd/vrnicd.sock"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* struct vrn_device is laid out as rdma-core's struct verbs_device (driver.h):
 * a vendor library's "is this my device" check reads ops at this place, and
 * finds ours, which is no vendor's. */
struct vrn_device {
	struct ibv_device device; /* must be first */
	const void *ops;          /* verbs_device.ops */
	atomic_int refcount;
	void *entry[2];
	void *sysfs;
	uint64_t core_support;
	/* ours */
	char socket_path[108];
	uint64_t node_guid;
};

/* One event the daemon sent that no caller has taken yet. */
struct vrn_event {
	struct vrn_event *next;
	uint16_t op;     /* VRN_OP_EVENT */
	uint32_t len;
	uint8_t payload[]; /* the event's payload */
};

struct vrn_context {
	struct verbs_context vctx; /* ibv_context last inside it, as rdma-core's */
	int sock;                  /* the verbsock connection */
	uint16_t version;
	uint32_t page_size;
	uint64_t next_id;
	int dead;                  /* the daemon went away: every call fails */
	pthread_mutex_t qp_mu;     /* the QP list below, and the flush at death */
	struct vrn_qp *qps;        /* every live QP, for the flush at death */
	int flushed;
	pthread_mutex_t call_mu;   /* one request on the socket at a time */
	pthread_mutex_t ev_mu;     /* the event queue */
	struct vrn_event *ev_head, *ev_tail;
	int ev_fd;                 /* eventfd: readable while ev_head holds an async event */
	int fatal_sent;            /* DEVICE_FATAL delivered */
	struct vrn_device_attr attr;
	pthread_mutex_t obj_mu;    /* the handle table below */
	void **objs;               /* handle -> QP, CQ or SRQ, for events */
	uint32_t nobjs;
	struct vrn_memctx *mem;    /* this connection's handles of the memory segments (mr.c) */
};

static inline struct vrn_context *to_vctx(struct ibv_context *c)
{
	return container_of(c, struct vrn_context, vctx.context);
}

/* sock.c: the control path. vrn_call sends one request and waits for its
 * reply; events that arrive meanwhile are queued. It returns 0, or an errno
 * (also set in errno). fds in go with the request and stay the caller's;
 * the reply's descriptors land in rfds (at most maxr; *nr says how many). */
int vrn_connect(const char *path);
int vrn_hello(int sock, struct vrn_hello_resp *hr);
int vrn_call_fd(int sock, uint64_t id, uint16_t op, const void *req, size_t reqlen, const int *fds, int nfds,
		void *resp, size_t resplen, int *rfds, int maxr, int *nr, struct vrn_context *evq);
int vrn_call(struct vrn_context *c, uint16_t op, const void *req, size_t reqlen, const int *fds, int nfds,
	     void *resp, size_t resplen, int *rfds, int maxr, int *nr);
/* vrn_read_events takes what waits on the socket without blocking (when no
 * request is in flight) into the event queue; returns -1 with the context
 * dead when the daemon has gone. */
int vrn_read_events(struct vrn_context *c);
void vrn_queue_event(struct vrn_context *c, uint16_t op, const void *p, uint32_t len);
void vrn_mark_dead(struct vrn_context *c);

/* fatal.c: after the daemon is gone, the library completes what was posted
 * (IBV_WC_WR_FLUSH_ERR), so programs that poll see their WRs end. */
void vrn_check_alive(struct vrn_context *c);
void vrn_flush_dead(struct vrn_context *c);
void vrn_qp_link(struct vrn_context *c, struct vrn_qp *q);
void vrn_qp_unlink(struct vrn_context *c, struct vrn_qp *q);

int vrn_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *out, size_t len);

struct vrn_cq;
extern unsigned vrn_poll_yield;
extern int vrn_debug;
void vrn_cq_idle(struct vrn_cq *cq, int empty);

/* async.c: handle -> object, for events. */
void vrn_obj_set(struct vrn_context *c, uint32_t h, void *obj);
void *vrn_obj_get(struct vrn_context *c, uint32_t h);

/* memfd rings. */
void *vrn_ring_new(struct vrn_context *c, size_t size, int *fd);

struct vrn_pd {
	struct ibv_pd pd;
	uint32_t handle;
};

struct vrn_mr {
	struct ibv_mr mr;
	uint32_t handle;
	struct vrn_seg_use *segs; /* mr.c */
	int nsegs;
};

struct vrn_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cq_ex; /* begins with ibv_cq's fields */
	};
	uint32_t handle;
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_size;
	uint32_t entries;
	uint64_t head;
	int ev_fd;           /* completion events from the daemon; -1 without a channel */
	struct vrn_cq_ex *ex;  /* cq_ex.c: the poll API's cursor */
	unsigned empty;        /* empty polls in a row (vrn_cq_idle) */
};

struct vrn_queue {
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_size;
	uint32_t entries;
	uint32_t esize;
	uint64_t tail;
};

struct vrn_qp {
	union {
		struct ibv_qp qp;
		struct ibv_qp_ex qp_ex; /* qp_base first */
	};
	int has_ex;          /* created with send_ops_flags: ibv_qp_to_qp_ex answers */
	uint32_t handle;
	int bell;
	struct vrn_queue sq, rq;
	struct ibv_qp_cap cap;
	int sq_sig_all;
	struct vrn_qp_ex *ex; /* qp_ex.c: the WR being built */
	struct vrn_qp *next;  /* the context's QP list */
};

struct vrn_srq {
	struct ibv_srq srq;
	uint32_t handle;
	uint32_t srqn;
	int bell;
	struct vrn_queue rq;
	uint32_t max_sge;
};

struct vrn_ah {
	struct ibv_ah ah;
	uint32_t handle;
};

struct vrn_mw {
	struct ibv_mw mw;
	uint32_t handle;
};

#endif
