/* stubs.c: the IBVERBS_PRIVATE_<N> node of rdma-core's libibverbs.
 *
 * These are the functions rdma-core's provider libraries (libmlx5, libefa,
 * ...) link against. Programs such as perftest and pyverbs load those
 * libraries (DT_NEEDED), and they are linked BIND_NOW, so every symbol must
 * exist or the program does not start. No provider ever gets one of our
 * devices, so beyond the load-time call (verbs_register_driver_<N>, from
 * their constructors) nothing here is reached in practice; each function
 * answers as a device without the feature would.
 *
 * Prototypes are rdma-core v44's libibverbs/driver.h and cmd_ioctl.h. That
 * header is not installed, so its types are declared here as incomplete
 * structs: for the ABI only their class (pointer, integer) matters.
 *
 * The exception is ibv_query_gid_type (ibv_devinfo and pyverbs import it):
 * it answers from the context, through vrn_query_gid_type in device.c. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

/* rdma-core's private ABI version; it is part of the name of
 * verbs_register_driver_<N>. The version script is generated from the
 * installed library, so with another N the link fails (--no-undefined-version
 * finds the map's verbs_register_driver_<N> undefined): build with
 * CABI_CFLAGS=...-DVRN_PABI=<N> then. */
#ifndef VRN_PABI
#define VRN_PABI 34
#endif

/* driver.h's types, opaque. */
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_context_ops;
struct verbs_mr;
struct verbs_qp;
struct verbs_cq;
struct verbs_srq;
struct verbs_xrcd;
struct verbs_flow_action;
struct verbs_dm;
struct verbs_counters;
struct ibv_command_buffer;

/* kern-abi.h's command structs and the kernel's responses, opaque. */
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;
struct ib_uverbs_get_context_resp;
struct ib_uverbs_ex_query_device_resp;
struct ib_uverbs_alloc_pd_resp;
struct ib_uverbs_open_xrcd_resp;
struct ib_uverbs_reg_mr_resp;
struct ib_uverbs_rereg_mr_resp;
struct ib_uverbs_alloc_mw_resp;
struct ib_uverbs_create_cq_resp;
struct ib_uverbs_ex_create_cq_resp;
struct ib_uverbs_resize_cq_resp;
struct ib_uverbs_create_srq_resp;
struct ib_uverbs_create_qp_resp;
struct ib_uverbs_ex_create_qp_resp;
struct ib_uverbs_ex_modify_qp_resp;
struct ib_uverbs_create_ah_resp;
struct ib_uverbs_ex_create_wq_resp;
struct ib_uverbs_ex_create_rwq_ind_table_resp;

/* driver.h's enum ibv_gid_type_sysfs (the same values). */
enum ibv_gid_type_sysfs {
	IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
	IBV_GID_TYPE_SYSFS_ROCE_V2,
};

/* The ibv_cmd_* convention: 0, or an errno value (as the kernel's answer
 * would be); errno is set too, for callers that read it. */
static int unsupported(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

/* --- registration and context set-up (the provider's side of open) --- */

#define VRN_PASTE2(a, b) a##b
#define VRN_PASTE(a, b) VRN_PASTE2(a, b)
#define VRN_REGISTER_DRIVER VRN_PASTE(verbs_register_driver_, VRN_PABI)

void VRN_REGISTER_DRIVER(const struct verbs_device_ops *ops);

/* Called by every provider library's constructor at load. Discovery is the
 * daemon's, never a provider's: keeping nothing is the right answer. */
void VRN_REGISTER_DRIVER(const struct verbs_device_ops *ops)
{
}

/* rdma-core: destroy calls may succeed on a disassociated device. Read by
 * providers only; false as in rdma-core until a provider sets it. */
bool verbs_allow_disassociate_destroy;

void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
}

void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
				    struct verbs_context *context_offset, uint32_t driver_id)
{
	errno = EOPNOTSUPP;
	return NULL;
}

void verbs_uninit_context(struct verbs_context *context)
{
}

void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops)
{
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
		   void *cq_context)
{
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	errno = EOPNOTSUPP;
	return NULL;
}

int ibv_cmd_get_context(struct verbs_context *context, struct ibv_get_context *cmd, size_t cmd_size,
			struct ib_uverbs_get_context_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_query_context(struct ibv_context *ctx, struct ibv_command_buffer *driver)
{
	return unsupported();
}

/* --- the ioctl path --- */

/* Counts the attributes of linked command buffers, for sizing a buffer
 * before execute_ioctl. execute_ioctl below fails anyway, so no link is
 * ever linearized: the caller's own count is the answer. */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link)
{
	return num_attrs;
}

int execute_ioctl(struct ibv_context *context, struct ibv_command_buffer *cmd)
{
	return unsupported();
}

/* --- device, port, GID --- */

int ibv_cmd_query_device_any(struct ibv_context *context, const struct ibv_query_device_ex_input *input,
			     struct ibv_device_attr_ex *attr, size_t attr_size,
			     struct ib_uverbs_ex_query_device_resp *resp, size_t *resp_size)
{
	return unsupported();
}

int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num, struct ibv_port_attr *port_attr,
		       struct ibv_query_port *cmd, size_t cmd_size)
{
	return unsupported();
}

/* device.c provides the real one; this weak default only lets the library
 * link (and answer "not supported") while device.c is absent. It returns 0
 * or an errno value. */
int vrn_query_gid_type(struct ibv_context *context, uint8_t port, unsigned int index,
		       enum ibv_gid_type_sysfs *type);

__attribute__((weak)) int vrn_query_gid_type(struct ibv_context *context, uint8_t port, unsigned int index,
					     enum ibv_gid_type_sysfs *type)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type);

/* rdma-core's convention here is 0, or -1 with errno; vrn_query_gid_type
 * answers 0 or an errno value. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       enum ibv_gid_type_sysfs *type)
{
	int ret;

	if (!context || !type) {
		errno = EINVAL;
		return -1;
	}
	ret = vrn_query_gid_type(context, port_num, index, type);
	if (ret == 0)
		return 0;
	if (ret == ENODATA) { /* an empty GID slot: rdma-core answers RoCE v1 (its API of old) */
		*type = IBV_GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (ret > 0)
		errno = ret;
	return -1;
}

/* Reads a file of a device's sysfs directory. Our devices have none
 * (vrn_device.sysfs stays NULL), so nothing can be read; a NULL device is
 * EINVAL, as in rdma-core. Convention: bytes read, or -1 with errno. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev, const char *fnfmt,
			      ...)
{
	errno = sysfs_dev ? ENOENT : EINVAL;
	return -1;
}

/* --- PD, XRCD, MR, MW --- */

int ibv_cmd_alloc_pd(struct ibv_context *context, struct ibv_pd *pd, struct ibv_alloc_pd *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_pd_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd)
{
	return unsupported();
}

int ibv_cmd_open_xrcd(struct ibv_context *context, struct verbs_xrcd *xrcd, int vxrcd_size,
		      struct ibv_xrcd_init_attr *attr, struct ibv_open_xrcd *cmd, size_t cmd_size,
		      struct ib_uverbs_open_xrcd_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd)
{
	return unsupported();
}

int ibv_cmd_reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t hca_va, int access,
		   struct verbs_mr *vmr, struct ibv_reg_mr *cmd, size_t cmd_size,
		   struct ib_uverbs_reg_mr_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_rereg_mr(struct verbs_mr *vmr, uint32_t flags, void *addr, size_t length, uint64_t hca_va,
		     int access, struct ibv_pd *pd, struct ibv_rereg_mr *cmd, size_t cmd_sz,
		     struct ib_uverbs_rereg_mr_resp *resp, size_t resp_sz)
{
	return unsupported();
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr)
{
	return unsupported();
}

int ibv_cmd_query_mr(struct ibv_pd *pd, struct verbs_mr *vmr, uint32_t mr_handle)
{
	return unsupported();
}

int ibv_cmd_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		      struct ibv_sge *sg_list, uint32_t num_sge)
{
	return unsupported();
}

int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
			  int access, struct verbs_mr *vmr)
{
	return unsupported();
}

int ibv_cmd_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type, struct ibv_mw *mw, struct ibv_alloc_mw *cmd,
		     size_t cmd_size, struct ib_uverbs_alloc_mw_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw)
{
	return unsupported();
}

/* --- CQ --- */

int ibv_cmd_create_cq(struct ibv_context *context, int cqe, struct ibv_comp_channel *channel,
		      int comp_vector, struct ibv_cq *cq, struct ibv_create_cq *cmd, size_t cmd_size,
		      struct ib_uverbs_create_cq_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_create_cq_ex(struct ibv_context *context, const struct ibv_cq_init_attr_ex *cq_attr,
			 struct verbs_cq *cq, struct ibv_create_cq_ex *cmd, size_t cmd_size,
			 struct ib_uverbs_ex_create_cq_resp *resp, size_t resp_size, uint32_t cmd_flags)
{
	return unsupported();
}

/* Returns a count of completions, so failure is -1 with errno (rdma-core's). */
int ibv_cmd_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc)
{
	errno = EOPNOTSUPP;
	return -1;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	return unsupported();
}

int ibv_cmd_resize_cq(struct ibv_cq *cq, int cqe, struct ibv_resize_cq *cmd, size_t cmd_size,
		      struct ib_uverbs_resize_cq_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq)
{
	return unsupported();
}

int ibv_cmd_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr, struct ibv_modify_cq *cmd,
		      size_t cmd_size)
{
	return unsupported();
}

/* --- SRQ --- */

int ibv_cmd_create_srq(struct ibv_pd *pd, struct ibv_srq *srq, struct ibv_srq_init_attr *attr,
		       struct ibv_create_srq *cmd, size_t cmd_size, struct ib_uverbs_create_srq_resp *resp,
		       size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_create_srq_ex(struct ibv_context *context, struct verbs_srq *srq,
			  struct ibv_srq_init_attr_ex *attr_ex, struct ibv_create_xsrq *cmd, size_t cmd_size,
			  struct ib_uverbs_create_srq_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, int srq_attr_mask,
		       struct ibv_modify_srq *cmd, size_t cmd_size)
{
	return unsupported();
}

int ibv_cmd_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *srq_attr, struct ibv_query_srq *cmd,
		      size_t cmd_size)
{
	return unsupported();
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq)
{
	return unsupported();
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

/* --- QP --- */

int ibv_cmd_create_qp(struct ibv_pd *pd, struct ibv_qp *qp, struct ibv_qp_init_attr *attr,
		      struct ibv_create_qp *cmd, size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		      size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_create_qp_ex(struct ibv_context *context, struct verbs_qp *qp, struct ibv_qp_init_attr_ex *attr_ex,
			 struct ibv_create_qp *cmd, size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
			 size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_create_qp_ex2(struct ibv_context *context, struct verbs_qp *qp, struct ibv_qp_init_attr_ex *qp_attr,
			  struct ibv_create_qp_ex *cmd, size_t cmd_size, struct ib_uverbs_ex_create_qp_resp *resp,
			  size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_open_qp(struct ibv_context *context, struct verbs_qp *qp, int vqp_sz, struct ibv_qp_open_attr *attr,
		    struct ibv_open_qp *cmd, size_t cmd_size, struct ib_uverbs_create_qp_resp *resp,
		    size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *qp_attr, int attr_mask,
		     struct ibv_qp_init_attr *qp_init_attr, struct ibv_query_qp *cmd, size_t cmd_size)
{
	return unsupported();
}

int ibv_cmd_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_modify_qp *cmd,
		      size_t cmd_size)
{
	return unsupported();
}

int ibv_cmd_modify_qp_ex(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
			 struct ibv_modify_qp_ex *cmd, size_t cmd_size, struct ib_uverbs_ex_modify_qp_resp *resp,
			 size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp)
{
	return unsupported();
}

/* The post calls name the first WR not posted, as a failing post does. */
int ibv_cmd_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

/* --- AH, multicast --- */

int ibv_cmd_create_ah(struct ibv_pd *pd, struct ibv_ah *ah, struct ibv_ah_attr *attr,
		      struct ib_uverbs_create_ah_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah)
{
	return unsupported();
}

int ibv_cmd_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return unsupported();
}

int ibv_cmd_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return unsupported();
}

/* --- flow steering, flow actions, WQ, RSS --- */

int ibv_cmd_create_flow(struct ibv_qp *qp, struct ibv_flow *flow_id, struct ibv_flow_attr *flow_attr, void *ucmd,
			size_t ucmd_size)
{
	return unsupported();
}

int ibv_cmd_destroy_flow(struct ibv_flow *flow_id)
{
	return unsupported();
}

int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx, struct ibv_flow_action_esp_attr *attr,
				   struct verbs_flow_action *flow_action, struct ibv_command_buffer *driver)
{
	return unsupported();
}

int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action, struct ibv_flow_action_esp_attr *attr,
				   struct ibv_command_buffer *driver)
{
	return unsupported();
}

int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action)
{
	return unsupported();
}

int ibv_cmd_create_wq(struct ibv_context *context, struct ibv_wq_init_attr *wq_init_attr, struct ibv_wq *wq,
		      struct ibv_create_wq *cmd, size_t cmd_size, struct ib_uverbs_ex_create_wq_resp *resp,
		      size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr, struct ibv_modify_wq *cmd, size_t cmd_size)
{
	return unsupported();
}

int ibv_cmd_destroy_wq(struct ibv_wq *wq)
{
	return unsupported();
}

int ibv_cmd_create_rwq_ind_table(struct ibv_context *context, struct ibv_rwq_ind_table_init_attr *init_attr,
				 struct ibv_rwq_ind_table *rwq_ind_table,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp, size_t resp_size)
{
	return unsupported();
}

int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table)
{
	return unsupported();
}

/* --- counters, device memory --- */

int ibv_cmd_create_counters(struct ibv_context *context, struct ibv_counters_init_attr *init_attr,
			    struct verbs_counters *vcounters, struct ibv_command_buffer *link)
{
	return unsupported();
}

int ibv_cmd_destroy_counters(struct verbs_counters *vcounters)
{
	return unsupported();
}

int ibv_cmd_read_counters(struct verbs_counters *vcounters, uint64_t *counters_value, uint32_t ncounters,
			  uint32_t flags, struct ibv_command_buffer *link)
{
	return unsupported();
}

int ibv_cmd_alloc_dm(struct ibv_context *ctx, const struct ibv_alloc_dm_attr *dm_attr, struct verbs_dm *dm,
		     struct ibv_command_buffer *link)
{
	return unsupported();
}

int ibv_cmd_free_dm(struct verbs_dm *dm)
{
	return unsupported();
}

int ibv_cmd_reg_dm_mr(struct ibv_pd *pd, struct verbs_dm *dm, uint64_t offset, size_t length,
		      unsigned int access, struct verbs_mr *vmr, struct ibv_command_buffer *link)
{
	return unsupported();
}
