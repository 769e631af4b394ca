"""Check built distributions before anyone installs them: `python scripts/check_dist.py DIST`.

Each of the eight distributions has a wheel and an sdist of the one release, each carries the repository's
LICENSE, the wheels leave the test helpers out, internal requirements pin that same release (==), and each
wheel's metadata names the project's URLs (Homepage, Source, Documentation, Issues).
"""

from __future__ import annotations

import email.parser
import re
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST_HELPERS = ("anneal/data/testing.py", "anneal_wgpu/testing.py")
URL_LABELS = ("Homepage", "Source", "Documentation", "Issues")


def url_problems(wheel: Path) -> list[str]:
    """What the wheel's metadata lacks of the project URLs (Project-URL: LABEL, https://...)."""
    with zipfile.ZipFile(wheel) as zf:
        (meta_name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode())
    labels = {entry.split(",", 1)[0].strip() for entry in meta.get_all("Project-URL") or []
              if entry.split(",", 1)[-1].strip().startswith("https://")}  # fmt: skip
    return [f"{wheel.name}: no Project-URL {label}" for label in URL_LABELS if label not in labels]


def expected() -> dict[str, str]:
    """Distribution name -> version, from every packages/*/pyproject.toml."""
    out = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text())["project"]
        out[project["name"]] = project["version"]
    return out


def problems(dist: Path) -> list[str]:
    found: list[str] = []
    license_text = (ROOT / "LICENSE").read_bytes()
    versions = expected()
    if len(set(versions.values())) != 1:
        found.append(f"the packages are not one release: {versions}")
    for name, version in versions.items():
        stem = f"{name.replace('-', '_')}-{version}"
        wheel, sdist = dist / f"{stem}-py3-none-any.whl", dist / f"{stem}.tar.gz"
        if not wheel.is_file() or not sdist.is_file():
            found.append(f"{name}: missing {wheel.name} or {sdist.name} in {dist}")
            continue
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
            if not licenses or zf.read(licenses[0]) != license_text:
                found.append(f"{wheel.name}: no LICENSE equal to the repository's")
            found += [f"{wheel.name}: ships the test helper {h}" for h in TEST_HELPERS if h in names]
            meta = email.parser.Parser().parsestr(zf.read(f"{stem}.dist-info/METADATA").decode())
            for requirement in meta.get_all("Requires-Dist") or []:
                dep = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0]
                if dep in versions and f"=={versions[dep]}" not in requirement.replace(" ", ""):
                    found.append(f"{wheel.name}: requires {requirement!r}, not =={versions[dep]}")
        found += url_problems(wheel)
        with tarfile.open(sdist) as tf:
            member = tf.getmember(f"{stem}/LICENSE") if f"{stem}/LICENSE" in tf.getnames() else None
            handle = tf.extractfile(member) if member is not None and member.isfile() else None
            if handle is None or handle.read() != license_text:
                found.append(f"{sdist.name}: no LICENSE file equal to the repository's")
    return found


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python scripts/check_dist.py DIST", file=sys.stderr)
        return 2
    found = problems(Path(sys.argv[1]))
    for line in found:
        print(f"check_dist: {line}", file=sys.stderr)
    if not found:
        print(f"check_dist: {len(expected())} wheels and sdists ok")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
