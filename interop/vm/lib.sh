# shellcheck shell=bash
# Shared settings of the interop VM scripts (sourced by build, start, stop,
# exec, watchdog). Everything the scripts write lives outside the repository:
#
#   VRNICD_INTEROP_CACHE  downloaded .debs, extracted packages, built image
#                         (default /var/cache/vrnicd-interop)
#   VRNICD_INTEROP_IMAGE  the image start boots (default $CACHE/image)
#   VRNICD_INTEROP_RUN    per-VM runtime state (default /run/vrnicd-interop)

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${VRNICD_INTEROP_CACHE:-/var/cache/vrnicd-interop}
IMAGE=${VRNICD_INTEROP_IMAGE:-$CACHE/image}
RUN=${VRNICD_INTEROP_RUN:-/run/vrnicd-interop}

PROG=${0##*/}
say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { printf '%s: error: %s\n' "$PROG" "$*" >&2; exit 1; }

# now: seconds since the epoch with nanoseconds; since T0: elapsed seconds.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

need_root() { [[ $EUID -eq 0 ]] || die "must run as root ($*)"; }

# VM names end up in paths, kernel arguments and QEMU's command line.
valid_name() { [[ $1 =~ ^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$ ]]; }
vm_state() { printf '%s/vm/%s' "$RUN" "$1"; }

# start_time PID: the process's start time in clock ticks since boot (field
# 22 of /proc/PID/stat, counted after the parenthesised command name, which
# may itself hold spaces). Together with the PID it names one process for
# good: a PID reused later has another start time.
start_time() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	# shellcheck disable=SC2086
	set -- $s
	echo "${20}"
}
proc_state() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	echo "${s%% *}"
}

# is_our_qemu PID STATEDIR: PID is alive (not a zombie) and is a QEMU whose
# command line names STATEDIR, i.e. the one start launched for this VM. Every
# signal these scripts send goes through this check.
is_our_qemu() {
	local pid=$1 dir=$2 st
	[[ $pid =~ ^[1-9][0-9]*$ ]] || return 1
	st=$(proc_state "$pid") || return 1
	[[ $st != Z ]] || return 1
	tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/" || return 1
}

# wait_exit PID TENTHS: wait until PID is gone or a zombie.
wait_exit() {
	local pid=$1 n=$2 st
	while ((n-- > 0)); do
		st=$(proc_state "$pid") || return 0
		[[ $st == Z ]] && return 0
		sleep 0.1
	done
	return 1
}

# ensure_tool CMD DEBIAN_PACKAGE: install the package when CMD is missing.
ensure_tool() {
	command -v "$1" >/dev/null 2>&1 && return 0
	command -v apt-get >/dev/null 2>&1 || return 1
	say "$1 not found: apt-get install $2"
	local opts=(-y -qq --no-install-recommends)
	if ! DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install "${opts[@]}" "$2" >&2; then
		timeout 600 apt-get update -qq >&2 || true
		DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install "${opts[@]}" "$2" >&2 || return 1
	fi
	command -v "$1" >/dev/null 2>&1
}

# ipns NETNS ARGS...: ip(8) in NETNS, or in the current namespace if empty.
ipns() {
	local ns=$1
	shift
	if [[ -n $ns ]]; then ip -n "$ns" "$@"; else ip "$@"; fi
}

# usage: print the leading comment block of the calling script.
usage() { sed -n '2,/^[^#]/{/^#/{s/^# \{0,1\}//;p}}' "$0"; }
