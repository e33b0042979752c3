#!/usr/bin/env bash
# make demo: two vrnicd daemons in two network namespaces, an RC ping-pong,
# an rping over rdma_cm, an RDMA WRITE bandwidth run, and Debian's own
# ibv_devinfo and ibv_rc_pingpong under vrnic-run between them, then cleanup.
#
#   namespace vrdemoA-PID                      namespace vrdemoB-PID
#   vrnicd --iface tap:vrtapA (TAP mode)       vrnicd --iface vdB (raw mode)
#     192.0.2.10 ── br0 (192.0.2.1) ── vdA ════ vdB (192.0.2.2)
#
# Needs root (namespaces, TAP, AF_PACKET). Every wait is bounded; everything
# started here is stopped by PID and the namespaces are deleted on exit.
set -euo pipefail
BIN=${BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
ITERS=${ITERS:-1000}
MTU=${MTU:-1500}
# -e: the ping-pong sleeps on completion events. Busy polling, the tools'
# default, makes two clients and two daemons fight over a small machine's
# cores; set PPFLAGS= to see that.
PPFLAGS=${PPFLAGS--e}
BW_ITERS=${BW_ITERS:-2000}
RPING_COUNT=${RPING_COUNT:-10}
[ "$(id -u)" = 0 ] || { echo "demo: needs root (network namespaces, TAP, AF_PACKET)" >&2; exit 1; }
for b in vrnicd vrnic-pingpong vrnic-rping vrnicctl; do
	[ -x "$BIN/$b" ] || { echo "demo: $BIN/$b missing (run make demo)" >&2; exit 1; }
done

A=vrdemoA-$$ B=vrdemoB-$$
RUN=$(mktemp -d /tmp/vrnicd-demo.XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
	done
	ip netns del "$A" 2>/dev/null || true
	ip netns del "$B" 2>/dev/null || true
	rm -rf "$RUN"
}
trap cleanup EXIT INT TERM

step() { printf '\n== %s\n' "$*"; }

step "network: $A (bridge 192.0.2.1, vrnicd TAP 192.0.2.10) <-veth-> $B (192.0.2.2, vrnicd raw)"
ip netns add "$A"
ip netns add "$B"
ip -n "$A" link set lo up
ip -n "$B" link set lo up
ip link add vdA netns "$A" mtu "$MTU" type veth peer name vdB netns "$B" mtu "$MTU"
ip -n "$A" link set vdA mtu "$MTU"; ip -n "$B" link set vdB mtu "$MTU"
ip -n "$A" link add br0 type bridge stp_state 0 forward_delay 0
ip -n "$A" link set vdA master br0
ip -n "$A" addr add 192.0.2.1/24 dev br0
ip -n "$B" addr add 192.0.2.2/24 dev vdB
for l in br0 vdA; do ip -n "$A" link set "$l" up; done
ip -n "$B" link set vdB up

step "daemons"
ip netns exec "$A" "$BIN/vrnicd" --iface tap:vrtapA --ip 192.0.2.10/24 --mtu "$MTU" --socket "$RUN/a.sock" \
	--pcap "$RUN/a.pcap" >"$RUN/a.log" 2>&1 &
pids+=($!)
ip netns exec "$B" "$BIN/vrnicd" --iface vdB --socket "$RUN/b.sock" >"$RUN/b.log" 2>&1 &
pids+=($!)
for s in a b; do
	for _ in $(seq 100); do [ -S "$RUN/$s.sock" ] && break; sleep 0.1; done
	[ -S "$RUN/$s.sock" ] || { echo "demo: daemon $s did not start:" >&2; cat "$RUN/$s.log" >&2; exit 1; }
done
# The TAP has to join the bridge before the NICs can see each other.
for _ in $(seq 50); do ip -n "$A" link show vrtapA >/dev/null 2>&1 && break; sleep 0.1; done
ip -n "$A" link set vrtapA master br0
ip -n "$A" link set br0 mtu "$MTU"
grep -h 'ready' "$RUN/a.log" "$RUN/b.log" | cut -c1-400

step "vrnicctl devinfo (daemon A)"
"$BIN/vrnicctl" devinfo --socket "$RUN/a.sock" >"$RUN/devinfo.txt"
head -40 "$RUN/devinfo.txt"

step "RC ping-pong: $ITERS × 4096 B, contents checked (server in $B, client in $A)"
ip netns exec "$B" timeout 60 "$BIN/vrnic-pingpong" --socket "$RUN/b.sock" -g 1 -n "$ITERS" -c $PPFLAGS >"$RUN/pp-server.txt" 2>&1 &
srv=$!
pids+=($srv)
sleep 0.3
ip netns exec "$A" timeout 60 "$BIN/vrnic-pingpong" --socket "$RUN/a.sock" -g 1 -n "$ITERS" -c $PPFLAGS 192.0.2.2
wait "$srv"
echo "-- server side:"
cat "$RUN/pp-server.txt"

step "rping over rdma_cm: $RPING_COUNT × 64 B, READ then WRITE back, validated (server in $B, client in $A)"
ip netns exec "$B" timeout 60 "$BIN/vrnic-rping" --socket "$RUN/b.sock" -s -a 192.0.2.2 -v >"$RUN/rping-server.txt" 2>&1 &
srv=$!
pids+=($srv)
sleep 0.3
ip netns exec "$A" timeout 60 "$BIN/vrnic-rping" --socket "$RUN/a.sock" -c -a 192.0.2.2 -C "$RPING_COUNT" -v -V >"$RUN/rping-client.txt" 2>&1
wait "$srv"
head -3 "$RUN/rping-client.txt"
echo "-- server side (first lines):"
head -3 "$RUN/rping-server.txt"

if [ -x "$BIN/vrnic-perf" ]; then
	step "RDMA WRITE bandwidth: 64 KiB messages (server in $B, client in $A)"
	ip netns exec "$B" timeout 120 "$BIN/vrnic-perf" write_bw --socket "$RUN/b.sock" -x 1 -n "$BW_ITERS" >"$RUN/bw-server.txt" 2>&1 &
	srv=$!
	pids+=($srv)
	sleep 0.3
	ip netns exec "$A" timeout 120 "$BIN/vrnic-perf" write_bw --socket "$RUN/a.sock" -x 1 -n "$BW_ITERS" 192.0.2.2
	wait "$srv"
fi

if [ -x "$BIN/vrnic-run" ] && command -v ibv_rc_pingpong >/dev/null; then
	step "Debian's own ibv_devinfo and ibv_rc_pingpong, unmodified, on vrnicd (vrnic-run: the drop-in libibverbs)"
	ip netns exec "$A" "$BIN/vrnic-run" --socket "$RUN/a.sock" ibv_devinfo | head -20
	ip netns exec "$B" timeout 60 "$BIN/vrnic-run" --socket "$RUN/b.sock" ibv_rc_pingpong -g 1 -n "$ITERS" -c $PPFLAGS \
		>"$RUN/dpp-server.txt" 2>&1 &
	srv=$!
	pids+=($srv)
	sleep 0.3
	ip netns exec "$A" timeout 60 "$BIN/vrnic-run" --socket "$RUN/a.sock" ibv_rc_pingpong -g 1 -n "$ITERS" -c $PPFLAGS 192.0.2.2
	wait "$srv"
	echo "-- server side:"
	cat "$RUN/dpp-server.txt"
else
	step "Debian's programs on vrnicd: skipped (apt-get install ibverbs-utils, then make binaries)"
fi

step "counters"
for s in a b; do
	"$BIN/vrnicctl" stat --socket "$RUN/$s.sock" >"$RUN/stat-$s.txt"
	echo "daemon $s: $(awk 'NF == 2 && $2 != 0 { printf "%s=%s ", $1, $2 }' "$RUN/stat-$s.txt")"
done

step "the first RoCE packets on A's wire, decoded from its --pcap"
kill -HUP "${pids[0]}"; sleep 0.3
"$BIN/vrnicctl" decode "$RUN/a.pcap" >"$RUN/decode.txt"
head -8 "$RUN/decode.txt"
echo
echo "demo: done"
