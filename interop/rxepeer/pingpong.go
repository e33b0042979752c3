package rxepeer

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// PingpongPort is the TCP port of the out-of-band exchange of rdma-core's
// ibv_*_pingpong examples (and perftest's default).
const PingpongPort = 18515

// PingpongQKey is the Q_Key ibv_ud_pingpong gives its QP and sends with.
const PingpongQKey = 0x11111111

// PingpongDest is one side's address as ibv_*_pingpong exchanges it over
// TCP: "LLLL:QQQQQQ:PPPPPP:GGGG...G" (LID, QPN, PSN in hex, the GID as 32
// hex digits in wire byte order) plus a NUL, 52 bytes.
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID netip.Addr
}

const pingpongMsgLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

// Marshal formats d as the 52-byte message.
func (d PingpongDest) Marshal() []byte {
	g := d.GID.As16()
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(g[:]))
	return append([]byte(s), 0)
}

// ParsePingpongDest parses the message of Marshal.
func ParsePingpongDest(b []byte) (PingpongDest, error) {
	s := strings.TrimRight(string(b), "\x00")
	f := strings.Split(s, ":")
	if len(f) != 4 || len(f[0]) != 4 || len(f[1]) != 6 || len(f[2]) != 6 || len(f[3]) != 32 {
		return PingpongDest{}, fmt.Errorf("rxepeer: pingpong address %q: want LLLL:QQQQQQ:PPPPPP:<32 hex digits>", s)
	}
	var d PingpongDest
	lid, err1 := strconv.ParseUint(f[0], 16, 16)
	qpn, err2 := strconv.ParseUint(f[1], 16, 24)
	psn, err3 := strconv.ParseUint(f[2], 16, 24)
	g, err4 := hex.DecodeString(f[3])
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return PingpongDest{}, fmt.Errorf("rxepeer: pingpong address %q: %v", s, err)
		}
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	d.GID = netip.AddrFrom16([16]byte(g))
	return d, nil
}

// PingpongClient does the client's half of the exchange on c (connected to
// a server's PingpongPort): send local, read the server's address, send
// "done". The server has moved its QP to RTS when it answers, so the
// caller may send at once. Bounded by timeout.
func PingpongClient(c net.Conn, local PingpongDest, timeout time.Duration) (PingpongDest, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return PingpongDest{}, err
	}
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(local.Marshal()); err != nil {
		return PingpongDest{}, fmt.Errorf("rxepeer: pingpong: sending our address: %w", err)
	}
	buf := make([]byte, pingpongMsgLen)
	if _, err := io.ReadFull(c, buf); err != nil {
		return PingpongDest{}, fmt.Errorf("rxepeer: pingpong: reading the server's address: %w", err)
	}
	remote, err := ParsePingpongDest(buf)
	if err != nil {
		return PingpongDest{}, err
	}
	if _, err := c.Write([]byte("done\x00")); err != nil {
		return PingpongDest{}, fmt.Errorf("rxepeer: pingpong: sending done: %w", err)
	}
	return remote, nil
}
