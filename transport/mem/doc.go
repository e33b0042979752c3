// Package mem holds a device's memory tables: protection domains, memory
// regions (MRs) and memory windows (MWs), and the checks every local and
// remote access goes through. It decides what a peer may read or write,
// through which key, and when that right ends.
//
// # Keys
//
// Keys have kernel rxe's layout, index<<8 | key byte. MR indices are
// 1..2^19 and MW indices 2^19+1..2^20, so a key says which table it names
// (IsMWKey is rxe's rkey_is_mw). The key byte is random at creation (and
// differs from the index's previous one); the consumer changes it with each
// REG_MR (WithKeyByte / NextKey: ib_update_fast_reg_key, ibv_inc_rkey) or
// BIND_MW. Every check compares all 32 bits. An MR's L_Key and R_Key are the
// same value, as in rxe; remote use still needs remote rights.
//
// # Objects and states
//
//	user MR (RegMR)       VALID from registration until DeregMR; ReregMR changes it in place
//	                      (RegMRSegments makes one over the pages of several backings)
//	fast-reg MR (AllocMR) FREE -REG_MR(FastReg)-> VALID -LOCAL_INV/SEND_WITH_INV-> FREE
//	MW type 1 (AllocMW)   VALID, unbound; BindMW binds, rebinds, or (length 0) unbinds it
//	MW type 2B (AllocMW)  FREE -BIND_MW WR-> VALID, bound to one QP -LOCAL_INV/SEND_WITH_INV/DetachQP-> FREE
//
// DeregMR, ReregMR and invalidation of an MR fail while windows are bound to
// it, so the MR under a bound window never changes. DeallocPD fails while
// the PD has MRs, MWs or holds (HoldPD, for QPs and the like).
//
// # Checks
//
// Table.Remote (responder) and Table.Local (SGEs) check, in order: the
// index names a live object and the key matches all 32 bits; it is VALID
// (and a window is bound); the PD is the QP's; a type 2B window is bound to
// this QP; the rights allow the operation; [va, va+length) lies inside the
// region or window with no integer overflow; an atomic is 8 bytes at an
// 8-byte-aligned address. Zero-length READ/WRITE skip the checks (C9-88), as
// do zero-length SGEs. Where rxe is lax, IBA rules: window accesses are held
// to the window (rxe checks only the MR), MR PD is checked on REG_MR,
// LOCAL_INV and BIND_MW, IOVA arithmetic cannot wrap, REG_MR rights follow
// the MR rules, and a 2B window is invalidated only through its QP.
//
// Every error is a *Error with an Op and an ErrKind; Error.Class gives the
// IBA consequence (which NAK, which completion status) as tabulated on
// Class. Errors are preallocated: failing lookups do not allocate.
//
// # Concurrency and lifetime
//
// Lookups take no lock. Each index has a permanent entry holding an
// atomically published, immutable snapshot of its registration; a lookup
// loads and checks the snapshot, then pins it with a reference count. A
// pinned snapshot keeps its memory (its Backing references) until
// Ref.Release, even if the consumer deregisters or invalidates the MR
// meanwhile; the Backing (e.g. a client's mapped memfd) is released only
// when the last snapshot using it drains. Writers serialise on a table mutex
// and a per-MR mutex (REG_MR and LOCAL_INV of different MRs do not contend
// with each other beyond their own entry).
//
// Every change publishes a new snapshot with the next generation number, so
// Ref.Changed tells cheaply whether the MR or window used by an unfinished
// message was changed under it (the engine counts that as
// mr_changed_under_unacked_wqe).
package mem
