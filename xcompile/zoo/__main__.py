"""`python -m xcompile.zoo`: the zoo's networks and sample inputs as files, to try the commands
that take a float network or a data folder (`xrt compile`, `xrt eval`) without bringing any.

    python -m xcompile.zoo list
    python -m xcompile.zoo save tiny_cnn -o tiny_float.json        # float json + raw
    python -m xcompile.zoo samples tiny_cnn --count 64 -o data/    # data/sample000.npy ...
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from xcompile import zoo


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xcompile.zoo", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the zoo's network names")
    s = sub.add_parser("save", help="a zoo network in float as json + raw")
    s.add_argument("name")
    s.add_argument("-o", "--out", required=True, help="json path (the raw goes beside it)")
    s.add_argument("--input-size", type=int)
    m = sub.add_parser("samples", help="synthetic sample inputs as .npy files")
    m.add_argument("name")
    m.add_argument("-o", "--out", required=True, help="folder")
    m.add_argument("--count", type=int, default=16)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--input-size", type=int)
    args = p.parse_args(argv)
    if args.cmd == "list":
        print("\n".join(zoo.names()))
        return 0
    if args.name not in zoo.names():
        print(f"{p.prog}: error: no zoo network {args.name!r}; the zoo has {zoo.names()}",
              file=sys.stderr)
        return 2
    kw = {"input_size": args.input_size} if args.input_size else {}
    try:
        if args.cmd == "save":
            zoo.build(args.name, **kw).save(args.out)
            print(f"{args.out} (+ .raw)")
        else:
            os.makedirs(args.out, exist_ok=True)
            for k, sample in enumerate(zoo.calibration_set(args.name, count=args.count,
                                                           seed=args.seed, **kw)):
                np.save(os.path.join(args.out, f"sample{k:03d}.npy"), sample[0])
            print(f"{args.count} samples in {args.out}")
    except OSError as exc:
        print(f"{p.prog}: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
