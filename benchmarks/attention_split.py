"""Where a decode forward's attention time goes: the compiled calls (rope_write: rotation and cache
write; paged_attend: the attention itself), the per-forward Python that prepares them
(Layout.build, KernelRows.build) and, with --again, each layer's attention called a second time at
once (its keys and values then in cache: what memory adds to the first call).

benchmarks/decode_forward.py's engine steps (SmolLM2, 8 sequences of 96-103 random prompt
tokens, one token a sequence, rolled back), at batch 1 and 8, medians of 15 forwards, 2 threads.
Timers are perf_counter pairs around each call; the forward total includes them.

    .venv/bin/python -m benchmarks attention-split
    .venv/bin/python -m benchmarks attention-split --again
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from benchmarks import decode_forward

PARTS = ("rope_write", "paged_attend", "Layout.build", "KernelRows.build", "attention again")


def _timed(function, part: str, spent: dict):
    def wrapped(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - start
    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--again", action="store_true", help="call each layer's attention twice, time the second")
    parser.add_argument("--forwards", type=int, default=15)
    args = parser.parse_args()

    import torch

    from trtspec.runtime.forward import attention, attention_kernel
    from trtspec.runtime.kernels import native

    spent = dict.fromkeys(PARTS, 0.0)
    library = native.library()

    class TimedLibrary:
        def __getattr__(self, name):
            function = getattr(library, name)
            return _timed(function, name, spent) if name in PARTS else function

    native.library = TimedLibrary
    attention.Layout.build = classmethod(_timed(attention.Layout.build.__func__, "Layout.build", spent))
    attention_kernel.KernelRows.build = classmethod(_timed(attention_kernel.KernelRows.build.__func__,
                                                           "KernelRows.build", spent))
    if args.again:
        once = attention.Layout.attend_unrotated

        def twice(self, *a, **k):
            once(self, *a, **k)
            first = dict(spent)  # the native columns count the first call only
            try:  # writes the same rows again: the second call's numbers are the first's
                return _timed(once, "attention again", spent)(self, *a, **k)
            finally:
                spent.update({part: first[part] for part in PARTS[:2]})
        attention.Layout.attend_unrotated = twice

    options = argparse.Namespace(onednn_linear=False, mkl_linear=False, small_linear_threads=0,
                                 attention_one_thread=False, measured_linear_threads=False)
    torch.set_num_threads(2)
    step, setup = decode_forward.engine_steps(2, options)
    table = {}

    def work():  # one thread, as the engine's loop
        setup()
        for batch in decode_forward.BATCHES:
            samples = []
            for _ in range(args.forwards):
                for part in PARTS:
                    spent[part] = 0.0
                total = step(batch)
                samples.append((total, *(spent[part] for part in PARTS)))
            table[batch] = [statistics.median(s[i] for s in samples) * 1e3 for i in range(1 + len(PARTS))]

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    shown = PARTS if args.again else PARTS[:-1]
    print("| batch | forward ms | " + " | ".join(f"{p} ms" for p in shown) + " |")
    print("|---:|---:|" + "---:|" * len(shown))
    for batch, (total, *parts) in table.items():
        print(f"| {batch} | {total:.2f} | " + " | ".join(f"{v:.2f}" for v in parts[:len(shown)]) + " |")


if __name__ == "__main__":
    main()
