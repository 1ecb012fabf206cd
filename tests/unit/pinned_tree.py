"""What the patch-tooling tests share: the pinned commit, a release record
for it (its wheel and sha256 are never read), and serve files they patch."""

from harness.core.pin import RayRelease

COMMIT = "b7f4259e944bf6959f721b106adc366ddfa0c356"
RELEASE = RayRelease(version="2.60.0", wheel="ray.whl", sha256="0" * 64, commit=COMMIT)
REPLICA = "ray/serve/_private/replica.py"
ROUTER = "ray/serve/_private/router.py"


def isolate_git(monkeypatch, date: str | None = None) -> None:
    """git as every test run sees it: no user or system config, one identity,
    and with `date` one commit date (for byte-stable exports)."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{role}_NAME", "Zoë Developer")
        monkeypatch.setenv(f"GIT_{role}_EMAIL", "zoe@users.noreply.github.com")
        if date:
            monkeypatch.setenv(f"GIT_{role}_DATE", date)
