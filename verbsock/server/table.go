package server

import "syscall"

// table is one kind of object a connection names by handle: how to find
// its map in a conn (read under c.mu, as cleanup swaps the maps) and, for
// kinds QPs hold, how many QPs still use one. The lookups, the busy check
// and the removal are written once here instead of once per kind.
type table[T any] struct {
	kind  string
	of    func(c *conn) map[uint32]*T
	users func(o *T) int // nil: no QP holds this kind
}

var (
	pdTable  = table[pdObj]{kind: "PD", of: func(c *conn) map[uint32]*pdObj { return c.pds }}
	memTable = table[memObj]{kind: "memory object", of: func(c *conn) map[uint32]*memObj { return c.mems }}
	cqTable  = table[cqObj]{kind: "CQ", of: func(c *conn) map[uint32]*cqObj { return c.cqs },
		users: func(o *cqObj) int { return o.users }}
	qpTable  = table[qpObj]{kind: "QP", of: func(c *conn) map[uint32]*qpObj { return c.qps }}
	srqTable = table[srqObj]{kind: "SRQ", of: func(c *conn) map[uint32]*srqObj { return c.srqs },
		users: func(o *srqObj) int { return o.users }}
)

// lookupLocked is the object h names, or ENOENT naming the kind. Caller
// holds c.mu.
func (t table[T]) lookupLocked(c *conn, h uint32) (*T, error) {
	o := t.of(c)[h]
	if o == nil {
		return nil, noObj(t.kind, h)
	}
	return o, nil
}

// lookup is lookupLocked under c.mu's read lock.
func (t table[T]) lookup(c *conn, h uint32) (*T, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return t.lookupLocked(c, h)
}

// remove takes h off the connection unless QPs still use its object
// (EBUSY); the caller then destroys what it returns.
func (t table[T]) remove(c *conn, h uint32) (*T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, err := t.lookupLocked(c, h)
	if err != nil {
		return nil, err
	}
	if t.users != nil {
		if n := t.users(o); n > 0 {
			return nil, errf(syscall.EBUSY, "%s %d is used by %d QPs", t.kind, h, n)
		}
	}
	delete(t.of(c), h)
	return o, nil
}
