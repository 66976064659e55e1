#!/usr/bin/env bash
# Builds every release artifact into dist/, from one release binary for glibc 2.17 (compiled
# once, by maturin with zig, and reused for all):
#   pipeline_pulse-VERSION-py3-none-manylinux_2_17_x86_64...whl   pip install; `pipeline-pulse` on the PATH
#   pipeline-pulse-VERSION-x86_64-linux-gnu.tar.gz                 the binary, licences, README,
#                                                                 CHANGELOG, systemd unit, dashboards,
#                                                                 Prometheus rules, Alertmanager example
#   pipeline-pulse_VERSION-1_amd64.deb                            cargo-deb: unit enabled, system user
#   pipeline-pulse-VERSION-image.tar.gz                           the Dockerfile's image (docker load, podman load)
#   SHA256SUMS
# The tools come from the registries this project reaches: maturin and ziglang from PyPI (into
# a virtualenv of their own), cargo-deb from crates.io, buildah and mmdebstrap from Debian.
# Where the image's base cannot be pulled, it is made from Debian's packages under the base's
# name first, so the same Dockerfile builds here and anywhere.
#
# usage: scripts/package.sh            # as root for the image (buildah); IMAGE=0 skips it
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'package: %s\n' "$*" >&2; }

VERSION=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
TARGET=x86_64-unknown-linux-gnu
TOOLS=${PACKAGE_TOOLS:-/var/cache/pipeline-pulse/package-venv}
IMAGE=${IMAGE:-1}
BASE=docker.io/library/debian:bookworm-slim
NAME=pipeline-pulse-$VERSION-x86_64-linux-gnu
# The commit's time as the build date: the same commit packages the same binary.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}

# --- tools ------------------------------------------------------------------------------------
if [[ ! -x $TOOLS/bin/maturin || ! -x $TOOLS/bin/python-zig ]]; then
    say "installing maturin and ziglang into $TOOLS"
    python3 -m venv "$TOOLS"
    "$TOOLS/bin/pip" install --quiet 'maturin>=1.5,<2' 'ziglang>=0.13,<0.18'
fi
export PATH=$TOOLS/bin:$PATH
command -v cargo-deb >/dev/null || {
    say "installing cargo-deb from crates.io"
    cargo install --locked --quiet cargo-deb
}
rustup target list --installed 2>/dev/null | grep -qx "$TARGET" || rustup target add "$TARGET"

rm -rf dist target/package
mkdir -p dist target/package/debian

# --- 1. the binary, and the wheel around it ---------------------------------------------------
say "building the release binary for glibc 2.17 and the wheel (maturin --zig)"
maturin build --release --locked --zig --compatibility manylinux2014 --target "$TARGET" \
    --out dist --quiet
BIN=target/$TARGET/release/pipeline-pulse
[[ -x $BIN ]] || { say "maturin left no binary at $BIN"; exit 1; }

# --- 2. the archive ---------------------------------------------------------------------------
say "archive $NAME.tar.gz"
stage=target/package/$NAME
mkdir -p "$stage"/{systemd,grafana,prometheus/rules,alertmanager,actions}
# Debug line tables are most of its size: the artifacts carry the stripped binary.
strip --strip-debug -o "$stage/pipeline-pulse" "$BIN"
install -m 0644 LICENSE-MIT LICENSE-APACHE README.md CHANGELOG.md "$stage/"
install -m 0644 deploy/systemd/pipeline-pulse.service deploy/systemd/pipeline-pulse.toml "$stage/systemd/"
install -m 0644 grafana/*.json "$stage/grafana/"
install -m 0644 deploy/prometheus/rules/*.yml "$stage/prometheus/rules/"
install -m 0644 deploy/alertmanager/alertmanager.yml "$stage/alertmanager/"
install -m 0755 deploy/actions/*.sh "$stage/actions/"
install -m 0644 deploy/actions/README.md "$stage/actions/"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" \
    -C target/package -czf "dist/$NAME.tar.gz" "$NAME"

# --- 3. the Debian package --------------------------------------------------------------------
say "Debian package (cargo-deb)"
# The unit is deploy/systemd's, with the package's paths and its system user.
sed -e 's|/usr/local/bin/pipeline-pulse|/usr/bin/pipeline-pulse|' \
    -e 's|/etc/pipeline-pulse/pipeline-pulse.toml|/etc/pipeline-pulse/config.toml|' \
    -e 's|^DynamicUser=yes$|User=pipeline-pulse\nGroup=pipeline-pulse|' \
    deploy/systemd/pipeline-pulse.service >target/package/debian/pipeline-pulse.service
grep -q '^User=pipeline-pulse$' target/package/debian/pipeline-pulse.service
# The example config, every line commented out: the service starts, watching the GPUs only,
# until the job's files are named.
{
    echo "# /etc/pipeline-pulse/config.toml: uncomment and edit, then \`systemctl restart pipeline-pulse\`."
    echo "# \`pipeline-pulse check-config /etc/pipeline-pulse/config.toml\` validates it; every key is in"
    echo "# /usr/share/doc/pipeline-pulse/README.md and docs/configuration.md."
    sed -e 's|^\([^#]\)|# \1|' deploy/systemd/pipeline-pulse.toml
} >target/package/debian/config.toml
# The licence text of the copyright file: MIT in full, Apache 2.0 as Debian ships it already.
{
    echo "pipeline-pulse is under the MIT License or the Apache License 2.0, at your option."
    echo
    cat LICENSE-MIT
    echo
    echo "On Debian systems, the complete text of the Apache License, Version 2.0 can be found"
    echo "in /usr/share/common-licenses/Apache-2.0."
} >target/package/debian/licenses
date_rfc=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
printf 'pipeline-pulse (%s-1) unstable; urgency=medium\n\n  * Release %s; see CHANGELOG.md.\n\n -- %s  %s\n' \
    "$VERSION" "$VERSION" "$(awk -F'"' '/^maintainer = / { print $2 }' Cargo.toml)" "$date_rfc" \
    >target/package/debian/changelog
cargo deb --no-build --target "$TARGET" --output "dist/pipeline-pulse_${VERSION}-1_amd64.deb" >/dev/null

# --- 4. the image -----------------------------------------------------------------------------
if [[ $IMAGE == 1 ]]; then
    say "image pipeline-pulse:$VERSION (buildah)"
    export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
    if ! buildah inspect --type image "$BASE" >/dev/null 2>&1 && ! buildah pull --quiet "$BASE" >/dev/null 2>&1; then
        say "$BASE cannot be pulled: making it from Debian's packages (mmdebstrap --variant=minbase bookworm)"
        mmdebstrap --quiet --variant=minbase --format=tar bookworm target/package/base.tar
        ctr=$(buildah from scratch)
        buildah add --quiet "$ctr" target/package/base.tar /
        buildah commit --quiet "$ctr" "$BASE" >/dev/null
        buildah rm "$ctr" >/dev/null
        rm -f target/package/base.tar
    fi
    buildah bud --quiet --isolation chroot --pull=never --layers=false \
        --build-arg VERSION="$VERSION" \
        --build-arg REVISION="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)" \
        --build-arg CREATED="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)" \
        -t "pipeline-pulse:$VERSION" -f Dockerfile . >/dev/null
    buildah push --quiet "pipeline-pulse:$VERSION" "docker-archive:target/package/image.tar:pipeline-pulse:$VERSION"
    gzip -n -c target/package/image.tar >"dist/pipeline-pulse-$VERSION-image.tar.gz"
    rm target/package/image.tar
    # The previous builds' images, untagged now, would fill the disk (vfs keeps full copies).
    buildah rmi --prune >/dev/null 2>&1 || true
fi

(cd dist && sha256sum -- * >SHA256SUMS)
say "done:"
ls -l dist >&2
