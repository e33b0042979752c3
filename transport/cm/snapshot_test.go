package cm

import (
	"testing"
)

// TestConnsAndListenersSnapshot: after REQ, REP, RTU both Tables list the
// connection ESTABLISHED with each other's comm IDs and QPNs swapped, and
// the listener with its service ID; the copies do not alias the Table.
func TestConnsAndListenersSnapshot(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	aID, pID := p.establish(t)
	ac, pc := p.active.Conns(), p.passive.Conns()
	if len(ac) != 1 || len(pc) != 1 {
		t.Fatalf("active lists %d, passive %d connections; want 1 each", len(ac), len(pc))
	}
	a, b := ac[0], pc[0]
	if a.ID != aID || b.ID != pID || a.RemoteID != pID || b.RemoteID != aID {
		t.Errorf("IDs active %#x/%#x passive %#x/%#x, want %#x/%#x and swapped", a.ID, a.RemoteID, b.ID, b.RemoteID, aID, pID)
	}
	if a.State != StateEstablished || b.State != StateEstablished || !a.Active || b.Active {
		t.Errorf("states %v (active %v), %v (active %v)", a.State, a.Active, b.State, b.Active)
	}
	if a.QPN != 0x11 || a.RemoteQPN != 0x22 || b.QPN != 0x22 || b.RemoteQPN != 0x11 {
		t.Errorf("QPNs active %#x->%#x passive %#x->%#x", a.QPN, a.RemoteQPN, b.QPN, b.RemoteQPN)
	}
	if a.Peer != passiveIP || b.Peer != activeIP || AddrFromGID(a.Path.LocalGID) != activeIP {
		t.Errorf("peers %v %v, active local %v", a.Peer, b.Peer, AddrFromGID(a.Path.LocalGID))
	}
	sid := ServiceID(PortSpaceTCP, 7174)
	if a.ServiceID != sid || b.ServiceID != sid {
		t.Errorf("service IDs %#x %#x, want %#x", a.ServiceID, b.ServiceID, sid)
	}
	ac[0].State = StateIdle
	if c, _ := p.active.Conn(aID); c.State != StateEstablished {
		t.Error("Conns returned the Table's connection, not a copy")
	}
	ls := p.passive.Listeners()
	if len(ls) != 1 || ls[0].ServiceID != sid || ls[0].Addr.IsValid() || ls[0].Handle == 0 {
		t.Fatalf("passive listeners %+v, want one on %#x, any address", ls, sid)
	}
	if n := len(p.active.Listeners()); n != 0 {
		t.Errorf("active side lists %d listeners", n)
	}
	p.passive.Unlisten(ls[0].Handle)
	if n := len(p.passive.Listeners()); n != 0 {
		t.Errorf("%d listeners after Unlisten", n)
	}
}
