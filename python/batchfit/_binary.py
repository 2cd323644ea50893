"""Finding and running the batchfit binary.

The wheel carries the binary for its platform in ``batchfit/bin``; a
checkout uses one on PATH or the one ``BATCHFIT_BINARY`` names. Every answer
is read from the binary's ``--json`` output: the Python objects hold what
the command line prints, nothing computed twice.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .errors import BatchfitError, UsageError

_EXE = "batchfit.exe" if sys.platform == "win32" else "batchfit"


def binary() -> str:
    """The path of the binary this package runs."""
    env = os.environ.get("BATCHFIT_BINARY")
    if env:
        return env
    packaged = Path(__file__).resolve().parent / "bin" / _EXE
    if packaged.is_file():
        return str(packaged)
    for d in os.environ.get("PATH", "").split(os.pathsep):
        found = shutil.which(_EXE, path=d) if d else None
        # the wheel's console script is also called batchfit: skip scripts,
        # or it would run itself
        if found and not _is_script(found):
            return found
    raise BatchfitError(
        "no batchfit binary: install the wheel for this platform (pip install batchfit), "
        "put batchfit on PATH (go install ./cmd/batchfit), or set BATCHFIT_BINARY"
    )


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return True


def run(args: list[str], *, want_json: bool = True) -> Any:
    """Run the binary with args; return its JSON (or text) output.

    Exit status 1 with JSON on standard output is an answer ("does not
    fit", "nothing fits"), not a failure: the JSON is returned. Anything
    else non-zero raises, with the binary's one-line message.
    """
    cmd = [binary()] + args
    proc = subprocess.run(cmd, capture_output=True, text=True)
    out = proc.stdout
    if proc.returncode in (0, 1) and want_json and out.lstrip().startswith(("{", "[")):
        try:
            return json.loads(out)
        except json.JSONDecodeError as e:
            raise BatchfitError("batchfit printed malformed JSON (%s)" % e, proc.returncode, cmd) from None
    if proc.returncode == 0:
        return out
    msg = proc.stderr.strip().splitlines()
    text = msg[-1] if msg else "batchfit exited with status %d" % proc.returncode
    # the command line's "batchfit estimate: " prefix names the command,
    # which the Python call already does
    if text.startswith("batchfit ") and ": " in text:
        text = text.split(": ", 1)[1]
    if proc.returncode == 2:
        raise UsageError(text, 2, cmd)
    raise BatchfitError(text, proc.returncode, cmd)


def main() -> None:
    """The ``batchfit`` console script: the binary itself, same arguments,
    same exit status."""
    exe = binary()
    if sys.platform == "win32":
        sys.exit(subprocess.call([exe] + sys.argv[1:]))
    os.execv(exe, [exe] + sys.argv[1:])
