/* memreg.h: the process-wide memory registry of the drop-in libibverbs.
 *
 * vrnicd can reach only memory that lives in sealed memfds it maps
 * (PROTOCOL.md §5), but programs register malloc'd, mmap'd, static and stack
 * memory. The registry makes a registered range memfd-backed in place
 * ("remap-on-register", libibverbs-abi.md §3.4): the current contents are
 * copied into a new memfd segment that is then mapped MAP_SHARED|MAP_FIXED
 * over the same virtual range with the same protection, so the program keeps
 * its pointers and the daemon maps the same pages.
 *
 * - Page-granular. Pages already backed by one of the registry's segments are
 *   reused (a reference more, no copy); only uncovered runs of pages get a new
 *   segment. Segments never merge or split, so an MR's (fd, fd_offset) stays
 *   valid for its life. A range inside a hugetlb VMA is widened to its huge
 *   pages (hugetlb VMAs split only at huge-page boundaries); the segment is
 *   ordinary 4 KiB shmem afterwards.
 * - Refused (EINVAL): shared mappings other than the registry's own segments
 *   (a MAP_SHARED file, a foreign memfd, MAP_SHARED|MAP_ANONYMOUS, SysV shm):
 *   replacing them with a private copy would silently cut the program off
 *   from the file or the other processes that share the pages. Also refused:
 *   unmapped or unreadable pages and the kernel's [vdso]/[vvar] pages.
 * - The copy and remap run on a helper thread when the range touches the
 *   calling thread's stack (the stack holds the registering call's own
 *   frames: remapping it inline reverts them to the snapshot and crashes);
 *   the caller stays parked in a futex wait, with signals blocked, until the
 *   remap is done. Other ranges are remapped inline (a thread less per call).
 * - Release: a segment whose last reference goes is detached by mapping the
 *   same memfd MAP_PRIVATE over its pages (no copy, so no lost update), then
 *   its writable pages are faulted private (MADV_POPULATE_WRITE: the kernel's
 *   copy-on-write, atomic against other writers) so later writes to the memfd
 *   no longer show through, and the memfd's pages are punched out so the
 *   memory is not held twice.
 * - fork (pthread_atfork, installed on first use): the child gets its own
 *   private copy of every segment's pages, the parent's registrations stay
 *   intact; the child's registry is empty (its contexts are the parent's and
 *   dead, see the reference §3.4).
 *
 * Limits:
 * - Writes by other threads (or by signal handlers on other threads) to pages
 *   being newly registered, between the copy and the remap, are lost
 *   (measured in the reference §3.1). Pages already backed are not copied.
 * - A registered stack page + fork() is unsupported (parent and child would
 *   run on the same page; with the fork handlers the child's copy of the page
 *   is made after fork returns). A registered page at the bottom of the main
 *   thread's [stack] VMA stops that stack from growing.
 * - A child forked after a thread registered memory on the first page of its
 *   malloc arena (where glibc keeps the arena's malloc_state) dies with
 *   SIGSEGV in glibc's fork code, which resets every arena's lock in the
 *   child before any fork handler runs and finds the page kept out of the
 *   child (measured). GLIBC_TUNABLES=glibc.malloc.arena_max=1 keeps every
 *   malloc state in libc's own data and avoids it. Inheriting such pages
 *   instead would let that reset write into the parent's live arena.
 * - The child's copy of registered pages is read from the memfd in the
 *   child's fork handler, so parent threads writing them during the fork may
 *   or may not be seen; _Fork(), vfork() and raw clone() run no fork
 *   handlers and share the registered pages with the child.
 * - MADV_DONTNEED/MADV_FREE on a registered range does not zero-fill (the
 *   pages are shmem); mlock, MADV_DONTFORK/WIPEONFORK and a main-stack
 *   VM_GROWSDOWN on the remapped pages are not carried over.
 * - Each segment is at least one VMA and splits its neighbours:
 *   vm.max_map_count (65530 by default) bounds the number of segments;
 *   hitting it fails the acquire with ENOMEM, memory intact.
 * - One copy per newly backed page on acquire, and one kernel copy-on-write
 *   of its writable pages on the last release.
 * - Read-only pages keep reading the (closed) memfd after release.
 */
#ifndef VRN_MEMREG_H
#define VRN_MEMREG_H

#include <stddef.h>
#include <stdint.h>

struct vrn_seg_ref {
	uint64_t seg_id;    /* the segment; unique for the process's life */
	int fd;             /* its memfd, owned by the registry */
	uint64_t fd_offset; /* offset of addr in that memfd (page-aligned) */
	uintptr_t addr;     /* page-aligned start of this piece */
	size_t len;         /* page multiple */
};

/* Make [addr, addr+len) backed by sealed memfd segments and describe it:
 * out[0..*n) are the consecutive pieces covering the page-rounded (or
 * huge-page-rounded) range, in address order. One reference is taken per
 * piece; fd stays valid until the release that drops its segment's last
 * reference. len 0 gives *n = 0 and takes nothing.
 * Returns 0 or an errno: EINVAL (a shared mapping not the registry's, or a
 * range not wholly mapped and readable), ENOMEM, E2BIG (more than max
 * pieces; nothing changed), or what memfd_create/mmap reported. On any error
 * the memory is intact and no reference is held. */
int vrn_memreg_acquire(void *addr, size_t len, struct vrn_seg_ref *out, int max, int *n);

/* Drop the references taken by one acquire (refs as it returned them). */
void vrn_memreg_release(const struct vrn_seg_ref *refs, int n);

/* Diagnostics and tests: the number of live segments. */
int vrn_memreg_segments(void);

/* Tests: read VMAs from the text of /proc/self/maps (+ smaps for hugetlb
 * page sizes) instead of the PROCMAP_QUERY ioctl (Linux 6.11+), the path
 * older kernels take. */
void vrn_memreg_force_text_maps(int on);

/* Tests: the nth remap from now fails with ENOMEM (0: none), to exercise
 * the undo path. */
void vrn_memreg_fail_remap(int nth);

#endif
