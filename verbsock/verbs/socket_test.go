package verbs

import (
	"path/filepath"
	"strings"
	"testing"
)

// Open("") dials $VRNICD_SOCKET when it is set, DefaultSocket otherwise.
func TestOpenDefaultSocket(t *testing.T) {
	p := filepath.Join(t.TempDir(), "none.sock")
	t.Setenv(SocketEnv, p)
	if _, err := Open(""); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Open(\"\") with %s=%s: %v", SocketEnv, p, err)
	}
	t.Setenv(SocketEnv, "")
	if SocketPath() != DefaultSocket {
		t.Fatalf("SocketPath() = %q with %s empty", SocketPath(), SocketEnv)
	}
}
