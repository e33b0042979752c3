package cabi

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// pyverbsScript uses rdma-core's Python bindings as programs do: list the
// devices, open one, query it, and make a PD, an MR (written and read
// back through the MR's own view), a CQ, a completion channel and RC and
// UD QPs, moved to INIT; then frees everything.
const pyverbsScript = `
import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.cq import CQ, CompChannel
from pyverbs.qp import QPInitAttr, QPCap, QP, QPAttr
lst = d.get_device_list()
assert len(lst) == 1, lst
ctx = d.Context(name=lst[0].name.decode())
a = ctx.query_device()
assert a.max_qp > 0 and a.phys_port_cnt == 1
p = ctx.query_port(1)
assert p.state == e.IBV_PORT_ACTIVE
gid = ctx.query_gid(1, 1)
pd = PD(ctx)
mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
mr.write(b"vrnicd", 6)
assert mr.read(6, 0) == b"vrnicd"
ch = CompChannel(ctx)
cq = CQ(ctx, 16, None, ch, 0)
for t in (e.IBV_QPT_RC, e.IBV_QPT_UD):
    qp = QP(pd, QPInitAttr(qp_type=t, scq=cq, rcq=cq, cap=QPCap(max_send_wr=8, max_recv_wr=8)))
    attr = QPAttr(port_num=1)
    if t == e.IBV_QPT_UD:
        attr.qkey = 0x11111111
    qp.to_init(attr)
    assert qp.qp_state == e.IBV_QPS_INIT
    qp.close()
cq.close(); ch.close(); mr.close(); pd.close(); ctx.close()
print("pyverbs ok", gid)
`

func TestPyverbs(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import pyverbs").Run(); err != nil {
		t.Skip("pyverbs is not installed: apt-get install python3-pyverbs")
	}
	tl, _ := devices(t, 1500)
	out, err := tl[0].run(t, 30*time.Second, py, "-c", pyverbsScript)
	if err != nil || !strings.Contains(out, "pyverbs ok") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
}
