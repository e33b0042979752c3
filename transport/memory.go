package transport

import "github.com/vrnic/vrnicd/transport/mem"

// Memory is the narrow view of the memory tables the engine uses: lookups
// for local SGEs and remote (rkey) accesses, and the local operations a send
// queue executes. *mem.Table provides it.
type Memory interface {
	// Local resolves an SGE: lkey must name an MR of pd covering
	// [va, va+length) with the given access.
	Local(pd mem.PD, lkey uint32, va, length uint64, access mem.Access) (mem.Ref, error)
	// Remote resolves an rkey access by the QP qpn of pd (MR, or MW: a
	// type 2B window only through the QP it is bound to).
	Remote(pd mem.PD, qpn, rkey uint32, va, length uint64, access mem.Access) (mem.Ref, error)
	// FastReg executes a REG_MR work request.
	FastReg(pd mem.PD, key uint32, pages []mem.Page, pageSize uint32, iova, length uint64, access mem.Access) error
	// LocalInvalidate executes a LOCAL_INV work request.
	LocalInvalidate(pd mem.PD, qpn, key uint32) error
	// BindMWWR executes a BIND_MW work request on behalf of QP qpn.
	BindMWWR(pd mem.PD, qpn, mwKey, mrKey uint32, addr, length uint64, access mem.Access) error
	// RemoteInvalidate executes the invalidation a SEND_WITH_INV asks for.
	RemoteInvalidate(pd mem.PD, qpn, rkey uint32) error
}
