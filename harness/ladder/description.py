"""The YAML service description that `python -m harness ladder check FILE`
reads: its parser (every error names the file and the line), the ladder it
makes for each distinct node env, and the check's rendered result and exit
code. A value the description leaves out is Ray 2.60.0's default, cited by
file and line.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import HarnessError
from harness.ladder.defaults import (
    ENV_KNOBS,
    RAY_GST_DEFAULT_S,
    RAY_KEEP_ALIVE_DEFAULT_S,
    RAY_WAIT_LOOP_DEFAULT_S,
    SET_BY,
)
from harness.ladder.model import Deployment, Ladder, Ordering, format_number

if TYPE_CHECKING:
    # For annotations only: PyYAML is imported where a file is read.
    from yaml.nodes import Node

    # A mapping's entries: key -> (key node, value node), for errors that name a line.
    Entries = dict[str, tuple[Node, Node]]

_TOP = ("node_env", "http_options", "deployments", "app", "spot", "load_balancer", "margin")
_HTTP = ("request_timeout_s", "keep_alive_timeout_s")
_DEPLOYMENT = ("ingress", "graceful_shutdown_timeout_s", "graceful_shutdown_wait_loop_s")
_APP = ("longest_request", "client_timeout")
_SPOT = ("notice", "detection", "drain_deadline", "sigterm_grace")
_LB = ("deregistration",)

_UNITS = {
    "ms": 0.001,
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hour": 3600,
    "hours": 3600,
}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)")


def parse_duration(value: object) -> float:
    """Seconds from a number (seconds) or a string such as "500ms", "120s", "2m",
    "1.5 min". Raises ValueError with the reason."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, str):
        match = _DURATION.fullmatch(value.strip().lower())
        unit = match.group(2) or "s" if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{value!r} is not a duration: use seconds (120) or a number "
                f"with a unit (500ms, 120s, 2m, 1.5 min, 1h)"
            )
        return float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{value!r} is not a duration: it must be a finite number >= 0")
    return float(value)


class _Doc:
    """A composed YAML tree, read with the file name so every error names its line."""

    def __init__(self, path: Path, text: str) -> None:
        import yaml  # Ray brings PyYAML; requirements.txt pins it for this import

        self.yaml, self.path = yaml, path
        try:
            self.loader = yaml.SafeLoader(text)
        except yaml.reader.ReaderError as exc:
            # The reader refuses control characters (a binary file) before parsing.
            line = text.count("\n", 0, exc.position) + 1
            char = exc.character  # a code point for text input, a byte for bytes
            shown = f"U+{char:04X}" if isinstance(char, int) else repr(char)
            raise HarnessError(
                f"{path}:{line}: not YAML text: character {shown} is not "
                f"allowed in YAML (is it a binary file?); give a YAML "
                f"service description like those in examples/ladder/. "
                f"Nothing was checked."
            ) from None
        try:
            self.root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            # The problem is often only seen at the end of the file; the context
            # (an unclosed bracket, say) names the line to look at.
            context = (
                f" ({exc.context} on line {exc.context_mark.line + 1})"
                if exc.context and exc.context_mark
                else ""
            )
            where = f"{path}:{mark.line + 1}" if mark is not None else f"{path}"
            raise HarnessError(
                f"{where}: not valid YAML: {exc.problem}{context}; nothing was checked"
            ) from None
        except yaml.YAMLError as exc:
            raise HarnessError(f"{path}: not valid YAML: {exc}; nothing was checked") from None
        finally:
            self.loader.dispose()
        if self.root is None:
            raise HarnessError(f"{path}: the file is empty; see examples/ladder/ for the format")

    def error(self, node, message: str) -> HarnessError:
        return HarnessError(f"{self.path}:{node.start_mark.line + 1}: {message}")

    def line(self, node) -> str:
        return f"line {node.start_mark.line + 1}"

    def scalar(self, node):
        if not isinstance(node, self.yaml.ScalarNode):
            raise self.error(node, "expected a single value here, not a list or a mapping")
        return self.loader.construct_object(node)

    def mapping(self, node, where: str, known: tuple[str, ...] | None) -> Entries:
        """{key: (key node, value node)}; unknown and repeated keys are errors. YAML
        merge keys (`<<: *anchor`) work, so node groups can share one env."""
        if not isinstance(node, self.yaml.MappingNode):
            raise self.error(node, f"{where} must be a mapping of keys to values")
        merged: Entries = {}
        own: Entries = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                parts = (
                    value_node.value
                    if isinstance(value_node, self.yaml.SequenceNode)
                    else [value_node]
                )
                for part in reversed(parts):  # earlier merges win, as YAML says
                    merged.update(self.mapping(part, where, known))
                continue
            key = self.scalar(key_node)
            if not isinstance(key, str):
                key = str(key)
            if key in own:
                raise self.error(
                    key_node, f"{where}: {key} is given twice (first on {self.line(own[key][0])})"
                )
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]}? " if close else ""
                raise self.error(
                    key_node, f"{where}: unknown key {key!r}; {hint}known here: {', '.join(known)}"
                )
            own[key] = (key_node, value_node)
        return {**merged, **own}

    def duration(self, node, where: str) -> float:
        try:
            return parse_duration(self.scalar(node))
        except ValueError as exc:
            raise self.error(node, f"{where}: {exc}") from None


def _parse_env(doc: _Doc, name: str, node) -> float | None:
    """An env value exactly as Ray 2.60.0 reads it: a unit suffix that Ray would
    choke on is an error here too."""
    knob = ENV_KNOBS[name]
    raw = doc.scalar(node)
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
        raise doc.error(
            node,
            f"{name}: give the value as Ray sees it in the environment, "
            f'e.g. "30" (quote it), not {raw!r}',
        )
    text = str(raw)
    if knob.parse == "flag":
        if text != "1":
            raise doc.error(
                node,
                f"{name}={text!r}: Serve runs HAProxy only when it is exactly "
                f'"1" ({knob.where}); this checker is for that mode',
            )
        return None
    if knob.parse == "any":
        return None
    if knob.parse == "is-1":
        # Ray compares the text with "1"; anything else is off, not an error.
        return 1 if text == "1" else 0
    if knob.parse == "int-or-empty" and text == "":
        return None
    try:
        value = int(text) if knob.parse.startswith("int") else float(text)
    except ValueError:
        kind, want = (
            ("int()", "whole seconds") if knob.parse.startswith("int") else ("float()", "seconds")
        )
        consequence = (
            f"Ray logs a warning and silently uses {knob.default}"
            if knob.parse == "core-float"
            else "Ray fails at import"
        )
        raise doc.error(
            node,
            f"{name}={text!r}: Ray 2.60.0 reads it with {kind}, which "
            f"rejects it ({consequence}); give {want}, no unit",
        ) from None
    if not math.isfinite(value):
        raise doc.error(node, f"{name}={text!r}: not a usable number of seconds")
    if knob.parse == "float>0" and value <= 0 or knob.parse.endswith(">=0") and value < 0:
        raise doc.error(
            node,
            f"{name}={text!r}: Ray 2.60.0 requires a "
            f"{'positive' if knob.parse == 'float>0' else 'non-negative'} "
            f"value and fails at import",
        )
    # Ray passes these through, but HAProxy refuses a negative time and a negative
    # drain period is none at all. (<= 0 is how the SIGTERM drain is turned off.)
    if value < 0 and knob.parse != "core-float":
        raise doc.error(node, f"{name}={text!r}: a negative time; write 0 if you mean none")
    return value


def _env_fields(doc: _Doc, group: str, node) -> tuple[dict, list]:
    """(Ladder fields, input rows) of one node group's env."""
    env = doc.mapping(node, f"node_env.{group}", tuple(ENV_KNOBS))
    if "RAY_SERVE_ENABLE_HA_PROXY" not in env:
        raise doc.error(
            node,
            f'node_env.{group}: set RAY_SERVE_ENABLE_HA_PROXY: "1"; Ray\'s '
            f'default is "0" ({ENV_KNOBS["RAY_SERVE_ENABLE_HA_PROXY"].where})'
            f" and this checker is for Serve behind HAProxy",
        )
    values, rows = {}, []
    for name, knob in ENV_KNOBS.items():
        if name in env:
            value, where = _parse_env(doc, name, env[name][1]), doc.line(env[name][1])
        else:
            value, where = knob.default, f"Ray 2.60.0 default ({knob.where})"
        if knob.field is None:
            continue
        shown = "unset" if value is None else f"{format_number(value)} s"
        if (
            knob.field
            in (
                "haproxy_timeout_server_s",
                "haproxy_hard_stop_after_s",
                "haproxy_timeout_connect_s",
            )
            and value == 0
        ):
            # Ray renders `... 0s`, which HAProxy reads as no timeout at all.
            value, shown = None, "0 s = none"
        if knob.field == "port_quarantine_s" and value is None:
            shown = "hard-stop-after + 30"
        if knob.parse == "is-1":
            value, shown = bool(value), "on" if value else "off"
        values[knob.field] = value
        rows.append((name, shown, where))
    return values, rows


def _optional_duration(
    doc: _Doc,
    section: dict,
    key: str,
    where: str,
    ladder_field: str,
    label: str,
    values: dict,
    rows: list,
) -> None:
    if key in section:
        values[ladder_field] = doc.duration(section[key][1], f"{where}.{key}")
        rows.append((label, f"{format_number(values[ladder_field])} s", doc.line(section[key][1])))
    else:
        values[ladder_field] = None
        rows.append((label, "?", f"not given: set by {SET_BY[ladder_field]}"))


def _shared_fields(doc: _Doc, top: Entries) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """Ladder fields and input rows of everything but the env."""
    # Ladder keyword arguments of several types (numbers, the deployments);
    # Ladder(**values) is what checks them.
    values: dict[str, Any] = {}
    rows: list[tuple[str, str, str]] = []
    empty: Entries = {}

    http = (
        doc.mapping(top["http_options"][1], "http_options", _HTTP)
        if "http_options" in top
        else empty
    )
    if "request_timeout_s" in http:
        node = http["request_timeout_s"][1]
        raw = doc.scalar(node)
        values["request_timeout_s"] = (
            None if raw is None else doc.duration(node, "http_options.request_timeout_s")
        )
        where = doc.line(node)
    else:
        values["request_timeout_s"] = None
        where = "Ray 2.60.0 default (ray/serve/config.py:883)"
    shown = (
        "unset"
        if values["request_timeout_s"] is None
        else f"{format_number(values['request_timeout_s'])} s"
    )
    rows.append(("http_options.request_timeout_s", shown, where))
    if "keep_alive_timeout_s" in http:
        node = http["keep_alive_timeout_s"][1]
        values["keep_alive_timeout_s"] = doc.duration(node, "http_options.keep_alive_timeout_s")
        where = doc.line(node)
    else:
        values["keep_alive_timeout_s"] = RAY_KEEP_ALIVE_DEFAULT_S
        where = "Ray 2.60.0 default (ray/serve/config.py:884, ray/serve/_private/constants.py:60)"
    rows.append(
        (
            "http_options.keep_alive_timeout_s",
            f"{format_number(values['keep_alive_timeout_s'])} s (C's idle window)",
            where,
        )
    )

    if "deployments" not in top:
        raise doc.error(
            doc.root,
            "deployments: missing; name at least the ingress deployment (see examples/ladder/)",
        )
    deployments = []
    for name, (key_node, node) in doc.mapping(top["deployments"][1], "deployments", None).items():
        where = f"deployments.{name}"
        options = doc.mapping(node, where, _DEPLOYMENT)
        if "ingress" not in options:
            raise doc.error(
                key_node,
                f"{where}: say `ingress: true` or `ingress: false`: only "
                f"ingress deployments get the drain window and the floor",
            )
        ingress = doc.scalar(options["ingress"][1])
        if not isinstance(ingress, bool):
            raise doc.error(
                options["ingress"][1], f"{where}.ingress: true or false, not {ingress!r}"
            )
        d: dict[str, Any] = {"name": name, "ingress": ingress}  # Deployment(**d)'s arguments
        for key, attr, default, cite in (
            (
                "graceful_shutdown_timeout_s",
                "graceful_shutdown_s",
                RAY_GST_DEFAULT_S,
                "ray/serve/_private/constants.py:270",
            ),
            (
                "graceful_shutdown_wait_loop_s",
                "wait_loop_s",
                RAY_WAIT_LOOP_DEFAULT_S,
                "ray/serve/_private/constants.py:271",
            ),
        ):
            if key in options:
                d[attr] = doc.duration(options[key][1], f"{where}.{key}")
                source = doc.line(options[key][1])
            else:
                d[attr], source = default, f"Ray 2.60.0 default ({cite})"
                if attr == "graceful_shutdown_s":
                    d["gst_in_config"] = False
            rows.append((f"{where}.{key}", f"{format_number(d[attr])} s", source))
        deployments.append(Deployment(**d))
    if not any(d.ingress for d in deployments):
        raise doc.error(
            top["deployments"][1],
            "deployments: none is `ingress: true`; the ladder is about the ingress deployment",
        )
    values["deployments"] = tuple(deployments)

    app = doc.mapping(top["app"][1], "app", _APP) if "app" in top else empty
    _optional_duration(
        doc, app, "longest_request", "app", "long_runner_s", "app.longest_request", values, rows
    )
    _optional_duration(
        doc, app, "client_timeout", "app", "client_timeout_s", "app.client_timeout", values, rows
    )

    spot = doc.mapping(top["spot"][1], "spot", _SPOT) if "spot" in top else empty
    if "drain_deadline" in spot and "sigterm_grace" in spot:
        raise doc.error(
            spot["sigterm_grace"][0],
            "spot: give drain_deadline (a DrainNode with a "
            "deadline) or sigterm_grace (a SIGTERM), "
            "not both",
        )
    _optional_duration(doc, spot, "notice", "spot", "notice_s", "spot.notice", values, rows)
    _optional_duration(
        doc, spot, "detection", "spot", "detection_s", "spot.detection", values, rows
    )
    if "sigterm_grace" in spot:
        _optional_duration(
            doc,
            spot,
            "sigterm_grace",
            "spot",
            "sigterm_grace_s",
            "spot.sigterm_grace",
            values,
            rows,
        )
        values["drain_deadline_s"] = None
    else:
        _optional_duration(
            doc,
            spot,
            "drain_deadline",
            "spot",
            "drain_deadline_s",
            "spot.drain_deadline",
            values,
            rows,
        )
        values["sigterm_grace_s"] = None

    lb = (
        doc.mapping(top["load_balancer"][1], "load_balancer", _LB)
        if "load_balancer" in top
        else empty
    )
    _optional_duration(
        doc,
        lb,
        "deregistration",
        "load_balancer",
        "lb_deregistration_s",
        "load_balancer.deregistration",
        values,
        rows,
    )

    if "margin" in top:
        values["margin_s"] = doc.duration(top["margin"][1], "margin")
        rows.append(
            ("margin", f"{format_number(values['margin_s'])} s", doc.line(top["margin"][1]))
        )
    else:
        values["margin_s"] = 1.0
        rows.append(("margin", "1 s", "checker default (ordering E's slack, about 1 s)"))
    return values, rows


@dataclass(frozen=True)
class LadderCheck:
    """The orderings of a service description, once per distinct node env."""

    path: Path
    groups: tuple[tuple[str, Ladder], ...]  # (node groups, their ladder)
    env_differences: tuple[str, ...]  # one line per env var the node groups disagree on

    def results(self) -> list[tuple[str, Ordering]]:
        return [(label, o) for label, ladder in self.groups for o in ladder.orderings()]

    @property
    def exit_code(self) -> int:
        """0: every ordering holds; 1: one fails; 3: none fails, some are unknown.
        (2 is the CLI's code for a description it cannot read.)"""
        statuses = {o.status for _, o in self.results()}
        if self.env_differences or "fail" in statuses:
            return 1
        return 3 if "unknown" in statuses else 0

    def render(self) -> str:
        out = [f"ladder check: {self.path} (Ray 2.60.0, Serve behind HAProxy)"]
        if self.env_differences:
            out += [
                "",
                "env  FAIL  the nodes' envs differ; Ray reads them in every process, so "
                "set them identically on every node:",
            ]
            out += [f"       {line}" for line in self.env_differences]
        for label, ladder in self.groups:
            out += ["", f"{label}", "  inputs"]
            name_w = max(len(name) for name, _, _ in ladder.inputs)
            value_w = max(len(value) for _, value, _ in ladder.inputs)
            out += [
                f"    {name:<{name_w}}  {value:<{value_w}}  {where}"
                for name, value, where in ladder.inputs
            ]
            out.append("  orderings")
            orderings = ladder.orderings()
            key_w = max(len(o.key) for o in orderings)
            indent = " " * (4 + key_w + 2 + 8 + 1)
            for o in orderings:
                out.append(f"    {o.key:<{key_w}}  {o.status.upper():<8} {o.title}")
                if o.not_applicable:
                    out.append(f"{indent}{o.not_applicable}")
                out += [f"{indent}{c.text}" for c in o.checks]
                out += [f"{indent}note: {n}" for n in o.notes]
        failed = sorted({o.key for _, o in self.results() if o.status == "fail"}, key=_order)
        unknown = sorted({o.key for _, o in self.results() if o.status == "unknown"}, key=_order)
        if self.env_differences:
            failed.insert(0, "env")
        verdict = {0: "PASS: every ordering holds", 1: "FAIL", 3: "UNKNOWN: no ordering fails"}
        parts = [verdict[self.exit_code]]
        if failed:
            parts.append(f"failing: {', '.join(failed)}")
        if unknown:
            parts.append(f"unknown (give the missing values): {', '.join(unknown)}")
        out += ["", f"result: {'; '.join(parts)} (exit {self.exit_code})"]
        return "\n".join(out)


def _order(key: str) -> tuple[str, str]:
    return key[0], key


def check_file(path: Path) -> LadderCheck:
    """Read a service description and check its ladder; HarnessError (naming the
    line) when the file cannot be read as one."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise HarnessError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
            f"offset {exc.start}; is it a binary file?); give a YAML service "
            f"description in UTF-8, like those in examples/ladder/. Nothing "
            f"was checked."
        ) from None
    doc = _Doc(path, text)
    top = doc.mapping(doc.root, "the file", _TOP)
    if "node_env" not in top:
        raise doc.error(
            doc.root,
            "node_env: missing; give each node group's `ray start` env (see examples/ladder/)",
        )
    groups = doc.mapping(top["node_env"][1], "node_env", None)
    if not groups:
        raise doc.error(top["node_env"][1], "node_env: name at least one node group")
    shared, shared_rows = _shared_fields(doc, top)

    env_by_group = {group: _env_fields(doc, group, node) for group, (_, node) in groups.items()}
    # Node groups with the same env share one ladder; differing ones each get theirs.
    ladders: dict[tuple, tuple[list[str], Ladder]] = {}
    for group, (values, rows) in env_by_group.items():
        key = tuple(sorted(values.items()))
        if key not in ladders:
            ladders[key] = ([], Ladder(**values, **shared, inputs=tuple(rows + shared_rows)))
        ladders[key][0].append(group)
    differences = []
    for name, knob in ENV_KNOBS.items():
        if knob.field and len({values[knob.field] for values, _ in env_by_group.values()}) > 1:
            shown = {
                g: dict((n, v) for n, v, _ in rows)[name] for g, (_, rows) in env_by_group.items()
            }
            differences.append(f"{name}: " + ", ".join(f"{g} {v}" for g, v in shown.items()))
    one = len(ladders) == 1
    labelled = tuple(
        (f"nodes {', '.join(names)}" + (": one env" if one else ""), ladder)
        for names, ladder in ladders.values()
    )
    return LadderCheck(path, labelled, tuple(differences))
