package main

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/vrnic/vrnicd/transport/cm"
	"github.com/vrnic/vrnicd/verbsock"
	"github.com/vrnic/vrnicd/verbsock/server/servertest"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// Every command with --json prints one JSON object whose top level names
// its lists (no bare array, no stream of objects), even with nothing to
// list; stat --watch's stream of one object a line is the one exception,
// checked by its own test. A command that gains --json must be added here.
func TestEveryJSONIsOneObject(t *testing.T) {
	ds := servertest.TwoDaemonsCM(t, 1500, verbsock.Limits{}, cm.Config{CMResponseTimeout: 14, PacketLifeTime: 10})
	sock := ds[0].Socket
	t.Setenv(verbs.SocketEnv, "") // devices: no daemon at all, an empty list
	pcap, err := filepath.Abs("../../testdata/roce/rdma_write.pcap")
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][][]string{
		"cm":      {{}},
		"decode":  {{pcap}},
		"devices": {{"--dir", t.TempDir()}},
		"devinfo": {{}},
		"qp":      {{}},
		"res":     {{}, {"pd"}, {"mr"}, {"mw"}, {"cq"}, {"qp"}, {"srq"}, {"ah"}, {"client"}},
		"stat":    {{}},
	}
	var withJSON []string
	for name, c := range commands {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.Setup(fs)
		if fs.Lookup("json") != nil {
			withJSON = append(withJSON, name)
		}
	}
	sort.Strings(withJSON)
	if got := strings.Join(withJSON, " "); got != "cm decode devices devinfo qp res stat" {
		t.Errorf("commands with --json: %s; add the new ones here", got)
	}
	for name, argss := range runs {
		for _, args := range argss {
			all := append([]string{name, "--json"}, args...)
			if name != "decode" && name != "devices" {
				all = append(all, "--socket", sock)
			}
			rc, out, errOut := runCmd(all...)
			if rc != 0 {
				t.Errorf("%q: exit %d, %s", all, rc, errOut)
				continue
			}
			oneObject(t, all, out)
		}
	}
}

// oneObject checks that out is exactly one JSON object, and that its
// top-level arrays are never null.
func oneObject(t *testing.T, args []string, out string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var doc map[string]json.RawMessage
	if err := dec.Decode(&doc); err != nil || dec.More() {
		t.Errorf("%q: not one JSON object (%v):\n%s", args, err, out)
		return
	}
	for k, v := range doc {
		if string(v) == "null" {
			t.Errorf("%q: %q is null, want a list or a value", args, k)
		}
	}
}
