package version_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Every program of the module prints "NAME VERSION (GO)" for --version
// alone, exits 0, and all agree on VERSION (one build, one version).
func TestEveryProgramPrintsOneVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every program")
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir, "github.com/vrnic/vrnicd/cmd/...")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "proctest" {
			continue
		}
		out, err := exec.Command(filepath.Join(dir, e.Name()), "--version").Output()
		f := strings.Fields(string(out))
		if err != nil || len(f) != 3 || f[0] != e.Name() || !strings.HasPrefix(f[2], "(go") {
			t.Errorf("%s --version: %v, %q; want %q", e.Name(), err, out, e.Name()+" VERSION (goX.Y)")
			continue
		}
		versions[e.Name()] = f[1]
	}
	if len(versions) < 10 {
		t.Errorf("only %d programs answered: %v", len(versions), versions)
	}
	var first string
	for name, v := range versions {
		if first == "" {
			first = v
		}
		if v != first {
			t.Errorf("versions differ: %v", versions)
			break
		}
		_ = name
	}
	t.Logf("%d programs, version %s", len(versions), first)
}
