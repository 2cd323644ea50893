"""The release, read from the repository's one VERSION file.

The wheel's build replaces this file with the literal, so an installed
package needs no repository; `batchfit version` reads the same file.
"""

from pathlib import Path


def _read() -> str:
    # a checkout: <repo>/python/batchfit/_version.py, <repo>/version/VERSION
    return (Path(__file__).resolve().parents[2] / "version" / "VERSION").read_text().strip()


__version__ = _read()
