#!/usr/bin/env bash
# The client benchmark's compiled anchors (bench/anchors/) build offline from Debian's
# packages: rabbitmq-c (librabbitmq-dev, with gcc and pkg-config) and amqp091-go (golang-go
# and golang-github-rabbitmq-amqp091-go-dev, used in GOPATH mode).  Install whatever of them
# is missing; without root or sudo say so and go on (the benchmark skips those rows).
set -euo pipefail
missing=()
for pkg in gcc pkg-config librabbitmq-dev golang-go golang-github-rabbitmq-amqp091-go-dev; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }
echo "compiled anchors: installing Debian's ${missing[*]}"
if ! { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
       apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
  echo "compiled anchors: could not install ${missing[*]}; the benchmark skips their rows" >&2
fi
