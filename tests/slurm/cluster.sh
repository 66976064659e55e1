#!/usr/bin/env bash
# A real single-node SLURM cluster (Debian's slurm-wlm 22.05 and munge) that lives entirely in
# one folder: its munge key and socket, slurm.conf, state, spool, pid and log files. Nothing
# touches /etc, /var or /run, so two clusters (two test processes) can run on one machine at
# once; each gets its own free ports and munge socket. Needs root (slurmd runs jobs as root).
#
#   cluster.sh start DIR   write DIR/slurm.conf, start munged, slurmctld and slurmd, wait until
#                          the node is idle (at most 30 s), print `export SLURM_CONF=...`
#   cluster.sh stop DIR    kill the daemons, the job steps and the jobs of that cluster
#
# Chosen to keep tests short (tests/testdata/slurm/README.md): KillWait=5 (SIGTERM to SIGKILL
# at a time limit or scancel), MinJobAge=300 (a finished job stays in squeue 5 minutes),
# cred_expire=10 (a requeued job may start again 10 s later, not 120 s).
set -euo pipefail
# The daemons and mungekey live in /usr/sbin, which a non-root PATH leaves out.
PATH=$PATH:/usr/sbin:/sbin

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
mkdir -p "$2"
dir=$(cd "$2" && pwd)
conf=$dir/slurm.conf

# Two free TCP ports on 127.0.0.1 (the kernel's choice, so two clusters do not collide).
free_ports() {
    python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# The pids of this cluster's daemons and job steps (they carry PULSE_SLURM_CLUSTER=DIR, set
# only on the daemons and inherited by what slurmd starts) and of all their descendants, the
# jobs among them. With `steps`, only the job steps (slurmstepd) and their descendants.
members() {
    local roots p e=
    roots=$(grep -lzxF "PULSE_SLURM_CLUSTER=$dir" /proc/[0-9]*/environ 2>/dev/null |
        sed 's|^/proc/||; s|/environ$||') || true
    if [ "${1:-}" = steps ]; then
        for p in $roots; do
            [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ] && e+=" $p"
        done
        roots=${e:-}
    fi
    [ -n "$roots" ] || return 0
    ps -e -o pid=,ppid= | awk -v roots="$roots" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do {
                grew = 0
                for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
            } while (grew)
            for (p in keep) if (p in parent) print p
        }'
}

stop() {
    local f p
    # The jobs first: slurmstepd and what it started, which would outlive slurmd. Not
    # slurmctld's own helper (slurmscriptd): without it slurmctld hangs on its way out.
    p=$(members steps)
    # shellcheck disable=SC2086
    [ -z "$p" ] || kill -KILL $p 2>/dev/null || true
    for f in slurmd slurmctld munged; do
        p=$(cat "$dir/$f.pid" 2>/dev/null) || continue
        kill "$p" 2>/dev/null || true
    done
    # Give the daemons 3 s to exit on their SIGTERM, then kill what is left.
    for _ in $(seq 30); do
        p=$(members)
        [ -z "$p" ] && return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $p 2>/dev/null || true
}

# slurm.conf, with these two ports.
write_conf() {
    local host
    host=$(hostname -s)
    cat >"$conf" <<EOF
# Written by tests/slurm/cluster.sh.
ClusterName=pulse
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$1
SlurmdPort=$2
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# Both munge plugins take the socket from here; cred_expire is also how long a requeued job
# waits before it may start again (default 120 s).
AuthInfo=socket=$dir/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
PlugStackConfig=$dir/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
MailProg=/bin/true
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
# The main scheduling loop every second (default 60 s): a requeued job whose begin time has
# passed, or the next task of a throttled array, starts within a second.
SchedulerParameters=sched_interval=1
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
# Room for a busy queue (the default is 10,000): tests/it/slurm.rs fills one with held jobs.
MaxJobCount=200000
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    # A test's own settings (a Prolog and Epilog), written there before `start`.
    if [ -s "$dir/extra.conf" ]; then echo "Include $dir/extra.conf" >>"$conf"; fi
}

start() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null || {
        echo "no SLURM: run \`apt-get install slurm-wlm munge\` (as root)" >&2
        exit 1
    }
    if [ -e "$dir/slurmctld.pid" ]; then stop; fi
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
    # munged refuses a socket folder that others may write into.
    chmod 755 "$dir" "$dir/munge"
    rm -f "$dir"/*.log "$dir"/*.out "$dir"/*.pid "$dir/munge/"*
    [ -s "$dir/munge.key" ] || mungekey --create --keyfile="$dir/munge.key"
    chmod 600 "$dir/munge.key"
    : >"$dir/plugstack.conf"
    # Only the daemons carry the marker `members` looks for, not this script nor its children.
    local env=(env "SLURM_CONF=$conf" "PULSE_SLURM_CLUSTER=$dir")
    # munged in the foreground logs to stderr; it writes its --pid-file all the same.
    "${env[@]}" setsid munged --foreground --force --socket="$dir/munge/munge.socket.2" \
        --key-file="$dir/munge.key" --pid-file="$dir/munged.pid" \
        --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        </dev/null >>"$dir/munged.log" 2>&1 &
    local deadline=$((SECONDS + 30)) state= ctld node attempt
    until [ -S "$dir/munge/munge.socket.2" ] || [ $SECONDS -ge $deadline ]; do sleep 0.05; done
    # Another process may take a free port between our look and the daemon's bind: then the
    # daemon exits at once, and we try again with two other ports.
    for attempt in 1 2 3; do
        # shellcheck disable=SC2046 # two words, two ports
        write_conf $(free_ports)
        # -D: in the foreground, so $! is the daemon (setsid and env exec it, no fork).
        "${env[@]}" setsid slurmctld -D -f "$conf" </dev/null >>"$dir/slurmctld.out" 2>&1 &
        ctld=$!
        echo $ctld >"$dir/slurmctld.pid"
        "${env[@]}" setsid slurmd -D -f "$conf" </dev/null >>"$dir/slurmd.out" 2>&1 &
        node=$!
        echo $node >"$dir/slurmd.pid"
        while [ $SECONDS -lt $deadline ]; do
            state=$(SLURM_CONF=$conf timeout 10 sinfo -h -o %T 2>/dev/null || true)
            [ "$state" = idle ] && break 2
            kill -0 $ctld 2>/dev/null && kill -0 $node 2>/dev/null || break
            sleep 0.1
        done
        kill $ctld $node 2>/dev/null || true
        wait $ctld $node 2>/dev/null || true
        echo "cluster.sh: attempt $attempt: slurmctld or slurmd did not come up" >>"$dir/slurmctld.out"
    done
    if [ "$state" != idle ]; then
        echo "the SLURM node of $dir is not idle after 30 s (${state:-no answer}); logs:" >&2
        tail -n 20 "$dir"/munged.log "$dir"/slurmctld.out "$dir"/slurmd.out >&2 || true
        stop
        exit 1
    fi
    echo "export SLURM_CONF=$conf"
}

case "$cmd" in
start) start ;;
stop) stop ;;
*) usage ;;
esac
