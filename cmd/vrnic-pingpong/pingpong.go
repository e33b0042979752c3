package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// wr_ids and pending bits, as in the rdma-core examples.
const (
	recvWRID = 1
	sendWRID = 2
)

// grhRoom is what a UD receive buffer keeps in front of the data for the
// GRH the device writes there.
const grhRoom = 40

// udQKey is the Q_Key ud_pingpong gives its QP and sends with.
const udQKey = 0x11111111

// session is one pingpong: the device objects (rdma-core's struct
// pingpong_context) and the run's counters.
type session struct {
	cfg    *config
	dev    *verbs.Device
	pd     *verbs.PD
	buf    *verbs.Buffer
	mr     *verbs.MR
	cq     *verbs.CQ
	srq    *verbs.SRQ
	qps    []*verbs.QP
	ah     *verbs.AH
	flags  verbs.SendFlags
	local  []oob.PingpongDest
	remote []oob.PingpongDest

	routs   int
	pending []int // per QP
	page    int
}

// pingpong runs the tool once cfg is parsed.
func pingpong(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	dev, err := verbs.Open(cfg.socket)
	if err != nil {
		return fmt.Errorf("Couldn't get context for vrnicd at %s: %w", cfg.socket, err)
	}
	defer dev.Close()
	if cfg.ibDev != "" && cfg.ibDev != dev.Name() {
		return fmt.Errorf("IB device %s not found (vrnicd at %s serves %s)", cfg.ibDev, cfg.socket, dev.Name())
	}
	s := &session{cfg: cfg, dev: dev, page: os.Getpagesize()}
	if err := s.init(); err != nil {
		return err
	}
	defer s.close()

	n, err := s.postRecv(cfg.rxDepth) // to the QP, or to the SRQ that feeds them all
	if n < cfg.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d): %v", n, err)
	}
	s.routs = n
	if cfg.events {
		if err := s.cq.ReqNotify(false); err != nil {
			return fmt.Errorf("Couldn't request CQ notification: %w", err)
		}
	}
	if err := s.localAddresses(); err != nil {
		return err
	}
	for _, d := range s.local {
		printLocal(stdout, cfg.mode, d)
	}
	if err := s.exchange(ctx); err != nil {
		return err
	}
	for _, d := range s.remote {
		printRemote(stdout, d)
	}
	if cfg.servername != "" {
		if err := s.connect(); err != nil {
			return err
		}
	}
	elapsed, err := s.run(ctx)
	if err != nil {
		return err
	}
	printSummary(stdout, cfg.size, cfg.iters, elapsed)
	if cfg.servername == "" && cfg.validate {
		if bad := s.checkPages(stdout); bad > 0 {
			return fmt.Errorf("%d pages of the last message received differ from what the client sent", bad)
		}
	}
	if cfg.mode.name == "rc" || cfg.mode.name == "srq" {
		// Our loop can end before the peer's: if the ACK of its last
		// message was lost, its retransmission must still find the QP, or
		// kernel rxe (retry_cnt 7 is infinite there) retries for ever and
		// the kernel tool never exits. No end-of-run exchange tells us.
		select {
		case <-time.After(peerLinger):
		case <-ctx.Done():
		}
	}
	return nil
}

// peerLinger is how long the RC QPs stay after the loop, for the peer's
// retransmissions of its last message: several of its ACK timeouts (67 ms
// at the tools' timeout 14).
var peerLinger = 500 * time.Millisecond

// init makes the PD, buffer, MR, CQ, SRQ and QPs and brings the QPs to
// INIT, as pp_init_ctx does.
func (s *session) init() error {
	cfg := s.cfg
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return fmt.Errorf("Couldn't allocate PD: %w", err)
	}
	bufSize := cfg.size
	if cfg.mode.name == "ud" {
		port, err := s.dev.QueryPort(1)
		if err != nil {
			return fmt.Errorf("Unable to query port info for port 1: %w", err)
		}
		if mtu := verbs.MTU(port.ActiveMTU).Bytes(); cfg.size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
		bufSize += grhRoom
	}
	if s.buf, err = s.pd.AllocBuffer(bufSize); err != nil {
		return fmt.Errorf("Couldn't allocate work buf: %w", err)
	}
	if cfg.mode.name != "srq" {
		// rdma-core: "FIXME memset(ctx->buf, 0, size)"; the pattern is
		// what a peer sees when it validates nothing.
		for i := range s.buf.Bytes()[:bufSize] {
			s.buf.Bytes()[i] = 0x7b
		}
	}
	if s.mr, err = s.pd.RegMRRange(s.buf, 0, uint64(bufSize), s.buf.Addr(), verbs.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	cqe := cfg.rxDepth + 1
	if cfg.mode.name == "srq" {
		cqe = cfg.rxDepth + cfg.numQP
	}
	if s.cq, err = s.dev.CreateCQ(cqe, cfg.events); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	typ := verbs.QPTypeRC
	switch cfg.mode.name {
	case "uc":
		typ = verbs.QPTypeUC
	case "ud":
		typ = verbs.QPTypeUD
	case "srq":
		if s.srq, err = s.pd.CreateSRQ(verbs.SRQInitAttr{MaxWR: uint32(cfg.rxDepth), MaxSGE: 1}); err != nil {
			return fmt.Errorf("Couldn't create SRQ: %w", err)
		}
	}
	s.flags = verbs.SendSignaled
	for i := range cfg.numQP {
		c := verbs.QPCap{MaxSendWR: 1, MaxSendSGE: 1}
		if s.srq == nil {
			c.MaxRecvWR, c.MaxRecvSGE = uint32(cfg.rxDepth), 1
		}
		qp, err := s.pd.CreateQP(verbs.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq, Cap: c})
		if err != nil {
			if cfg.numQP > 1 {
				return fmt.Errorf("Couldn't create QP[%d]: %w", i, err)
			}
			return fmt.Errorf("Couldn't create QP: %w", err)
		}
		s.qps = append(s.qps, qp)
		if int(qp.Cap().MaxInlineData) >= cfg.size {
			s.flags |= verbs.SendInline
		}
	}
	for i, qp := range s.qps {
		attr := verbs.QPAttr{State: verbs.QPStateInit, PKeyIndex: 0, Port: 1}
		mask := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort
		if typ == verbs.QPTypeUD {
			attr.QKey = udQKey
			mask |= verbs.QPAttrQKey
		} else {
			mask |= verbs.QPAttrAccessFlags
		}
		if err := qp.Modify(&attr, mask); err != nil {
			if cfg.numQP > 1 {
				return fmt.Errorf("Failed to modify QP[%d] to INIT: %w", i, err)
			}
			return fmt.Errorf("Failed to modify QP to INIT: %w", err)
		}
	}
	s.pending = make([]int, len(s.qps))
	return nil
}

func (s *session) close() {
	if s.ah != nil {
		s.ah.Destroy()
	}
	for _, qp := range s.qps {
		qp.Destroy()
	}
	if s.srq != nil {
		s.srq.Destroy()
	}
	if s.cq != nil {
		s.cq.Destroy()
	}
	if s.mr != nil {
		s.mr.Dereg()
	}
	if s.buf != nil {
		s.buf.Close()
	}
	if s.pd != nil {
		s.pd.Dealloc()
	}
}

// postRecv posts up to n receives (pp_post_recv) and says how many went.
func (s *session) postRecv(n int) (int, error) {
	length := s.cfg.size
	if s.cfg.mode.name == "ud" {
		length += grhRoom
	}
	wr := verbs.RecvWR{ID: recvWRID, SGL: []verbs.SGE{s.mr.SGE(0, uint64(length))}}
	for i := range n {
		var err error
		if s.srq != nil {
			err = s.srq.PostRecv(wr)
		} else {
			err = s.qps[0].PostRecv(wr)
		}
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// postSend posts the message on QP i (pp_post_send).
func (s *session) postSend(i int) error {
	wr := verbs.SendWR{ID: sendWRID, Opcode: verbs.WRSend, Flags: s.flags, SGL: []verbs.SGE{s.mr.SGE(0, uint64(s.cfg.size))}}
	if s.cfg.mode.name == "ud" {
		wr.SGL[0] = s.mr.SGE(grhRoom, uint64(s.cfg.size))
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.remote[0].QPN, udQKey
	}
	return s.qps[i].PostSend(wr)
}

// localAddresses picks each QP's PSN and the GID, as main() does.
func (s *session) localAddresses() error {
	cfg := s.cfg
	if cfg.gidx < 0 {
		// rdma-core goes on with a zero GID and fails to connect: RoCE
		// has no LIDs, every QP needs a GID. Say so before the peer waits.
		return errors.New("no GID index: RoCE needs one; pass -g (the IPv4-mapped GID is usually 1)")
	}
	gid, err := s.dev.QueryGID(1, cfg.gidx)
	if err == nil && gid.IsZero() {
		err = errors.New("empty GID table slot")
	}
	if err != nil {
		if cfg.mode.name == "rc" || cfg.mode.name == "uc" {
			return fmt.Errorf("can't read sgid of index %d: %v", cfg.gidx, err)
		}
		return fmt.Errorf("Could not get local gid for gid index %d: %v", cfg.gidx, err)
	}
	for _, qp := range s.qps {
		s.local = append(s.local, oob.PingpongDest{LID: 0, QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: gid})
	}
	return nil
}

// exchange swaps addresses with the peer over TCP; the server brings its
// QPs to RTS before it answers.
func (s *session) exchange(ctx context.Context) error {
	cfg := s.cfg
	local := s.local
	if cfg.mode.name == "srq" {
		local = make([]oob.PingpongDest, oob.SRQPingpongSlots)
		copy(local, s.local)
	}
	conn, err := oob.Connect(ctx, "tcp", cfg.servername, cfg.port, onListen)
	if err != nil {
		return err
	}
	defer conn.Close()
	var remote []oob.PingpongDest
	if cfg.servername != "" {
		if remote, err = conn.PingpongClient(ctx, local); err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
	} else {
		remote, err = conn.PingpongServer(ctx, local, func(r []oob.PingpongDest) error {
			s.remote = r[:len(s.qps)]
			if err := s.connect(); err != nil {
				return fmt.Errorf("Couldn't connect to remote QP: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	s.remote = remote[:len(s.qps)]
	return nil
}

// connect brings the QPs to RTR and RTS against the remote addresses
// (pp_connect_ctx): the attributes rdma-core sets, the AV global with hop
// limit 1 from the peer's GID.
func (s *session) connect() error {
	cfg := s.cfg
	for i, qp := range s.qps {
		dest := s.remote[i]
		// srq_pingpong takes the GID of the first remote address for all.
		if g := s.remote[0].GID; binaryZero(g[8:]) {
			return fmt.Errorf("the peer sent no GID (was it started with -g?): RoCE needs one")
		}
		av := verbs.AHAttr{DGID: s.remote[0].GID, SGIDIndex: uint8(cfg.gidx), HopLimit: 1, SL: uint8(cfg.sl), Port: 1}
		if cfg.mode.name == "ud" {
			rtr := verbs.QPAttr{State: verbs.QPStateRTR}
			if err := qp.Modify(&rtr, verbs.QPAttrState); err != nil {
				return fmt.Errorf("Failed to modify QP to RTR: %w", err)
			}
			rts := verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: s.local[i].PSN}
			if err := qp.Modify(&rts, verbs.QPAttrState|verbs.QPAttrSQPSN); err != nil {
				return fmt.Errorf("Failed to modify QP to RTS: %w", err)
			}
			ah, err := s.pd.CreateAH(av)
			if err != nil {
				return fmt.Errorf("Failed to create AH: %w", err)
			}
			s.ah = ah
			continue
		}
		rc := cfg.mode.name != "uc"
		attr := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: mtuEnum(cfg.mtu), DestQPN: dest.QPN, RQPSN: dest.PSN, AV: av}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN
		if rc {
			attr.MaxDestRdAtomic, attr.MinRNRTimer = 1, 12
			mask |= verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify %s to RTR: %w", qpName(cfg, i), err)
		}
		attr.State, attr.SQPSN = verbs.QPStateRTS, s.local[i].PSN
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN
		if rc {
			attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = 14, 7, 7, 1
			mask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		}
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify %s to RTS: %w", qpName(cfg, i), err)
		}
	}
	return nil
}

func qpName(cfg *config, i int) string {
	if cfg.mode.name == "srq" {
		return fmt.Sprintf("QP[%d]", i)
	}
	return "QP"
}

func binaryZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func mtuEnum(bytes int) verbs.MTU {
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if m.Bytes() == bytes {
			return m
		}
	}
	return verbs.MTU1024
}

// onListen, if set, is told the server's address once it listens (tests
// start the client then, on the port -p 0 chose).
var onListen func(net.Addr)

// stallTimeout bounds the wait for any completion: UC and UD lose
// messages silently, where the rdma-core tools would wait forever.
var stallTimeout = 60 * time.Second

// run is the ping-pong loop of main(): the client sends first; each side
// sends again once its previous send and a receive have completed, until
// iters of each; receives are reposted when few are left.
func (s *session) run(ctx context.Context) (time.Duration, error) {
	cfg := s.cfg
	for i := range s.pending {
		s.pending[i] = recvWRID
	}
	if cfg.servername != "" {
		if cfg.validate {
			data := s.buf.Bytes()
			off := 0
			if cfg.mode.name == "ud" {
				off = grhRoom
			}
			for i := 0; i < cfg.size; i += s.page {
				data[off+i] = 0 // rdma-core's i / page_size % sizeof(char): always 0
			}
		}
		for i := range s.qps {
			if err := s.postSend(i); err != nil {
				return 0, fmt.Errorf("Couldn't post send: %w", err)
			}
			s.pending[i] |= sendWRID
		}
	}
	start := time.Now()
	rcnt, scnt := 0, 0
	wc := make([]verbs.WC, len(s.qps)+cfg.rxDepth)
	lastProgress := time.Now()
	for rcnt < cfg.iters || scnt < cfg.iters {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		var n int
		if cfg.events {
			wctx, cancel := context.WithTimeout(ctx, stallTimeout)
			err := s.cq.WaitEvent(wctx)
			cancel()
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					return 0, fmt.Errorf("no completion for %v after %d sends and %d receives (a lost UC/UD message, or the peer is gone)", stallTimeout, scnt, rcnt)
				}
				return 0, fmt.Errorf("Failed to get cq_event: %w", err)
			}
			if err := s.cq.ReqNotify(false); err != nil {
				return 0, fmt.Errorf("Couldn't request CQ notification: %w", err)
			}
			n = s.cq.Poll(wc)
		} else {
			var spin tool.Spinner
			for n = s.cq.Poll(wc); n == 0; n = s.cq.Poll(wc) {
				if time.Since(lastProgress) > stallTimeout {
					return 0, fmt.Errorf("no completion for %v after %d sends and %d receives (a lost UC/UD message, or the peer is gone)", stallTimeout, scnt, rcnt)
				}
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				spin.Idle()
			}
			lastProgress = time.Now()
		}
		for _, w := range wc[:n] {
			if err := s.completion(w, &scnt, &rcnt); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// completion handles one work completion (parse_single_wc).
func (s *session) completion(w verbs.WC, scnt, rcnt *int) error {
	cfg := s.cfg
	if w.Status != verbs.WCSuccess {
		return fmt.Errorf("Failed status %s (%d) for wr_id %d", wcStatusStr(w.Status), w.Status, int(w.WRID))
	}
	qi := 0
	if len(s.qps) > 1 {
		qi = -1
		for i, qp := range s.qps {
			if qp.QPN() == w.QPN {
				qi = i
			}
		}
		if qi < 0 {
			return fmt.Errorf("Couldn't find QPN %06x", w.QPN)
		}
	}
	switch w.WRID {
	case sendWRID:
		*scnt++
	case recvWRID:
		low := 1
		if s.srq != nil {
			low = cfg.numQP
		}
		if s.routs--; s.routs <= low {
			n, err := s.postRecv(cfg.rxDepth - s.routs)
			s.routs += n
			if s.routs < cfg.rxDepth {
				return fmt.Errorf("Couldn't post receive (%d): %v", s.routs, err)
			}
		}
		*rcnt++
	default:
		return fmt.Errorf("Completion for unknown wr_id %d", int(w.WRID))
	}
	s.pending[qi] &^= int(w.WRID)
	if *scnt < cfg.iters && s.pending[qi] == 0 {
		if err := s.postSend(qi); err != nil {
			return fmt.Errorf("Couldn't post send: %w", err)
		}
		s.pending[qi] = recvWRID | sendWRID
	}
	return nil
}

// checkPages is the server's -c check: the first byte of each page of the
// last message must be what the client put there (0).
func (s *session) checkPages(w io.Writer) int {
	data := s.buf.Bytes()
	off := 0
	if s.cfg.mode.name == "ud" {
		off = grhRoom
	}
	bad := 0
	for i := 0; i < s.cfg.size; i += s.page {
		if data[off+i] != 0 {
			fmt.Fprintf(w, "invalid data in page %d\n", i/s.page)
			bad++
		}
	}
	return bad
}

// wcStatusStr is ibv_wc_status_str.
func wcStatusStr(st verbs.WCStatus) string {
	names := [...]string{"success", "local length error", "local QP operation error", "local EE context operation error",
		"local protection error", "Work Request Flushed Error", "memory management operation error", "bad response error",
		"local access error", "remote invalid request error", "remote access error", "remote operation error",
		"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
		"remote invalid RD request", "aborted error", "invalid EE context number", "invalid EE context state",
		"fatal error", "response timeout error", "general error"}
	if int(st) < len(names) {
		return names[st]
	}
	return "unknown"
}
