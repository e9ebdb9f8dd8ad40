"""Benchmark and test support, outside the core layers: models built from configs (:mod:`.synthetic`), the
decoding speed benchmark (:mod:`.decode`), the mining one (:mod:`.mine`) and evaluation throughput
(:mod:`.eval`), driven by `judgekit bench` and eval/device_bench.py. Nothing in the core imports this
subpackage (tests/test_layers.py)."""

from judgekit.benchmarks.decode import DECODERS, Timing, format_report, run_decode_bench
from judgekit.benchmarks.mine import format_mine_report, run_mine_bench
from judgekit.benchmarks.synthetic import QWEN25_CONFIGS, synthetic_pair

__all__ = ["DECODERS", "QWEN25_CONFIGS", "Timing", "format_mine_report", "format_report", "run_decode_bench",
           "run_mine_bench", "synthetic_pair"]
