#!/usr/bin/env bash
# Start the local PostgreSQL and MariaDB this machine has, wait until they answer, and
# print `export` lines for the test database URLs. Prints nothing for a database the
# machine does not have, so its tests skip (or fail under CI=true).
# Usage: eval "$(scripts/services.sh)"
set -u

log() { echo "services: $*" >&2; }

wait_for() { # name, command...
  local name=$1; shift
  for _ in $(seq 1 60); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  log "$name did not answer within 60 s"
  return 1
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
my_up() { mariadb-admin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1 || mysqladmin --protocol=tcp -h127.0.0.1 -P3306 -uroot ping >/dev/null 2>&1; }

if [ -z "${NOTIFYONCE_TEST_POSTGRES_URL:-}" ] && command -v pg_isready >/dev/null 2>&1; then
  if ! pg_up && ! pgrep -x postgres >/dev/null 2>&1 && [ -d /etc/postgresql ] && command -v pg_ctlcluster >/dev/null 2>&1; then
    log "starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start >&2 || true
  fi
  if wait_for PostgreSQL pg_up; then
    echo "export NOTIFYONCE_TEST_POSTGRES_URL=postgresql://root@127.0.0.1:5432/test"
  fi
fi

if [ -z "${NOTIFYONCE_TEST_MYSQL_URL:-}" ] && [ -x /usr/sbin/mariadbd ]; then
  # A busy server can miss one ping: only start one when no mariadbd process exists.
  if ! my_up && ! pgrep -x mariadbd >/dev/null 2>&1; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd >&2 || true
  fi
  if wait_for MariaDB my_up; then
    echo "export NOTIFYONCE_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/test"
  fi
fi
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping; }
if [ -z "${NOTIFYONCE_TEST_REDIS_URL:-}" ] && command -v redis-cli >/dev/null 2>&1; then
  if ! redis_up >/dev/null 2>&1 && ! pgrep -x redis-server >/dev/null 2>&1 && command -v redis-server >/dev/null 2>&1; then
    log "starting Redis"
    redis-server --bind 127.0.0.1 --port 6379 --daemonize yes >&2 || true
  fi
  if wait_for Redis redis_up; then
    echo "export NOTIFYONCE_TEST_REDIS_URL=redis://127.0.0.1:6379/0"
  fi
fi
amqp_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
if ! amqp_up && command -v rabbitmq-server >/dev/null 2>&1; then
  if ! pgrep -f beam.smp >/dev/null 2>&1; then
    log "starting RabbitMQ"
    rabbitmq-server -detached >&2 || true
  fi
  wait_for RabbitMQ amqp_up || true
fi
exit 0
