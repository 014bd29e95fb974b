"""Records Go nsqadmin 1.3.0's answers for tests/fixtures/nsqadmin (see the README there):

    .venv/bin/python -m tests.admin.record_go ../shared/reference-go
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.admin.scenario import FIXTURES, a_first, run


def main(reference: Path) -> None:
    answers = run([str(reference / "nsqd")], [str(reference / "nsqlookupd")], [str(reference / "nsqadmin")],
                  first_node=a_first)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / "answers.json").write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    usage = subprocess.run([str(reference / "nsqadmin"), "-h"], capture_output=True, text=True, check=False)
    (FIXTURES / "usage.txt").write_text(usage.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
