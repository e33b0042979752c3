/* cma.h: the drop-in librdmacm's internal objects. An rdma_cm_id is the
 * public struct programs read, inside our cma_id; its CM requests go on the
 * verbsock connection of its device's context (the one holding the QPs
 * they name). An event channel is an epoll set of an eventfd (our queue is
 * not empty) and, per device its ids use, the daemon's event socket for
 * the channel (cm_channel), where only the events of its ids arrive. */
#ifndef CMA_H
#define CMA_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>

#include "vrnic_abi.h"

/* libibverbs' private face (cabi/ibverbs/private.c, node VRNICD_PRIVATE_1). */
int vrnicd_cm_call(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen);
int vrnicd_cm_call_fd(struct ibv_context *ctx, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen,
		      int *fd);
uint32_t vrnicd_qp_handle(struct ibv_qp *qp);
int vrnicd_qp_by_num(struct ibv_context *ctx, uint32_t qpn, uint32_t *handle);
int vrnicd_dead(struct ibv_context *ctx);

#define CMA_MAX_DEVS 16


/* A device: one context for every id on it, and its default PD. */
struct cma_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int gone; /* DEVICE_REMOVAL sent to its ids */
};

struct cma_event {
	struct rdma_cm_event ev; /* what the program gets; first */
	struct cma_event *next;
	struct cma_id *owner;    /* the id the event counts against until acked */
	uint8_t priv[196];       /* the private data ev.param points at */
};

struct cma_channel {
	struct rdma_event_channel ch; /* fd: the epoll set */
	int evfd;
	pthread_mutex_t mu;
	pthread_mutex_t pump_mu; /* one reader of the sockets at a time, so events keep their order */
	struct cma_event *head, *tail;
	int socks[CMA_MAX_DEVS];        /* the daemon's event socket per device, -1: none (mu) */
	uint32_t handles[CMA_MAX_DEVS]; /* the channel's handle on that device (mu) */
	int internal;           /* made for a synchronous id */
	int waiters;            /* threads in rdma_get_cm_event (mu) */
	int closed;             /* destroyed while some waited: the last frees it (mu) */
};

enum cma_state { CMA_IDLE, CMA_BOUND, CMA_ADDR, CMA_ROUTE, CMA_LISTEN, CMA_CONNECTING, CMA_CONNECTED, CMA_GONE };

struct cma_id {
	struct rdma_cm_id id; /* first: programs hold &id */
	uint64_t seq;         /* the context the daemon echoes in its events */
	struct cma_channel *chan;
	int sync;             /* made without a channel: calls wait for their events */
	int own_chan;         /* the channel is its own (a synchronous id's): destroyed with it */
	int dev;              /* index into the device table, -1 before bind/resolve */
	enum cma_state state;
	uint32_t conn;                    /* the daemon's connection handle */
	uint32_t listeners[CMA_MAX_DEVS]; /* a listen id's handle per device (0: none) */
	struct cma_id *listen;            /* a connect request's listener */
	uint32_t remote_qpn;
	uint8_t resp_res, init_depth; /* the peer's REQ's (passive), or what was agreed (active) */
	/* What rdma_init_qp_attr gives at RTR and RTS (the events' path). */
	int manual;                  /* the program moves its own QP (no id->qp at connect/accept) */
	int have_path;               /* a CONNECT_REQUEST, CONNECT_RESPONSE or ESTABLISHED told it */
	uint32_t psn, sq_psn;        /* our starting PSN (rq_psn), the peer's (sq_psn) */
	uint8_t our_res, our_init;   /* max_dest_rd_atomic, max_rd_atomic */
	uint8_t timeout, path_mtu, retry_count, rnr_retry;
	struct vrn_av path;
	uint8_t tos, ack_timeout;
	int reuse, afonly;
	int auto_port;                    /* bound to port 0: the port is ours to pick again */
	struct ibv_qp_init_attr *qp_init; /* rdma_create_ep on a listener: what rdma_get_request makes */
	int own_cqs;                      /* rdma_create_qp made the CQs */
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int events_out; /* events handed out and not acked (rdma_destroy_id waits) */
	struct cma_mc *mcs; /* multicast joins (mcast.c; cma_mu) */
	struct cma_id *next;
};

static inline struct cma_id *to_cma(struct rdma_cm_id *id) { return (struct cma_id *)id; }

/* cma.c */
extern pthread_mutex_t cma_mu; /* the device table and the id list */
extern struct cma_dev cma_devs[CMA_MAX_DEVS];
extern int cma_ndevs;
int cma_init_devices(void);
int cma_call(struct cma_id *c, uint16_t op, const void *req, size_t reqlen, void *resp, size_t resplen);
void cma_set_dev(struct cma_id *c, int dev);
int cma_chan(struct cma_channel *ch, int dev, uint32_t *handle);
struct cma_event *cma_new_event(struct cma_id *c, enum rdma_cm_event_type type, int status);
void cma_queue(struct cma_channel *ch, struct cma_event *e);
int cma_complete(struct cma_id *c, enum rdma_cm_event_type want);
struct cma_id *cma_new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt);

/* conn.c */
void cma_take_path(struct cma_id *c, const struct vrn_cm_event_msg *m);
uint32_t cma_random_psn(void);
void cma_ah_attr(struct ibv_ah_attr *a, const struct vrn_av *av);
struct cma_event *cma_addr_event(struct cma_id *c, const struct vrn_cm_event_msg *m);
/* mcast.c */
void cma_leave_all(struct cma_id *c);
/* addr.c helpers */
void cma_to_v6(const struct sockaddr *sa, uint8_t out[16], uint16_t *port);
void cma_from_v6(const uint8_t in[16], uint16_t port, int family, struct sockaddr_storage *out);
int cma_dev_of_addr(const struct sockaddr *sa);

#endif
