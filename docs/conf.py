"""Sphinx configuration; built by `make docs` with warnings as errors."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "amqp-sansio"
author = "amqp-sansio contributors"
copyright = "2026, amqp-sansio contributors"  # noqa: A001

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "readable_api",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "amqp-sansio"


autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Types link to the class they name (several packages have a Connection, an Event), shown short.
autodoc_typehints_format = "fully-qualified"
python_use_unqualified_type_names = True
# No default "members": Sphinx 9 lets it override a directive's own member list, which
# published internals (api.md is generated with the lists it wants: tools/gen_api_docs.py).
autodoc_default_options = {"show-inheritance": True}
# Field tables are recursive unions: shown expanded, one parameter took hundreds of characters.
autodoc_type_aliases = {
    **{
        name: f"amqp_sansio.{name}"
        for name in ("FieldTable", "FieldValue", "FieldArray", "TypedValue", "Buffer")
    },
    "Value": "amqp_sansio.v0_10.Value",
    "Map": "amqp_sansio.v0_10.Map",
}
# The docs build runs offline: no intersphinx.

