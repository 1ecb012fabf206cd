"""The scaled ladder keeps every ordering, or refuses the factor."""

import pytest

from harness.errors import HarnessError
from harness.ladder import Ladder


def test_seed_002_ladder_with_e_holds_every_ordering():
    assert all(holds for *_, holds in Ladder().orderings())


def test_half_scale_keeps_every_ordering_and_renders_env():
    ladder = Ladder().scaled(0.5)
    assert all(holds for *_, holds in ladder.orderings())
    assert ladder.notice.notice_s == 60 and ladder.notice.drain_deadline_s == 30
    env = ladder.node_env()
    assert env["RAY_SERVE_HAPROXY_TIMEOUT_SERVER_S"] == "14"
    assert env["RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"] == "15"
    assert ladder.deployment_options()["graceful_shutdown_timeout_s"] == 29.5


def test_a_factor_that_breaks_an_ordering_is_refused():
    # HAProxy's integer knobs collapse at a quarter: 7 s vs 7 s breaks C.
    with pytest.raises(HarnessError, match="C timeout server < hard-stop-after"):
        Ladder().scaled(0.25)


def test_seed_002_without_e_fails_ordering_e():
    ladder = Ladder(graceful_shutdown_s=20.0)
    broken = [name for name, *_, holds in ladder.orderings() if not holds]
    assert any(name.startswith("E ") for name in broken)
