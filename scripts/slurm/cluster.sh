#!/usr/bin/env bash
# Start / stop a throwaway SLURM 22.05 cluster (Debian 12 packages) with real accounting, on one machine.
#
#   scripts/slurm/cluster.sh up   DIR [--lite] [--nodes N]   start munged, mariadbd, slurmdbd, slurmctld, slurmd(s)
#   scripts/slurm/cluster.sh down DIR            stop them (by PID file, never by name), in reverse order
#   scripts/slurm/cluster.sh env  DIR            print the exports a client needs (eval "$(... env DIR)")
#   scripts/slurm/cluster.sh status DIR          exit 0 when every node answers `sinfo` as idle/mixed/allocated
#
# Full mode (default) runs slurmdbd on MariaDB (loopback), so `sacct` works as on a real cluster.
# --lite skips the database and installs a `sacct` shim answering from `squeue --states=all` instead.
# Single node (default): one slurmd named after the host at 127.0.0.1; ports slurmctld 6817, slurmd 6818,
# slurmdbd 6819, mariadbd 3307.
# --nodes N (N >= 2): N slurmd daemons on this one machine (`slurmd -N nK`), node nK at the loopback address
# 127.0.0.(K+1) with its own slurmd port 693K and its own spool, pid and log files (%n); every address of
# 127.0.0.0/8 is loopback on Linux, so each node has an address of its own without network namespaces, and a
# Ray node can take it as --node-ip-address (docs/gpu.md "The cluster rehearsal"). Other ports (slurmctld 6917,
# slurmdbd 6919, mariadbd 3317), so a single-node and a multi-node cluster can run side by side; all ports lie
# outside Ray's worker-port range (10002-19999). SLURM_CI_PROCTRACK=cgroup uses proctrack/cgroup (cgroup v1, as
# most production clusters) instead of linuxproc.
# Needs root and the packages slurm-wlm munge (+ slurmdbd mariadb-server for full mode): scripts/ci_slurm.sh
# installs them. Every file lives under DIR. `up` on a running cluster is a no-op; `up` on a stopped one
# starts from a clean state. Settings changed from SLURM's defaults, and why
# (see the reference note on SLURM sweeps):
#   cred_expire=10      a requeued job waits cred_expire seconds before it may start again (default 120)
#   KillWait=2          submitit ignores SIGTERM, so a cancelled job would hold the node for 30 s
#   sched_interval=1    jobs start within ~1 s instead of ~3 s
#   MinJobAge=3600      finished jobs stay visible to squeue (the lite shim reads them from there)
#   config_overrides    the node advertises SLURM_CI_CPUS CPUs (default 16) even on a 2-core machine,
#                       so several cheap test jobs run at once instead of queueing behind each other
#   Gres=gpu:2          two fake GPUs (/dev/null, /dev/zero): gpus_per_node is scheduled, nothing enforced
set -euo pipefail
export PATH="/usr/sbin:/sbin:$PATH"

usage() { echo "usage: $0 up|down|env|status DIR [--lite] [--nodes N]" >&2; exit 2; }
CMD=${1:-}; D=${2:-}; [ -n "$CMD" ] && [ -n "$D" ] || usage
shift 2
MODE=full; NODES=1
while [ $# -gt 0 ]; do
  case "$1" in
    --lite) MODE=lite; shift ;;
    --nodes) [[ "${2:-}" =~ ^[1-9]$ ]] || { echo "slurm: --nodes ${2:-}: give a number of nodes from 1 to 9" >&2; exit 2; }
             NODES=$2; shift 2 ;;
    *) echo "slurm: unknown option $1; allowed: --lite, --nodes N" >&2; exit 2 ;;
  esac
done

pid_alive() { local p; p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

print_env() {
  echo "export SLURM_CONF=$D/slurm.conf"
  echo "export PATH=$D/bin:/usr/sbin:/sbin:\$PATH"
}

node_ready() {   # every node of slurm.conf answers idle/mixed/allocated/completing
  local want have
  want=$(grep -c '^NodeName=' "$D/slurm.conf" 2>/dev/null) || return 1
  have=$(SLURM_CONF="$D/slurm.conf" sinfo -h -N -o '%N %t' 2>/dev/null | grep -cE ' (idle|mix|alloc|comp)') || true
  [ "${have:-0}" -ge "$want" ]
}
slurmd_pids() { ls "$D"/slurmd*.pid 2>/dev/null | sed "s|^$D/||"; }

cmd_down() {
  [ -d "$D" ] || { echo "slurm: nothing to stop in $D"; return 0; }
  for f in $(slurmd_pids) slurmctld.pid slurmdbd.pid mysql/mariadbd.pid munge/munged.pid; do
    local p; p=$(cat "$D/$f" 2>/dev/null) && [ -n "$p" ] || continue
    kill "$p" 2>/dev/null || { rm -f "$D/$f"; continue; }
    for _ in $(seq 150); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
    rm -f "$D/$f"
    echo "slurm: stopped ${f%.pid} ($p)"
  done
}

cmd_up() {
  command -v slurmctld >/dev/null || { echo "slurm: slurmctld not found; run scripts/ci_slurm.sh --install-only" >&2; exit 1; }
  [ "$(id -u)" = 0 ] || { echo "slurm: this recipe needs root (daemons, runuser, chown)" >&2; exit 1; }
  local f alive=1
  for f in $(slurmd_pids); do pid_alive "$D/$f" || alive=0; done
  [ -n "$(slurmd_pids)" ] || alive=0
  if [ $alive = 1 ] && pid_alive "$D/slurmctld.pid" && node_ready && [ "$(grep -c '^NodeName=' "$D/slurm.conf")" = "$NODES" ]; then
    echo "slurm: already up in $D"; return 0
  fi
  cmd_down >/dev/null 2>&1 || true
  rm -rf "$D/state" "$D/spool" "$D/mysql" "$D/log"
  mkdir -p "$D"/{state,spool,log,munge,bin}
  chmod 755 "$D"                                         # munge/mysql users must traverse it
  chown munge:munge "$D/munge"; chmod 755 "$D/munge"      # munged demands a 755 socket dir
  local HOST NCPU MEM t0 ACCT CTLD_PORT DBD_PORT DB_PORT NODE_LINES GRES_LINES SPOOL PIDF LOGF PROCTRACK i
  HOST=$(hostname -s); NCPU=${SLURM_CI_CPUS:-16}
  MEM=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 * 8 / 10 / NODES ))   # 80% of RAM over the nodes, MB
  PROCTRACK=${SLURM_CI_PROCTRACK:-linuxproc}
  t0=$(date +%s%N)
  if [ "$NODES" = 1 ]; then
    CTLD_PORT=6817; DBD_PORT=6819; DB_PORT=3307
    SPOOL=$D/spool; PIDF=$D/slurmd.pid; LOGF=$D/log/slurmd.log
    NODE_LINES="NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPU RealMemory=$MEM Gres=gpu:2 State=UNKNOWN"
    GRES_LINES="NodeName=$HOST Name=gpu File=/dev/null
NodeName=$HOST Name=gpu File=/dev/zero"
  else
    CTLD_PORT=6917; DBD_PORT=6919; DB_PORT=3317
    SPOOL=$D/spool/%n; PIDF=$D/slurmd.%n.pid; LOGF=$D/log/slurmd.%n.log
    NODE_LINES=""; GRES_LINES=""
    for i in $(seq "$NODES"); do
      NODE_LINES+="NodeName=n$i NodeHostname=$HOST NodeAddr=127.0.0.$((i + 1)) Port=$((6930 + i)) CPUs=$NCPU RealMemory=$MEM Gres=gpu:2 State=UNKNOWN"$'\n'
      GRES_LINES+="NodeName=n$i Name=gpu File=/dev/null"$'\n'"NodeName=n$i Name=gpu File=/dev/zero"$'\n'
    done
    NODE_LINES=${NODE_LINES%$'\n'}; GRES_LINES=${GRES_LINES%$'\n'}
  fi

  runuser -u munge -- munged --socket="$D/munge/munge.socket.2" \
    --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed"

  if [ "$MODE" = full ]; then
    ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$D/munge/munge.socket.2"
  else
    ACCT="AccountingStorageType=accounting_storage/none"
  fi

  cat > "$D/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$D/state
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$PIDF
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$LOGF
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$ACCT
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=2
MaxArraySize=10001
MaxJobCount=100000
MailProg=/bin/true
GresTypes=gpu
$NODE_LINES
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat > "$D/gres.conf" <<CONF
AutoDetect=off
$GRES_LINES
CONF
  if [ "$PROCTRACK" = cgroup ]; then   # cgroup v1 freezer only: nothing constrained (task/none)
    printf '%s\n' CgroupPlugin=cgroup/v1 CgroupAutomount=no CgroupMountpoint=/sys/fs/cgroup ConstrainCores=no \
      ConstrainRAMSpace=no ConstrainDevices=no > "$D/cgroup.conf"
  else
    rm -f "$D/cgroup.conf"
  fi
  export SLURM_CONF="$D/slurm.conf"

  if [ "$MODE" = full ]; then
    mkdir -p "$D/mysql"; chown mysql:mysql "$D/mysql"
    mariadb-install-db --user=mysql --datadir="$D/mysql" --skip-test-db \
      --auth-root-authentication-method=socket > "$D/log/mariadb-install.log" 2>&1
    setsid mariadbd --no-defaults --user=mysql --datadir="$D/mysql" \
      --socket="$D/mysql/mysql.sock" --port=$DB_PORT --bind-address=127.0.0.1 \
      --pid-file="$D/mysql/mariadbd.pid" --log-error="$D/mysql/mariadb.err" \
      --skip-log-bin --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
    local ok=0
    for _ in $(seq 200); do
      mariadb --no-defaults -S "$D/mysql/mysql.sock" -uroot -e 'select 1' >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1
    done
    [ $ok = 1 ] || { echo "slurm: mariadbd did not start; see $D/mysql/mariadb.err" >&2; exit 1; }
    mariadb --no-defaults -S "$D/mysql/mysql.sock" -uroot -e "
      CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    cat > "$D/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket.2
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$D/log/slurmdbd.log
PidFile=$D/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
    chmod 600 "$D/slurmdbd.conf"          # slurmdbd refuses a group/world-readable conf
    slurmdbd                              # finds slurmdbd.conf next to $SLURM_CONF
    ok=0
    for _ in $(seq 150); do sacctmgr -i add cluster ci >/dev/null 2>&1 && { ok=1; break; }; sleep 0.2; done
    [ $ok = 1 ] || { echo "slurm: slurmdbd did not answer; see $D/log/slurmdbd.log" >&2; exit 1; }
    rm -f "$D/bin/sacct"
  else
    # submitit only runs `sacct -o JobID,State,NodeList --parsable2 -j ID...`; answer it from squeue.
    cat > "$D/bin/sacct" <<'SHIM'
#!/usr/bin/env bash
ids=(); while [ $# -gt 0 ]; do case "$1" in -j|--jobs) ids+=("$2"); shift 2;; *) shift;; esac; done
echo "JobID|State|NodeList"; [ ${#ids[@]} -eq 0 ] && exit 0
IFS=,; squeue --noheader --states=all --array --jobs="${ids[*]}" --format="%i|%T|%N" 2>/dev/null; exit 0
SHIM
    chmod +x "$D/bin/sacct"
  fi

  slurmctld
  if [ "$NODES" = 1 ]; then slurmd; else for i in $(seq "$NODES"); do slurmd -N "n$i"; done; fi
  for _ in $(seq 300); do node_ready && break; sleep 0.1; done
  node_ready || { echo "slurm: nodes not ready; see $D/log/slurmctld.log and $D/log/slurmd*.log" >&2; sinfo -R >&2 || true; exit 1; }
  echo "slurm: up ($MODE, $NODES node(s), proctrack/$PROCTRACK) in $(( ($(date +%s%N) - t0) / 1000000 )) ms:" \
    "$(sinfo -h -N -o '%N@%o %t cpus=%c gres=%G' | tr '\n' ' ')"
}

case "$CMD" in
  up) mkdir -p "$D"; D=$(cd "$D" && pwd); cmd_up ;;
  down) cmd_down ;;
  env) D=$(cd "$D" && pwd); print_env ;;
  status) node_ready ;;
  *) usage ;;
esac
