package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// endpoint is "NS:IFACE" (a namespace from ip netns) or "IFACE" (the
// tool's own namespace).
type endpoint struct{ ns, iface string }

func parseEndpoint(s string) (endpoint, error) {
	ns, ifc, ok := strings.Cut(s, ":")
	if !ok {
		ns, ifc = "", s
	}
	if ifc == "" || strings.ContainsAny(ns, "/") {
		return endpoint{}, fmt.Errorf("bad endpoint %q: want NETNS:IFACE or IFACE", s)
	}
	return endpoint{ns, ifc}, nil
}

func (e endpoint) String() string {
	if e.ns == "" {
		return e.iface
	}
	return e.ns + ":" + e.iface
}

// do runs fn in e's namespace: on a goroutine locked to a thread that
// joins it and dies with the goroutine, so no other goroutine ever runs
// in the wrong namespace. Sockets fn opens stay in that namespace.
func (e endpoint) do(fn func() error) error {
	if e.ns == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with us
		f, err := os.Open(filepath.Join("/run/netns", e.ns))
		if err != nil {
			errc <- fmt.Errorf("netns %s: %w", e.ns, err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", e.ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
