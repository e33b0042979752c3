package rxepeer

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPingpongDest(t *testing.T) {
	// As ibv_ud_pingpong prints it for QPN 0x11, PSN 0xb704f6, ::ffff:192.0.2.2.
	const msg = "0000:000011:b704f6:00000000000000000000ffffc0000202\x00"
	d, err := ParsePingpongDest([]byte(msg))
	if err != nil {
		t.Fatal(err)
	}
	want := PingpongDest{QPN: 0x11, PSN: 0xb704f6, GID: netip.MustParseAddr("::ffff:192.0.2.2")}
	if d != want {
		t.Errorf("parsed %+v, want %+v", d, want)
	}
	if got := string(want.Marshal()); got != msg || len(got) != pingpongMsgLen {
		t.Errorf("Marshal = %q (%d bytes), want %q (%d)", got, len(got), msg, pingpongMsgLen)
	}
	for _, bad := range []string{
		"", "0000:000011:b704f6", "0000:0000011:b704f6:00000000000000000000ffffc0000202",
		"0000:00001g:b704f6:00000000000000000000ffffc0000202", "0000:000011:b704f6:00000000000000000000ffffc000020",
		"0000:000011:b704f6:00000000000000000000ffffc000020z",
	} {
		if _, err := ParsePingpongDest([]byte(bad)); err == nil {
			t.Errorf("ParsePingpongDest(%q) accepted", bad)
		}
	}
}

func TestParseFacts(t *testing.T) {
	f := parseFacts("name=t1\npid=42\nbogus line\ngid=0000:0000:0000:0000:0000:ffff:c000:0202\n=x\nmtu=1500\nmtu=9000\n")
	want := map[string]string{"name": "t1", "pid": "42", "gid": "0000:0000:0000:0000:0000:ffff:c000:0202", "mtu": "9000"}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("parseFacts = %v, want %v", f, want)
	}
	g, err := parseSysfsGID(f["gid"])
	if err != nil || g != netip.MustParseAddr("::ffff:192.0.2.2") {
		t.Errorf("parseSysfsGID = %v, %v", g, err)
	}
	if _, err := parseSysfsGID("192.0.2.2"); err == nil {
		t.Error("parseSysfsGID accepted an IPv4 address")
	}
}

func TestNetemArgs(t *testing.T) {
	for _, c := range []struct {
		e    Netem
		want string
	}{
		{Netem{}, ""},
		{Netem{Loss: 2.5}, "loss 2.5%"},
		{Netem{Reorder: 25}, "delay 10000us reorder 25%"},
		{Netem{Delay: 2 * time.Millisecond, Jitter: 500 * time.Microsecond, Loss: 1, Duplicate: 0.5, Limit: 50},
			"limit 50 delay 2000us 500us loss 1% duplicate 0.5%"},
	} {
		if got := strings.Join(c.e.args(), " "); got != c.want {
			t.Errorf("%+v: args %q, want %q", c.e, got, c.want)
		}
	}
}
