"""SVG charts for the comparison suite (bench/bench.py), written by hand with the
Python standard library: plain shapes, axes and labels, no script, so they open
in any browser and diff as text. The look follows `fastpath bench --svg`.

- latency_chart: latency percentiles of one workload, one bar per server.
- overload_chart: the connection-rate sweep, one line per server: goodput,
  errors and p99 latency against the offered rate.
- size_chart: the file-size sweep (bench/sizes.py), one line per server: CPU time
  per request against the file size.
"""

import math

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf"]
FAMILY = 'font-family="sans-serif"'
FONT = 'font-family="sans-serif" font-size="12"'


def color(i):
    return PALETTE[i % len(PALETTE)]


def escape(s):
    return (str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def trim(v):
    if v >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    s = f"{v:.1f}" if v >= 10 else f"{v:.2f}"
    return s.rstrip("0").rstrip(".")


def time_label(us):
    if us >= 1e6:
        return f"{trim(us / 1e6)} s"
    if us >= 1e3:
        return f"{trim(us / 1e3)} ms"
    return f"{trim(us)} µs"


def count_label(v):
    if v >= 1e6:
        return f"{trim(v / 1e6)}M"
    if v >= 1e3:
        return f"{trim(v / 1e3)}k"
    return trim(v)


def nice_step(top, ticks=5):
    if top <= 0:
        return 1.0
    raw = top / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


class Linear:
    def __init__(self, top, px_lo, px_hi):
        step = nice_step(top)
        self.step = step
        self.max = max(step, math.ceil(top / step) * step) if top > 0 else step
        self.px_lo, self.px_hi = px_lo, px_hi

    def px(self, v):
        return self.px_lo + (self.px_hi - self.px_lo) * (min(max(v, 0), self.max) / self.max)

    def ticks(self):
        n = int(round(self.max / self.step))
        return [self.step * i for i in range(n + 1)]


class Log:
    """Whole decades around the positive values."""

    def __init__(self, lo, hi, px_lo, px_hi):
        lo = max(lo, 1e-9)
        hi = max(hi, lo * 10)
        self.lo = 10 ** math.floor(math.log10(lo))
        self.hi = 10 ** math.ceil(math.log10(hi))
        if self.hi <= self.lo:
            self.hi = self.lo * 10
        self.px_lo, self.px_hi = px_lo, px_hi

    def px(self, v):
        if v <= 0:
            return self.px_lo
        f = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        f = min(max(f, 0.0), 1.0)
        return self.px_lo + (self.px_hi - self.px_lo) * f

    def ticks(self):
        out, v = [], self.lo
        while v <= self.hi * 1.0001:
            out.append(v)
            v *= 10
        return out


def header(width, height):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'viewBox="0 0 {width:.0f} {height:.0f}">\n'
            '<rect width="100%" height="100%" fill="white"/>\n')


def frame(out, left, right, top, bottom, title, y_title, x_title, yscale, ylabel):
    if title:
        out.append(f'<text x="{left:.1f}" y="{top - 12:.1f}" {FAMILY} font-size="14" '
                   f'font-weight="bold">{escape(title)}</text>')
    for t in yscale.ticks():
        py = yscale.px(t)
        out.append(f'<line x1="{left:.1f}" y1="{py:.1f}" x2="{right:.1f}" y2="{py:.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="{left - 6:.1f}" y="{py + 4:.1f}" {FONT} '
                   f'text-anchor="end">{escape(ylabel(t))}</text>')
    out.append(f'<line x1="{left:.1f}" y1="{top:.1f}" x2="{left:.1f}" y2="{bottom:.1f}" '
               f'stroke="#333"/>')
    out.append(f'<line x1="{left:.1f}" y1="{bottom:.1f}" x2="{right:.1f}" y2="{bottom:.1f}" '
               f'stroke="#333"/>')
    if x_title:
        out.append(f'<text x="{(left + right) / 2:.1f}" y="{bottom + 36:.1f}" {FONT} '
                   f'text-anchor="middle">{escape(x_title)}</text>')
    x, y = left - 62, (top + bottom) / 2
    out.append(f'<text x="{x:.1f}" y="{y:.1f}" {FONT} text-anchor="middle" '
               f'transform="rotate(-90 {x:.1f} {y:.1f})">{escape(y_title)}</text>')


def legend(out, names, x, y):
    px = x
    for i, name in enumerate(names):
        out.append(f'<rect x="{px:.1f}" y="{y - 10:.1f}" width="12" height="12" '
                   f'fill="{color(i)}"/><text x="{px + 16:.1f}" y="{y:.1f}" {FONT}>'
                   f'{escape(name)}</text>')
        px += 28 + 7 * len(name)


def latency_chart(title, subtitle, series):
    """series: [(server name, {"p50": µs, "p90": ..., "p99": ..., "p999": ..., "max": ...})]."""
    keys = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max")]
    values = [[float(p.get(k) or 0) for k, _ in keys] for _, p in series]
    pos = [v for row in values for v in row if v > 0]
    lo, hi = (min(pos), max(pos)) if pos else (1.0, 10.0)
    width, height = 800.0, 500.0
    left, right, top, bottom = 96.0, width - 20.0, 120.0, height - 60.0
    y = Log(lo, hi, bottom, top)
    out = [header(width, height).rstrip("\n")]
    out.append(f'<text x="{left:.1f}" y="24" {FAMILY} font-size="14" '
               f'font-weight="bold">{escape(title)}</text>')
    subtitle_lines(out, left, subtitle)
    frame(out, left, right, top, bottom, "", "latency (log scale)", "percentile", y, time_label)
    group = (right - left) / len(keys)
    n = max(len(series), 1)
    bar = min(group * 0.8 / n, 60.0)
    for g, (_, label) in enumerate(keys):
        gx = left + group * g + (group - bar * n) / 2
        for i, row in enumerate(values):
            x = gx + bar * i
            v = row[g]
            ty = y.px(v)
            out.append(f'<rect x="{x:.1f}" y="{ty:.1f}" width="{bar - 2:.1f}" '
                       f'height="{max(bottom - ty, 0):.1f}" fill="{color(i)}"><title>'
                       f'{escape(series[i][0])}: {label} {v:.1f} µs</title></rect>')
            cx = x + (bar - 2) / 2
            if bar >= 44:
                out.append(f'<text x="{cx:.1f}" y="{ty - 3:.1f}" {FAMILY} '
                           f'font-size="9" text-anchor="middle">{escape(time_label(v))}</text>')
            else:
                # Narrow bars: the value reads upwards from the top of the bar.
                out.append(f'<text x="{cx + 3:.1f}" y="{ty - 3:.1f}" {FAMILY} font-size="9" '
                           f'transform="rotate(-90 {cx + 3:.1f} {ty - 3:.1f})">'
                           f'{escape(time_label(v))}</text>')
        out.append(f'<text x="{left + group * (g + 0.5):.1f}" y="{bottom + 18:.1f}" {FONT} '
                   f'text-anchor="middle">{label}</text>')
    legend(out, [s[0] for s in series], left, 82)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def subtitle_lines(out, left, subtitle, width=80):
    """The subtitle under the title, wrapped at "; " into lines of about
    `width` characters (two at most fit above the legend)."""
    if not subtitle:
        return
    rows = [""]
    for part in subtitle.split("; "):
        if rows[-1] and len(rows[-1]) + 2 + len(part) > width:
            rows.append(part)
        else:
            rows[-1] = f"{rows[-1]}; {part}" if rows[-1] else part
    for i, row in enumerate(rows):
        out.append(f'<text x="{left:.1f}" y="{42 + 16 * i}" {FONT} fill="#555">'
                   f'{escape(row)}</text>')


def overload_chart(title, subtitle, series, x_max):
    """series: [(server name, [point...])], each point a dict with offered, goodput,
    errors_per_s, p99_us (latency of the replies) and client_bound (the load
    generator fell behind: drawn as a hollow marker). Three panels sharing the
    x axis."""
    width = 800.0
    left, right = 100.0, width - 30.0
    panel_h, gap = 210.0, 70.0
    top0 = 130.0
    height = top0 + 3 * panel_h + 2 * gap + 60.0
    out = [header(width, height).rstrip("\n")]
    out.append(f'<text x="{left:.1f}" y="24" {FAMILY} font-size="14" '
               f'font-weight="bold">{escape(title)}</text>')
    subtitle_lines(out, left, subtitle)
    legend(out, [s[0] for s in series], left, 88)
    x = Linear(x_max, left, right)

    def x_ticks(bottom):
        for t in x.ticks():
            px = x.px(t)
            out.append(f'<line x1="{px:.1f}" y1="{bottom:.1f}" x2="{px:.1f}" '
                       f'y2="{bottom + 4:.1f}" stroke="#333"/>')
            out.append(f'<text x="{px:.1f}" y="{bottom + 18:.1f}" {FONT} '
                       f'text-anchor="middle">{count_label(t)}</text>')

    def lines(yscale, field, positive_only=False):
        for i, (name, pts) in enumerate(series):
            pts = [p for p in pts if p.get(field) is not None
                   and (not positive_only or p[field] > 0)]
            if not pts:
                continue
            path = " ".join(f"{'M' if j == 0 else 'L'}{x.px(p['offered']):.1f},"
                            f"{yscale.px(p[field]):.1f}" for j, p in enumerate(pts))
            out.append(f'<path d="{path}" fill="none" stroke="{color(i)}" stroke-width="2"/>')
            for p in pts:
                # Hollow: the load generator did not keep its schedule at this step.
                fill = "white" if p.get("client_bound") else color(i)
                note = " (load generator behind schedule)" if p.get("client_bound") else ""
                out.append(f'<circle cx="{x.px(p["offered"]):.1f}" cy="{yscale.px(p[field]):.1f}" '
                           f'r="3.5" fill="{fill}" stroke="{color(i)}" stroke-width="1.5">'
                           f'<title>{escape(name)} at {p["offered"]:.0f} conn/s: {field} '
                           f'{p[field]:.1f}{note}</title></circle>')

    x_title = "offered connections/s (1 request each)"
    # Panel 1: goodput.
    top, bottom = top0, top0 + panel_h
    gmax = max([p["goodput"] for _, pts in series for p in pts] + [x_max])
    y = Linear(gmax, bottom, top)
    frame(out, left, right, top, bottom, "Goodput (verified replies/s)", "replies/s", "",
          y, count_label)
    out.append(f'<line x1="{x.px(0):.1f}" y1="{y.px(0):.1f}" x2="{x.px(x.max):.1f}" '
               f'y2="{y.px(x.max):.1f}" stroke="#999" stroke-dasharray="5,4"/>')
    out.append(f'<text x="{x.px(x.max) - 4:.1f}" y="{y.px(x.max) + 14:.1f}" {FAMILY} '
               f'font-size="10" fill="#777" text-anchor="end">replies = offered</text>')
    lines(y, "goodput")
    x_ticks(bottom)
    # Panel 2: errors.
    top, bottom = bottom + gap, bottom + gap + panel_h
    emax = max([p["errors_per_s"] for _, pts in series for p in pts] + [10])
    y = Linear(emax, bottom, top)
    frame(out, left, right, top, bottom, "Errors (refused, reset, timeout, ...) per second",
          "errors/s", "", y, count_label)
    lines(y, "errors_per_s")
    x_ticks(bottom)
    # Panel 3: p99 latency.
    top, bottom = bottom + gap, bottom + gap + panel_h
    lat = [p["p99_us"] for _, pts in series for p in pts if p.get("p99_us")]
    y = Log(min(lat) if lat else 100, max(lat) if lat else 1000, bottom, top)
    frame(out, left, right, top, bottom,
          "p99 latency of the replies (scheduled connection time to last byte)",
          "p99 (log scale)", x_title, y, time_label)
    lines(y, "p99_us", positive_only=True)
    x_ticks(bottom)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def size_label(n):
    return f"{trim(n / 2**20)} MiB" if n >= 2**20 else f"{trim(n / 1024)} KiB"


def size_chart(title, subtitle, series):
    """series: [(server name, [(file size in bytes, server CPU µs per request)...])]: one
    line per server against the file size, both axes on a log scale."""
    width, height = 800.0, 520.0
    left, right, top, bottom = 100.0, width - 30.0, 130.0, height - 60.0
    out = [header(width, height).rstrip("\n")]
    out.append(f'<text x="{left:.1f}" y="24" {FAMILY} font-size="14" '
               f'font-weight="bold">{escape(title)}</text>')
    subtitle_lines(out, left, subtitle)
    legend(out, [s[0] for s in series], left, 88)
    sizes = sorted({s for _, pts in series for s, _ in pts}) or [1024, 2**20]
    values = [v for _, pts in series for _, v in pts] or [1, 100]
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    hi = hi if hi > lo else lo + 1

    def x(size):
        return left + (right - left) * (math.log2(size) - lo) / (hi - lo)

    y = Log(min(values), max(values), bottom, top)
    frame(out, left, right, top, bottom, "", "server CPU per request (log scale)",
          "file size (log scale)", y, time_label)
    for size in sizes:
        if size & (size - 1) == 0:  # powers of two only, so labels do not collide
            out.append(f'<line x1="{x(size):.1f}" y1="{bottom:.1f}" x2="{x(size):.1f}" '
                       f'y2="{bottom + 4:.1f}" stroke="#333"/>')
            out.append(f'<text x="{x(size):.1f}" y="{bottom + 18:.1f}" {FONT} '
                       f'text-anchor="middle">{size_label(size)}</text>')
    for i, (name, pts) in enumerate(series):
        path = " ".join(f"{'M' if j == 0 else 'L'}{x(s):.1f},{y.px(v):.1f}"
                        for j, (s, v) in enumerate(pts))
        out.append(f'<path d="{path}" fill="none" stroke="{color(i)}" stroke-width="2"/>')
        for s, v in pts:
            out.append(f'<circle cx="{x(s):.1f}" cy="{y.px(v):.1f}" r="3" fill="{color(i)}">'
                       f'<title>{escape(name)}, {size_label(s)}: {v:.2f} µs</title></circle>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
