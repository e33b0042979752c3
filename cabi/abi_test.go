package cabi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// libEnv names another build of libibverbs.so.1 to check instead of
// ../lib/vrnicd/libibverbs.so.1 (a scratch build, say).
const libEnv = "VRNIC_CABI_IBVERBS"

// preloadEnv names libraries to preload into every program (the
// sanitizers' runtimes, for a sanitized build: make cabi-sanitize).
const preloadEnv = "VRNIC_CABI_PRELOAD"

// loaderErrors are what the dynamic loader (or Python's import, which
// relays dlerror) says when a symbol@version or a library is missing.
var loaderErrors = []string{
	"symbol lookup error",
	"version `IBVERBS",
	"version 'IBVERBS",
	"undefined symbol",
	"cannot open shared object",
}

// ourLib returns the absolute path of the built drop-in library, or skips.
func ourLib(t *testing.T) string {
	t.Helper()
	p := os.Getenv(libEnv)
	if p == "" {
		p = filepath.Join("..", "lib", "vrnicd", "libibverbs.so.1")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(abs) != "libibverbs.so.1" {
		t.Fatalf("%s: must be named libibverbs.so.1 to be found through LD_LIBRARY_PATH", abs)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Skipf("%s is not built (run `make cabi`): %v", abs, err)
	}
	return abs
}

// sysLib returns rdma-core's installed libibverbs.so.1, or skips.
func sysLib(t *testing.T) string {
	t.Helper()
	return sysLibrary(t, "libibverbs.so.1", "libibverbs1 libibverbs-dev")
}

// sysLibrary returns an installed rdma-core library, or skips naming the
// Debian packages that hold it.
func sysLibrary(t *testing.T, name, pkgs string) string {
	t.Helper()
	for _, d := range []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("rdma-core's %s is not installed: apt-get install %s", name, pkgs)
	return ""
}

func needObjdump(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("objdump"); err != nil {
		t.Skip("objdump not found: apt-get install binutils")
	}
}

func objdump(t *testing.T, flag, lib string) string {
	t.Helper()
	cmd := exec.Command("objdump", flag, lib)
	cmd.Env = append(os.Environ(), "LC_ALL=C") // its headings are translated otherwise
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("objdump %s %s: %v", flag, lib, err)
	}
	return string(out)
}

// exportedSymbols returns the defined dynamic symbols of lib as
// "name@@NODE" (default version) and "name@NODE" (hidden compat version),
// GNU's notation. The node symbols themselves are left to versionNodes.
func exportedSymbols(t *testing.T, lib string) map[string]bool {
	t.Helper()
	syms := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(objdump(t, "-T", lib)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || len(f[0]) < 8 || strings.Trim(f[0], "0123456789abcdef") != "" ||
			strings.Contains(sc.Text(), "*UND*") {
			continue
		}
		ver, name := f[len(f)-2], f[len(f)-1]
		if ver == "Base" || ver == name {
			continue
		}
		if strings.HasPrefix(ver, "(") {
			syms[name+"@"+strings.Trim(ver, "()")] = true
		} else {
			syms[name+"@@"+ver] = true
		}
	}
	return syms
}

// vrnicdNode is the drop-in's own node: what its librdmacm.so.1 calls in
// it (the CM requests on a context's connection), in no rdma-core.
const vrnicdNode = "VRNICD_PRIVATE_"

func withoutPrivate(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		if !strings.HasPrefix(n, vrnicdNode) {
			out = append(out, n)
		}
	}
	return out
}

// versionNodes returns lib's version definitions as "NODE" or
// "NODE<-PARENT", in order, without the BASE entry (the soname).
func versionNodes(t *testing.T, lib string) []string {
	t.Helper()
	var nodes []string
	in := false
	for _, line := range strings.Split(objdump(t, "-p", lib), "\n") {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "Version definitions:"):
			in = true
		case !in:
		case len(f) == 0 || strings.HasPrefix(line, "Version References:"):
			if len(nodes) > 0 || strings.HasPrefix(line, "Version References:") {
				return nodes
			}
		case len(f) == 4 && f[1] != "0x01":
			nodes = append(nodes, f[3])
		case len(f) == 1 && len(nodes) > 0 && !strings.Contains(nodes[len(nodes)-1], "<-"):
			nodes[len(nodes)-1] += "<-" + f[0]
		}
	}
	return nodes
}

func TestExportedSymbolsMatchRdmaCore(t *testing.T) {
	our := ourLib(t)
	sys := sysLib(t)
	needObjdump(t)

	if got, want := withoutPrivate(versionNodes(t, our)), versionNodes(t, sys); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("version nodes (NODE<-PARENT):\n ours %v\n rdma-core %v", got, want)
	}

	ours, theirs := exportedSymbols(t, our), exportedSymbols(t, sys)
	defaults := map[string]bool{}
	for s := range theirs {
		if name, _, ok := strings.Cut(s, "@@"); ok {
			defaults[name] = true
		}
	}
	var missing, extra, compat []string
	for s := range theirs {
		if ours[s] {
			continue
		}
		// The hidden IBVERBS_1.0 versions of names that have a 1.1 (or
		// later) default take rdma-core's 1.0-era structs (compat-1_0.c);
		// programs bind the default, so the drop-in may leave them out.
		if name, ver, ok := strings.Cut(s, "@"); ok && !strings.HasPrefix(ver, "@") &&
			ver == "IBVERBS_1.0" && defaults[name] {
			compat = append(compat, s)
			continue
		}
		missing = append(missing, s)
	}
	for s := range ours {
		if !theirs[s] && !strings.Contains(s, "@@"+vrnicdNode) {
			extra = append(extra, s)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	t.Logf("%d symbol versions in rdma-core's %s, %d in ours; %d compat-only IBVERBS_1.0 duplicates left out",
		len(theirs), sys, len(ours), len(compat))
	if len(missing) > 0 {
		t.Errorf("%d symbol versions rdma-core exports and %s does not:\n  %s",
			len(missing), our, strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("%d symbol versions %s exports and rdma-core does not:\n  %s",
			len(extra), our, strings.Join(extra, "\n  "))
	}
}

// loadEnv is the environment a program gets to load our library first,
// every symbol bound at start (LD_BIND_NOW) as Debian's programs are linked.
func loadEnv(libDir string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LD_") {
			env = append(env, kv)
		}
	}
	// LC_ALL=C: the loader's messages are translated otherwise.
	env = append(env, "LD_LIBRARY_PATH="+libDir, "LD_BIND_NOW=1", "LC_ALL=C")
	if p := os.Getenv(preloadEnv); p != "" {
		// A sanitized build: its runtimes first, leaks not reported (the
		// programs' own), any error fatal.
		env = append(env, "LD_PRELOAD="+p, "ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99:log_path="+sanLogPrefix(),
			"UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=99")
	}
	return append(env, extra...)
}

// sanLogPrefix is where a sanitized program's ASan writes its reports
// (log_path: PREFIX.PID) rather than into the output the tests read: a
// report a thread began as the process exited once cut an rping line in
// two, and the exit status stayed 0. checkSanLogs reads them.
func sanLogPrefix() string {
	sanLogOnce.Do(func() {
		if d, err := os.MkdirTemp("", "vrnic-asan"); err == nil {
			sanLogDir = d
		}
	})
	return filepath.Join(sanLogDir, "asan")
}

var (
	sanLogOnce sync.Once
	sanLogDir  string
)

// checkSanLogs fails t on every ASan report written since the last check
// (each is removed once read).
func checkSanLogs(t *testing.T) {
	t.Helper()
	if sanLogDir == "" {
		return
	}
	fs, _ := filepath.Glob(filepath.Join(sanLogDir, "asan.*"))
	for _, f := range fs {
		b, _ := os.ReadFile(f)
		os.Remove(f)
		if len(bytes.TrimSpace(b)) > 0 {
			t.Errorf("sanitizer report %s:\n%s", filepath.Base(f), b)
		}
	}
}

// run runs argv with env and stdin from /dev/null, killed after 5 s. It
// returns the combined output, whether it timed out, and the exit error.
func run(env []string, argv ...string) (out string, timedOut bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	cmd.WaitDelay = time.Second // a child keeping the pipe open must not hang us
	err = cmd.Run()
	return buf.String(), errors.Is(ctx.Err(), context.DeadlineExceeded), err
}

func loaderError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		for _, e := range loaderErrors {
			if strings.Contains(l, e) {
				return l
			}
		}
	}
	return ""
}

// samePath reports whether a and b name the same file.
func samePath(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// packageFiles lists an installed Debian package's files, or skips.
func packageFiles(t *testing.T, pkg string) []string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian system (no dpkg-query)")
	}
	st, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkg).Output()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(st)), " installed") {
		t.Skipf("%s is not installed: apt-get install -y %s", pkg, pkg)
	}
	out, err := exec.Command("dpkg", "-L", pkg).Output()
	if err != nil {
		t.Fatalf("dpkg -L %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

func isELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	n, _ := f.Read(magic)
	return n == 4 && string(magic) == "\x7fELF"
}

func TestDebianBinariesLoad(t *testing.T) {
	our := ourLib(t)
	dir := filepath.Dir(our)

	for _, pkg := range []string{"ibverbs-utils", "perftest", "rdmacm-utils"} {
		t.Run(pkg, func(t *testing.T) {
			var bins []string
			for _, f := range packageFiles(t, pkg) {
				if filepath.Dir(f) == "/usr/bin" && isELF(f) {
					bins = append(bins, f)
				}
			}
			if len(bins) == 0 {
				t.Fatalf("%s has no programs under /usr/bin", pkg)
			}
			for _, bin := range bins {
				t.Run(filepath.Base(bin), func(t *testing.T) {
					t.Parallel()
					checkBinary(t, bin, our, dir)
				})
			}
		})
	}

	t.Run("python3-pyverbs", func(t *testing.T) {
		files := packageFiles(t, "python3-pyverbs")
		// Debian's interpreter, the one pyverbs is built for (a python3
		// earlier on PATH, pyenv's say, does not see dist-packages).
		python := "/usr/bin/python3"
		if _, err := os.Stat(python); err != nil {
			t.Skipf("%s not found: apt-get install -y python3", python)
		}
		var mods []string
		for _, f := range files {
			i := strings.Index(f, "/pyverbs/")
			if !strings.HasSuffix(f, ".so") || i < 0 {
				continue
			}
			// .../dist-packages/pyverbs/providers/mlx5/mlx5dv.cpython-311-x86_64-linux-gnu.so
			// -> pyverbs.providers.mlx5.mlx5dv
			rel := strings.TrimSuffix(f[i+1:], ".so")
			rel, _, _ = strings.Cut(rel, ".")
			mods = append(mods, strings.ReplaceAll(rel, "/", "."))
		}
		if len(mods) == 0 {
			t.Fatal("python3-pyverbs lists no extension modules")
		}
		env := loadEnv(dir)

		// Python loads extensions through dlopen: the library in the
		// process must be ours, not the system's.
		out, _, err := run(env, python, "-c",
			"import pyverbs.device, sys; sys.stdout.write(open('/proc/self/maps').read())")
		if err != nil {
			t.Fatalf("import pyverbs.device: %v\n%s", err, out)
		}
		real, err := filepath.EvalSymlinks(our) // maps show resolved paths
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, real) {
			t.Fatalf("after import pyverbs.device, %s is not mapped; maps:\n%s", real, out)
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if p := f[len(f)-1]; strings.Contains(p, "libibverbs.so") && !samePath(p, our) {
				t.Fatalf("another libibverbs is mapped too: %s", l)
			}
		}

		for _, m := range mods {
			t.Run(m, func(t *testing.T) {
				t.Parallel()
				out, timedOut, err := run(env, python, "-c", "import "+m)
				if l := loaderError(out); l != "" {
					t.Fatalf("import %s: %s", m, l)
				}
				if err != nil && !timedOut {
					t.Fatalf("import %s: %v\n%s", m, err, out)
				}
			})
		}
	})
}

// checkBinary makes sure bin resolves libibverbs.so.1 to our file, then
// starts it with an argument that makes it exit at once: the loader binds
// every symbol@version before main, so a missing one is reported then.
func checkBinary(t *testing.T, bin, our, dir string) {
	out, _, err := run(loadEnv(dir, "LD_TRACE_LOADED_OBJECTS=1"), bin)
	if err != nil {
		t.Fatalf("LD_TRACE_LOADED_OBJECTS=1 %s: %v\n%s", bin, err, out)
	}
	resolved := ""
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "libibverbs.so.1" && f[1] == "=>" {
			resolved = f[2]
		}
	}
	switch {
	case resolved == "":
		t.Skipf("%s does not load libibverbs.so.1", bin)
	case !samePath(resolved, our):
		t.Fatalf("%s resolves libibverbs.so.1 to %s, not %s", bin, resolved, our)
	}

	out, timedOut, _ := run(loadEnv(dir), bin, "--help")
	if l := loaderError(out); l != "" {
		t.Fatalf("%s --help: %s", bin, l)
	}
	if timedOut {
		t.Logf("%s --help was still running after 5 s (killed); it loaded without a loader error", bin)
	}
}
