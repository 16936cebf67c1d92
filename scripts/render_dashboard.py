"""Draws the panels of a Grafana dashboard (deploy/grafana/cadenza.json) from a Prometheus server.

Run by scripts/render-dashboard, which starts the demo stack and Prometheus and puts traffic
through it. For each panel, in the dashboard's layout order (gridPos y, then x), it asks
Prometheus' /api/v1/query_range for exactly the panel's target expressions and draws them where
Grafana would: title, one line per series named by the target's legendFormat, the panel's unit on
the y axis and a legend table with the panel's calcs (last non-null, max).

Grafana's own variables in an expression ($__rate_interval, $__interval, $__range and their
_ms/_s forms) are replaced with values derived from the step and scrape interval, as Grafana
derives them; the footer says which were replaced. It prints a summary of every panel.
"""

import argparse
import datetime as dt
import json
import math
import re
import sys
import urllib.parse
import urllib.request

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

# Grafana's dark theme.
BG = "#111217"
PANEL = "#181b1f"
BORDER = "#2a2d33"
GRID = "#2c3038"
TEXT = "#ccccdc"
TEXT_DIM = "#8e8e99"
# Grafana's classic palette, in its order.
PALETTE = [
    "#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9",
    "#705DA0", "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C",
]

DPI = 100
WIDTH_PX = 1600
GRID_ROW_PX = 38  # one gridPos row (Grafana: 30 px and an 8 px gap)
HEADER_PX = 56
FOOTER_PX = 58
MARGIN_PX = 8


def prom_get(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=60) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]


def fmt_duration(seconds):
    """A Prometheus duration: whole seconds, or milliseconds."""
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{int(round(seconds * 1000))}ms"


def grafana_variables(step, scrape, start, end):
    """What Grafana would put for its interval and range variables."""
    rate_interval = max(step + scrape, 4 * scrape)
    rng = end - start
    return {
        "$__rate_interval_ms": str(int(rate_interval * 1000)),
        "$__rate_interval": fmt_duration(rate_interval),
        "$__interval_ms": str(int(step * 1000)),
        "$__interval": fmt_duration(step),
        "$__range_ms": str(int(rng * 1000)),
        "$__range_s": str(int(rng)),
        "$__range": fmt_duration(int(rng)),
    }


def substitute(expr, variables, used):
    for name in sorted(variables, key=len, reverse=True):
        for form in (name, "${" + name[1:] + "}", "[[" + name[1:] + "]]"):
            if form in expr:
                expr = expr.replace(form, variables[name])
                used[name] = variables[name]
    return expr


def legend_name(fmt, metric):
    if fmt:
        return re.sub(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}",
                      lambda m: metric.get(m.group(1), ""), fmt).strip()
    name = metric.get("__name__", "")
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}" if labels else (name or "{}")


# --- units, as Grafana shows them ----------------------------------------------------------------
def _num(v, decimals=None):
    if decimals is None:
        a = abs(v)
        if a == 0 or a >= 100:
            decimals = 0
        elif a >= 10:
            decimals = 1
        elif a >= 1:
            decimals = 2
        else:
            decimals = 3
    s = f"{v:.{decimals}f}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _short(v, decimals=None):
    a = abs(v)
    for div, suffix in ((1e12, " Tri"), (1e9, " Bil"), (1e6, " Mil"), (1e3, " K")):
        if a >= div:
            return _num(v / div, decimals) + suffix
    return _num(v, decimals)


def _seconds(v, decimals=None):
    a = abs(v)
    if a == 0:
        return "0 s"
    if a < 1e-6:
        return _num(v * 1e9, decimals) + " ns"
    if a < 1e-3:
        return _num(v * 1e6, decimals) + " µs"
    if a < 1:
        return _num(v * 1e3, decimals) + " ms"
    if a < 60:
        return _num(v, decimals) + " s"
    if a < 3600:
        return _num(v / 60, decimals) + " min"
    if a < 86400:
        return _num(v / 3600, decimals) + " hour"
    return _num(v / 86400, decimals) + " day"


def format_value(v, unit, decimals=None):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if unit == "s":
        return _seconds(v, decimals)
    if unit in ("ops", "reqps", "rps"):
        return _short(v, decimals) + {"ops": " ops/s", "reqps": " req/s", "rps": " rd/s"}[unit]
    if unit == "percent":
        return _num(v, decimals) + "%"
    if unit == "percentunit":
        return _num(v * 100, decimals) + "%"
    return _short(v, decimals)


# --- drawing --------------------------------------------------------------------------------------
def px(fig_h, x, y, w, h):
    """Figure coordinates of a box given in pixels from the top-left corner."""
    return [x / WIDTH_PX, 1 - (y + h) / fig_h, w / WIDTH_PX, h / fig_h]


def draw_panel(fig, fig_h, box, panel, series, t0, t1, note):
    x, y, w, h = box
    frame = fig.add_axes(px(fig_h, x, y, w, h))
    frame.set_xlim(0, w)
    frame.set_ylim(h, 0)
    frame.axis("off")
    frame.add_patch(FancyBboxPatch((1, 1), w - 2, h - 2, boxstyle="round,pad=0,rounding_size=3",
                                   facecolor=PANEL, edgecolor=BORDER, linewidth=1))
    frame.text(10, 16, panel.get("title", ""), color=TEXT, fontsize=10.5, fontweight="bold",
               va="center", ha="left")

    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    calcs = panel.get("options", {}).get("legend", {}).get("calcs", [])
    # From the bottom: the legend table (a header row and one row per series), then the time
    # axis' labels, then the plot.
    row_px = 17
    legend_h = (len(series) + 1) * row_px + 8 if series else 0
    plot_top, plot_left, plot_right, plot_bottom = 32, 70, 14, 26 + legend_h
    ax = fig.add_axes(px(fig_h, x + plot_left, y + plot_top, w - plot_left - plot_right,
                         h - plot_top - plot_bottom))
    ax.set_facecolor(PANEL)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.tick_params(colors=TEXT_DIM, labelsize=8, length=0, pad=4)
    ax.grid(True, color=GRID, linewidth=0.8)
    ax.set_xlim(mdates.date2num(t0), mdates.date2num(t1))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=4, maxticks=8))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, min_n_ticks=3))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_value(v, unit)))

    if not series:
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.text(0.5, 0.5, "No data", transform=ax.transAxes, color=TEXT_DIM, fontsize=13,
                ha="center", va="center")
        return

    ymax = 0.0
    ymin = 0.0
    for s in series:
        ts = [mdates.date2num(dt.datetime.fromtimestamp(t, dt.timezone.utc)) for t, _ in s["points"]]
        vs = [v for _, v in s["points"]]
        ax.plot(ts, vs, color=s["color"], linewidth=1.4)
        ax.fill_between(ts, vs, [0] * len(vs), color=s["color"], alpha=0.07, linewidth=0)
        finite = [v for v in vs if not math.isnan(v)]
        if finite:
            ymax = max(ymax, max(finite))
            ymin = min(ymin, min(finite))
    if ymax <= 0 and ymin >= 0:
        ax.set_ylim(0, 1)
    else:
        ax.set_ylim(ymin * 1.1 if ymin < 0 else 0, ymax * 1.12)
    if note:
        ax.text(0.5, 0.6, note, transform=ax.transAxes, color=TEXT, fontsize=10, ha="center",
                va="center", bbox=dict(boxstyle="round,pad=0.5", facecolor=BG, edgecolor=BORDER))

    # The legend table: name, then the panel's calcs.
    headers = {"lastNotNull": "Last *", "last": "Last", "max": "Max", "min": "Min",
               "mean": "Mean"}
    cols = [c for c in calcs if c in headers]
    ly = h - legend_h + row_px / 2 - 4  # the header row's centre
    col_w = 100
    right = w - 16
    for i, c in enumerate(reversed(cols)):
        frame.text(right - i * col_w, ly, headers[c], color="#6e9fff", fontsize=8.5,
                   ha="right", va="center")
    for r, s in enumerate(series):
        yy = ly + (r + 1) * row_px
        frame.add_patch(Rectangle((14, yy - 1.5), 14, 3, facecolor=s["color"], edgecolor="none"))
        frame.text(34, yy, s["name"], color=TEXT, fontsize=8.5, ha="left", va="center")
        for i, c in enumerate(reversed(cols)):
            frame.text(right - i * col_w, yy, format_value(s["calcs"].get(c), unit),
                       color=TEXT, fontsize=8.5, ha="right", va="center")


def calc(points, name):
    finite = [v for _, v in points if not math.isnan(v)]
    if not finite:
        return None
    if name in ("lastNotNull",):
        return finite[-1]
    if name == "last":
        return points[-1][1]
    if name == "max":
        return max(finite)
    if name == "min":
        return min(finite)
    if name == "mean":
        return sum(finite) / len(finite)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--dashboard", required=True)
    ap.add_argument("--start", type=float, required=True, help="unix time")
    ap.add_argument("--end", type=float, required=True, help="unix time")
    ap.add_argument("--step", type=float, required=True, help="seconds")
    ap.add_argument("--scrape-interval", type=float, required=True, help="seconds")
    ap.add_argument("--minutes", type=float, required=True, help="minutes of traffic, for the footer")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dash = json.load(open(args.dashboard, encoding="utf-8"))
    panels = [p for p in dash.get("panels", []) if p.get("type") != "row"]
    panels.sort(key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    version = prom_get(args.prometheus, "/api/v1/status/buildinfo")["version"]
    variables = grafana_variables(args.step, args.scrape_interval, args.start, args.end)
    used = {}
    t0 = dt.datetime.fromtimestamp(args.start, dt.timezone.utc)
    t1 = dt.datetime.fromtimestamp(args.end, dt.timezone.utc)

    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig_h = HEADER_PX + rows * GRID_ROW_PX + FOOTER_PX
    fig = plt.figure(figsize=(WIDTH_PX / DPI, fig_h / DPI), dpi=DPI, facecolor=BG)
    plt.rcParams["font.family"] = "DejaVu Sans"
    head = fig.add_axes(px(fig_h, 0, 0, WIDTH_PX, HEADER_PX))
    head.axis("off")
    head.text(16 / WIDTH_PX, 0.5, dash.get("title", "dashboard"), color=TEXT, fontsize=15,
              fontweight="bold", va="center", ha="left", transform=head.transAxes)
    head.text(1 - 16 / WIDTH_PX, 0.5,
              f"{t0:%Y-%m-%d %H:%M:%S} to {t1:%H:%M:%S} UTC",
              color=TEXT_DIM, fontsize=10, va="center", ha="right", transform=head.transAxes)

    # Every metric the dashboard reads should exist in Prometheus: say which do not.
    names = sorted({n for p in panels for t in p.get("targets", [])
                    for n in re.findall(r"\b(cadenza_[a-zA-Z0-9_]+)", t.get("expr", ""))})
    for name in names:
        found = prom_get(args.prometheus, "/api/v1/series", **{"match[]": name},
                         start=f"{args.start:.3f}", end=f"{args.end:.3f}")
        if not found:
            print(f"warning: no series named {name} in Prometheus, although the dashboard reads it",
                  file=sys.stderr)

    col_px = (WIDTH_PX - MARGIN_PX) / 24
    summary = []
    for panel in panels:
        g = panel["gridPos"]
        box = (MARGIN_PX + g["x"] * col_px, HEADER_PX + g["y"] * GRID_ROW_PX,
               g["w"] * col_px - MARGIN_PX, g["h"] * GRID_ROW_PX - MARGIN_PX)
        series = []
        lines = []
        for target in panel.get("targets", []):
            if target.get("hide"):
                continue
            expr = substitute(target["expr"], variables, used)
            data = prom_get(args.prometheus, "/api/v1/query_range", query=expr,
                            start=f"{args.start:.3f}", end=f"{args.end:.3f}", step=fmt_duration(args.step))
            result = data["result"]
            lines.append(f"    {target.get('refId', '?')}: {expr}  -> {len(result)} series")
            for r in result:
                points = [(float(t), float(v)) for t, v in r["values"]]
                # Fill the gaps Prometheus leaves (no sample at a step) with NaN, as Grafana does.
                have = {round(t, 3): v for t, v in points}
                grid = []
                t = args.start
                while t <= args.end + 1e-6:
                    grid.append((t, have.get(round(t, 3), float("nan"))))
                    t += args.step
                name = legend_name(target.get("legendFormat", ""), r["metric"])
                s = {"name": name, "points": grid, "color": PALETTE[len(series) % len(PALETTE)]}
                s["calcs"] = {c: calc(grid, c) for c in ("lastNotNull", "last", "max", "min", "mean")}
                series.append(s)
                lines.append(f"       {name}: last {format_value(s['calcs']['lastNotNull'], panel_unit(panel))}, "
                             f"max {format_value(s['calcs']['max'], panel_unit(panel))}")
        values = [v for s in series for _, v in s["points"] if not math.isnan(v)]
        note = ""
        if series and values and all(v == 0 for v in values):
            note = "0 throughout: every series is zero over the window"
        elif series and not values:
            note = "no value in the window"
        draw_panel(fig, fig_h, box, panel, series, t0, t1, note)
        summary.append(f"  [{panel['title']}] {'No data' if not series else note or 'ok'}")
        summary.extend(lines)

    subst = ", ".join(f"{k} = {v}" for k, v in used.items())
    caption = (f"query_range step {fmt_duration(args.step)}, scrape interval "
               f"{fmt_duration(args.scrape_interval)}; the dashboard's expressions verbatim"
               + (f", Grafana's variables replaced: {subst}" if subst else
                  " (they use none of Grafana's $__ variables)"))
    footer = (f"Panels of deploy/grafana/cadenza.json rendered from Prometheus {version} query_range "
              f"over {_num(args.minutes)} min of scripts/demo traffic, {t1:%Y-%m-%d}")
    foot = fig.add_axes(px(fig_h, 0, fig_h - FOOTER_PX, WIDTH_PX, FOOTER_PX))
    foot.axis("off")
    foot.text(16 / WIDTH_PX, 0.62, footer, color=TEXT, fontsize=10, va="center", ha="left",
              transform=foot.transAxes)
    foot.text(16 / WIDTH_PX, 0.26, caption, color=TEXT_DIM, fontsize=8.5, va="center", ha="left",
              transform=foot.transAxes)
    fig.savefig(args.out, dpi=DPI, facecolor=BG)
    print(f"Prometheus {version}; {caption}")
    print("\n".join(summary))
    print(f"wrote {args.out}")


def panel_unit(panel):
    return panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001
        print(f"render_dashboard.py: {e}", file=sys.stderr)
        raise
