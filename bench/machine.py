"""What the benchmarks report about the machine they ran on, in one place.

Why: figures on a shared 2-core machine mean little without the conditions they were taken in
(CPU model, core count, load average, commit); every benchmark prints and stores the same record.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    """Python, platform, CPUs and CPU model, the load average now, and the repository's commit."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()
    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "cpu": model, "loadavg": [round(x, 2) for x in os.getloadavg()], "commit": commit}
