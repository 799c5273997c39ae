"""`xrt eval` throughput against local Dask workers: yolov5s-320 on sim://zg330, one worker
process against two, interleaved (1, 2, 1, 2), best of each.

Throughput is the steady rate: samples after the first finished batch over the time after it,
so worker start-up (process spawn, imports, the snapshot's session) is reported apart as the
time to the first result. Target (issue 15): 2 local workers >= 1.7x one on a 2-core machine.
"""

import numpy as np
from helpers import load_average

from xcompile import zoo
from xcompile.cache import compiled_zoo
from xeval import evaluate

SAMPLES, BATCH = 64, 8


def _rate(rows) -> float:
    return (rows.ran - BATCH) / max(rows.seconds - rows.first_result_s, 1e-9)


def test_eval_two_workers_vs_one(benchmark, tmp_path):
    model = compiled_zoo("yolov5s", "zg330", 320)
    data = tmp_path / "data"
    data.mkdir()
    base = zoo.calibration_set("yolov5s", count=4, seed=3, input_size=320)
    for k in range(SAMPLES):
        np.save(data / f"img{k:03d}.npy", base[k % 4][0])
    runs = {1: [], 2: []}

    def once(n):
        rows = evaluate(model, str(data), workers=n, batch=BATCH, progress=False)
        assert len(rows) == SAMPLES and not [r for r in rows if "error" in r]
        runs[n].append(rows)
        return rows

    benchmark.pedantic(lambda: once(2), rounds=1, iterations=1)
    for n in (1, 2, 1):
        once(n)
    one = max(_rate(r) for r in runs[1])
    two = max(_rate(r) for r in runs[2])
    first = min(r.first_result_s for r in runs[2])
    per_image = 1.0 / one
    benchmark.extra_info.update(one_worker_per_s=one, two_workers_per_s=two, speedup=two / one,
                                first_result_s=first, per_image_s=per_image)
    print(f"\nyolov5s-320 eval: 1 worker {one:.2f}/s, 2 workers {two:.2f}/s, speedup "
          f"{two / one:.2f}x, first result {first:.1f} s, {per_image * 1e3:.0f} ms per image "
          f"({load_average()})")
    assert two / one >= 1.7, f"2 workers are {two / one:.2f}x one (target >= 1.7x)"
