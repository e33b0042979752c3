package mem

// inRange checks [va, va+length) ⊆ [base, base+size) without overflow and
// returns va's offset from base.
func inRange(base, size, va, length uint64) (uint64, bool) {
	if va < base || length > size {
		return 0, false
	}
	off := va - base
	if off > size-length {
		return 0, false
	}
	return off, true
}

// Remote resolves a responder's access: the rkey, VA and length of a RETH or
// AtomicETH, on QP qpn in protection domain pd, for one of RemoteRead,
// RemoteWrite, RemoteAtomic, FlushGlobal, FlushPersistent (access must be
// exactly the right the operation needs; ATOMIC_WRITE asks RemoteWrite, as
// rxe does).
//
// The checks, in order (rxe's, plus IBA's where rxe is lax): the key's index
// names a live MR or MW and all 32 bits match; the object is VALID (a window
// also bound); its PD is pd; a type 2B window is bound to qpn; the rights
// include access; [va, va+length) lies inside the region (or window) with
// no integer overflow; atomics are 8 bytes at an 8-byte-aligned address.
// A zero-based window or MR takes va as an offset from 0.
//
// A zero-length READ or WRITE does not look at rkey or va (C9-88) and
// yields the empty Ref. A zero-length FLUSH (placement type "MR") checks the
// key but not the range.
//
// On success the Ref pins the memory until Release. It does not allocate.
func (t *Table) Remote(pd PD, qpn uint32, rkey uint32, va, length uint64, access Access) (Ref, error) {
	if length == 0 && (access == RemoteRead || access == RemoteWrite) {
		return Ref{}, nil
	}
	if access == 0 || access&^RemoteAccess != 0 {
		return Ref{}, mkerr(OpRemote, KindInvalidArg)
	}
	if access&RemoteAtomic != 0 && length != 8 {
		return Ref{}, mkerr(OpRemote, KindInvalidArg)
	}
	write := access&(RemoteWrite|RemoteAtomic) != 0
	idx := KeyIndex(rkey)
	if idx >= MWIndexMin && idx <= MWIndexMax {
		return t.remoteMW(pd, qpn, rkey, va, length, access, write)
	}
	e := t.mrs.get(idx)
	if e == nil {
		return Ref{}, mkerr(OpRemote, KindNoObject)
	}
	for {
		s := e.snap.Load()
		if k := s.admit(rkey, pd, qpn, access, false); k != KindNone {
			return Ref{}, mkerr(OpRemote, k)
		}
		var off uint64
		if length != 0 || access&flushAccess == 0 {
			var ok bool
			if off, ok = inRange(s.iova, s.length, va, length); !ok {
				return Ref{}, mkerr(OpRemote, KindOutOfRange)
			}
		}
		if access&RemoteAtomic != 0 && va&7 != 0 {
			return Ref{}, mkerr(OpRemote, KindMisaligned)
		}
		if s.tryAcquire() {
			return Ref{s: s, reg: s.reg, base: off, iova: s.iova + off, n: length, op: OpRemote, write: write}, nil
		}
		// Retired between the load and the pin: judge its successor.
	}
}

// admit is the part of every lookup's checks that does not depend on the
// address, in the order the package comment gives: a live object under all
// 32 bits of key, VALID (a window also bound), in pd, a type 2B window bound
// to qpn, rights including access. It is small enough to be inlined, so a
// lookup stays one call; the address checks differ and stay with each.
// window is a constant at each call: an MR's lookup compiles without the
// window checks, which could not fail for an MR.
func (s *snap) admit(key uint32, pd PD, qpn uint32, access Access, window bool) ErrKind {
	switch {
	case s == nil || s.state == StateInvalid:
		return KindNoObject
	case s.key != key:
		return KindKeyMismatch
	case s.state != StateValid || window && s.parent == nil:
		return KindWrongState
	case s.pd != pd:
		return KindWrongPD
	case window && s.kind == ObjMW2B && s.qpn != qpn:
		return KindWrongQP
	case s.access&access != access:
		return KindAccessDenied
	}
	return KindNone
}

func (t *Table) remoteMW(pd PD, qpn, rkey uint32, va, length uint64, access Access, write bool) (Ref, error) {
	e := t.mws.get(KeyIndex(rkey))
	if e == nil {
		return Ref{}, mkerr(OpRemote, KindNoObject)
	}
	for {
		s := e.snap.Load()
		if k := s.admit(rkey, pd, qpn, access, true); k != KindNone {
			return Ref{}, mkerr(OpRemote, k)
		}
		// The window is [s.iova, s.iova+s.length) of its MR's IOVA space;
		// a zero-based window is addressed from 0. rxe checks only the MR's
		// range here, which lets a peer reach past the window: we check both.
		mr := s.parent
		var mrIova uint64
		if length != 0 || access&flushAccess == 0 {
			base := s.iova
			if s.access&ZeroBased != 0 {
				base = 0
			}
			off, ok := inRange(base, s.length, va, length)
			if !ok {
				return Ref{}, mkerr(OpRemote, KindOutOfRange)
			}
			mrIova = s.iova + off
		} else {
			mrIova = s.iova
		}
		if access&RemoteAtomic != 0 && mrIova&7 != 0 {
			return Ref{}, mkerr(OpRemote, KindMisaligned)
		}
		if s.tryAcquire() {
			// Bind keeps the window inside the MR and the MR cannot change
			// while a window is bound, so this offset is in the region.
			return Ref{s: s, reg: mr.reg, base: mrIova - mr.iova, iova: mrIova, n: length, op: OpRemote, write: write}, nil
		}
	}
}

// Local resolves an SGE: lkey, address and length, in the QP's protection
// domain, for reading (access 0: a send's gather list) or writing
// (LocalWrite: a receive's scatter list, READ response and atomic result
// targets). Only MR keys are lkeys. A zero-length SGE is not looked up (rxe
// copy_data) and yields the empty Ref. It does not allocate.
func (t *Table) Local(pd PD, lkey uint32, va, length uint64, access Access) (Ref, error) {
	if length == 0 {
		return Ref{}, nil
	}
	if access&^LocalWrite != 0 {
		return Ref{}, mkerr(OpLocal, KindInvalidArg)
	}
	e := t.mrs.get(KeyIndex(lkey))
	if e == nil {
		return Ref{}, mkerr(OpLocal, KindNoObject)
	}
	for {
		s := e.snap.Load()
		if k := s.admit(lkey, pd, 0, access, false); k != KindNone {
			return Ref{}, mkerr(OpLocal, k)
		}
		off, ok := inRange(s.iova, s.length, va, length)
		if !ok {
			return Ref{}, mkerr(OpLocal, KindOutOfRange)
		}
		if s.tryAcquire() {
			return Ref{s: s, reg: s.reg, base: off, iova: va, n: length, op: OpLocal, write: access&LocalWrite != 0}, nil
		}
	}
}
