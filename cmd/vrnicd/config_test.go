package main

import (
	"bytes"
	"flag"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/nic"
	"github.com/vrnic/vrnicd/nic/netstack"
	"github.com/vrnic/vrnicd/verbsock/server"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "vrnicd.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runIn runs the program in-process and returns status and stderr.
func runIn(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// Every bad command line or config is one line naming the flag or key, and
// exit status 2, before anything is opened.
func TestBadConfig(t *testing.T) {
	sock := "--socket=" + filepath.Join(t.TempDir(), "s.sock")
	tests := []struct {
		name string
		file string // config body; "" for none
		args []string
		want []string
	}{
		{"unknown key", "iface = \"tap:v0\"\nbogus = 1\n", nil, []string{`unknown key "bogus" (line 2)`}},
		{"unknown keys", "bogus = 1\n[log]\nlevel = \"x\"\n", nil, []string{`unknown keys "bogus" (line 1), "log" (line 2)`}},
		{"wrong type", "iface = \"tap:v0\"\nmtu = \"big\"\n", nil, []string{"mtu (line 2): want an integer, got a TOML string"}},
		{"wrong element type", "iface = \"tap:v0\"\nip = [\"192.0.2.1/24\", 3]\n", nil, []string{"ip (line 2): want a string, got a TOML integer"}},
		{"syntax", "iface = \n", nil, []string{"line 1 column"}},
		{"mtu range", "iface = \"tap:v0\"\nmtu = 100\n", nil, []string{"config FILE: mtu: ", "100 is out of range (1280..65521"}},
		{"bad ip", "iface = \"tap:v0\"\nip = [\"192.0.2.300/24\"]\n", nil, []string{"config FILE: ip: ", `"192.0.2.300/24" is not an IPv4 or IPv6 address`}},
		{"ip without length", "", []string{"--iface=tap:v0", "--ip=192.0.2.10"}, []string{"--ip: ", `"192.0.2.10" has no prefix length`}},
		{"broadcast ip", "", []string{"--iface=tap:v0", "--ip=192.0.2.255/24"}, []string{"--ip: ", "broadcast address"}},
		{"multicast ip", "", []string{"--iface=tap:v0", "--ip=ff02::1/64"}, []string{"--ip: ", "cannot be a NIC's address"}},
		{"bad mac", "iface = \"tap:v0\"\nmac = \"02:00:5e:zz:00:01\"\n", nil, []string{"config FILE: mac: ", "is not an Ethernet MAC address"}},
		{"multicast mac", "", []string{"--iface=tap:v0", "--mac=01:00:5e:00:00:01"}, []string{"--mac: ", "multicast"}},
		{"bad log level", "iface = \"tap:v0\"\nlog_level = \"loud\"\n", nil, []string{"config FILE: log_level: ", `"loud" is not one of debug, info, warn, error`}},
		{"bad log format", "", []string{"--iface=tap:v0", "--log-format=xml"}, []string{"--log-format: ", "not text or json"}},
		{"no iface", "log_level = \"debug\"\n", nil, []string{"no interface"}},
		{"long tap name", "", []string{"--iface=tap:abcdefghijklmnop"}, []string{"--iface: ", "at most 15"}},
		{"raw with ip", "", []string{"--iface=eth0", "--ip=192.0.2.1/24"}, []string{"--ip: ", "raw mode uses eth0's own addresses"}},
		{"raw with mac", "", []string{"--iface=eth0", "--mac=02:00:00:00:00:01"}, []string{"--mac: ", "raw mode uses eth0's own MAC"}},
		{"relative socket", "", []string{"--iface=tap:v0", "--socket=run/x.sock"}, []string{"--socket: ", "not an absolute path"}},
		{"long socket", "", []string{"--iface=tap:v0", "--socket=/" + strings.Repeat("x", 120)}, []string{"--socket: ", "at most 107"}},
		{"no such group", "", []string{"--iface=tap:v0", "--socket-group=no-such-group-vrnicd"}, []string{"--socket-group: ", `no group "no-such-group-vrnicd"`}},
		{"bad device name", "", []string{"--iface=tap:v0", "--name=a/b"}, []string{"--name: ", "may hold only"}},
		{"bad metrics", "", []string{"--iface=tap:v0", "--metrics=9464"}, []string{"--metrics: ", `"9464" is not HOST:PORT`}},
		{"relative metrics socket", "iface = \"tap:v0\"\nmetrics = \"unix:m.sock\"\n", nil, []string{"config FILE: metrics: ", "absolute path"}},
		{"no workers", "", []string{"--iface=tap:v0", "--workers=0"}, []string{"--workers: ", "0 is out of range (1..256)"}},
		{"too many workers", "iface = \"eth0\"\nworkers = 257\n", nil, []string{"config FILE: workers: ", "257 is out of range (1..256)"}},
		{"small rx ring", "", []string{"--iface=eth0", "--rx-ring-frames=63"}, []string{"--rx-ring-frames: ", "63 is out of range (64..65536)"}},
		{"large rx ring", "iface = \"eth0\"\nrx_ring_frames = 65537\n", nil, []string{"config FILE: rx_ring_frames: ", "65537 is out of range (64..65536)"}},
		{"unknown flag", "", []string{"--bogus"}, []string{"unknown flag --bogus", "vrnicd --help"}},
		{"bad flag value", "", []string{"--mtu=abc"}, []string{`invalid value "abc" for flag --mtu`}},
		{"stray argument", "", []string{"--iface=tap:v0", "extra"}, []string{`unexpected argument "extra"`}},
		{"connections range", "iface = \"tap:v0\"\nmax_connections = 0\n", nil, []string{"config FILE: max_connections: ", "0 is out of range"}},
		{"per user above total", "iface = \"tap:v0\"\nmax_connections = 4\nmax_connections_per_user = 8\n", nil, []string{"config FILE: max_connections_per_user: ", "more than max_connections 4"}},
		{"bad hello timeout", "iface = \"tap:v0\"\nhello_timeout = \"soon\"\n", nil, []string{"config FILE: hello_timeout: ", `"soon" is not a duration`}},
		{"bad privileged group", "iface = \"tap:v0\"\nprivileged_groups = [\"no-such-group-vrnicd\"]\n", nil, []string{"config FILE: privileged_groups: ", `no group "no-such-group-vrnicd"`}},
		{"unknown limit", "iface = \"tap:v0\"\nuser_limits = { max_pds = 1 }\n", nil, []string{`unknown key "max_pds" (line 2)`}},
		{"limit range", "iface = \"tap:v0\"\nconnection_limits = { max_qp = 9999999999 }\n", nil, []string{"config FILE: connection_limits: ", "max_qp = 9999999999 is out of range"}},
		{"multicast range", "iface = \"tap:v0\"\nmulticast = { max_groups = -1 }\n", nil, []string{"config FILE: multicast: ", "max_groups = -1 is out of range"}},
		{"unknown multicast key", "iface = \"tap:v0\"\nmulticast = { groups = 1 }\n", nil, []string{`unknown key "groups" (line 2)`}},
		{"missing file", "", []string{"--config=/nonexistent/vrnicd.toml"}, []string{"config /nonexistent/vrnicd.toml: no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{sock}, tt.args...)
			if tt.file != "" {
				p := writeFile(t, tt.file)
				args = append(args, "--config", p)
				for i, w := range tt.want {
					tt.want[i] = strings.ReplaceAll(w, "FILE", p)
				}
			}
			code, stdout, stderr := runIn(args...)
			if code != exitConfig {
				t.Errorf("exit status %d, want %d", code, exitConfig)
			}
			if stdout != "" {
				t.Errorf("stdout %q", stdout)
			}
			oneLine(t, stderr, tt.want...)
		})
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	p := writeFile(t, `
iface = "tap:file0"
ip = ["192.0.2.10/24", "2001:db8::10/64"]
mtu = 9000
log_level = "debug"
socket = "/run/x/file.sock"
pcap = "/tmp/file.pcap"
`)
	o, err := parseArgs([]string{"--config", p, "--mtu", "4200", "--ip", "198.51.100.1/24", "--ip", "2001:db8:1::1/64", "--pcap="})
	if err != nil {
		t.Fatal(err)
	}
	c, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.51.100.1/24"), netip.MustParsePrefix("2001:db8:1::1/64")}
	if c.Mode != netstack.ModeTAP || c.Iface != "file0" || c.MTU != 4200 || !slices.Equal(c.Addrs, want) ||
		c.LogLevel != slog.LevelDebug || c.Socket != "/run/x/file.sock" || c.Pcap != "" || c.File != p {
		t.Fatalf("merged config %+v", c)
	}
	if !c.MACSet && c.MAC.String() != stableMAC("file0").String() {
		t.Fatalf("default MAC %v, want the stable one %v", c.MAC, stableMAC("file0"))
	}
	// Defaults with no file.
	o, _ = parseArgs([]string{"--iface", "eth1"})
	c, err = o.load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != netstack.ModeRaw || c.Iface != "eth1" || c.Socket != defaultSocket || c.Name != defaultName ||
		c.MTU != 0 || c.MAC != nil || c.LogLevel != slog.LevelInfo || c.LogFormat != "text" || c.SocketGID != -1 {
		t.Fatalf("raw-mode defaults %+v", c)
	}
	// -FILE: a missing FILE is no config (vrnicd@.service's
	// /etc/vrnicd/%i.toml); FILE alone must exist.
	missing := filepath.Join(t.TempDir(), "eth1.toml")
	o, _ = parseArgs([]string{"--iface", "eth1", "--config", "-" + missing})
	if c, err = o.load(); err != nil || c.Iface != "eth1" {
		t.Fatalf("optional config that is missing: %+v, %v", c, err)
	}
	o, _ = parseArgs([]string{"--iface", "eth1", "--config", missing})
	if _, err = o.load(); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("required config that is missing: %v", err)
	}
	// -FILE that exists is read.
	o, _ = parseArgs([]string{"--config", "-" + p})
	if c, err = o.load(); err != nil || c.Iface != "file0" {
		t.Fatalf("optional config that exists: %+v, %v", c, err)
	}
}

// The shipped example is valid, sets every key the file format has (most
// commented out), and describes them.
func TestExampleConfig(t *testing.T) {
	o, _ := parseArgs([]string{"--config", "../../configs/vrnicd.toml"})
	c, err := o.load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != netstack.ModeTAP || c.Iface != "vrnic0" || len(c.Addrs) != 2 {
		t.Fatalf("example config %+v", c)
	}
	body, err := os.ReadFile("../../configs/vrnicd.toml")
	if err != nil {
		t.Fatal(err)
	}
	ft := reflect.TypeOf(fileConfig{})
	for i := range ft.NumField() {
		key := ft.Field(i).Tag.Get("toml")
		if !regexp.MustCompile(`(?m)^#? ?` + key + ` = `).Match(body) {
			t.Errorf("configs/vrnicd.toml does not show key %q", key)
		}
	}
	// Uncommenting every example line still gives a valid (raw-mode
	// keys aside) config.
	all := regexp.MustCompile(`(?m)^# ([a-z_]+ = .*)$`).ReplaceAllString(string(body), "$1")
	all = strings.Replace(all, `socket_group = "rdma"`, `socket_group = "0"`, 1)
	all = strings.Replace(all, `privileged_groups = ["rdma-admin"]`, `privileged_groups = ["0"]`, 1)
	p := writeFile(t, all)
	o, _ = parseArgs([]string{"--config", p})
	c, err = o.load()
	if err != nil {
		t.Fatalf("example with every key: %v", err)
	}
	// The values shown are the server's defaults.
	if c.ConnLimits != server.DefaultLimits || c.UserLimits != server.DefaultUserLimits ||
		c.MaxConns != server.DefaultMaxConns || c.MaxConnsPerUser != server.DefaultMaxConnsPerUser ||
		c.HelloTimeout != server.DefaultHelloTimeout || !slices.Equal(c.PrivilegedGIDs, []uint32{0}) {
		t.Fatalf("the example's client limits are not the defaults: %+v %+v %d %d %v %v", c.ConnLimits, c.UserLimits,
			c.MaxConns, c.MaxConnsPerUser, c.HelloTimeout, c.PrivilegedGIDs)
	}
	if c.McastGroups != nic.DefaultMaxMcastGrp || c.McastQPsPerGroup != nic.DefaultMaxMcastQPAttach ||
		c.McastAttachments != nic.DefaultMaxTotalMcastQPAttach {
		t.Fatalf("the example's multicast limits %d/%d/%d are not the device's defaults", c.McastGroups,
			c.McastQPsPerGroup, c.McastAttachments)
	}
}

func TestStableMAC(t *testing.T) {
	a, b := stableMAC("vrnic0"), stableMAC("vrnic1")
	if a.String() != stableMAC("vrnic0").String() {
		t.Fatal("not stable")
	}
	if a.String() == b.String() {
		t.Fatal("two TAP names, one MAC")
	}
	for _, m := range [][]byte{a, b} {
		if m[0]&1 != 0 || m[0]&2 == 0 {
			t.Fatalf("%x is not a locally administered unicast MAC", m)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, h := range []string{"--help", "-h", "-help"} {
		code, out, errs := runIn(h)
		if code != 0 || errs != "" || !strings.HasPrefix(out, "Usage: vrnicd") {
			t.Fatalf("%s: %d %q %q", h, code, out, errs)
		}
	}
	_, help, _ := runIn("--help")
	o, _ := parseArgs(nil)
	o.fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "h" && !strings.Contains(help, "--"+f.Name+" ") {
			t.Errorf("--help does not describe --%s", f.Name)
		}
	})
	code, out, errs := runIn("--version")
	if code != 0 || errs != "" || !regexp.MustCompile(`^vrnicd \S+ \(go1\.\d+`).MatchString(out) {
		t.Fatalf("--version: %d %q %q", code, out, errs)
	}
}
