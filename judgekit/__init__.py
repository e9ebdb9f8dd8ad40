"""judgekit: judge-based lossy speculative decoding and the paper's unified lossy verification rules."""

__version__ = "0.1.0"
