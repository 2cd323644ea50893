"""Where a CPU reference made by the running PyTorch goes.

Every CPU reference script (reference.py, step.py, cs336.py, generate.py, autocast.py,
capture_zoo.py, and checkpoint_capture.py's capture examples) runs under Debian's PyTorch
1.13 (/usr/bin/python3) and under the 2.x that python/requirements-test.txt pins
(BATCHFIT_PYENV), and writes one file per release: 1.13's
keep their names (testdata/reference/torch-cpu.json, testdata/capture/NAME.bfgraph.gz), every
other release's carry it (testdata/reference/torch-cpu-torch2.5.json,
testdata/capture/torch2.5/NAME.bfgraph.gz). The Go tests read each file under the runtime
profile of the release that made it (validation/torchrefs_test.go).
"""

import os


def release(version):
    """The release, MAJOR.MINOR, of a torch.__version__ ("2.5" of "2.5.1+cu124")."""
    parts = version.split("+")[0].split(".")
    return "%s.%s" % (parts[0], parts[1])


def plain(version):
    """A version without its local part ("2.5.1" of "2.5.1+cu124"): the CUDA build a wheel
    was made for does not change what PyTorch does on the CPU."""
    return version.split("+")[0]


def tag(version):
    """"" for 1.13, whose files came first, "-torch2.5" for 2.5."""
    r = release(version)
    return "" if r == "1.13" else "-torch" + r


def name(fname, version):
    """fname of 1.13 as the given release names it: torch-cpu.json -> torch-cpu-torch2.5.json."""
    base, ext = os.path.splitext(fname)
    return base + tag(version) + ext


def capture_dir(root, version):
    """testdata/capture under root for 1.13, testdata/capture/torchX.Y for another release."""
    d = os.path.join(root, "testdata", "capture")
    r = release(version)
    return d if r == "1.13" else os.path.join(d, "torch" + r)
