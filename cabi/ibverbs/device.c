/* device.c: the device list, contexts and the queries. One device per
 * vrnicd socket: $VRNICD_SOCKET (several separated by colons), else every
 * socket in /run/vrnicd. A context is one verbsock connection. */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vrn.h"

/* Our "driver ops": a vendor library comparing verbs_device.ops with its
 * own never matches it. */
static const char vrn_device_ops_tag[] = "vrnicd";

void vrn_fill_ops(struct vrn_context *c); /* ops.c */

static void device_put(struct vrn_device *d)
{
	if (atomic_fetch_sub(&d->refcount, 1) == 1)
		free(d);
}

/* probe connects to one socket and reads the device's name and GUID. */
static struct vrn_device *probe(const char *path)
{
	int s = vrn_connect(path);
	if (s < 0)
		return NULL;
	struct vrn_hello_resp hr;
	struct vrn_device_attr a;
	int err = vrn_hello(s, &hr);
	if (!err)
		err = vrn_call_fd(s, 2, VRN_OP_QUERY_DEVICE, NULL, 0, NULL, 0, &a, sizeof(a), NULL, 0, NULL, NULL);
	close(s);
	if (err)
		return NULL;
	struct vrn_device *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->device.node_type = IBV_NODE_CA;
	d->device.transport_type = IBV_TRANSPORT_IB;
	size_t n = strnlen((const char *)hr.dev_name, sizeof(hr.dev_name));
	if (n >= sizeof(d->device.name))
		n = sizeof(d->device.name) - 1;
	memcpy(d->device.name, hr.dev_name, n);
	snprintf(d->device.dev_name, sizeof(d->device.dev_name), "%s", d->device.name);
	snprintf(d->device.dev_path, sizeof(d->device.dev_path), "%s", path);
	snprintf(d->device.ibdev_path, sizeof(d->device.ibdev_path), "%s", path);
	snprintf(d->socket_path, sizeof(d->socket_path), "%s", path);
	d->ops = vrn_device_ops_tag;
	d->node_guid = a.node_guid;
	atomic_init(&d->refcount, 1);
	return d;
}

static int add(struct ibv_device ***list, int *n, int *cap, struct vrn_device *d)
{
	if (*n + 1 >= *cap) {
		int nc = *cap ? *cap * 2 : 8;
		struct ibv_device **l = realloc(*list, sizeof(**list) * nc);
		if (!l)
			return -1;
		*list = l;
		*cap = nc;
	}
	(*list)[(*n)++] = &d->device;
	(*list)[*n] = NULL;
	return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* socket_paths lists where to look: $VRNICD_SOCKET, else /run/vrnicd/\*.sock. */
static int socket_paths(char ***out)
{
	const char *env = getenv("VRNICD_SOCKET");
	char **paths = NULL;
	int n = 0;
	if (env && *env) {
		char *dup = strdup(env), *save = NULL;
		if (!dup)
			return 0;
		for (char *t = strtok_r(dup, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
			char **p = realloc(paths, sizeof(*paths) * (n + 1));
			if (!p)
				break;
			paths = p;
			paths[n++] = strdup(t);
		}
		free(dup);
		*out = paths;
		return n;
	}
	DIR *dir = opendir(VRN_DEFAULT_DIR);
	if (!dir)
		return 0;
	struct dirent *e;
	while ((e = readdir(dir)) && n < 64) {
		size_t l = strlen(e->d_name);
		if (l < 6 || strcmp(e->d_name + l - 5, ".sock") || !strcmp(e->d_name, "metrics.sock"))
			continue;
		char *p = NULL;
		if (asprintf(&p, "%s/%s", VRN_DEFAULT_DIR, e->d_name) < 0)
			break;
		struct stat st;
		char **np = realloc(paths, sizeof(*paths) * (n + 1));
		if (!np || stat(p, &st) || !S_ISSOCK(st.st_mode)) {
			if (np)
				paths = np;
			free(p);
			continue;
		}
		paths = np;
		paths[n++] = p;
	}
	closedir(dir);
	qsort(paths, n, sizeof(*paths), cmp_str);
	*out = paths;
	return n;
}

static void read_env(void)
{
	const char *dbg = getenv("VRNIC_DEBUG");
	vrn_debug = dbg && *dbg && strcmp(dbg, "0");
	const char *y = getenv("VRNIC_POLL_YIELD");
	if (y && *y)
		vrn_poll_yield = (unsigned)strtoul(y, NULL, 10);
}

struct ibv_device **ibv_get_device_list(int *num)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, read_env);
	char **paths = NULL;
	int np = socket_paths(&paths), n = 0, cap = 0;
	struct ibv_device **list = calloc(1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	cap = 1;
	for (int i = 0; i < np; i++) {
		struct vrn_device *d = paths[i] ? probe(paths[i]) : NULL;
		if (d && add(&list, &n, &cap, d) < 0)
			device_put(d);
		free(paths[i]);
	}
	free(paths);
	if (num)
		*num = n;
	if (n == 0)
		errno = ENODEV; /* as a host with RDMA and no device: an empty list */
	return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
	if (!list)
		return;
	for (int i = 0; list[i]; i++)
		device_put(container_of(list[i], struct vrn_device, device));
	free(list);
}

const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

__be64 ibv_get_device_guid(struct ibv_device *device)
{
	return htobe64(container_of(device, struct vrn_device, device)->node_guid);
}

int ibv_get_device_index(struct ibv_device *device)
{
	/* rdma-core answers -1 without a kernel index; ours are not kernel
	 * devices, but a stable small number serves librdmacm's lookups. */
	(void)device;
	return -1;
}

static int context_init(struct vrn_context *c, struct vrn_device *d)
{
	c->sock = c->ev_fd = -1;
	c->vctx.context.async_fd = -1;
	c->vctx.context.cmd_fd = -1;
	pthread_mutex_init(&c->call_mu, NULL);
	pthread_mutex_init(&c->ev_mu, NULL);
	pthread_mutex_init(&c->obj_mu, NULL);
	pthread_mutex_init(&c->qp_mu, NULL);
	pthread_mutex_init(&c->vctx.context.mutex, NULL);
	c->sock = vrn_connect(d->socket_path);
	if (c->sock < 0)
		return errno == ENOENT || errno == ECONNREFUSED ? ENODEV : errno;
	struct vrn_hello_resp hr;
	int err = vrn_hello(c->sock, &hr);
	if (err)
		return err;
	c->version = hr.version;
	c->page_size = hr.page_size;
	c->next_id = 1;
	if (c->page_size != (uint32_t)sysconf(_SC_PAGESIZE))
		return EPROTO;
	err = vrn_call(c, VRN_OP_QUERY_DEVICE, NULL, 0, NULL, 0, &c->attr, sizeof(c->attr), NULL, 0, NULL);
	if (err)
		return err;
	/* The async descriptor is an epoll set of the socket (events arrive
	 * there) and an eventfd (events a request's caller queued): readable
	 * whenever ibv_get_async_event has something, pollable as the kernel's. */
	c->ev_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (c->ev_fd < 0 || ep < 0) {
		if (ep >= 0)
			close(ep);
		return errno;
	}
	struct epoll_event e1 = {.events = EPOLLIN, .data.fd = c->sock}, e2 = {.events = EPOLLIN, .data.fd = c->ev_fd};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c->sock, &e1) || epoll_ctl(ep, EPOLL_CTL_ADD, c->ev_fd, &e2)) {
		close(ep);
		return errno;
	}
	c->vctx.context.async_fd = ep;
	c->vctx.context.cmd_fd = c->sock;
	return 0;
}

static void context_free(struct vrn_context *c)
{
	if (c->vctx.context.async_fd >= 0)
		close(c->vctx.context.async_fd);
	if (c->ev_fd >= 0)
		close(c->ev_fd);
	if (c->sock >= 0)
		close(c->sock);
	for (struct vrn_event *e = c->ev_head, *n; e; e = n) {
		n = e->next;
		free(e);
	}
	free(c->objs);
	free(c);
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct vrn_device *d = container_of(device, struct vrn_device, device);
	struct vrn_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int err = context_init(c, d);
	if (err) {
		context_free(c);
		errno = err;
		return NULL;
	}
	atomic_fetch_add(&d->refcount, 1);
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->num_comp_vectors = 1;
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->vctx.sz = sizeof(c->vctx);
	vrn_fill_ops(c);
	return ctx;
}

int ibv_close_device(struct ibv_context *context)
{
	struct vrn_context *c = to_vctx(context);
	struct vrn_device *d = container_of(context->device, struct vrn_device, device);
	context_free(c); /* closing the connection makes the daemon free what it held */
	device_put(d);
	return 0;
}

static int query_device(struct ibv_context *context, struct ibv_device_attr *out)
{
	struct vrn_context *c = to_vctx(context);
	struct vrn_device_attr a;
	int err = vrn_call(c, VRN_OP_QUERY_DEVICE, NULL, 0, NULL, 0, &a, sizeof(a), NULL, 0, NULL);
	if (err)
		return err;
	memset(out, 0, sizeof(*out));
	memcpy(out->fw_ver, a.fw_ver, sizeof(out->fw_ver) < sizeof(a.fw_ver) ? sizeof(out->fw_ver) : sizeof(a.fw_ver));
	out->fw_ver[sizeof(out->fw_ver) - 1] = 0;
	out->node_guid = htobe64(a.node_guid);
	out->sys_image_guid = htobe64(a.sys_image_guid);
	out->max_mr_size = a.max_mr_size;
	out->page_size_cap = a.page_size_cap;
	out->vendor_id = a.vendor_id;
	out->vendor_part_id = a.vendor_part_id;
	out->hw_ver = a.hw_ver;
	out->max_qp = (int)a.max_qp;
	out->max_qp_wr = (int)a.max_qp_wr;
	out->device_cap_flags = a.device_cap_flags;
	out->max_sge = (int)a.max_sge;
	out->max_sge_rd = (int)a.max_sge_rd;
	out->max_cq = (int)a.max_cq;
	out->max_cqe = (int)a.max_cqe;
	out->max_mr = (int)a.max_mr;
	out->max_pd = (int)a.max_pd;
	out->max_qp_rd_atom = (int)a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = (int)a.max_qp_init_rd_atom;
	out->max_res_rd_atom = (int)a.max_res_rd_atom;
	out->atomic_cap = (enum ibv_atomic_cap)a.atomic_cap;
	out->max_mw = (int)a.max_mw;
	out->max_ah = (int)a.max_ah;
	out->max_mcast_grp = (int)a.max_mcast_grp;
	out->max_mcast_qp_attach = (int)a.max_mcast_qp_attach;
	out->max_total_mcast_qp_attach = (int)a.max_total_mcast_qp_attach;
	out->max_srq = (int)a.max_srq;
	out->max_srq_wr = (int)a.max_srq_wr;
	out->max_srq_sge = (int)a.max_srq_sge;
	out->max_pkeys = (uint16_t)a.max_pkeys;
	out->local_ca_ack_delay = (uint8_t)a.local_ca_ack_delay;
	out->phys_port_cnt = (uint8_t)a.phys_port_cnt;
	return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	int err = query_device(context, device_attr);
	return err ? (errno = err) : 0;
}

int vrn_query_device_ex(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			struct ibv_device_attr_ex *attr, size_t attr_size)
{
	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(attr->orig_attr))
		return EINVAL;
	struct ibv_device_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	int err = query_device(context, &ex.orig_attr);
	if (err)
		return err;
	ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags;
	ex.max_dm_size = 0;
	memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
	if (attr_size > sizeof(ex))
		memset((char *)attr + sizeof(ex), 0, attr_size - sizeof(ex));
	return 0;
}

/* Port attributes the protocol does not carry are kernel rxe's: no subnet
 * manager, max_vl_num 1, 1X at 2.5 Gb/s (rxe's figures for a link of
 * unknown speed). */
int vrn_query_port(struct ibv_context *context, uint8_t port, struct ibv_port_attr *out, size_t len)
{
	struct vrn_context *c = to_vctx(context);
	struct vrn_query_port_req req = {.port = port};
	struct vrn_port_attr a;
	int err = vrn_call(c, VRN_OP_QUERY_PORT, &req, sizeof(req), NULL, 0, &a, sizeof(a), NULL, 0, NULL);
	if (err)
		return err;
	struct ibv_port_attr p;
	memset(&p, 0, sizeof(p));
	p.state = (enum ibv_port_state)a.state;
	p.max_mtu = (enum ibv_mtu)a.max_mtu;
	p.active_mtu = (enum ibv_mtu)a.active_mtu;
	p.gid_tbl_len = (int)a.gid_tbl_len;
	p.port_cap_flags = a.port_cap_flags;
	p.max_msg_sz = (uint32_t)(a.max_msg_size > UINT32_MAX ? UINT32_MAX : a.max_msg_size);
	p.pkey_tbl_len = (uint16_t)a.pkey_tbl_len;
	p.max_vl_num = 1;
	p.active_width = 1;
	p.active_speed = 1;
	p.phys_state = (uint8_t)a.phys_state;
	p.link_layer = (uint8_t)a.link_layer;
	memcpy(out, &p, len < sizeof(p) ? len : sizeof(p));
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr);
int ibv_query_port(struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr)
{
	/* The old entry point: its struct is ibv_port_attr up to link_layer. */
	int err = vrn_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
				 offsetof(struct ibv_port_attr, flags));
	return err ? (errno = err) : 0;
}

static int query_gid(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid, uint32_t *type)
{
	struct vrn_context *c = to_vctx(context);
	if (index < 0)
		return EINVAL;
	struct vrn_query_gid_req req = {.port = port, .index = (uint32_t)index};
	struct vrn_query_gid_resp r;
	int err = vrn_call(c, VRN_OP_QUERY_GID, &req, sizeof(req), NULL, 0, &r, sizeof(r), NULL, 0, NULL);
	if (err)
		return err;
	memcpy(gid->raw, r.gid, 16);
	if (type)
		*type = r.type;
	return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	int err = query_gid(context, port_num, index, gid, NULL);
	return err ? (errno = err, -1) : 0;
}

/* driver.h's enum (not installed); stubs.c exports ibv_query_gid_type over this. */
enum ibv_gid_type_sysfs { IBV_GID_TYPE_SYSFS_IB_ROCE_V1, IBV_GID_TYPE_SYSFS_ROCE_V2 };
int vrn_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type);

/* The GID type as sysfs names it: every GID of vrnicd is RoCE v2. */
int vrn_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type)
{
	union ibv_gid g;
	uint32_t t;
	int err = query_gid(context, port_num, (int)index, &g, &t);
	if (err)
		return err;
	*type = IBV_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

static int gid_entry(struct ibv_context *context, uint8_t port, uint32_t index, struct ibv_gid_entry *e)
{
	uint32_t t;
	int err = query_gid(context, port, (int)index, &e->gid, &t);
	if (err)
		return err;
	if (t == 0)
		return ENODATA; /* an empty slot, as the kernel answers */
	e->gid_index = index;
	e->port_num = port;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	e->ndev_ifindex = 0;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (flags || entry_size < sizeof(*entry))
		return EINVAL;
	memset(entry, 0, entry_size);
	return gid_entry(context, (uint8_t)port_num, gid_index, entry);
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries,
			     uint32_t flags, size_t entry_size)
{
	if (flags || entry_size < sizeof(*entries))
		return -EINVAL;
	struct ibv_device_attr a;
	int err = query_device(context, &a);
	if (err)
		return -err;
	size_t n = 0;
	for (uint8_t port = 1; port <= a.phys_port_cnt; port++) {
		struct ibv_port_attr pa;
		if ((err = vrn_query_port(context, port, &pa, sizeof(pa))))
			return -err;
		for (int i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;
			memset(&e, 0, sizeof(e));
			err = gid_entry(context, port, (uint32_t)i, &e);
			if (err == ENODATA)
				continue;
			if (err)
				return -err;
			if (n == max_entries)
				return -EINVAL;
			memcpy((char *)entries + n * entry_size, &e, sizeof(e));
			n++;
		}
	}
	return (ssize_t)n;
}

/* One P_Key, the default full-membership 0xFFFF, as rxe's table. */
int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	(void)context;
	if (port_num != 1 || index != 0) {
		errno = EINVAL;
		return -1;
	}
	*pkey = htobe16(0xffff);
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	__be16 p;
	if (ibv_query_pkey(context, port_num, 0, &p) == 0 && p == pkey)
		return 0;
	errno = ENOENT;
	return -1;
}
