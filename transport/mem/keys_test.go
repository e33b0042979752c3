package mem

import (
	"syscall"
	"testing"
)

func TestKey_IndexAndKeyByteLayout(t *testing.T) {
	k := MakeKey(0x12345, 0xAB)
	if k != 0x012345AB || KeyIndex(k) != 0x12345 || KeyByte(k) != 0xAB {
		t.Fatalf("MakeKey/KeyIndex/KeyByte: %#x %#x %#x", k, KeyIndex(k), KeyByte(k))
	}
	if WithKeyByte(k, 0x01) != 0x01234501 {
		t.Fatalf("WithKeyByte: %#x", WithKeyByte(k, 1))
	}
}

func TestKey_MRAndMWIndexRangesAreSeparate(t *testing.T) {
	for _, c := range []struct {
		idx    uint32
		mr, mw bool
	}{
		{0, false, false},
		{1, true, false},
		{1 << 19, true, false},
		{1<<19 + 1, false, true},
		{1 << 20, false, true},
		{1<<20 + 1, false, false},
		{0xFFFFFF, false, false},
	} {
		k := MakeKey(c.idx, 0x5A)
		if IsMRKey(k) != c.mr || IsMWKey(k) != c.mw {
			t.Errorf("index %#x: IsMRKey=%v IsMWKey=%v, want %v %v", c.idx, IsMRKey(k), IsMWKey(k), c.mr, c.mw)
		}
	}
}

func TestNextKey_BumpsLowByteKeepsIndex(t *testing.T) {
	if got := NextKey(0x000102FE); got != 0x000102FF {
		t.Fatalf("got %#x", got)
	}
	if got := NextKey(0x000102FF); got != 0x00010200 {
		t.Fatalf("wrap: got %#x", got)
	}
}

func TestAccess_StringNamesFlags(t *testing.T) {
	if s := (LocalWrite | RemoteRead | 1<<12).String(); s != "LOCAL_WRITE|REMOTE_READ|0x1000" {
		t.Fatal(s)
	}
	if s := Access(0).String(); s != "0" {
		t.Fatal(s)
	}
	if s := (FlushGlobal | FlushPersistent | ZeroBased | MWBind).String(); s != "MW_BIND|ZERO_BASED|FLUSH_GLOBAL|FLUSH_PERSISTENT" {
		t.Fatal(s)
	}
}

func TestError_ErrnoAndIsMatchKind(t *testing.T) {
	cases := []struct {
		k ErrKind
		e syscall.Errno
	}{
		{KindBusy, syscall.EBUSY}, {KindNoSpace, syscall.ENOMEM}, {KindNotSupported, syscall.EOPNOTSUPP},
		{KindInvalidArg, syscall.EINVAL}, {KindNoObject, syscall.EINVAL}, {KindWrongPD, syscall.EINVAL},
	}
	for _, c := range cases {
		err := mkerr(OpVerb, c.k)
		if e := err.(*Error); e.Errno() != c.e || !e.Is(c.e) {
			t.Errorf("%v: errno %v, want %v", c.k, e.Errno(), c.e)
		}
		if KindOf(err) != c.k || ClassOf(err) != ClassVerb {
			t.Errorf("%v: KindOf/ClassOf wrong", c.k)
		}
	}
	if KindOf(nil) != KindNone || ClassOf(syscall.EINVAL) != ClassNone {
		t.Fatal("foreign errors must have no kind or class")
	}
}

func TestError_ClassMapsToNAK(t *testing.T) {
	cases := []struct {
		op   Op
		k    ErrKind
		c    Class
		nak  uint8
		hasN bool
	}{
		{OpRemote, KindKeyMismatch, ClassRemoteAccess, 0x62, true},
		{OpRemote, KindOutOfRange, ClassRemoteAccess, 0x62, true},
		{OpRemote, KindMisaligned, ClassInvalidRequest, 0x61, true},
		{OpRemote, KindInvalidArg, ClassInvalidRequest, 0x61, true},
		{OpLocal, KindKeyMismatch, ClassLocalProtection, 0, false},
		{OpFastReg, KindWrongState, ClassLocalQPOperation, 0, false},
		{OpLocalInvalidate, KindBusy, ClassLocalQPOperation, 0, false},
		{OpBindMW, KindAccessDenied, ClassMWBind, 0, false},
		{OpRemoteInvalidate, KindWrongQP, ClassInvalidateRKey, 0, false},
		{OpVerb, KindBusy, ClassVerb, 0, false},
	}
	for _, c := range cases {
		err := mkerr(c.op, c.k).(*Error)
		cl := err.Class()
		n, ok := cl.NAK()
		if cl != c.c || n != c.nak || ok != c.hasN {
			t.Errorf("%v/%v: class %v nak %#x,%v; want %v %#x,%v", c.op, c.k, cl, n, ok, c.c, c.nak, c.hasN)
		}
	}
}
