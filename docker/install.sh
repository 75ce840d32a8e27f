#!/bin/sh
# Installs the engine from the manylinux2014 wheel in the folder $1 with the current `pip`:
# the image's install step (docker/Dockerfile), also run by the tests in a fresh virtualenv
# (tests/compat/test_distribution.py), so that both install the same way.
set -eu
wheels="${1:?usage: docker/install.sh WHEEL_FOLDER}"
# The wheel of the image's architecture (x86_64, aarch64): the release builds one image per platform.
arch="$(uname -m)"
set -- "$wheels"/kopf_rs-*-manylinux2014_"$arch"*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
  echo "docker/install.sh: expected one kopf_rs-*-manylinux2014_$arch*.whl in $wheels (checks/setup builds it)" >&2
  exit 1
fi
pip install --no-cache-dir --disable-pip-version-check "$1"
kopf --version
