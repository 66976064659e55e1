#!/usr/bin/env bash
# Installs the real SGLang the server tests watch: SGLang 0.4.10.post2 on the CPU, from PyPI
# (the last release with the `srt_cpu` extra; 0.5.x is CUDA-only there), in a virtualenv kept
# outside the repository (about 6 GB, installed once per machine):
#   ${PULSE_SGLANG_VENV:-/var/cache/pipeline-pulse/sglang-venv}
# Nothing is fetched from a model hub: the tests make their own tiny random model
# (tests/peers/tiny_model.py).
#
# On a CPU without AMX, SGLang 0.4.10 imports a few names it never calls there: its torch-native
# SiluAndMul, GeluAndMul, RMSNorm and GemmaRMSNorm from vLLM, compiled ops from vllm._custom_ops,
# and sgl_kernel (the PyPI sgl-kernel needs libcuda.so.1). This script writes two import shims
# into the virtualenv: a `vllm` package that re-exports SGLang's own layers, and an `sgl_kernel`
# package (with `kvcacheio` and `allreduce`) whose every name imports and raises when called.
# No model code runs through them.
set -euo pipefail

VERSION=0.4.10.post2
TORCH=2.7.1
venv=${PULSE_SGLANG_VENV:-/var/cache/pipeline-pulse/sglang-venv}
marker="$venv/.pulse-sglang-$VERSION"
[ -f "$marker" ] && exit 0

parent=$(dirname "$venv")
if ! mkdir -p "$parent" 2>/dev/null || [ ! -w "$parent" ]; then
    # The SGLang tests then fail and say how to install it.
    echo "cannot install SGLang into $venv: run this script as root, or set PULSE_SGLANG_VENV to a folder of yours" >&2
    exit 0
fi
python=${PYTHON:-python3}
echo "installing SGLang $VERSION (CPU) into $venv (once per machine; about 6 GB)" >&2
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install uv
"$venv/bin/uv" pip install --quiet --python "$venv/bin/python" \
    "sglang[srt_cpu]==$VERSION" "torch==$TORCH"

site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="Import shim written by pipeline-pulse's scripts/install-sglang-peer.sh"

mkdir -p "$site/vllm/model_executor/layers"
printf '"""Not vLLM: %s.\n\nSGLang 0.4.10 on a CPU without AMX imports a few layers from vLLM; here they are SGLang'"'"'s own\ntorch-native ones."""\n' "$shim" >"$site/vllm/__init__.py"
: >"$site/vllm/model_executor/__init__.py"
: >"$site/vllm/model_executor/layers/__init__.py"
printf '"""%s: SGLang'"'"'s own torch-native activations."""\nfrom sglang.srt.layers.activation import GeluAndMul, SiluAndMul  # noqa: F401\n' "$shim" \
    >"$site/vllm/model_executor/layers/activation.py"
printf '"""%s: SGLang'"'"'s own torch-native norms."""\nfrom sglang.srt.layers.layernorm import GemmaRMSNorm, RMSNorm  # noqa: F401\n' "$shim" \
    >"$site/vllm/model_executor/layers/layernorm.py"

# Every name of these modules imports; calling one raises.
absent() {
    cat <<PY
"""$shim: $1 is not here. Every name imports; calling one raises."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def absent(*args, **kwargs):
        raise NotImplementedError(f"$1.{name} is an import shim: not on this CPU")

    absent.__name__ = name
    return absent
PY
}
absent vllm._custom_ops >"$site/vllm/_custom_ops.py"
rm -f "$site/sgl_kernel/_absent.py"
mkdir -p "$site/sgl_kernel"
absent sgl_kernel >"$site/sgl_kernel/__init__.py"
absent sgl_kernel.kvcacheio >"$site/sgl_kernel/kvcacheio.py"
absent sgl_kernel.allreduce >"$site/sgl_kernel/allreduce.py"

SGLANG_USE_CPU_ENGINE=1 "$venv/bin/python" -W ignore -c 'import sglang.launch_server' 2>/dev/null ||
    { echo "SGLang $VERSION does not import in $venv" >&2; exit 1; }
touch "$marker"
echo "SGLang $VERSION ready: $venv/bin/python -m sglang.launch_server" >&2
