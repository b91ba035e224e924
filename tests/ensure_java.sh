#!/usr/bin/env bash
# Spark needs a Java runtime (17 or later): install Debian's headless JRE when none is found.
set -euo pipefail
if command -v java >/dev/null 2>&1 || [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then
  exit 0
fi
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }
echo "java: installing Debian's headless JRE for Spark"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null
