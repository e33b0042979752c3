package rxepeer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// env is what Boot needs from the host, checked once per test binary.
type env struct {
	vmDir string // interop/vm of this repository
	skip  string // non-empty: why tests must skip
	fail  string // non-empty: why tests must fail (the build broke)
	build string // build's output, for the log
}

var (
	envOnce sync.Once
	theEnv  env
)

// requireVM skips or fails t unless a guest can be booted, building the
// image first if needed (cached: a few seconds when nothing changed).
func requireVM(t testing.TB) *env {
	t.Helper()
	requireRoot(t)
	envOnce.Do(func() { theEnv = probe() })
	if theEnv.skip != "" {
		t.Skip("rxepeer: " + theEnv.skip)
	}
	if theEnv.fail != "" {
		t.Fatal("rxepeer: " + theEnv.fail)
	}
	return &theEnv
}

// requireRoot skips unless the test can make namespaces and TAPs.
func requireRoot(t testing.TB) {
	t.Helper()
	switch v := os.Getenv("VRNICD_INTEROP"); v {
	case "0", "off", "no", "false":
		t.Skip("rxepeer: interop tests disabled (VRNICD_INTEROP=" + v + ")")
	}
	if testing.Short() {
		t.Skip("rxepeer: interop tests boot VMs; skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("rxepeer: needs root (network namespaces, TAP devices, QEMU)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("rxepeer: no /dev/net/tun on this host")
	}
	for _, tool := range []string{"ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("rxepeer: %s (iproute2) not installed", tool)
		}
	}
}

func probe() env {
	var e env
	dir, err := VMDir()
	if err != nil {
		e.skip = err.Error()
		return e
	}
	e.vmDir = dir
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		e.skip = "qemu-system-x86_64 not installed (apt-get install qemu-system-x86, or run make interop)"
		return e
	}
	_, aptErr := exec.LookPath("apt-get")
	_, dpkgErr := exec.LookPath("dpkg-deb")
	if aptErr != nil || dpkgErr != nil {
		if imageReady() {
			return e // cannot build here, but an image is present
		}
		e.skip = "no guest image in " + imageDir() + ", and no apt-get/dpkg-deb to build one"
		return e
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "build"), "--quiet").CombinedOutput()
	e.build = string(out)
	if err != nil {
		e.fail = fmt.Sprintf("%s/build failed: %v\n%s", dir, err, out)
	}
	return e
}

// VMDir finds this repository's interop/vm: $VRNICD_INTEROP_VM_DIR, else
// next to this source file, else below the module root above the working
// directory.
func VMDir() (string, error) {
	ok := func(d string) bool {
		st, err := os.Stat(filepath.Join(d, "start"))
		return err == nil && st.Mode()&0o111 != 0
	}
	if d := os.Getenv("VRNICD_INTEROP_VM_DIR"); d != "" {
		if ok(d) {
			return filepath.Abs(d)
		}
		return "", fmt.Errorf("VRNICD_INTEROP_VM_DIR=%s has no executable start script", d)
	}
	if _, file, _, found := runtime.Caller(0); found && filepath.IsAbs(file) {
		if d := filepath.Join(filepath.Dir(file), "..", "vm"); ok(d) {
			return filepath.Abs(d)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isModuleRoot(d) && ok(filepath.Join(d, "interop", "vm")) {
			return filepath.Join(d, "interop", "vm"), nil
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return "", errors.New("cannot find interop/vm (set VRNICD_INTEROP_VM_DIR)")
}

func isModuleRoot(d string) bool {
	f, err := os.Open(filepath.Join(d, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "module github.com/vrnic/vrnicd" {
			return true
		}
	}
	return false
}

// The scripts' directories, with the same environment overrides (lib.sh).
func cacheDir() string { return envOr("VRNICD_INTEROP_CACHE", "/var/cache/vrnicd-interop") }
func imageDir() string { return envOr("VRNICD_INTEROP_IMAGE", filepath.Join(cacheDir(), "image")) }
func runDir() string   { return envOr("VRNICD_INTEROP_RUN", "/run/vrnicd-interop") }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func imageReady() bool {
	for _, f := range []string{"KEY", "initrd", "bzImage"} {
		if st, err := os.Stat(filepath.Join(imageDir(), f)); err != nil || st.Size() == 0 {
			return false
		}
	}
	return true
}
