/* addrinfo.c: rdma_getaddrinfo and rdma_freeaddrinfo, as rdma-core 44
 * answers on RoCE, where no ibacm daemon is ever asked for a route: node
 * and service go through getaddrinfo(3), the first answer becomes the one
 * rdma_addrinfo (ai_next is always NULL), and ai_route and ai_connect stay
 * NULL. Nothing here talks to vrnicd: an address needs no device, so a
 * program may resolve before the daemon is up, or without one.
 *
 * What callers see, as in rdma-core:
 *  - the hints map onto getaddrinfo's: RAI_PASSIVE -> AI_PASSIVE,
 *    RAI_NUMERICHOST -> AI_NUMERICHOST, ai_family as the family (AF_IB as
 *    AF_UNSPEC), ai_qp_type as the socket type (RC, UC, XRC -> stream, UD ->
 *    datagram), ai_port_space as the protocol (TCP -> TCP, UDP and IPoIB ->
 *    UDP, IB -> the socket type's);
 *  - the result's qp type and port space are the hints' when set, else
 *    derived from the answer (stream -> RC and RDMA_PS_TCP, datagram -> UD
 *    and RDMA_PS_UDP: so no hints give RC on RDMA_PS_TCP);
 *  - a passive lookup fills ai_src_addr and ai_flags = RAI_PASSIVE, an
 *    active one ai_dst_addr and ai_flags = 0; the hints' source address is
 *    copied when the lookup gave none (a client binding to a given address);
 *  - with neither node nor service the hints themselves are the answer
 *    (flags, family, qp type, port space, both addresses copied);
 *  - RAI_NOROUTE changes nothing without ibacm (it steers ibacm's route
 *    query), nor does RAI_FAMILY but with AF_IB (below);
 *  - failures: a getaddrinfo error is returned as is (EAI_*, negative, for
 *    gai_strerror: rping and the other examples print it so); anything else
 *    is -1 with errno (EINVAL for no node, service nor hints; ENOMEM);
 *    *res is left untouched on failure.
 * Differences, where rdma-core would crash or hand out AF_IB:
 *  - AF_IB is not supported (vrnicd is RoCE only, and its rdma_bind_addr
 *    could not take a sockaddr_ib): a request whose answer would carry it
 *    (RAI_FAMILY with AF_IB, or an AF_IB family or address the answer takes
 *    from the hints) fails with EINVAL; AF_IB without RAI_FAMILY on a lookup
 *    is AF_UNSPEC, as in rdma-core;
 *  - a NULL res, or a hints address with a length but no pointer or longer
 *    than any sockaddr, fails with EINVAL. */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>

#ifndef AF_IB
#define AF_IB 27 /* glibc >= 2.19 has it; its value is the kernel's */
#endif

static int fail(int err)
{
	errno = err;
	return -1;
}

/* A hints address is usable if it is absent (len 0) or present and no
 * longer than any sockaddr. */
static int addr_ok(const struct sockaddr *sa, socklen_t len)
{
	return len == 0 || (sa && len <= sizeof(struct sockaddr_storage));
}

static int is_af_ib(const struct sockaddr *sa, socklen_t len)
{
	return sa && len >= sizeof(sa_family_t) && sa->sa_family == AF_IB;
}

/* copy_addr gives the answer its own copy of a len-byte address, in a
 * zeroed buffer of at least a sockaddr_storage: a caller that copies "the
 * address" by sizeof(struct sockaddr_storage) or by its family's size
 * then reads no further than the allocation. */
static int copy_addr(struct sockaddr **dst, socklen_t *dst_len,
		     const struct sockaddr *src, socklen_t len)
{
	size_t size = len > sizeof(struct sockaddr_storage) ? len : sizeof(struct sockaddr_storage);
	struct sockaddr *sa = calloc(1, size);

	if (!sa)
		return fail(ENOMEM);
	memcpy(sa, src, len);
	*dst = sa;
	*dst_len = len;
	return 0;
}

/* to_gai_hints builds getaddrinfo's hints from the RDMA ones. */
static void to_gai_hints(struct addrinfo *ai, const struct rdma_addrinfo *h)
{
	memset(ai, 0, sizeof(*ai));
	if (h->ai_flags & RAI_PASSIVE)
		ai->ai_flags |= AI_PASSIVE;
	if (h->ai_flags & RAI_NUMERICHOST)
		ai->ai_flags |= AI_NUMERICHOST;
	ai->ai_family = h->ai_family == AF_IB ? AF_UNSPEC : h->ai_family;

	switch (h->ai_qp_type) {
	case IBV_QPT_RC:
	case IBV_QPT_UC:
	case IBV_QPT_XRC_SEND:
	case IBV_QPT_XRC_RECV:
		ai->ai_socktype = SOCK_STREAM;
		break;
	case IBV_QPT_UD:
		ai->ai_socktype = SOCK_DGRAM;
		break;
	default:
		break;
	}

	switch (h->ai_port_space) {
	case RDMA_PS_TCP:
		ai->ai_protocol = IPPROTO_TCP;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		ai->ai_protocol = IPPROTO_UDP;
		break;
	case RDMA_PS_IB:
		/* IB's port space carries either: the socket type decides. */
		if (ai->ai_socktype == SOCK_STREAM)
			ai->ai_protocol = IPPROTO_TCP;
		else if (ai->ai_socktype == SOCK_DGRAM)
			ai->ai_protocol = IPPROTO_UDP;
		break;
	default:
		break;
	}
}

/* lookup fills rai from getaddrinfo's first answer. h is NULL when the
 * caller gave no hints: getaddrinfo then gets none either (its defaults,
 * AI_V4MAPPED | AI_ADDRCONFIG, differ from zeroed hints). */
static int lookup(const char *node, const char *service,
		  const struct rdma_addrinfo *h, struct rdma_addrinfo *rai)
{
	struct addrinfo gh, *ai = NULL;
	int passive = h && (h->ai_flags & RAI_PASSIVE);
	int ret;

	if (h)
		to_gai_hints(&gh, h);
	ret = getaddrinfo(node, service, h ? &gh : NULL, &ai);
	if (ret)
		return ret;
	if (!ai)
		return EAI_NONAME; /* success without an answer: not glibc's, but be safe */

	if (h && h->ai_qp_type)
		rai->ai_qp_type = h->ai_qp_type;
	else if (ai->ai_socktype == SOCK_STREAM)
		rai->ai_qp_type = IBV_QPT_RC;
	else if (ai->ai_socktype == SOCK_DGRAM)
		rai->ai_qp_type = IBV_QPT_UD;

	if (h && h->ai_port_space)
		rai->ai_port_space = h->ai_port_space;
	else if (ai->ai_protocol == IPPROTO_TCP)
		rai->ai_port_space = RDMA_PS_TCP;
	else if (ai->ai_protocol == IPPROTO_UDP)
		rai->ai_port_space = RDMA_PS_UDP;

	rai->ai_family = ai->ai_family;
	rai->ai_flags = passive ? RAI_PASSIVE : 0;
	/* Only with AI_CANONNAME, which the hints never ask for; a failed
	 * copy just leaves the name out, as it is optional. */
	if (ai->ai_canonname) {
		char *name = strdup(ai->ai_canonname);
		if (passive)
			rai->ai_src_canonname = name;
		else
			rai->ai_dst_canonname = name;
	}
	if (ai->ai_addr && ai->ai_addrlen) {
		if (passive)
			ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
		else
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
	}
	freeaddrinfo(ai);
	return ret;
}

int rdma_getaddrinfo(const char *node, const char *service,
		     const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct rdma_addrinfo *rai;
	int ret = 0;

	if ((!node && !service && !hints) || !res)
		return fail(EINVAL);
	if (hints) {
		if (!addr_ok(hints->ai_src_addr, hints->ai_src_len) ||
		    !addr_ok(hints->ai_dst_addr, hints->ai_dst_len))
			return fail(EINVAL);
		/* rdma-core turns this lookup's answer into a sockaddr_ib. */
		if ((hints->ai_flags & RAI_FAMILY) && hints->ai_family == AF_IB)
			return fail(EINVAL);
	}

	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return fail(ENOMEM);

	if (node || service) {
		ret = lookup(node, service, hints, rai);
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len,
					hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints && hints->ai_src_len)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len,
				hints->ai_src_addr, hints->ai_src_len);
	/* AF_IB copied in from the hints (checked here, on the answer, as a
	 * hints address the answer does not take does no harm). */
	if (!ret && (rai->ai_family == AF_IB ||
		     is_af_ib(rai->ai_src_addr, rai->ai_src_len) ||
		     is_af_ib(rai->ai_dst_addr, rai->ai_dst_len)))
		ret = fail(EINVAL);
	if (ret) {
		/* EAI_SYSTEM's errno must survive the frees. */
		int saved = errno;
		rdma_freeaddrinfo(rai);
		errno = saved;
		return ret;
	}
	*res = rai;
	return 0;
}

/* Frees the whole list and everything an answer can hold, as rdma-core
 * does (ours are one long and hold no route or connect data). */
void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = next;
	}
}
