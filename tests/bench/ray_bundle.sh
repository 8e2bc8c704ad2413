#!/usr/bin/env bash
# Ray for the GPU machine, which has no package index and takes at most 64 MiB along per call: ray for
# CPython 3.12 and the dependencies its image lacks (jsonschema and three of its own; click, filelock,
# msgpack, packaging, protobuf, pyyaml and requests are there), installed into a folder without Ray's
# Java jars (ray/jars, 31 MiB of the 76 MiB wheel, used by Java workers only) and packed as
# .kb/ray-site.tar.gz (about 44 MiB). Run from the project's root on a machine with PyPI:
#
#   bash tests/bench/ray_bundle.sh            # RAY_VERSION=2.60.0 by default (constraints-cpu.txt's)
#
# On the GPU machine, carrying .kb/ray-site.tar.gz (git ignores .kb/), start the command with:
#
#   mkdir -p /tmp/raysite && tar -xzf .kb/ray-site.tar.gz -C /tmp/raysite && export PYTHONPATH=/tmp/raysite:$PWD
set -euo pipefail
version=${RAY_VERSION:-2.60.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
target=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64)
python3 -m pip download -q "${target[@]}" --no-deps -d "$tmp/whl" "ray==$version" jsonschema \
  jsonschema-specifications referencing rpds-py
python3 -m pip install -q "${target[@]}" --no-deps --no-compile --target "$tmp/site" "$tmp"/whl/*.whl
rm -rf "$tmp/site/ray/jars" "$tmp/site/bin"
mkdir -p .kb
tar -C "$tmp/site" -czf .kb/ray-site.tar.gz .
du -h .kb/ray-site.tar.gz
