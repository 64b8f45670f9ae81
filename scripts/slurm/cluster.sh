#!/usr/bin/env bash
# Start / stop a throwaway single-node SLURM 22.05 cluster (Debian 12 packages) with real accounting.
#
#   scripts/slurm/cluster.sh up   DIR [--lite]   start munged, mariadbd, slurmdbd, slurmctld, slurmd under DIR
#   scripts/slurm/cluster.sh down DIR            stop them (by PID file, never by name), in reverse order
#   scripts/slurm/cluster.sh env  DIR            print the exports a client needs (eval "$(... env DIR)")
#   scripts/slurm/cluster.sh status DIR          exit 0 when the node answers `sinfo` as idle/mixed/allocated
#
# Full mode (default) runs slurmdbd on MariaDB (loopback :3307), so `sacct` works as on a real cluster.
# --lite skips the database and installs a `sacct` shim answering from `squeue --states=all` instead.
# One cluster per machine (fixed ports: slurmctld 6817, slurmd 6818, slurmdbd 6819, mariadbd 3307).
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

usage() { echo "usage: $0 up|down|env|status DIR [--lite]" >&2; exit 2; }
CMD=${1:-}; D=${2:-}; [ -n "$CMD" ] && [ -n "$D" ] || usage
MODE=full; [ "${3:-}" = "--lite" ] && MODE=lite

pid_alive() { local p; p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

print_env() {
  echo "export SLURM_CONF=$D/slurm.conf"
  echo "export PATH=$D/bin:/usr/sbin:/sbin:\$PATH"
}

node_ready() { SLURM_CONF="$D/slurm.conf" sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc|comp)'; }

cmd_down() {
  [ -d "$D" ] || { echo "slurm: nothing to stop in $D"; return 0; }
  for f in slurmd.pid slurmctld.pid slurmdbd.pid mysql/mariadbd.pid munge/munged.pid; do
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
  if pid_alive "$D/slurmctld.pid" && pid_alive "$D/slurmd.pid" && node_ready; then
    echo "slurm: already up in $D"; return 0
  fi
  cmd_down >/dev/null 2>&1 || true
  rm -rf "$D/state" "$D/spool" "$D/mysql" "$D/log"
  mkdir -p "$D"/{state,spool,log,munge,bin}
  chmod 755 "$D"                                         # munge/mysql users must traverse it
  chown munge:munge "$D/munge"; chmod 755 "$D/munge"      # munged demands a 755 socket dir
  local HOST NCPU MEM t0 ACCT
  HOST=$(hostname -s); NCPU=${SLURM_CI_CPUS:-16}
  MEM=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 * 8 / 10 ))   # 80% of RAM, in MB
  t0=$(date +%s%N)

  runuser -u munge -- munged --socket="$D/munge/munge.socket.2" \
    --pid-file="$D/munge/munged.pid" --log-file="$D/munge/munged.log" --seed-file="$D/munge/munged.seed"

  if [ "$MODE" = full ]; then
    ACCT="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
AccountingStoragePass=$D/munge/munge.socket.2"
  else
    ACCT="AccountingStorageType=accounting_storage/none"
  fi

  cat > "$D/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket.2,cred_expire=10
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/linuxproc
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
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$NCPU RealMemory=$MEM Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  cat > "$D/gres.conf" <<CONF
AutoDetect=off
NodeName=$HOST Name=gpu File=/dev/null
NodeName=$HOST Name=gpu File=/dev/zero
CONF
  export SLURM_CONF="$D/slurm.conf"

  if [ "$MODE" = full ]; then
    mkdir -p "$D/mysql"; chown mysql:mysql "$D/mysql"
    mariadb-install-db --user=mysql --datadir="$D/mysql" --skip-test-db \
      --auth-root-authentication-method=socket > "$D/log/mariadb-install.log" 2>&1
    setsid mariadbd --no-defaults --user=mysql --datadir="$D/mysql" \
      --socket="$D/mysql/mysql.sock" --port=3307 --bind-address=127.0.0.1 \
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
DbdPort=6819
SlurmUser=root
LogFile=$D/log/slurmdbd.log
PidFile=$D/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3307
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
  slurmd
  for _ in $(seq 300); do node_ready && break; sleep 0.1; done
  node_ready || { echo "slurm: node not ready; see $D/log/slurmctld.log and $D/log/slurmd.log" >&2; sinfo -R >&2 || true; exit 1; }
  echo "slurm: up ($MODE) in $(( ($(date +%s%N) - t0) / 1000000 )) ms: $(sinfo -h -o '%P %t %N cpus=%c gres=%G')"
}

case "$CMD" in
  up) mkdir -p "$D"; D=$(cd "$D" && pwd); cmd_up ;;
  down) cmd_down ;;
  env) D=$(cd "$D" && pwd); print_env ;;
  status) node_ready ;;
  *) usage ;;
esac
