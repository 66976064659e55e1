#!/usr/bin/env bash
# Takes the scontrol samples of tests/testdata/slurm/ from another SLURM release than the
# installed one: ROOT is a chroot holding that release (made with mmdebstrap, as
# tests/testdata/slurm/README.md says), with slurmctld, slurmd, slurm-client and munge. One
# node, as tests/slurm/cluster.sh's (node `hostname -s`, partition debug, two CPUs,
# KillWait=5, MinJobAge=300, cred_expire=10), all of it inside ROOT under /pulse, its own
# munged and ports. Needs root (chroot, mount).
#
#   capture-release.sh ROOT RELEASE OUTDIR   write OUTDIR/scontrol-RELEASE-*.txt, and beside
#                                            them nolocal.txt and rpc-{local,nolocal}.txt
#                                            (what scontrol without --local printed, and the
#                                            RPCs sdiag counted with and without it)
#
# Jobs, in one cluster: 1 `sbatch -t 3 --wrap 'sleep 300'`; 2 `--array=0-9%2 -t 5` beside it
# (task 0 is job 3); `scancel 1 2`; 4 `-t 1` (its TIMEOUT); 5 `-t 5 job.sh` requeued while
# RUNNING; 999 an id never given.
#
# 23.11 and later start slurmd's cgroup plugin whatever the other plugins are: /sys is bound
# into ROOT for it, and CGROUP_CONF is written to its cgroup.conf (24.11 and 26.05 need
# `CgroupPlugin=disabled` on a host of cgroup v1; 23.11 has no such value and takes v1).
set -euo pipefail
[ $# -eq 3 ] || { echo "usage: $0 ROOT RELEASE OUTDIR" >&2; exit 2; }
root=$(cd "$1" && pwd)
rel=$2
mkdir -p "$3"
out=$(cd "$3" && pwd)
p=/pulse # inside the chroot
dir=$root$p

in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF=$p/slurm.conf "$@"; }
show() { in_root env SLURM_TIME_FORMAT=%s TZ=UTC scontrol --local -o show job "$1"; }
field() { show "$1" | head -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
wait_for() { # id field value [seconds]
    local deadline=$((SECONDS + ${4:-60}))
    while [ $SECONDS -lt $deadline ]; do
        [ "$(field "$1" "$2")" = "$3" ] && return 0
        sleep 0.1
    done
    echo "job $1: $2 is not $3 after ${4:-60} s" >&2
    return 1
}

# The processes whose root is ROOT: what this script started there.
members() {
    local d
    for d in /proc/[0-9]*; do
        [ "$(readlink "$d/root" 2>/dev/null)" = "$root" ] && echo "${d#/proc/}"
    done
    return 0
}
stop() {
    local m
    m=$(members)
    # shellcheck disable=SC2086
    [ -z "$m" ] || kill -KILL $m 2>/dev/null || true
    # Until they are gone: one still holding a file under /dev keeps that mount busy.
    for _ in $(seq 50); do
        [ -z "$(members)" ] && break
        sleep 0.1
    done
    umount "$root/proc" 2>/dev/null || true
    umount "$root/dev" 2>/dev/null || true
    umount -R "$root/sys" 2>/dev/null || true
}
trap stop EXIT

mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
mountpoint -q "$root/sys" || mount --rbind /sys "$root/sys"
cp /etc/hosts "$root/etc/hosts"
rm -rf "$dir"
mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
chmod 755 "$dir" "$dir/munge"
in_root mungekey --create --keyfile=$p/munge.key
chmod 600 "$dir/munge.key"
: >"$dir/plugstack.conf"
# 23.11.4's slurmctld reads a stale errno as "no accounting connection" (24.11 clears it
# first): the ENOENT of a missing mpi.conf left every job pending, "has invalid account".
: >"$dir/mpi.conf"
: >"$dir/acct_gather.conf"
if [ -n "${CGROUP_CONF:-}" ]; then echo "$CGROUP_CONF" >"$dir/cgroup.conf"; fi
read -r ctld_port node_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')
host=$(hostname -s)
cat >"$dir/slurm.conf" <<EOF
# Written by tests/slurm/capture-release.sh (as tests/slurm/cluster.sh writes its own).
ClusterName=pulse
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$p/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$p/state
SlurmdSpoolDir=$p/spool
SlurmctldPidFile=$p/slurmctld.pid
SlurmdPidFile=$p/slurmd.pid
SlurmctldLogFile=$p/slurmctld.log
SlurmdLogFile=$p/slurmd.log
PlugStackConfig=$p/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$p/jobcomp.txt
MailProg=/bin/true
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
# 23.11 dropped the `none` plugins: there such a line names no plugin and slurmctld finds no
# account for any job ("has invalid account"). Left out, the setting means none.
for plugin in accounting_storage jobacct_gather; do
    [ -e "$root/usr/lib/x86_64-linux-gnu/slurm-wlm/${plugin}_none.so" ] ||
        sed -i "\|=$plugin/none\$|d" "$dir/slurm.conf"
done
in_root setsid munged --foreground --force --socket=$p/munge/munge.socket.2 \
    --key-file=$p/munge.key --pid-file=$p/munged.pid --log-file=$p/munged.log \
    --seed-file=$p/munged.seed </dev/null >>"$dir/munged.out" 2>&1 &
for _ in $(seq 100); do [ -S "$dir/munge/munge.socket.2" ] && break; sleep 0.1; done
in_root setsid slurmctld -D -f $p/slurm.conf </dev/null >>"$dir/slurmctld.out" 2>&1 &
in_root setsid slurmd -D -f $p/slurm.conf </dev/null >>"$dir/slurmd.out" 2>&1 &
state=
for _ in $(seq 300); do
    state=$(in_root timeout 10 sinfo -h -o %T 2>/dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.1
done
if [ "$state" != idle ]; then
    echo "node not idle: ${state:-no answer}" >&2
    tail -n 20 "$dir"/*.out "$dir"/*.log >&2 || true
    exit 1
fi
in_root scontrol --version >"$out/scontrol-$rel-version.txt"
cat >"$dir/job.sh" <<'EOF'
#!/bin/sh
trap 'echo TERM; exit 0' TERM
while :; do sleep 1; done
EOF
chmod +x "$dir/job.sh"

# 1: running, -t 3, 3 s after it started; the same with the default times.
in_root sh -c "cd $p && sbatch -t 3 --wrap 'sleep 300'"
wait_for 1 JobState RUNNING
sleep 3
show 1 >"$out/scontrol-$rel-epoch-running.txt"
in_root env TZ=UTC scontrol --local -o show job 1 >"$out/scontrol-$rel-running.txt"
# --local or not: the RPCs each sends (sdiag counts them).
in_root sdiag -r >/dev/null
show 1 >/dev/null
in_root sdiag | sed -n '/^Remote Procedure Call statistics by message type/,/^$/p' \
    | grep -E 'REQUEST_(JOB_INFO|FED_INFO)' >"$dir/rpc-local.txt" || true
in_root sdiag -r >/dev/null
in_root env SLURM_TIME_FORMAT=%s TZ=UTC scontrol -o show job 1 >"$dir/nolocal.txt"
in_root sdiag | sed -n '/^Remote Procedure Call statistics by message type/,/^$/p' \
    | grep -E 'REQUEST_(JOB_INFO|FED_INFO)' >"$dir/rpc-nolocal.txt" || true

# 2: an array beside it, --array=0-9%2: task 0 runs (job 3), 1-9 wait.
in_root sh -c "cd $p && sbatch --array=0-9%2 -t 5 --wrap 'sleep 100'"
wait_for 3 JobState RUNNING
sleep 1
show 2 >"$out/scontrol-$rel-epoch-array.txt"

# Cancelled: job 1, while RUNNING.
in_root scancel 1 2
sleep 1
show 1 >"$out/scontrol-$rel-cancelled.txt"

# 4: a time limit of one minute.
in_root sh -c "cd $p && sbatch -t 1 --wrap 'sleep 300'"
wait_for 4 JobState RUNNING

# 5: requeued while RUNNING (job.sh traps TERM), at its PENDING/BeginTime step.
in_root sh -c "cd $p && sbatch -t 5 $p/job.sh"
wait_for 5 JobState RUNNING
sleep 1
in_root scontrol requeue 5
wait_for 5 Reason BeginTime 30
show 5 >"$out/scontrol-$rel-requeued.txt"

# An id the controller does not hold: stdout, stderr and the exit status.
set +e
show 999 >"$dir/unknown.out" 2>"$dir/unknown.err"
echo $? >"$dir/unknown.rc"
set -e
{
    echo "# SLURM_TIME_FORMAT=%s TZ=UTC scontrol --local -o show job 999"
    echo "# exit status $(cat "$dir/unknown.rc"), $(wc -c <"$dir/unknown.out") bytes on stdout; stderr:"
    cat "$dir/unknown.err"
} >"$out/scontrol-$rel-unknown.txt"

# 4 turns TIMEOUT (limits are checked every 30 s).
wait_for 4 JobState TIMEOUT 150
sleep 1
show 4 >"$out/scontrol-$rel-timeout.txt"
cp "$dir/nolocal.txt" "$dir/rpc-local.txt" "$dir/rpc-nolocal.txt" "$out/" 2>/dev/null || true
echo "done: $rel"
