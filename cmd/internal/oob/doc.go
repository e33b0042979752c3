// Package oob speaks the out-of-band TCP exchanges the kernel RDMA test
// tools use to swap QP addresses before they talk RoCE, byte for byte, so
// that either side of a run can be a vrnic tool or the real one:
//
//   - rdma-core's ibv_rc/uc/ud/srq_pingpong (libibverbs/examples): the
//     client sends each QP's 52-byte "LID:QPN:PSN:GID" string, the server
//     brings its QPs to RTS and answers with its own, the client ends with
//     "done" (PingpongClient, PingpongServer);
//   - perftest (ib_write_bw, ib_read_lat, …): version strings, page and
//     cache line sizes, the MTU, then 108-byte address lines used both to
//     swap addresses and as barriers, the bandwidth reports, "done"
//     (Perftest).
//
// Every read and write is bounded (Conn.Timeout, the context), so a peer
// that stops answering, closes early or sends garbage gives an error that
// says which message failed and how — never a hang. The codecs are strict:
// a message that is not exactly what the tools write is rejected.
//
// The golden captures in testdata/roce (kernel tools on kernel rxe) are
// the reference: the tests decode every message the tools sent there,
// re-encode it to the same bytes, and replay each capture against this
// package's client and server.
package oob
