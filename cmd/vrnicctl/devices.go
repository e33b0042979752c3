package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

func init() {
	register(&command{
		Name:    "devices",
		Args:    "[--json] [--dir DIR]",
		Summary: "list every vrnicd on the host, as ibv_devices: the sockets named in $" + verbs.SocketEnv + " and those in /run/vrnicd, each with its device name, node GUID and netdev, or not running",
		NArgs:   0,
		Setup: func(fs *flag.FlagSet) runFunc {
			asJSON := fs.Bool("json", false, `print one JSON object: {"devices": [{"name": "vrnic0", "node_guid": "...", "netdev": "eth1", "mode": "raw", "socket": PATH, "running": true}, ...]}`)
			dir := fs.String("dir", filepath.Dir(verbs.DefaultSocket), "the `DIR`ectory whose *.sock sockets are daemons")
			return func(_ []string, stdout, _ io.Writer) error {
				devs := probeAll(socketPaths(os.Getenv(verbs.SocketEnv), *dir))
				if *asJSON {
					return writeJSON(stdout, struct {
						Devices []devEntry `json:"devices"`
					}{devs})
				}
				return devicesText(devs, stdout)
			}
		},
	})
}

// socketPaths are where daemons may listen: env's paths (a colon-separated
// list, as the drop-in libibverbs reads $VRNICD_SOCKET), then the sockets
// named *.sock in dir (the metrics socket aside), each once.
func socketPaths(env, dir string) []string {
	var out []string
	add := func(p string) {
		if p = filepath.Clean(p); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range strings.Split(env, ":") {
		if p != "" {
			add(p)
		}
	}
	found, _ := filepath.Glob(filepath.Join(dir, "*.sock")) // sorted; an unreadable dir is none
	for _, p := range found {
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 && filepath.Base(p) != "metrics.sock" {
			add(p)
		}
	}
	return out
}

// devEntry is one socket and the daemon behind it, if one answers.
type devEntry struct {
	Name     string `json:"name,omitempty"`
	NodeGUID string `json:"node_guid,omitempty"`
	Netdev   string `json:"netdev,omitempty"`
	Mode     string `json:"mode,omitempty"`
	Socket   string `json:"socket"`
	Running  bool   `json:"running"`
	Error    string `json:"error,omitempty"` // why not running
}

func probeAll(paths []string) []devEntry {
	out := make([]devEntry, 0, len(paths))
	for _, p := range paths {
		out = append(out, probe(p))
	}
	return out
}

// probeTimeout bounds how long a daemon may take to answer: a socket
// whose daemon is stopped (SIGSTOP) or wedged accepts connections into
// its backlog and never answers. A variable for the tests.
var probeTimeout = 2 * time.Second

// probe asks the daemon at path its name, node GUID and netdev. A socket
// nobody listens on, or one that does not answer in time, is not running.
func probe(path string) devEntry {
	e := devEntry{Socket: path}
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		e.Error = dialError(err)
		return e
	}
	_ = uc.SetDeadline(time.Now().Add(probeTimeout)) // for every exchange below
	d, err := verbs.OpenConn(uc)
	if errors.Is(err, verbs.ErrClosed) { // the deadline passed: the reader has closed it
		err = errors.New("does not answer")
	}
	if err != nil {
		uc.Close()
		e.Error = err.Error()
		return e
	}
	defer d.Close()
	a, err := d.Query()
	if err != nil {
		e.Error = err.Error()
		return e
	}
	e.Name, e.NodeGUID, e.Running = d.Name(), fmt.Sprintf("%016x", a.NodeGUID), true
	if di, err := d.Daemon(); err == nil { // an older daemon does not say
		e.Netdev, e.Mode = di.Netdev, di.Mode
	}
	return e
}

// dialError is the reason a socket was not reached, without the Go
// wrapping ("connection refused", "no such file or directory").
func dialError(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en.Error()
	}
	return err.Error()
}

// devicesText prints ibv_devices' two columns, then the netdev and socket;
// a socket with no daemon says so.
func devicesText(devs []devEntry, w io.Writer) error {
	b := bufio.NewWriter(w)
	const f = "    %-16s\t%-16s\t%-16s\t%s\n"
	fmt.Fprintf(b, f, "device", "   node GUID", "netdev", "socket")
	fmt.Fprintf(b, f, "------", "----------------", "------", "------")
	for _, d := range devs {
		if !d.Running {
			fmt.Fprintf(b, f, "-", "-", "-", d.Socket+" (not running: "+d.Error+")")
			continue
		}
		netdev := d.Netdev
		if netdev == "" {
			netdev = "-"
		}
		fmt.Fprintf(b, f, d.Name, d.NodeGUID, netdev, d.Socket)
	}
	return b.Flush()
}
