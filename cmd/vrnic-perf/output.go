package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/vrnic/vrnicd/cmd/internal/oob"
	"github.com/vrnic/vrnicd/cmd/internal/tool"
)

// The text perftest 4.5 prints (perftest_parameters.h, ctx_print_test_info,
// ctx_print_pingpong_data, print_full_bw_report, print_report_lat),
// character for character: the tabs, the trailing spaces, C's "%#x".

const resultLine = "---------------------------------------------------------------------------------------\n"

const (
	resultFmt       = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	resultFmtG      = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat    = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	resultFmtLatDur = " #bytes        #iterations       t_avg[usec]    tps average"
)

// cx formats v as C's "%#0<width>x": "0x" and hex digits, zero-padded to
// width in all; zero has no "0x" (so %#04x of 0 is "0000").
func cx(v uint64, width int) string {
	if v == 0 {
		return strings.Repeat("0", max(width, 1))
	}
	h := strconv.FormatUint(v, 16)
	if pad := width - 2 - len(h); pad > 0 {
		h = strings.Repeat("0", pad) + h
	}
	return "0x" + h
}

// cf is C's "%.<prec>f".
func cf(v float64, prec int) string { return tool.CFloat(v, prec) }

// lf is C's "%-<width>.<prec>f".
func lf(v float64, width, prec int) string { return fmt.Sprintf("%-*s", width, cf(v, prec)) }

// printWaiting is the server's banner before the client connects.
func printWaiting(w io.Writer) {
	fmt.Fprintf(w, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
}

// printTestInfo is ctx_print_test_info for the parameters vrnic-perf has.
func printTestInfo(w io.Writer, p *params, devName string, mtuBytes int) {
	b := &strings.Builder{}
	b.WriteString(resultLine)
	b.WriteString("                    ")
	b.WriteString(verbNames[p.test.verb] + " ")
	if p.test.verb == verbAtomic {
		b.WriteString(atomicNames[p.atomic] + " ")
	}
	if p.test.lat {
		b.WriteString("Latency ")
	} else {
		b.WriteString("BW ")
	}
	b.WriteString("Test\n")
	if p.events {
		fmt.Fprintf(b, " Test with events. Using %s_comp%d\n", devName, 0)
	}
	fmt.Fprintf(b, " Dual-port       : %s\t\tDevice         : %s\n", "OFF", devName)
	fmt.Fprintf(b, " Number of qps   : %d\t\tTransport type : %s\n", p.numQPs, "IB")
	fmt.Fprintf(b, " Connection type : %s\t\tUsing SRQ      : %s\n", "RC", "OFF")
	pcir := "ON" // perftest asks for relaxed ordering except in ib_write_lat
	if p.test.verb == verbWrite && p.test.lat {
		pcir = "OFF"
	}
	fmt.Fprintf(b, " PCIe relax order: %s\n", pcir)
	fmt.Fprintf(b, " ibv_wr* API     : %s\n", "OFF")
	if p.client() {
		fmt.Fprintf(b, " TX depth        : %d\n", p.txDepth)
	}
	if p.test.verb == verbSend && !p.client() {
		fmt.Fprintf(b, " RX depth        : %d\n", p.rxDepth)
	}
	if !p.test.lat {
		fmt.Fprintf(b, " CQ Moderation   : %d\n", p.cqMod)
	}
	fmt.Fprintf(b, " Mtu             : %d[B]\n", mtuBytes)
	fmt.Fprintf(b, " Link type       : %s\n", "Ethernet")
	if p.gidIndex != -1 {
		fmt.Fprintf(b, " GID index       : %d\n", p.gidIndex)
	}
	if p.test.verb != verbRead && p.test.verb != verbAtomic {
		fmt.Fprintf(b, " Max inline data : %d[B]\n", p.inlineSize)
	} else {
		fmt.Fprintf(b, " Outstand reads  : %d\n", p.outReads)
	}
	fmt.Fprintf(b, " rdma_cm QPs\t : %s\n", onOff(p.cmQPs))
	fmt.Fprintf(b, " Data ex. method : %s", map[bool]string{false: "Ethernet", true: "rdma_cm"}[p.cmComm])
	if p.cmQPs && !p.client() {
		// perftest prints it once the QPs are connected all the same.
		b.WriteString("\n" + resultLine + " Waiting for client rdma_cm QP to connect\n Please run the same command with the IB/RoCE interface IP")
	}
	b.WriteString("\n")
	b.WriteString(resultLine)
	io.WriteString(w, b.String())
}

func onOff(on bool) string {
	if on {
		return "ON"
	}
	return "OFF"
}

// printAddress is ctx_print_pingpong_data: " local address: LID 0000 QPN
// 0x0011 PSN 0x4eb277 RKey 0x00021f VAddr 0x00562d70317000" and the GID
// in decimal bytes (perftest's %02d).
func printAddress(w io.Writer, p *params, remote bool, d oob.PerftestDest) {
	side := "local"
	if remote {
		side = "remote"
	}
	b := &strings.Builder{}
	fmt.Fprintf(b, " %s address: LID %s QPN %s PSN %s", side, cx(uint64(d.LID), 4), cx(uint64(d.QPN), 6), cx(uint64(d.PSN), 6))
	v := p.test.verb
	if p.cmComm {
		v = verbSend // perftest prints with its rdma_cm channel's parameters, a SEND's
	}
	switch v {
	case verbRead:
		fmt.Fprintf(b, " OUT %s", cx(uint64(d.OutReads), 4))
		fallthrough
	case verbWrite:
		fmt.Fprintf(b, " RKey %s VAddr %s", cx(uint64(d.RKey), 8), cx(d.VAddr, 16))
	}
	b.WriteString("\n")
	if p.gidIndex > -1 {
		b.WriteString(" GID: ")
		for i, g := range d.GID {
			if i > 0 {
				b.WriteString(":")
			}
			fmt.Fprintf(b, "%02d", g)
		}
		b.WriteString("\n")
	}
	io.WriteString(w, b.String())
}

// printBWHeader is the result table's head.
func printBWHeader(w io.Writer, p *params) {
	f := resultFmt
	if p.gbits {
		f = resultFmtG
	}
	io.WriteString(w, resultLine+f+"\n")
}

func printLatHeader(w io.Writer, p *params) {
	f := resultFmtLat
	if p.isDuration {
		f = resultFmtLatDur
	}
	io.WriteString(w, resultLine+f+"\n")
}

// printBWReport is print_full_bw_report's line for a report (the sum of
// two in bidirectional runs, which vrnic-perf does not make).
func printBWReport(w io.Writer, p *params, r oob.BWReport) {
	if r.BWAvg < 0.1 && p.gbits { // perftest's inc_accuracy
		fmt.Fprintf(w, " %-7d    %d           %s            %s            %s\n",
			r.Size, r.Iters, lf(r.BWPeak, 7, 6), lf(r.BWAvg, 7, 6), lf(r.MsgRateAvg, 7, 6))
		return
	}
	fmt.Fprintf(w, " %-7d    %-10d       %s            %s\t\t   %s\n",
		r.Size, r.Iters, lf(r.BWPeak, 7, 2), lf(r.BWAvg, 7, 2), lf(r.MsgRateAvg, 7, 6))
}

// latResult is what print_report_lat prints.
type latResult struct {
	size, iters                              uint64
	min, max, typical, avg, stdev, p99, p999 float64
}

func printLatReport(w io.Writer, r latResult) {
	fmt.Fprintf(w, " %-7d %d          %s        %s      %s  \t       %s     \t%s\t\t%s \t\t%s\n",
		r.size, r.iters, lf(r.min, 7, 2), lf(r.max, 7, 2), lf(r.typical, 7, 2), lf(r.avg, 7, 2), lf(r.stdev, 7, 2),
		lf(r.p99, 7, 2), lf(r.p999, 7, 2))
}

func printLatDurReport(w io.Writer, size, iters uint64, lat, tps float64) {
	fmt.Fprintf(w, " %-7d       %d            %s        %s\n", size, iters, lf(lat, 7, 2), lf(tps, 7, 2))
}
