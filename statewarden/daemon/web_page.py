"""The web page itself: :class:`~statewarden.daemon.web_data.PageData` -> one HTML document.

Everything is inline and made here, on the server: the style sheet (one ``<style>``
whose hash the Content-Security-Policy names, :data:`STYLE_HASH`), the plots (SVG
drawn from the points; a point's value and time are its ``<title>``, a tooltip without
any script), the folding of timelines (``<details>``). No script, no form, no link to
anything but the page itself. Every text from outside (paths, command lines, log lines,
incident evidence) goes through :func:`esc`, so a session id or a command line holding
``<script>`` is shown as text, never run.
"""

from __future__ import annotations

import base64
import hashlib
import html
import time
from collections.abc import Callable
from typing import Any

from statewarden.byte_sizes import human_bytes
from statewarden.daemon.web_data import PageData, PlanView, Point
from statewarden.holders import short_command

REFRESH_S = 30  # the page reloads itself (a meta refresh: no script)
CSS = """
:root{color-scheme:light dark;--ok:#1a7f37;--warn:#9a6700;--bad:#cf222e;--mute:#6e7781}
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:12px 18px}
h1{font-size:20px;margin:4px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #8884}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(330px,1fr));gap:12px}
.card{border:1px solid #8885;border-radius:8px;padding:10px 12px}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;color:#fff}
.ok{background:var(--ok)}.warning,.info{background:var(--warn)}
.error,.critical,.bad{background:var(--bad)}.mute{background:var(--mute)}
.small,.sub{color:var(--mute);font-size:12px}pre,code{font:12px ui-monospace,monospace}
pre{white-space:pre-wrap;word-break:break-all;margin:4px 0}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:3px 6px;
border-bottom:1px solid #8883;vertical-align:top}ul.tree{list-style:none;padding-left:14px}
ul.tree ul{list-style:none;padding-left:18px;border-left:1px dotted #8886}
svg{display:block;margin:6px 0}details{margin:4px 0}summary{cursor:pointer}
"""
STYLE_HASH = "sha256-" + base64.b64encode(hashlib.sha256(CSS.encode()).digest()).decode()
VERDICTS = {"none": ("healthy", "ok"), "failed": ("verification failed", "warning")}
PLOT_W, PLOT_H = 320, 96


def esc(value: object) -> str:
    """Text from anywhere, safe inside an element or a quoted attribute."""
    return html.escape(str(value), quote=True)


def when(at: object) -> str:
    if not isinstance(at, int | float) or isinstance(at, bool) or at <= 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))


def count(n: float) -> str:
    return f"{n:,.0f}"


def badge(text: str, cls: str) -> str:
    return f'<span class="badge {esc(cls)}">{esc(text)}</span>'


def render(page: PageData) -> str:
    """The whole document."""
    about = page.daemon
    body = "".join(
        [
            f"<h1>statewarden on {esc(page.host)}</h1>",
            f'<p class="sub">{esc(about.get("status", ""))}; daemon pid {esc(about.get("pid"))},'
            f" version {esc(about.get('version'))}; shown {esc(when(page.at))}, again every"
            f" {REFRESH_S} s. Read-only: nothing here changes anything.</p>",
            databases(page),
            incidents(page.incidents),
            holders(page.holders, page.respawned),
            maintenance(page.maintenance, page.runs),
            plans(page.plans),
        ]
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        '<link rel="icon" href="data:,">'
        f"<title>statewarden: {esc(page.host)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def verdict(v: dict[str, Any] | None) -> str:
    """The last verification as a badge: healthy, the damage class, failed, never."""
    if not v or not isinstance(v.get("at"), int | float):
        return badge("verifying now" if v and v.get("running") else "never verified", "mute")
    text, cls = VERDICTS.get(str(v.get("result")), (f"{v.get('result')} damage", "bad"))
    return badge(text, cls)


def databases(page: PageData) -> str:
    if not page.databases:
        return "<h2>Databases</h2><p>No Hermes database is watched yet.</p>"
    cards = []
    for d in page.databases:
        db = str(d.get("path"))
        v = d.get("verified")
        series = page.series.get(db, {})
        checked = when(v.get("at")) if isinstance(v, dict) else "-"
        reason = f" ({v.get('reason')})" if isinstance(v, dict) and v.get("reason") else ""
        findings = v.get("findings") if isinstance(v, dict) else None
        cards.append(
            '<div class="card">'
            f"<strong>{esc(d.get('profile'))}</strong> {verdict(v)}"
            f" {badge(str(d.get('open_incidents', 0)) + ' open', 'mute')}"
            f'<div class="small">{esc(db)}</div>'
            f'<div class="small">last verified {esc(checked)}{esc(reason)};'
            f" size {esc(human_bytes(d.get('size_bytes')))},"
            f" -wal {esc(human_bytes(d.get('wal_bytes')))}</div>"
            + (f"<pre>{esc(chr(10).join(findings[:3]))}</pre>" if findings else "")
            + plot(series.get("sessions", []), "sessions", count)
            + plot(series.get("messages", []), "messages", count)
            + plot(series.get("wal", []), "-wal size", human_bytes)
            + "</div>"
        )
    return "<h2>Databases</h2>" + f'<div class="cards">{"".join(cards)}</div>'


def plot(points: list[Point], title: str, fmt: Callable[[float], str]) -> str:
    """One series as an inline SVG line: time across, 0 to its largest value up."""
    if not points:
        return f'<p class="small">{esc(title)}: nothing recorded yet</p>'
    left, top, bottom = 4.0, 16.0, 16.0
    t0, t1 = points[0][0], points[-1][0]
    span = (t1 - t0) or 1.0
    largest = max(v for _t, v in points)
    peak = largest or 1.0
    inner_w, inner_h = PLOT_W - 2 * left, PLOT_H - top - bottom

    def xy(t: float, v: float) -> tuple[float, float]:
        x = left + (t - t0) / span * inner_w if t1 > t0 else left + inner_w / 2
        return round(x, 1), round(top + inner_h - v / peak * inner_h, 1)

    coords = [xy(t, v) for t, v in points]
    line = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(
        f'<circle cx="{x}" cy="{y}" r="2.5" fill="currentColor">'
        f"<title>{esc(fmt(v))} at {esc(when(t))}</title></circle>"
        for (x, y), (t, v) in zip(coords, points, strict=True)
        if len(points) <= 40
    )
    label = f"{title}: {fmt(points[-1][1])} last, at most {fmt(largest)}"
    axis = PLOT_H - bottom
    return (
        f'<svg width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}"'
        f' role="img" aria-label="{esc(label)}">'
        f'<text x="{left}" y="11" font-size="11" fill="currentColor">{esc(label)}</text>'
        f'<line x1="{left}" y1="{axis}" x2="{PLOT_W - left}" y2="{axis}" stroke="#8888"/>'
        f'<polyline points="{line}" fill="none" stroke="#0969da" stroke-width="1.5"/>{dots}'
        f'<text x="{left}" y="{PLOT_H - 3}" font-size="10" fill="#888">{esc(when(t0))}</text>'
        f'<text x="{PLOT_W - left}" y="{PLOT_H - 3}" font-size="10" fill="#888"'
        f' text-anchor="end">{esc(when(t1))}</text></svg>'
    )


def incidents(docs: list[dict[str, Any]]) -> str:
    if not docs:
        return "<h2>Incidents</h2><p>No open incident, none resolved this week.</p>"
    return "<h2>Incidents</h2>" + "".join(incident(doc) for doc in docs)


def incident(doc: dict[str, Any]) -> str:
    """One incident: its state, summary, evidence and the timeline around it."""
    inc = doc["incident"]
    state = (
        badge("open", str(inc.get("severity")))
        if inc.get("state") == "open"
        else badge(f"resolved {when(inc.get('resolved_at'))}", "mute")
    )
    evidence = "\n".join(str(x) for x in inc.get("evidence") or [])
    timeline = "\n".join(str(e.get("line", "")) for e in doc.get("timeline") or [])
    resolution = f"; {inc['resolution']}" if inc.get("resolution") else ""
    return (
        f'<div class="card" id="incident-{esc(inc.get("id"))}">'
        f"#{esc(inc.get('id'))} {badge(str(inc.get('severity')), str(inc.get('severity')))}"
        f" {state} <strong>{esc(inc.get('kind'))}</strong>: {esc(inc.get('summary'))}"
        f'<div class="small">{esc(inc.get("db"))}; first {esc(when(inc.get("first_seen")))},'
        f" last {esc(when(inc.get('last_seen')))}, {esc(inc.get('count'))} time(s)"
        f"{esc(resolution)}</div>"
        + (f"<details><summary>evidence</summary><pre>{esc(evidence)}</pre></details>")
        + (
            f"<details open><summary>timeline</summary><pre>{esc(timeline)}</pre></details>"
            if timeline
            else ""
        )
        + "</div>"
    )


def holders(scans: list[dict[str, Any]], respawned: set[str]) -> str:
    """Each database's holders as a tree: unit, then process, then its files and locks."""
    if not scans:
        return "<h2>Holders</h2><p>No holder scan yet.</p>"
    out = ["<h2>Holders</h2>"]
    for scan in scans:
        complete = "complete" if scan.get("complete") else "INCOMPLETE"
        out.append(
            f'<div class="card"><strong>{esc(scan.get("db"))}</strong>'
            f' <span class="small">scan {esc(complete)}</span>'
        )
        out.extend(f"<pre>{esc(p)}</pre>" for p in scan.get("problems") or [])
        units: dict[str, list[dict[str, Any]]] = {}
        for h in scan.get("holders") or []:
            units.setdefault(str(h.get("unit") or "(no unit)"), []).append(h)
        if not units:
            out.append('<p class="small">no process holds it</p>')
        out.append('<ul class="tree">')
        for unit, procs in sorted(units.items()):
            items = "".join(holder(h, respawned) for h in procs)
            out.append(f"<li>unit <code>{esc(unit)}</code><ul>{items}</ul></li>")
        out.append("</ul></div>")
    return "".join(out)


def holder(h: dict[str, Any], respawned: set[str]) -> str:
    """One process, its marks (orphan, respawned, the scan's flags) and what it holds."""
    command = short_command([str(a) for a in h.get("cmdline") or []]) or f"[{h.get('comm')}]"
    marks = [badge(f, "bad") for f in h.get("flags") or []]
    if h.get("orphan"):
        marks.append(badge("orphan", "warning"))
    if command in respawned or h.get("kind") == "serve-isolated":
        marks.append(badge("respawned: its app starts it again", "warning"))
    files = ", ".join(f"{name} x{n}" for name, n in sorted((h.get("fds") or {}).items()))
    maps = ", ".join(f"{name} x{n}" for name, n in sorted((h.get("maps") or {}).items()))
    locks = [
        f"{lk.get('kind')} {lk.get('mode')} {lk.get('file')} {lk.get('start')}-{lk.get('end')}"
        for lk in h.get("locks") or []
    ]
    parents = " <- ".join(f"{p.get('pid')} {p.get('comm') or '?'}" for p in h.get("parents") or [])
    leaves = [
        f"descriptors: {files or 'none'}",
        *([f"mapped: {maps}"] if maps else []),
        f"locks ({h.get('lock_state')}): {'; '.join(locks) or 'none'}",
        *([f"started by: {parents}"] if parents else []),
    ]
    return (
        f"<li>pid {esc(h.get('pid'))} <strong>{esc(h.get('kind'))}</strong>"
        f" <code>{esc(command)}</code> {' '.join(marks)}"
        f"<ul>{''.join(f'<li>{esc(leaf)}</li>' for leaf in leaves)}</ul></li>"
    )


def maintenance(status: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """The policy, runs in progress, and each run the daemon saw, with its downtime."""
    windows = ", ".join(str(w) for w in status.get("windows") or []) or "none"
    progress = status.get("in_progress") or {}
    now = "".join(f"<li>{esc(db)}: run {esc(run)} in progress</li>" for db, run in progress.items())
    rows = "".join(
        "<tr>"
        f"<td>{esc(when(r.get('seen_at')))}</td><td>{esc(r.get('db'))}</td>"
        f"<td>{esc(r.get('action'))}</td><td>{esc(r.get('outcome'))}</td>"
        f"<td>{esc(_downtime(r.get('downtime_s')))}</td><td>{esc(r.get('exit_code'))}</td>"
        f"<td>{esc(r.get('run_id') or '-')}<div class='small'>{esc(r.get('message') or '')}"
        "</div></td></tr>"
        for r in runs
    )
    table = (
        "<table><tr><th>ended</th><th>database</th><th>action</th><th>outcome</th>"
        f"<th>downtime</th><th>exit</th><th>run</th></tr>{rows}</table>"
        if rows
        else "<p>No run since the page was turned on.</p>"
    )
    return (
        "<h2>Maintenance</h2>"
        f"<p>auto repair: <code>{esc(status.get('auto_repair'))}</code>;"
        f" windows: {esc(windows)}</p>" + (f"<ul>{now}</ul>" if now else "") + table
    )


def _downtime(value: object) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.2f} s"
    return "-"


def plans(views: dict[str, PlanView]) -> str:
    """What the next maintenance run on each database would do (its dry run)."""
    out = ["<h2>Next maintenance plan</h2>"]
    for db, v in views.items():
        head = f"<strong>{esc(db)}</strong>"
        if v.at is not None:
            head += f' <span class="small">computed {esc(when(v.at))}</span>'
        notes = [n for n in (v.note, v.error) if n]
        if v.computing:
            notes.append("being computed (statewardenctl maintenance --dry-run); shown soon")
        elif v.at is None and not notes:
            notes.append("not computed yet")
        body = "".join(f'<p class="small">{esc(n)}</p>' for n in notes)
        if v.lines:
            body += f"<pre>{esc(chr(10).join(v.lines))}</pre>"
        refusals = (v.plan or {}).get("refusals") or []
        if refusals:
            body += badge(f"{len(refusals)} refusal(s): it would not run now", "bad")
        out.append(f'<div class="card">{head}{body}</div>')
    return "".join(out)
