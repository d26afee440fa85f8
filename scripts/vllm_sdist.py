"""A vLLM release's source distribution from PyPI: found, downloaded, hash-checked, cached, read or
extracted (maintainers' and ``make``'s tool; the standard library only).

Usage::

    python scripts/vllm_sdist.py --version 0.34.0 --cache .cache/vllm-src
    python scripts/vllm_sdist.py --url URL --sha256 HEX --cache DIR --extract DEST --only vllm/ csrc/cpu/

With ``--version`` the file and its SHA-256 come from PyPI's JSON simple API (``--index-url``); with
``--url`` and ``--sha256`` they are pinned (``make``'s vLLM 0.34.0 source). The archive is kept in the
cache folder under its file name and checked against the hash on every use, so a partial or altered
download is never read. ``--extract`` puts the archive's members under ``--only`` (paths inside the
release's top folder) into DEST, replacing it whole, and writes ``DEST/.sdist`` (URL and hash) last:
``make``'s stamp; ``--local-version cpu`` adds the metadata of a CPU build (``vllm-X+cpu.dist-info``).
The path of the archive is printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

INDEX_URL = "https://pypi.org/simple/vllm/"
#: PyPI's JSON simple API (PEP 691)
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
_CHUNK = 1 << 20
#: the stamp ``extract`` writes last in its destination (what ``make`` tracks)
STAMP = ".sdist"


class Sdist(NamedTuple):
    """A release's source distribution on an index: file name, URL, SHA-256 (hex)."""

    filename: str
    url: str
    sha256: str


def _open(url: str, accept: str | None = None, timeout: float = 60.0):
    """``urlopen`` of ``url``; a failure (network, HTTP status, missing file) ends the program naming it."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except OSError as error:  # URLError and HTTPError are OSErrors
        raise SystemExit(f"{url}: cannot download: {error}") from error


def find_sdist(version: str, index_url: str = INDEX_URL) -> Sdist:
    """The sdist ``vllm-<version>.tar.gz`` listed by the JSON simple API at ``index_url`` (a
    ``file://`` URL of such a JSON document works too: the tests' index)."""
    with _open(index_url, _JSON_ACCEPT) as response:
        listing = json.load(response)
    filename = f"vllm-{version}.tar.gz"
    for entry in listing.get("files", ()):
        if entry.get("filename") == filename:
            sha256 = entry.get("hashes", {}).get("sha256")
            if not sha256:
                raise SystemExit(f"{filename}: the index gives no sha256")
            if entry.get("yanked"):
                print(f"warning: {filename} is yanked ({entry['yanked']})", file=sys.stderr)
            url = urllib.request.urljoin(index_url, entry["url"])
            return Sdist(filename, url, sha256.lower())
    raise SystemExit(f"{filename}: not listed at {index_url}")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def download(sdist: Sdist, cache: str | os.PathLike[str]) -> Path:
    """``cache/<filename>``, downloaded first where it is missing or its hash is not ``sdist.sha256``;
    a download whose hash differs is deleted and is an error."""
    cache = Path(cache)
    target = cache / sdist.filename
    if target.is_file() and file_sha256(target) == sdist.sha256:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    handle, temporary = tempfile.mkstemp(prefix=sdist.filename + ".", suffix=".part", dir=cache)
    try:
        with os.fdopen(handle, "wb") as file, _open(sdist.url, timeout=300.0) as response:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                file.write(chunk)
        if digest.hexdigest() != sdist.sha256:
            raise SystemExit(f"{sdist.url}: sha256 {digest.hexdigest()}, expected {sdist.sha256}")
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return target


def iter_members(
    archive: str | os.PathLike[str], wanted: Callable[[str], bool]
) -> Iterator[tuple[str, bytes]]:
    """The regular files of a ``.tar.gz`` sdist whose path inside the release's top folder
    (``vllm/...``, ``csrc/...``) ``wanted`` accepts: (that path, bytes), in one pass."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            _, _, rest = member.name.partition("/")
            if member.isfile() and rest and wanted(rest):
                file = tar.extractfile(member)
                if file is not None:
                    yield rest, file.read()


def read_members(archive: str | os.PathLike[str], wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """:func:`iter_members` as a dict (nothing extracted)."""
    return dict(iter_members(archive, wanted))


def sdist_version(archive: str | os.PathLike[str]) -> str:
    """The release's version, from the sdist's top ``PKG-INFO``."""
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if member.isfile() and member.name.count("/") == 1 and member.name.endswith("/PKG-INFO"):
                file = tar.extractfile(member)
                text = file.read().decode("utf-8", "replace") if file is not None else ""
                for line in text.splitlines():
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
    raise SystemExit(f"{archive}: no PKG-INFO with a version")


def extract(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    only: Iterable[str],
    stamp: str = "",
    local_version: str | None = None,
) -> Path:
    """The archive's regular files under the ``only`` prefixes (paths inside its top folder, e.g.
    ``vllm/``) written under ``dest`` (``dest/vllm/...``), which is replaced whole; ``stamp`` is written
    to ``dest/.sdist`` last, so a folder with that file is complete.

    With ``local_version`` (``cpu``), ``dest`` also gets the metadata a build of that variant installs
    (``vllm-<version>+cpu.dist-info``): vLLM reads its own version (``importlib.metadata``) to choose
    its platform and whether Triton's CPU backend counts, and with ``dest`` on ``sys.path`` it finds
    this one."""
    prefixes = tuple(only)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent))
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp's folder is private; the tree is an ordinary one
    try:
        count = 0
        for path, data in iter_members(archive, lambda path: path.startswith(prefixes)):
            parts = path.split("/")
            if any(part in ("", ".", "..") for part in parts):
                raise SystemExit(f"{archive}: unsafe member path {path!r}")
            target = staging.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            count += 1
        if not count:
            raise SystemExit(f"{archive}: nothing under {', '.join(prefixes)}")
        if local_version:
            version = f"{sdist_version(archive)}+{local_version}"
            info = staging / f"vllm-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(
                f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n", encoding="utf-8"
            )
        (staging / STAMP).write_text(stamp + "\n", encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(staging, dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return dest


def fetch(
    cache: str | os.PathLike[str],
    version: str | None = None,
    url: str | None = None,
    sha256: str | None = None,
    index_url: str = INDEX_URL,
) -> tuple[Sdist, Path]:
    """The sdist named by ``version`` (looked up on the index) or by ``url`` and ``sha256`` (pinned),
    and its checked path in ``cache``."""
    if url is not None:
        if not sha256:
            raise SystemExit("--url needs --sha256")
        sdist = Sdist(url.rsplit("/", 1)[-1], url, sha256.lower())
    elif version is not None:
        sdist = find_sdist(version, index_url)
    else:
        raise SystemExit("give --version, or --url and --sha256")
    return sdist, download(sdist, cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", help="a vLLM release, looked up on the index")
    parser.add_argument("--url", help="the sdist's URL (pinned; with --sha256)")
    parser.add_argument("--sha256", help="the sdist's SHA-256 (hex)")
    parser.add_argument(
        "--index-url", default=INDEX_URL, help=f"a JSON simple API page (default {INDEX_URL})"
    )
    parser.add_argument("--cache", default=".cache/vllm-src", help="the folder that keeps the archives")
    parser.add_argument("--extract", metavar="DEST", help="extract into DEST (replaced whole)")
    parser.add_argument("--only", nargs="+", default=["vllm/"], help="paths inside the release to extract")
    parser.add_argument(
        "--local-version", metavar="LOCAL", help="with --extract: metadata of the +LOCAL build (e.g. cpu)"
    )
    args = parser.parse_args(argv)
    sdist, path = fetch(args.cache, args.version, args.url, args.sha256, args.index_url)
    if args.extract:
        stamp = f"{sdist.url} sha256={sdist.sha256}"
        extract(path, args.extract, args.only, stamp=stamp, local_version=args.local_version)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
