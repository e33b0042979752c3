package server

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vrnic/vrnicd/nic/cmagent"
	"github.com/vrnic/vrnicd/verbsock"
)

// rdma_cm event channels (PROTOCOL.md §11): each is a socket pair whose
// client end is the program's rdma_event_channel, readable exactly while
// an event of one of its objects waits, as the kernel's rdma_cm descriptor
// is. A listener or connection names its channel when it is made (0: the
// client's own socket, which the Go SDK reads) and cm_migrate moves it.
// Each channel has its own queue and writer, so a program that does not
// read one channel holds up neither the others nor the request loop.

// cmChannel is one event channel.
type cmChannel struct {
	handle uint32
	sock   *verbsock.Conn // the daemon's end
	events chan verbsock.CMEventMsg
	quit   chan struct{} // closed by cm_close_channel or the client's departure
	dead   bool          // quit is closed (cmClient.mu)
}

// cmChannelOpen answers cm_channel: a new channel and its writer; the
// reply carries the client's end.
func (c *conn) cmChannelOpen() (any, []int, error) {
	if c.s.cfg.CM == nil {
		return nil, nil, errf(syscall.EOPNOTSUPP, "cm_channel: the daemon runs no connection manager")
	}
	c.cmStart()
	k := &c.cm
	k.mu.Lock()
	if len(k.chans) >= c.s.cmLimits.MaxChannels {
		k.mu.Unlock()
		return nil, nil, quota("rdma_cm event channels", uint64(c.s.cmLimits.MaxChannels))
	}
	k.mu.Unlock()
	ours, theirs, err := cmSocketpair()
	if err != nil {
		return nil, nil, err
	}
	ch := &cmChannel{sock: ours, events: make(chan verbsock.CMEventMsg, c.s.cmLimits.EventQueue), quit: make(chan struct{})}
	k.mu.Lock()
	if k.gone {
		k.mu.Unlock()
		ours.Close()
		unix.Close(theirs)
		return nil, nil, errf(syscall.ENOTCONN, "cm_channel: the client is leaving")
	}
	ch.handle = k.next
	k.next++
	k.chans[ch.handle] = ch
	k.mu.Unlock()
	c.wg.Add(1)
	go c.cmChannelWriter(ch)
	return &verbsock.CMChannelResp{Channel: ch.handle}, []int{theirs}, nil
}

// cmSocketpair makes a channel's sockets: the daemon's end on the
// runtime poller, the client's as a descriptor.
func cmSocketpair() (*verbsock.Conn, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, errf(syscall.ENFILE, "cm_channel: socketpair: %v", err)
	}
	f := os.NewFile(uintptr(fds[0]), "vrnic-cm-channel")
	nc, err := net.FileConn(f) // dups fds[0], non-blocking
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, -1, errf(syscall.ENFILE, "cm_channel: %v", err)
	}
	return verbsock.NewConn(nc.(*net.UnixConn)), fds[1], nil
}

// cmChannelWriter writes a channel's events in order until the channel or
// the client goes. A program that does not read its channel only makes
// this writer wait (its queue holds EventQueue events, more are dropped
// and logged); one that closed its end ends the channel.
func (c *conn) cmChannelWriter(ch *cmChannel) {
	defer c.wg.Done()
	defer ch.sock.Close()
	hdr := verbsock.Header{Version: verbsock.Version, Op: verbsock.OpCMEvent, Flags: verbsock.FlagEvent}
	for {
		select {
		case <-c.done:
			return
		case <-ch.quit:
			return
		case ev := <-ch.events:
			for {
				err := ch.sock.Write(hdr, verbsock.Encode(nil, &ev), nil, time.Second)
				if err == nil {
					break
				}
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					c.log.Debug("rdma_cm event channel closed by the client", "channel", ch.handle, "err", err)
					c.cmChannelClose(ch.handle)
					return
				}
				select {
				case <-c.done:
					return
				case <-ch.quit:
					return
				default:
				}
			}
		}
	}
}

// cmChannelClose ends a channel: its writer stops and its objects' later
// events are dropped until they are migrated.
func (c *conn) cmChannelClose(h uint32) error {
	k := &c.cm
	k.mu.Lock()
	defer k.mu.Unlock()
	ch := k.chans[h]
	if ch == nil {
		return noObj("rdma_cm event channel", h)
	}
	delete(k.chans, h)
	ch.dead = true
	close(ch.quit)
	return nil
}

// cmChannel returns channel h (nil for 0: the client's socket). k.mu held.
func (k *cmClient) channel(h uint32) (*cmChannel, error) {
	if h == 0 {
		return nil, nil
	}
	ch := k.chans[h]
	if ch == nil {
		return nil, noObj("rdma_cm event channel", h)
	}
	return ch, nil
}

// cmMigrate is rdma_migrate_id: a listener's or connection's events go to
// another channel from now on (those already queued stay where they are).
func (c *conn) cmMigrate(r *verbsock.CMMigrateReq) error {
	k := &c.cm
	k.mu.Lock()
	defer k.mu.Unlock()
	ch, err := k.channel(r.Channel)
	if err != nil {
		return err
	}
	if l := k.listens[r.Handle]; l != nil {
		l.ch = ch
		return nil
	}
	if cn := k.conns[r.Handle]; cn != nil {
		cn.ch = ch
		return nil
	}
	return noObj("rdma_cm listener or connection", r.Handle)
}

// send queues m for channel ch (nil: the client's socket); it never
// blocks. k.mu held.
func (c *conn) cmSend(ch *cmChannel, m verbsock.CMEventMsg) {
	k := &c.cm
	q := k.events
	if ch != nil {
		if ch.dead {
			return // closed by the program: as the kernel's, its events go nowhere
		}
		q = ch.events
	}
	select {
	case q <- m:
	default:
		k.lost++
		c.log.Warn("rdma_cm event dropped: the client does not read its events", "event", m.Type, "lost", k.lost)
	}
}

// cmResolveAddrAsync is rdma_resolve_addr as librdmacm has it: the
// request returns at once and ADDR_RESOLVED or ADDR_ERROR follows on the
// channel. At most MaxResolving run at once per client.
func (c *conn) cmResolveAddrAsync(a *cmagent.Agent, r *verbsock.CMResolveAddrAsyncReq) error {
	dst := netip.AddrFrom16(r.Dst)
	src := netip.Addr{}
	if r.Src != [16]byte{} {
		src = netip.AddrFrom16(r.Src)
	}
	if _, err := a.ResolveSource(src, dst); err != nil {
		return err
	}
	k := &c.cm
	k.mu.Lock()
	ch, err := k.channel(r.Channel)
	if err == nil && k.resolving >= c.s.cmLimits.MaxResolving {
		err = quota("address resolutions at once", uint64(c.s.cmLimits.MaxResolving))
	}
	if err != nil {
		k.mu.Unlock()
		return err
	}
	k.resolving++
	k.mu.Unlock()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ra, err := a.ResolveAddr(c.ctx, src, dst, time.Duration(r.TimeoutMS)*time.Millisecond)
		m := verbsock.CMEventMsg{Type: verbsock.CMEventAddrResolved, Context: r.Context}
		if err != nil {
			m.Type, m.Status = verbsock.CMEventAddrError, -int32(verbsock.ErrnoOf(cmErr(err)))
			if errors.Is(err, cmagent.ErrUnresolved) {
				m.Status = -int32(syscall.ETIMEDOUT) // librdmacm's status when nobody answered
			}
		} else {
			m.Local, m.AH.SGIDIndex = ra.Src.As16(), uint8(ra.SGIDIndex)
		}
		m.Peer = r.Dst
		k.mu.Lock()
		k.resolving--
		if !k.gone && c.ready.Load() {
			c.cmSend(ch, m)
		}
		k.mu.Unlock()
	}()
	return nil
}
