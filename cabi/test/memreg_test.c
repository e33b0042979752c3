/* memreg_test.c: the memory registry against every kind of memory programs
 * register. A second MAP_SHARED view of the returned fds stands in for the
 * daemon. Usage: memreg_test [--text-maps] [--bench] */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memreg.h"

#define PG 4096u
#define MAXP 16

static int case_failed;
#define CHECK(c)                                                                   \
	do {                                                                       \
		if (!(c)) {                                                        \
			printf("    check failed at line %d: %s\n", __LINE__, #c); \
			case_failed = 1;                                           \
			return;                                                    \
		}                                                                  \
	} while (0)

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)(seed + i * 7 + (i >> 12));
}

static int holds(const char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)(seed + i * 7 + (i >> 12)))
			return 0;
	return 1;
}

/* The daemon's view: every piece mapped MAP_SHARED from its fd, contiguously. */
static char *view_of(const struct vrn_seg_ref *r, int n, size_t *len)
{
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += r[i].len;
	char *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	for (int i = 0, off = 0; i < n; off += (int)r[i].len, i++)
		if (mmap(base + off, r[i].len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, r[i].fd,
			 (off_t)r[i].fd_offset) == MAP_FAILED)
			return NULL;
	*len = total;
	return base;
}

/* Pieces are consecutive, cover the page-rounded range and are sealed. */
static int covers(const struct vrn_seg_ref *r, int n, const void *p, size_t len)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(PG - 1), e = ((uintptr_t)p + len + PG - 1) & ~(uintptr_t)(PG - 1);
	for (int i = 0; i < n; i++) {
		int seals = fcntl(r[i].fd, F_GET_SEALS);
		if (r[i].addr != a || r[i].len % PG || r[i].fd_offset % PG ||
		    (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) != (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
			return 0;
		a += r[i].len;
	}
	return n > 0 && a == e;
}

/* Register buf, check contents and both directions through the view;
 * release, check the memory is private again with its contents. */
static void roundtrip(char *buf, size_t len, unsigned seed)
{
	struct vrn_seg_ref r[MAXP];
	int n, segs0 = vrn_memreg_segments();
	size_t vlen;
	fill(buf, len, seed);
	CHECK(vrn_memreg_acquire(buf, len, r, MAXP, &n) == 0);
	CHECK(holds(buf, len, seed));
	CHECK(covers(r, n, buf, len));
	char *v = view_of(r, n, &vlen), *vb = v + ((uintptr_t)buf - r[0].addr);
	CHECK(v && memcmp(vb, buf, len) == 0);
	vb[0] = (char)~vb[0];
	CHECK(buf[0] == vb[0]);
	buf[len - 1] ^= 0x55;
	CHECK(vb[len - 1] == buf[len - 1]);
	vb[0] = (char)~vb[0];
	buf[len - 1] ^= 0x55;
	vrn_memreg_release(r, n);
	CHECK(vrn_memreg_segments() == segs0);
	CHECK(holds(buf, len, seed));
	vb[len / 2] ^= 0x11; /* the daemon no longer reaches the memory */
	CHECK(holds(buf, len, seed));
	buf[len / 3] ^= 0x22;
	CHECK(vb[len / 3] != buf[len / 3]);
	buf[len / 3] ^= 0x22;
	munmap(v, vlen);
}

static void t_heap_small(void)
{
	char *a = malloc(1000), *b = malloc(1000), *c = malloc(1000);
	fill(a, 1000, 1);
	fill(c, 1000, 3);
	roundtrip(b, 1000, 2);
	CHECK(holds(a, 1000, 1) && holds(c, 1000, 3));
	memset(a, 9, 1000);
	free(a);
	free(b);
	free(c);
	a = malloc(50000);
	memset(a, 1, 50000);
	free(a);
}

static void t_heap_large(void)
{
	char *p = malloc(1 << 20);
	roundtrip(p, 1 << 20, 4);
	free(p);
}

static void t_memalign(void)
{
	void *p;
	CHECK(posix_memalign(&p, 65536, 65536) == 0);
	roundtrip(p, 65536, 5);
	free(p);
}

static void t_mmap(void)
{
	char *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	roundtrip(p + 100, 65000, 6);
	munmap(p, 65536);
}

static char bss_buf[10000];
static char data_buf[5000] = { 1, 2, 3 };
static char data_next[100] = { 7 };

static void t_static(void)
{
	roundtrip(bss_buf + 3, sizeof bss_buf - 3, 7);
	if (case_failed)
		return;
	roundtrip(data_buf, sizeof data_buf, 8);
	CHECK(data_next[0] == 7);
}

static void t_private_file(void)
{
	char path[] = "/tmp/memreg_test.XXXXXX", page[PG];
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	memset(page, 'F', PG);
	CHECK(write(fd, page, PG) == PG && write(fd, page, PG) == PG);
	char *p = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	CHECK(p != MAP_FAILED);
	roundtrip(p, 2 * PG, 9);
	CHECK(pread(fd, page, PG, 0) == PG && page[0] == 'F' && page[PG - 1] == 'F'); /* file untouched */
	munmap(p, 2 * PG);
	close(fd);
}

/* Grow the main stack first: a registered page at the bottom of [stack]
 * would stop its growth (a documented limit). */
static void __attribute__((noinline)) grow_stack(void)
{
	volatile char big[512 << 10];
	big[0] = 1;
	big[sizeof big - 1] = 1;
}

static void __attribute__((noinline)) t_own_stack(void)
{
	char arr[3 * PG + 100];
	roundtrip(arr + 1, sizeof arr - 1, 10);
	CHECK(holds(arr + 1, sizeof arr - 1, 10));
}

/* Wait until thread tid sleeps in syscall nr (then it writes nothing). */
static void wait_in_syscall(pid_t tid, long nr)
{
	char path[64], buf[128];
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
	for (;;) {
		int fd = open(path, O_RDONLY);
		ssize_t r = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
		close(fd);
		if (r > 0 && (buf[r] = 0, strtol(buf, NULL, 10) == nr))
			return;
		usleep(100);
	}
}

struct other {
	int to_thr[2], to_main[2];
	char *arr;
	pid_t tid;
	int ok;
};

static void *other_thread(void *arg)
{
	struct other *o = arg;
	char arr[20000], c;
	fill(arr, sizeof arr, 11);
	o->arr = arr;
	o->tid = (pid_t)syscall(SYS_gettid);
	c = 0;
	if (write(o->to_main[1], &c, 1) != 1 || read(o->to_thr[0], &c, 1) != 1) /* parked: main registers */
		return NULL;
	o->ok = arr[5000] == 'V' && holds(arr, 5000, 11);
	arr[7000] = 'T';
	if (write(o->to_main[1], &c, 1) != 1 || read(o->to_thr[0], &c, 1) != 1) /* main checks, releases */
		return NULL;
	o->ok = o->ok && arr[7000] == 'T' && arr[5000] == 'V' && holds(arr, 5000, 11);
	return NULL;
}

static void t_other_stack(void)
{
	struct other o = { .ok = 0 };
	struct vrn_seg_ref r[MAXP];
	pthread_t t;
	int n;
	size_t vlen;
	char c;
	CHECK(pipe(o.to_thr) == 0 && pipe(o.to_main) == 0);
	CHECK(pthread_create(&t, NULL, other_thread, &o) == 0);
	CHECK(read(o.to_main[0], &c, 1) == 1);
	wait_in_syscall(o.tid, SYS_read);
	CHECK(vrn_memreg_acquire(o.arr, 20000, r, MAXP, &n) == 0 && covers(r, n, o.arr, 20000));
	char *v = view_of(r, n, &vlen), *vb = v + ((uintptr_t)o.arr - r[0].addr);
	CHECK(v && holds(vb, 5000, 11));
	vb[5000] = 'V';
	CHECK(write(o.to_thr[1], &c, 1) == 1 && read(o.to_main[0], &c, 1) == 1);
	CHECK(vb[7000] == 'T');
	vrn_memreg_release(r, n);
	vb[7000] = 'X';
	CHECK(write(o.to_thr[1], &c, 1) == 1);
	pthread_join(t, NULL);
	CHECK(o.ok);
	munmap(v, vlen);
	close(o.to_thr[0]), close(o.to_thr[1]), close(o.to_main[0]), close(o.to_main[1]);
}

static void t_overlap(void)
{
	struct vrn_seg_ref a[MAXP], b[MAXP], c[MAXP];
	int na, nb, nc;
	size_t la, lb;
	char *p = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(p, 4 * PG, 12);
	CHECK(vrn_memreg_acquire(p, 2 * PG, a, MAXP, &na) == 0 && na == 1);
	CHECK(vrn_memreg_acquire(p + PG + 100, PG + 200, b, MAXP, &nb) == 0 && nb == 2);
	/* page 1 reuses a's segment, page 2 is new */
	CHECK(b[0].seg_id == a[0].seg_id && b[0].fd_offset == PG && b[0].len == PG);
	CHECK(b[1].seg_id != a[0].seg_id && b[1].addr == (uintptr_t)p + 2 * PG && b[1].len == PG);
	CHECK(vrn_memreg_segments() == 2 && holds(p, 4 * PG, 12));
	char *va = view_of(a, na, &la), *vb = view_of(b, nb, &lb);
	CHECK(va && vb);
	va[PG + 5] = 'A';
	CHECK(p[PG + 5] == 'A' && vb[5] == 'A');
	vb[PG + 6] = 'B';
	CHECK(p[2 * PG + 6] == 'B');
	p[PG + 7] = 'P';
	CHECK(va[PG + 7] == 'P' && vb[7] == 'P');
	/* all four pages: a's segment (one piece), b's new one, a new one; E2BIG first */
	CHECK(vrn_memreg_acquire(p, 4 * PG, c, 2, &nc) == E2BIG && vrn_memreg_segments() == 2);
	CHECK(vrn_memreg_acquire(p, 4 * PG, c, MAXP, &nc) == 0 && nc == 3);
	CHECK(c[0].seg_id == a[0].seg_id && c[0].len == 2 * PG && c[1].seg_id == b[1].seg_id);
	CHECK(vrn_memreg_segments() == 3);
	vrn_memreg_release(c, nc);
	CHECK(vrn_memreg_segments() == 2);
	vrn_memreg_release(a, na); /* b still holds a's segment: all of it stays shared */
	CHECK(vrn_memreg_segments() == 2);
	va[0] = 'a';
	CHECK(p[0] == 'a');
	vrn_memreg_release(b, nb);
	CHECK(vrn_memreg_segments() == 0);
	va[1] = 'x';
	vb[PG + 8] = 'y';
	CHECK(p[0] == 'a' && p[1] != 'x' && p[2 * PG + 8] != 'y' && p[2 * PG + 6] == 'B' && p[PG + 5] == 'A');
	munmap(va, la);
	munmap(vb, lb);
	munmap(p, 4 * PG);
}

/* Is [p, p+len) mapped MAP_SHARED (from a registry segment)? */
static int is_shared(const void *p)
{
	char line[512];
	uintptr_t a = (uintptr_t)p, s, e;
	char perms[5];
	FILE *f = fopen("/proc/self/maps", "r");
	int shared = -1;
	while (f && shared < 0 && fgets(line, sizeof line, f))
		if (sscanf(line, "%lx-%lx %4s", &s, &e, perms) == 3 && s <= a && a < e)
			shared = perms[3] == 's';
	if (f)
		fclose(f);
	return shared;
}

/* A remap that fails leaves every byte where it was and nothing shared:
 * inside a run (3 VMAs of different protection, the 2nd remap fails) and
 * after a whole run (a reused segment between two new ones). */
static void t_undo(void)
{
	struct vrn_seg_ref r[MAXP], m[MAXP];
	int n, nm;
	char *p = mmap(NULL, 5 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(p, 5 * PG, 16);
	mprotect(p + PG, PG, PROT_READ);
	vrn_memreg_fail_remap(2);
	int rc = vrn_memreg_acquire(p, 3 * PG, r, MAXP, &n);
	vrn_memreg_fail_remap(0);
	CHECK(rc == ENOMEM && n == 0);
	CHECK(holds(p, 5 * PG, 16) && vrn_memreg_segments() == 0);
	CHECK(is_shared(p) == 0 && is_shared(p + PG) == 0 && is_shared(p + 2 * PG) == 0);
	p[0] ^= 1; /* still writable, still private */
	p[0] ^= 1;
	CHECK(vrn_memreg_acquire(p + 3 * PG, PG, m, MAXP, &nm) == 0);
	vrn_memreg_fail_remap(4); /* run [0,3): 3 remaps, reused page 3, run [4,5): fails */
	rc = vrn_memreg_acquire(p, 5 * PG, r, MAXP, &n);
	vrn_memreg_fail_remap(0);
	CHECK(rc == ENOMEM);
	CHECK(holds(p, 5 * PG, 16) && vrn_memreg_segments() == 1 && is_shared(p) == 0 && is_shared(p + 3 * PG) == 1);
	CHECK(vrn_memreg_acquire(p, 5 * PG, r, MAXP, &n) == 0 && n == 3 && r[1].seg_id == m[0].seg_id);
	CHECK(holds(p, 5 * PG, 16) && is_shared(p) == 1 && is_shared(p + PG) == 1);
	vrn_memreg_release(m, nm);
	vrn_memreg_release(r, n);
	CHECK(holds(p, 5 * PG, 16) && vrn_memreg_segments() == 0 && is_shared(p + 3 * PG) == 0);
	munmap(p, 5 * PG);
}

static void t_fork(void)
{
	struct vrn_seg_ref r[MAXP];
	int n, st;
	size_t vlen;
	char *a = malloc(300), *b = malloc(100000), *c = malloc(300);
	memset(a, 'a', 300);
	memset(c, 'c', 300);
	fill(b, 100000, 13);
	CHECK(vrn_memreg_acquire(b, 100000, r, MAXP, &n) == 0);
	char *v = view_of(r, n, &vlen), *vb = v + ((uintptr_t)b - r[0].addr);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int bad = !holds(b, 100000, 13) || a[0] != 'a' || c[299] != 'c' || vrn_memreg_segments() != 0;
		memset(b, 'C', 1000);
		a[0] = 'C';
		bad |= vb[0] == 'C'; /* the child's writes do not reach the segment */
		char *x = malloc(200000);
		memset(x, 1, 200000);
		free(x);
		_exit(bad);
	}
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(holds(b, 100000, 13) && a[0] == 'a' && holds(vb, 100000, 13));
	vb[10] = 'D'; /* the parent's registration still works */
	CHECK(b[10] == 'D');
	b[20] = 'E';
	CHECK(vb[20] == 'E');
	vrn_memreg_release(r, n);
	munmap(v, vlen);
	free(a), free(b), free(c);
}

static void t_refused(void)
{
	struct vrn_seg_ref r[MAXP];
	int n, segs0 = vrn_memreg_segments();
	char *p = mmap(NULL, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(p, 3 * PG, 14);
	munmap(p + PG, PG);
	CHECK(vrn_memreg_acquire(p, 3 * PG, r, MAXP, &n) == EINVAL && n == 0);
	CHECK(vrn_memreg_acquire(p + PG + 10, 10, r, MAXP, &n) == EINVAL);
	CHECK(holds(p, PG, 14) && vrn_memreg_segments() == segs0);
	mprotect(p, PG, PROT_NONE);
	CHECK(vrn_memreg_acquire(p, 10, r, MAXP, &n) == EINVAL);
	munmap(p, 3 * PG);
	char path[] = "/tmp/memreg_test.XXXXXX";
	int fd = mkstemp(path);
	unlink(path);
	CHECK(fd >= 0 && ftruncate(fd, 2 * PG) == 0);
	char *f = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(f != MAP_FAILED && vrn_memreg_acquire(f, 100, r, MAXP, &n) == EINVAL);
	munmap(f, 2 * PG);
	close(fd);
	char *s = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(vrn_memreg_acquire(s, 100, r, MAXP, &n) == EINVAL);
	munmap(s, PG);
	fd = memfd_create("foreign", MFD_CLOEXEC);
	CHECK(fd >= 0 && ftruncate(fd, PG) == 0);
	s = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(vrn_memreg_acquire(s, 100, r, MAXP, &n) == EINVAL);
	munmap(s, PG);
	close(fd);
	CHECK(vrn_memreg_acquire(&n, 0, r, MAXP, &n) == 0 && n == 0);
	CHECK(vrn_memreg_segments() == segs0);
}

/* Two threads, each registering its own buffer and an overlapping part of a
 * shared one, 1000 times; the shared one is only read while others may be
 * registering it (concurrent writes there are a documented limit). */
static char *shared_buf;

static void *conc_thread(void *arg)
{
	intptr_t id = (intptr_t)arg;
	char *own;
	if (posix_memalign((void **)&own, PG, 3 * PG))
		return (void *)1;
	fill(own, 3 * PG, 20 + (unsigned)id);
	for (int i = 0; i < 1000; i++) {
		struct vrn_seg_ref r[MAXP], s[MAXP];
		int n, m;
		size_t vl;
		char *sp = shared_buf + (id ? 3 * PG / 2 : 0);
		if (vrn_memreg_acquire(own + 100, 2 * PG, r, MAXP, &n) ||
		    vrn_memreg_acquire(sp, 5 * PG / 2, s, MAXP, &m))
			return (void *)2;
		char *v = view_of(r, n, &vl), *vo = v + 100;
		if (!v || !covers(s, m, sp, 5 * PG / 2) || !holds(own, 3 * PG, 20 + (unsigned)id))
			return (void *)3;
		vo[i] = (char)~vo[i];
		own[i + 1] = (char)~own[i + 1];
		int ok = own[100 + i] == vo[i] && v[i + 1] == own[i + 1];
		vo[i] = (char)~vo[i];
		own[i + 1] = (char)~own[i + 1];
		vrn_memreg_release(r, n);
		munmap(v, vl);
		if (!ok || !holds(shared_buf, 4 * PG, 30))
			return (void *)4;
		vrn_memreg_release(s, m);
	}
	intptr_t bad = !holds(own, 3 * PG, 20 + (unsigned)id);
	free(own);
	return (void *)(5 * bad);
}

static void t_concurrent(void)
{
	pthread_t t[2];
	void *res[2];
	shared_buf = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	fill(shared_buf, 4 * PG, 30);
	for (intptr_t i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, conc_thread, (void *)i) == 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], &res[i]);
	CHECK(res[0] == NULL && res[1] == NULL);
	CHECK(vrn_memreg_segments() == 0 && holds(shared_buf, 4 * PG, 30));
	munmap(shared_buf, 4 * PG);
}

static const char *HP = "/proc/sys/vm/nr_hugepages";

static long read_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;
	if (f && fscanf(f, "%ld", &v) != 1)
		v = -1;
	if (f)
		fclose(f);
	return v;
}

static int write_long(const char *path, long v)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	int r = fprintf(f, "%ld\n", v) < 0;
	return fclose(f) || r ? -1 : 0;
}

static void check_huge(char *h, size_t H)
{
	struct vrn_seg_ref r[MAXP];
	int n;
	size_t vl;
	fill(h, H, 15);
	CHECK(vrn_memreg_acquire(h + 3 * PG, 100, r, MAXP, &n) == 0);
	CHECK(n == 1 && r[0].addr == (uintptr_t)h && r[0].len == H && holds(h, H, 15));
	char *v = view_of(r, n, &vl);
	CHECK(v);
	v[3 * PG] ^= 0x40;
	h[5] ^= 0x40;
	CHECK(h[3 * PG] == v[3 * PG] && v[5] == h[5]);
	v[3 * PG] ^= 0x40;
	h[5] ^= 0x40;
	vrn_memreg_release(r, n);
	CHECK(holds(h, H, 15));
	munmap(v, vl);
}

static int t_hugetlb(void)
{
	const size_t H = 2u << 20;
	long old = read_long(HP);
	if (old == 0 && write_long(HP, 2) != 0)
		return printf("skip hugetlb: cannot set %s (%s)\n", HP, strerror(errno)), 1;
	char *h = mmap(NULL, H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	if (h == MAP_FAILED) {
		printf("skip hugetlb: no 2 MiB page (%s)\n", strerror(errno));
		write_long(HP, old);
		return 1;
	}
	case_failed = 0;
	check_huge(h, H);
	munmap(h, H);
	write_long(HP, old);
	return 0;
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void bench_one(const char *what, char *buf, size_t len, int iters)
{
	struct vrn_seg_ref r[MAXP];
	int n;
	double acq = 0, rel = 0, t;
	static char dst[1 << 20];
	for (int i = 0; i < iters; i++) {
		t = now_us();
		if (vrn_memreg_acquire(buf, len, r, MAXP, &n))
			abort();
		acq += now_us() - t;
		t = now_us();
		vrn_memreg_release(r, n);
		rel += now_us() - t;
	}
	t = now_us();
	for (int i = 0; i < iters; i++) {
		memcpy(dst, buf, len);
		__asm__ volatile("" ::: "memory");
	}
	double cp = now_us() - t;
	printf("bench %-22s acquire %8.1f us  release %8.1f us  memcpy %7.2f us  (%d runs)\n", what, acq / iters,
	       rel / iters, cp / iters, iters);
}

static void __attribute__((noinline)) bench_stack(void)
{
	char arr[PG];
	memset(arr, 1, sizeof arr);
	bench_one("4 KiB on own stack", arr, sizeof arr, 300);
}

static void bench(void)
{
	char *p;
	if (posix_memalign((void **)&p, PG, 1 << 20))
		abort();
	memset(p, 1, 1 << 20);
	bench_one("4 KiB (new segment)", p, PG, 2000);
	bench_one("1 MiB (new segment)", p, 1 << 20, 100);
	struct vrn_seg_ref r[MAXP];
	int n;
	if (vrn_memreg_acquire(p, 1 << 20, r, MAXP, &n))
		abort();
	bench_one("4 KiB (reused)", p + PG, PG, 2000);
	bench_one("1 MiB (reused)", p, 1 << 20, 2000);
	vrn_memreg_release(r, n);
	bench_stack();
	free(p);
}

#define RUN(fn, name)                                                   \
	do {                                                            \
		case_failed = 0;                                        \
		fn();                                                   \
		printf("%s %s%s\n", case_failed ? "FAIL" : "ok  ", name, mode); \
		failed |= case_failed;                                  \
	} while (0)

int main(int argc, char **argv)
{
	const char *mode = "";
	int failed = 0, do_bench = 0;
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--text-maps") == 0) {
			vrn_memreg_force_text_maps(1);
			mode = " [text maps]";
		} else if (strcmp(argv[i], "--bench") == 0) {
			do_bench = 1;
		}
	}
	if (do_bench) {
		bench();
		return 0;
	}
	grow_stack();
	RUN(t_heap_small, "heap: malloc 1000 B with neighbours on the page");
	RUN(t_heap_large, "heap: malloc 1 MiB");
	RUN(t_memalign, "posix_memalign 64 KiB");
	RUN(t_mmap, "anonymous mmap 64 KiB");
	RUN(t_static, "static .bss and .data");
	RUN(t_private_file, "private file mapping");
	RUN(t_own_stack, "the caller's own stack array");
	RUN(t_other_stack, "another thread's stack");
	RUN(t_overlap, "overlapping registrations, reuse, E2BIG, last-reference release");
	RUN(t_undo, "a failing remap (inside a run, after a run) leaves memory intact and private");
	RUN(t_fork, "fork: child's own copy, parent's registration intact");
	RUN(t_refused, "refused: unmapped, PROT_NONE, MAP_SHARED file/anon/foreign memfd");
	RUN(t_concurrent, "concurrency: 2 threads x 1000 register/release, disjoint + overlapping");
	case_failed = 0;
	if (!t_hugetlb()) {
		printf("%s hugetlb: 4 KiB inside a 2 MiB page widens to it%s\n", case_failed ? "FAIL" : "ok  ", mode);
		failed |= case_failed;
	}
	return failed;
}
