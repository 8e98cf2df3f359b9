#!/usr/bin/python3
"""Draws the cascade demo's figures from the files it writes (examples/cascade_demo).

    /usr/bin/python3 scripts/demo_figures.py RUN_DIR [--out DIR]
    /usr/bin/python3 scripts/demo_figures.py --selftest DIR

Reads from RUN_DIR (the demo's working directory):
  steps.csv, evaluations.csv   -> training.png: the cascade's training reward (MOPD: its
                                  KL to the teachers) per step and every evaluation score
                                  over the steps, stage by stage
  forgetting_matrix.csv        -> forgetting.png: the forgetting matrix as a heat map
  compare.json (--compare)     -> claims.png: the four claims as bar charts, mean over
                                  seeds with the standard deviation as error bars and
                                  each seed as a dot
  study.json (--study)         -> study.png: the forgetting study, backward transfer,
                                  worst-domain drop and final mean against width,
                                  learning rate and Adam's state (mean over seeds, error
                                  bars one standard deviation, dots the seeds), and each
                                  stage's update KL against the other domains' change
Writes the PNG files to --out (default RUN_DIR). --selftest draws every figure from
small synthetic inputs in DIR and checks the files (the test suite runs it).

Needs matplotlib (Debian: python3-matplotlib, installed by scripts/install-deps.sh); run
it with /usr/bin/python3, which has it. Uses the Agg backend (no display needed).
"""

import argparse
import csv
import json
import math
import os
import random
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

SHORT = {
    "instruction_following": "IF",
    "mcqa": "MCQA",
    "structured_output": "JSON",
    "tool_calling": "tools",
    "chat": "chat",
    "long_context": "long ctx",
    "code": "code",
    "swe": "SWE",
    "mean": "mean",
}
DOMAIN_COLORS = {d: plt.get_cmap("tab10")(k) for k, d in enumerate(SHORT) if d != "mean"}
DPI = 90


def short(domain):
    return SHORT.get(domain, domain)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def stage_spans(steps):
    """[(stage, first global step, last global step)] in order."""
    spans = []
    for s in steps:
        g = int(s["global_step"])
        if spans and spans[-1][0] == s["stage"]:
            spans[-1][2] = g
        else:
            spans.append([s["stage"], g, g])
    return spans


def draw_stage_bounds(ax, spans, labels):
    for k, (stage, first, last) in enumerate(spans):
        if k:
            ax.axvline(first - 0.5, color="0.6", lw=0.8, ls=":")
        if labels:
            ax.text((first + last) / 2, 1.02, stage.replace("_rl", "").replace("_", " "), ha="center",
                    va="bottom", fontsize=7, transform=ax.get_xaxis_transform())


def training_figure(run_dir, out_dir):
    if not os.path.exists(os.path.join(run_dir, "steps.csv")):
        return None  # a --study directory holds study.json only
    steps = read_csv(os.path.join(run_dir, "steps.csv"))
    evals = read_csv(os.path.join(run_dir, "evaluations.csv"))
    if not steps:
        return None
    variant, seed = steps[0]["variant"], steps[0]["seed"]
    steps = [s for s in steps if s["variant"] == variant and s["seed"] == seed]
    evals = [e for e in evals if e["variant"] == variant and e["seed"] == seed]
    spans = stage_spans(steps)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), sharex=True)
    kl_axis = None
    for stage, first, last in spans:
        rows = [s for s in steps if s["stage"] == stage]
        x = [int(s["global_step"]) for s in rows]
        y = [float(s["curve"]) for s in rows]
        if rows and rows[0]["distillation"] == "1":
            kl_axis = kl_axis or top.twinx()
            kl_axis.plot(x, y, color="tab:purple", lw=1.2, ls="--", label="MOPD: KL to the teachers")
        else:
            top.plot(x, y, lw=1.0, color="tab:blue")
    top.set_ylabel("training reward\n(mean per step)")
    top.set_ylim(-0.02, 1.05)
    if kl_axis is not None:
        kl_axis.set_ylabel("KL to teachers", color="tab:purple")
        kl_axis.tick_params(axis="y", colors="tab:purple")
        kl_axis.legend(loc="lower right", fontsize=7)
    draw_stage_bounds(top, spans, True)
    top.set_title("The cascade, seed %s: training reward per step and evaluation scores over the steps" % seed,
                  fontsize=10, pad=16)

    by_domain = {}
    for e in evals:
        by_domain.setdefault(e["domain"], []).append((int(e["global_step"]), float(e["score"]), e["stage_end"] == "1"))
    for domain, points in by_domain.items():
        points.sort(key=lambda p: p[0])
        color = DOMAIN_COLORS.get(domain)
        bottom.plot([p[0] for p in points], [p[1] for p in points], lw=1.0, color=color, label=short(domain))
        ends = [p for p in points if p[2]]
        bottom.plot([p[0] for p in ends], [p[1] for p in ends], "o", ms=3, color=color)
    bottom.set_ylabel("evaluation score\n(dots: after a stage)")
    bottom.set_xlabel("training step (all stages)")
    bottom.set_ylim(-0.02, 1.05)
    bottom.legend(ncol=8, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, -0.36), frameon=False)
    draw_stage_bounds(bottom, spans, False)
    fig.tight_layout()
    path = os.path.join(out_dir, "training.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def forgetting_figure(run_dir, out_dir):
    if not os.path.exists(os.path.join(run_dir, "forgetting_matrix.csv")):
        return None
    rows = read_csv(os.path.join(run_dir, "forgetting_matrix.csv"))
    domains = [k for k in rows[0].keys() if k != "after"]
    matrix = [r for r in rows if r["after"] != "backward_transfer"]
    bwt = [r for r in rows if r["after"] == "backward_transfer"]
    values = [[float(r[d]) for d in domains] for r in matrix]
    fig, ax = plt.subplots(figsize=(8.5, 4.6))
    image = ax.imshow(values, cmap="RdYlGn", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(domains)), [short(d) for d in domains], fontsize=8)
    ax.set_yticks(range(len(matrix)), ["after " + r["after"] if r["after"] != "before" else "before (SFT)"
                                       for r in matrix], fontsize=8)
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            ax.text(j, i, "%.2f" % v, ha="center", va="center", fontsize=7,
                    color="black" if 0.25 < v < 0.85 else "white")
    if bwt:
        labels = []
        for d in domains:
            v = bwt[0][d]
            labels.append("%s\nBWT %+.2f" % (short(d), float(v)) if v else "%s\nBWT -" % short(d))
        ax.set_xticks(range(len(domains)), labels, fontsize=7)
    fig.colorbar(image, ax=ax, label="evaluation score")
    ax.set_title("Forgetting matrix: every domain evaluated after each stage", fontsize=10)
    fig.tight_layout()
    path = os.path.join(out_dir, "forgetting.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def mean_sd(values):
    if not values:
        return 0.0, 0.0
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def per_seed(runs, variant, key):
    return [key(r) for r in sorted(runs, key=lambda r: r["seed"]) if r["variant"] == variant]


def grouped_bars(ax, runs, domains, variants, title):
    """Final scores per domain (and the mean) for each variant: bars at the mean over
    seeds, error bars one standard deviation, dots the seeds."""
    columns = domains + ["mean"]
    width = 0.8 / len(variants)
    for k, (variant, label, color) in enumerate(variants):
        for j, d in enumerate(columns):
            key = (lambda r: r["final_mean"]) if d == "mean" else (lambda r, d=d: r["final"].get(d))
            # A variant without the domain's column (the order variants have no SWE stage).
            values = [v for v in per_seed(runs, variant, key) if v is not None]
            if not values:
                continue
            m, sd = mean_sd(values)
            x = j - 0.4 + width * (k + 0.5)
            ax.bar(x, m, width * 0.92, yerr=sd, color=color, ecolor="0.2", capsize=2,
                   label=label if j == 0 else None)
            ax.plot([x] * len(values), values, ".", color="0.15", ms=3)
    ax.set_xticks(range(len(columns)), [short(d) for d in columns], fontsize=8)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("final score", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="lower left")


def claims_figure(run_dir, out_dir):
    path = os.path.join(run_dir, "compare.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    runs, domains, seeds = data["runs"], data["domains"], data["seeds"]
    fig = plt.figure(figsize=(13, 8.6))
    grid = fig.add_gridspec(2, 2, hspace=0.38, wspace=0.16)

    bwt = per_seed(runs, "cascade", lambda r: r["backward_transfer"] or 0.0)
    m, sd = mean_sd(bwt)
    mopd_variants = [("cascade", "cascade, MOPD on", "tab:blue"), ("no_mopd", "MOPD off", "tab:gray")]
    if any(r["variant"] == "mopd_end" for r in runs):
        mopd_variants.append(("mopd_end", "MOPD at the end too", "tab:purple"))
    grouped_bars(fig.add_subplot(grid[0, 0]), runs, domains, mopd_variants,
                 "1. Forgetting and MOPD (cascade BWT %+.3f $\\pm$ %.3f)" % (m, sd))
    grouped_bars(fig.add_subplot(grid[0, 1]), runs, domains,
                 [("cascade", "per-domain hyperparameters", "tab:blue"),
                  ("shared_hparams", "one shared set", "tab:orange")],
                 "2. Per-domain hyperparameters vs one shared set")

    compute = grid[1, 0].subgridspec(1, 4, wspace=0.55)
    quantities = [
        ("padding waste\n(% of padded tokens)", lambda r: 100 * r["compute"]["waste_fraction"]),
        ("verification\nwall time (s)", lambda r: r["compute"]["verify_seconds"]),
        ("waiting for the\nslowest verifier (s)", lambda r: r["compute"]["wait_seconds"]),
        ("final mean score", lambda r: r["final_mean"]),
    ]
    for k, (label, key) in enumerate(quantities):
        ax = fig.add_subplot(compute[0, k])
        for j, (variant, name, color) in enumerate([("cascade", "cascade", "tab:blue"),
                                                    ("mixed", "mixed", "tab:green")]):
            values = per_seed(runs, variant, key)
            mv, sv = mean_sd(values)
            ax.bar(j, mv, 0.7, yerr=sv, color=color, ecolor="0.2", capsize=2)
            ax.plot([j] * len(values), values, ".", color="0.15", ms=3)
        ax.set_xticks([0, 1], ["cascade", "mixed"], fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(label, fontsize=7)
    fig.text(0.29, 0.475, "3. Compute: the cascade vs one mixed stage, %d rollouts each" % data["rollouts"],
             ha="center", fontsize=9)

    grouped_bars(fig.add_subplot(grid[1, 1]), runs, domains,
                 [("if_then_rlhf", "IF-RL -> RLHF", "tab:red"), ("rlhf_then_if", "RLHF -> IF-RL", "tab:cyan")],
                 "4. Order: IF-RL then RLHF vs RLHF then IF-RL")
    fig.suptitle("Cascade RL's claims on the demo's domains: mean over seeds %s, error bars one standard "
                 "deviation, dots the seeds" % ", ".join(str(s) for s in seeds), fontsize=10)
    out = os.path.join(out_dir, "claims.png")
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


STUDY_WIDTH_COLORS = {32: "tab:blue", 64: "tab:orange", 128: "tab:green"}


def study_figure(run_dir, out_dir):
    """The grid: backward transfer, worst-domain drop and final mean minus the SFT start
    against the lr scale, a line per width, Adam kept solid and reset dashed; then
    update KL against the other domains' change, every stage of every run."""
    path = os.path.join(run_dir, "study.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        data = json.load(f)
    runs = data["runs"]
    metrics = [("backward transfer", lambda r: r["backward_transfer"]),
               ("worst-domain drop", lambda r: r["worst_drop"]),
               ("final mean - SFT start", lambda r: r["final_mean"] - r["start_mean"])]
    scales = sorted({r["lr_scale"] for r in runs})
    widths = sorted({r["width"] for r in runs})
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    for ax, (name, metric) in zip(axes.flat, metrics):
        for width in widths:
            for reset, style, shift in [(False, "-", -0.02), (True, "--", 0.02)]:
                xs, ms, sds = [], [], []
                for scale in scales:
                    values = [metric(r) for r in runs
                              if r["width"] == width and r["lr_scale"] == scale and r["reset_adam"] == reset]
                    if not values:
                        continue
                    m, sd = mean_sd(values)
                    x = scale * 10 ** (shift + 0.04 * (widths.index(width) - 1))  # dodge on the log axis
                    xs.append(x)
                    ms.append(m)
                    sds.append(sd)
                    ax.plot([x] * len(values), values, ".", color=STUDY_WIDTH_COLORS.get(width, "0.4"), ms=3)
                if xs:
                    ax.errorbar(xs, ms, yerr=sds, fmt=style, marker="o", ms=3, capsize=2,
                                color=STUDY_WIDTH_COLORS.get(width, "0.4"),
                                label="d %d, Adam %s" % (width, "reset" if reset else "kept"))
        ax.set_xscale("log")
        ax.set_xticks(scales, ["x%g" % s for s in scales])
        ax.minorticks_off()
        ax.axhline(0, color="0.2", lw=0.5)
        ax.set_xlabel("learning rate (x the swept per-domain rates)", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=6, ncol=2)
    ax = axes.flat[3]
    for scale, color in zip(scales, ["tab:purple", "tab:olive", "tab:red", "tab:cyan", "tab:brown"]):
        xs = [max(s["kl_others"], 1e-6) for r in runs if r["lr_scale"] == scale for s in r["stages"]]
        ys = [s["others_change"] for r in runs if r["lr_scale"] == scale for s in r["stages"]]
        ax.plot(xs, ys, ".", color=color, ms=4, label="lr x%g" % scale)
    ax.set_xscale("log")
    ax.axhline(0, color="0.2", lw=0.5)
    ax.set_xlabel("stage's update: KL(before || after), nats/token, on the other domains' prompts", fontsize=8)
    ax.set_ylabel("change of the other domains' mean score", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7)
    ax.set_title("update size vs the forgetting it caused (every stage of every run)", fontsize=9)
    fig.suptitle("Forgetting study: width x learning rate x Adam state, seeds %s, %d rollouts per run; "
                 "points mean, error bars one sd, dots the seeds"
                 % (", ".join(str(s) for s in data["seeds"]), data["rollouts"]), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    out = os.path.join(out_dir, "study.png")
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


def draw(run_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    written = [training_figure(run_dir, out_dir), forgetting_figure(run_dir, out_dir),
               claims_figure(run_dir, out_dir), study_figure(run_dir, out_dir)]
    return [p for p in written if p]


# ---- self-test --------------------------------------------------------------------------

def synthetic_inputs(directory):
    rng = random.Random(5)
    domains = list(SHORT)[:-1]
    stages = [("if_rl", 0), ("multi_domain_rl", 0), ("mopd", 1), ("rlhf", 0)]
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "steps.csv"), "w") as f:
        f.write("variant,seed,stage,global_step,distillation,curve,responses,tokens,padded,verify_seconds,"
                "wait_seconds\n")
        g = 0
        for stage, distill in stages:
            for _ in range(10):
                g += 1
                f.write("cascade,7,%s,%d,%d,%.3f,128,600,900,0.01,0.001\n" % (stage, g, distill, rng.random()))
    with open(os.path.join(directory, "evaluations.csv"), "w") as f:
        f.write("variant,seed,label,global_step,stage_end,domain,score\n")
        for k, (stage, _) in enumerate([("before", 0)] + stages):
            for d in domains:
                f.write("cascade,7,%s,%d,1,%s,%.3f\n" % (stage, 10 * k, d, rng.random()))
    with open(os.path.join(directory, "forgetting_matrix.csv"), "w") as f:
        f.write("after," + ",".join(domains) + "\n")
        for stage, _ in [("before", 0)] + stages:
            f.write(stage + "," + ",".join("%.3f" % rng.random() for _ in domains) + "\n")
        f.write("backward_transfer," + ",".join(["-0.1", ""] * (len(domains) // 2)) + "\n")
    runs = []
    for variant in ["cascade", "no_mopd", "shared_hparams", "mixed", "if_then_rlhf", "rlhf_then_if"]:
        for seed in (1, 2, 3):
            final = {d: rng.random() for d in domains}
            runs.append({"variant": variant, "seed": seed, "final": final,
                         "final_mean": statistics.fmean(final.values()), "backward_transfer": -0.05,
                         "compute": {"waste_fraction": rng.random(), "verify_seconds": 10 * rng.random(),
                                     "wait_seconds": rng.random()}})
    with open(os.path.join(directory, "compare.json"), "w") as f:
        json.dump({"seeds": [1, 2, 3], "domains": domains, "rollouts": 46080, "runs": runs}, f)
    points = [(width, scale, reset) for width in (32, 64, 128) for scale in (0.1, 0.3, 1.0) for reset in (False, True)]
    study = []
    for width, scale, reset in points:
        for seed in (1, 2, 3):
            study.append({"width": width, "lr_scale": scale, "reset_adam": reset, "seed": seed,
                          "backward_transfer": -rng.random() / 4, "worst_drop": -rng.random(),
                          "final_mean": rng.random(), "start_mean": 0.75,
                          "stages": [{"stage": "if_rl", "kl_others": rng.random() / 10,
                                      "others_change": rng.random() / 5 - 0.1, "own_change": 0.02}]})
    with open(os.path.join(directory, "study.json"), "w") as f:
        json.dump({"seeds": [1, 2, 3], "rollouts": 46080, "runs": study}, f)


def selftest(directory):
    synthetic_inputs(directory)
    written = draw(directory, directory)
    names = sorted(os.path.basename(p) for p in written)
    assert names == ["claims.png", "forgetting.png", "study.png", "training.png"], names
    for p in written:
        with open(p, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n", p
        size = os.path.getsize(p)
        assert 10_000 < size < 400_000, (p, size)
    study_only = os.path.join(directory, "study_only")
    os.makedirs(study_only, exist_ok=True)
    with open(os.path.join(directory, "study.json")) as src, open(os.path.join(study_only, "study.json"), "w") as dst:
        dst.write(src.read())
    alone = [os.path.basename(p) for p in draw(study_only, study_only)]
    assert alone == ["study.png"], alone  # what `cascade_demo --study` leaves
    print("selftest: drew %s" % ", ".join(names))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", nargs="?", default=".")
    parser.add_argument("--out", default=None, help="where to write the PNG files (default: run_dir)")
    parser.add_argument("--selftest", metavar="DIR", default=None)
    args = parser.parse_args()
    if args.selftest:
        selftest(args.selftest)
        return 0
    written = draw(args.run_dir, args.out or args.run_dir)
    for p in written:
        print("wrote %s" % p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
