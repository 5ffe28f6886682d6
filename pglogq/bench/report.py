"""Write the run: results.json, README-style Markdown report, PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pglogq.bench.results import Results


def write(out: Path, meta: dict[str, Any], results: Results) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, **results.to_json()}
    p = out / "results.json"
    p.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return [p]
