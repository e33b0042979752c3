package link

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TAPConfig configures OpenTAP.
type TAPConfig struct {
	// Name of the TAP, e.g. "vrnic0". Empty lets the kernel pick. If a
	// persistent TAP of that name exists (ip tuntap add), OpenTAP attaches
	// to it instead of creating one (TAP.Adopted).
	Name string
	// MTU of the TAP (the IP MTU). Zero: 1500 for a TAP OpenTAP creates; an
	// adopted TAP keeps the MTU it has. Non-zero is set in both cases.
	MTU int
	// MAC is the NIC's own address (the far side of the TAP, not the kernel
	// side's). Nil picks a random locally administered unicast address.
	MAC net.HardwareAddr
	// BatchSize caps frames per Read; default 64.
	BatchSize int
}

// TAP is a Link over a TAP device: one this process created, or a
// persistent one it adopted (Adopted). The file descriptor
// is kept off the Go netpoller (sysFD: a worker sleeps on it in its own
// WaitSet), and Close interrupts a blocked Read. Read drains every frame already queued on the device (up
// to len(bufs)) per wake-up, one read(2) per frame: a TAP file has no
// batched read (readv reads one frame), and IFF_VNET_HDR's offloads (GSO,
// USO) do not fit RoCE, whose every packet carries its own BTH.
type TAP struct {
	name   string
	mac    net.HardwareAddr
	mtu    atomic.Int64 // the interface's, as last set (SetMTU)
	batch  int
	rc     *sysFD
	closed atomic.Bool
	// adopted: the TAP existed, persistent, before OpenTAP; it outlives
	// Close.
	adopted bool
}

// OpenTAP creates the TAP device, sets its MTU and brings it up; Close
// removes it. If cfg.Name names a persistent TAP that exists (one an
// administrator made with ip tuntap add), OpenTAP attaches to it instead,
// keeps it persistent and brings it up; its MTU changes only if cfg.MTU is
// set, and Close leaves it, with its addresses, in place (Adopted). Any
// other interface of that name is refused: not a TAP (an error wrapping
// EINVAL), a TAP another process holds (EBUSY), a multi-queue TAP.
func OpenTAP(cfg TAPConfig) (*TAP, error) {
	if cfg.MTU != 0 && (cfg.MTU < minTAPMTU || cfg.MTU > maxTAPMTU) {
		return nil, fmt.Errorf("link: TAP MTU %d out of range", cfg.MTU)
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 64
	}
	mac := cfg.MAC
	if mac == nil {
		var err error
		if mac, err = RandomMAC(); err != nil {
			return nil, err
		}
	} else if len(mac) != 6 || mac[0]&1 != 0 {
		return nil, fmt.Errorf("link: MAC %v is not a unicast Ethernet address", mac)
	}
	persistent, err := existingTAP(cfg.Name)
	if err != nil {
		return nil, err
	}
	// water always sets the persist flag to Persist (TUNSETPERSIST), so it
	// must be true for an adopted TAP: false would make the kernel delete
	// the administrator's TAP when the descriptor closes. Between the look-up
	// and the open an administrator could make or delete the TAP; water
	// offers no IFF_TUN_EXCL to close that window, which only a concurrent
	// ip tuntap on the same name can hit.
	ifce, err := water.New(water.Config{
		DeviceType:             water.TAP,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: cfg.Name, Persist: persistent},
	})
	if err != nil {
		return nil, fmt.Errorf("link: create TAP %q: %w", cfg.Name, err)
	}
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		ifce.Close()
		return nil, errors.New("link: water returned no *os.File")
	}
	t := &TAP{name: ifce.Name(), mac: append(net.HardwareAddr(nil), mac...), batch: cfg.BatchSize, adopted: persistent}
	if t.rc, err = offNetpoller(f); err != nil {
		return nil, fmt.Errorf("link: TAP %s: %w", t.name, err)
	}
	if err := t.setUp(cfg.MTU); err != nil {
		t.rc.Close()
		return nil, fmt.Errorf("link: set up TAP %s: %w", t.name, err)
	}
	return t, nil
}

// The IP MTU range of a TAP: IPv4's minimum, and the largest whose frame
// fits the 64 KiB a TAP read returns.
const (
	minTAPMTU = 68
	maxTAPMTU = 65535 - EthernetHeaderLen
)

// setUp sets the MTU (mtu, or 1500 for a created TAP when mtu is 0; an
// adopted TAP's own when 0) and brings the TAP up. t.mtu ends as the
// interface's MTU.
func (t *TAP) setUp(mtu int) error {
	nl, err := netlink.LinkByName(t.name)
	if err != nil {
		return err
	}
	if string(nl.Attrs().HardwareAddr) == string(t.mac) {
		return fmt.Errorf("MAC %v equals the kernel side's", t.mac)
	}
	if mtu == 0 && !t.adopted {
		mtu = 1500
	}
	if mtu == 0 {
		mtu = nl.Attrs().MTU
		if mtu < minTAPMTU || mtu > maxTAPMTU {
			return fmt.Errorf("its MTU %d is out of range (%d..%d); set one", mtu, minTAPMTU, maxTAPMTU)
		}
	} else if mtu != nl.Attrs().MTU {
		if err := netlink.LinkSetMTU(nl, mtu); err != nil {
			return err
		}
	}
	t.mtu.Store(int64(mtu))
	// Up even when adopted: the port needs the link up. Close does not
	// set it down again, so an adopted TAP stays up (without carrier, as
	// no process holds it) after vrnicd stops. Nothing is asked of the
	// kernel that is already so, so that the user a TAP belongs to (ip
	// tuntap add ... user U) can attach without CAP_NET_ADMIN.
	if nl.Attrs().Flags&net.FlagUp != 0 {
		return nil
	}
	return netlink.LinkSetUp(nl)
}

// existingTAP looks name up before OpenTAP opens it. It returns false if
// no interface has the name (OpenTAP creates the TAP), true if it is a
// persistent single-queue TAP (OpenTAP adopts it), and an error otherwise.
// A kernel before 4.15 reports no TAP details over netlink (Mode 0); then
// the attach decides: water's TUNSETIFF refuses a TUN or a multi-queue TAP
// (EINVAL) and a TAP another process holds (EBUSY), which is what a TAP
// that is not persistent is.
func existingTAP(name string) (bool, error) {
	if name == "" {
		return false, nil
	}
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, nil
		}
		return false, fmt.Errorf("link: look up %s: %w", name, err)
	}
	tt, ok := l.(*netlink.Tuntap)
	switch {
	case !ok:
		return false, fmt.Errorf("link: %s is a %s interface, not a TAP: %w", name, l.Type(), unix.EINVAL)
	case tt.Mode == netlink.TUNTAP_MODE_TUN:
		return false, fmt.Errorf("link: %s is a TUN, not a TAP: %w", name, unix.EINVAL)
	case tt.Mode == 0:
		return true, nil
	case tt.NonPersist:
		return false, fmt.Errorf("link: TAP %s is not persistent, so another process holds it: %w", name, unix.EBUSY)
	case tt.Flags&netlink.TUNTAP_MULTI_QUEUE != 0:
		return false, fmt.Errorf("link: TAP %s is multi-queue; only a single-queue TAP can be attached to", name)
	}
	return true, nil
}

// offNetpoller moves f's open file description to a sysFD: a duplicate
// descriptor, non-blocking, and f closed (which takes it off the Go
// netpoller water's os.OpenFile put it on).
func offNetpoller(f *os.File) (*sysFD, error) {
	var fd int
	var derr error
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Control(func(ufd uintptr) { fd, derr = unix.FcntlInt(ufd, unix.F_DUPFD_CLOEXEC, 0) })
	}
	f.Close()
	if err == nil {
		err = derr
	}
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s, err := newSysFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// RandomMAC returns a random locally administered unicast MAC.
func RandomMAC() (net.HardwareAddr, error) {
	m := make(net.HardwareAddr, 6)
	if _, err := rand.Read(m); err != nil {
		return nil, err
	}
	m[0] = m[0]&^0x01 | 0x02
	return m, nil
}

func (t *TAP) BatchSize() int { return t.batch }
func (t *TAP) MTU() int       { return int(t.mtu.Load()) }

// SetMTU follows a change of the interface's MTU (an administrator's `ip
// link set NAME mtu N`), which bounds the frames Write takes.
func (t *TAP) SetMTU(mtu int)                 { t.mtu.Store(int64(mtu)) }
func (t *TAP) HardwareAddr() net.HardwareAddr { return t.mac }
func (t *TAP) Name() string                   { return t.name }

// Adopted reports whether the TAP is a persistent one that existed before
// OpenTAP (made by ip tuntap add, say) rather than one OpenTAP created.
// Close leaves an adopted TAP in place, persistent and with its addresses;
// it removes a created one.
func (t *TAP) Adopted() bool { return t.adopted }

// Close closes the device file; the kernel then removes the TAP unless it
// is persistent (Adopted).
func (t *TAP) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	return t.rc.Close()
}

func (t *TAP) fdErr(err error) error {
	if t.closed.Load() || errors.Is(err, os.ErrClosed) {
		return closedError(t.name)
	}
	return fmt.Errorf("link %s: %w", t.name, err)
}

// Read implements Link.
func (t *TAP) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return t.read(bufs, sizes, offset, true)
}

// TryRead implements Poller: the frames already queued, up to len(bufs).
func (t *TAP) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return t.read(bufs, sizes, offset, false)
}

// WaitReadable implements Poller.
func (t *TAP) WaitReadable(timeout time.Duration) (bool, error) {
	ok, err := t.rc.waitReadable(timeout, func() bool { return !t.closed.Load() && t.rc.events()&(unix.POLLIN|pollBad) != 0 })
	if err != nil {
		return false, t.fdErr(err)
	}
	return ok, nil
}

// Wake implements Poller.
func (t *TAP) Wake() { t.rc.Wake() }

// read drains queued frames with one read(2) each (a TAP has no batched
// read); if block is set it first waits for one.
func (t *TAP) read(bufs [][]byte, sizes []int, offset int, block bool) (int, error) {
	if len(bufs) == 0 {
		return 0, nil
	}
	n := 0
	var rerr error
	drain := func(fd uintptr) bool {
		for n < len(bufs) {
			m, err := unix.Read(int(fd), bufs[n][offset:])
			switch err {
			case nil:
				sizes[n] = m
				n++
			case unix.EINTR:
			case unix.EAGAIN:
				return n > 0
			default:
				rerr = err
				return true
			}
		}
		return true
	}
	var err error
	if block {
		err = t.rc.Read(drain)
	} else {
		err = t.rc.Control(func(fd uintptr) { drain(fd) })
	}
	if n > 0 {
		return n, nil
	}
	if err == nil {
		err = rerr
	}
	if err == nil && !block {
		return 0, nil
	}
	return 0, t.fdErr(err)
}

// Write implements Link.
func (t *TAP) Write(bufs [][]byte, offset int) (int, error) {
	for _, b := range bufs {
		if err := checkFrame(b[offset:], t.MTU()); err != nil {
			return 0, err
		}
	}
	i := 0
	var werr error
	err := t.rc.Write(func(fd uintptr) bool {
		for i < len(bufs) {
			_, err := unix.Write(int(fd), bufs[i][offset:])
			switch err {
			case nil:
				i++
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				werr = err
				return true
			}
		}
		return true
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return i, t.fdErr(err)
	}
	return i, nil
}

var (
	_ Link   = (*TAP)(nil)
	_ Poller = (*TAP)(nil)
)
