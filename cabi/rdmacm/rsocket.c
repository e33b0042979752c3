/* rsocket.c: the rsocket calls of <rdma/rsocket.h>, rdma-core 44's 27 names.
 *
 * vrnicd's librdmacm has no rsockets. The names must still exist: Debian's
 * programs are linked BIND_NOW, and every rdmacm example (rping, ucmatose,
 * udaddy, mckey, cmtime) imports rpoll@RDMACM_1.0 because its do_poll()
 * waits on the CM event channel's descriptor through rpoll even when it
 * never makes an rsocket. So rpoll and rselect are poll(2) and select(2) on
 * ordinary descriptors (all a descriptor can be here), and every other call
 * fails with ENOSYS, saying why on stderr once per process, so that a
 * program built on rsockets (rstream, riostream, an LD_PRELOAD of
 * librspreload) stops with a reason rather than a bare errno. Nothing here
 * makes a descriptor, so there is none for rclose or the others to act on. */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/rsocket.h>

static atomic_bool rs_told;

/* rs_nosys reports the call to stderr the first time any rsocket call is
 * made, and fails with ENOSYS. write(2), not stdio: it touches no lock a
 * program's own stdio might hold, and the message goes out whole. */
static int rs_nosys(const char *call)
{
	if (!atomic_exchange(&rs_told, true)) {
		static const char why[] = ": vrnicd's librdmacm has no rsockets "
			"(every rsocket call fails with ENOSYS; rpoll and rselect "
			"work on ordinary descriptors); use the rdma_cm API\n";
		int saved = errno;
		char msg[256];
		size_t n = strlen(call);

		/* call is one of the names below, far shorter than msg. */
		memcpy(msg, call, n);
		memcpy(msg + n, why, sizeof(why) - 1);
		n += sizeof(why) - 1;
		/* Best effort: nowhere to report a failing stderr. */
		if (write(STDERR_FILENO, msg, n) < 0) {
		}
		errno = saved;
	}
	errno = ENOSYS;
	return -1;
}

int rsocket(int domain, int type, int protocol)
{
	return rs_nosys("rsocket");
}

int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return rs_nosys("rbind");
}

int rlisten(int socket, int backlog)
{
	return rs_nosys("rlisten");
}

int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return rs_nosys("raccept");
}

int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
	return rs_nosys("rconnect");
}

int rshutdown(int socket, int how)
{
	return rs_nosys("rshutdown");
}

int rclose(int socket)
{
	return rs_nosys("rclose");
}

ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
	return rs_nosys("rrecv");
}

ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
		  struct sockaddr *src_addr, socklen_t *addrlen)
{
	return rs_nosys("rrecvfrom");
}

ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
	return rs_nosys("rrecvmsg");
}

ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
	return rs_nosys("rsend");
}

ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
		const struct sockaddr *dest_addr, socklen_t addrlen)
{
	return rs_nosys("rsendto");
}

ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
	return rs_nosys("rsendmsg");
}

ssize_t rread(int socket, void *buf, size_t count)
{
	return rs_nosys("rread");
}

ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_nosys("rreadv");
}

ssize_t rwrite(int socket, const void *buf, size_t count)
{
	return rs_nosys("rwrite");
}

ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
	return rs_nosys("rwritev");
}

/* The examples' do_poll(): the event channel's fd (and, in cmtime, many
 * such fds) with a timeout. With no rsockets every descriptor is the
 * kernel's, so poll(2) answers exactly, EINTR and all. */
int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	return poll(fds, nfds, timeout);
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds,
	    fd_set *exceptfds, struct timeval *timeout)
{
	return select(nfds, readfds, writefds, exceptfds, timeout);
}

int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return rs_nosys("rgetpeername");
}

int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
	return rs_nosys("rgetsockname");
}

int rsetsockopt(int socket, int level, int optname,
		const void *optval, socklen_t optlen)
{
	return rs_nosys("rsetsockopt");
}

int rgetsockopt(int socket, int level, int optname,
		void *optval, socklen_t *optlen)
{
	return rs_nosys("rgetsockopt");
}

/* The variadic argument is not read: its type depends on cmd, and no cmd
 * is served. */
int rfcntl(int socket, int cmd, ...)
{
	return rs_nosys("rfcntl");
}

off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
	return rs_nosys("riomap");
}

int riounmap(int socket, void *buf, size_t len)
{
	return rs_nosys("riounmap");
}

/* size_t, as declared: rdma-core's failure is -1 converted, SIZE_MAX. */
size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
	return (size_t)rs_nosys("riowrite");
}
