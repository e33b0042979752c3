package oob

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// The bytes perftest's rdma_write_keys sends for this address (struct
// pingpong_dest, big-endian integers, laid out by hand from its header).
func TestPerftestDestBinary(t *testing.T) {
	d := PerftestDest{LID: 0, OutReads: 0x80, QPN: 0x12, PSN: 0x99c5ab, RKey: 0x363, VAddr: 0x557efbc90000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 12}}
	want, _ := hex.DecodeString("00000000" + "00000080" + "00000012" + "0099c5ab" + "00000363" + "00000000" +
		"0000557efbc90000" + "00000000000000000000ffffc000020c" + "00000000" + "00000000")
	got := d.AppendBinary(nil)
	if !bytes.Equal(got, want) || len(got) != PerftestDestSize {
		t.Fatalf("got  %x\nwant %x", got, want)
	}
	// The padding is perftest's stack garbage: ignored.
	got[20], got[23] = 0xde, 0xad
	back, err := ParsePerftestDestBinary(got)
	if err != nil || back != d {
		t.Fatalf("parsed %+v, %v; want %+v", back, err, d)
	}
	var pe *ProtocolError
	if _, err := ParsePerftestDestBinary(got[:55]); !errors.As(err, &pe) {
		t.Fatalf("55 bytes: %v, want a ProtocolError", err)
	}
}

// chanPipe is one side of a PerftestChannel pair over Go channels.
type chanPipe struct{ in, out chan []byte }

func (c chanPipe) WriteMsg(ctx context.Context, msg []byte, what string) error {
	c.out <- append([]byte(nil), msg...)
	return nil
}

func (c chanPipe) ReadMsg(ctx context.Context, buf []byte, what string, wait time.Duration) error {
	select {
	case m := <-c.in:
		if len(m) != len(buf) {
			return &ProtocolError{Op: what, Msg: m, Why: "wrong size"}
		}
		copy(buf, m)
		return nil
	case <-time.After(time.Second):
		return errors.New(what + ": nothing")
	}
}

// In rdma_cm mode the addresses go binary and Close is the handshake
// alone: no "done" follows it.
func TestPerftestRDMACMExchange(t *testing.T) {
	a2b, b2a := make(chan []byte, 8), make(chan []byte, 8)
	cli := PerftestRDMACM(chanPipe{in: b2a, out: a2b}, true)
	srv := PerftestRDMACM(chanPipe{in: a2b, out: b2a}, false)
	ctx := context.Background()
	dc, ds := PerftestDest{QPN: 0x11, PSN: 1}, PerftestDest{QPN: 0x22, PSN: 2}
	done := make(chan error, 1)
	go func() {
		got, err := srv.HandShake(ctx, ds, 0)
		if err == nil && got != dc {
			err = errors.New("server got the wrong address")
		}
		if err == nil {
			err = srv.Close(ctx, ds, 0)
		}
		done <- err
	}()
	got, err := cli.HandShake(ctx, dc, 0)
	if err != nil || got != ds {
		t.Fatalf("client: %+v, %v", got, err)
	}
	if err := cli.Close(ctx, dc, 0); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(a2b)+len(b2a) != 0 {
		t.Fatalf("%d messages left over (a \"done\"?)", len(a2b)+len(b2a))
	}
}
