package cabi

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The drop-in librdmacm.so.1's ABI, as abi_test.go checks libibverbs': the
// symbol@version set against the installed rdma-core's, and Debian's
// librdmacm programs loading both drop-ins. Its library is the one beside
// the libibverbs under test (lib/vrnicd, or VRNIC_CABI_IBVERBS's directory:
// a sanitized build has both there).

// ourRdmacm returns the absolute path of the drop-in librdmacm.so.1 beside
// ourLib's libibverbs.so.1, or skips.
func ourRdmacm(t *testing.T) string {
	t.Helper()
	p := filepath.Join(filepath.Dir(ourLib(t)), "librdmacm.so.1")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not built (run `make cabi`; it needs librdmacm-dev): %v", p, err)
	}
	return p
}

// sysRdmacm returns rdma-core's installed librdmacm.so.1, or skips.
func sysRdmacm(t *testing.T) string {
	t.Helper()
	return sysLibrary(t, "librdmacm.so.1", "librdmacm1 librdmacm-dev")
}

// dynamicEntries returns lib's dynamic section entries of one tag (NEEDED,
// SONAME, RPATH, RUNPATH), as objdump -p prints them.
func dynamicEntries(t *testing.T, lib, tag string) []string {
	t.Helper()
	var vals []string
	for _, line := range strings.Split(objdump(t, "-p", lib), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == tag {
			vals = append(vals, f[1])
		}
	}
	return vals
}

func TestRdmacmExportedSymbolsMatchRdmaCore(t *testing.T) {
	our := ourRdmacm(t)
	sys := sysRdmacm(t)
	needObjdump(t)

	// No private node here: librdmacm is the caller of libibverbs' one.
	if got, want := versionNodes(t, our), versionNodes(t, sys); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("version nodes (NODE<-PARENT):\n ours %v\n rdma-core %v", got, want)
	}

	ours, theirs := exportedSymbols(t, our), exportedSymbols(t, sys)
	var missing, extra []string
	for s := range theirs {
		if !ours[s] {
			missing = append(missing, s)
		}
	}
	for s := range ours {
		if !theirs[s] {
			extra = append(extra, s)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	t.Logf("%d symbol versions in rdma-core's %s, %d in ours", len(theirs), sys, len(ours))
	if len(missing) > 0 {
		t.Errorf("%d symbol versions rdma-core exports and %s does not:\n  %s",
			len(missing), our, strings.Join(missing, "\n  "))
	}
	if len(extra) > 0 {
		t.Errorf("%d symbol versions %s exports and rdma-core does not:\n  %s",
			len(extra), our, strings.Join(extra, "\n  "))
	}

	// Found as librdmacm.so.1, needing libibverbs.so.1 by that name (so the
	// drop-in beside it), with no RPATH overriding LD_LIBRARY_PATH.
	if got := dynamicEntries(t, our, "SONAME"); strings.Join(got, " ") != "librdmacm.so.1" {
		t.Errorf("SONAME %v, want librdmacm.so.1", got)
	}
	needed := dynamicEntries(t, our, "NEEDED")
	hasVerbs := false
	for _, n := range needed {
		hasVerbs = hasVerbs || n == "libibverbs.so.1"
	}
	if !hasVerbs {
		t.Errorf("NEEDED %v: no libibverbs.so.1", needed)
	}
	for _, tag := range []string{"RPATH", "RUNPATH"} {
		if got := dynamicEntries(t, our, tag); len(got) > 0 {
			t.Errorf("%s %v: the library must be found through LD_LIBRARY_PATH alone", tag, got)
		}
	}
}

// rdmacmLoaderError is loaderError, plus what the loader says when a
// version node of librdmacm (or any other) is missing.
func rdmacmLoaderError(out string) string {
	if l := loaderError(out); l != "" {
		return l
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "version `RDMACM") || strings.Contains(l, "version 'RDMACM") ||
			strings.Contains(l, "not found (required by") {
			return l
		}
	}
	return ""
}

// TestRdmacmProgramsLoad starts every program of rdmacm-utils and perftest
// with our directory first: each must resolve both libibverbs.so.1 and
// librdmacm.so.1 to ours and bind every symbol@version (LD_BIND_NOW, as
// they are linked) without a loader error.
func TestRdmacmProgramsLoad(t *testing.T) {
	verbs := ourLib(t)
	rdmacm := ourRdmacm(t)
	dir := filepath.Dir(verbs)

	for _, pkg := range []string{"rdmacm-utils", "perftest"} {
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
					checkRdmacmBinary(t, bin, map[string]string{
						"libibverbs.so.1": verbs, "librdmacm.so.1": rdmacm}, dir)
				})
			}
		})
	}

	// pyverbs' rdma_cm module (a dlopen, not a program's DT_NEEDED).
	t.Run("pyverbs.cmid", func(t *testing.T) {
		packageFiles(t, "python3-pyverbs") // skips if not installed
		python := "/usr/bin/python3"
		if _, err := os.Stat(python); err != nil {
			t.Skipf("%s not found: apt-get install -y python3", python)
		}
		out, _, err := run(loadEnv(dir), python, "-c",
			"import pyverbs.cmid, sys; sys.stdout.write(open('/proc/self/maps').read())")
		if l := rdmacmLoaderError(out); l != "" || err != nil {
			t.Fatalf("import pyverbs.cmid: %v %s\n%s", err, l, out)
		}
		real, err := filepath.EvalSymlinks(rdmacm) // maps show resolved paths
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, real) {
			t.Fatalf("after import pyverbs.cmid, %s is not mapped", real)
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 0 {
				continue
			}
			if p := f[len(f)-1]; strings.Contains(p, "librdmacm.so") && !samePath(p, rdmacm) {
				t.Fatalf("another librdmacm is mapped too: %s", l)
			}
		}
	})
}

// checkRdmacmBinary makes sure bin resolves each library of want (soname ->
// our file) to ours, then starts it with --help: the loader binds every
// symbol@version before main, so a missing one is reported then.
func checkRdmacmBinary(t *testing.T, bin string, want map[string]string, dir string) {
	out, _, err := run(loadEnv(dir, "LD_TRACE_LOADED_OBJECTS=1"), bin)
	if err != nil {
		t.Fatalf("LD_TRACE_LOADED_OBJECTS=1 %s: %v\n%s", bin, err, out)
	}
	resolved := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "=>" {
			resolved[f[0]] = f[2]
		}
	}
	if resolved["librdmacm.so.1"] == "" {
		t.Skipf("%s does not load librdmacm.so.1", bin)
	}
	for soname, our := range want {
		if got := resolved[soname]; !samePath(got, our) {
			t.Fatalf("%s resolves %s to %q, not %s", bin, soname, got, our)
		}
	}

	out, timedOut, _ := run(loadEnv(dir), bin, "--help")
	if l := rdmacmLoaderError(out); l != "" {
		t.Fatalf("%s --help: %s", bin, l)
	}
	if timedOut {
		t.Logf("%s --help was still running after 5 s (killed); it loaded without a loader error", bin)
	}
}

// TestRdmacmLocal runs testprog/rdmacm_local.c on the drop-in: what
// librdmacm answers without a daemon (rdma_event_str, the rsocket calls
// and rpoll/rselect, rdma_getaddrinfo). The rsocket calls must say why
// they fail, once per process.
func TestRdmacmLocal(t *testing.T) {
	ourRdmacm(t)
	dir := filepath.Dir(ourLib(t))
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	prog := filepath.Join(t.TempDir(), "rdmacm_local")
	if b, err := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-o", prog,
		filepath.Join("testprog", "rdmacm_local.c"), "-lrdmacm").CombinedOutput(); err != nil {
		t.Skipf("building rdmacm_local (apt-get install librdmacm-dev): %v\n%s", err, b)
	}
	out, timedOut, err := run(loadEnv(dir), prog)
	if l := rdmacmLoaderError(out); l != "" {
		t.Fatalf("rdmacm_local: %s", l)
	}
	if err != nil || timedOut || !strings.Contains(out, "rdmacm_local: ok") {
		t.Fatalf("rdmacm_local (timed out: %v): %v\n%s", timedOut, err, out)
	}
	const msg = "vrnicd's librdmacm has no rsockets"
	if n := strings.Count(out, msg); n != 1 {
		t.Fatalf("%q printed %d times, want once:\n%s", msg, n, out)
	}
	if !strings.Contains(out, "rsocket: "+msg) {
		t.Fatalf("the message does not name the first call (rsocket):\n%s", out)
	}
}
