package mem

// AllocMW makes a memory window of pd. A type 1 window is VALID (and
// unbound) from the start and is bound with BindMW; a type 2B window starts
// FREE and is bound by a BIND_MW work request (BindMWWR) to one QP.
func (t *Table) AllocMW(pd PD, typ MWType) (uint32, error) {
	var kind ObjKind
	var state State
	switch typ {
	case MWType1:
		kind, state = ObjMW1, StateValid
	case MWType2B:
		kind, state = ObjMW2B, StateFree
	default:
		return 0, mkerr(OpVerb, KindInvalidArg)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return 0, mkerr(OpVerb, KindNoObject)
	}
	key, ok := t.create(p, &snap{pd: pd, state: state, kind: kind})
	if !ok {
		return 0, mkerr(OpVerb, KindNoSpace)
	}
	return key, nil
}

// liveMW returns the entry and snapshot of the window named by key's index.
// Caller holds t.mu (which orders every MW change).
func (t *Table) liveMW(op Op, key uint32) (*entry, *snap, error) {
	if !IsMWKey(key) {
		return nil, nil, mkerr(op, KindNoObject)
	}
	e := t.mws.get(KeyIndex(key))
	if e == nil {
		return nil, nil, mkerr(op, KindNoObject)
	}
	s := e.snap.Load()
	if s == nil || s.state == StateInvalid {
		return nil, nil, mkerr(op, KindNoObject)
	}
	return e, s, nil
}

// unbind forgets s's binding: its MR's window count and the QP map. The MR
// snapshot reference goes when s's last Ref does. Caller holds t.mu.
func (t *Table) unbind(s *snap) {
	if s.parent == nil {
		return
	}
	me := s.parent.ent
	me.mu.Lock()
	me.numMW--
	me.mu.Unlock()
	if s.kind == ObjMW2B {
		idx := KeyIndex(s.key)
		if m := t.qpMWs[s.qpn]; m != nil {
			delete(m, idx)
			if len(m) == 0 {
				delete(t.qpMWs, s.qpn)
			}
		}
	}
}

// DeallocMW frees the window named by key's index (the key byte is not
// checked), unbinding it first.
func (t *Table) DeallocMW(pd PD, key uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, s, err := t.liveMW(OpVerb, key)
	if err != nil {
		return err
	}
	if s.pd != pd {
		return mkerr(OpVerb, KindWrongPD)
	}
	t.unbind(s)
	publish(e, &snap{gen: s.gen + 1, key: s.key, state: StateInvalid, kind: s.kind})
	t.mwIdx.free(KeyIndex(key))
	t.pds[pd].mws--
	return nil
}

// BindMW binds a type 1 window (ibv_bind_mw). See BindMWWR for the
// arguments and rules; a type 2B window is refused here (KindWrongType).
func (t *Table) BindMW(pd PD, key, mrKey uint32, addr, length uint64, access Access) error {
	return t.bind(pd, 0, key, mrKey, addr, length, access, false)
}

// BindMWWR executes a BIND_MW work request posted on QP qpn of pd. key is
// the window's new full key: its index names the window, its low byte
// becomes the new key byte (only the low 8 bits of a WR's rkey are used, as
// in rxe). The window covers [addr, addr+length) of the MR named by mrKey
// (all 32 bits checked) with the given remote rights (REMOTE_READ,
// REMOTE_WRITE, REMOTE_ATOMIC, FLUSH_*, ZERO_BASED: then the peer addresses
// it from 0).
//
// Rules: window and MR in pd; the MR is VALID, not zero-based (rxe), and has
// MW_BIND (C10-73); a writable window (REMOTE_WRITE/ATOMIC) needs LOCAL_WRITE
// on the MR (C10-74); flush rights need the MR's; the range lies inside the
// MR (C10-75, for zero-based windows too). Type 1: not zero-based
// (o10-36.2.2); length 0 unbinds; a bound type 1 window may be rebound.
// Type 2B: must be FREE (o10-37.2.30), length > 0 (o10-37.2.40); it is bound
// to qpn and usable only through it. Errors are OpBindMW: the WR completes
// with MW_BIND_ERR.
func (t *Table) BindMWWR(pd PD, qpn uint32, key, mrKey uint32, addr, length uint64, access Access) error {
	return t.bind(pd, qpn, key, mrKey, addr, length, access, true)
}

// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) bind(pd PD, qpn, key, mrKey uint32, addr, length uint64, access Access, wr bool) error {
	const op = OpBindMW
	access &^= OptionalAccess
	if access&^mwAccessMask != 0 {
		return mkerr(op, KindInvalidArg)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, s, err := t.liveMW(op, key)
	if err != nil {
		return err
	}
	if s.pd != pd {
		return mkerr(op, KindWrongPD)
	}
	switch s.kind {
	case ObjMW1:
		if access&ZeroBased != 0 {
			return mkerr(op, KindInvalidArg)
		}
	case ObjMW2B:
		if !wr {
			return mkerr(op, KindWrongType)
		}
		if s.state != StateFree {
			return mkerr(op, KindWrongState)
		}
		if length == 0 {
			return mkerr(op, KindInvalidArg)
		}
	}
	if length == 0 { // type 1 unbind
		t.unbind(s)
		publish(e, &snap{gen: s.gen + 1, key: key, pd: pd, state: StateValid, kind: s.kind})
		return nil
	}
	me, ms, k := t.lockMR(mrKey)
	if k != KindNone {
		return mkerr(op, k)
	}
	switch {
	case ms.key != mrKey:
		k = KindKeyMismatch
	case ms.state != StateValid:
		k = KindWrongState
	case ms.pd != pd:
		k = KindWrongPD
	case ms.access&ZeroBased != 0:
		k = KindWrongType
	case ms.access&MWBind == 0:
		k = KindAccessDenied
	case access&writeAccess != 0 && ms.access&LocalWrite == 0:
		k = KindAccessDenied
	case access&flushAccess&^ms.access != 0:
		k = KindAccessDenied
	}
	if k == KindNone {
		if _, ok := inRange(ms.iova, ms.length, addr, length); !ok {
			k = KindOutOfRange
		}
	}
	if k != KindNone {
		me.mu.Unlock()
		return mkerr(op, k)
	}
	if s.parent != ms { // rebinding a type 1 window to the same MR keeps the count
		me.numMW++
	}
	ms.refs.Add(1) // the new window snapshot's; ms is published and locked, so not drained
	me.mu.Unlock()
	if s.parent != ms {
		t.unbind(s) // the old MR, if any, is another entry: the MR under a window cannot change
	}
	next := &snap{gen: s.gen + 1, key: key, pd: pd, state: StateValid, kind: s.kind,
		access: access, iova: addr, length: length, parent: ms}
	if s.kind == ObjMW2B {
		next.qpn = qpn
		m := t.qpMWs[qpn]
		if m == nil {
			m = make(map[uint32]struct{})
			t.qpMWs[qpn] = m
		}
		m[KeyIndex(key)] = struct{}{}
	}
	publish(e, next)
	return nil
}

// invalidateMW unbinds a type 2B window (LOCAL_INV, SEND_WITH_INV). The key
// must match all 32 bits, the window must be in pd, VALID and bound to qpn.
// rxe checks neither PD nor QP here; IBA associates a 2B window with its QP,
// and a peer on another connection must not be able to revoke it.
func (t *Table) invalidateMW(op Op, pd PD, qpn, key uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, s, err := t.liveMW(op, key)
	if err != nil {
		return err
	}
	switch {
	case s.key != key:
		return mkerr(op, KindKeyMismatch)
	case s.pd != pd:
		return mkerr(op, KindWrongPD)
	case s.kind != ObjMW2B:
		return mkerr(op, KindWrongType)
	case s.state != StateValid:
		return mkerr(op, KindWrongState)
	case s.qpn != qpn:
		return mkerr(op, KindWrongQP)
	}
	t.unbind(s)
	publish(e, &snap{gen: s.gen + 1, key: key, pd: pd, state: StateFree, kind: ObjMW2B})
	return nil
}

// DetachQP unbinds every type 2B window bound to qpn; call it when the QP is
// destroyed, so that a later QP reusing the number cannot use them. It
// returns how many were unbound.
func (t *Table) DetachQP(qpn uint32) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.qpMWs[qpn]
	n := 0
	for idx := range m {
		e := t.mws.get(idx)
		s := e.snap.Load()
		t.unbind(s)
		publish(e, &snap{gen: s.gen + 1, key: s.key, pd: s.pd, state: StateFree, kind: ObjMW2B})
		n++
	}
	return n
}
