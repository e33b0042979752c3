// Package rxepeer boots QEMU guests that run the Linux kernel's soft-RoCE
// driver (rdma_rxe) with rdma-core and perftest, so that Go tests can run the
// real kernel tools (ibv_rc_pingpong, ib_write_bw, rping, ...) against
// vrnicd, and wires them into private network namespaces.
//
// The guest image and the VM life cycle belong to the scripts in
// interop/vm (build, start, stop, exec); this package calls them, and speaks
// the guest's job spool (see interop/vm/guest/vr-agent) directly, so a
// command round trip costs a few milliseconds of host time rather than a
// bash process.
//
// A test typically does:
//
//	n := rxepeer.NewBridgeNetns(t, "192.0.2.1/24")
//	vm := rxepeer.Boot(t, rxepeer.Options{Netns: n, IP: "192.0.2.2/24"})
//	srv := vm.Start(fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n 3", vm.GIDIndex()))
//	if err := srv.WaitListen(ctx, 18515); err != nil { ... }
//	... connect from inside n (n.Do) ...
//	out, errOut, code, err := srv.Wait(ctx)
//
// Boot skips the test (with the reason) when it cannot run here: not root,
// no /dev/net/tun, no QEMU, no image and no apt-get to build one, or
// VRNICD_INTEROP=0. A failing image build on a host that has the tools is a
// test failure. Every VM is stopped by t.Cleanup, and the start script's
// watchdog stops it too if the test binary dies first (owner PID).
//
// Under TCG (no KVM) the guest is slow: boot takes ~6 s, and kernel rxe's
// retransmit timers and the tools' own timeouts fire late. Every wait here
// is bounded by a context or an explicit timeout.
package rxepeer
