"""`bench/calls.py` drives the bridge as the core does (an `on.event` call of the bridge's
own protocol): it still runs and measures, so its figures in docs/benchmarks.md can be taken again."""

import re
import subprocess
import sys
from pathlib import Path

CALLS = Path(__file__).parents[2] / "bench" / "calls.py"


def test_the_calls_benchmark_measures_each_gap() -> None:
    result = subprocess.run([sys.executable, str(CALLS), "--calls", "20", "--gaps", "0,0.001"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = re.findall(r"^\| (\S+) ms \| ([0-9.]+) µs \|$", result.stdout, re.MULTILINE)
    assert [gap for gap, _ in rows] == ["0", "1"]
    assert all(float(micros) > 0 for _, micros in rows)
    assert "bench event" not in result.stdout  # counted (calls.py checks that each call ran it), not printed
