/* ring.h: the client end of the shared-memory rings (verbsock/ring).
 * Indices run freely; each side publishes its own with a release store and
 * reads the other's with an acquire load. */
#ifndef VRN_RING_H
#define VRN_RING_H

#include <stdint.h>
#include <string.h>

#include "vrnic_abi.h"

static inline uint64_t *ring_u64(uint8_t *m, int off) { return (uint64_t *)(void *)(m + off); }
static inline uint32_t *ring_u32(uint8_t *m, int off) { return (uint32_t *)(void *)(m + off); }

static inline uint64_t ring_load_prod(uint8_t *m) { return __atomic_load_n(ring_u64(m, VRN_RING_OFF_PROD), __ATOMIC_ACQUIRE); }
static inline uint64_t ring_load_cons(uint8_t *m) { return __atomic_load_n(ring_u64(m, VRN_RING_OFF_CONS), __ATOMIC_ACQUIRE); }
static inline void ring_store_prod(uint8_t *m, uint64_t v) { __atomic_store_n(ring_u64(m, VRN_RING_OFF_PROD), v, __ATOMIC_RELEASE); }
static inline void ring_store_cons(uint8_t *m, uint64_t v) { __atomic_store_n(ring_u64(m, VRN_RING_OFF_CONS), v, __ATOMIC_RELEASE); }

static inline void ring_init_header(uint8_t *m, uint32_t kind, uint32_t entries, uint32_t esize)
{
	*ring_u32(m, VRN_RING_OFF_MAGIC) = VRN_RING_MAGIC;
	*ring_u32(m, VRN_RING_OFF_KIND) = kind;
	*ring_u32(m, VRN_RING_OFF_ENTRIES) = entries;
	*ring_u32(m, VRN_RING_OFF_ENTRY_SIZE) = esize;
}

/* ring_publish makes entries up to tail visible; it returns 1 when the
 * consumer said it sleeps (armed), and the caller must ring the doorbell.
 * The sequentially consistent exchange orders the producer store before
 * the armed load, as the consumer's arm-then-recheck needs. */
static inline int ring_publish(uint8_t *m, uint64_t tail)
{
	__atomic_store_n(ring_u64(m, VRN_RING_OFF_PROD), tail, __ATOMIC_SEQ_CST);
	uint32_t *armed = ring_u32(m, VRN_RING_OFF_ARMED);
	if (__atomic_load_n(armed, __ATOMIC_SEQ_CST) != 1)
		return 0;
	uint32_t one = 1;
	return __atomic_compare_exchange_n(armed, &one, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static inline uint32_t align_up(uint32_t n, uint32_t a) { return (n + a - 1) / a * a; }

static inline uint32_t ring_entries_for(uint32_t n)
{
	if (n > VRN_RING_MAX_ENTRIES)
		return 0;
	uint32_t e = 1;
	while (e < n)
		e <<= 1;
	return e;
}

static inline size_t ring_bytes(uint32_t entries, uint32_t esize, uint32_t page)
{
	size_t n = VRN_RING_HEADER_SIZE + (size_t)entries * esize;
	return (n + page - 1) / page * page;
}

static inline uint32_t sq_entry_size(uint32_t max_sge, uint32_t max_inline)
{
	return align_up(VRN_SQE_DESC_SIZE + VRN_SGE_SIZE * max_sge + align_up(max_inline, 16), 64);
}

static inline uint32_t rq_entry_size(uint32_t max_sge) { return align_up(VRN_RQE_DESC_SIZE + VRN_SGE_SIZE * max_sge, 64); }

static inline void put16(uint8_t *b, uint16_t v) { memcpy(b, &v, 2); }
static inline void put32(uint8_t *b, uint32_t v) { memcpy(b, &v, 4); }
static inline void put64(uint8_t *b, uint64_t v) { memcpy(b, &v, 8); }
static inline uint16_t get16(const uint8_t *b) { uint16_t v; memcpy(&v, b, 2); return v; }
static inline uint32_t get32(const uint8_t *b) { uint32_t v; memcpy(&v, b, 4); return v; }
static inline uint64_t get64(const uint8_t *b) { uint64_t v; memcpy(&v, b, 8); return v; }

#endif
