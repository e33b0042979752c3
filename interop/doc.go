// Package interop holds vrnicd's interop suite: Go tests that run the Linux
// kernel's soft-RoCE driver (rdma_rxe) and its tools in QEMU guests against
// vrnicd, on private network namespaces. interop/vm has the scripts that
// build and run the guests, interop/rxepeer the harness the tests use.
// Run it with `make interop` (root; builds the guest image first).
package interop
