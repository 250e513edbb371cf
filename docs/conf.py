"""Sphinx configuration; built by `make docs` with warnings as errors."""

from __future__ import annotations

project = "amqp-sansio"
author = "amqp-sansio contributors"
copyright = "2026, amqp-sansio contributors"  # noqa: A001

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "amqp-sansio"


autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
# The docs build runs offline: no intersphinx.
