package verbs

import "os"

// DefaultSocket is where vrnicd listens unless configured otherwise.
const DefaultSocket = "/run/vrnicd/vrnicd.sock"

// SocketEnv names the environment variable that overrides DefaultSocket for
// every client: the SDK (Open("")) and the tools, when no --socket is given.
const SocketEnv = "VRNICD_SOCKET"

// SocketPath is the daemon's socket: $VRNICD_SOCKET if set and not empty,
// else DefaultSocket.
func SocketPath() string {
	if p := os.Getenv(SocketEnv); p != "" {
		return p
	}
	return DefaultSocket
}
