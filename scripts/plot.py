"""Draws benchmark results as PNG. Called by `stitchfs bench ... --out DIR`
as: plot.py KIND RESULTS.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def optimizations(data, out):
    rows = data["rows"]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    metrics = [("patches", "patches created", 1), ("undo_bytes", "undo data (MB)", 1e6),
               ("cpu_seconds", "CPU seconds", 1)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(15, 4.5))
    width = 0.8 / len(settings)
    for ax, (key, label, div) in zip(axes, metrics):
        for i, s in enumerate(settings):
            vals = [next(r[key] for r in rows if r["workload"] == w and r["setting"] == s) / div
                    for w in workloads]
            ax.bar([x + i * width for x in range(len(workloads))], vals, width, label=s)
        ax.set_xticks([x + width * (len(settings) - 1) / 2 for x in range(len(workloads))])
        ax.set_xticklabels(workloads)
        ax.set_title(label)
        ax.set_yscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(settings), frameon=False)
    fig.suptitle("Patch optimizations (Featherstitch Figure 9) on stitchfs")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, dpi=110)


def modes(data, out):
    cells = data["cells"]
    loads = list(dict.fromkeys(c["load"] for c in cells))
    modes = list(dict.fromkeys(c["mode"] for c in cells))
    metrics = [("vs_async", "time relative to async"),
               ("writes_vs_async", "blocks written relative to async")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(13, 4.5))
    width = 0.8 / len(modes)
    for ax, (key, label) in zip(axes, metrics):
        for i, m in enumerate(modes):
            vals = [next(c[key] for c in cells if c["load"] == w and c["mode"] == m)
                    for w in loads]
            xs = [x + i * width for x in range(len(loads))]
            # A failed cell has no figure (null): an empty slot marked "failed".
            ax.bar(xs, [v or 0 for v in vals], width, label=m)
            for x, v in zip(xs, vals):
                if v is None:
                    ax.text(x, 0.05, "failed", rotation=90, ha="center", va="bottom", fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(loads))])
        ax.set_xticklabels(loads)
        ax.set_title(label)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(modes), frameon=False)
    runs = data["settings"]["runs"]
    fig.suptitle(f"Consistency modes (Featherstitch Figure 10) on stitchfs, median of {runs} run(s)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(out, dpi=110)


def mount(data, out):
    cells = data["cells"]
    phases = list(dict.fromkeys(c["phase"] for c in cells))
    systems = list(dict.fromkeys(c["label"] for c in cells))
    # A panel per baseline that ran.
    bases = [(key, label) for key, label, sid in
             [("vs_ext4", "rate relative to ext4 data=ordered", "ext4"),
              ("vs_fuse2fs", "rate relative to fuse2fs", "fuse2fs"),
              ("vs_bindfs", "rate relative to bindfs", "bindfs"),
              ("vs_floor", "rate relative to the FUSE floor (what any FUSE server mounted so reaches)",
               "fuse-floor")]
             if any(c["system"] == sid and c["rate"] for c in cells)]
    if not bases:
        bases = [("rate", "rate (own units)")]
    fig, axes = plt.subplots(len(bases), 1, figsize=(13, 4 * len(bases)), squeeze=False)
    width = 0.8 / len(systems)
    for ax, (key, label) in zip(axes[:, 0], bases):
        for i, s in enumerate(systems):
            row = [next(c for c in cells if c["phase"] == p and c["label"] == s) for p in phases]
            xs = [x + i * width for x in range(len(phases))]
            vals = [c[key] for c in row]
            ax.bar(xs, [v or 0 for v in vals], width, label=s)
            for x, c, v in zip(xs, row, vals):
                if v is None:
                    why = "skipped" if c["skipped"] else "failed" if c["error"] else "–"
                    ax.text(x, 1.0, why, rotation=90, ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(phases))])
        ax.set_xticklabels(phases)
        ax.set_title(label)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    # At most three labels a row, so long ones stay inside the figure.
    ncol = min(len(systems), 3)
    rows = -(-len(systems) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False)
    runs = data["settings"]["runs"]
    fig.suptitle(f"McoreFS workloads through a mount, median of {runs} run(s)")
    fig.tight_layout(rect=(0, 0.035 * rows / len(bases) + 0.02, 1, 1))
    fig.savefig(out, dpi=110)


def seeds(data, out):
    cells = data["cells"]
    seeds_ = [s for s in dict.fromkeys(c["seed"] for c in cells)
              if any(c["vs_ext4"] for c in cells if c["seed"] == s)]
    systems = list(dict.fromkeys(c["label"] for c in cells))
    if not seeds_:
        seeds_ = list(dict.fromkeys(c["seed"] for c in cells))
    height = 3.8 * len(seeds_) + 1.3
    fig, axes = plt.subplots(len(seeds_), 1, figsize=(15, height), squeeze=False)
    width = 0.8 / len(systems)
    cmap = plt.get_cmap("tab20")
    for ax, seed in zip(axes[:, 0], seeds_):
        phases = list(dict.fromkeys(c["phase"] for c in cells if c["seed"] == seed))
        for i, s in enumerate(systems):
            # A merged report may not have run every system on every phase.
            row = [next((c for c in cells if c["seed"] == seed and c["phase"] == p
                         and c["label"] == s), None) for p in phases]
            xs = [x + i * width for x in range(len(phases))]
            vals = [c and c["vs_ext4"] for c in row]
            ax.bar(xs, [v or 0 for v in vals], width, label=s, color=cmap(i))
            for x, c, v in zip(xs, row, vals):
                if v is None:
                    why = ("not run" if c is None else "skipped" if c["skipped"]
                           else "failed" if c["error"] else "–")
                    ax.text(x, 1.0, why, rotation=90, ha="center", va="bottom", fontsize=6)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(phases))])
        ax.set_xticklabels(phases, fontsize=8)
        ax.set_title(f"{seed}: speed relative to ext4 data=ordered (above 1 is faster)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(systems), 6), frameon=False)
    runs = data["settings"]["runs"]
    fig.suptitle(f"The seeds' experiments through a mount, median of {runs} run(s)")
    fig.tight_layout(rect=(0, 1.0 / height, 1, 1 - 0.3 / height))
    fig.savefig(out, dpi=100)


def programs(rows, out):
    """`crashtest --program`: crash states judged per program and mode,
    consistent and inconsistent by kind, one panel per mode."""
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    progs = list(dict.fromkeys(r["program"] for r in rows))
    kinds = sorted({k for r in rows for k in r["inconsistent"]})
    fig, axes = plt.subplots(1, len(modes), figsize=(3.2 * len(modes) + 1, 4.5), sharey=True,
                             squeeze=False)
    for ax, mode in zip(axes[0], modes):
        here = {r["program"]: r for r in rows if r["mode"] == mode}
        xs = range(len(progs))
        bottom = [0] * len(progs)
        series = [("consistent", lambda r: r["consistent"], "#4c9a2a")]
        # Kinds in colours none of which is the consistent green.
        palette = ["#1f77b4", "#ff7f0e", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                   "#bcbd22", "#17becf"]
        series += [(k, lambda r, k=k: r["inconsistent"].get(k, 0), palette[i % len(palette)])
                   for i, k in enumerate(kinds)]
        series += [("checker failed", lambda r: r["checker_failed"], "#777777")]
        for label, get, color in series:
            vals = [get(here[p]) if p in here else 0 for p in progs]
            ax.bar(xs, vals, 0.7, bottom=bottom, label=label, color=color)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.set_xticks(list(xs))
        ax.set_xticklabels(progs, rotation=60, ha="right", fontsize=8)
        ax.set_title(mode)
    axes[0][0].set_ylabel("crash states judged")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.suptitle("Real programs under crash on stitchfs")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(out, dpi=100)


if __name__ == "__main__" or True:
    kind, path, out = sys.argv[1:4]
    with open(path) as f:
        data = json.load(f)
    {"optimizations": optimizations, "modes": modes, "mount": mount,
     "seeds": seeds, "programs": programs}[kind](data, out)
