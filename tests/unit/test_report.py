"""The report files a user opens after a scenario: report.md, report.json, timeline.png."""

import json
import struct
from pathlib import Path

from harness.experiment.checker import check
from harness.experiment.history import Event, History, Request
from harness.experiment.report import side_by_side, write_report

T = 1_700_000_000.0


def _run(label: str, failures: dict[int, str]) -> History:
    history = History({"label": label, "image": f"rayspot-node:{label}"})
    for i in range(600):  # 60 s at 10 requests/s
        error = failures.get(i)
        history.add_request(
            Request("short", T + i / 10, T + i / 10 + 0.05, None if error else 200, error)
        )
    history.add_event(Event(T + 20.0, "spot_preemption", "start", "node-2"))
    history.add_event(Event(T + 22.0, "spot_preemption", "mark", "node-2", {"label": "drain"}))
    history.add_event(Event(T + 35.0, "spot_preemption", "end", "node-2"))
    history.add_event(Event(T + 50.0, "reload", "start", "lb"))
    return history


def _write(tmp_path: Path) -> tuple[dict[str, Path], dict]:
    stock = _run("2.59.0", {250: "reset", 251: "reset", 300: "refused"})
    patched = _run("2.60.0", {})
    runs = {
        "stock 2.59.0": (stock, check(stock)),
        "patched 2.60.0": (patched, check(patched)),
    }
    sections = {"Measured timeline": "| t | what |\n|---|---|\n| 0.0s | notice sent |"}
    return write_report(tmp_path / "out", "Spot notice", runs, sections), runs


def test_writes_the_three_files(tmp_path: Path):
    paths, _ = _write(tmp_path)
    assert set(paths) == {"md", "json", "png"}
    assert all(p.is_file() and p.parent == tmp_path / "out" for p in paths.values())


def test_png_is_a_real_image(tmp_path: Path):
    paths, _ = _write(tmp_path)
    data = paths["png"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 800 and height >= 400
    assert len(data) > 20_000  # two runs' panels drawn, not a blank canvas


def test_markdown_has_the_comparison_windows_and_sections(tmp_path: Path):
    paths, runs = _write(tmp_path)
    md = paths["md"].read_text()
    assert md.startswith("# Spot notice\n")
    assert side_by_side({name: v for name, (_, v) in runs.items()}) in md
    assert "| total | 119.9s | 1,200 | 3 | ~10.0 | 1 / 2 |" in md
    assert "| spot_preemption | node-2 | 20.0s | 35.0s | 201 | 3 | reset 2, refused 1 |" in md
    assert "| reload | lb | 50.0s | 60.0s (unmatched) |" in md  # open to the last request
    assert "- 22.0s spot_preemption node-2: drain" in md
    assert "## Measured timeline\n\n| t | what |\n|---|---|\n| 0.0s | notice sent |" in md
    assert "![timeline](timeline.png)" in md


def test_a_run_that_lost_requests_lists_them_and_a_clean_run_lists_none(tmp_path: Path):
    paths, _ = _write(tmp_path)
    md = paths["md"].read_text()
    assert md.count("Failed requests (") == 1  # the stock run's; the patched lost none
    assert "Failed requests (3 of 3, the first):" in md
    # Sent 25.0 s after the run's first request (request 250 at 10/s), 50 ms long.
    assert "| 25.000s | short | reset | 0.050s | - | - | - |" in md
    assert "| 30.000s | short | refused | 0.050s | - | - | - |" in md


def test_the_failed_requests_shown_are_bounded(tmp_path: Path):
    from harness.experiment.report import FAILED_SHOWN, failed_requests

    history = _run("x", dict.fromkeys(range(100, 100 + FAILED_SHOWN + 5), "timeout"))
    listing = failed_requests(history, check(history))
    assert f"({FAILED_SHOWN} of {FAILED_SHOWN + 5:,}, the first)" in listing
    assert listing.count("| timeout |") == FAILED_SHOWN


def test_the_first_three_lines_say_the_images_what_each_lost_and_its_verdict(tmp_path: Path):
    paths, _ = _write(tmp_path)
    first = paths["md"].read_text().splitlines()[:3]
    assert first == [
        "# Spot notice",
        "",
        "**stock 2.59.0**: 3 of 600 requests failed, FAILED · "
        "**patched 2.60.0**: 0 of 600 requests failed, PASSED",
    ]


def test_json_holds_verdicts_and_meta_not_rows(tmp_path: Path):
    paths, _ = _write(tmp_path)
    doc = json.loads(paths["json"].read_text())
    assert doc["title"] == "Spot notice"
    stock = doc["runs"]["stock 2.59.0"]
    assert set(stock) == {"meta", "verdict"}
    assert stock["meta"]["image"] == "rayspot-node:2.59.0"
    assert stock["verdict"]["failures"] == 3 and stock["verdict"]["result"] == "FAILED"
    assert doc["runs"]["patched 2.60.0"]["verdict"]["passed"] is True
