"""`xrt eval` and `xrt sweep`."""

from __future__ import annotations

import argparse
import os

from xrt.cli.files import writable
from xrt.errors import XrtError

from .metrics import METRICS

EVAL_HELP = "run a compiled network over a dataset on the simulated chip, against a reference"
SWEEP_HELP = "deploy a compiled network over a grid of hardware variants (cycles only)"


def _parallel(parser: argparse.ArgumentParser) -> None:
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--workers", type=int, default=None,
                   help="local worker processes, one thread each (default: the cores; 0: run "
                        "in this process without Dask)")
    g.add_argument("--cluster", metavar="tcp://HOST:PORT",
                   help="a running Dask scheduler (workers started with --nthreads 1)")


def configure_eval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="compiled network json (raw beside it) or a snapshot")
    parser.add_argument("--data", required=True,
                        help="folder of .npy samples or images (the calibration conventions)")
    parser.add_argument("--reference", help="float network to compare with: an .onnx file or a "
                                            "float xir json (raw beside it), run on the host")
    parser.add_argument("--backends", help="';'-separated 'Backend[,device-url]' list (default: "
                                           "a snapshot's own, else 'ZG330,sim://zg330;Host')")
    parser.add_argument("--metric", choices=METRICS, default="cosine",
                        help="the per-sample figure the plot shows")
    _parallel(parser)
    parser.add_argument("--out", default="eval.jsonl", help="results, one JSON line per sample")
    parser.add_argument("--plot", help="PNG: metric histogram and chip time per sample "
                                       "(default: the --out path with .png)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the samples already in --out and run only the rest")
    parser.add_argument("--limit", type=int, help="the first N samples only")
    parser.add_argument("--batch", type=int, default=16,
                        help="samples per worker batch (8-32); a network compiled for batch N "
                             "runs N samples per forward, so this is rounded up to whole "
                             "groups of N")


def configure_sweep(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="compiled network json (raw beside it)")
    parser.add_argument("--grid", required=True, help="TOML file with a [grid] table")
    parser.add_argument("--backends", default="ZG330,sim://zg330;Host",
                        help="the first backend's device gets each point's hardware variant")
    _parallel(parser)
    parser.add_argument("--out", default="sweep.csv", help="CSV, one row per grid point")
    parser.add_argument("--plot", help="PNG: cycles against area proxies, Pareto front marked")


def run_eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate
    from .report import plot_eval, print_eval

    out = writable(args.out, "--out")
    plot = writable(args.plot or os.path.splitext(out)[0] + ".png", "--plot")
    if not 1 <= args.batch <= 256:
        raise XrtError(f"--batch {args.batch}: give 1..256 samples per batch")
    rows = evaluate(args.model, args.data, reference=args.reference, backends=args.backends,
                    workers=args.workers, cluster=args.cluster, out=out, resume=args.resume,
                    limit=args.limit, batch=args.batch)
    print_eval(rows, f"{os.path.basename(args.model)} on {args.data}: {rows.ran} run now in "
                     f"{rows.seconds:.1f} s")
    plot_eval(rows, plot, args.metric, title=os.path.basename(args.model))
    print(f"results: {out}\nplot: {plot}")
    return 1 if rows and all("error" in r for r in rows) else 0


def run_sweep(args: argparse.Namespace) -> int:
    from .grid import load_grid
    from .report import plot_sweep, print_sweep
    from .sweep import sweep

    out = writable(args.out, "--out")
    plot = writable(args.plot, "--plot") if args.plot else None
    grid = load_grid(args.grid)
    rows = sweep(args.model, grid, backends=args.backends, workers=args.workers,
                 cluster=args.cluster, out=out)
    print_sweep(rows, list(grid), f"{os.path.basename(args.model)}: {len(rows)} grid points in "
                                  f"{rows.seconds:.1f} s")
    if plot:
        plot_sweep(rows, plot, title=os.path.basename(args.model))
    print(f"results: {out}" + (f"\nplot: {plot}" if plot else ""))
    return 1 if rows and all("error" in r for r in rows) else 0
