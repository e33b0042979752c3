package cmtool

import (
	"net/netip"

	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// ServerStart is how cmatose's and udaddy's run_server start, prog naming
// them in their messages: "starting server", the device behind socket,
// its listener on addr (listen: (*verbs.Device).Listen or ListenUD), and
// onListen (if set) told. A failure is printed as theirs is and returned;
// dev is the caller's to close even then, as their destroy_nodes does.
func ServerStart(printf func(string, ...any), prog, socket string,
	listen func(*verbs.Device, netip.AddrPort) (*verbs.Listener, error), addr netip.AddrPort,
	onListen func()) (dev *verbs.Device, l *verbs.Listener, err error) {
	printf("%s: starting server\n", prog)
	if dev, err = verbs.Open(socket); err != nil {
		printf("%s: listen request failed: %v\n", prog, err)
		return dev, nil, err
	}
	if l, err = listen(dev, addr); err != nil {
		printf("%s: bind address failed: %v\n", prog, err)
		return dev, nil, err
	}
	if onListen != nil {
		onListen()
	}
	return dev, l, nil
}

// ClientStart is how cmatose's and udaddy's run_client start: "starting
// client", the device behind socket, "connecting"; a failure is printed as
// theirs is and returned.
func ClientStart(printf func(string, ...any), prog, socket string) (*verbs.Device, error) {
	printf("%s: starting client\n", prog)
	dev, err := verbs.Open(socket)
	if err != nil {
		printf("%s: failure getting addr: %v\n", prog, err)
		return dev, err
	}
	printf("%s: connecting\n", prog)
	return dev, nil
}
