package mem

// userRegion builds the region of a user MR over b[offset:offset+length],
// taking a reference on b.
func userRegion(b Backing, offset, length uint64) (*region, ErrKind) {
	if b == nil {
		return nil, KindInvalidArg
	}
	mem := b.Bytes()
	if offset > uint64(len(mem)) || length > uint64(len(mem))-offset {
		return nil, KindOutOfRange
	}
	if !b.Acquire() {
		return nil, KindInvalidArg
	}
	r := &region{segs: [][]byte{mem[offset : offset+length : offset+length]}, backings: []Backing{b}}
	r.refs.Store(1)
	return r, KindNone
}

// checkTranslation validates an MR's IOVA range and rights against its
// backing.
func checkTranslation(b Backing, length, iova uint64, access Access) ErrKind {
	if length == 0 {
		return KindInvalidArg // ib_umem_get refuses empty regions
	}
	if length-1 > ^uint64(0)-iova {
		return KindOutOfRange // iova + length would pass 2^64
	}
	if access&ZeroBased != 0 && iova != 0 {
		return KindInvalidArg // a zero-based region starts at IOVA 0
	}
	if access&FlushPersistent != 0 && b != nil && !isPersistent(b) {
		return KindInvalidArg // rxe: "Page can't be persistent"
	}
	return KindNone
}

// RegMR registers length bytes of b starting at offset as an MR of pd whose
// first byte has IOVA iova (ibv_reg_mr_iova; a ZeroBased MR needs iova 0 and
// is addressed from 0). It returns the key, which is both the L_Key and the
// R_Key (as in rxe). REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE is
// EINVAL (ib_check_mr_access); ON_DEMAND is EOPNOTSUPP.
func (t *Table) RegMR(pd PD, b Backing, offset, length, iova uint64, access Access) (uint32, error) {
	access, k := checkMRAccess(access)
	if k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	if k := checkTranslation(b, length, iova, access); k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return 0, mkerr(OpVerb, KindNoObject)
	}
	reg, k := userRegion(b, offset, length)
	if k != KindNone {
		return 0, mkerr(OpVerb, k)
	}
	return t.createUserMR(p, pd, reg, access, iova, length)
}

// createUserMR enters a user MR over reg in pd's table, or releases reg
// when the table is full. Caller holds t.mu.
func (t *Table) createUserMR(p *pdInfo, pd PD, reg *region, access Access, iova, length uint64) (uint32, error) {
	key, ok := t.create(p, &snap{pd: pd, state: StateValid, kind: ObjUserMR,
		access: access, iova: iova, length: length, reg: reg})
	if !ok {
		reg.release()
		return 0, mkerr(OpVerb, KindNoSpace)
	}
	return key, nil
}

// lockMR locks the entry of the MR named by key's index (the key byte is not
// checked) and returns it with its snapshot, loaded under the lock so that
// no REG_MR or LOCAL_INV can replace it meanwhile. With KindNoObject (no
// live MR there) nothing is left locked.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) lockMR(key uint32) (*entry, *snap, ErrKind) {
	if !IsMRKey(key) {
		return nil, nil, KindNoObject
	}
	e := t.mrs.get(KeyIndex(key))
	if e == nil {
		return nil, nil, KindNoObject
	}
	e.mu.Lock()
	s := e.snap.Load()
	if s == nil || s.state == StateInvalid {
		e.mu.Unlock()
		return nil, nil, KindNoObject
	}
	return e, s, KindNone
}

// liveMR returns the entry and snapshot of the MR named by key's index in
// pd. Caller holds t.mu; the entry's mu is locked on success.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) liveMR(op Op, pd PD, key uint32) (*entry, *snap, error) {
	e, s, k := t.lockMR(key)
	if k == KindNone && s.pd != pd {
		e.mu.Unlock()
		k = KindWrongPD
	}
	if k != KindNone {
		return nil, nil, mkerr(op, k)
	}
	return e, s, nil
}

// DeregMR deregisters the MR named by key's index (the key byte is not
// checked: REG_MR may have changed it). EBUSY while memory windows are bound
// to it. Accesses already resolved keep their memory until Ref.Release.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) DeregMR(pd PD, key uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, s, err := t.liveMR(OpVerb, pd, key)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if e.numMW > 0 {
		return mkerr(OpVerb, KindBusy)
	}
	publish(e, &snap{gen: s.gen + 1, key: s.key, state: StateInvalid})
	t.mrIdx.free(KeyIndex(key))
	t.pds[pd].mrs--
	return nil
}

// ReregFlags say what ReregMR changes, with ibverbs' values
// (IBV_REREG_MR_CHANGE_*).
type ReregFlags uint32

const (
	ReregTranslation ReregFlags = 1 << 0 // new Backing, Offset, Length, IOVA
	ReregPD          ReregFlags = 1 << 1 // new PD
	ReregAccess      ReregFlags = 1 << 2 // new Access
)

// Rereg holds the new values for ReregMR; only the fields the flags name are
// used.
type Rereg struct {
	PD      PD
	Backing Backing
	Offset  uint64
	Length  uint64
	IOVA    uint64
	Access  Access
}

// ReregMR changes a user MR's translation, PD and/or rights in place
// (ibv_rereg_mr). The key stays the same (as in rxe); the generation
// changes, so resolved accesses see Changed. EBUSY while windows are bound
// (re-registration is a deregistration and a registration); EINVAL for a
// fast-reg MR, no flags or unknown flags.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) ReregMR(pd PD, key uint32, flags ReregFlags, nw Rereg) error {
	if flags == 0 || flags&^(ReregTranslation|ReregPD|ReregAccess) != 0 {
		return mkerr(OpVerb, KindInvalidArg)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, s, err := t.liveMR(OpVerb, pd, key)
	if err != nil {
		return err
	}
	defer e.mu.Unlock()
	if s.kind != ObjUserMR {
		return mkerr(OpVerb, KindWrongType)
	}
	if e.numMW > 0 {
		return mkerr(OpVerb, KindBusy)
	}
	next := &snap{gen: s.gen + 1, key: s.key, pd: s.pd, state: s.state, kind: s.kind,
		access: s.access, iova: s.iova, length: s.length, reg: s.reg}
	if flags&ReregAccess != 0 {
		a, k := checkMRAccess(nw.Access)
		if k != KindNone {
			return mkerr(OpVerb, k)
		}
		next.access = a
	}
	if flags&ReregPD != 0 {
		if t.pds[nw.PD] == nil {
			return mkerr(OpVerb, KindNoObject)
		}
		next.pd = nw.PD
	}
	if flags&ReregTranslation != 0 {
		next.iova, next.length = nw.IOVA, nw.Length
	}
	var chk Backing
	if flags&ReregTranslation != 0 {
		chk = nw.Backing
	} else if flags&ReregAccess != 0 && next.access&FlushPersistent != 0 && !s.reg.persistent() {
		return mkerr(OpVerb, KindInvalidArg) // rxe: "Page can't be persistent"
	}
	if k := checkTranslation(chk, next.length, next.iova, next.access); k != KindNone {
		return mkerr(OpVerb, k)
	}
	if flags&ReregTranslation != 0 {
		reg, k := userRegion(nw.Backing, nw.Offset, nw.Length)
		if k != KindNone {
			return mkerr(OpVerb, k)
		}
		next.reg = reg
	} else {
		s.reg.refs.Add(1) // shared with the old snapshot, which still holds one
	}
	publish(e, next)
	if next.pd != s.pd {
		t.pds[s.pd].mrs--
		t.pds[next.pd].mrs++
	}
	return nil
}

// AllocMR makes a fast-registration MR of pd (ib_alloc_mr with
// IB_MR_TYPE_MEM_REG) for page lists of up to maxPages. It starts FREE; REG_MR
// (FastReg) makes it VALID and LOCAL_INV or SEND_WITH_INV makes it FREE again.
func (t *Table) AllocMR(pd PD, maxPages int) (uint32, error) {
	if maxPages <= 0 || maxPages > t.cfg.MaxFastRegPages {
		return 0, mkerr(OpVerb, KindInvalidArg)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.pds[pd]
	if p == nil {
		return 0, mkerr(OpVerb, KindNoObject)
	}
	key, ok := t.create(p, &snap{pd: pd, state: StateFree, kind: ObjFastMR, maxPages: uint32(maxPages)})
	if !ok {
		return 0, mkerr(OpVerb, KindNoSpace)
	}
	return key, nil
}

// FastReg executes a REG_MR work request on a QP of pd: it maps the IOVA
// range [iova, iova+length) onto the page list (the first byte is at offset
// iova mod pageSize of pages[0], as in rxe) with the given rights, and makes
// the MR VALID under key. key is the full new key: its index names the MR
// (it must have come from AllocMR), its low byte is the new key byte
// (ib_update_fast_reg_key). The MR must be FREE and in pd. pageSize is a
// power of two from 8 bytes to 1 GiB. The rights follow the MR rules
// (REMOTE_WRITE/ATOMIC need LOCAL_WRITE; IBA, though rxe does not check).
// Errors are OpFastReg: the WR completes with LOC_QP_OP_ERR.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) FastReg(pd PD, key uint32, pages []Page, pageSize uint32, iova, length uint64, access Access) error {
	access, k := checkMRAccess(access)
	if k != KindNone {
		return mkerr(OpFastReg, k)
	}
	if pageSize < minPageSize || pageSize > maxPageSize || pageSize&(pageSize-1) != 0 ||
		len(pages) == 0 || len(pages) > t.cfg.MaxFastRegPages {
		return mkerr(OpFastReg, KindInvalidArg)
	}
	if k := checkTranslation(nil, length, iova, access); k != KindNone {
		return mkerr(OpFastReg, k)
	}
	ps := uint64(pageSize)
	if length > uint64(len(pages))*ps-(iova&(ps-1)) {
		return mkerr(OpFastReg, KindOutOfRange)
	}
	for _, pg := range pages {
		if pg.Backing == nil {
			return mkerr(OpFastReg, KindInvalidArg)
		}
		if n := uint64(len(pg.Backing.Bytes())); pg.Offset > n || ps > n-pg.Offset {
			return mkerr(OpFastReg, KindOutOfRange)
		}
		if access&FlushPersistent != 0 && !isPersistent(pg.Backing) {
			return mkerr(OpFastReg, KindInvalidArg)
		}
	}
	e, s, k := t.lockMR(key)
	if k != KindNone {
		return mkerr(OpFastReg, k)
	}
	defer e.mu.Unlock()
	switch {
	case s.kind != ObjFastMR:
		return mkerr(OpFastReg, KindWrongType)
	case s.pd != pd:
		return mkerr(OpFastReg, KindWrongPD)
	case s.state != StateFree:
		return mkerr(OpFastReg, KindWrongState)
	case len(pages) > int(s.maxPages):
		return mkerr(OpFastReg, KindInvalidArg)
	}
	reg := &region{segs: make([][]byte, len(pages)), first: iova & (ps - 1)}
	for ps>>reg.shift > 1 {
		reg.shift++
	}
	for i, pg := range pages {
		if i == 0 || pg.Backing != pages[i-1].Backing {
			if !pg.Backing.Acquire() {
				for _, b := range reg.backings {
					b.Release()
				}
				return mkerr(OpFastReg, KindInvalidArg)
			}
			reg.backings = append(reg.backings, pg.Backing)
		}
		reg.segs[i] = pg.Backing.Bytes()[pg.Offset : pg.Offset+ps : pg.Offset+ps]
	}
	reg.refs.Store(1)
	publish(e, &snap{gen: s.gen + 1, key: key, pd: pd, state: StateValid, kind: ObjFastMR,
		access: access, iova: iova, length: length, maxPages: s.maxPages, reg: reg})
	return nil
}

// invalidateMR makes a fast-reg MR FREE (LOCAL_INV / SEND_WITH_INV). The key
// must match all 32 bits; the MR must be in pd and have no windows bound.
// Invalidating a FREE MR with its current key succeeds and changes nothing,
// as in rxe.
// +checklocksignore: lockMR hands the entry's mu over locked only on success, which checklocks cannot follow.
func (t *Table) invalidateMR(op Op, pd PD, key uint32) error {
	e, s, k := t.lockMR(key)
	if k != KindNone {
		return mkerr(op, k)
	}
	defer e.mu.Unlock()
	switch {
	case s.key != key:
		return mkerr(op, KindKeyMismatch)
	case s.pd != pd:
		return mkerr(op, KindWrongPD)
	case s.kind != ObjFastMR:
		return mkerr(op, KindWrongType)
	case e.numMW > 0:
		return mkerr(op, KindBusy)
	case s.state == StateFree:
		return nil
	}
	publish(e, &snap{gen: s.gen + 1, key: key, pd: pd, state: StateFree, kind: ObjFastMR, maxPages: s.maxPages})
	return nil
}

// LocalInvalidate executes a LOCAL_INV work request posted on QP qpn of pd:
// a fast-reg MR becomes FREE, or a type 2B window bound to qpn is unbound
// (FREE). Type 1 windows cannot be invalidated (o10-37.2.26). Errors are
// OpLocalInvalidate: the WR completes with LOC_QP_OP_ERR.
func (t *Table) LocalInvalidate(pd PD, qpn uint32, key uint32) error {
	return t.invalidate(OpLocalInvalidate, pd, qpn, key)
}

// RemoteInvalidate executes the invalidation carried by a SEND_WITH_INV's
// IETH, received on QP qpn of pd; the rules are LocalInvalidate's. Errors are
// OpRemoteInvalidate (rxe class J: the receive completes with
// REM_INV_REQ_ERR and the QP goes to ERR).
func (t *Table) RemoteInvalidate(pd PD, qpn uint32, rkey uint32) error {
	return t.invalidate(OpRemoteInvalidate, pd, qpn, rkey)
}

func (t *Table) invalidate(op Op, pd PD, qpn, key uint32) error {
	switch {
	case IsMRKey(key):
		return t.invalidateMR(op, pd, key)
	case IsMWKey(key):
		return t.invalidateMW(op, pd, qpn, key)
	}
	return mkerr(op, KindNoObject)
}
