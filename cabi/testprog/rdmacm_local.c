/* rdmacm_local.c: the parts of the drop-in librdmacm that need no daemon,
 * through the public API as a program reaches them (cabi/rdmacm_abi_test.go
 * runs it with lib/vrnicd first on LD_LIBRARY_PATH):
 *  - rdma_event_str: rdma-core 44's strings, "UNKNOWN EVENT" outside;
 *  - rsockets: ENOSYS from every call (the test counts the one stderr
 *    message), rpoll and rselect as poll(2) and select(2) on a pipe;
 *  - rdma_getaddrinfo: passive and active answers, UD, IPv6, the hints'
 *    addresses, getaddrinfo's own error codes passed through, EINVAL cases
 *    (AF_IB included), rdma_freeaddrinfo(NULL).
 * Prints "FAIL <what>" per failed check and "rdmacm_local: ok" at the end
 * when all passed; exits 1 on any failure. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>

#ifndef AF_IB
#define AF_IB 27
#endif

static int failures;

#define CHECK(cond, ...)                                  \
	do {                                              \
		if (!(cond)) {                            \
			printf("FAIL %s:%d: ", __func__, __LINE__); \
			printf(__VA_ARGS__);              \
			printf("\n");                     \
			failures++;                       \
		}                                         \
	} while (0)

static void event_strs(void)
{
	static const char *const want[] = {
		"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR",
		"RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR",
		"RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
		"RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE",
		"RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED",
		"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL",
		"RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR",
		"RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	for (int i = 0; i < (int)(sizeof(want) / sizeof(want[0])); i++) {
		const char *s = rdma_event_str((enum rdma_cm_event_type)i);
		CHECK(s && !strcmp(s, want[i]), "rdma_event_str(%d) = %s, want %s", i, s ? s : "NULL", want[i]);
	}
	CHECK(RDMA_CM_EVENT_TIMEWAIT_EXIT == 15, "enum changed: TIMEWAIT_EXIT = %d", RDMA_CM_EVENT_TIMEWAIT_EXIT);
	const int odd[] = { 16, -1, 1000, INT32_MIN };
	for (int i = 0; i < 4; i++) {
		const char *s = rdma_event_str((enum rdma_cm_event_type)odd[i]);
		CHECK(s && !strcmp(s, "UNKNOWN EVENT"), "rdma_event_str(%d) = %s", odd[i], s ? s : "NULL");
	}
}

#define NOSYS(call)                                                           \
	do {                                                                  \
		errno = 0;                                                    \
		long r_ = (long)(call);                                       \
		CHECK(r_ == -1 && errno == ENOSYS, "%s = %ld errno %d", #call, r_, errno); \
	} while (0)

static void rsockets(void)
{
	char buf[8] = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	int one = 1;

	NOSYS(rsocket(AF_INET, SOCK_STREAM, 0));
	NOSYS(rbind(3, (struct sockaddr *)&sin, len));
	NOSYS(rlisten(3, 1));
	NOSYS(raccept(3, (struct sockaddr *)&sin, &len));
	NOSYS(rconnect(3, (struct sockaddr *)&sin, len));
	NOSYS(rshutdown(3, SHUT_RDWR));
	NOSYS(rclose(3));
	NOSYS(rrecv(3, buf, sizeof(buf), 0));
	NOSYS(rrecvfrom(3, buf, sizeof(buf), 0, (struct sockaddr *)&sin, &len));
	NOSYS(rrecvmsg(3, &msg, 0));
	NOSYS(rsend(3, buf, sizeof(buf), 0));
	NOSYS(rsendto(3, buf, sizeof(buf), 0, (struct sockaddr *)&sin, len));
	NOSYS(rsendmsg(3, &msg, 0));
	NOSYS(rread(3, buf, sizeof(buf)));
	NOSYS(rreadv(3, &iov, 1));
	NOSYS(rwrite(3, buf, sizeof(buf)));
	NOSYS(rwritev(3, &iov, 1));
	NOSYS(rgetpeername(3, (struct sockaddr *)&sin, &len));
	NOSYS(rgetsockname(3, (struct sockaddr *)&sin, &len));
	NOSYS(rsetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)));
	NOSYS(rgetsockopt(3, SOL_SOCKET, SO_REUSEADDR, &one, &len));
	NOSYS(rfcntl(3, F_GETFL));
	NOSYS(rfcntl(3, F_SETFL, O_NONBLOCK));
	NOSYS(riomap(3, buf, sizeof(buf), PROT_WRITE, 0, -1));
	NOSYS(riounmap(3, buf, sizeof(buf)));
	errno = 0;
	size_t w = riowrite(3, buf, sizeof(buf), 0, 0);
	CHECK(w == SIZE_MAX && errno == ENOSYS, "riowrite = %zu errno %d", w, errno);

	/* rpoll and rselect: poll(2) and select(2). */
	int p[2];
	if (pipe(p)) {
		CHECK(0, "pipe: %s", strerror(errno));
		return;
	}
	struct pollfd pf[2] = { { .fd = p[0], .events = POLLIN }, { .fd = -1 } };
	int n = rpoll(pf, 2, 0);
	CHECK(n == 0, "rpoll on an empty pipe = %d", n);
	CHECK(write(p[1], "x", 1) == 1, "write");
	n = rpoll(pf, 2, 1000);
	CHECK(n == 1 && (pf[0].revents & POLLIN) && pf[1].revents == 0, "rpoll on a full pipe = %d revents %#x", n, pf[0].revents);

	fd_set rd;
	struct timeval tv = { 0, 0 };
	FD_ZERO(&rd);
	FD_SET(p[0], &rd);
	n = rselect(p[0] + 1, &rd, NULL, NULL, &tv);
	CHECK(n == 1 && FD_ISSET(p[0], &rd), "rselect on a full pipe = %d", n);
	CHECK(read(p[0], buf, 1) == 1, "read");
	FD_ZERO(&rd);
	FD_SET(p[0], &rd);
	tv.tv_sec = 0;
	tv.tv_usec = 1000;
	n = rselect(p[0] + 1, &rd, NULL, NULL, &tv);
	CHECK(n == 0 && !FD_ISSET(p[0], &rd), "rselect on an empty pipe = %d", n);

	/* A closed descriptor: poll's POLLNVAL, select's EBADF. */
	close(p[0]);
	close(p[1]);
	pf[0].revents = 0;
	n = rpoll(pf, 1, 0);
	CHECK(n == 1 && pf[0].revents == POLLNVAL, "rpoll on a closed fd = %d revents %#x", n, pf[0].revents);
	FD_ZERO(&rd);
	FD_SET(p[0], &rd);
	tv.tv_usec = 0;
	errno = 0;
	n = rselect(p[0] + 1, &rd, NULL, NULL, &tv);
	CHECK(n == -1 && errno == EBADF, "rselect on a closed fd = %d errno %d", n, errno);
}

static int is_in(const struct sockaddr *sa, socklen_t len, const char *ip, int port)
{
	const struct sockaddr_in *in = (const void *)sa;
	struct in_addr want;

	return sa && len == sizeof(*in) && in->sin_family == AF_INET && inet_pton(AF_INET, ip, &want) == 1 &&
	       in->sin_addr.s_addr == want.s_addr && ntohs(in->sin_port) == port;
}

/* plain reports a result with nothing of IB in it. */
static int plain(const struct rdma_addrinfo *r)
{
	return !r->ai_next && !r->ai_route && !r->ai_route_len && !r->ai_connect && !r->ai_connect_len;
}

static void addrinfo(void)
{
	struct rdma_addrinfo h, *r = NULL;
	int ret;

	/* A passive server's lookup (rping -s, rdma_server): the wildcard
	 * address as the source, RC on RDMA_PS_TCP. */
	memset(&h, 0, sizeof(h));
	h.ai_flags = RAI_PASSIVE;
	h.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo(NULL, "7471", &h, &r);
	CHECK(ret == 0, "passive: %d (%s)", ret, gai_strerror(ret));
	if (!ret) {
		CHECK(r->ai_flags == RAI_PASSIVE && r->ai_family == AF_INET && r->ai_qp_type == IBV_QPT_RC &&
			      r->ai_port_space == RDMA_PS_TCP && plain(r),
		      "passive: flags %#x family %d qp %d ps %#x", r->ai_flags, r->ai_family, r->ai_qp_type, r->ai_port_space);
		CHECK(is_in(r->ai_src_addr, r->ai_src_len, "0.0.0.0", 7471) && !r->ai_dst_addr && !r->ai_dst_len,
		      "passive: src_len %u dst_len %u", r->ai_src_len, r->ai_dst_len);
		rdma_freeaddrinfo(r);
	}

	/* An active lookup without hints: the destination, RC, RDMA_PS_TCP. */
	r = NULL;
	ret = rdma_getaddrinfo("127.0.0.1", "7471", NULL, &r);
	CHECK(ret == 0, "active: %d", ret);
	if (!ret) {
		CHECK(r->ai_flags == 0 && r->ai_family == AF_INET && r->ai_qp_type == IBV_QPT_RC &&
			      r->ai_port_space == RDMA_PS_TCP && plain(r),
		      "active: flags %#x family %d qp %d ps %#x", r->ai_flags, r->ai_family, r->ai_qp_type, r->ai_port_space);
		CHECK(is_in(r->ai_dst_addr, r->ai_dst_len, "127.0.0.1", 7471) && !r->ai_src_addr && !r->ai_src_len,
		      "active: dst_len %u src_len %u", r->ai_dst_len, r->ai_src_len);
		rdma_freeaddrinfo(r);
	}

	/* UD (udaddy): the port space follows the datagram answer. */
	memset(&h, 0, sizeof(h));
	h.ai_qp_type = IBV_QPT_UD;
	r = NULL;
	ret = rdma_getaddrinfo("127.0.0.1", "7174", &h, &r);
	CHECK(ret == 0, "UD: %d", ret);
	if (!ret) {
		CHECK(r->ai_qp_type == IBV_QPT_UD && r->ai_port_space == RDMA_PS_UDP &&
			      is_in(r->ai_dst_addr, r->ai_dst_len, "127.0.0.1", 7174),
		      "UD: qp %d ps %#x", r->ai_qp_type, r->ai_port_space);
		rdma_freeaddrinfo(r);
	}

	/* IPv6, numeric; the hints' source address taken along by an active
	 * lookup (a client binding to a given address). */
	struct sockaddr_in6 src6 = { .sin6_family = AF_INET6, .sin6_port = htons(9) };
	src6.sin6_addr.s6_addr[15] = 1;
	memset(&h, 0, sizeof(h));
	h.ai_flags = RAI_NUMERICHOST;
	h.ai_family = AF_INET6;
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_src_addr = (struct sockaddr *)&src6;
	h.ai_src_len = sizeof(src6);
	r = NULL;
	ret = rdma_getaddrinfo("::1", "18515", &h, &r);
	CHECK(ret == 0, "IPv6: %d", ret);
	if (!ret) {
		const struct sockaddr_in6 *d = (const void *)r->ai_dst_addr;
		CHECK(r->ai_family == AF_INET6 && r->ai_dst_len == sizeof(*d) && d->sin6_family == AF_INET6 &&
			      ntohs(d->sin6_port) == 18515 && IN6_IS_ADDR_LOOPBACK(&d->sin6_addr),
		      "IPv6: family %d dst_len %u", r->ai_family, r->ai_dst_len);
		CHECK(r->ai_src_len == sizeof(src6) && r->ai_src_addr != (struct sockaddr *)&src6 &&
			      !memcmp(r->ai_src_addr, &src6, sizeof(src6)),
		      "IPv6: the hints' source not copied (len %u)", r->ai_src_len);
		rdma_freeaddrinfo(r);
	}

	/* Neither node nor service: the hints are the answer. */
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(4791) };
	dst.sin_addr.s_addr = htonl(0x0a000002);
	memset(&h, 0, sizeof(h));
	h.ai_flags = RAI_NOROUTE;
	h.ai_family = AF_INET;
	h.ai_qp_type = IBV_QPT_RC;
	h.ai_port_space = RDMA_PS_IB;
	h.ai_dst_addr = (struct sockaddr *)&dst;
	h.ai_dst_len = sizeof(dst);
	r = NULL;
	ret = rdma_getaddrinfo(NULL, NULL, &h, &r);
	CHECK(ret == 0, "hints only: %d", ret);
	if (!ret) {
		CHECK(r->ai_flags == RAI_NOROUTE && r->ai_family == AF_INET && r->ai_qp_type == IBV_QPT_RC &&
			      r->ai_port_space == RDMA_PS_IB && is_in(r->ai_dst_addr, r->ai_dst_len, "10.0.0.2", 4791) &&
			      !r->ai_src_addr && plain(r),
		      "hints only: flags %#x ps %#x", r->ai_flags, r->ai_port_space);
		rdma_freeaddrinfo(r);
	}

	/* getaddrinfo's errors come back as its codes, for gai_strerror. */
	struct addrinfo gh = { .ai_flags = AI_NUMERICHOST }, *gai = NULL;
	int want = getaddrinfo("localhost", "7471", &gh, &gai);
	if (!want)
		freeaddrinfo(gai);
	memset(&h, 0, sizeof(h));
	h.ai_flags = RAI_NUMERICHOST;
	r = NULL;
	ret = rdma_getaddrinfo("localhost", "7471", &h, &r);
	CHECK(want != 0 && ret == want, "numeric host 'localhost': %d, getaddrinfo says %d", ret, want);
	struct addrinfo gh2 = { .ai_socktype = SOCK_DGRAM, .ai_protocol = IPPROTO_TCP };
	want = getaddrinfo("127.0.0.1", "7471", &gh2, &gai);
	if (!want)
		freeaddrinfo(gai);
	memset(&h, 0, sizeof(h));
	h.ai_qp_type = IBV_QPT_UD;
	h.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo("127.0.0.1", "7471", &h, &r);
	CHECK(want != 0 && ret == want, "UD on RDMA_PS_TCP: %d, getaddrinfo says %d", ret, want);

	/* -1 and errno. */
	errno = 0;
	ret = rdma_getaddrinfo(NULL, NULL, NULL, &r);
	CHECK(ret == -1 && errno == EINVAL, "no node, service, hints: %d errno %d", ret, errno);
	errno = 0;
	ret = rdma_getaddrinfo("127.0.0.1", "1", NULL, NULL);
	CHECK(ret == -1 && errno == EINVAL, "NULL res: %d errno %d", ret, errno);
	memset(&h, 0, sizeof(h));
	h.ai_src_len = sizeof(struct sockaddr_in);
	errno = 0;
	ret = rdma_getaddrinfo("127.0.0.1", "1", &h, &r);
	CHECK(ret == -1 && errno == EINVAL, "src_len without src_addr: %d errno %d", ret, errno);
	memset(&h, 0, sizeof(h));
	h.ai_dst_addr = (struct sockaddr *)&dst;
	h.ai_dst_len = 4096;
	errno = 0;
	ret = rdma_getaddrinfo(NULL, NULL, &h, &r);
	CHECK(ret == -1 && errno == EINVAL, "dst_len 4096: %d errno %d", ret, errno);

	/* AF_IB: not here. */
	memset(&h, 0, sizeof(h));
	h.ai_flags = RAI_FAMILY | RAI_NUMERICHOST;
	h.ai_family = AF_IB;
	errno = 0;
	ret = rdma_getaddrinfo("fe80::1", "1", &h, &r);
	CHECK(ret == -1 && errno == EINVAL, "AF_IB: %d errno %d", ret, errno);
	memset(&h, 0, sizeof(h));
	h.ai_family = AF_IB;
	errno = 0;
	ret = rdma_getaddrinfo(NULL, NULL, &h, &r);
	CHECK(ret == -1 && errno == EINVAL, "AF_IB hints only: %d errno %d", ret, errno);
	/* AF_IB without RAI_FAMILY on a lookup is any family, as in rdma-core. */
	memset(&h, 0, sizeof(h));
	h.ai_family = AF_IB;
	r = NULL;
	ret = rdma_getaddrinfo("127.0.0.1", "1", &h, &r);
	CHECK(ret == 0 && r && r->ai_family == AF_INET, "AF_IB without RAI_FAMILY: %d", ret);
	if (!ret)
		rdma_freeaddrinfo(r);

	rdma_freeaddrinfo(NULL);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	event_strs();
	rsockets();
	addrinfo();
	if (failures) {
		printf("rdmacm_local: %d checks failed\n", failures);
		return 1;
	}
	printf("rdmacm_local: ok\n");
	return 0;
}
