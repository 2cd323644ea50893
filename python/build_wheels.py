#!/usr/bin/env python3
"""Build batchfit's wheels: the Go binary for each platform (CGO off, so it
needs no C library of the target), the Python package beside it, and a
console script ``batchfit`` that runs it.

    python3 python/build_wheels.py [--out dist] [--platform linux-amd64 ...]

The standard library only: a wheel is a zip file with a .dist-info folder
(PEP 427, PEP 491), so no build backend is needed, and each wheel's
platform tag is set here exactly. Run from anywhere; needs Go.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "python" / "batchfit"

# GOOS/GOARCH → the wheel's platform tags. A Go binary built with CGO off
# links no C library, so it runs on any glibc (manylinux) or musl
# (musllinux) Linux; Go 1.25 and later need macOS 12 (Go's release notes),
# hence macosx_12_0.
PLATFORMS: dict[str, tuple[str, str, str]] = {
    "linux-amd64": ("linux", "amd64", "manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64"),
    "linux-arm64": ("linux", "arm64", "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64"),
    "darwin-amd64": ("darwin", "amd64", "macosx_12_0_x86_64"),
    "darwin-arm64": ("darwin", "arm64", "macosx_12_0_arm64"),
    "windows-amd64": ("windows", "amd64", "win_amd64"),
}


def version() -> str:
    return (ROOT / "version" / "VERSION").read_text().strip()


def go_build(goos: str, goarch: str, out: Path) -> None:
    env = dict(os.environ, CGO_ENABLED="0", GOOS=goos, GOARCH=goarch)
    subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out), "./cmd/batchfit"],
                   cwd=ROOT, env=env, check=True)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def metadata(ver: str) -> str:
    readme = (ROOT / "python" / "README.md").read_text()
    return "\n".join([
        "Metadata-Version: 2.1",
        "Name: batchfit",
        "Version: " + ver,
        "Summary: The GPU memory of a PyTorch training step, predicted without a GPU",
        "License: Apache-2.0",
        "Requires-Python: >=3.9",
        "Classifier: License :: OSI Approved :: Apache Software License",
        "Classifier: Programming Language :: Python :: 3",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])


def build(key: str, out_dir: Path, binary: Path | None = None) -> Path:
    goos, goarch, tag = PLATFORMS[key]
    ver = version()
    exe = "batchfit.exe" if goos == "windows" else "batchfit"
    with tempfile.TemporaryDirectory() as tmp:
        if binary is None:
            binary = Path(tmp) / exe
            go_build(goos, goarch, binary)
        files: list[tuple[str, bytes, int]] = []
        for f in sorted(PKG.glob("*.py")):
            data = f.read_bytes()
            if f.name == "_version.py":
                # the installed package has no repository to read VERSION from
                data = ('"""The release this wheel was built from."""\n\n__version__ = "%s"\n' % ver).encode()
            files.append(("batchfit/" + f.name, data, 0o644))
        files.append(("batchfit/py.typed", b"", 0o644))
        # the capture module batchfit capture runs, for in-process capture
        files.append(("batchfit/_bfcapture.py", (ROOT / "capture" / "bfcapture.py").read_bytes(), 0o644))
        files.append(("batchfit/bin/" + exe, binary.read_bytes(), 0o755))
        info = "batchfit-%s.dist-info/" % ver
        files.append((info + "METADATA", metadata(ver).encode(), 0o644))
        files.append((info + "WHEEL", ("Wheel-Version: 1.0\nGenerator: batchfit build_wheels.py\n"
                                       "Root-Is-Purelib: false\n"
                                       + "".join("Tag: py3-none-%s\n" % t for t in tag.split("."))).encode(), 0o644))
        files.append((info + "entry_points.txt", b"[console_scripts]\nbatchfit = batchfit._binary:main\n", 0o644))
        files.append((info + "LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644))
        out_dir.mkdir(parents=True, exist_ok=True)
        wheel = out_dir / ("batchfit-%s-py3-none-%s.whl" % (ver, tag))
        record = [record_line(n, d) for n, d, _ in files] + [info + "RECORD,,"]
        files.append((info + "RECORD", ("\n".join(record) + "\n").encode(), 0o644))
        with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
            for name, data, mode in files:
                zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
                zi.external_attr = (0o100000 | mode) << 16
                zi.compress_type = zipfile.ZIP_DEFLATED
                z.writestr(zi, data)
    return wheel


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="dist")
    p.add_argument("--platform", action="append", choices=sorted(PLATFORMS),
                   help="build only these (default: all five)")
    p.add_argument("--binary", help="with one --platform: put this binary in the wheel instead of building one")
    a = p.parse_args(argv)
    keys = a.platform or sorted(PLATFORMS)
    if a.binary and len(keys) != 1:
        print("build_wheels: --binary goes with exactly one --platform", file=sys.stderr)
        return 2
    if not a.binary and shutil.which("go") is None:
        print("build_wheels: go is not on PATH", file=sys.stderr)
        return 1
    for key in keys:
        print(build(key, Path(a.out), Path(a.binary) if a.binary else None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
