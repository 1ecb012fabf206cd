"""Node images: one per (Ray version, patch set), built in three layers.

    base   Debian bookworm with Python 3.11: pulled where a registry answers,
           bootstrapped with debootstrap from the host's own apt mirror where not
    ray    one Ray release installed offline from the host-side wheelhouse
    patch  the pinned wheel's files the series changes, with the series applied
           (patched images only)

Each tag carries a hash of exactly the inputs of its layer, so an unchanged
input is never rebuilt, and editing a patch rebuilds only the patch layer.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cluster import engine
from harness.core import locks, log, proc, wheels
from harness.core.errors import HarnessError
from harness.core.paths import BUILD_DIR, DOCKER_DIR
from harness.core.pin import Pin, load_pin, read_series
from harness.patches.installed import apply_to_site_packages
from harness.patches.workspace import TREE_PREFIXES, extract_from_wheel

_log = log.get(__name__)

SUITE = "bookworm"
# Same list on both paths (pulled slim image or debootstrap): what `ray start`
# and the harness need in a node, nothing more.
PACKAGES = ("python3", "python3-venv", "procps", "iproute2", "ca-certificates")
UPSTREAM_BASE = f"debian:{SUITE}-slim"
SITE_PACKAGES = "/opt/ray/lib/python3.11/site-packages"
FLAVORS = ("stock", "patched")


@dataclass(frozen=True)
class ImageSpec:
    """What a user asks for: `2.60.0-patched`, `2.60.0-stock`, `2.59.0-stock`."""

    version: str
    flavor: str

    @classmethod
    def parse(cls, text: str) -> ImageSpec:
        version, _, flavor = text.partition("-")
        if flavor not in FLAVORS or not re.fullmatch(r"\d+\.\d+\.\d+", version):
            raise HarnessError(
                f"unknown image {text!r}; use VERSION-FLAVOR with FLAVOR in {FLAVORS}, "
                f"e.g. {', '.join(str(s) for s in default_images(load_pin()))}"
            )
        return cls(version, flavor)

    def __str__(self) -> str:
        return f"{self.version}-{self.flavor}"


def default_images(pin: Pin) -> list[ImageSpec]:
    return [
        ImageSpec(pin.ray.version, "stock"),
        ImageSpec(pin.ray.version, "patched"),
        ImageSpec(pin.baseline.version, "stock"),
    ]


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


# ---------------------------------------------------------------------------- base


def host_debian_mirror(apt_dir: Path = Path("/etc/apt"), suite: str = SUITE) -> str:
    """The Debian archive URI the host's apt sources use for `suite` (not security).

    Read from the host so that no mirror's name is ever written into the project.
    Understands both one-line `sources.list` entries and deb822 `.sources` files.
    """
    candidates: list[tuple[str, list[str]]] = []
    one_line = [apt_dir / "sources.list"] + sorted((apt_dir / "sources.list.d").glob("*.list"))
    for path in one_line:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            fields = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(fields) >= 3 and fields[0] == "deb":
                candidates.append((fields[1], [fields[2]]))
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", path.read_text()):
            entry: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line:
                    continue
                key, _, value = line.partition(":")
                entry[key.strip().lower()] = value.strip()
            if "deb" in entry.get("types", "").split() and entry.get("enabled", "yes") != "no":
                for uri in entry.get("uris", "").split():
                    candidates.append((uri, entry.get("suites", "").split()))
    for uri, suites in candidates:
        if suite in suites and "security" not in uri:
            return uri.rstrip("/")
    raise HarnessError(
        f"no apt source for Debian {suite} found under {apt_dir}; debootstrap needs a mirror. "
        f"Add the Debian archive for {suite} to the host's apt sources, or make a registry "
        f"reachable so that {UPSTREAM_BASE} can be pulled."
    )


def base_tag() -> str:
    recipe = (DOCKER_DIR / "base.Dockerfile").read_bytes()
    return f"rayspot-base:{SUITE}-{_digest(SUITE, ' '.join(PACKAGES), recipe)}"


def ensure_base() -> str:
    with locks.one_at_a_time("base"):
        return _ensure_base()


def _ensure_base() -> str:
    tag = base_tag()
    if engine.image_exists(tag):
        return tag
    started = time.monotonic()
    if engine.try_pull(UPSTREAM_BASE):
        _log.info("base: %s pulled; installing %s", UPSTREAM_BASE, " ".join(PACKAGES))
        with _context("base") as ctx:
            shutil.copy(DOCKER_DIR / "base.Dockerfile", ctx / "Dockerfile")
            engine.build_image(ctx, tag, {"PACKAGES": " ".join(PACKAGES)}, "base")
    else:
        _log.info(
            "base: no registry serves %s; bootstrapping Debian %s "
            "with debootstrap from the host's apt mirror",
            UPSTREAM_BASE,
            SUITE,
        )
        _bootstrap_base(tag)
    log.progress(_log, f"base: {tag} ready", started)
    return tag


def _bootstrap_base(tag: str) -> None:
    if not shutil.which("debootstrap"):
        raise HarnessError(
            "no registry answers and debootstrap is missing: "
            "`apt-get install debootstrap`, then run again."
        )
    mirror = host_debian_mirror()
    rootfs = BUILD_DIR / "base-rootfs"
    _remove_rootfs(rootfs)
    rootfs.parent.mkdir(parents=True, exist_ok=True)
    try:
        cmd = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(rootfs),
            mirror,
        ]
        debootstrap = proc.start(cmd, merge_stderr=True, text=True)
        assert debootstrap.stdout is not None  # proc.start pipes it
        last: list[str] = []
        phases_seen: set[str] = set()
        started = time.monotonic()
        for line in debootstrap.stdout:
            last = (last + [line])[-30:]
            # Progress: the first line of each debootstrap phase (Retrieving,
            # Extracting, Installing, Configuring, ...), not one per package.
            phase = line[3:].split(" ", 1)[0] if line.startswith("I: ") else ""
            if phase and phase not in phases_seen:
                phases_seen.add(phase)
                log.progress(_log, f"base: debootstrap {line[3:].strip()}", started)
        if debootstrap.wait() != 0:
            raise HarnessError(
                "debootstrap failed:\n"
                + "".join(last)
                + "\nNo image was made; the partial root was removed."
            )
        # The image should not carry apt lists or caches from the bootstrap.
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        tar = proc.start(["tar", "-C", rootfs, "-c", "."])
        engine.import_rootfs(tar.stdout, tag)
        if tar.wait() != 0:
            raise HarnessError(f"tar of {rootfs} failed; no usable base image was made.")
    finally:
        _remove_rootfs(rootfs)


def _remove_rootfs(rootfs: Path) -> None:
    """Remove a debootstrap root, unmounting first: an interrupted debootstrap
    leaves /proc and /sys mounted inside it, and rmtree must never descend there."""
    if not rootfs.exists():
        return
    for sub in ("proc", "sys", "dev/pts", "dev"):
        mount = rootfs / sub
        if os.path.ismount(mount):
            proc.run(["umount", "-l", mount], capture=False)
    shutil.rmtree(rootfs, ignore_errors=True)


# ---------------------------------------------------------------------------- ray layer


def ray_layer_tag(version: str, pin: Pin, base: str) -> str:
    release = pin.release(version)
    house = wheels.wheelhouse_for(release)
    listing = "\n".join(f"{p.name} {p.stat().st_size}" for p in sorted(house.glob("*.whl")))
    recipe = (DOCKER_DIR / "ray.Dockerfile").read_bytes()
    return f"rayspot-ray:{version}-{_digest(base, release.sha256, listing, recipe)}"


def ensure_ray_layer(version: str, pin: Pin) -> str:
    with locks.one_at_a_time(f"ray {version}"):
        return _ensure_ray_layer(version, pin)


def _ensure_ray_layer(version: str, pin: Pin) -> str:
    release = pin.release(version)
    # The base first: it needs no wheel, so on a fresh machine it builds while
    # `harness setup` is still downloading the wheelhouse (CI starts the two
    # together), and the wheelhouse is then there.
    base = ensure_base()
    house = wheels.ensure_wheelhouse(release)
    tag = ray_layer_tag(version, pin, base)
    if engine.image_exists(tag):
        return tag
    started = time.monotonic()
    with _context(f"ray-{version}") as ctx:
        shutil.copy(DOCKER_DIR / "ray.Dockerfile", ctx / "Dockerfile")
        (ctx / "wheels").mkdir()
        for wheel in house.glob("*.whl"):
            os.link(wheel, ctx / "wheels" / wheel.name)  # hard link: no copy of 130 MB+
        engine.build_image(
            ctx, tag, {"BASE_IMAGE": base, "RAY_REQUIREMENT": release.requirement}, f"ray {version}"
        )
    log.progress(_log, f"ray {version}: {tag} built", started)
    return tag


# ---------------------------------------------------------------------------- node images


def node_tag(spec: ImageSpec, pin: Pin, ray_tag: str, patches: list[Path]) -> str:
    parts: list[str | bytes] = [ray_tag]
    if spec.flavor == "patched":
        parts.append((DOCKER_DIR / "patch.Dockerfile").read_bytes())
        for patch in patches:
            parts += [patch.name, patch.read_bytes()]
    return f"rayspot-node:{spec}-{_digest(*parts)}"


def ensure_node_image(spec: ImageSpec, pin: Pin | None = None) -> str:
    """The tag of a ready node image for `spec`, building only what changed."""
    pin = pin or load_pin()
    if spec.flavor == "patched" and spec.version != pin.ray.version:
        raise HarnessError(
            f"the series is pinned to Ray {pin.ray.version}; there is no "
            f"patched image of Ray {spec.version}."
        )
    with locks.one_at_a_time(f"image {spec}"):
        return _ensure_node_image(spec, pin)


def _ensure_node_image(spec: ImageSpec, pin: Pin) -> str:
    ray_tag = ensure_ray_layer(spec.version, pin)
    patches = read_series()
    tag = node_tag(spec, pin, ray_tag, patches)
    if engine.image_exists(tag):
        _log.info("image %s: %s is up to date", spec, tag)
        return tag
    started = time.monotonic()
    if spec.flavor == "stock":
        engine.tag_image(ray_tag, tag)
    else:
        with _context(f"patch-{spec}") as ctx:
            shutil.copy(DOCKER_DIR / "patch.Dockerfile", ctx / "Dockerfile")
            wheel = wheels.verify_ray_wheel(wheels.wheelhouse_for(pin.ray), pin.ray)
            patched_tree(wheel, patches, pin, ctx / "ray")
            engine.build_image(ctx, tag, {"RAY_IMAGE": ray_tag}, f"image {spec}")
    log.progress(_log, f"image {spec}: {tag} built", started)
    return tag


def patched_tree(wheel: Path, patches: list[Path], pin: Pin, dest: Path) -> None:
    """`dest`: a `ray` folder holding the wheel's files the series may change,
    with the series applied by the same code and the same all-or-nothing checks
    as `make apply-patches`."""
    site = dest.parent / "site"
    # The apply reads the version it checks against the pin from _version.py.
    extract_from_wheel(wheel, site, ["ray/_version.py", *TREE_PREFIXES])
    apply_to_site_packages(site, patches, pin.ray)
    (site / "ray" / "_version.py").unlink()
    (site / "ray").rename(dest)
    shutil.rmtree(site)


@contextlib.contextmanager
def _context(name: str):
    """A fresh build-context folder that is removed afterwards, even on Ctrl-C."""
    ctx = BUILD_DIR / "contexts" / name
    shutil.rmtree(ctx, ignore_errors=True)
    ctx.mkdir(parents=True)
    try:
        yield ctx
    finally:
        shutil.rmtree(ctx, ignore_errors=True)


def ensure_images(specs: list[ImageSpec]) -> dict[ImageSpec, str]:
    return {spec: ensure_node_image(spec) for spec in specs}
