#!/usr/bin/env bash
# Brings up the services idemkit's tests use on this machine: Redis, MariaDB (or MySQL), PostgreSQL,
# NATS with JetStream and RabbitMQ.
# Starts each one that is not answering, installs it with apt-get when it is missing, and creates the
# test databases. Idempotent: a second run changes nothing. Loopback only.
#
# A service that its IDEMKIT_TEST_* variable (README, "Testing") puts elsewhere is left alone: MySQL
# and PostgreSQL unless it names the local server on its default port, Redis, NATS and RabbitMQ when
# its host is not loopback (on another loopback port the script starts Redis or NATS there; RabbitMQ
# it starts on its own port, 5672, only, and then waits in vain for the other). The tests create the
# database idemkit_test on their own.
set -euo pipefail

log() { printf '[services] %s\n' "$*" >&2; }

# hostport VAR: the host and port (empty when not given) the IDEMKIT_TEST_* variable VAR names.
hostport() {
  local v=${!1} hp
  case "$1:$v" in
  IDEMKIT_TEST_MYSQL:*'tcp('*) hp=${v#*tcp(}; hp=${hp%%)*} ;;
  IDEMKIT_TEST_MYSQL:*) hp= ;; # no tcp(...): the driver's default, localhost:3306
  IDEMKIT_TEST_POSTGRES:*://*)
    hp=${v#*://}; hp=${hp%%[/?]*}; hp=${hp##*@}
    # libpq and pgx let the query's host and port override the URL's (postgres:///db?host=h&port=p)
    local q= w qh= qp=
    case "$v" in *'?'*) q=${v#*\?} ;; esac
    for w in ${q//&/ }; do
      case "$w" in host=*) qh=${w#host=} ;; port=*) qp=${w#port=} ;; esac
    done
    if [ -n "$qh$qp" ]; then
      local uh up
      read -r uh up <<<"$(splithp "$hp")"
      echo "${qh:-$uh} ${qp:-$up}"; return
    fi ;;
  IDEMKIT_TEST_POSTGRES:*)
    local h= p= w
    for w in $v; do
      case "$w" in host=*) h=${w#host=} ;; port=*) p=${w#port=} ;; esac
    done
    echo "$h $p"; return ;;
  *://*) hp=${v#*://}; hp=${hp##*@}; hp=${hp%%[/?]*} ;;
  *) hp=$v ;;
  esac
  splithp "$hp"
}

# splithp HOSTPORT: host and port (empty when not given) of host, host:port, [v6] or [v6]:port.
splithp() {
  case "$1" in
  '['*']') echo "$1 " ;;
  '['*']:'*) echo "${1%]:*}] ${1##*]:}" ;;
  *:*) echo "${1%:*} ${1##*:}" ;;
  *) echo "$1 " ;;
  esac
}

# elsewhere VAR: whether the service that IDEMKIT_TEST_* variable VAR names is not this machine's to
# bring up: unset, it is; MySQL and PostgreSQL must be the local server on its default port (3306,
# 5432), the others may be on any loopback port.
elsewhere() {
  [ -n "${!1:-}" ] || return 1
  local host port
  read -r host port <<<"$(hostport "$1")"
  case "$host" in '' | 127.0.0.1 | localhost | '[::1]' | ::1) ;; *) return 0 ;; esac
  case "$1" in
  IDEMKIT_TEST_MYSQL) [ "${port:-3306}" != 3306 ] ;;
  IDEMKIT_TEST_POSTGRES) [ "${port:-5432}" != 5432 ] ;;
  *) return 1 ;;
  esac
}

REDIS_ADDR=${IDEMKIT_TEST_REDIS:-127.0.0.1:6379}
REDIS_PORT=${REDIS_ADDR##*:}
DB=idemkit_test

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  log "installing $* with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  as_root apt-get update -qq >/dev/null
  as_root apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # name, tries, command...
  local name=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  log "$name did not come up"; return 1
}

# --- Redis -------------------------------------------------------------------------------------------
redis_up() {
  command -v redis-server >/dev/null || apt_install redis-server
  if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
    log "starting Redis on 127.0.0.1:$REDIS_PORT"
    mkdir -p /tmp/idemkit-redis
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
      --dir /tmp/idemkit-redis --logfile /tmp/idemkit-redis/redis.log
    wait_for Redis 40 redis-cli -p "$REDIS_PORT" ping
  fi
}

# --- MariaDB -----------------------------------------------------------------------------------------
mariadb_up() {
  mysql_ok() { mysql -uroot -h127.0.0.1 -P3306 -e 'select 1'; }
  if ! mysql_ok >/dev/null 2>&1; then
    if [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then apt_install mariadb-server; fi
    log "starting MariaDB"
    as_root mkdir -p /run/mysqld && as_root chown mysql:mysql /run/mysqld 2>/dev/null || true
    bin=/usr/sbin/mariadbd; [ -x "$bin" ] || bin=/usr/sbin/mysqld
    as_root start-stop-daemon --start --oknodo --background --exec "$bin" -- --user=mysql
    if ! wait_for MariaDB 60 mysql_ok; then
      # a fresh install answers on the socket only as root via unix_socket: allow root over TCP
      as_root mysql -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES;" || true
      wait_for MariaDB 20 mysql_ok
    fi
  fi
  mysql -uroot -h127.0.0.1 -P3306 -e "CREATE DATABASE IF NOT EXISTS $DB; CREATE DATABASE IF NOT EXISTS dtm_barrier;"
}

# --- PostgreSQL --------------------------------------------------------------------------------------
postgres_up() {
  pg_ok() { psql -h 127.0.0.1 -U postgres -d postgres -tAc 'select 1'; }
  if ! pg_ok >/dev/null 2>&1; then
    if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then apt_install postgresql; fi
    ver=$(ls /etc/postgresql | sort -V | tail -1)
    # tests connect over loopback as postgres without a password
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    if ! as_root grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      log "allowing trust auth on loopback in $hba"
      as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    fi
    log "starting PostgreSQL $ver"
    as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
    wait_for PostgreSQL 60 pg_ok
  fi
  if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1 from pg_database where datname='$DB'")" != 1 ]; then
    psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $DB" >/dev/null
  fi
}

# --- NATS with JetStream -----------------------------------------------------------------------------
nats_up() {
  local _host
  NATS_PORT=4222
  # The port of IDEMKIT_TEST_NATS as hostport reads it (nats://127.0.0.1 has none: 4222; a trailing
  # / or query is not part of it).
  if [ -n "${IDEMKIT_TEST_NATS:-}" ]; then read -r _host NATS_PORT <<<"$(hostport IDEMKIT_TEST_NATS)"; NATS_PORT=${NATS_PORT:-4222}; fi
  # The server's first line is INFO {...}; JetStream must be on.
  nats_info() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$NATS_PORT && IFS= read -r l <&3 && printf '%s' \"\$l\""; }
  if ! nats_info >/dev/null 2>&1; then
    [ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null || apt_install nats-server
    bin=$(command -v nats-server || echo /usr/sbin/nats-server)
    log "starting NATS with JetStream on 127.0.0.1:$NATS_PORT"
    as_root mkdir -p /var/lib/nats-server
    as_root start-stop-daemon --start --oknodo --background --exec "$bin" -- \
      -a 127.0.0.1 -p "$NATS_PORT" -js -sd /var/lib/nats-server -l /var/log/nats-server.log
    wait_for NATS 40 nats_info
  fi
  if ! nats_info 2>/dev/null | grep -q '"jetstream":true'; then
    log "NATS on 127.0.0.1:$NATS_PORT answers without JetStream; restart it with -js"; exit 1
  fi
}

# --- RabbitMQ ----------------------------------------------------------------------------------------
rabbitmq_up() {
  AMQP_URL=${IDEMKIT_TEST_AMQP:-amqp://guest:guest@127.0.0.1:5672/}
  AMQP_PORT=$(printf '%s' "$AMQP_URL" | sed -E 's#^[a-z]+://([^@/]*@)?[^:/]*:?([0-9]*).*#\2#'); AMQP_PORT=${AMQP_PORT:-5672}
  # An AMQP 0-9-1 server answers the protocol header with a Connection.Start frame (type 1).
  amqp_ok() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$AMQP_PORT && printf 'AMQP\\0\\0\\11\\1' >&3 && head -c 1 <&3 | od -An -tx1 | grep -q 01"; }
  if ! amqp_ok >/dev/null 2>&1; then
    [ -x /usr/sbin/rabbitmq-server ] || apt_install rabbitmq-server
    log "starting RabbitMQ (it takes a few seconds)"
    as_root /usr/sbin/rabbitmq-server -detached >/dev/null 2>&1 || true
    wait_for RabbitMQ 180 amqp_ok
  fi
}

for svc in redis:IDEMKIT_TEST_REDIS mariadb:IDEMKIT_TEST_MYSQL postgres:IDEMKIT_TEST_POSTGRES \
  nats:IDEMKIT_TEST_NATS rabbitmq:IDEMKIT_TEST_AMQP; do
  var=${svc#*:}
  if elsewhere "$var"; then
    log "$var=${!var}: not bringing that one up here"
  else
    "${svc%%:*}_up"
  fi
done
log "services up; database $DB exists where this script manages the server"
