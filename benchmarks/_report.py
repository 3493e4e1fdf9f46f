"""Shared by the benchmark scripts: write a report section into a markdown file in place."""

from __future__ import annotations

import os
import re
from pathlib import Path


def replace_section(path: Path, section: str, body: str, *, new_file: str = "") -> None:
    """Put ``body`` between the markers ``<!-- section:start -->`` and ``<!-- section:end -->`` of
    ``path``: replaced in place, so the prose around it stays; appended the first time (to
    ``new_file`` when ``path`` does not exist yet).  Written atomically (temporary file, then rename)."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    text = path.read_text() if path.exists() else new_file
    block = f"{start}\n{body}\n{end}"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
