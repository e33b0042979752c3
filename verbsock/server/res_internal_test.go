package server

import (
	"os"
	"testing"

	"github.com/vrnic/vrnicd/nic/nictest"
	"github.com/vrnic/vrnicd/verbsock"
)

// list_res withholds the keys of another user's MRs and MWs from a caller
// that is neither root nor the daemon's user, as kernel rdma shows them to
// CAP_NET_ADMIN only; the owner's user, root and the daemon's user see them.
func TestSeesKeys(t *testing.T) {
	daemon := uint32(os.Geteuid())
	stranger, other := daemon+1, daemon+2 // neither root nor the daemon's user (daemon+1 wraps only for uid 2^32-1)
	if stranger == 0 || other == 0 {
		t.Skip("no uid beside root and the daemon's")
	}
	mk := func(uid uint32) *conn { return &conn{acct: &account{uid: uid}} }
	owner := mk(other)
	for _, tt := range []struct {
		caller uint32
		want   bool
	}{{0, true}, {daemon, true}, {other, true}, {stranger, false}} {
		if got := mk(tt.caller).seesKeys(owner); got != tt.want {
			t.Errorf("uid %d sees uid %d's keys: %v, want %v", tt.caller, other, got, tt.want)
		}
	}
}

// An MR's and an MW's entries carry their keys to the owner's user and
// zeros with ResKeysHidden to a stranger; the rest of the entry is the
// same for both.
func TestResEntryHidesKeys(t *testing.T) {
	ha, _ := nictest.Pair(t, 1500)
	s := &Server{dev: ha.Dev}
	daemon := uint32(os.Geteuid())
	stranger, other := daemon+1, daemon+2
	owner := &conn{s: s, id: 2, pid: 42, acct: &account{uid: other},
		mrs: map[uint32]*mrObj{1: {pd: 3, key: 0x1234, length: 4096}}, mws: map[uint32]*mwObj{2: {pd: 3, key: 0x80005601}}}
	for _, tt := range []struct {
		kind uint8
		h    uint32
	}{{verbsock.ResMR, 1}, {verbsock.ResMW, 2}} {
		mine, ok := (&conn{s: s, acct: &account{uid: other}}).resEntry(tt.kind, resRef{owner, tt.h})
		if !ok || mine.RKey == 0 || mine.Flags != 0 || mine.Owner != 42 || mine.Client != 2 || mine.PD != 3 {
			t.Errorf("kind %d to its owner's user: %+v", tt.kind, mine)
		}
		theirs, ok := (&conn{s: s, acct: &account{uid: stranger}}).resEntry(tt.kind, resRef{owner, tt.h})
		want := mine
		want.LKey, want.RKey, want.IOVA, want.Flags = 0, 0, 0, verbsock.ResKeysHidden
		if !ok || theirs != want {
			t.Errorf("kind %d to another user: %+v, want %+v", tt.kind, theirs, want)
		}
	}
}
