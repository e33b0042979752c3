#!/usr/bin/env bash
# make perf: vrnicd's figures beside the link's own.
#
#   namespace vrperfA-PID                 namespace vrperfB-PID
#   vrnicd raw on vpA (192.0.2.1) ══veth══ vpB (192.0.2.2) vrnicd raw
#
# 1. The link alone (no daemon): vrnic-linkbench streams RoCEv2 frames of
#    the sizes vrnicd sends (sendmmsg of 32 into a TPACKET_V3 ring) and
#    bounces single frames (sleeping reads) for the half round trip.
# 2. Two raw-mode daemons: vrnic-perf write_bw, read_bw, send_bw (1 and 4
#    QPs), write_lat, send_lat; Debian's ib_write_bw, ib_send_bw and
#    ib_write_lat under vrnic-run (the drop-in libibverbs) on the same
#    daemons, and ibv_reg_mr's cost; then with --workers 2 (4 QPs), and with
#    --busy-poll 0 (what the default busy poll is worth).
# 3. The link again (before and after are both shown; the better is the
#    reference), then MTU 1500, a TAP-mode pair over bridges, and a run with
#    1 % of RoCE frames dropped each way (by a bridge between the daemons:
#    nftables netdev egress on its ports).
#
# One table at the end: each figure beside the link's and the ratio
# (daemon ÷ link). Figures are printed, never judged: the machine may be
# shared and they vary. Needs root. Every step is bounded in time; what is
# started here is stopped by PID and the namespaces deleted on exit.
#
# Knobs: D (seconds per bandwidth run, 3), LAT_ITERS (2000), LB_D (seconds
# per link sample, 1), LB_N (link samples, 3), PROFILE_DIR (if set, the
# daemons of the 9000-byte raw runs write CPU profiles there, one pair per
# figure: vrnicd-A-raw.write_lat.pprof is the client side's daemon),
# ONLY=loss (only the loss runs), LOSS_ROUNDS (1: the loss runs that many
# times over, each round its own lossless reference, for the spread of the
# ratios), LOSS_PM (per mille each way, "1 10 50"; 0, the reference, is
# always run).
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${BIN:-$ROOT/bin}
D=${D:-3}
LAT_ITERS=${LAT_ITERS:-2000}
LB_D=${LB_D:-1}
LB_N=${LB_N:-3}
PROFILE_DIR=${PROFILE_DIR:-}
ONLY=${ONLY:-}
LOSS_ROUNDS=${LOSS_ROUNDS:-1}
LOSS_PM=${LOSS_PM:-1 10 50}
case $ONLY in "" | loss) ;; *) echo "perf: ONLY=$ONLY: only ONLY=loss is known" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "perf: needs root (network namespaces, TAP, AF_PACKET)" >&2; exit 1; }
for b in vrnicd vrnicctl vrnic-perf vrnic-linkbench; do
	[ -x "$BIN/$b" ] || { echo "perf: $BIN/$b missing (run make perf)" >&2; exit 1; }
done

A=vrperfA-$$ B=vrperfB-$$ M=vrperfM-$$
RUN=$(mktemp -d /tmp/vrnicd-perf.XXXXXX)
daemons=() # PIDs of the running daemons
others=()  # PIDs of servers started in the background
stop_pids() {
	local p
	for p in "$@"; do kill "$p" 2>/dev/null || true; done
	for p in "$@"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}
cleanup() {
	stop_pids "${others[@]}" "${daemons[@]}"
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	ip netns del "$M" 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n== %s\n' "$*"; }

# Results: name -> figure, kept in an associative array; the table is
# printed from it at the end.
declare -A R

# --- network --------------------------------------------------------------

net_up() {
	ip netns add "$A"
	ip netns add "$B"
	ip -n "$A" link set lo up
	ip -n "$B" link set lo up
	veth_direct
}

veth_direct() {
	ip link add vpA netns "$A" type veth peer name vpB netns "$B"
	veth_addrs
}

veth_addrs() {
	ip -n "$A" addr add 192.0.2.1/24 dev vpA
	ip -n "$B" addr add 192.0.2.2/24 dev vpB
	set_mtu 9000
	ip -n "$A" link set vpA up
	ip -n "$B" link set vpB up
}

set_mtu() {
	ip -n "$A" link set vpA mtu "$1"
	ip -n "$B" link set vpB mtu "$1"
}

# --- the link -------------------------------------------------------------

# lb_bw KEY OP PAYLOAD [LINKBENCH-ARGS]: the link's best receive rate for
# OP/PAYLOAD frames; R[KEY.mpps], R[KEY.gbps] (payload bits), R[KEY.frame].
lb_bw() {
	local key=$1 op=$2 p=$3 out
	shift 3
	rm -f "$RUN/lb.txt"
	timeout 120 "$BIN/vrnic-linkbench" bw --tx "$A:vpA" --rx "$B:vpB" --op "$op" -p "$p" \
		-D "$LB_D" -n "$LB_N" "$@" 2>&1 | tee "$RUN/lb.txt" || true
	out=$(grep '^RESULT' "$RUN/lb.txt") || { echo "perf: linkbench bw failed (figure left out)"; return 0; }
	R[$key.mpps]=$(kv mpps "$out")
	R[$key.gbps]=$(kv payload_gbps "$out")
	R[$key.frame]=$(kv frame "$out")
}

# lb_lat KEY OP PAYLOAD [LINKBENCH-ARGS]: the link's half round trip
# (median) in us.
lb_lat() {
	local key=$1 op=$2 p=$3 out
	shift 3
	rm -f "$RUN/lb.txt"
	timeout 120 "$BIN/vrnic-linkbench" lat --a "$A:vpA" --b "$B:vpB" --op "$op" -p "$p" \
		--iters "$LAT_ITERS" -n "$LB_N" "$@" 2>&1 | tee "$RUN/lb.txt" || true
	out=$(grep '^RESULT' "$RUN/lb.txt") || { echo "perf: linkbench lat failed (figure left out)"; return 0; }
	R[$key.us]=$(kv median_us "$out")
	R[$key.frame]=$(kv frame "$out")
}

kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }

# link PHASE: every link figure the table compares with, at MTU 9000.
link_9000() {
	local ph=$1
	step "link alone, MTU 9000 ($ph): 4096 B WRITE MIDDLE / READ RESPONSE MIDDLE frames"
	lb_bw "link.$ph.wm4096" write_middle 4096
	step "link alone, MTU 9000 ($ph): 64 B SEND ONLY frames"
	lb_bw "link.$ph.so64" send_only 64
	step "link alone, MTU 9000 ($ph): half round trip, 8 B WRITE ONLY (RETH) frames"
	lb_lat "link.$ph.wo8" write_only 8
	step "link alone, MTU 9000 ($ph): half round trip, 8 B SEND ONLY frames"
	lb_lat "link.$ph.so8" send_only 8
}

# --- the daemons ----------------------------------------------------------

# start_raw [PROFILE-TAG]: a raw-mode daemon on each veth end, with
# DAEMON_ARGS (e.g. --workers 2) if set.
start_raw() {
	local prof_a=() prof_b=() extra
	read -r -a extra <<<"${DAEMON_ARGS:-}"
	if [ -n "$PROFILE_DIR" ] && [ -n "${1:-}" ]; then
		mkdir -p "$PROFILE_DIR"
		prof_a=(--cpuprofile "$PROFILE_DIR/vrnicd-A-$1.pprof")
		prof_b=(--cpuprofile "$PROFILE_DIR/vrnicd-B-$1.pprof")
	fi
	ip netns exec "$A" "$BIN/vrnicd" --iface vpA --socket "$RUN/a.sock" "${extra[@]}" "${prof_a[@]}" >"$RUN/a.log" 2>&1 &
	daemons+=($!)
	ip netns exec "$B" "$BIN/vrnicd" --iface vpB --socket "$RUN/b.sock" "${extra[@]}" "${prof_b[@]}" >"$RUN/b.log" 2>&1 &
	daemons+=($!)
	wait_sockets
}

wait_sockets() {
	local s
	for s in a b; do
		for _ in $(seq 100); do [ -S "$RUN/$s.sock" ] && break; sleep 0.1; done
		[ -S "$RUN/$s.sock" ] || { echo "perf: daemon $s did not start:" >&2; cat "$RUN/$s.log" >&2; exit 1; }
	done
}

stop_daemons() {
	stop_pids "${daemons[@]}"
	daemons=()
	C=()
	rm -f "$RUN/a.sock" "$RUN/b.sock"
}

# perf KEY TEST SERVER-ADDR ARGS...: one vrnic-perf run, server in B and
# client in A; R[KEY] is the client's figure: Gb/s (bw), M msg/s (bw,
# KEY.mpps) or t_typical in us (lat).
perf() {
	local key=$1 t=$2 addr=$3 srv out
	shift 3
	printf -- '-- vrnic-perf %s %s\n' "$t" "$*"
	ip netns exec "$B" timeout 120 "$BIN/vrnic-perf" "$t" --socket "$RUN/b.sock" "$@" >"$RUN/srv.txt" 2>&1 &
	srv=$!
	others+=($srv)
	sleep 0.3
	if ! out=$(ip netns exec "$A" timeout 120 "$BIN/vrnic-perf" "$t" --socket "$RUN/a.sock" "$@" "$addr" 2>"$RUN/cli.err"); then
		tail -3 "$RUN/cli.err"
		echo "perf: vrnic-perf $t failed (figure left out)"
		stop_pids "$srv"
		return 0
	fi
	wait "$srv" 2>/dev/null || true
	health
	keep "$key" "$t" "$out"
}

# keep KEY TEST OUTPUT: R[KEY] (and R[KEY.mpps]) from a perftest report,
# vrnic-perf's or perftest's own: Gb/s and M msg/s (bw) or t_typical (lat).
keep() {
	local line
	line=$(awk '/^ *#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' <<<"$3")
	echo "$line"
	case $2 in
	*_bw)
		R[$1]=$(awk '{ print $4 }' <<<"$line")
		R[$1.mpps]=$(awk '{ print $5 }' <<<"$line")
		;;
	*_lat)
		R[$1]=$(awk '{ print $5 }' <<<"$line")
		R[$1.max]=$(awk '{ print $4 }' <<<"$line")
		R[$1.p99]=$(awk '{ print $8 }' <<<"$line")
		;;
	esac
}

# health prints what the last run cost on the wire, from both daemons'
# counters (client A, server B; since the previous run): retransmit
# timeouts, packets sent again (after a timeout, a sequence NAK or an RNR
# NAK, which send_bw meets when the server's receives run out), requests
# that arrived twice (a resent packet the peer already had: its ACK was
# what went missing), and frames a receive ring had no room for. Only what
# is not 0 is shown.
declare -A C # the counters' values at the last health
health() {
	local s ns n v d out=""
	for s in a b; do
		ns=$A
		[ $s = b ] && ns=$B
		local js
		if ! js=$(ip netns exec "$ns" "$BIN/vrnicctl" stat --json --socket "$RUN/$s.sock" 2>&1); then
			out+=" ${s^^}: vrnicctl stat failed: $js"
			continue
		fi
		for n in retransmit_timeouts retransmitted_pkts tlp_probes duplicate_request rcvd_rnr_err link_rx_ring_drops; do
			v=$(grep -o "\"$n\":[0-9]*" <<<"$js" | head -1 | cut -d: -f2) || v=0 # TAP mode has no ring
			d=$((${v:-0} - ${C[$s.$n]:-0}))
			C[$s.$n]=${v:-0}
			[ "$d" != 0 ] && out+=" ${s^^}.$n=$d"
		done
	done
	echo "   wire:${out:- clean (no retransmission, no ring drop)}"
}

bw_args() { echo -D "$D" --report_gbits "$@"; }

# suite_perf KEY ARGS...: perf; with PROFILE_DIR set, the daemons are
# restarted around each run so that every figure has profiles of its own
# (vrnicd-A-KEY.pprof, vrnicd-B-KEY.pprof: the client's and the server's).
suite_perf() {
	if [ -n "$PROFILE_DIR" ]; then
		stop_daemons
		start_raw "$1"
	fi
	perf "$@"
}

daemon_suite() { # PREFIX
	local k=$1
	# shellcheck disable=SC2046
	{
		suite_perf "$k.write_bw.q1" write_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
		suite_perf "$k.write_bw.q4" write_bw 192.0.2.2 $(bw_args -s 65536 -q 4)
		suite_perf "$k.read_bw.q1" read_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
		suite_perf "$k.read_bw.q4" read_bw 192.0.2.2 $(bw_args -s 65536 -q 4)
		suite_perf "$k.send_bw.q1" send_bw 192.0.2.2 $(bw_args -s 64 -q 1)
		suite_perf "$k.send_bw.q4" send_bw 192.0.2.2 $(bw_args -s 64 -q 4)
		suite_perf "$k.write_lat" write_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
		suite_perf "$k.send_lat" send_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
	}
}

# --- Debian's programs on the drop-in libibverbs ----------------------------

# dropin KEY PROGRAM SERVER-ADDR ARGS...: perf, with Debian's perftest
# PROGRAM (ib_write_bw, ...) run unmodified under vrnic-run on the same
# daemons; -x 1 is the IPv4-mapped GID, which vrnic-perf picks by default.
dropin() {
	local key=$1 prog=$2 addr=$3 srv out
	shift 3
	printf -- '-- vrnic-run %s %s\n' "$prog" "$*"
	ip netns exec "$B" timeout 120 "$BIN/vrnic-run" --socket "$RUN/b.sock" "$prog" -x 1 "$@" >"$RUN/srv.txt" 2>&1 &
	srv=$!
	others+=($srv)
	sleep 0.5
	if ! out=$(ip netns exec "$A" timeout 120 "$BIN/vrnic-run" --socket "$RUN/a.sock" "$prog" -x 1 "$@" "$addr" 2>&1); then
		tail -5 <<<"$out"
		echo "perf: $prog failed (figure left out)"
		stop_pids "$srv"
		return 0
	fi
	wait "$srv" 2>/dev/null || true
	health
	keep "$key" "$prog" "$out"
}

# dropin_suite: the three programs the issue names, then what ibv_reg_mr
# costs (cabi/testprog/regbench.c) beside a memcpy of the same size.
dropin_suite() {
	if ! command -v ib_write_bw >/dev/null || [ ! -x "$BIN/vrnic-run" ] || [ ! -f "$ROOT/lib/vrnicd/libibverbs.so.1" ]; then
		echo "perf: perftest, bin/vrnic-run or lib/vrnicd/libibverbs.so.1 missing: drop-in rows left out"
		return 0
	fi
	step "Debian's perftest under vrnic-run (the drop-in libibverbs), the same daemons"
	# shellcheck disable=SC2046
	dropin dropin.write_bw ib_write_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
	# shellcheck disable=SC2046
	dropin dropin.send_bw ib_send_bw 192.0.2.2 $(bw_args -s 64 -q 1)
	dropin dropin.write_lat ib_write_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
	if cc -std=c11 -O2 -o "$RUN/regbench" "$ROOT/cabi/testprog/regbench.c" -libverbs 2>"$RUN/cc.err"; then
		local l
		while read -r l; do
			set -- $l
			R[reg.$2.us]=$3 R[reg.$2.dereg]=$4 R[reg.$2.memcpy]=$5
			echo "ibv_reg_mr $2 B: ${3} us (dereg ${4} us), memcpy ${5} us"
		done < <(ip netns exec "$A" "$BIN/vrnic-run" --socket "$RUN/a.sock" "$RUN/regbench" 20 | grep '^regbench')
	else
		echo "perf: regbench did not build: $(head -3 "$RUN/cc.err")"
	fi
}

# --- TAP pair -------------------------------------------------------------

# tap_pair: each namespace gets a bridge holding its veth end and the
# daemon's TAP; the daemons are TAP-mode NICs 192.0.2.10 and .20.
tap_pair() {
	local ns
	for ns in "$A" "$B"; do
		ip -n "$ns" link add vpbr type bridge stp_state 0 forward_delay 0
		ip -n "$ns" link set vpbr mtu 9000
		ip -n "$ns" link set vpbr up
	done
	ip -n "$A" addr flush dev vpA
	ip -n "$B" addr flush dev vpB
	ip -n "$A" link set vpA master vpbr
	ip -n "$B" link set vpB master vpbr
	ip -n "$A" addr add 192.0.2.1/24 dev vpbr
	ip -n "$B" addr add 192.0.2.2/24 dev vpbr
	ip netns exec "$A" "$BIN/vrnicd" --iface tap:vptapA --ip 192.0.2.10/24 --mtu 9000 --socket "$RUN/a.sock" >"$RUN/a.log" 2>&1 &
	daemons+=($!)
	ip netns exec "$B" "$BIN/vrnicd" --iface tap:vptapB --ip 192.0.2.20/24 --mtu 9000 --socket "$RUN/b.sock" >"$RUN/b.log" 2>&1 &
	daemons+=($!)
	wait_sockets
	for ns in "$A" "$B"; do
		local t=vptapA
		[ "$ns" = "$B" ] && t=vptapB
		for _ in $(seq 50); do ip -n "$ns" link show "$t" >/dev/null 2>&1 && break; sleep 0.1; done
		ip -n "$ns" link set "$t" master vpbr
		ip -n "$ns" link set vpbr mtu 9000
	done
}

# --- loss -----------------------------------------------------------------

# loss_on PERMILLE: the veth is replaced by two, joined by a bridge in a
# third namespace M whose two ports drop PERMILLE ‰ of the UDP 4791 frames
# they forward (nftables netdev egress; loss_set changes the share). Not on the daemons' own veth
# ends: a frame an AF_PACKET socket sends passes that egress hook
# unharmed on this kernel (the rule counts it, the peer receives it), and
# the daemons' ETH_P_ALL sockets see a frame before an ingress hook.
loss_on() {
	local d
	ip -n "$A" link del vpA
	ip netns add "$M"
	ip link add vpA netns "$A" type veth peer name mA netns "$M"
	ip link add vpB netns "$B" type veth peer name mB netns "$M"
	ip -n "$M" link add vpbr type bridge stp_state 0 forward_delay 0
	for d in mA mB vpbr; do ip -n "$M" link set "$d" mtu 9000 up; done
	ip -n "$M" link set mA master vpbr
	ip -n "$M" link set mB master vpbr
	veth_addrs
	ip netns exec "$M" nft add table netdev vrperf || return 1
	for d in mA mB; do
		ip netns exec "$M" nft add chain netdev vrperf "eg$d" "{ type filter hook egress device $d priority 0; }" || return 1
	done
	loss_set "$1"
}

# loss_set PERMILLE: the bridge's ports drop that share from now on, their
# counters from 0.
loss_set() {
	local d
	for d in mA mB; do
		ip netns exec "$M" nft flush chain netdev vrperf "eg$d" || return 1
		ip netns exec "$M" nft add rule netdev vrperf "eg$d" udp dport 4791 numgen random mod 1000 "<" "$1" counter drop || return 1
	done
}

loss_report() {
	local d
	for d in mA mB; do
		printf '   dropped towards %s: %s\n' "$([ $d = mA ] && echo A || echo B)" \
			"$(ip netns exec "$M" nft list chain netdev vrperf "eg$d" | grep -o 'counter packets [0-9]* bytes [0-9]*')"
	done
}

# loss_off: the direct veth again.
loss_off() {
	ip netns del "$M" 2>/dev/null || true
	ip -n "$A" link del vpA 2>/dev/null || true
	veth_direct
}

# --- the run --------------------------------------------------------------

step "network: $A (vpA 192.0.2.1) <-veth MTU 9000-> $B (vpB 192.0.2.2); $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
net_up

if [ -z "$ONLY" ]; then
link_9000 before
step "link alone, MTU 9000: other receive paths (for the new datapath; not in the ratios)"
lb_bw link.recvmmsg.wm4096 write_middle 4096 --rx-mode recvmmsg
lb_bw link.v2.wm4096 write_middle 4096 --ring-version 2
lb_bw link.v2spin.wm4096 write_middle 4096 --ring-version 2 --spin
lb_bw link.v2spin.so64 send_only 64 --ring-version 2 --spin
lb_bw link.fanout2.wm4096 write_middle 4096 --workers 2 -q 4
lb_bw link.bypass.wm4096 write_middle 4096 --qdisc-bypass
lb_bw link.bypass.so64 send_only 64 --qdisc-bypass
lb_lat link.v2.wo8 write_only 8 --ring 2
lb_lat link.spin.wo8 write_only 8 --spin

step "raw-mode daemons, MTU 9000"
start_raw
daemon_suite raw
dropin_suite
stop_daemons

step "raw-mode daemons with --workers 2 (a PACKET_FANOUT socket per worker), MTU 9000, 4 QPs"
DAEMON_ARGS="--workers 2" start_raw
# shellcheck disable=SC2046
perf w2.write_bw.q4 write_bw 192.0.2.2 $(bw_args -s 65536 -q 4)
# shellcheck disable=SC2046
perf w2.send_bw.q4 send_bw 192.0.2.2 $(bw_args -s 64 -q 4)
stop_daemons

step "raw-mode daemons with --busy-poll 0 (a worker sleeps as soon as a look finds nothing), MTU 9000"
DAEMON_ARGS="--busy-poll 0" start_raw
# shellcheck disable=SC2046
perf bp0.write_bw.q1 write_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
# shellcheck disable=SC2046
perf bp0.send_bw.q1 send_bw 192.0.2.2 $(bw_args -s 64 -q 1)
perf bp0.write_lat write_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
stop_daemons

link_9000 after

step "MTU 1500: link (1024 B WRITE MIDDLE frames) and raw-mode daemons"
set_mtu 1500
lb_bw link.1500.wm1024 write_middle 1024
lb_bw link.1500.so64 send_only 64
start_raw
# shellcheck disable=SC2046
perf raw1500.write_bw.q1 write_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
# shellcheck disable=SC2046
perf raw1500.send_bw.q1 send_bw 192.0.2.2 $(bw_args -s 64 -q 1)
perf raw1500.write_lat write_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
stop_daemons
set_mtu 9000
fi

step "0, 0.1, 1 and 5 % of RoCE frames dropped each way (a bridge between the daemons, nftables netdev egress on its ports), raw-mode daemons, MTU 9000"
if command -v nft >/dev/null && loss_on 0; then
	# Each test runs at each share back to back on the same daemons, the
	# lossless reference first: the machine's drift between a reference and
	# its lossy run is seconds, not minutes.
	for r in $(seq "$LOSS_ROUNDS"); do
		start_raw
		for t in write_bw read_bw send_bw write_lat; do
			for pm in 0 $LOSS_PM; do
				loss_set "$pm"
				echo "-- $pm per mille each way (round $r of $LOSS_ROUNDS)"
				case $t in
				# shellcheck disable=SC2046
				write_bw | read_bw) perf loss$pm.r$r.$t.q1 $t 192.0.2.2 $(bw_args -s 65536 -q 1) ;;
				# shellcheck disable=SC2046
				send_bw) perf loss$pm.r$r.$t.q1 $t 192.0.2.2 $(bw_args -s 64 -q 1) ;;
				write_lat) perf loss$pm.r$r.$t $t 192.0.2.2 -s 8 -n "$LAT_ITERS" ;;
				esac
				loss_report
			done
		done
		if [[ " $LOSS_PM " == *" 10 "* ]]; then
			# 1 % with a 1 ms retransmit timeout instead of perftest's 67 ms
			# (-u 14): what is left of waiting for timeouts.
			loss_set 10
			# shellcheck disable=SC2046
			perf loss10.r$r.write_bw.u8 write_bw 192.0.2.2 $(bw_args -s 65536 -q 1 -u 8)
			loss_report
		fi
		stop_daemons
	done
	loss_off
else
	echo "perf: nft unavailable (apt-get install nftables) or it refused the egress chain: loss run skipped"
	loss_off
fi

if [ -z "$ONLY" ]; then
step "TAP-mode daemons, each TAP bridged to its veth end, MTU 9000"
tap_pair
# shellcheck disable=SC2046
perf tap.write_bw.q1 write_bw 192.0.2.2 $(bw_args -s 65536 -q 1)
# shellcheck disable=SC2046
perf tap.send_bw.q1 send_bw 192.0.2.2 $(bw_args -s 64 -q 1)
perf tap.write_lat write_lat 192.0.2.2 -s 8 -n "$LAT_ITERS"
stop_daemons
fi

# --- the table ------------------------------------------------------------

# ref KEY-BEFORE KEY-AFTER max|min: the better of the two link figures.
ref() {
	local a=${R[$1]:-} b=${R[$2]:-}
	[ -z "$a" ] && { echo "$b"; return; }
	[ -z "$b" ] && { echo "$a"; return; }
	awk -v a="$a" -v b="$b" -v m="$3" 'BEGIN { if ((m == "max") == (a > b)) print a; else print b }'
}

L_WM=$(ref link.before.wm4096.gbps link.after.wm4096.gbps max)
L_SO=$(ref link.before.so64.mpps link.after.so64.mpps max)
L_WO8=$(ref link.before.wo8.us link.after.wo8.us min)
L_SO8=$(ref link.before.so8.us link.after.so8.us min)
L15_WM=${R[link.1500.wm1024.gbps]:-}
L15_SO=${R[link.1500.so64.mpps]:-}

row() { # NAME FIGURE UNIT LINK-FIGURE LINK-WHAT
	local ratio=-
	if [ -n "$2" ] && [ -n "$4" ]; then
		ratio=$(awk -v a="$2" -v b="$4" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')
	fi
	printf '%-34s %12s %-8s %12s  %-7s %s\n' "$1" "${2:--}" "$3" "${4:--}" "$ratio" "$5"
}

# lossrow NAME PERMILLE KEY UNIT REF-WHAT [REF-KEY]: the lossy figure beside
# the same round's lossless one (REF-KEY, default KEY); over several rounds
# the medians, and the ratio as the median of the rounds' ratios with its
# range.
lossrow() {
	local r fig=() ref=() ratios=() m1 m2 mr
	for r in $(seq "$LOSS_ROUNDS"); do
		local f=${R[loss$2.r$r.$3]:-} g=${R[loss0.r$r.${6:-$3}]:-}
		[ -n "$f" ] && fig+=("$f")
		[ -n "$g" ] && ref+=("$g")
		[ -n "$f" ] && [ -n "$g" ] && ratios+=("$(awk -v a="$f" -v b="$g" 'BEGIN { if (b > 0) printf "%.3f", a / b }')")
	done
	median() { [ $# -gt 0 ] || return 0; printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
	m1=$(median "${fig[@]}") m2=$(median "${ref[@]}") mr=$(median "${ratios[@]}")
	local spread=""
	if [ "${#ratios[@]}" -gt 1 ]; then
		spread=" [$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n '1p;$p' | paste -sd-)] of ${#ratios[@]} rounds"
	fi
	printf '%-34s %12s %-8s %12s  %-7s %s%s\n' "$1" "${m1:--}" "$4" "${m2:--}" "${mr:--}" "$5" "$spread"
}

step "summary (ratio = vrnicd ÷ link; for latency above 1 is slower)"
printf '%-34s %12s %-8s %12s  %-7s %s\n' "run" "vrnicd" "unit" "link" "ratio" "link figure"
if [ -z "$ONLY" ]; then
lk() { printf '%s B frames' "${R[$1.frame]:-?}"; }
echo "-- link alone, MTU 9000: before / after the daemon runs"
printf '%-34s %12s %-8s %12s\n' "4096 B WRITE MIDDLE payload" "${R[link.before.wm4096.gbps]:--}" "Gb/s" "${R[link.after.wm4096.gbps]:--}"
printf '%-34s %12s %-8s %12s\n' "4096 B WRITE MIDDLE frames" "${R[link.before.wm4096.mpps]:--}" "Mpps" "${R[link.after.wm4096.mpps]:--}"
printf '%-34s %12s %-8s %12s\n' "64 B SEND ONLY frames" "${R[link.before.so64.mpps]:--}" "Mpps" "${R[link.after.so64.mpps]:--}"
printf '%-34s %12s %-8s %12s\n' "8 B WRITE ONLY half round trip" "${R[link.before.wo8.us]:--}" "us" "${R[link.after.wo8.us]:--}"
printf '%-34s %12s %-8s %12s\n' "8 B SEND ONLY half round trip" "${R[link.before.so8.us]:--}" "us" "${R[link.after.so8.us]:--}"
printf '%-34s %12s %-8s\n' "4096 B WM payload, recvmmsg rx" "${R[link.recvmmsg.wm4096.gbps]:--}" "Gb/s"
printf '%-34s %12s %-8s\n' "4096 B WM payload, TPACKET_V2 rx" "${R[link.v2.wm4096.gbps]:--}" "Gb/s"
printf '%-34s %12s %-8s\n' "4096 B WM payload, V2 rx polled" "${R[link.v2spin.wm4096.gbps]:--}" "Gb/s"
printf '%-34s %12s %-8s\n' "64 B SEND ONLY, V2 rx polled" "${R[link.v2spin.so64.mpps]:--}" "Mpps"
printf '%-34s %12s %-8s\n' "4096 B WM payload, 2 fanout rx" "${R[link.fanout2.wm4096.gbps]:--}" "Gb/s"
printf '%-34s %12s %-8s\n' "4096 B WM payload, qdisc bypass tx" "${R[link.bypass.wm4096.gbps]:--}" "Gb/s"
printf '%-34s %12s %-8s\n' "64 B SEND ONLY, qdisc bypass tx" "${R[link.bypass.so64.mpps]:--}" "Mpps"
printf '%-34s %12s %-8s\n' "8 B WO half RTT, TPACKET_V2 rx" "${R[link.v2.wo8.us]:--}" "us"
printf '%-34s %12s %-8s\n' "8 B WO half RTT, polling rx" "${R[link.spin.wo8.us]:--}" "us"
echo "-- raw-mode daemons, MTU 9000"
row "write_bw 64 KiB, 1 QP" "${R[raw.write_bw.q1]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "write_bw 64 KiB, 4 QPs" "${R[raw.write_bw.q4]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "read_bw 64 KiB, 1 QP" "${R[raw.read_bw.q1]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "read_bw 64 KiB, 4 QPs" "${R[raw.read_bw.q4]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "send_bw 64 B, 1 QP" "${R[raw.send_bw.q1.mpps]:-}" "M msg/s" "$L_SO" "Mpps, $(lk link.before.so64)"
row "send_bw 64 B, 4 QPs" "${R[raw.send_bw.q4.mpps]:-}" "M msg/s" "$L_SO" "Mpps, $(lk link.before.so64)"
row "write_lat 8 B (t_typical)" "${R[raw.write_lat]:-}" "us" "$L_WO8" "median half RTT, $(lk link.before.wo8)"
row "send_lat 8 B (t_typical)" "${R[raw.send_lat]:-}" "us" "$L_SO8" "median half RTT, $(lk link.before.so8)"
# vrnicd receives through a TPACKET_V2 ring that its busy worker polls (V3
# holds frames back until a block retires, and RC's ACKs and responses
# cannot wait): the link into such a ring, polled, beside the daemons.
row "write_bw 1 QP, link V2 rx polled" "${R[raw.write_bw.q1]:-}" "Gb/s" "${R[link.v2spin.wm4096.gbps]:-}" "payload Gb/s, the link into a polled TPACKET_V2 ring"
row "send_bw 1 QP, link V2 rx polled" "${R[raw.send_bw.q1.mpps]:-}" "M msg/s" "${R[link.v2spin.so64.mpps]:-}" "Mpps, the link into a polled TPACKET_V2 ring"
echo "-- Debian's perftest under vrnic-run, the same daemons (ratio = drop-in ÷ vrnic-perf; latency: above 1 is slower)"
row "ib_write_bw 64 KiB, 1 QP" "${R[dropin.write_bw]:-}" "Gb/s" "${R[raw.write_bw.q1]:-}" "vrnic-perf write_bw"
row "ib_send_bw 64 B, 1 QP" "${R[dropin.send_bw.mpps]:-}" "M msg/s" "${R[raw.send_bw.q1.mpps]:-}" "vrnic-perf send_bw"
row "ib_write_lat 8 B (t_typical)" "${R[dropin.write_lat]:-}" "us" "${R[raw.write_lat]:-}" "vrnic-perf write_lat"
row "ibv_reg_mr 1 MiB" "${R[reg.1048576.us]:-}" "us" "${R[reg.1048576.memcpy]:-}" "memcpy of 1 MiB (us)"
row "ibv_reg_mr 16 MiB" "${R[reg.16777216.us]:-}" "us" "${R[reg.16777216.memcpy]:-}" "memcpy of 16 MiB (us)"
echo "-- raw-mode daemons, MTU 9000, --workers 2 (fanout)"
row "write_bw 64 KiB, 4 QPs" "${R[w2.write_bw.q4]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "send_bw 64 B, 4 QPs" "${R[w2.send_bw.q4.mpps]:-}" "M msg/s" "$L_SO" "Mpps, $(lk link.before.so64)"
echo "-- raw-mode daemons, MTU 9000, --busy-poll 0 (sleep at once)"
row "write_bw 64 KiB, 1 QP" "${R[bp0.write_bw.q1]:-}" "Gb/s" "$L_WM" "payload Gb/s, $(lk link.before.wm4096)"
row "send_bw 64 B, 1 QP" "${R[bp0.send_bw.q1.mpps]:-}" "M msg/s" "$L_SO" "Mpps, $(lk link.before.so64)"
row "write_lat 8 B (t_typical)" "${R[bp0.write_lat]:-}" "us" "$L_WO8" "median half RTT, $(lk link.before.wo8)"
echo "-- raw-mode daemons, MTU 1500 (RoCE MTU 1024)"
row "write_bw 64 KiB, 1 QP" "${R[raw1500.write_bw.q1]:-}" "Gb/s" "$L15_WM" "payload Gb/s, $(lk link.1500.wm1024)"
row "send_bw 64 B, 1 QP" "${R[raw1500.send_bw.q1.mpps]:-}" "M msg/s" "$L15_SO" "Mpps, $(lk link.1500.so64)"
row "write_lat 8 B (t_typical)" "${R[raw1500.write_lat]:-}" "us" "$L_WO8" "median half RTT at MTU 9000"
fi
echo "-- raw-mode daemons, MTU 9000, through a bridge dropping a share each way (reference: the same bridge dropping nothing)"
for pm in $LOSS_PM; do
	pct=$(awk -v p="$pm" 'BEGIN { printf "%g %%", p / 10 }')
	lossrow "$pct: write_bw 64 KiB" "$pm" write_bw.q1 "Gb/s" "lossless write_bw"
	lossrow "$pct: read_bw 64 KiB" "$pm" read_bw.q1 "Gb/s" "lossless read_bw"
	lossrow "$pct: send_bw 64 B" "$pm" send_bw.q1.mpps "M msg/s" "lossless send_bw"
	lossrow "$pct: write_lat 8 B p99" "$pm" write_lat.p99 "us" "lossless p99"
	lossrow "$pct: write_lat 8 B t_max" "$pm" write_lat.max "us" "lossless t_max"
done
lossrow "1 %: write_bw, -u 8 (1 ms timeout)" 10 write_bw.u8 "Gb/s" "lossless write_bw" write_bw.q1
if [ -z "$ONLY" ]; then
echo "-- TAP-mode daemons over bridges, MTU 9000 (link figures: the bare veth)"
row "write_bw 64 KiB, 1 QP" "${R[tap.write_bw.q1]:-}" "Gb/s" "$L_WM" "veth payload Gb/s"
row "send_bw 64 B, 1 QP" "${R[tap.send_bw.q1.mpps]:-}" "M msg/s" "$L_SO" "veth Mpps"
row "write_lat 8 B (t_typical)" "${R[tap.write_lat]:-}" "us" "$L_WO8" "veth median half RTT"
fi
echo
echo "perf: done"
