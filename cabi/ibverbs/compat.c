/* compat.c: the public libibverbs symbols that need no daemon: fork
 * support, the kernel-ABI marshalling helpers stock librdmacm calls, the
 * sysfs helpers, and the verbs vrnicd does not have (XRC/DM/dmabuf import,
 * ...), which answer as rdma-core 44 answers for a device without them.
 * strs.c has the *_str and rate helpers; stubs.c the IBVERBS_PRIVATE node.
 *
 * Public symbols (objdump -T of Debian 12's libibverbs.so.1, IBVERBS_1.x)
 * implemented elsewhere, so that none is missed:
 *   device.c  ibv_get_device_list, ibv_free_device_list, ibv_get_device_name,
 *             ibv_get_device_guid, ibv_get_device_index, ibv_open_device,
 *             ibv_close_device, ibv_query_device, ibv_query_port,
 *             ibv_query_gid, _ibv_query_gid_ex, _ibv_query_gid_table,
 *             ibv_query_pkey, ibv_get_pkey_index, ibv_get_async_event,
 *             ibv_ack_async_event (and vrn_query_gid_type for stubs.c)
 *   pd.c      ibv_alloc_pd, ibv_dealloc_pd
 *   mr.c      ibv_reg_mr, ibv_reg_mr_iova, ibv_reg_mr_iova2, ibv_rereg_mr,
 *             ibv_dereg_mr
 *   cq.c      ibv_create_comp_channel, ibv_destroy_comp_channel,
 *             ibv_create_cq, ibv_resize_cq, ibv_destroy_cq,
 *             ibv_get_cq_event, ibv_ack_cq_events
 *   qp.c      ibv_create_qp, ibv_modify_qp, ibv_query_qp, ibv_destroy_qp,
 *             ibv_qp_to_qp_ex, ibv_attach_mcast, ibv_detach_mcast,
 *             ibv_query_ece, ibv_set_ece, ibv_query_qp_data_in_order
 *   srq.c     ibv_create_srq, ibv_modify_srq, ibv_query_srq, ibv_destroy_srq
 *   ah.c      ibv_create_ah, ibv_destroy_ah, ibv_init_ah_from_wc,
 *             ibv_create_ah_from_wc
 * (the file of each is the other engineer's choice; together they must
 * define these 48 names, or the link fails: --no-undefined-version).
 *
 * Here: ibv_fork_init, ibv_is_fork_initialized, ibv_dontfork_range,
 * ibv_dofork_range, ibv_copy_ah_attr_from_kern, ibv_copy_qp_attr_from_kern,
 * ibv_copy_path_rec_from_kern, ibv_copy_path_rec_to_kern, ibv_get_sysfs_path,
 * ibv_read_sysfs_file, ibv_resolve_eth_l2_from_gid, ibv_import_device,
 * ibv_import_pd, ibv_unimport_pd, ibv_import_mr, ibv_unimport_mr,
 * ibv_import_dm, ibv_unimport_dm, ibv_reg_dmabuf_mr, and the hidden
 * compat ibv_register_driver@IBVERBS_1.1.
 *
 * Not provided: the 33 IBVERBS_1.0 compat versions of 1.1 names
 * (ibv_open_device@IBVERBS_1.0 ...), which take rdma-core's 1.0-era structs;
 * no program built in this century binds them. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/* Declared by rdma-core's driver.h and marshall.h, which are not installed. */
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* --- fork --- */

/* The library keeps registered memory right across fork by itself (mr.c's
 * atfork handlers give the child private copies), the way a kernel with
 * copy-on-fork for pinned pages does: there is nothing to set up. */
int ibv_fork_init(void)
{
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

/* rdma-core madvises ranges only after ibv_fork_init built its tree; with
 * fork handled by the library there is no tree and these succeed doing
 * nothing, as rdma-core's do before ibv_fork_init. */
int ibv_dontfork_range(void *base, size_t size)
{
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	return 0;
}

/* --- kernel-ABI marshalling (stock librdmacm's rdma_init_qp_attr and
 * path records use these on what the kernel's ucma returned) --- */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	if (!dst || !src)
		return;
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

/* qp_state is deliberately not copied, as in rdma-core: librdmacm sets
 * dst->qp_state to the state it asks about before the call and relies on
 * it surviving. */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	if (!dst || !src)
		return;
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/* Path records: the same fields both ways, byte order untouched (the
 * network-order ones are network order on both sides); one list of them
 * for both directions. */
#define COPY_PATH_FIELDS(dst, src)                                                                                 \
	do {                                                                                                       \
		(dst)->dlid = (src)->dlid;                                                                         \
		(dst)->slid = (src)->slid;                                                                         \
		(dst)->raw_traffic = (src)->raw_traffic;                                                           \
		(dst)->flow_label = (src)->flow_label;                                                             \
		(dst)->hop_limit = (src)->hop_limit;                                                               \
		(dst)->traffic_class = (src)->traffic_class;                                                       \
		(dst)->reversible = (src)->reversible;                                                             \
		(dst)->numb_path = (src)->numb_path;                                                               \
		(dst)->pkey = (src)->pkey;                                                                         \
		(dst)->sl = (src)->sl;                                                                             \
		(dst)->mtu_selector = (src)->mtu_selector;                                                         \
		(dst)->mtu = (src)->mtu;                                                                           \
		(dst)->rate_selector = (src)->rate_selector;                                                       \
		(dst)->rate = (src)->rate;                                                                         \
		(dst)->packet_life_time_selector = (src)->packet_life_time_selector;                               \
		(dst)->packet_life_time = (src)->packet_life_time;                                                 \
		(dst)->preference = (src)->preference;                                                             \
	} while (0)

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	if (!dst || !src)
		return;
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
	COPY_PATH_FIELDS(dst, src);
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	if (!dst || !src)
		return;
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	COPY_PATH_FIELDS(dst, src);
}

/* --- sysfs (stock librdmacm reads its ABI version and devices' files
 * through these; ibv_devinfo reads fw_ver) --- */

static const char *sysfs_path = "/sys";
static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;

/* $SYSFS_PATH as rdma-core takes it: only when not running set-uid, at most
 * IBV_SYSFS_PATH_MAX bytes, without trailing slashes. */
static void sysfs_path_init(void)
{
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	char *dup;
	size_t n;

	if (!env)
		return;
	dup = strndup(env, IBV_SYSFS_PATH_MAX);
	if (!dup)
		return;
	for (n = strlen(dup); n > 0 && dup[n - 1] == '/'; n--)
		dup[n - 1] = '\0';
	sysfs_path = dup; /* kept for the life of the process, as rdma-core's */
}

const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_once, sysfs_path_init);
	return sysfs_path;
}

/* Reads DIR/FILE into buf as a string without its trailing newline and
 * returns its length; -1 with errno when it cannot be opened or read, or
 * when it does not fit with its terminating NUL (rdma-core's rules). vrnicd
 * devices have no sysfs entries, so for them this fails with ENOENT, as
 * rdma-core does for a missing file. */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char *path;
	ssize_t len;
	int fd, err;

	if (!dir || !file || (!buf && size)) {
		errno = EINVAL;
		return -1;
	}
	if (asprintf(&path, "%s/%s", dir, file) < 0)
		return -1;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	err = errno;
	free(path);
	if (fd < 0) {
		errno = err;
		return -1;
	}
	len = read(fd, buf, size);
	err = errno;
	close(fd);
	if (len < 0) {
		errno = err;
		return -1;
	}
	if (len > 0) {
		if (buf[len - 1] == '\n')
			buf[--len] = '\0';
		else if ((size_t)len < size)
			buf[len] = '\0';
		else
			return -1; /* no room for the NUL: fail rather than truncate */
	}
	return (int)len;
}

/* --- verbs vrnicd does not have --- */

/* rdma-core resolves the neighbour through netlink for providers that need
 * a MAC in the AH (mlx4/mlx5). vrnicd resolves addresses itself; nothing
 * here needs it yet. rdma-core's failures are negative errno values. */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
	errno = EOPNOTSUPP;
	return -EOPNOTSUPP;
}

/* Importing shares a kernel uverbs file between processes. The fd must be
 * a character device (EINVAL otherwise, as rdma-core); none is one of ours,
 * which are sockets, so no device matches: ENODEV. */
struct ibv_context *ibv_import_device(int cmd_fd)
{
	struct stat st;

	if (fstat(cmd_fd, &st) || !S_ISCHR(st.st_mode)) {
		errno = EINVAL;
		return NULL;
	}
	errno = ENODEV;
	return NULL;
}

/* The object imports are provider ops rdma-core fills with "not supported"
 * (NULL, errno EOPNOTSUPP) when the provider lacks them; the unimports of
 * such a provider do nothing. */
struct ibv_pd *ibv_import_pd(struct ibv_context *context, uint32_t pd_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
}

/* dma-buf memory is device memory exported by a GPU driver; the daemon
 * reaches only memory it can map. */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* ibv_register_driver exists only as a hidden compat version (1.1): old
 * libfabric usNIC providers call it to silence a warning. rdma-core's does
 * nothing; so does this one. Bound with .symver since the version script
 * lists only default versions (see mkmap.sh). */
void vrn_compat_register_driver(const char *name, void *init_func);
__asm__(".symver vrn_compat_register_driver, ibv_register_driver@IBVERBS_1.1");

void vrn_compat_register_driver(const char *name, void *init_func)
{
}
