package server

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/vrnic/vrnicd/transport"
	"github.com/vrnic/vrnicd/transport/mem"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/ring"
	"golang.org/x/sys/unix"
)

// Per-connection quotas alone multiply with connections, so every object a
// connection holds is also charged to its peer's uid (SO_PEERCRED, which the
// kernel fills in at connect: a client cannot choose it, not even from a
// user namespace), against UserLimits; and connections are bounded per uid
// and in total, and must say hello within HelloTimeout.

// resource is what an account counts.
type resource int

const (
	resPD resource = iota
	resCQ
	resQP
	resSRQ
	resMR
	resMW
	resAH
	resMem
	resMemBytes // mapped memfds plus the daemon's private per-QP and per-SRQ memory
	resMRBytes
	resMcast // QP attachments to multicast groups and rdma_cm joins
	nRes
)

var resName = [nRes]string{"PDs", "CQs", "QPs", "SRQs", "MRs", "MWs", "AHs", "memory objects",
	"bytes of daemon memory (mapped and per-QP)", "bytes registered", "multicast memberships"}

func limitsArray(l *verbsock.Limits) [nRes]uint64 {
	return [nRes]uint64{uint64(l.MaxPD), uint64(l.MaxCQ), uint64(l.MaxQP), uint64(l.MaxSRQ), uint64(l.MaxMR),
		uint64(l.MaxMW), uint64(l.MaxAH), uint64(l.MaxMem), l.MaxMemBytes, l.MaxMRBytes, uint64(l.MaxMcast)}
}

// DefaultUserLimits are what all connections of one uid may hold together
// when Config.UserLimits is zero: four connections' worth of objects, two
// of memory. Each is further held below half of the device's table
// (userShare), so that one user cannot fill a device-wide table.
var DefaultUserLimits = verbsock.Limits{
	MaxPD: 256, MaxCQ: 1024, MaxQP: 1024, MaxSRQ: 256, MaxMR: 16384, MaxMW: 16384, MaxAH: 16384, MaxMem: 16384,
	MaxMemBytes: 8 << 30, MaxMRBytes: 8 << 30, MaxMcast: 1024,
}

// Connection defaults (Config.MaxConns, MaxConnsPerUser, HelloTimeout).
const (
	DefaultMaxConns        = 1024
	DefaultMaxConnsPerUser = 64
	DefaultHelloTimeout    = 5 * time.Second
	// maxRefusing bounds the refused connections being answered at once;
	// past it a refused connection is closed without an answer.
	maxRefusing = 64
)

// userShare is the share of a device table one uid may hold: 1/2.
func userShare(n int) uint64 { return uint64(max(n/2, 1)) }

// userLimits fills zero fields of l with DefaultUserLimits and holds each
// below its share of the device's tables.
func userLimits(l verbsock.Limits, a deviceTables) [nRes]uint64 {
	u := limitsArray(&l)
	d := limitsArray(&DefaultUserLimits)
	for i := range u {
		if u[i] == 0 {
			u[i] = d[i]
		}
	}
	caps := map[resource]int{resPD: a.MaxPD, resCQ: a.MaxCQ, resQP: a.MaxQP, resSRQ: a.MaxSRQ, resMR: a.MaxMR,
		resMW: a.MaxMW, resAH: a.MaxAH, resMcast: a.MaxMcastGrp}
	for r, n := range caps {
		if n > 0 {
			u[r] = min(u[r], userShare(n))
		}
	}
	return u
}

type deviceTables struct{ MaxPD, MaxCQ, MaxQP, MaxSRQ, MaxMR, MaxMW, MaxAH, MaxMcastGrp int }

// account is one uid's usage, shared by its connections.
type account struct {
	uid   uint32
	conns int // under Server.mu
	mu    sync.Mutex
	used  [nRes]uint64
}

func (a *account) take(r resource, n, limit uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n > limit || a.used[r] > limit-n {
		return false
	}
	a.used[r] += n
	return true
}

func (a *account) give(r resource, n uint64) {
	a.mu.Lock()
	a.used[r] -= min(n, a.used[r])
	a.mu.Unlock()
}

func (a *account) idle() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conns == 0 && a.used == [nRes]uint64{}
}

// objectKinds name the counted resources for Objects, as the metrics
// label them.
var objectKinds = [nRes]string{"pd", "cq", "qp", "srq", "mr", "mw", "ah", "mem", "mapped_bytes", "registered_bytes", "mcast"}

// Objects calls yield with what all clients hold now, by kind (PDs, CQs,
// QPs, SRQs, MRs, MWs, AHs, memory objects, and the bytes of daemon memory
// and of registrations they cost): the sum of every user's account.
func (s *Server) Objects(yield func(kind string, n uint64)) {
	var sum [nRes]uint64
	s.mu.Lock()
	for _, a := range s.users {
		a.mu.Lock()
		for i, v := range a.used {
			sum[i] += v
		}
		a.mu.Unlock()
	}
	s.mu.Unlock()
	for i, v := range sum {
		yield(objectKinds[i], v)
	}
}

// Used is what the connections of uid hold now (for tests and tools): the
// same fields as Limits.
func (s *Server) Used(uid uint32) verbsock.Limits {
	s.mu.Lock()
	a := s.users[uid]
	s.mu.Unlock()
	if a == nil {
		return verbsock.Limits{}
	}
	a.mu.Lock()
	u := a.used
	a.mu.Unlock()
	return limitsOf(u)
}

// limitsOf is the inverse of limitsArray: counts by resource as Limits'
// fields.
func limitsOf(u [nRes]uint64) verbsock.Limits {
	return verbsock.Limits{MaxPD: uint32(u[resPD]), MaxCQ: uint32(u[resCQ]), MaxQP: uint32(u[resQP]),
		MaxSRQ: uint32(u[resSRQ]), MaxMR: uint32(u[resMR]), MaxMW: uint32(u[resMW]), MaxAH: uint32(u[resAH]),
		MaxMem: uint32(u[resMem]), MaxMemBytes: u[resMemBytes], MaxMRBytes: u[resMRBytes], MaxMcast: uint32(u[resMcast])}
}

// charge counts n of r against the connection's uid (the per-connection
// quota is checked by the caller). held keeps what the connection took,
// given back at cleanup; bytes of memory are given back at unmap instead.
func (c *conn) charge(r resource, n uint64) error {
	if !c.acct.take(r, n, c.s.userLim[r]) {
		return errf(syscall.EDQUOT, "limit of uid %d reached: %d %s across its connections", c.acct.uid,
			c.s.userLim[r], resName[r])
	}
	if r != resMemBytes {
		c.held[r].Add(n)
	}
	return nil
}

func (c *conn) uncharge(r resource, n uint64) {
	c.acct.give(r, n)
	if r != resMemBytes {
		c.held[r].Add(-n)
	}
}

// releaseHeld gives back, at cleanup, every object the connection held.
func (c *conn) releaseHeld() {
	for r := range nRes {
		if r != resMemBytes {
			c.acct.give(r, c.held[r].Swap(0))
		}
	}
}

// chargeBytes counts n bytes of daemon memory against the connection's
// MaxMemBytes and its uid's.
func (c *conn) chargeBytes(n int64) error {
	lim := int64(c.s.limits.MaxMemBytes)
	if c.memBytes.Add(n) > lim {
		c.memBytes.Add(-n)
		return quota(resName[resMemBytes], uint64(lim))
	}
	if err := c.charge(resMemBytes, uint64(n)); err != nil {
		c.memBytes.Add(-n)
		return err
	}
	return nil
}

func (c *conn) unchargeBytes(n int64) {
	c.memBytes.Add(-n)
	c.uncharge(resMemBytes, uint64(n))
}

// qpOverhead is what any QP costs the daemon beside its WQE rings: its
// share of the worker's inbound queue (nic inQueue, 2048 packet pointers),
// its doorbell in the worker's wait set, and slack.
const qpOverhead = 64 << 10

// regMRBytes is what the page list of a REG_MR of up to maxPages pages
// holds in the daemon: a fast-reg MR keeps its last one, and an SQ slot
// keeps the WR it last carried, page list and all, until it is reused.
func regMRBytes(maxPages int) int64 {
	return int64(maxPages)*int64(unsafe.Sizeof(mem.Page{})) + int64(unsafe.Sizeof(transport.RegMRWR{}))
}

// qpHeapBytes is what a QP of caps cp costs the daemon beside its rings:
// the engine's WQE rings and the ring decoders' private copies, and on a
// QP that may post REG_MR (RC, UC) a page list of up to maxPages pages per
// SQ slot (the contiguous form is decoded into one).
func qpHeapBytes(cp transport.QPCap, srq bool, typ transport.QPType, maxPages int) int64 {
	b := transport.QPHeapBytes(cp, srq) + qpOverhead
	if typ == transport.QPTypeRC || typ == transport.QPTypeUC {
		b += uint64(cp.MaxSendWR+1) * uint64(regMRBytes(maxPages)) // and the decoder's copy
	}
	b += uint64(ring.SQEntrySize(cp.MaxSendSGE, cp.MaxInlineData)) + uint64(cp.MaxInlineData) +
		uint64(cp.MaxSendSGE)*uint64(unsafe.Sizeof(transport.SGE{}))
	if !srq {
		b += uint64(ring.RQEntrySize(cp.MaxRecvSGE)) + uint64(cp.MaxRecvSGE)*uint64(unsafe.Sizeof(transport.SGE{}))
	}
	return int64(b)
}

// srqHeapBytes is the same for an SRQ.
func srqHeapBytes(maxWR, maxSGE uint32) int64 {
	return int64(transport.SRQHeapBytes(maxWR, maxSGE) + uint64(ring.RQEntrySize(maxSGE)) +
		uint64(maxSGE)*uint64(unsafe.Sizeof(transport.SGE{})))
}

// admitLocked counts a connection of uid in its account, or says why not:
// the server is closed or a connection bound is reached (EUSERS).
// +checklocks:s.mu
func (s *Server) admitLocked(uid uint32) (*account, error) {
	if s.closed {
		return nil, ErrServerClosed
	}
	if len(s.conns) >= s.cfg.MaxConns {
		return nil, errf(syscall.EUSERS, "daemon at its limit of %d connections", s.cfg.MaxConns)
	}
	a := s.users[uid]
	if a == nil {
		a = &account{uid: uid}
		s.users[uid] = a
	}
	if a.conns >= s.cfg.MaxConnsPerUser {
		return nil, errf(syscall.EUSERS, "uid %d at its limit of %d connections", uid, s.cfg.MaxConnsPerUser)
	}
	a.conns++
	return a, nil
}

// leaveLocked drops a connection from its account, and the account once
// nothing is charged to it.
// +checklocks:s.mu
func (s *Server) leaveLocked(a *account) {
	a.conns--
	if a.idle() {
		delete(s.users, a.uid)
	}
}

// refuse answers the first request of a connection that was not admitted
// with err (so the client's hello fails with its errno), waiting at most
// HelloTimeout for it, then closes the connection; it returns when done
// (ServeConn's caller may close uc again). At most maxRefusing are
// answered at once; others are closed at once. Close closes those waiting.
func (s *Server) refuse(uc *net.UnixConn, err error) {
	defer uc.Close()
	select {
	case s.refusing <- struct{}{}:
	default:
		return
	}
	defer func() { <-s.refusing }()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.refused[uc] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.refused, uc)
		s.mu.Unlock()
	}()
	vc := verbsock.NewConn(uc)
	_ = uc.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	h, _, fds, rerr := vc.Read()
	verbsock.CloseFDs(fds)
	if rerr != nil {
		return
	}
	msg := err.Error()
	var e *verbsock.Error
	if errors.As(err, &e) {
		msg = e.Msg
	}
	if len(msg) > verbsock.MaxErrorText {
		msg = msg[:verbsock.MaxErrorText]
	}
	_ = vc.Write(verbsock.Header{Version: verbsock.Version, Op: h.Op, ID: h.ID, Status: uint32(verbsock.ErrnoOf(err)),
		Flags: verbsock.FlagReply}, []byte(msg), nil, s.cfg.WriteTimeout)
}

// privileged reports whether the peer may set controlled Q_Keys (the high
// bit set, as QP1's 0x80010000): uid 0, or a member (primary or
// supplementary group, SO_PEERGROUPS) of one of Config.PrivilegedGroups,
// as Linux asks CAP_NET_RAW of ib_uverbs' modify_qp.
func (s *Server) privileged(uc *net.UnixConn, cred *unix.Ucred) bool {
	if cred.Uid == 0 {
		return true
	}
	if len(s.cfg.PrivilegedGroups) == 0 {
		return false
	}
	groups := append([]uint32{cred.Gid}, peerGroups(uc)...)
	for _, g := range groups {
		for _, p := range s.cfg.PrivilegedGroups {
			if g == p {
				return true
			}
		}
	}
	return false
}

// soPeerGroups is SO_PEERGROUPS (Linux 4.13): 59 on every Linux port Go
// has (only sparc and parisc number it otherwise); x/sys does not name it.
const soPeerGroups = 59

// peerGroups is the peer's supplementary groups at connect, nil if the
// kernel does not say (then only the primary group counts).
func peerGroups(uc *net.UnixConn) []uint32 {
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	buf := make([]uint32, 1024)
	var out []uint32
	_ = rc.Control(func(fd uintptr) {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_SOCKET, soPeerGroups,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e == 0 {
			out = buf[:n/4]
		}
	})
	return out
}

// checkQKey refuses a controlled Q_Key from an unprivileged client (EPERM,
// as ib_uverbs without CAP_NET_RAW).
func (c *conn) checkQKey(mask transport.AttrMask, qkey uint32) error {
	if mask&transport.AttrQKey != 0 && qkey&0x80000000 != 0 && !c.privileged {
		return errf(syscall.EPERM, "Q_Key %#x has the high bit set (controlled): only uid 0 or a privileged group may set it", qkey)
	}
	return nil
}

func (s *Server) fillConnLimits() error {
	c := &s.cfg
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.MaxConnsPerUser == 0 {
		c.MaxConnsPerUser = min(DefaultMaxConnsPerUser, c.MaxConns)
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.MaxConns < 0 || c.MaxConnsPerUser < 0 || c.HelloTimeout < 0 {
		return fmt.Errorf("server: negative connection limit (%d total, %d per user, hello timeout %v)",
			c.MaxConns, c.MaxConnsPerUser, c.HelloTimeout)
	}
	return nil
}
