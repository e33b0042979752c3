package oob

import (
	"bytes"
	"context"
	"fmt"
	"time"
)

// PingpongMsgSize is the size of one ibv_*_pingpong address message:
// sizeof "0000:000000:000000:00000000000000000000000000000000", NUL included.
const PingpongMsgSize = 52

// SRQPingpongSlots is how many address messages ibv_srq_pingpong sends each
// way whatever its -q: it writes its whole MAX_QP array, the slots past
// the QPs in use left zero.
const SRQPingpongSlots = 256

// doneMsg ends both exchanges: "done" and its NUL.
var doneMsg = []byte("done\x00")

// PingpongDest is one QP's address as rdma-core's pingpong examples
// exchange it (struct pingpong_dest): the port LID (0 on RoCE), the QPN,
// the initial send PSN and the GID as it appears on the wire.
type PingpongDest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID [16]byte
}

// AppendMsg appends d's 52-byte message: "%04x:%06x:%06x:%s" and a NUL,
// the GID as 32 hex digits in wire byte order (gid_to_wire_gid).
func (d PingpongDest) AppendMsg(b []byte) []byte {
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN&0xffffff), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN&0xffffff), 6)
	b = append(b, ':')
	for _, g := range d.GID {
		b = appendHex(b, uint64(g), 2)
	}
	return append(b, 0)
}

// ParsePingpongDest decodes one 52-byte message. It is strict: every field
// at its fixed width, hex digits only, the NUL in place; anything else is
// an error rather than a guess.
func ParsePingpongDest(msg []byte) (PingpongDest, error) {
	var d PingpongDest
	bad := func(why string) (PingpongDest, error) {
		return PingpongDest{}, &ProtocolError{Op: "pingpong address", Msg: msg, Why: why}
	}
	if len(msg) != PingpongMsgSize {
		return bad(fmt.Sprintf("%d bytes, want %d", len(msg), PingpongMsgSize))
	}
	if msg[51] != 0 {
		return bad("no NUL at the end")
	}
	if msg[4] != ':' || msg[11] != ':' || msg[18] != ':' {
		return bad("want LLLL:QQQQQQ:PPPPPP:<32 hex digits>")
	}
	lid, ok1 := parseHex(msg[0:4])
	qpn, ok2 := parseHex(msg[5:11])
	psn, ok3 := parseHex(msg[12:18])
	if !ok1 || !ok2 || !ok3 {
		return bad("LID, QPN and PSN must be hex digits")
	}
	for i := range d.GID {
		v, ok := parseHex(msg[19+2*i : 21+2*i])
		if !ok {
			return bad("the GID must be 32 hex digits")
		}
		d.GID[i] = byte(v)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), uint32(qpn), uint32(psn)
	return d, nil
}

// PingpongClient is the client's side of the exchange (pp_client_exch_dest):
// it sends one message per local address, reads as many from the server,
// then sends "done". The server has moved its QPs to RTS before it
// answers, so the caller may start sending when this returns.
//
// ibv_rc/uc/ud_pingpong exchange one address; ibv_srq_pingpong always
// SRQPingpongSlots (pad local with zero values).
func (c *Conn) PingpongClient(ctx context.Context, local []PingpongDest) ([]PingpongDest, error) {
	if len(local) == 0 {
		return nil, fmt.Errorf("oob: pingpong: no local address")
	}
	for i, d := range local {
		if err := c.write(ctx, d.AppendMsg(nil), slot("sending our address", i, len(local))); err != nil {
			return nil, err
		}
	}
	remote, err := c.readPingpong(ctx, len(local), "the server's address")
	if err != nil {
		return nil, err
	}
	if err := c.write(ctx, doneMsg, `sending "done"`); err != nil {
		return nil, err
	}
	return remote, nil
}

// PingpongServer is the server's side (pp_server_exch_dest): it reads as
// many addresses from the client as it has local ones, calls connect with
// them (which must bring the local QPs to RTS, or fail), then sends the
// local addresses and waits for the client's "done".
func (c *Conn) PingpongServer(ctx context.Context, local []PingpongDest, connect func(remote []PingpongDest) error) ([]PingpongDest, error) {
	if len(local) == 0 {
		return nil, fmt.Errorf("oob: pingpong: no local address")
	}
	remote, err := c.readPingpong(ctx, len(local), "the client's address")
	if err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(remote); err != nil {
			return remote, err
		}
	}
	for i, d := range local {
		if err := c.write(ctx, d.AppendMsg(nil), slot("sending our address", i, len(local))); err != nil {
			return remote, err
		}
	}
	if err := c.readDone(ctx, 0); err != nil {
		return remote, err
	}
	return remote, nil
}

func (c *Conn) readPingpong(ctx context.Context, n int, what string) ([]PingpongDest, error) {
	remote := make([]PingpongDest, n)
	buf := make([]byte, PingpongMsgSize)
	for i := range remote {
		if err := c.read(ctx, buf, slot("reading "+what, i, n), 0); err != nil {
			return nil, err
		}
		d, err := ParsePingpongDest(buf)
		if err != nil {
			err.(*ProtocolError).Op = slot(what, i, n)
			return nil, err
		}
		remote[i] = d
	}
	return remote, nil
}

// readDone reads the peer's closing "done".
func (c *Conn) readDone(ctx context.Context, wait time.Duration) error {
	buf := make([]byte, len(doneMsg))
	if err := c.read(ctx, buf, `reading the peer's "done"`, wait); err != nil {
		return err
	}
	if !bytes.Equal(buf, doneMsg) {
		return &ProtocolError{Op: `the peer's "done"`, Msg: buf, Why: `want "done" and a NUL`}
	}
	return nil
}

// slot names message i of n in errors when there is more than one.
func slot(op string, i, n int) string {
	if n == 1 {
		return op
	}
	return fmt.Sprintf("%s [%d of %d]", op, i+1, n)
}

const hexDigits = "0123456789abcdef"

// appendHex appends v as lower-case hex, zero-padded to width digits (more
// if v needs them), like printf's %0*x.
func appendHex(b []byte, v uint64, width int) []byte {
	var tmp [16]byte
	i := len(tmp)
	for v != 0 || i == len(tmp) {
		i--
		tmp[i] = hexDigits[v&0xf]
		v >>= 4
	}
	for n := len(tmp) - i; n < width; n++ {
		b = append(b, '0')
	}
	return append(b, tmp[i:]...)
}

// parseHex decodes a fixed-width field of hex digits (either case).
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
