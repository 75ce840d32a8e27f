"""The build backend of kopf-rs's sdist: maturin's, after a check that a Rust toolchain is here.

Without one, maturin would try to download a toolchain at build time (which fails offline, with
a network error far from the cause). Here, `pip install kopf-rs` from the sdist says at once
what is missing and what to do instead. Only the PEP 517 hooks pass through this module;
`maturin build` itself does not use it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any

import maturin

# The hooks that need no compiler, as maturin has them.
build_sdist = maturin.build_sdist
get_requires_for_build_sdist = maturin.get_requires_for_build_sdist


class RustToolchainMissing(RuntimeError):
    pass


def _require_rust() -> None:
    if shutil.which("cargo") or os.environ.get("CARGO"):
        return
    raise RustToolchainMissing(
        "kopf-rs: building from the source distribution needs a Rust toolchain (cargo and rustc, "
        "Rust 1.86 or newer), and none is on the PATH. Install one (https://rustup.rs: "
        "`curl -sSf https://sh.rustup.rs | sh`, then open a new shell) and install again; or "
        "install a prebuilt wheel of kopf-rs instead of the source distribution (Linux x86_64 and "
        "aarch64 with glibc 2.17 or newer: no musllinux or macOS wheels are published)."
    )


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _require_rust()
    return maturin.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Mapping[str, Any] | None = None) -> str:
    _require_rust()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                metadata_directory: str | None = None) -> str:
    _require_rust()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Mapping[str, Any] | None = None,
                   metadata_directory: str | None = None) -> str:
    _require_rust()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
