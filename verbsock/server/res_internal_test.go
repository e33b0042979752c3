package server

import (
	"os"
	"testing"
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
