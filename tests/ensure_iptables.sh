#!/usr/bin/env bash
# The partition tests drop a private node's packets with iptables (this kernel has no netem):
# install Debian's iptables when it is missing.  Rules the tests add name only their own
# node's port on loopback, carry a comment of their own, and are removed after each test.
set -euo pipefail
if command -v iptables >/dev/null 2>&1 || [[ -x /usr/sbin/iptables ]]; then
  exit 0
fi
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }
echo "iptables: installing Debian's iptables"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
