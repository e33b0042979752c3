package cabi

import (
	"strings"
	"testing"
	"time"
)

// UD multicast through the drop-in libibverbs as an application uses it
// (testprog/mcast.c says what each case checks): attach/detach rules,
// fan-out to another device's QPs, loopback to the sender's device,
// detach, BLOCK_SELF_MCAST_LB, unsupported creation flags. One process
// opens both devices (VRNICD_SOCKET=a:b).
func TestMcastVerbs(t *testing.T) {
	prog := buildProg(t, "mcast")
	tl, _ := devices(t, 1500)
	both := tool{tl[0].libDir, tl[0].socket + ":" + tl[1].socket, ""}
	out, err := both.run(t, 60*time.Second, prog)
	ok, failed, skipped := caseResults(out)
	if err != nil || len(failed) > 0 || len(skipped) > 0 || ok == 0 || !strings.Contains(out, "ok teardown") {
		t.Fatalf("%v; failed: %q, skipped: %q\n%s", err, failed, skipped, out)
	}
	t.Logf("%d cases ok\n%s", ok, out)
}
