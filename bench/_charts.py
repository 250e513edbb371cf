"""PNG charts (matplotlib, Agg) for latency.py, scale.py and e2e.py's adapter-overhead table,
drawn from their JSON reports: ``python bench/_charts.py KIND REPORT.json OUT.png``."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def latency(report: dict, out: Path, subtitle: str) -> None:  # type: ignore[type-arg]
    plt = _pyplot()
    rows = report["medians"]
    panels = sorted({(r["target"], r["mode"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 4.2), sharey=True)
    axes = list(axes) if len(panels) > 1 else [axes]
    for ax, (target, mode) in zip(axes, panels, strict=True):
        mine = [r for r in rows if (r["target"], r["mode"]) == (target, mode)]
        names = [r["lib"] for r in mine]
        xs = range(len(mine))
        ax.bar([x - 0.2 for x in xs], [r["p50"] * 1e6 for r in mine], 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], [r["p99"] * 1e6 for r in mine], 0.4, label="p99")
        ax.set_xticks(list(xs), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{target}, reply via {mode}", fontsize=9)
        ax.set_yscale("log")
    axes[0].set_ylabel("round trip, µs (log)")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Request/reply latency, median of {report['rounds']} rounds; {subtitle}", fontsize=9
    )
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def scale(report: dict, out: Path, subtitle: str) -> None:  # type: ignore[type-arg]
    plt = _pyplot()
    rows = [r for r in report["channels"] if r["consumers"] == 1]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for lib in dict.fromkeys(r["lib"] for r in rows):
        mine = sorted((r["channels"], r["median"]) for r in rows if r["lib"] == lib)
        ax.plot([c for c, _ in mine], [v for _, v in mine], marker="o", label=lib)
    ax.set_xscale("log")
    ax.set_xlabel("channels on one connection (one consumer each)")
    ax.set_ylabel("client CPU µs per message")
    ax.legend(fontsize=8)
    ax.set_title(f"Cost per message as channels grow; {subtitle}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def overhead(report: dict, out: Path, subtitle: str) -> None:  # type: ignore[type-arg]
    plt = _pyplot()
    cpu = {(r["op"], r["size"], r["lib"]): r["median"] for r in report["cpu_us_per_msg"]}
    cases = sorted({(op, size) for op, size, _ in cpu}, key=lambda c: (c[0], len(c[1]), c[1]))
    libs = [
        lib
        for lib in ("amqp_trio", "amqp_asyncio", "amqp_blocking")
        if any(k[2] == lib for k in cpu)
    ]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    width = 0.8 / len(libs)
    for index, lib in enumerate(libs):
        xs, heights = [], []
        for position, (op, size) in enumerate(cases):
            core, value = cpu.get((op, size, "core")), cpu.get((op, size, lib))
            if core and value:
                xs.append(position + (index - (len(libs) - 1) / 2) * width)
                heights.append(value / core)
        ax.bar(xs, heights, width, label=lib)
    ax.axhline(1.3, color="black", linestyle="--", linewidth=1, label="goal 1.3x")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(range(len(cases)), [f"{op}\n{size}" for op, size in cases], fontsize=8)
    ax.set_ylabel("client CPU per message / core's")
    ax.legend(fontsize=8)
    ax.set_title(f"What the adapters add over a bare loop on the core; {subtitle}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


KINDS = {"latency": latency, "scale": scale, "overhead": overhead}

if __name__ == "__main__":
    kind, source, target = sys.argv[1:4]
    note = sys.argv[4] if len(sys.argv) > 4 else ""
    KINDS[kind](json.loads(Path(source).read_text()), Path(target), note)
    print(f"chart written to {target}")
