package verbs_test

import (
	"net/netip"
	"os"
	"testing"

	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// TestListCMPaged: two clients of one daemon hold 64 listeners each, more
// than a list_cm page holds; ListCM returns every one once, with its
// service ID (RDMA_PS_TCP << 16 | port), bind address and owner pid.
func TestListCMPaged(t *testing.T) {
	ds := servertest.TwoDaemonsCM(t, 1500, verbsock.Limits{}, cm.Config{})
	const perClient = 64 // server.CMLimits.MaxListens' default
	if 2*perClient <= verbsock.ListCMPage {
		t.Fatalf("%d listeners fit one page of %d", 2*perClient, verbsock.ListCMPage)
	}
	want := map[uint64]netip.Addr{}
	var devs [2]*verbs.Device
	for i := range devs {
		d, err := verbs.Open(ds[0].Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		devs[i] = d
		for j := range perClient {
			port := uint16(10000 + i*perClient + j)
			var at netip.Addr // any address, but one listener bound to the host's
			if j == 0 {
				at = ds[0].Host.Addr
			}
			if _, err := d.Listen(netip.AddrPortFrom(at, port)); err != nil {
				t.Fatalf("listen %d: %v", port, err)
			}
			want[cm.ServiceID(cm.PortSpaceTCP, port)] = at
		}
	}
	es, err := devs[0].ListCM()
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != len(want) {
		t.Fatalf("ListCM: %d entries, want %d", len(es), len(want))
	}
	for _, e := range es {
		at, ok := want[e.ServiceID]
		if !ok || !e.Listener || e.State != "LISTEN" || e.PortSpace() != cm.PortSpaceTCP || e.Local != at ||
			e.Owner != os.Getpid() {
			t.Errorf("entry %+v (port space %#x port %d): want a listener owned by %d at %v", e, e.PortSpace(),
				e.Port(), os.Getpid(), at)
		}
		delete(want, e.ServiceID)
	}
	if len(want) != 0 {
		t.Errorf("%d listeners not listed", len(want))
	}
	// The other daemon holds none.
	d, err := verbs.Open(ds[1].Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if es, err := d.ListCM(); err != nil || len(es) != 0 {
		t.Errorf("idle daemon: %+v, %v", es, err)
	}
}
