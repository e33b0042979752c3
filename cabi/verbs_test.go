package cabi

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// caseLine is one case's result line in the output of testprog's
// programs (cases.h): ok, FAIL or SKIP, the case, and why.
var caseLine = regexp.MustCompile(`(?m)^(ok|FAIL|SKIP) ([a-z0-9_]+)(: .*)?$`)

// caseResults reads a testprog program's output (cases.h): how many cases
// passed, and the failed and skipped ones with why.
func caseResults(out string) (ok int, failed, skipped []string) {
	for _, m := range caseLine.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "ok":
			ok++
		case "FAIL":
			failed = append(failed, m[2]+m[3])
		case "SKIP":
			skipped = append(skipped, m[2]+m[3])
		}
	}
	return ok, failed, skipped
}

// The verbs Debian's programs do not reach, as an application uses them
// (testprog/verbs.c says what each case checks): every ibv_post_send
// opcode rxe has, the ibv_wr_* API, ibv_create_cq_ex's poll API, memory
// windows, MR layouts (shared pages, MRs over several segments, stack and
// static buffers, 16 MiB), CQ resize and completion channels, SRQs,
// ibv_query_qp, UD address handles from a receive, and fork after
// ibv_reg_mr. One process opens both devices (VRNICD_SOCKET=a:b) and
// connects them directly; the path MTU is 4096 on a 4200-byte link and
// 1024 on a 1500-byte one.
func TestVerbsCoverage(t *testing.T) {
	prog := buildProg(t, "verbs")
	for _, tc := range []struct{ linkMTU, pathMTU int }{{4200, 4096}, {1500, 1024}} {
		t.Run(fmt.Sprintf("mtu%d", tc.linkMTU), func(t *testing.T) {
			tl, _ := devices(t, tc.linkMTU)
			both := tool{tl[0].libDir, tl[0].socket + ":" + tl[1].socket, ""}
			out, err := both.run(t, 90*time.Second, prog, fmt.Sprint(tc.pathMTU))
			ok, failed, skipped := caseResults(out)
			if err != nil || len(failed) > 0 || ok == 0 || !strings.Contains(out, "ok teardown") {
				t.Fatalf("%v; failed: %q\n%s", err, failed, out)
			}
			for _, s := range skipped {
				t.Logf("skipped: %s", s)
			}
			t.Logf("%d cases ok\n%s", ok, out)
		})
	}
}
