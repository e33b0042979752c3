// Package cabi holds the Go tests of the drop-in C libraries built by
// `make cabi` (cabi/cabi.mk): lib/vrnicd/libibverbs.so.1, which unmodified
// programs load through LD_LIBRARY_PATH instead of rdma-core's.
//
// The tests build nothing; they skip when the library has not been built.
// They check its ABI against the installed rdma-core: the exported
// symbol@version set, and that Debian's verbs programs and pyverbs load
// with it (every program is linked BIND_NOW, so one missing symbol@version
// stops it at start).
package cabi
