"""docs/design.md against the code it describes: its list of compiled modules is setup.py's COMPILED_MODULES."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _setup_compiled() -> set[str]:
    for node in ast.parse((ROOT / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "COMPILED_MODULES" for t in node.targets):
            return {path.removeprefix("nsqd_py/").removesuffix(".py") for path in ast.literal_eval(node.value)}
    raise AssertionError("setup.py lists no COMPILED_MODULES")


def _design_compiled() -> set[str]:
    """The `package/module` names in the first paragraph of design.md's "Compiled modules" section."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("\n### Compiled modules\n", 1)[1].lstrip("\n")
    paragraph = section.split("\n\n", 1)[0]
    return set(re.findall(r"`([a-z_]+(?:/[a-z_]+)+)`", paragraph))


def test_the_compiled_list_in_design_md_is_setup_pys() -> None:
    in_setup, in_doc = _setup_compiled(), _design_compiled()
    assert len(in_setup) > 20
    assert in_doc - in_setup == set(), "docs/design.md names modules setup.py does not compile"
    assert in_setup - in_doc == set(), "setup.py compiles modules docs/design.md's Compiled modules does not name"
