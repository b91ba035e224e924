#!/usr/bin/env bash
# Make sure a RabbitMQ broker listens at AMQP_URL's host:port (default 127.0.0.1:5672; a rabbitmq-stream://
# url: 5552).
# Only a broker on this machine's default port is ever started (Debian's rabbitmq-server,
# installed first when it is missing): for another host or port this says what is wrong
# and exits 1, and starts nothing.
set -euo pipefail

url="${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"
hostport="${url#*://}"; hostport="${hostport#*@}"; hostport="${hostport%%/*}"; hostport="${hostport%%\?*}"
host="${hostport%%:*}"
case "$url" in  # each scheme's default port
  rabbitmq-stream+tls://*) port=5551 ;;
  rabbitmq-stream://*) port=5552 ;;
  amqps://*) port=5671 ;;
  *) port=5672 ;;
esac
[[ "$hostport" == *:* ]] && port="${hostport##*:}"
[[ -z "$host" ]] && host=127.0.0.1

listening() { (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; }

host="${host#[}"; host="${host%]}"  # [::1]

if listening; then
  echo "rabbitmq: listening on $host:$port"
  exit 0
fi
if [[ ! "$host" =~ ^[0-9.]+$ && "$host" != *:* ]] && ! getent hosts "$host" >/dev/null 2>&1; then
  echo "rabbitmq: the host name $host does not resolve (from $url, password hidden)" | sed -E 's#//[^:/@]*:[^@]*@#//***@#' >&2
  exit 1
fi
if [[ "$url" == rabbitmq-stream* ]]; then
  echo "rabbitmq: nothing listens on $host:$port for the stream protocol; it needs the rabbitmq_stream plugin" \
       "(rabbitmq-plugins enable rabbitmq_stream) on a broker started by you: none is started here" >&2
  exit 1
fi
case "$host" in
  127.*|localhost|::1) ;;
  *) echo "rabbitmq: nothing listens on $host:$port, which is not this machine: start the broker there" >&2; exit 1 ;;
esac
if [[ "$port" != 5672 ]]; then
  echo "rabbitmq: nothing listens on $host:$port; a local broker is started only for the default port 5672" \
       "(start yours on $port, or use amqp://127.0.0.1:5672/)" >&2
  exit 1
fi

as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }

if ! command -v rabbitmq-server >/dev/null 2>&1 && [[ ! -x /usr/sbin/rabbitmq-server ]]; then
  echo "rabbitmq: installing Debian's rabbitmq-server"
  as_root apt-get update -qq
  # No init system here: keep the package's scripts from starting it, we do that below.
  as_root env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -qq rabbitmq-server >/dev/null
fi
PATH="$PATH:/usr/sbin"
echo "rabbitmq: starting the local broker"
as_root rabbitmq-server -detached || true
for _ in $(seq 1 90); do
  if listening; then
    # The port opens before the broker has finished booting its apps.
    as_root rabbitmqctl await_startup --timeout 60 >/dev/null 2>&1 || true
    echo "rabbitmq: listening on $host:$port"
    exit 0
  fi
  sleep 1
done
echo "rabbitmq: did not come up on $host:$port within 90 s" >&2
exit 1
