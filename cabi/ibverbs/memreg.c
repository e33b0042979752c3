/* memreg.c: the process-wide memory registry (design and limits: memreg.h). */
#include "memreg.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef HUGETLBFS_MAGIC
#define HUGETLBFS_MAGIC 0x958458f6
#endif

/* PROCMAP_QUERY (Linux 6.11 <linux/fs.h>, declared here for older headers):
 * one VMA per ioctl on an open /proc/self/maps, instead of formatting the
 * whole file, which keeps a registration at tens of µs in big processes. */
struct vrn_procmap_query {
	uint64_t size, query_flags, query_addr;
	uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
	uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
	uint64_t vma_name_addr, build_id_addr;
};
_Static_assert(sizeof(struct vrn_procmap_query) == 104, "procmap_query is 104 bytes");
#define VRN_PROCMAP_QUERY _IOWR('f', 17, struct vrn_procmap_query)
enum { PQ_READ = 1, PQ_WRITE = 2, PQ_EXEC = 4, PQ_SHARED = 8, PQ_COVERING_OR_NEXT = 0x10 };

/* Our memfds are named so a VMA names its segment; dev+inode then confirm it
 * (a program could name a memfd alike). */
#define SEG_PREFIX "/memfd:vrnseg:"

struct vma {
	uintptr_t start, end;
	uint64_t off, ino;
	unsigned dmaj, dmin;
	size_t psize; /* KernelPageSize: > page size for hugetlb */
	int prot;
	bool shared, special;
	uint64_t segid; /* from SEG_PREFIX, 0 if not named so */
};
struct vvec {
	struct vma *v;
	int n, cap;
};

struct seg {
	uint64_t id;
	int fd;
	dev_t dev; /* dev+ino: which VMAs map it */
	ino_t ino;
	uintptr_t start; /* where it was created; detach and fork look there */
	size_t len;
	long refs;
};

/* A fork-time piece: kept in our own mmap'd array, not malloc'd memory, as
 * the child handler needs it before the registered pages (which may hold
 * malloc chunks) exist again in the child. */
struct fpiece {
	uintptr_t start;
	size_t len;
	int prot, fd;
	uint64_t off;
};

static struct {
	pthread_mutex_t mu;
	struct seg **v; /* sorted by id (ids only grow, so appends keep it sorted) */
	int n, cap;
	uint64_t next_id;
	int qfd; /* /proc/self/maps for PROCMAP_QUERY; -1 not open; -2 unsupported */
	bool text;
	size_t pg;
	struct fpiece *fp;
	int nfp, fpcap;
	int fail_map; /* tests: the n-th remap from now fails */
} R = { .mu = PTHREAD_MUTEX_INITIALIZER, .next_id = 1, .qfd = -1 };

static pthread_once_t once = PTHREAD_ONCE_INIT;

static uintptr_t min_u(uintptr_t a, uintptr_t b) { return a < b ? a : b; }
static uintptr_t max_u(uintptr_t a, uintptr_t b) { return a > b ? a : b; }

/* ---- VMA lookup ---- */

static int vv_push(struct vvec *vv, const struct vma *v)
{
	if (vv->n == vv->cap) {
		int cap = vv->cap ? 2 * vv->cap : 8;
		struct vma *p = realloc(vv->v, (size_t)cap * sizeof *p);
		if (!p)
			return ENOMEM;
		vv->v = p;
		vv->cap = cap;
	}
	vv->v[vv->n++] = *v;
	return 0;
}

static void classify(struct vma *v, const char *name)
{
	v->special = name[0] == '[' && name[1] == 'v'; /* [vdso] [vvar] [vsyscall] */
	v->segid = 0;
	if (strncmp(name, SEG_PREFIX, sizeof SEG_PREFIX - 1) == 0)
		v->segid = strtoull(name + sizeof SEG_PREFIX - 1, NULL, 10);
}

/* KernelPageSize of the VMA starting at start, from /proc/self/smaps. Only
 * the text path needs it, and only for VMAs that may be hugetlb: smaps walks
 * the page tables of every VMA it prints. */
static size_t smaps_pagesize(uintptr_t start)
{
	FILE *f = fopen("/proc/self/smaps", "re");
	char line[512];
	bool in = false;
	size_t ps = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f)) {
		uintptr_t s, e;
		unsigned long kb;
		if (!in) {
			in = sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &s, &e) == 2 && s == start;
		} else if (sscanf(line, "KernelPageSize: %lu kB", &kb) == 1) {
			ps = (size_t)kb << 10;
			break;
		}
	}
	fclose(f);
	return ps;
}

static int parse_line(char *line, struct vma *v)
{
	char perms[5];
	int name_at = 0;
	if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &v->start, &v->end,
		   perms, &v->off, &v->dmaj, &v->dmin, &v->ino, &name_at) < 7)
		return EIO;
	const char *name = line + name_at;
	v->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
		  (perms[2] == 'x' ? PROT_EXEC : 0);
	v->shared = perms[3] == 's';
	v->psize = R.pg;
	classify(v, name);
	struct statfs sf;
	if (!v->shared && (strncmp(name, "/anon_hugepage", 14) == 0 ||
			   (v->ino && name[0] == '/' && statfs(name, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC))) {
		size_t ps = smaps_pagesize(v->start);
		if (ps > v->psize)
			v->psize = ps;
	}
	return 0;
}

static int vmas_text(uintptr_t lo, uintptr_t hi, struct vvec *vv)
{
	char buf[8192];
	size_t have = 0;
	int err = 0;
	bool done = false;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	while (!done && !err) {
		ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return close(fd), errno;
		have += (size_t)r;
		buf[have] = 0;
		char *line = buf, *nl;
		while (!done && !err && (nl = memchr(line, '\n', (size_t)(buf + have - line)))) {
			struct vma v;
			*nl = 0;
			err = parse_line(line, &v);
			if (!err && v.start >= hi)
				done = true;
			else if (!err && v.end > lo)
				err = vv_push(vv, &v);
			line = nl + 1;
		}
		if (r == 0)
			break;
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
	}
	close(fd);
	return err;
}

/* Opens the query fd on first use; a kernel without PROCMAP_QUERY (ENOTTY)
 * or without /proc makes the text path permanent. */
static bool query_ok(void)
{
	if (R.qfd == -1) {
		struct vrn_procmap_query q = { .size = sizeof q, .query_flags = PQ_COVERING_OR_NEXT };
		R.qfd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		if (R.qfd >= 0 && ioctl(R.qfd, VRN_PROCMAP_QUERY, &q) != 0 && errno != ENOENT)
			close(R.qfd), R.qfd = -1;
		R.qfd = R.qfd < 0 ? -2 : R.qfd;
	}
	return !R.text && R.qfd >= 0;
}

static int vmas_query(uintptr_t lo, uintptr_t hi, struct vvec *vv)
{
	char name[PATH_MAX];
	for (uintptr_t a = lo; a < hi;) {
		struct vrn_procmap_query q = { .size = sizeof q, .query_flags = PQ_COVERING_OR_NEXT,
					       .query_addr = a, .vma_name_size = sizeof name,
					       .vma_name_addr = (uintptr_t)name };
		if (ioctl(R.qfd, VRN_PROCMAP_QUERY, &q) != 0)
			return errno == ENOENT ? 0 : errno;
		if (q.vma_start >= hi)
			break;
		if (!q.vma_name_size)
			name[0] = 0;
		struct vma v = { .start = q.vma_start, .end = q.vma_end, .off = q.vma_offset, .ino = q.inode,
				 .dmaj = q.dev_major, .dmin = q.dev_minor, .psize = q.vma_page_size,
				 .shared = q.vma_flags & PQ_SHARED };
		v.prot = (q.vma_flags & PQ_READ ? PROT_READ : 0) | (q.vma_flags & PQ_WRITE ? PROT_WRITE : 0) |
			 (q.vma_flags & PQ_EXEC ? PROT_EXEC : 0);
		if (v.psize < R.pg)
			v.psize = R.pg;
		classify(&v, name);
		int err = vv_push(vv, &v);
		if (err)
			return err;
		a = q.vma_end;
	}
	return 0;
}

/* The VMAs intersecting [lo, hi), in address order (holes are simply absent). */
static int vmas_get(uintptr_t lo, uintptr_t hi, struct vvec *vv)
{
	vv->n = 0;
	return query_ok() ? vmas_query(lo, hi, vv) : vmas_text(lo, hi, vv);
}

/* ---- segments ---- */

static struct seg **seg_slot(uint64_t id)
{
	int lo = 0, hi = R.n;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		if (R.v[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < R.n && R.v[lo]->id == id ? &R.v[lo] : NULL;
}

static bool maps_seg(const struct vma *v, const struct seg *g)
{
	return v->shared && v->ino == g->ino && major(g->dev) == v->dmaj && minor(g->dev) == v->dmin;
}

/* The live segment a shared VMA maps, or NULL when it is not ours. */
static struct seg *seg_of(const struct vma *v)
{
	struct seg **s = v->segid ? seg_slot(v->segid) : NULL;
	return s && maps_seg(v, *s) ? *s : NULL;
}

/* Make g's pages private again with their current contents: map the same
 * memfd MAP_PRIVATE over them (no copy, so no write is lost), then break
 * copy-on-write on the writable ones so later writes to the memfd (a late
 * daemon access) no longer show through, and punch the memfd's copy out so
 * the memory is not held twice. Pages the program moved or unmapped since
 * are not touched. */
static void seg_detach(struct seg *g)
{
	struct vvec vv = { 0 };
	if (vmas_get(g->start, g->start + g->len, &vv) == 0) {
		for (int i = 0; i < vv.n; i++) {
			const struct vma *v = &vv.v[i];
			if (!maps_seg(v, g))
				continue;
			uintptr_t s = max_u(v->start, g->start), e = min_u(v->end, g->start + g->len);
			uint64_t off = v->off + (s - v->start);
			if (mmap((void *)s, e - s, v->prot, MAP_PRIVATE | MAP_FIXED, g->fd, (off_t)off) == MAP_FAILED)
				continue;
			if ((v->prot & PROT_WRITE) && madvise((void *)s, e - s, MADV_POPULATE_WRITE) == 0)
				fallocate(g->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)(e - s));
		}
	}
	free(vv.v);
	close(g->fd);
}

/* ---- fork ---- */

static int fp_reserve(int need)
{
	if (need <= R.fpcap)
		return 0;
	int cap = R.fpcap ? 2 * R.fpcap : 64;
	if (cap < need)
		cap = need;
	size_t sz = ((size_t)cap * sizeof(struct fpiece) + R.pg - 1) & ~(R.pg - 1);
	void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return ENOMEM;
	if (R.fp) {
		memcpy(p, R.fp, (size_t)R.nfp * sizeof(struct fpiece));
		munmap(R.fp, ((size_t)R.fpcap * sizeof(struct fpiece) + R.pg - 1) & ~(R.pg - 1));
	}
	R.fp = p;
	R.fpcap = (int)(sz / sizeof(struct fpiece));
	return 0;
}

/* Parent, before fork: hold the registry, keep every segment's pages out of
 * the child (MADV_DONTFORK; otherwise MAP_SHARED is inherited and the
 * child's writes land in the parent), and note what the child must refill. */
static void fork_prepare(void)
{
	struct vvec vv = { 0 };
	pthread_mutex_lock(&R.mu);
	R.nfp = 0;
	for (int k = 0; k < R.n; k++) {
		struct seg *g = R.v[k];
		if (vmas_get(g->start, g->start + g->len, &vv) != 0)
			continue;
		for (int i = 0; i < vv.n; i++) {
			const struct vma *v = &vv.v[i];
			if (!maps_seg(v, g) || fp_reserve(R.nfp + 1) != 0)
				continue;
			uintptr_t s = max_u(v->start, g->start), e = min_u(v->end, g->start + g->len);
			if (madvise((void *)s, e - s, MADV_DONTFORK) == 0)
				R.fp[R.nfp++] = (struct fpiece){ s, e - s, v->prot, g->fd, v->off + (s - v->start) };
		}
	}
	free(vv.v);
}

static void fork_parent(void)
{
	for (int i = 0; i < R.nfp; i++)
		madvise((void *)R.fp[i].start, R.fp[i].len, MADV_DOFORK);
	R.nfp = 0;
	pthread_mutex_unlock(&R.mu);
}

/* Child: give it a private copy of every registered page first (nothing
 * malloc'd may be touched before: it may live on those pages), then forget
 * the segments: the child's contexts are the parent's, and dead. */
static void fork_child(void)
{
	for (int i = 0; i < R.nfp; i++) {
		const struct fpiece *p = &R.fp[i];
		if (mmap((void *)p->start, p->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0) == MAP_FAILED)
			continue;
		long r = 1;
		for (size_t d = 0; d < p->len && (r > 0 || (r < 0 && errno == EINTR)); d += r > 0 ? (size_t)r : 0)
			r = syscall(SYS_pread64, p->fd, (void *)(p->start + d), p->len - d, (off_t)(p->off + d));
		mprotect((void *)p->start, p->len, p->prot);
	}
	R.nfp = 0;
	for (int k = 0; k < R.n; k++) {
		close(R.v[k]->fd);
		free(R.v[k]);
	}
	R.n = 0;
	if (R.qfd >= 0)
		close(R.qfd); /* it reads the parent's address space */
	R.qfd = -1;
	pthread_mutex_unlock(&R.mu);
}

static void init_once(void)
{
	R.pg = (size_t)sysconf(_SC_PAGESIZE);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- acquire ---- */

/* A run of uncovered pages [start, end) spanning VMAs v0..v1: one new segment. */
struct run {
	uintptr_t start, end;
	int v0, v1, piece;
	struct seg *seg;
};

/* The kernel copies (a raw pwrite: sanitizers' pwrite checks the buffer,
 * which may hold their poisoned redzones). */
static int copy_in(int fd, uintptr_t a, size_t len)
{
	for (size_t off = 0; off < len;) {
		long r = syscall(SYS_pwrite64, fd, (const void *)(a + off), len - off, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EFAULT ? EINVAL : errno;
		if (r == 0)
			return EIO;
		off += (size_t)r;
	}
	return 0;
}

/* The window between copy and remap: writes to the pages being remapped are
 * lost in it, so this writes nothing but its own locals (runs and vv may
 * live on those pages). A failed mmap leaves the old mapping; pieces
 * already mapped hold the complete copy. */
static int exec_runs(const struct run *runs, int nruns, const struct vma *vv)
{
	int err = 0;
	for (int k = 0; k < nruns && !err; k++) {
		const struct run *r = &runs[k];
		err = copy_in(r->seg->fd, r->start, r->end - r->start);
		for (int i = r->v0; i <= r->v1 && !err; i++) {
			uintptr_t s = max_u(r->start, vv[i].start), e = min_u(r->end, vv[i].end);
			if (R.fail_map > 0 && --R.fail_map == 0) /* R.mu is held: a .so static */
				err = ENOMEM;
			else if (mmap((void *)s, e - s, vv[i].prot, MAP_SHARED | MAP_FIXED, r->seg->fd,
				      (off_t)(s - r->start)) == MAP_FAILED)
				err = errno;
		}
	}
	return err;
}

struct job {
	const struct run *runs;
	const struct vma *vv;
	int nruns;
	pid_t caller;
	_Atomic uint32_t word;
	int err;
};

/* Wait until the caller sleeps in its futex wait on word: from then on it
 * writes nothing to its stack until woken. pthread_join alone leaves a
 * window (the caller may still be on its way into the wait). */
static void await_parked(pid_t tid, uintptr_t word)
{
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
	for (int i = 0; i < 50000; i++) { /* ~1 s */
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		ssize_t r = read(fd, buf, sizeof buf - 1);
		close(fd);
		long nr;
		unsigned long a0;
		if (r > 0 && (buf[r] = 0, sscanf(buf, "%ld %lx", &nr, &a0) == 2) && nr == SYS_futex && a0 == word)
			return;
		struct timespec ts = { 0, i < 100 ? 0 : 20000 };
		nanosleep(&ts, NULL);
	}
	struct timespec ts = { 0, 2000000 }; /* no /proc/.../syscall: best effort */
	nanosleep(&ts, NULL);
}

static void *helper(void *arg)
{
	struct job *j = arg;
	await_parked(j->caller, (uintptr_t)&j->word);
	int err = exec_runs(j->runs, j->nruns, j->vv);
	j->err = err; /* the window is over: j's page is whole again */
	atomic_store_explicit(&j->word, 1, memory_order_release);
	syscall(SYS_futex, &j->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return NULL;
}

/* Copy and remap, on a helper thread when a run touches the caller's stack
 * (its own frames are on it); signals are blocked so no handler writes to
 * those pages in the window. */
static int exec(const struct run *runs, int nruns, const struct vma *vv, bool on_helper)
{
	sigset_t all, old;
	int err;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if (!on_helper) {
		err = exec_runs(runs, nruns, vv);
	} else {
		struct job j = { .runs = runs, .vv = vv, .nruns = nruns, .caller = gettid() };
		pthread_attr_t at;
		pthread_t t;
		pthread_attr_init(&at);
		pthread_attr_setstacksize(&at, 256 << 10);
		err = pthread_create(&t, &at, helper, &j);
		pthread_attr_destroy(&at);
		if (!err) {
			while (atomic_load_explicit(&j.word, memory_order_acquire) == 0)
				syscall(SYS_futex, &j.word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
			pthread_join(t, NULL);
			err = j.err;
		}
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

/* A new segment for run r: memfd, size, seals; no mapping yet. */
static int seg_new(struct run *r)
{
	char name[40];
	struct stat st;
	struct seg *g = calloc(1, sizeof *g);
	if (!g)
		return ENOMEM;
	g->id = R.next_id++;
	g->start = r->start;
	g->len = r->end - r->start;
	snprintf(name, sizeof name, "vrnseg:%" PRIu64, g->id);
	/* NOEXEC_SEAL (Linux 6.3) keeps vm.memfd_noexec=2 from refusing us and
	 * still allows PROT_EXEC mappings; older kernels reject the flag. */
	g->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (g->fd < 0 && errno == EINVAL)
		g->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (g->fd < 0 || ftruncate(g->fd, (off_t)g->len) != 0 ||
	    fcntl(g->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 || fstat(g->fd, &st) != 0) {
		int err = errno;
		if (g->fd >= 0)
			close(g->fd);
		free(g);
		return err;
	}
	g->dev = st.st_dev;
	g->ino = st.st_ino;
	r->seg = g;
	return 0;
}

/* Plan: the pieces out[] (reused segments filled in, new runs marked by a
 * zero seg_id) and the runs; nothing is changed yet. */
static int plan(uintptr_t lo, uintptr_t hi, struct vvec *vv, struct vrn_seg_ref *out, int max, int *np,
		struct run **runs, int *nruns)
{
	int err = vmas_get(lo, hi, vv), n = 0, nr = 0, cap = 0;
	if (err)
		return err;
	if (vv->n == 0)
		return EINVAL;
	/* hugetlb VMAs start and end on their huge pages, so widening stays inside */
	const struct vma *f = &vv->v[0], *l = &vv->v[vv->n - 1];
	if (f->start <= lo && f->psize > R.pg)
		lo &= ~(uintptr_t)(f->psize - 1);
	if (l->end >= hi && l->psize > R.pg)
		hi = (hi + l->psize - 1) & ~(uintptr_t)(l->psize - 1);
	uintptr_t pos = lo;
	for (int i = 0; i < vv->n; i++) {
		const struct vma *v = &vv->v[i];
		uintptr_t s = pos, e = min_u(hi, v->end);
		if (v->start > pos || !(v->prot & PROT_READ) || v->special)
			return EINVAL;
		if (v->shared) {
			/* Someone else's shared pages: a private copy would cut the
			 * program off from the file or process sharing them. */
			struct seg *g = seg_of(v);
			if (!g)
				return EINVAL;
			uint64_t off = v->off + (s - v->start);
			struct vrn_seg_ref *p = n ? &out[n - 1] : NULL;
			if (p && p->seg_id == g->id && p->addr + p->len == s && p->fd_offset + p->len == off) {
				p->len += e - s;
			} else if (n == max) {
				return E2BIG;
			} else {
				out[n++] = (struct vrn_seg_ref){ g->id, g->fd, off, s, e - s };
			}
		} else if (nr && (*runs)[nr - 1].end == s) {
			(*runs)[nr - 1].end = e;
			(*runs)[nr - 1].v1 = i;
			out[n - 1].len += e - s;
		} else {
			if (n == max)
				return E2BIG;
			if (nr == cap) {
				cap = cap ? 2 * cap : 4;
				struct run *p = realloc(*runs, (size_t)cap * sizeof *p);
				if (!p)
					return ENOMEM;
				*runs = p;
			}
			(*runs)[nr++] = (struct run){ .start = s, .end = e, .v0 = i, .v1 = i, .piece = n };
			out[n++] = (struct vrn_seg_ref){ 0, -1, 0, s, e - s };
		}
		pos = e;
		if (pos >= hi)
			break;
	}
	if (pos < hi)
		return EINVAL;
	*np = n;
	*nruns = nr;
	return 0;
}

/* Whether a run touches the VMA holding the caller's stack (conservative:
 * the whole VMA, which also covers coroutine stacks inside heap VMAs). */
static bool runs_touch_stack(const struct run *runs, int nruns)
{
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0) & ~(uintptr_t)(R.pg - 1);
	struct vvec vv = { 0 };
	bool touch = true; /* unknown: take the safe path */
	if (vmas_get(sp, sp + R.pg, &vv) == 0 && vv.n == 1) {
		touch = false;
		for (int k = 0; k < nruns; k++)
			if (runs[k].start < vv.v[0].end && runs[k].end > vv.v[0].start)
				touch = true;
	}
	free(vv.v);
	return touch;
}

int vrn_memreg_acquire(void *addr, size_t len, struct vrn_seg_ref *out, int max, int *n)
{
	pthread_once(&once, init_once);
	*n = 0;
	if (len == 0)
		return 0;
	uintptr_t a = (uintptr_t)addr, lo = a & ~(uintptr_t)(R.pg - 1), hi;
	if (a + len < a || a + len > UINTPTR_MAX - R.pg)
		return EINVAL;
	hi = (a + len + R.pg - 1) & ~(uintptr_t)(R.pg - 1);

	struct vvec vv = { 0 };
	struct run *runs = NULL;
	int np = 0, nruns = 0;
	pthread_mutex_lock(&R.mu);
	int err = plan(lo, hi, &vv, out, max, &np, &runs, &nruns);
	if (!err && R.n + nruns > R.cap) { /* room now: no failure after the remap */
		int cap = R.n + nruns > 2 * R.cap ? R.n + nruns : 2 * R.cap;
		struct seg **p = realloc(R.v, (size_t)cap * sizeof *p);
		err = p ? 0 : ENOMEM;
		R.v = p ? p : R.v;
		R.cap = p ? cap : R.cap;
	}
	for (int i = 0; !err && i < nruns; i++)
		err = seg_new(&runs[i]);
	if (!err && nruns)
		err = exec(runs, nruns, vv.v, runs_touch_stack(runs, nruns));
	if (err) {
		/* Undo: pages already remapped hold the complete copy and go back
		 * to private memory; seg_detach leaves other pages alone. */
		for (int i = 0; i < nruns; i++) {
			if (runs[i].seg)
				seg_detach(runs[i].seg);
			free(runs[i].seg);
		}
	} else {
		for (int i = 0; i < np; i++)
			if (out[i].seg_id)
				(*seg_slot(out[i].seg_id))->refs++;
		for (int i = 0; i < nruns; i++) {
			struct seg *g = runs[i].seg;
			g->refs = 1;
			R.v[R.n++] = g;
			out[runs[i].piece] = (struct vrn_seg_ref){ g->id, g->fd, 0, g->start, g->len };
		}
		*n = np;
	}
	pthread_mutex_unlock(&R.mu);
	free(runs);
	free(vv.v);
	return err;
}

void vrn_memreg_release(const struct vrn_seg_ref *refs, int n)
{
	pthread_mutex_lock(&R.mu);
	for (int i = 0; i < n; i++) {
		struct seg **s = seg_slot(refs[i].seg_id);
		if (!s || --(*s)->refs > 0)
			continue;
		struct seg *g = *s;
		int at = (int)(s - R.v);
		memmove(&R.v[at], &R.v[at + 1], (size_t)(R.n - at - 1) * sizeof *R.v);
		R.n--;
		seg_detach(g);
		free(g);
	}
	pthread_mutex_unlock(&R.mu);
}

int vrn_memreg_segments(void)
{
	pthread_mutex_lock(&R.mu);
	int n = R.n;
	pthread_mutex_unlock(&R.mu);
	return n;
}

void vrn_memreg_force_text_maps(int on)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&R.mu);
	R.text = on != 0;
	pthread_mutex_unlock(&R.mu);
}

void vrn_memreg_fail_remap(int nth)
{
	pthread_mutex_lock(&R.mu);
	R.fail_map = nth;
	pthread_mutex_unlock(&R.mu);
}
