#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine (no systemd, no accounting database), for tests.
#   tests/cluster/slurm_local.sh start   install slurm-wlm and munge if missing (needs root), write the
#                                        configuration, start munged, slurmctld and slurmd with two fake GPUs
#   tests/cluster/slurm_local.sh stop    stop the daemons this script started, by PID
# The recipe follows ../shared/notes/snakemake-practice.md section 5 (verified on Debian 12).
set -euo pipefail
STATE=${SLURM_LOCAL_STATE:-/tmp/trainingcost-slurm}
mkdir -p "$STATE"

stop() {
    for pidfile in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
        if [[ -s $pidfile ]] && grep -qx "$(cat "$pidfile")" "$STATE/started" 2>/dev/null; then
            pid=$(cat "$pidfile")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    rm -f "$STATE/started"
    # The configuration this script wrote goes too (or the machine's own comes back): with a slurm.conf and no
    # controller, every `scontrol`, and so every snakemake call through the SLURM plugin, waits 10 s.
    if [[ -f "$STATE/wrote-config" ]]; then
        rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf
        for kept in "$STATE"/saved.*.conf; do [[ -f $kept ]] && mv "$kept" "/etc/slurm/${kept##*/saved.}"; done
        rm -f "$STATE/wrote-config"
    fi
}

start() {
    if [[ $(id -u) != 0 ]]; then echo "slurm_local.sh: needs root to install and start SLURM" >&2; exit 3; fi
    stop  # daemons left by an earlier start of this script
    trap 'stop' ERR  # a failed start leaves no daemon behind
    if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
        echo "slurm_local.sh: a SLURM daemon this script did not start is running; not touching it" >&2; exit 4
    fi
    if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null
        apt-get install -y -qq slurm-wlm munge >/dev/null
    fi
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 3 / 4 ))  # MB, below what slurmd detects
    mkdir -p /etc/slurm /run/munge /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
    chown munge:munge /run/munge
    chown slurm:slurm /var/spool/slurmctld /var/log/slurm
    [[ -s /etc/munge/munge.key ]] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key; }
    for i in 0 1; do [[ -c /dev/fakegpu$i ]] || mknod /dev/fakegpu$i c 1 3; done
    if [[ ! -f "$STATE/wrote-config" ]]; then  # keep the machine's own files, to put back at stop
        for conf in slurm.conf gres.conf; do [[ -f /etc/slurm/$conf ]] && cp -p "/etc/slurm/$conf" "$STATE/saved.$conf"; done
        : > "$STATE/wrote-config"
    fi
    cat > /etc/slurm/slurm.conf <<CONF
ClusterName=trainingcostci
GresTypes=gpu
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
MinJobAge=600
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory Gres=gpu:fake:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    echo "NodeName=$host Name=gpu Type=fake File=/dev/fakegpu[0-1]" > /etc/slurm/gres.conf
    : > "$STATE/started"
    if ! pgrep -x munged >/dev/null; then
        rm -f /run/munge/munged.pid
        runuser -u munge -- /usr/sbin/munged
        for _ in $(seq 50); do [[ -s /run/munge/munged.pid ]] && break; sleep 0.1; done
        cat /run/munge/munged.pid >> "$STATE/started"
    fi
    # A pid file left by an earlier, killed daemon would be read below before the new daemon writes its own, and
    # the new daemon would outlive `stop` (none of ours runs here: checked above).
    rm -f /run/slurmctld.pid /run/slurmd.pid
    /usr/sbin/slurmctld -c  # -c: a fresh controller, no jobs or node states left by an earlier, killed run
    for _ in $(seq 50); do [[ -s /run/slurmctld.pid ]] && break; sleep 0.1; done
    cat /run/slurmctld.pid >> "$STATE/started"
    /usr/sbin/slurmd
    for _ in $(seq 50); do [[ -s /run/slurmd.pid ]] && break; sleep 0.1; done
    cat /run/slurmd.pid >> "$STATE/started"
    for _ in $(seq 100); do
        if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed)'; then echo "slurm_local.sh: cluster up ($host, $cpus CPUs, 2 fake GPUs)"; return 0; fi
        sleep 0.2
    done
    echo "slurm_local.sh: the node did not come up" >&2
    sinfo >&2 || true
    tail -5 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
    stop
    exit 1
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
