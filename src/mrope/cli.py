"""The ``mrope`` command line: ``mrope bench <name>`` runs a benchmark. It parses arguments only."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

BENCHMARKS = {
    "prefill": "prompt positions against transformers and SGLang",
    "step": "serving-engine per-step positions against the engines' loops",
    "rotary": "applying M-RoPE to q and k: native, Triton, Liger-Kernel",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mrope", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="run a benchmark")
    names = bench.add_subparsers(dest="benchmark", required=True)
    for name, help_text in BENCHMARKS.items():
        if importlib.util.find_spec(f"mrope.bench.{name}") is None:
            continue
        sub = names.add_parser(name, help=help_text)
        sub.add_argument("--json", default=None, help="also write the raw results to this JSON file")
        sub.add_argument("--quick", action="store_true", help="fewer repeats and sizes (smoke test)")
        _bench_module(name).add_arguments(sub)
    return parser


def _bench_module(name: str):
    return importlib.import_module(f"mrope.bench.{name}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(_bench_module(args.benchmark).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
