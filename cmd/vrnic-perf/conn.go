package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/verbsock/verbs"
)

// establish opens the TCP connection (the rdma_cm channel with -z or
// -R) and makes perftest's first exchanges: versions, page and cache line
// sizes (the larger of each is used), the MTU (the smaller).
func (s *session) establish(ctx context.Context) error {
	p := s.p
	var err error
	if p.cmComm {
		if err := s.connectChannel(ctx); err != nil {
			return err
		}
	} else {
		if s.conn, err = oob.Connect(ctx, "tcp4", p.servername, p.port, onListen); err != nil {
			return err
		}
		s.comm = s.conn.Perftest(p.client())
	}
	if _, err := s.comm.ExchangeVersions(ctx, oob.PerftestVersion); err != nil {
		return err
	}
	s.cycle, s.cacheLine = os.Getpagesize(), cacheLineSize()
	rc, rl, err := s.comm.ExchangeSysData(ctx, int32(s.cycle), int32(s.cacheLine))
	if err != nil {
		return err
	}
	s.cycle, s.cacheLine = max(s.cycle, int(rc)), max(s.cacheLine, int(rl))
	rm, err := s.comm.ExchangeMTU(ctx, int(s.mtu))
	if err != nil {
		return err
	}
	s.mtu = verbs.MTU(oob.NegotiateMTU(int(s.mtu), rm))
	return nil
}

// setUpConnection is set_up_connection: the GID (-x, else the first
// IPv4-mapped one, as get_best_gid_index picks), and each QP's address:
// QPN, a random PSN, the MR's rkey, and the QP's half of the buffer that
// the peer reads or writes.
func (s *session) setUpConnection() error {
	p := s.p
	if !p.useGIDUser {
		idx, err := s.bestGIDIndex()
		if err != nil {
			return err
		}
		p.gidIndex = idx
	}
	gid, err := s.dev.QueryGID(uint8(p.ibPort), p.gidIndex)
	if err == nil && gid.IsZero() {
		err = errors.New("empty GID table slot")
	}
	if err != nil {
		return fmt.Errorf(" Unable to set up socket connection: GID index %d: %v", p.gidIndex, err)
	}
	for i, qp := range s.qps {
		s.my = append(s.my, oob.PerftestDest{LID: 0, OutReads: uint16(p.outReads), QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.RKey(), VAddr: s.buf.Addr() + uint64(p.numQPs+i)*s.bsize, GID: gid})
	}
	s.rem = make([]oob.PerftestDest, len(s.my))
	return nil
}

func (s *session) bestGIDIndex() (int, error) {
	port, err := s.dev.QueryPort(uint8(s.p.ibPort))
	if err != nil {
		return 0, err
	}
	for i := 0; i < int(port.GIDTblLen); i++ {
		g, err := s.dev.QueryGID(uint8(s.p.ibPort), i)
		if err != nil {
			return 0, fmt.Errorf(" Unable to set up socket connection: %w", err)
		}
		if isV4Mapped(g) {
			return i, nil
		}
	}
	return 0, nil
}

func isV4Mapped(g verbs.GID) bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// handshake exchanges QP i's address with the peer.
func (s *session) handshake(ctx context.Context, i int, wait time.Duration) error {
	d, err := s.comm.HandShake(ctx, s.my[i], wait)
	if err != nil {
		return fmt.Errorf(" Failed to exchange data between server and clients: %w", err)
	}
	s.rem[i] = d
	return nil
}

// handshakeAll exchanges every QP's address, printing the peer's with print.
func (s *session) handshakeAll(ctx context.Context, print bool) error {
	for i := range s.qps {
		if err := s.handshake(ctx, i, 0); err != nil {
			return err
		}
		if print {
			printAddress(s.out, s.p, true, s.rem[i])
		}
	}
	return nil
}

// checkGIDs is ctx_check_gid_compatibility: both IPv4 or both IPv6.
func (s *session) checkGIDs() error {
	if isV4Mapped(verbs.GID(s.my[0].GID)) != isV4Mapped(verbs.GID(s.rem[0].GID)) {
		return fmt.Errorf("\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n")
	}
	return nil
}

// connect is ctx_connect: every QP to RTR, and to RTS on the side that
// sends (the client of a bandwidth test, both sides of a latency test),
// with perftest's attributes.
func (s *session) connect() error {
	p := s.p
	for i, qp := range s.qps {
		d := s.rem[i]
		attr := verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: s.mtu, DestQPN: d.QPN, RQPSN: d.PSN,
			MaxDestRdAtomic: uint8(min(s.my[i].OutReads, 255)), MinRNRTimer: 12,
			AV: verbs.AHAttr{DGID: d.GID, SGIDIndex: uint8(p.gidIndex), HopLimit: 0xff, SL: uint8(p.sl), Port: uint8(p.ibPort)}}
		mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
			verbs.QPAttrMinRNRTimer | verbs.QPAttrMaxDestRdAtomic
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPN(), err)
		}
		if !p.test.lat && !p.client() {
			continue
		}
		// The peer's outstanding reads, as far as this device goes.
		rd := min(int(d.OutReads), s.maxRdAtom, 255)
		attr.State, attr.SQPSN, attr.Timeout, attr.RetryCnt, attr.RNRRetry, attr.MaxRdAtomic = verbs.QPStateRTS, s.my[i].PSN, p.qpTimeout, 7, 7, uint8(rd)
		mask = verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		if err := qp.Modify(&attr, mask); err != nil {
			return fmt.Errorf("Failed to modify QP to RTS: %w", err)
		}
	}
	return nil
}

// printLocal prints this side's address of every QP (ctx_print_pingpong_data
// with "local"); handshakeAll prints the peer's as they arrive.
func (s *session) printLocal() {
	for _, d := range s.my {
		printAddress(s.out, s.p, false, d)
	}
}

// exchangeAndConnect swaps every QP's address with the peer, checks the
// GID types agree and connects the QPs, as each test's main() does (with
// -R only the swap).
func (s *session) exchangeAndConnect(ctx context.Context) error {
	if err := s.handshakeAll(ctx, false); err != nil {
		return err
	}
	if s.p.cmQPs {
		return nil // rdma_cm connected them
	}
	if err := s.checkGIDs(); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return fmt.Errorf(" Unable to Connect the HCA's through the link: %w", err)
	}
	return nil
}

// closeComm is ctx_close_connection: the last exchange with the peer.
func (s *session) closeComm(ctx context.Context, wait time.Duration) error {
	if err := s.comm.Close(ctx, s.my[0], wait); err != nil {
		return fmt.Errorf("Failed to close connection between server and client: %w", err)
	}
	return nil
}
